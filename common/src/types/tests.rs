//! Tests of the job and node records.

use super::*;

#[test]
fn gpu_types() {
    assert!(gpu_type_matches("A100", "NVIDIA A100-SXM4-80GB"));
    assert!(gpu_type_matches("a100", "NVIDIA A100-PCIE-40GB"));
    assert!(gpu_type_matches("A10", "NVIDIA A10"));
    assert!(!gpu_type_matches("A10", "NVIDIA A100-SXM4-80GB"));
    assert!(gpu_type_matches("H100", "NVIDIA H100 80GB HBM3"));
    assert!(!gpu_type_matches("", "NVIDIA A10"));
}

#[test]
fn states_parse() {
    assert_eq!(JobState::parse("pd"), Some(JobState::Pending));
    assert_eq!(JobState::parse("node_fail"), Some(JobState::NodeFail));
    assert_eq!(JobState::parse("bogus"), None);
    assert_eq!(JobState::parse("oom"), Some(JobState::OutOfMemory));
    assert_eq!(
        JobState::parse("OUT_OF_MEMORY"),
        Some(JobState::OutOfMemory)
    );
    assert!(JobState::OutOfMemory.is_terminal());
    assert!(JobState::Timeout.is_terminal());
    assert!(!JobState::Held.is_terminal());
}

/// A finished one-GPU job as most of a year of history is: its spec at the defaults but for
/// what a submit always sets.
fn finished_job() -> Job {
    Job {
        id: JobId(1_000_000),
        spec: std::sync::Arc::new(JobSpec {
            name: "train".into(),
            tier: "low".into(),
            account: "vision".into(),
            workdir: "/home/alice/run".into(),
            gpus: 1,
            cpus: 8,
            mem_mib: 32 * 1024,
            time_limit_secs: Some(86_400),
            ..JobSpec::default()
        }),
        owner: std::sync::Arc::new(Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into()],
        }),
        tier_value: 100,
        state: JobState::Completed,
        reason: String::new(),
        held_by: Default::default(),
        alloc: vec![],
        restart_count: 0,
        exit_code: Some(0),
        signal: None,
        submit_time: 1_764_000_000_000,
        start_time: Some(1_764_000_001_000),
        end_time: Some(1_764_000_601_000),
        launched: true,
        grace_secs: 30,
        checkpoint_dir: "/home/alice/.ysched/checkpoints/1000000".into(),
        stop: None,
        last_checkpoint: None,
        parts: Default::default(),
        launch_attempts: 0,
        queued_at: Some(1_764_000_000_000),
        array: None,
        run_ms_before: 0,
    }
}

#[test]
fn a_stored_job_leaves_its_defaults_out_and_reads_them_back() {
    let job = finished_job();
    let bytes = serde_json::to_vec(&job).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    for absent in [
        "\"script\"",
        "\"env\"",
        "\"reason\"",
        "\"signal\"",
        "\"mail_user\"",
        "\"parts\"",
    ] {
        assert!(
            !text.contains(absent),
            "{absent} at its default is stored: {text}"
        );
    }
    assert_eq!(serde_json::from_slice::<Job>(&bytes).unwrap(), job);
}

#[test]
fn a_stored_job_with_every_field_set_reads_back_whole() {
    let mut job = finished_job();
    job.spec = std::sync::Arc::new(JobSpec {
        name: "n".into(),
        tier: "high".into(),
        gpus: 2,
        gpu_types: vec!["A100".into()],
        cpus: 3,
        mem_mib: 4,
        time_limit_secs: Some(5),
        grace_secs: Some(6),
        checkpoint_dir: Some("/ck".into()),
        account: "a".into(),
        stdout_path: Some("/o".into()),
        stderr_path: Some("/e".into()),
        workdir: "/w".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        args: vec!["x".into()],
        env: [("K".to_string(), "V".to_string())].into(),
        hold: true,
        nodes: 2,
        no_requeue: true,
        interconnect: Some("ib".into()),
        constraints: vec!["nvlink".into()],
        warn_signal: Some(crate::signals::WarnSignal::parse("B:USR1@60").unwrap()),
        array: Some(crate::array::ArraySpec::parse("0-9%2", 100).unwrap()),
        dependency: Some(crate::dependency::Dependency {
            any: true,
            clauses: vec![crate::dependency::DepClause {
                kind: crate::dependency::DepKind::AfterOk,
                jobs: vec![JobId(7)],
            }],
            singleton: true,
            text: "afterok:7?singleton".into(),
        }),
        nodelist: vec!["n1".into()],
        exclude: vec!["n2".into()],
        exclusive: true,
        begin_unix_secs: Some(8),
        mail_types: vec!["END".into()],
        mail_user: "m@x".into(),
        ntasks_per_node: 9,
        partition: "p".into(),
        qos: "q".into(),
        slurm_env: true,
        open_append: true,
        comment: "c".into(),
    });
    job.reason = "r".into();
    job.alloc = vec![NodeAlloc {
        node: "n1".into(),
        gpus: vec![0, 1],
        cpus: 3,
        mem_mib: 4,
    }];
    job.restart_count = 1;
    job.exit_code = Some(2);
    job.signal = Some(15);
    job.stop = Some(Box::new(StopRequest {
        reason: StopReason::Preempt { by: JobId(3) },
        at: 11,
        grace_secs: 12,
    }));
    job.last_checkpoint = Some(13);
    job.parts = PartsProgress::from(Parts {
        nodelist: vec!["n1".into(), "n2".into()],
        ended: vec![],
        first_failure: None,
        master_port: 29_500,
    });
    job.launch_attempts = 2;
    job.array = Some(crate::array::ArrayTask {
        array_id: JobId(999_990),
        task: 10,
    });
    job.run_ms_before = 14;
    let bytes = serde_json::to_vec(&job).unwrap();
    assert_eq!(serde_json::from_slice::<Job>(&bytes).unwrap(), job);
    // Not one field of the spec is left at its default here, so none may be left out.
    let spec = serde_json::to_value(&*job.spec).unwrap();
    let fields = spec.as_object().unwrap().len();
    assert_eq!(fields, 36, "a new JobSpec field? set it above: {spec}");
}

#[test]
fn a_job_stored_by_an_earlier_version_with_every_field_written_still_reads() {
    // As this version's predecessors stored a job: every field, defaults included.
    let old = r#"{"id":1000000,"spec":{"name":"train","tier":"low","gpus":1,"gpu_types":[],
        "cpus":8,"mem_mib":32768,"time_limit_secs":86400,"grace_secs":null,
        "checkpoint_dir":null,"account":"vision","stdout_path":null,"stderr_path":null,
        "workdir":"/home/alice/run","script":"","args":[],"env":{},"hold":false,"nodes":0,
        "no_requeue":false,"interconnect":null,"constraints":[],"warn_signal":null,
        "array":null,"dependency":null,"nodelist":[],"exclude":[],"exclusive":false,
        "begin_unix_secs":null,"mail_types":[],"mail_user":"","ntasks_per_node":0,
        "partition":"","qos":"","slurm_env":false,"open_append":false,"comment":""},
        "owner":{"uid":1000,"gid":1000,"user":"alice","groups":["alice"]},"tier_value":100,
        "state":"COMPLETED","reason":"","alloc":[],"restart_count":0,"exit_code":0,
        "signal":null,"submit_time":1764000000000,"start_time":1764000001000,
        "end_time":1764000601000,"launched":true,"grace_secs":30,
        "checkpoint_dir":"/home/alice/.ysched/checkpoints/1000000","stop":null,
        "last_checkpoint":null,"parts":{"nodelist":[],"ended":[],"first_failure":null,
        "master_port":0},"launch_attempts":0,"queued_at":1764000000000,"array":null,
        "run_ms_before":0}"#;
    assert_eq!(serde_json::from_str::<Job>(old).unwrap(), finished_job());
    // Less than half of it is written now.
    let old_len = old.chars().filter(|c| !c.is_whitespace()).count();
    let new_len = serde_json::to_vec(&finished_job()).unwrap().len();
    assert!(new_len * 2 < old_len, "{new_len} bytes against {old_len}");
}
