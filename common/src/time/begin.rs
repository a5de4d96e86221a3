//! Slurm's `--begin` times (`now+1hour`, `16:00`, `2026-12-24T16:00`, `tomorrow`...), read in
//! the local time of the submitting host into seconds since the epoch.
//!
//! The parser is pure over `now` and a [`LocalClock`] (the calendar of a time zone), so that
//! tests pin a zone; [`SystemLocalTime`] is the host's zone through `localtime_r`/`mktime`.

use thiserror::Error;
use time::{Date, Month};

/// The furthest ahead a `--begin` may lie: 365 days, as the longest time limit. Further is
/// refused rather than kept pending for years by a typo (`2062` for `2026`).
pub const MAX_BEGIN_AHEAD_SECS: i64 = 365 * 86_400;

/// A local date and time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub date: Date,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
}

/// The calendar of one time zone: an instant's local date and time, and back.
pub trait LocalClock {
    /// The local date and time at `secs` since the epoch.
    fn civil(&self, secs: i64) -> Option<Civil>;
    /// The instant a local date and time names (for a time that a clock change skips or
    /// repeats, the zone's usual choice).
    fn unix(&self, civil: Civil) -> Option<i64>;
}

/// The submitting host's time zone (`TZ`, else `/etc/localtime`), through the C library.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLocalTime;

// `time_t` is 64 bits here but 32 on some targets: the conversions stay for those.
#[allow(clippy::useless_conversion)]
impl LocalClock for SystemLocalTime {
    fn civil(&self, secs: i64) -> Option<Civil> {
        let t: libc::time_t = secs.try_into().ok()?;
        // SAFETY: `tm` is plain data that localtime_r fills; both pointers are valid for the
        // call, and localtime_r (unlike localtime) keeps no pointer to them.
        let tm = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            if libc::localtime_r(&t, &mut tm).is_null() {
                return None;
            }
            tm
        };
        let month = Month::try_from(u8::try_from(tm.tm_mon + 1).ok()?).ok()?;
        let date =
            Date::from_calendar_date(tm.tm_year + 1900, month, u8::try_from(tm.tm_mday).ok()?)
                .ok()?;
        Some(Civil {
            date,
            hour: u8::try_from(tm.tm_hour).ok()?,
            minute: u8::try_from(tm.tm_min).ok()?,
            // A leap second reads as the minute's last.
            second: u8::try_from(tm.tm_sec.min(59)).ok()?,
        })
    }

    fn unix(&self, civil: Civil) -> Option<i64> {
        // SAFETY: `tm` is plain data, zeroed then filled field by field; mktime reads and
        // normalises it in place and keeps no pointer to it.
        let t = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            tm.tm_year = civil.date.year() - 1900;
            tm.tm_mon = i32::from(u8::from(civil.date.month())) - 1;
            tm.tm_mday = i32::from(civil.date.day());
            tm.tm_hour = i32::from(civil.hour);
            tm.tm_min = i32::from(civil.minute);
            tm.tm_sec = i32::from(civil.second);
            // Whether daylight saving time applies is the zone's to say for that date.
            tm.tm_isdst = -1;
            libc::mktime(&mut tm)
        };
        // -1 is also 1969-12-31T23:59:59Z, which no `--begin` can mean.
        (t != -1).then_some(i64::from(t))
    }
}

/// Why a `--begin` was refused; each message names the input and the forms taken.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BeginError {
    #[error(
        "invalid --begin '{0}': use now+N[seconds|minutes|hours|days|weeks], HH:MM[:SS] \
         [AM|PM], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, elevenses, fika, teatime, today \
         or tomorrow"
    )]
    Form(String),
    #[error("--begin '{0}' is more than 365 days ahead")]
    TooFar(String),
    #[error("--begin '{0}' cannot be read in this host's time zone")]
    Zone(String),
}

/// The instant `text` names, in seconds since the epoch, read as Slurm's `--begin` does in
/// the zone of `clock` at `now` (seconds since the epoch):
///
/// * `now`, `now+N` (seconds), `now+N<unit>` with units `s`/`sec`/`second(s)`, `m`/`min`/
///   `minute(s)`, `h`/`hour(s)`, `d`/`day(s)`, `w`/`week(s)`;
/// * `HH:MM[:SS]`, optionally followed by `AM` or `PM`: its next occurrence (today if still
///   ahead, else tomorrow);
/// * `midnight`, `noon`, `elevenses` (11:00), `fika` (15:00), `teatime` (16:00): their next
///   occurrence; `today` (its start: at once) and `tomorrow` (its start);
/// * `YYYY-MM-DD` (its start) and `YYYY-MM-DDTHH:MM[:SS]`.
///
/// Any case; a time in the past is kept (the job may start at once). At most
/// [`MAX_BEGIN_AHEAD_SECS`] ahead of `now`.
pub fn parse_begin(text: &str, now: i64, clock: &dyn LocalClock) -> Result<u64, BeginError> {
    let input = text.trim();
    let form = || BeginError::Form(crate::text::excerpt(input, 40));
    let lower = input.to_ascii_lowercase();
    let zone = || BeginError::Zone(crate::text::excerpt(input, 40));
    let today = clock.civil(now).ok_or_else(zone)?.date;
    let at = |date: Date, (hour, minute, second): (u8, u8, u8)| {
        clock
            .unix(Civil {
                date,
                hour,
                minute,
                second,
            })
            .ok_or_else(zone)
    };
    // A time of day's next occurrence: today while it is still ahead, else tomorrow.
    let next = |clock_time: (u8, u8, u8)| -> Result<i64, BeginError> {
        let candidate = at(today, clock_time)?;
        if candidate > now {
            return Ok(candidate);
        }
        at(today.next_day().ok_or_else(form)?, clock_time)
    };
    let secs = match lower.as_str() {
        "now" => now,
        "today" => at(today, (0, 0, 0))?,
        "tomorrow" => at(today.next_day().ok_or_else(form)?, (0, 0, 0))?,
        "midnight" => next((0, 0, 0))?,
        "noon" => next((12, 0, 0))?,
        "elevenses" => next((11, 0, 0))?,
        "fika" => next((15, 0, 0))?,
        "teatime" => next((16, 0, 0))?,
        _ => {
            if let Some(offset) = lower.strip_prefix("now+") {
                let ahead = relative_secs(offset).ok_or_else(form)?;
                if ahead > MAX_BEGIN_AHEAD_SECS {
                    return Err(BeginError::TooFar(crate::text::excerpt(input, 40)));
                }
                now + ahead
            } else if let Some(date) = calendar_date(&lower) {
                let (day, clock_time) = date.ok_or_else(form)?;
                at(day, clock_time)?
            } else {
                next(clock_of_day(&lower).ok_or_else(form)?)?
            }
        }
    };
    if secs - now > MAX_BEGIN_AHEAD_SECS {
        return Err(BeginError::TooFar(crate::text::excerpt(input, 40)));
    }
    // Before the epoch cannot be meant; 0 on the wire means "no --begin".
    u64::try_from(secs.max(1)).map_err(|_| form())
}

/// The seconds of `now+` followed by this: digits, then an optional unit.
fn relative_secs(offset: &str) -> Option<i64> {
    let split = offset
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(offset.len());
    let (digits, unit) = offset.split_at(split);
    if digits.is_empty() {
        return None;
    }
    // More digits than an i64 holds is further ahead than any bound: refused as too far.
    let count: i64 = digits.parse().unwrap_or(i64::MAX);
    let scale = match unit {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        _ => return None,
    };
    Some(count.saturating_mul(scale))
}

/// `YYYY-MM-DD[THH:MM[:SS]]`: `None` if `text` does not start like a date, `Some(None)` if it
/// does but is not a valid one.
#[allow(clippy::type_complexity)]
fn calendar_date(text: &str) -> Option<Option<(Date, (u8, u8, u8))>> {
    let looks_like_date = text.len() >= 10
        && text.as_bytes()[4] == b'-'
        && text.as_bytes()[..4].iter().all(u8::is_ascii_digit);
    if !looks_like_date {
        return None;
    }
    let (day, time_of_day) = match text.split_once('t') {
        Some((day, time_of_day)) => (day, Some(time_of_day)),
        None => (text, None),
    };
    let parse = || -> Option<(Date, (u8, u8, u8))> {
        let mut fields = day.split('-');
        let (y, m, d) = (fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some() || m.len() != 2 || d.len() != 2 {
            return None;
        }
        let month = Month::try_from(small(m)?).ok()?;
        let date = Date::from_calendar_date(y.parse().ok()?, month, small(d)?).ok()?;
        let clock_time = match time_of_day {
            Some(t) => hms(t)?,
            None => (0, 0, 0),
        };
        Some((date, clock_time))
    };
    Some(parse())
}

/// `HH:MM[:SS]` with an optional `am`/`pm` (lower case here) after it, with or without a space.
fn clock_of_day(text: &str) -> Option<(u8, u8, u8)> {
    let (clock, meridiem) = if let Some(c) = text.strip_suffix("am") {
        (c.trim_end(), Some(false))
    } else if let Some(c) = text.strip_suffix("pm") {
        (c.trim_end(), Some(true))
    } else {
        (text, None)
    };
    let (hour, minute, second) = hms(clock)?;
    let hour = match meridiem {
        None => hour,
        Some(_) if !(1..=12).contains(&hour) => return None,
        Some(false) => hour % 12,
        Some(true) => hour % 12 + 12,
    };
    Some((hour, minute, second))
}

/// `HH:MM` or `HH:MM:SS`, each field one or two digits within its unit.
fn hms(text: &str) -> Option<(u8, u8, u8)> {
    let fields: Vec<&str> = text.split(':').collect();
    let (h, m, s) = match fields[..] {
        [h, m] => (small(h)?, small(m)?, 0),
        [h, m, s] => (small(h)?, small(m)?, small(s)?),
        _ => return None,
    };
    (h <= 23 && m <= 59 && s <= 59).then_some((h, m, s))
}

/// One or two ASCII digits.
fn small(text: &str) -> Option<u8> {
    if text.is_empty() || text.len() > 2 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}
