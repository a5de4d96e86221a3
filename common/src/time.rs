//! Time in one place: epoch milliseconds, dates read and written (RFC 3339 and plain days, on
//! the `time` crate's calendar), and the duration forms users type besides Slurm's time limits
//! (`parse::parse_time_limit`): report spans (`7d`), trace durations (`1.5h`, `01:30:00`) and
//! humantime strings (the config's `"7d"`); and Slurm's `--begin` times, in local time
//! (`begin`). The scheduling core takes `now` as a parameter; only the daemons call [`now_ms`].

mod begin;

pub use begin::{
    parse_begin, BeginError, Civil, LocalClock, SystemLocalTime, MAX_BEGIN_AHEAD_SECS,
};
use std::time::{SystemTime, UNIX_EPOCH};
use thiserror::Error;
use time::{Date, Month, OffsetDateTime};

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

pub const SECOND_MS: Millis = 1_000;
pub const MINUTE_MS: Millis = 60 * SECOND_MS;
pub const HOUR_MS: Millis = 60 * MINUTE_MS;
pub const DAY_MS: Millis = 24 * HOUR_MS;
pub const WEEK_MS: Millis = 7 * DAY_MS;

pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Why a date or a duration was refused; each message names the input and the forms taken.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimeError {
    #[error(
        "invalid date {0:?}: expected YYYY-MM-DD or RFC 3339 (e.g. 2026-01-05 or \
         2026-01-05T08:00:00Z)"
    )]
    Date(String),
    #[error("invalid span {0:?}: expected e.g. 7d, 36h, 2w or 90m")]
    Span(String),
    #[error("'{0}' is not a duration (seconds, 30m, 1.5h, 2d, HH:MM:SS)")]
    Duration(String),
    #[error("'{0}': unknown unit (s, m, h, d or w)")]
    Unit(String),
    #[error("'{0}' is not a duration")]
    NotFinite(String),
    /// A Slurm-style duration (`1-00:00:00`) that `parse_time_limit` refused.
    #[error("{0}")]
    Slurm(String),
    /// humantime's own message.
    #[error("{0}")]
    Humantime(String),
}

// ------------------------------------------------------------------ dates

/// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z).
const LAST_RFC3339_MS: Millis = 253_402_300_799_999;

/// `ms` as a UTC date and time, clamped to the years RFC 3339 can write (1970 to 9999).
fn utc(ms: Millis) -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH + time::Duration::milliseconds(ms.clamp(0, LAST_RFC3339_MS))
}

/// `YYYY-MM-DD` of `t`.
fn date_text(t: OffsetDateTime) -> String {
    format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day())
}

/// RFC 3339 in UTC with second precision, e.g. `2026-11-30T05:50:38Z`. Times an agent or a
/// record may carry past year 9999 print as the last second of 9999 rather than panic.
pub fn rfc3339(ms: Millis) -> String {
    Rfc3339::new(ms).as_str().to_owned()
}

/// [`rfc3339`]'s text, made on the stack: `yq --json` writes three per job, for tens of
/// thousands of jobs.
#[derive(Debug, Clone, Copy)]
pub struct Rfc3339([u8; 20]);

impl Rfc3339 {
    pub fn new(ms: Millis) -> Rfc3339 {
        let t = utc(ms);
        let mut text = *b"0000-00-00T00:00:00Z";
        // `utc` clamps to the years 1970 to 9999: four digits.
        put_digits(&mut text[0..4], t.year().unsigned_abs());
        put_digits(&mut text[5..7], u32::from(u8::from(t.month())));
        put_digits(&mut text[8..10], u32::from(t.day()));
        put_digits(&mut text[11..13], u32::from(t.hour()));
        put_digits(&mut text[14..16], u32::from(t.minute()));
        put_digits(&mut text[17..19], u32::from(t.second()));
        Rfc3339(text)
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("digits and ASCII punctuation")
    }
}

/// Writes `n`'s last `out.len()` decimal digits into `out`, zero-padded.
fn put_digits(out: &mut [u8], mut n: u32) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-30T05:50:38.120Z` (clamped as
/// [`rfc3339`]).
pub fn rfc3339_millis(ms: Millis) -> String {
    let t = utc(ms);
    format!(
        "{}T{:02}:{:02}:{:02}.{:03}Z",
        date_text(t),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// The UTC day of `ms` as `YYYY-MM-DD` (clamped as [`rfc3339`]).
pub fn utc_date(ms: Millis) -> String {
    date_text(utc(ms))
}

/// A run of ASCII digits as a number: `None` when empty, not only digits, or too large.
fn digits(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Midnight UTC of `YYYY-MM-DD` (exactly four, two and two digits, a real day).
fn day_ms(date: &str) -> Option<Millis> {
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts[..] else {
        return None;
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let month = Month::try_from(u8::try_from(digits(m)?).ok()?).ok()?;
    let day = u8::try_from(digits(d)?).ok()?;
    let date = Date::from_calendar_date(i32::try_from(digits(y)?).ok()?, month, day).ok()?;
    let days = date.to_julian_day() - OffsetDateTime::UNIX_EPOCH.date().to_julian_day();
    Some(Millis::from(days) * DAY_MS)
}

/// A time of day, `HH:MM[:SS[.fraction]]`, as milliseconds since midnight: hours 0 to 23,
/// minutes 0 to 59, seconds 0 to 60 (a leap second counts as the next minute's first); the
/// fraction's first three digits count.
fn clock_ms(clock: &str) -> Option<Millis> {
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, fraction)) => (hms, Some(fraction)),
        None => (clock, None),
    };
    let fields: Vec<&str> = hms.split(':').collect();
    let (h, mi, s) = match fields[..] {
        [h, mi] => (digits(h)?, digits(mi)?, 0),
        [h, mi, s] => (digits(h)?, digits(mi)?, digits(s)?),
        _ => return None,
    };
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut ms = (h * 3600 + mi * 60 + s) * SECOND_MS;
    if let Some(fraction) = fraction {
        if !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let millis: String = fraction.chars().chain("000".chars()).take(3).collect();
        ms += digits(&millis)?;
    }
    Some(ms)
}

/// A zone at the end of a time of day: `Z`, `±HH:MM`, or none (UTC). The time of day before
/// it, and the zone's offset east of UTC.
fn split_zone(time: &str) -> Option<(&str, Millis)> {
    if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        return Some((clock, 0));
    }
    let Some(i) = time.rfind(['+', '-']) else {
        return Some((time, 0));
    };
    let (clock, zone) = time.split_at(i);
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let (h, mi) = zone[1..].split_once(':')?;
    let (h, mi) = (digits(h)?, digits(mi)?);
    if h > 23 || mi > 59 {
        return None;
    }
    Some((clock, sign * (h * 3600 + mi * 60) * SECOND_MS))
}

/// A date, or a date and time, as epoch milliseconds: `YYYY-MM-DD` (00:00 UTC), or RFC 3339,
/// `YYYY-MM-DDTHH:MM[:SS[.fraction]]` followed by `Z`, `±HH:MM` or nothing (UTC). A `t` or a
/// space may stand for the `T`, a `z` for the `Z`; blanks around it are ignored. `yctl report
/// --from/--to` and the `submit_time` of a trace take it.
pub fn parse_datetime_ms(text: &str) -> Result<Millis, TimeError> {
    let s = text.trim();
    let bad = || TimeError::Date(text.to_string());
    let (date, time) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let day = day_ms(date).ok_or_else(bad)?;
    let Some(time) = time else {
        return Ok(day);
    };
    let (clock, offset) = split_zone(time).ok_or_else(bad)?;
    Ok(day + clock_ms(clock).ok_or_else(bad)? - offset)
}

// ------------------------------------------------------------------ durations

/// The units of the short duration forms, any case: `s`, `m` (minutes), `h`, `d`, `w`.
fn unit_ms(unit: char) -> Option<Millis> {
    match unit.to_ascii_lowercase() {
        's' => Some(SECOND_MS),
        'm' => Some(MINUTE_MS),
        'h' => Some(HOUR_MS),
        'd' => Some(DAY_MS),
        'w' => Some(WEEK_MS),
        _ => None,
    }
}

/// A report span, in milliseconds: a whole number and a unit (`7d`, `36h`, `2w`, `90m`,
/// `3600s`), or several of them (`1d12h`); more than nothing. What `yctl report --since` takes.
pub fn parse_span_ms(text: &str) -> Result<Millis, TimeError> {
    let bad = || TimeError::Span(text.to_string());
    let mut total: Millis = 0;
    let mut number = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = unit_ms(c).ok_or_else(bad)?;
        let n: Millis = number.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        number.clear();
    }
    if !number.is_empty() || total <= 0 {
        return Err(bad());
    }
    Ok(total)
}

/// A trace's duration, in milliseconds: seconds as a number (`5400`, `0.5`), a number and a
/// unit (`90s`, `30m`, `1.5h`, `2d`, `1w`), or Slurm's `[D-]HH:MM:SS` / `MM:SS`
/// (`parse::parse_time_limit`; `0:00` is 0). What the columns of `ysim`'s CSV trace take.
pub fn parse_duration_ms(text: &str) -> Result<Millis, TimeError> {
    let t = text.trim();
    if t.contains(':') || t.contains('-') {
        let secs = crate::parse::parse_time_limit(t)
            .map_err(|e| TimeError::Slurm(e.to_string()))?
            .unwrap_or(0);
        return Ok(secs as Millis * SECOND_MS);
    }
    let (number, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
        _ => (t, 's'),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| TimeError::Duration(text.to_string()))?;
    let per_ms = unit_ms(unit).ok_or_else(|| TimeError::Unit(text.to_string()))?;
    if !(value >= 0.0 && value.is_finite()) {
        return Err(TimeError::NotFinite(text.to_string()));
    }
    // Seconds first, then milliseconds: the rounding trace files were always read with.
    let per_secs = (per_ms / SECOND_MS) as f64;
    Ok((value * per_secs * 1000.0).round() as Millis)
}

/// A humantime duration (`7d`, `36h`, `1h 30m`, `2weeks`), in milliseconds, saturating: what
/// durations in the config file take.
pub fn parse_humantime_ms(text: &str) -> Result<Millis, TimeError> {
    let d = humantime::parse_duration(text).map_err(|e| TimeError::Humantime(e.to_string()))?;
    Ok(Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX))
}

/// `D-HH:MM:SS` / `HH:MM:SS` / `MM:SS`, as squeue prints elapsed time.
pub fn format_elapsed(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

#[cfg(test)]
mod tests;
