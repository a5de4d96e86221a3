//! Time as milliseconds since the Unix epoch. The scheduling core takes `now` as a parameter;
//! only the daemons call [`now_ms`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z).
const LAST_RFC3339_MS: Millis = 253_402_300_799_999;

/// RFC 3339 in UTC with second precision, e.g. `2026-11-30T05:50:38Z`. Times an agent or a
/// record may carry past year 9999 print as the last second of 9999 rather than panic.
pub fn rfc3339(ms: Millis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.clamp(0, LAST_RFC3339_MS) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-30T05:50:38.120Z` (clamped as
/// [`rfc3339`]).
pub fn rfc3339_millis(ms: Millis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.clamp(0, LAST_RFC3339_MS) as u64);
    humantime::format_rfc3339_millis(t).to_string()
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
mod tests {
    use super::*;

    #[test]
    fn rfc3339_never_panics() {
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00Z");
    }
    #[test]
    fn formats() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_millis(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(format_elapsed(65), "1:05");
        assert_eq!(format_elapsed(3600 * 25 + 61), "1-01:01:01");
    }
}
