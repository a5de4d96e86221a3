//! The report's window: `--since SPAN`, or `--from`/`--to` dates, as epoch milliseconds.

use super::ReportArgs;
use anyhow::{anyhow, bail, Result};
use ysched_common::time::{rfc3339, Millis};

pub(super) const DAY_MS: Millis = 86_400_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `YYYY-MM-DD` (00:00 UTC), or RFC 3339: `YYYY-MM-DDTHH:MM[:SS[.frac]]` with `Z` or
/// `±HH:MM` (none: UTC); a space may stand for the `T`.
pub fn parse_date(input: &str) -> Result<Millis> {
    let s = input.trim();
    let bad = || {
        anyhow!(
            "invalid date {input:?}: expected YYYY-MM-DD or RFC 3339 (e.g. 2026-01-05 or \
             2026-01-05T08:00:00Z)"
        )
    };
    let num = |t: &str| -> Result<i64> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse().map_err(|_| bad())
    };
    let (date, time) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts[..] else {
        return Err(bad());
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return Err(bad());
    }
    let (y, m, d) = (num(y)?, num(m)? as u32, num(d)? as u32);
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return Err(bad());
    }
    let mut ms = days_from_civil(y, m, d) * DAY_MS;
    let Some(time) = time else {
        return Ok(ms);
    };
    // The zone: Z, +HH:MM, -HH:MM, or none (UTC).
    let (clock, offset_ms) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else if let Some(i) = time.rfind(['+', '-']) {
        let (c, zone) = time.split_at(i);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (h, mi) = zone[1..].split_once(':').ok_or_else(bad)?;
        let (h, mi) = (num(h)?, num(mi)?);
        if h > 23 || mi > 59 {
            return Err(bad());
        }
        (c, sign * (h * 3600 + mi * 60) * 1000)
    } else {
        (time, 0)
    };
    let (hms, frac) = match clock.split_once('.') {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (clock, None),
    };
    let fields: Vec<&str> = hms.split(':').collect();
    let (h, mi, sec) = match fields[..] {
        [h, mi] => (num(h)?, num(mi)?, 0),
        [h, mi, sec] => (num(h)?, num(mi)?, num(sec)?),
        _ => return Err(bad()),
    };
    if h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    ms += (h * 3600 + mi * 60 + sec) * 1000;
    if let Some(frac) = frac {
        num(frac)?;
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        ms += num(&digits)?;
    }
    Ok(ms - offset_ms)
}

/// A span like `7d`, `36h`, `2w`, `90m`, `3600s`, or several (`1d12h`), in milliseconds.
pub fn parse_span(input: &str) -> Result<Millis> {
    let s = input.trim();
    let bad = || anyhow!("invalid span {input:?}: expected e.g. 7d, 36h, 2w or 90m");
    let mut total: i64 = 0;
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: i64 = match c.to_ascii_lowercase() {
            'w' => 7 * DAY_MS,
            'd' => DAY_MS,
            'h' => 3_600_000,
            'm' => 60_000,
            's' => 1_000,
            _ => return Err(bad()),
        };
        let n: i64 = digits.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        digits.clear();
    }
    if !digits.is_empty() || total <= 0 {
        return Err(bad());
    }
    Ok(total)
}

/// The window `[from, to)` the options ask for, as `ReportRequest` takes it (0: schedd's
/// default: to now, from seven days before).
pub fn window(args: &ReportArgs, now: Millis) -> Result<(Millis, Millis)> {
    if let Some(span) = &args.since {
        return Ok((now - parse_span(span)?, now));
    }
    let from = args.from.as_deref().map(parse_date).transpose()?;
    let to = args.to.as_deref().map(parse_date).transpose()?;
    if let (Some(f), Some(t)) = (from, to) {
        if f >= t {
            bail!(
                "--from ({}) is not before --to ({})",
                rfc3339(f),
                rfc3339(t)
            );
        }
    }
    Ok((from.unwrap_or(0), to.unwrap_or(0)))
}
