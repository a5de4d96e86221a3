//! Tests of job arrays: index lists, task sets and job names.

use super::*;

fn set(text: &str) -> TaskSet {
    TaskSet::union(&parse_index_list(text, usize::MAX).unwrap()).unwrap()
}

#[test]
fn arrays_parse() {
    let a = ArraySpec::parse("0-99", DEFAULT_MAX_ARRAY_SIZE).unwrap();
    assert_eq!((a.count, a.min, a.max, a.max_running), (100, 0, 99, 0));
    let a = ArraySpec::parse("0-99:4", DEFAULT_MAX_ARRAY_SIZE).unwrap();
    assert_eq!(a.count, 25);
    assert_eq!(a.max, 96);
    assert_eq!(a.tasks()[..3], [0, 4, 8]);
    let a = ArraySpec::parse("1,5,9-12", DEFAULT_MAX_ARRAY_SIZE).unwrap();
    assert_eq!(a.tasks(), vec![1, 5, 9, 10, 11, 12]);
    assert_eq!(a.job_of(JobId(40), 9), Some(JobId(42)));
    assert_eq!(a.job_of(JobId(40), 2), None);
    assert_eq!(a.task_at(3), Some(10));
    assert_eq!(a.task_at(6), None);
    let a = ArraySpec::parse("0-199%16", DEFAULT_MAX_ARRAY_SIZE).unwrap();
    assert_eq!((a.count, a.max_running), (200, 16));
    assert_eq!(a.describe(), "0-199%16");
    let a = ArraySpec::parse(" 3, 1,3 ", 10).unwrap();
    assert_eq!(a.tasks(), vec![1, 3]);
    assert_eq!(
        ArraySpec::parse("0-10000", DEFAULT_MAX_ARRAY_SIZE)
            .unwrap()
            .count,
        10_001
    );
    assert_eq!(ArraySpec::first_n(5, 2).describe(), "0-4%2");
}

#[test]
fn an_index_named_many_times_is_one_task() {
    // Within the text limit, `7` 500 times is one task (it was "more than 10001 tasks").
    let sevens = vec!["7"; 500].join(",");
    let a = ArraySpec::parse(&sevens, DEFAULT_MAX_ARRAY_SIZE).unwrap();
    assert_eq!((a.count, a.min, a.max), (1, 7, 7));
    let ranges = vec!["0-10000"; 100].join(",");
    assert_eq!(
        ArraySpec::parse(&ranges, DEFAULT_MAX_ARRAY_SIZE)
            .unwrap()
            .count,
        10_001
    );
    // Beyond it, the text is refused for its length, before anything is parsed.
    let err = ArraySpec::parse(&vec!["7"; 20_000].join(","), DEFAULT_MAX_ARRAY_SIZE).unwrap_err();
    assert_eq!(err, "--array is 39999 bytes; the limit is 1024 (fixed)");
}

#[test]
fn overlapping_ranges_count_each_task_once() {
    // Same step, different offsets; different steps; ranges inside ranges.
    for (text, tasks) in [
        ("0-9:2,1-9:2", (0..=9).collect::<Vec<u32>>()),
        ("0-12:3,0-12:4", vec![0, 3, 4, 6, 8, 9, 12]),
        (
            "0-20,5-7,3-30:3",
            (0..=20).chain([21, 24, 27, 30]).collect(),
        ),
        ("5-9,0-4", (0..=9).collect()),
        ("1-3,2-6:2,100", vec![1, 2, 3, 4, 6, 100]),
    ] {
        let s = set(text);
        assert_eq!(s.iter().collect::<Vec<_>>(), tasks, "{text}");
        assert_eq!(s.count(), tasks.len() as u64, "{text}");
        for (place, task) in tasks.iter().enumerate() {
            assert_eq!(s.place_of(*task), Some(place as u64), "{text} {task}");
            assert_eq!(s.task_at(place as u64), Some(*task), "{text} {place}");
        }
        assert_eq!(s.place_of(101), None);
    }
}

#[test]
fn a_task_set_matches_the_expansion_of_random_lists() {
    // A small deterministic generator: lists of up to 12 ranges within 0..200.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u32| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % u64::from(n)) as u32
    };
    for _ in 0..2_000 {
        let k = 1 + next(12);
        let mut ranges = Vec::new();
        let mut expanded = std::collections::BTreeSet::new();
        for _ in 0..k {
            let first = next(200);
            let last = first + next(60);
            let step = 1 + next(7);
            let r = IndexRange::new(first, last, step);
            expanded.extend((r.first..=r.last).step_by(r.step as usize));
            ranges.push(r);
        }
        let s = TaskSet::union(&ranges).unwrap();
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            expanded.iter().copied().collect::<Vec<_>>(),
            "{ranges:?}"
        );
        for (place, task) in expanded.iter().enumerate() {
            assert_eq!(s.place_of(*task), Some(place as u64));
            assert_eq!(s.task_at(place as u64), Some(*task));
        }
    }
}

#[test]
fn huge_ranges_cost_their_text_not_their_size() {
    let started = std::time::Instant::now();
    let t = JobTarget::parse("1_[0-4294967294]").unwrap();
    assert_eq!(t.tasks_named(), Some(4_294_967_295));
    assert_eq!(t.first_outside(0, 99), Some(100));
    assert_eq!(t.first_outside(0, u32::MAX), None);
    // Disjoint huge ranges are one run each.
    let s = set("0-4294967294:2");
    assert_eq!(s.count(), 2_147_483_648);
    assert_eq!(s.place_of(4_294_967_294), Some(2_147_483_647));
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // Overlapping ones wider than an array can be are refused, not laid out.
    let wide = [
        IndexRange::new(0, u32::MAX, 1),
        IndexRange::new(0, u32::MAX, 2),
    ];
    assert!(TaskSet::union(&wide).is_err());
}

#[test]
fn bad_arrays_are_named() {
    for (text, wanted) in [
        ("", "empty"),
        ("0-10001", "max_array_size"),
        ("5-1", "backwards"),
        ("0-9%0", "%0"),
        ("0-9%x", "not a number"),
        ("a-b", "not a task index"),
        ("1,,2", "empty index"),
        ("0-9:0", "step of 0"),
        ("3:2", "needs a range"),
    ] {
        let err = ArraySpec::parse(text, DEFAULT_MAX_ARRAY_SIZE).unwrap_err();
        assert!(err.contains(wanted), "{text}: {err}");
    }
    // A long bad value is echoed short.
    let err =
        ArraySpec::parse(&format!("{}x", "1".repeat(900)), DEFAULT_MAX_ARRAY_SIZE).unwrap_err();
    assert!(err.len() < 200, "{err}");
}

#[test]
fn specs_read_back_from_the_store_have_their_tasks() {
    let a = ArraySpec::parse("1,5,9-12%2", DEFAULT_MAX_ARRAY_SIZE).unwrap();
    let json = serde_json::to_string(&a).unwrap();
    assert_eq!(
        json,
        r#"{"indices":"1,5,9-12","max_running":2,"count":6,"min":1,"max":12}"#
    );
    let back: ArraySpec = serde_json::from_str(&json).unwrap();
    assert_eq!(back, a);
    assert_eq!(back.job_of(JobId(40), 12), Some(JobId(45)));
}

#[test]
fn targets_parse_and_print() {
    assert_eq!(
        JobTarget::parse("12").unwrap(),
        JobTarget {
            id: JobId(12),
            tasks: None
        }
    );
    let t = JobTarget::parse("12_7").unwrap();
    assert_eq!(t.tasks, Some(vec![IndexRange::single(7)]));
    assert_eq!(t.single_task(), Some(7));
    assert_eq!(
        JobTarget::parse("12_[1-3,9]").unwrap().tasks,
        Some(vec![IndexRange::new(1, 3, 1), IndexRange::single(9)])
    );
    assert_eq!(
        JobTarget::parse("12_[40-199%16]").unwrap().tasks_named(),
        Some(160)
    );
    assert_eq!(
        JobTarget::parse("12_[1-3,9]").unwrap().to_string(),
        "12_[1-3,9]"
    );
    assert_eq!(
        JobTarget::parse("12_[0-10:4]").unwrap().to_string(),
        "12_[0-8:4]"
    );
    assert_eq!(JobTarget::parse("12_7").unwrap().to_string(), "12_7");
    assert_eq!(JobTarget::parse("12_[7,7]").unwrap().single_task(), Some(7));
    for bad in ["", "x", "12_", "12_[a]", "0", "-3"] {
        assert!(JobTarget::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn targets_are_bounded() {
    let err = JobTarget::parse(&format!("1_[{}]", "1,".repeat(600))).unwrap_err();
    assert_eq!(err, "job id is 1204 bytes; the limit is 1024 (fixed)");
    let many = vec!["1"; 200].join(",");
    let err = JobTarget::parse(&format!("1_[{many}]")).unwrap_err();
    assert!(
        err.ends_with("task ranges in one job id: 200; the limit is 128 (fixed)"),
        "{err}"
    );
    let err = JobTarget::parse(&format!("{}x", "9".repeat(500))).unwrap_err();
    assert!(err.len() < 120, "{err}");
}

#[test]
fn targets_of_one_job_are_merged() {
    let parse = |s: &str| JobTarget::parse(s).unwrap();
    let merged = merge_targets(&[
        parse("12_3"),
        parse("13"),
        parse("12_[5-9]"),
        parse("12"),
        parse("12_3"),
    ]);
    assert_eq!(
        merged.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["12_[3,5-9]", "13", "12"]
    );
}

#[test]
fn tasks_fold() {
    assert_eq!(fold_tasks(&[1, 5, 9, 10, 11, 12]), "1,5,9-12");
    assert_eq!(fold_tasks(&[40]), "40");
    assert_eq!(fold_tasks(&[]), "");
    assert_eq!(set("0-99:4,101").describe(80), "0-96:4,101");
    assert_eq!(set("0-99:2").describe(3), "0-9…");
    let a = ArrayTask {
        array_id: JobId(12),
        task: 7,
    };
    assert_eq!(display_id(JobId(19), Some(&a)), "12_7");
    assert_eq!(display_id(JobId(19), None), "19");
}

#[test]
fn the_default_array_limit_is_the_one_the_guides_state() {
    // User guide, admin guide and the error agree: the largest index is 10000 by default.
    assert!(ArraySpec::parse("0-10000", DEFAULT_MAX_ARRAY_SIZE).is_ok());
    assert_eq!(
        ArraySpec::parse("0-10001", DEFAULT_MAX_ARRAY_SIZE).unwrap_err(),
        "--array '0-10001': index 10001 is above the largest allowed, 10000 \
         (scheduler.max_array_size = 10001)"
    );
    let guide = include_str!("../../../docs/user-guide.md");
    assert!(
        guide.contains(
            "index 10001\nis above the largest allowed, 10000 (scheduler.max_array_size = 10001)"
        ),
        "the user guide quotes the error as it is"
    );
}
