//! The date and duration forms, each pinned at its edges: what it takes, what it refuses, and
//! the value it gives.

use super::*;

/// 2026-01-05T00:00:00Z.
const MON: Millis = 1_767_571_200_000;

#[test]
fn rfc3339_never_panics() {
    assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59Z");
    assert_eq!(rfc3339(-5), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339_millis(i64::MAX), "9999-12-31T23:59:59.999Z");
    assert_eq!(utc_date(i64::MIN), "1970-01-01");
}

#[test]
fn formats() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339_millis(1_500), "1970-01-01T00:00:01.500Z");
    assert_eq!(rfc3339(MON + 1_999), "2026-01-05T00:00:01Z");
    assert_eq!(utc_date(MON + DAY_MS - 1), "2026-01-05");
    assert_eq!(format_elapsed(65), "1:05");
    assert_eq!(format_elapsed(3600 * 25 + 61), "1-01:01:01");
}

/// The printers agree with humantime's, which printed these times before (`yq --json`, the
/// trace's `submit_time`), over the whole range they write.
#[test]
fn printed_as_humantime_printed_them() {
    let at = |ms: Millis| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    let mut ms: Millis = 0;
    let mut step: Millis = 1;
    while ms <= LAST_RFC3339_MS {
        assert_eq!(
            rfc3339(ms),
            humantime::format_rfc3339_seconds(at(ms)).to_string()
        );
        assert_eq!(
            rfc3339_millis(ms),
            humantime::format_rfc3339_millis(at(ms)).to_string()
        );
        ms += step;
        step = step * 3 / 2 + 7_919;
    }
}

#[test]
fn dates_and_times() {
    let ok = |s: &str| parse_datetime_ms(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    assert_eq!(ok("2026-01-05"), MON);
    assert_eq!(ok(" 2026-01-05 "), MON);
    assert_eq!(ok("2026-01-05T08:30:00Z"), MON + 30_600_000);
    assert_eq!(ok("2026-01-05 08:30"), MON + 30_600_000);
    assert_eq!(ok("2026-01-05t8:30z"), MON + 30_600_000);
    assert_eq!(ok("2026-01-05T10:30:00+02:00"), MON + 30_600_000);
    assert_eq!(ok("2026-01-04T22:00:00-02:00"), MON);
    assert_eq!(ok("2026-01-05T00:00:01.5Z"), MON + 1_500);
    assert_eq!(ok("2026-01-05T00:00:01.23456789012345678901Z"), MON + 1_234);
    assert_eq!(ok("2026-01-05T00:00:01.Z"), MON + 1_000);
    // A leap second is the next minute's first.
    assert_eq!(ok("2026-01-04T23:59:60Z"), MON);
    assert_eq!(ok("1970-01-01"), 0);
    assert_eq!(ok("2024-02-29"), 1_709_164_800_000);
    assert_eq!(ok("0000-03-01"), -62_162_035_200_000);
    for bad in [
        "",
        "yesterday",
        "26-01-05",
        "2026-1-05",
        "2026-02-29",
        "2026-13-01",
        "2026-00-10",
        "2026-01-32",
        "2026-01-05T",
        "2026-01-05T25:00Z",
        "2026-01-05T08:60",
        "2026-01-05T08:00:61",
        "2026-01-05T08",
        "2026-01-05T08:00:00:00",
        "2026-01-05T08:00+24:00",
        "2026-01-05T08:00+01",
        "2026-01-05T08:00:00.5x",
        "+026-01-05",
        "2026-01-05T08:+1:00",
    ] {
        let e = parse_datetime_ms(bad).unwrap_err().to_string();
        assert!(e.contains("YYYY-MM-DD or RFC 3339"), "{bad}: {e}");
        assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
    }
}

#[test]
fn spans() {
    assert_eq!(parse_span_ms("7d"), Ok(7 * DAY_MS));
    assert_eq!(parse_span_ms("1d12h"), Ok(36 * HOUR_MS));
    assert_eq!(parse_span_ms("2W"), Ok(2 * WEEK_MS));
    assert_eq!(parse_span_ms(" 90m "), Ok(90 * MINUTE_MS));
    assert_eq!(parse_span_ms("3600s"), Ok(HOUR_MS));
    assert_eq!(parse_span_ms("0d1s"), Ok(SECOND_MS));
    for bad in [
        "",
        "7",
        "d",
        "0d",
        "7x",
        "-1d",
        "7 d",
        "1.5h",
        "7dd",
        "99999999999999999d",
    ] {
        assert_eq!(
            parse_span_ms(bad),
            Err(TimeError::Span(bad.into())),
            "{bad}"
        );
    }
    assert_eq!(
        parse_span_ms("7x").unwrap_err().to_string(),
        "invalid span \"7x\": expected e.g. 7d, 36h, 2w or 90m"
    );
}

#[test]
fn trace_durations() {
    assert_eq!(parse_duration_ms("90"), Ok(90_000));
    assert_eq!(parse_duration_ms("0.0005"), Ok(1));
    assert_eq!(parse_duration_ms("+5"), Ok(5_000));
    assert_eq!(parse_duration_ms("1e3"), Ok(1_000_000));
    assert_eq!(parse_duration_ms("1.5h"), Ok(5_400_000));
    assert_eq!(parse_duration_ms("1.5H"), Ok(5_400_000));
    assert_eq!(parse_duration_ms("5 m"), Ok(300_000));
    assert_eq!(parse_duration_ms("30m"), Ok(1_800_000));
    assert_eq!(parse_duration_ms("2d"), Ok(172_800_000));
    assert_eq!(parse_duration_ms("1w"), Ok(WEEK_MS));
    assert_eq!(parse_duration_ms("1-00:00:00"), Ok(86_400_000));
    assert_eq!(parse_duration_ms("01:30:00"), Ok(5_400_000));
    assert_eq!(parse_duration_ms("0:00"), Ok(0));
    assert_eq!(
        parse_duration_ms("soon"),
        Err(TimeError::Duration("soon".into()))
    );
    assert_eq!(parse_duration_ms("5y"), Err(TimeError::Unit("5y".into())));
    assert_eq!(
        parse_duration_ms("1e400"),
        Err(TimeError::NotFinite("1e400".into()))
    );
    assert_eq!(
        parse_duration_ms("1:99").unwrap_err().to_string(),
        "invalid time limit '1:99': seconds must be 0 to 59 (got 99)"
    );
    for bad in ["", "-5", "UNLIMITED", "inf", "NaN", "h", "1.5.5h"] {
        assert!(parse_duration_ms(bad).is_err(), "{bad}");
    }
}

#[test]
fn humantime_strings() {
    assert_eq!(parse_humantime_ms("7d"), Ok(7 * DAY_MS));
    assert_eq!(parse_humantime_ms("1h 30m"), Ok(90 * MINUTE_MS));
    assert_eq!(parse_humantime_ms("2weeks"), Ok(2 * WEEK_MS));
    assert!(matches!(
        parse_humantime_ms("soon"),
        Err(TimeError::Humantime(_))
    ));
}
