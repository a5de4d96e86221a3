//! The report's window: `--since SPAN`, or `--from`/`--to` dates, as epoch milliseconds.

use super::ReportArgs;
use anyhow::{bail, Result};
use ysched_common::time::{parse_datetime_ms, parse_span_ms, rfc3339, Millis};

/// `YYYY-MM-DD` (00:00 UTC), or RFC 3339: `YYYY-MM-DDTHH:MM[:SS[.frac]]` with `Z` or
/// `±HH:MM` (none: UTC); a space may stand for the `T` (`common::time::parse_datetime_ms`).
pub fn parse_date(input: &str) -> Result<Millis> {
    Ok(parse_datetime_ms(input)?)
}

/// A span like `7d`, `36h`, `2w`, `90m`, `3600s`, or several (`1d12h`), in milliseconds
/// (`common::time::parse_span_ms`).
pub fn parse_span(input: &str) -> Result<Millis> {
    Ok(parse_span_ms(input)?)
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
