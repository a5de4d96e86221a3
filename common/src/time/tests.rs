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

/// A zone at a fixed offset east of UTC, so that `--begin` tests do not depend on the host's.
struct FixedZone(i64);

impl LocalClock for FixedZone {
    fn civil(&self, secs: i64) -> Option<Civil> {
        let t = OffsetDateTime::from_unix_timestamp(secs + self.0).ok()?;
        Some(Civil {
            date: t.date(),
            hour: t.hour(),
            minute: t.minute(),
            second: t.second(),
        })
    }

    fn unix(&self, c: Civil) -> Option<i64> {
        let t = c
            .date
            .with_hms(c.hour, c.minute, c.second)
            .ok()?
            .assume_utc();
        Some(t.unix_timestamp() - self.0)
    }
}

#[test]
fn begin_forms_in_local_time() {
    // 2026-01-05 10:30:00 at UTC+1 (09:30:00Z).
    let zone = FixedZone(3600);
    let now = MON / 1000 + 9 * 3600 + 30 * 60;
    let begin = |text: &str| parse_begin(text, now, &zone);
    let local = |day: i64, h: i64, m: i64, s: i64| {
        (MON / 1000 + day * 86_400 + h * 3600 + m * 60 + s - 3600) as u64
    };
    assert_eq!(begin("now"), Ok(now as u64));
    assert_eq!(begin("now+60"), Ok(now as u64 + 60));
    assert_eq!(begin("now+30minutes"), Ok(now as u64 + 1800));
    assert_eq!(begin("NOW+1hour"), Ok(now as u64 + 3600));
    assert_eq!(begin("now+2days"), Ok(now as u64 + 2 * 86_400));
    assert_eq!(begin("now+1w"), Ok(now as u64 + 7 * 86_400));
    // A time of day: today while ahead, else tomorrow.
    assert_eq!(begin("16:00"), Ok(local(0, 16, 0, 0)));
    assert_eq!(begin("16:00:30"), Ok(local(0, 16, 0, 30)));
    assert_eq!(begin("10:30"), Ok(local(1, 10, 30, 0)));
    assert_eq!(begin("9:15"), Ok(local(1, 9, 15, 0)));
    assert_eq!(begin("4:00 PM"), Ok(local(0, 16, 0, 0)));
    assert_eq!(begin("12:00am"), Ok(local(1, 0, 0, 0)));
    assert_eq!(begin("midnight"), Ok(local(1, 0, 0, 0)));
    assert_eq!(begin("noon"), Ok(local(0, 12, 0, 0)));
    assert_eq!(begin("elevenses"), Ok(local(0, 11, 0, 0)));
    assert_eq!(begin("fika"), Ok(local(0, 15, 0, 0)));
    assert_eq!(begin("teatime"), Ok(local(0, 16, 0, 0)));
    assert_eq!(begin("today"), Ok(local(0, 0, 0, 0)));
    assert_eq!(begin("tomorrow"), Ok(local(1, 0, 0, 0)));
    assert_eq!(begin("2026-12-24"), Ok(local(353, 0, 0, 0)));
    assert_eq!(begin("2026-12-24T16:00"), Ok(local(353, 16, 0, 0)));
    assert_eq!(begin("2026-12-24T16:00:05"), Ok(local(353, 16, 0, 5)));
    // A day in the past is kept: the job may start at once.
    assert_eq!(begin("2026-01-01"), Ok(local(-4, 0, 0, 0)));
}

#[test]
fn begin_refusals_name_the_input() {
    let zone = FixedZone(0);
    let now = MON / 1000;
    for bad in [
        "",
        "later",
        "now+",
        "now+x",
        "now+5years",
        "now-5",
        "25:00",
        "12:60",
        "1:2:3:4",
        "13:00pm",
        "2026-13-01",
        "2026-02-30",
        "2026-1-5",
        "2026-01-05T24:00",
        "16",
    ] {
        let err = parse_begin(bad, now, &zone).unwrap_err();
        assert!(matches!(err, BeginError::Form(_)), "{bad:?}: {err}");
        assert!(err.to_string().starts_with("invalid --begin '"), "{err}");
    }
    for far in [
        "now+366days",
        "now+99999999999999999999999",
        "2027-01-06",
        "2099-01-01T00:00",
    ] {
        assert_eq!(
            parse_begin(far, now, &zone).unwrap_err().to_string(),
            format!("--begin '{far}' is more than 365 days ahead")
        );
    }
    assert!(parse_begin("now+365days", now, &zone).is_ok());
}

#[test]
fn begin_in_the_hosts_zone_round_trips() {
    // Whatever the host's zone, a time of day comes back as that local time.
    let now = now_ms() / 1000;
    let secs = parse_begin("16:00", now, &SystemLocalTime).unwrap() as i64;
    let civil = SystemLocalTime.civil(secs).unwrap();
    assert_eq!((civil.hour, civil.minute, civil.second), (16, 0, 0));
    assert!(secs > now && secs <= now + 86_400 + 3600);
}
