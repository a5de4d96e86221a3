//! Parsers for the option formats users know from Slurm. Each error names the bad input.

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum ParseError {
    #[error("invalid time limit '{0}': use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")]
    Time(String),
    #[error("invalid memory size '{0}': use a whole number with an optional K, M, G or T suffix (default M)")]
    Size(String),
}

fn num(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses a Slurm time limit into seconds. `0` and `UNLIMITED`/`INFINITE` mean no limit (`None`).
pub fn parse_time_limit(input: &str) -> Result<Option<u64>, ParseError> {
    let err = || ParseError::Time(input.to_string());
    let s = input.trim();
    if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("infinite") {
        return Ok(None);
    }
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(num(d).ok_or_else(err)?), r),
        None => (None, s),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(num)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(err)?;
    let secs = match (days, parts.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(d), [h]) => d * 86400 + h * 3600,
        (Some(d), [h, m]) => d * 86400 + h * 3600 + m * 60,
        (Some(d), [h, m, s]) => d * 86400 + h * 3600 + m * 60 + s,
        _ => return Err(err()),
    };
    Ok(if secs == 0 { None } else { Some(secs) })
}

/// Parses a memory size into MiB: `4096`, `512M`, `16G`, `1T`, `1048576K`.
pub fn parse_mem_mib(input: &str) -> Result<u64, ParseError> {
    let err = || ParseError::Size(input.to_string());
    let s = input.trim();
    let (digits, mult_kib) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64,
                'M' => 1024,
                'G' => 1024 * 1024,
                'T' => 1024 * 1024 * 1024,
                _ => return Err(err()),
            };
            (&s[..i], m)
        }
        _ => (s, 1024),
    };
    let n = num(digits).ok_or_else(err)?;
    let kib = n.checked_mul(mult_kib).ok_or_else(err)?;
    Ok(kib.div_ceil(1024))
}

/// A byte count for messages: `812 B`, `3.2 KiB`, `4.1 MiB`, `1.5 GiB`. Rounds up at one
/// decimal, so a size just over a limit never prints as equal to it.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut unit = 0;
    let mut scale = 1024u64;
    while unit + 1 < UNITS.len() && bytes >= scale * 1024 {
        scale *= 1024;
        unit += 1;
    }
    let tenths = (bytes as u128 * 10).div_ceil(scale as u128);
    format!("{}.{} {}", tenths / 10, tenths % 10, UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_for_messages() {
        assert_eq!(format_size(812), "812 B");
        assert_eq!(format_size(4 * 1024 * 1024), "4.0 MiB");
        assert_eq!(format_size(4 * 1024 * 1024 + 1), "4.1 MiB");
        assert_eq!(format_size(50_001_719), "47.7 MiB");
        assert_eq!(format_size(3 << 30), "3.0 GiB");
    }

    #[test]
    fn time_limits() {
        assert_eq!(parse_time_limit("30"), Ok(Some(1800)));
        assert_eq!(parse_time_limit("1:30"), Ok(Some(90)));
        assert_eq!(parse_time_limit("01:00:05"), Ok(Some(3605)));
        assert_eq!(parse_time_limit("2-03"), Ok(Some(2 * 86400 + 3 * 3600)));
        assert_eq!(parse_time_limit("1-00:01"), Ok(Some(86400 + 60)));
        assert_eq!(parse_time_limit("1-00:00:01"), Ok(Some(86401)));
        assert_eq!(parse_time_limit("UNLIMITED"), Ok(None));
        for bad in ["", "abc", "-5", "1:2:3:4", "1-", "1.5", "1-2:3:4:5", " : "] {
            assert!(parse_time_limit(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_mem_mib("4096"), Ok(4096));
        assert_eq!(parse_mem_mib("16G"), Ok(16384));
        assert_eq!(parse_mem_mib("512m"), Ok(512));
        assert_eq!(parse_mem_mib("1T"), Ok(1024 * 1024));
        assert_eq!(parse_mem_mib("1536K"), Ok(2));
        for bad in ["", "G", "-1G", "1.5G", "12Q", "99999999999999999999T"] {
            assert!(parse_mem_mib(bad).is_err(), "{bad} accepted");
        }
    }
}
