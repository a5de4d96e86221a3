//! Tests of the input limits: each check's message, the admin guide's table, the launch size.

use super::*;

#[test]
fn refusals_name_the_field_the_size_and_the_limit() {
    assert_eq!(
        JOB_NAME.check_len(&"x".repeat(100_000)).unwrap_err(),
        "job name is 100000 bytes; the limit is 256 (fixed)"
    );
    assert_eq!(JOB_NAME.check_len(&"x".repeat(256)), Ok(()));
    assert_eq!(
        TARGETS.check_count(1001).unwrap_err(),
        "job ids in one request: 1001; the limit is 1000 (fixed)"
    );
    // Bytes, not characters: 86 three-byte characters are 258 bytes.
    assert!(JOB_NAME.check_len(&"训".repeat(86)).is_err());
}

#[test]
fn the_admin_guide_lists_every_limit_with_its_default_and_key() {
    let guide = include_str!("../../../docs/admin-guide.md");
    let section = guide
        .split("\n## Limits\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Limits section in docs/admin-guide.md");
    for limit in ALL {
        let row = section
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", limit.what)))
            .unwrap_or_else(|| panic!("no row for '{}' in the Limits table", limit.what));
        let plain = row.replace('`', "");
        let cells: Vec<&str> = plain.split(" | ").collect();
        assert_eq!(
            cells.get(2).copied(),
            Some(limit.default_text().as_str()),
            "default of '{}': {row}",
            limit.what
        );
        assert!(
            cells
                .get(3)
                .is_some_and(|k| k.trim_end_matches(" |") == limit.key),
            "config key of '{}' should be '{}': {row}",
            limit.what,
            limit.key
        );
    }
}

#[test]
fn the_admin_guide_lists_every_maximum() {
    let guide = include_str!("../../../docs/admin-guide.md");
    for maximum in MAXIMA {
        let row = guide
            .lines()
            .find(|l| {
                l.replace('`', "")
                    .starts_with(&format!("| {} |", maximum.what))
            })
            .unwrap_or_else(|| panic!("no row for '{}' in the Limits table", maximum.what));
        let plain = row.replace('`', "");
        let cells: Vec<&str> = plain.split(" | ").collect();
        assert_eq!(cells.get(2).copied(), Some(maximum.shown), "{row}");
        assert_eq!(cells.get(3).copied(), Some("fixed |"), "{row}");
    }
}

#[test]
fn maxima_refuse_in_the_form_the_parsers_use() {
    for maximum in MAXIMA.iter().filter(|m| m.written == Written::Plain) {
        assert_eq!(maximum.shown, maximum.max.to_string(), "{}", maximum.what);
    }
    assert_eq!(
        GPUS.check(100_001).unwrap_err(),
        "--gpus 100001 exceeds the maximum of 100000"
    );
    assert_eq!(GPUS.check(100_000), Ok(()));
    assert_eq!(
        MEM.check(MAX_MEM_MIB + 1).unwrap_err(),
        "memory size '1073741825M' exceeds the maximum of 1024T (1 PiB)"
    );
    assert_eq!(
        TIME_LIMIT.check(MAX_TIME_LIMIT_SECS + 1).unwrap_err(),
        "time limit '365-00:00:01' exceeds the maximum of 365 days (365-00:00:00)"
    );
    // What schedd writes for a value is what the CLI's parser refuses for that value.
    assert_eq!(
        crate::parse::parse_mem_mib("1073741825M")
            .unwrap_err()
            .to_string(),
        MEM.check(MAX_MEM_MIB + 1).unwrap_err()
    );
    assert_eq!(
        crate::parse::parse_time_limit("365-00:00:01")
            .unwrap_err()
            .to_string(),
        TIME_LIMIT.check(MAX_TIME_LIMIT_SECS + 1).unwrap_err()
    );
}

#[test]
fn the_defaults_in_the_table_are_the_configs() {
    let c = Config::default();
    assert_eq!(SCRIPT.max, c.max_script_bytes());
    assert_eq!(LAUNCH.max, c.max_launch_bytes());
    assert_eq!(ARRAY_SIZE.max, u64::from(c.scheduler.max_array_size));
    assert_eq!(JOBS_PER_USER.max, u64::from(c.scheduler.max_jobs_per_user));
    assert_eq!(max_jobs_named(&c), JOBS_NAMED.max);
}

#[test]
fn a_launch_at_its_limit_fits_every_link_with_the_largest_node_list() {
    for mib in [1, 4, 64, 1024] {
        let mut c = Config::default();
        c.scheduler.max_script_mib = mib;
        // The launch limit, the largest node list and 64 KiB for every other field.
        let worst = c.max_launch_bytes() + NODE_LIST_BYTES + (64 << 10);
        assert!(worst <= c.max_message_bytes() as u64, "{mib} MiB");
        // A script and an environment at their own limits are a launch within its limit.
        let script = "x".repeat(c.max_script_bytes() as usize);
        let parts = LaunchParts {
            script: &script,
            env_bytes: c.max_script_bytes(),
            env_vars: 200,
            args: &[],
            name: "job",
            workdir: "/home/alice",
            stdout: "",
            stderr: "",
            checkpoint_dir: None,
        };
        assert_eq!(check_launch_size(&parts, &c), Ok(()), "{mib} MiB");
    }
}

#[test]
fn a_submit_is_measured_with_its_paths_made_absolute() {
    let c = Config::default();
    let spec = |workdir: String, checkpoint: &str| crate::SubmitRequest {
        script: "#!/bin/sh\n".into(),
        workdir,
        checkpoint_dir: checkpoint.into(),
        ..Default::default()
    };
    let deep = format!("/{}", "d".repeat(3000));
    assert_eq!(check_submit(&spec(deep.clone(), "/ck"), &c), Ok(()));
    // Relative: 3001 + 1 + 1100 bytes once made absolute.
    assert_eq!(
        check_submit(&spec(deep.clone(), &"c".repeat(1100)), &c).unwrap_err(),
        "checkpoint directory: path is 4102 bytes; the limit is 4096 (fixed)"
    );
    let err = check_submit(&spec("/w".repeat(5 << 20), ""), &c).unwrap_err();
    assert_eq!(
        err,
        "working directory: path is 10485760 bytes; the limit is 4096 (fixed)"
    );
    // Arguments are part of the launch.
    let mut many = spec("/w".into(), "");
    many.args = vec!["x".repeat(1 << 20); 11];
    let err = check_submit(&many, &c).unwrap_err();
    assert!(
        err.starts_with("the job's launch message would be 11.1 MiB"),
        "{err}"
    );
}

#[test]
fn a_launch_over_its_limit_is_refused_with_its_parts() {
    let c = Config::default();
    let script = "x".repeat(4 << 20);
    let args = vec!["a".repeat(1 << 20); 3];
    let parts = LaunchParts {
        script: &script,
        env_bytes: 4 << 20,
        env_vars: 0,
        args: &args,
        name: "job",
        workdir: "/w",
        stdout: "",
        stderr: "",
        checkpoint_dir: Some("/w/ck"),
    };
    let err = check_launch_size(&parts, &c).unwrap_err();
    assert!(
        err.starts_with("the job's launch message would be 11.1 MiB (script 4.0 MiB, environment 4.0 MiB, arguments 3.0 MiB in 3,"),
        "{err}"
    );
    assert!(
        err.ends_with("the limit is 10.0 MiB (2 x scheduler.max_script_mib + 2 MiB)"),
        "{err}"
    );
}
