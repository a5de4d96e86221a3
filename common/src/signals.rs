//! Signal names and `--signal [B:]SIG[@SECS]`, the warning a job asks for before its time
//! limit (as sbatch has it).

use serde::{Deserialize, Serialize};
use std::fmt;

/// The standard Linux signals by number (x86, ARM and most other architectures), as
/// `kill -l` names them without the `SIG` prefix. Real-time signals are not offered: an agent
/// may not know them.
const SIGNALS: [(i32, &str); 31] = [
    (1, "HUP"),
    (2, "INT"),
    (3, "QUIT"),
    (4, "ILL"),
    (5, "TRAP"),
    (6, "ABRT"),
    (7, "BUS"),
    (8, "FPE"),
    (9, "KILL"),
    (10, "USR1"),
    (11, "SEGV"),
    (12, "USR2"),
    (13, "PIPE"),
    (14, "ALRM"),
    (15, "TERM"),
    (16, "STKFLT"),
    (17, "CHLD"),
    (18, "CONT"),
    (19, "STOP"),
    (20, "TSTP"),
    (21, "TTIN"),
    (22, "TTOU"),
    (23, "URG"),
    (24, "XCPU"),
    (25, "XFSZ"),
    (26, "VTALRM"),
    (27, "PROF"),
    (28, "WINCH"),
    (29, "IO"),
    (30, "PWR"),
    (31, "SYS"),
];

/// Seconds before the time limit when `@SECS` is not given (sbatch's default).
pub const DEFAULT_WARN_SECS: u32 = 60;
pub use crate::limits::MAX_WARN_SECS;

/// The name of signal `number` without `SIG` (`USR1`), if it is a standard signal.
pub fn signal_name(number: i32) -> Option<&'static str> {
    SIGNALS.iter().find(|(n, _)| *n == number).map(|(_, s)| *s)
}

/// A signal by name (`USR1`, `SIGUSR1`, `usr1`; also `IOT`, `POLL`, `CLD`) or number (`10`).
pub fn signal_number(text: &str) -> Option<i32> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().ok().filter(|n| signal_name(*n).is_some());
    }
    let upper = t.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let alias = match bare {
        "IOT" => "ABRT",
        "POLL" => "IO",
        "CLD" => "CHLD",
        other => other,
    };
    SIGNALS.iter().find(|(_, s)| *s == alias).map(|(n, _)| *n)
}

/// A signal a job asked for before its time limit: `--signal [B:]SIG[@SECS]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarnSignal {
    /// The signal's number (Linux numbering).
    pub signal: i32,
    /// Seconds before the time limit.
    pub secs: u32,
    /// `B:`: to the batch shell only, not to every process of the job.
    pub batch_only: bool,
}

impl WarnSignal {
    /// Parses `[B:]SIG[@SECS]`; each error names the bad part.
    pub fn parse(text: &str) -> Result<WarnSignal, String> {
        let t = text.trim();
        let (batch_only, rest) = match t.strip_prefix("B:").or_else(|| t.strip_prefix("b:")) {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let (sig, secs) = match rest.split_once('@') {
            Some((sig, secs)) => (sig, Some(secs)),
            None => (rest, None),
        };
        let signal = signal_number(sig).ok_or_else(|| unknown_signal(sig))?;
        let secs = match secs {
            None => DEFAULT_WARN_SECS,
            Some(s) => {
                let s = s.trim();
                let n = (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| s.parse::<u64>().ok())
                    .flatten()
                    .ok_or_else(|| {
                        format!(
                            "invalid --signal '{text}': SECS '{s}' is not a whole number of \
                             seconds (0 to {MAX_WARN_SECS})"
                        )
                    })?;
                u32::try_from(n)
                    .ok()
                    .filter(|n| *n <= MAX_WARN_SECS)
                    .ok_or_else(|| secs_out_of_range(n))?
            }
        };
        Ok(WarnSignal {
            signal,
            secs,
            batch_only,
        })
    }

    /// Checks a warning that did not come through [`WarnSignal::parse`] (a wire request).
    pub fn check(signal: i32, secs: u32) -> Result<(), String> {
        if signal_name(signal).is_none() {
            return Err(unknown_signal(&signal.to_string()));
        }
        if secs > MAX_WARN_SECS {
            return Err(secs_out_of_range(u64::from(secs)));
        }
        Ok(())
    }
}

fn unknown_signal(sig: &str) -> String {
    format!(
        "invalid --signal: unknown signal '{}' (use a name such as USR1, SIGUSR2 or TERM, or a \
         number from 1 to 31; the form is [B:]SIG[@SECS])",
        sig.trim()
    )
}

fn secs_out_of_range(secs: u64) -> String {
    format!(
        "invalid --signal: {secs} seconds is out of range (SECS must be from 0 to {MAX_WARN_SECS})"
    )
}

/// `USR1@60`, `B:TERM@120`: the form `--signal` takes.
impl fmt::Display for WarnSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.batch_only {
            f.write_str("B:")?;
        }
        match signal_name(self.signal) {
            Some(name) => f.write_str(name)?,
            None => write!(f, "{}", self.signal)?,
        }
        write!(f, "@{}", self.secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(signal_number("USR1"), Some(10));
        assert_eq!(signal_number("sigusr2"), Some(12));
        assert_eq!(signal_number("SIGTERM"), Some(15));
        assert_eq!(signal_number("10"), Some(10));
        assert_eq!(signal_number("iot"), Some(6));
        assert_eq!(signal_number("0"), None);
        assert_eq!(signal_number("32"), None);
        assert_eq!(signal_number("USR3"), None);
        assert_eq!(signal_number(""), None);
        assert_eq!(signal_name(10), Some("USR1"));
        assert_eq!(signal_name(64), None);
    }

    #[test]
    fn sbatch_forms() {
        let w = |signal, secs, batch_only| WarnSignal {
            signal,
            secs,
            batch_only,
        };
        assert_eq!(WarnSignal::parse("USR1"), Ok(w(10, 60, false)));
        assert_eq!(WarnSignal::parse("USR1@2"), Ok(w(10, 2, false)));
        assert_eq!(WarnSignal::parse("B:SIGUSR2@120"), Ok(w(12, 120, true)));
        assert_eq!(WarnSignal::parse("15@0"), Ok(w(15, 0, false)));
        assert_eq!(WarnSignal::parse("TERM@65535"), Ok(w(15, 65535, false)));
        assert_eq!(w(10, 60, false).to_string(), "USR1@60");
        assert_eq!(w(12, 5, true).to_string(), "B:USR2@5");
        for good in ["USR1", "B:USR2@120", "TERM@0"] {
            let parsed = WarnSignal::parse(good).unwrap();
            assert_eq!(WarnSignal::parse(&parsed.to_string()), Ok(parsed));
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let err = WarnSignal::parse("USR3@10").unwrap_err();
        assert!(err.contains("unknown signal 'USR3'"), "{err}");
        let err = WarnSignal::parse("B:@10").unwrap_err();
        assert!(err.contains("unknown signal ''"), "{err}");
        let err = WarnSignal::parse("USR1@65536").unwrap_err();
        assert!(err.contains("65536 seconds is out of range"), "{err}");
        let err = WarnSignal::parse("USR1@99999999999999999999").unwrap_err();
        assert!(err.contains("not a whole number"), "{err}");
        let err = WarnSignal::parse("USR1@-1").unwrap_err();
        assert!(err.contains("not a whole number"), "{err}");
        assert!(WarnSignal::check(10, 60).is_ok());
        assert!(WarnSignal::check(40, 60)
            .unwrap_err()
            .contains("unknown signal '40'"));
        assert!(WarnSignal::check(10, 70_000)
            .unwrap_err()
            .contains("out of range"));
    }
}
