//! Parsers for the option formats users know from Slurm. Each error names the bad input; a
//! value past its maximum ([`crate::limits::MAXIMA`]) gets the refusal `schedd` gives too.

use crate::limits::{self, MAX_MEM_MIB, MAX_TIME_LIMIT_SECS};
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum ParseError {
    #[error("invalid time limit '{0}': use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")]
    Time(String),
    #[error("{}", limits::TIME_LIMIT.refusal(.0))]
    TimeTooLong(String),
    #[error("invalid time limit '{input}': {field} must be 0 to {max} (got {value})")]
    TimeField {
        input: String,
        field: &'static str,
        value: String,
        max: u64,
    },
    #[error("invalid memory size '{0}': use a whole number with an optional K, M, G or T suffix (default M)")]
    Size(String),
    #[error("{}", limits::MEM.refusal(.0))]
    SizeTooLarge(String),
    #[error(
        "--mem {0} asks for no memory; give at least 1M, or leave --mem out for no memory request"
    )]
    NoMemory(String),
    #[error("invalid {flag} '{value}': use a whole number from {min} to {max}")]
    Number {
        flag: String,
        value: String,
        min: u64,
        max: u64,
    },
    #[error("{flag} must be at least {min} (got {value})")]
    TooSmall {
        flag: String,
        value: String,
        min: u64,
    },
    #[error("{}", limits::over_maximum(flag, value, &max.to_string()))]
    TooLarge {
        flag: String,
        value: String,
        max: u64,
    },
}

/// Why a run of digits is not a number.
#[derive(Debug, PartialEq)]
enum NumError {
    /// Empty, or not only ASCII digits.
    Invalid,
    /// Digits, but more than a `u64` holds.
    Overflow,
}

fn num(s: &str) -> Result<u64, NumError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NumError::Invalid);
    }
    s.parse().map_err(|_| NumError::Overflow)
}

/// Parses a whole number given for `flag` (`--gpus`, `--nodes`, ...) that must lie in
/// `min..=max`. Each error names the flag, the value and the bound it broke: `--nodes must be
/// at least 1 (got 0)`, `--gpus 4294967296 exceeds the maximum of 100000`.
pub fn parse_bounded(flag: &str, input: &str, min: u64, max: u64) -> Result<u64, ParseError> {
    let value = input.trim();
    let too_large = || ParseError::TooLarge {
        flag: flag.to_string(),
        value: value.to_string(),
        max,
    };
    let n = match num(value.strip_prefix('+').unwrap_or(value)) {
        Ok(n) => n,
        Err(NumError::Overflow) => return Err(too_large()),
        Err(NumError::Invalid) => {
            return Err(ParseError::Number {
                flag: flag.to_string(),
                value: input.to_string(),
                min,
                max,
            })
        }
    };
    if n < min {
        return Err(ParseError::TooSmall {
            flag: flag.to_string(),
            value: value.to_string(),
            min,
        });
    }
    if n > max {
        return Err(too_large());
    }
    Ok(n)
}

/// [`parse_bounded`] for a `u32` option; `max` must fit in a `u32`.
pub fn parse_bounded_u32(flag: &str, input: &str, min: u32, max: u32) -> Result<u32, ParseError> {
    // In range by construction: `max` is a u32.
    parse_bounded(flag, input, min.into(), max.into()).map(|n| n as u32)
}

/// Parses a Slurm time limit into seconds: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM` or
/// `D-HH:MM:SS`. The leading field may be any size (`90` minutes, `36:00:00`); the others are
/// within their unit (seconds and minutes 0 to 59, hours after days 0 to 23), so `1:99:99` or
/// `00:60` is refused rather than read as something else. `0` and `UNLIMITED`/`INFINITE` mean
/// no limit (`None`). A limit over [`MAX_TIME_LIMIT_SECS`] (365 days) is refused, however large
/// its numbers: the arithmetic is checked, so nothing wraps around into a short limit.
pub fn parse_time_limit(input: &str) -> Result<Option<u64>, ParseError> {
    let err = || ParseError::Time(crate::text::excerpt(input, 40));
    let too_long = || ParseError::TimeTooLong(crate::text::excerpt(input.trim(), 40));
    let s = input.trim();
    if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("infinite") {
        return Ok(None);
    }
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(d), r),
        None => (None, s),
    };
    // Syntax first, so `1:2:3:4` is malformed rather than too long.
    let texts: Vec<&str> = rest.split(':').collect();
    if texts.len() > 3
        || days.is_some_and(|d| num(d) == Err(NumError::Invalid))
        || texts.iter().any(|t| num(t) == Err(NumError::Invalid))
    {
        return Err(err());
    }
    const D: (&str, u64, u64) = ("days", 86_400, 0);
    const H: (&str, u64, u64) = ("hours", 3_600, 23);
    const M: (&str, u64, u64) = ("minutes", 60, 59);
    const S: (&str, u64, u64) = ("seconds", 1, 59);
    // Each field with its unit: (name, seconds, largest value unless it leads).
    let fields: Vec<(&str, (&'static str, u64, u64))> = match (days, texts.as_slice()) {
        (None, [m]) => vec![(m, M)],
        (None, [m, s]) => vec![(m, M), (s, S)],
        (None, [h, m, s]) => vec![(h, H), (m, M), (s, S)],
        (Some(d), [h]) => vec![(d, D), (h, H)],
        (Some(d), [h, m]) => vec![(d, D), (h, H), (m, M)],
        (Some(d), [h, m, s]) => vec![(d, D), (h, H), (m, M), (s, S)],
        _ => return Err(err()),
    };
    let mut secs: u64 = 0;
    for (i, (text, (unit, scale, max))) in fields.into_iter().enumerate() {
        // Digits only (checked above): an error here is an overflow.
        let value = num(text).ok();
        if i > 0 && value.is_none_or(|v| v > max) {
            return Err(ParseError::TimeField {
                input: crate::text::excerpt(s, 40),
                field: unit,
                value: crate::text::excerpt(text, 24),
                max,
            });
        }
        secs = value
            .and_then(|v| v.checked_mul(scale))
            .and_then(|v| secs.checked_add(v))
            .ok_or_else(too_long)?;
    }
    if secs > MAX_TIME_LIMIT_SECS {
        return Err(too_long());
    }
    Ok(if secs == 0 { None } else { Some(secs) })
}

/// Parses a memory size into MiB: `4096`, `512M`, `16G`, `1T`, `1048576K`. More than
/// [`MAX_MEM_MIB`] (1024T) is refused.
pub fn parse_mem_mib(input: &str) -> Result<u64, ParseError> {
    let err = || ParseError::Size(input.to_string());
    let too_large = || ParseError::SizeTooLarge(input.trim().to_string());
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
    let n = match num(digits) {
        Ok(n) => n,
        Err(NumError::Invalid) => return Err(err()),
        Err(NumError::Overflow) => return Err(too_large()),
    };
    let kib = n.checked_mul(mult_kib).ok_or_else(too_large)?;
    let mib = kib.div_ceil(1024);
    if mib > MAX_MEM_MIB {
        return Err(too_large());
    }
    Ok(mib)
}

/// Parses a job's `--mem` ([`parse_mem_mib`]): `0` is refused, as a job always needs some
/// memory (Slurm reads `--mem=0` as "all of the node's"; leave `--mem` out for no request).
pub fn parse_job_mem_mib(input: &str) -> Result<u64, ParseError> {
    match parse_mem_mib(input)? {
        0 => Err(ParseError::NoMemory(crate::text::excerpt(input.trim(), 24))),
        mib => Ok(mib),
    }
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
    use crate::limits::MAX_GPUS;

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
        assert_eq!(parse_time_limit("90"), Ok(Some(5400)));
        assert_eq!(parse_time_limit("36:00:00"), Ok(Some(36 * 3600)));
        assert_eq!(parse_time_limit("1-23:59:59"), Ok(Some(86400 + 86399)));
        for bad in ["", "abc", "-5", "1:2:3:4", "1-", "1.5", "1-2:3:4:5", " : "] {
            assert!(parse_time_limit(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn time_fields_out_of_their_unit_are_refused() {
        assert_eq!(
            parse_time_limit("1:99:99").unwrap_err().to_string(),
            "invalid time limit '1:99:99': minutes must be 0 to 59 (got 99)"
        );
        assert_eq!(
            parse_time_limit("00:60").unwrap_err().to_string(),
            "invalid time limit '00:60': seconds must be 0 to 59 (got 60)"
        );
        for bad in [
            "1-24",
            "1-00:60",
            "0:0:60",
            "1:99999999999999999999",
            "1-99999999999999999:00:00",
            "0-0:0:18446744073709551615",
        ] {
            assert!(
                matches!(parse_time_limit(bad), Err(ParseError::TimeField { .. })),
                "{bad}: {:?}",
                parse_time_limit(bad)
            );
        }
    }

    #[test]
    fn a_job_needs_some_memory() {
        assert_eq!(parse_job_mem_mib("1"), Ok(1));
        for zero in ["0", "0G", " 0K "] {
            assert_eq!(
                parse_job_mem_mib(zero).unwrap_err().to_string(),
                format!(
                    "--mem {} asks for no memory; give at least 1M, or leave --mem out for no \
                     memory request",
                    zero.trim()
                )
            );
        }
    }

    #[test]
    fn time_limits_never_wrap_around() {
        // 307445734561825861 minutes * 60 wraps a u64 to 44 seconds without checked arithmetic.
        for huge in [
            "307445734561825861",
            "999999999999999999",
            "99999999999999999999999",
            "213503982334601-00",
            "525601",
            "365-00:00:01",
            "366-00",
            "8761:00:00",
        ] {
            assert_eq!(
                parse_time_limit(huge),
                Err(ParseError::TimeTooLong(huge.to_string())),
                "{huge}"
            );
        }
        assert_eq!(
            parse_time_limit("307445734561825861")
                .unwrap_err()
                .to_string(),
            "time limit '307445734561825861' exceeds the maximum of 365 days (365-00:00:00)"
        );
        assert_eq!(
            parse_time_limit("365-00:00:00"),
            Ok(Some(MAX_TIME_LIMIT_SECS))
        );
        assert_eq!(parse_time_limit("525600"), Ok(Some(MAX_TIME_LIMIT_SECS)));
        assert_eq!(parse_time_limit("0-0:0:0"), Ok(None));
        // Malformed stays malformed, even with huge numbers in it.
        assert_eq!(
            parse_time_limit("99999999999999999999:x"),
            Err(ParseError::Time("99999999999999999999:x".into()))
        );
    }

    #[test]
    fn bounded_numbers() {
        assert_eq!(parse_bounded("--gpus", "8", 0, 100), Ok(8));
        assert_eq!(parse_bounded("--gpus", " 0 ", 0, 100), Ok(0));
        assert_eq!(parse_bounded_u32("--nodes", "+3", 1, 10), Ok(3));
        assert_eq!(
            parse_bounded_u32("--nodes", "0", 1, 10)
                .unwrap_err()
                .to_string(),
            "--nodes must be at least 1 (got 0)"
        );
        assert_eq!(
            parse_bounded_u32("--gpus", "4294967296", 0, MAX_GPUS)
                .unwrap_err()
                .to_string(),
            "--gpus 4294967296 exceeds the maximum of 100000"
        );
        assert_eq!(
            parse_bounded("--grace", "99999999999999999999999", 0, u32::MAX.into())
                .unwrap_err()
                .to_string(),
            "--grace 99999999999999999999999 exceeds the maximum of 4294967295"
        );
        assert_eq!(
            parse_bounded_u32("--cpus", "-1", 1, 8)
                .unwrap_err()
                .to_string(),
            "invalid --cpus '-1': use a whole number from 1 to 8"
        );
        for bad in ["", "x", "1.5", "1e3", "0x10", "1 2", "++1"] {
            assert!(
                parse_bounded("--gpus", bad, 0, 100).is_err(),
                "{bad:?} accepted"
            );
        }
        assert_eq!(
            parse_bounded_u32("--x", "4294967295", 0, u32::MAX),
            Ok(u32::MAX)
        );
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

    #[test]
    fn sizes_never_wrap_around() {
        for huge in [
            "99999999999999999999",
            "18014398509481985T",
            "17592186044416G",
            "1025T",
            "1073741825",
            "18446744073709551615K",
        ] {
            assert_eq!(
                parse_mem_mib(huge),
                Err(ParseError::SizeTooLarge(huge.to_string())),
                "{huge}"
            );
        }
        assert_eq!(parse_mem_mib("1024T"), Ok(MAX_MEM_MIB));
        assert_eq!(
            parse_mem_mib("1025T").unwrap_err().to_string(),
            "memory size '1025T' exceeds the maximum of 1024T (1 PiB)"
        );
    }
}
