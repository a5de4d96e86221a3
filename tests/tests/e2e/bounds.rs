//! End-to-end tests of the bounds on every input: each text has a limit that
//! the CLIs and schedd both enforce with the same message, task ranges cost what the array
//! has, a job's whole launch fits the links, invisible characters and odd values are refused,
//! users are held to `max_jobs_per_user`, and arbitrary requests to every RPC neither abort a
//! memory-limited schedd nor keep it from answering another client within a second. Hostile
//! clients run as `nobody` through the real CLIs or a raw gRPC client.

use serde_json::Value;
use std::time::{Duration, Instant};
use ysched_proto as pb;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const NOBODY: u32 = 65534;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Asserts a CLI refusal: exit 1, one `<tool>: error: ` line containing `message`, short.
fn assert_refused(out: &std::process::Output, tool: &str, message: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with(&format!("{tool}: error: ")), "{err}");
    assert!(err.contains(message), "expected {message:?} in {err:?}");
    // One line (an option's value parser adds clap's pointer to --help).
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        err.len() < 400,
        "a refusal echoes no more than an excerpt: {err}"
    );
}

/// What schedd answers a raw submit of `spec` (as root, skipping every check of ysub).
fn raw_submit(c: &TestCluster, spec: pb::JobSpec) -> Result<pb::SubmitReply, tonic::Status> {
    runtime().block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        client
            .submit(pb::SubmitRequest { spec: Some(spec) })
            .await
            .map(|r| r.into_inner())
    })
}

/// Asserts schedd refused with InvalidArgument and `message`, echoing no more than an excerpt.
fn assert_invalid(answer: Result<impl std::fmt::Debug, tonic::Status>, message: &str) {
    let status = answer.expect_err("schedd accepted it");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains(message),
        "expected {message:?} in {:?}",
        status.message()
    );
    assert!(status.message().len() < 400, "{}", status.message());
}

fn held(c: &TestCluster) -> pb::JobSpec {
    pb::JobSpec {
        name: "raw".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: c.work.display().to_string(),
        hold: true,
        ..Default::default()
    }
}

fn yq_json(out: &std::process::Output) -> Vec<Value> {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("yq json")
}

/// Runs `load` on another thread while timing a plain listing by another client (root,
/// schedd's socket) every 50 ms; returns the slowest answer.
fn slowest_answer_while<T: Send>(
    c: &TestCluster,
    load: impl FnOnce() -> T + Send,
) -> (T, Duration) {
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let prober = s.spawn(|| {
            let rt = runtime();
            rt.block_on(async {
                let mut client = ysub::client::connect(&c.socket()).await.unwrap();
                let (began, mut slowest, mut when) = (Instant::now(), Duration::ZERO, 0);
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let t = Instant::now();
                    client
                        .list_jobs(pb::ListJobsRequest {
                            job_ids: vec![1],
                            ..Default::default()
                        })
                        .await
                        .expect("another client's listing");
                    if t.elapsed() > slowest {
                        slowest = t.elapsed();
                        when = (t - began).as_millis();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                eprintln!("the slowest answer to another client: {slowest:?}, {when} ms in");
                slowest
            })
        });
        let result = load();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (result, prober.join().unwrap())
    })
}

#[test]
fn task_ranges_cost_the_tasks_that_exist_and_requests_are_bounded() {
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)]);
    c.restart_schedd_with_memory_limit(1 << 30);
    let plain = c.submit(&["--hold", "--wrap", "true"]);
    assert_eq!(plain, 1);
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &[
            "--parsable",
            "--hold",
            "--array",
            "0-9999",
            "--wrap",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let array: u64 = stdout(&out).trim().parse().unwrap();

    // 28 bytes that made schedd allocate 16 GiB and abort: the first missing task, at once.
    for (huge, missing) in [
        ("0-4294967294", 10_000),
        ("0-99999999", 10_000),
        ("0-4294967294:3", 10_002),
    ] {
        let name = format!("{array}_[{huge}]");
        let out = c.run_as(NOBODY, NOBODY, "yq", &["-j", &name]);
        assert_refused(
            &out,
            "yq",
            &format!("job {array}_{missing} not found (array {array} has tasks 0-9999)"),
        );
    }
    // A task the array does not have is still named, wherever it is.
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "yq",
        &["-j", &format!("{array}_[5-9,20000]")],
    );
    assert_refused(&out, "yq", &format!("job {array}_20000 not found"));

    // 1,000 names of the whole array (15 KB): one resolution; others are answered meanwhile.
    let names = vec![format!("{array}_[0-9999]"); 1000].join(",");
    let (out, slowest) = slowest_answer_while(&c, || {
        c.run_as(NOBODY, NOBODY, "yq", &["--json", "-j", &names])
    });
    assert_eq!(yq_json(&out).len(), 10_000);
    assert!(
        slowest < Duration::from_secs(1),
        "another client waited {slowest:?}"
    );

    // More names than a request may carry: refused by yq, and by schedd from a raw client.
    let names = vec![plain.to_string(); 1001].join(",");
    let out = c.run_as(NOBODY, NOBODY, "yq", &["-j", &names]);
    assert_refused(
        &out,
        "yq",
        "job ids in one request: 1001; the limit is 1000 (fixed)",
    );
    let out = c.run_as(NOBODY, NOBODY, "ycancel", &[&names]);
    assert_refused(
        &out,
        "ycancel",
        "job ids in one request: 1001; the limit is 1000 (fixed)",
    );
    let answer = runtime().block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        client
            .list_jobs(pb::ListJobsRequest {
                targets: vec![format!("{array}_[0-3]"); 1001],
                ..Default::default()
            })
            .await
    });
    assert_invalid(
        answer,
        "job ids in one request: 1001; the limit is 1000 (fixed)",
    );
    let answer = runtime().block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        client
            .get_job(pb::JobRef {
                job_id: 0,
                target: format!("{array}_[{}]", "1,".repeat(600)),
            })
            .await
    });
    assert_invalid(answer, "job id is 1204 bytes; the limit is 1024 (fixed)");

    // The same names cancel: every task, once.
    let names = vec![format!("{array}_[0-9999]"); 1000].join(",");
    let out = c.run_as(NOBODY, NOBODY, "ycancel", &["-v", &names]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 10_000);
    assert!(c.schedd_alive(), "schedd died:\n{}", c.logs());
    assert_eq!(c.job(plain)["state"], "HELD");
}

/// `ysub` refuses each over-long text before sending; schedd refuses it again, with the same
/// message, from a client that skips ysub.
#[test]
fn every_text_has_a_limit_checked_by_the_cli_and_again_by_schedd() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)]);
    let long = |n: usize| "x".repeat(n);
    // (ysub options, the same on the wire, the message). A command-line argument is at most
    // 128 KiB (Linux), so the CLI cases use 100 KB; the raw ones go up to megabytes.
    let cases: Vec<(Vec<String>, pb::JobSpec, &str)> = vec![
        (
            vec!["-J".into(), long(100_000)],
            pb::JobSpec {
                name: long(12 << 20),
                ..held(&c)
            },
            "job name is",
        ),
        (
            vec!["-A".into(), long(100_000)],
            pb::JobSpec {
                account: long(3_900_000),
                ..held(&c)
            },
            "account is",
        ),
        (
            vec!["-p".into(), long(100_000)],
            pb::JobSpec {
                tier: long(100_000),
                ..held(&c)
            },
            "tier is 100000 bytes; the limit is 64 (fixed)",
        ),
        (
            vec!["--gpu-type".into(), long(100_000)],
            pb::JobSpec {
                gpu_type: long(100_000),
                ..held(&c)
            },
            "GPU model is 100000 bytes; the limit is 64 (fixed)",
        ),
        (
            vec!["--constraint".into(), long(100_000)],
            pb::JobSpec {
                constraints: vec![long(100_000)],
                ..held(&c)
            },
            "feature is 100000 bytes; the limit is 64 (fixed)",
        ),
        (
            vec!["-D".into(), format!("/{}", long(100_000))],
            pb::JobSpec {
                workdir: format!("/{}", long(8_900_000)),
                ..held(&c)
            },
            "working directory: path is",
        ),
        (
            vec!["-o".into(), long(100_000)],
            pb::JobSpec {
                stdout_path: long(100_000),
                ..held(&c)
            },
            "output file: path is",
        ),
        (
            vec!["--checkpoint-dir".into(), long(5_000)],
            pb::JobSpec {
                checkpoint_dir: long(5_000),
                ..held(&c)
            },
            "checkpoint directory: path is",
        ),
        (
            vec![
                "--dependency".into(),
                format!("afterok:{}", "1:".repeat(600)),
            ],
            pb::JobSpec {
                dependency: format!("afterok:{}", "1:".repeat(600)),
                ..held(&c)
            },
            "--dependency is 1208 bytes; the limit is 1024 (fixed)",
        ),
    ];
    for (args, spec, message) in cases {
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        argv.extend(["--hold", "--wrap", "true"]);
        let out = c.run_as(NOBODY, NOBODY, "ysub", &argv);
        assert_refused(&out, "ysub", message);
        assert_invalid(raw_submit(&c, spec), message);
    }
    // User names, drain reasons and node names.
    let out = c.run_as(NOBODY, NOBODY, "yq", &["-u", &long(100_000)]);
    assert_refused(
        &out,
        "yq",
        "user name is 100000 bytes; the limit is 128 (fixed)",
    );
    let out = c.run_as(NOBODY, NOBODY, "ycancel", &["-u", &long(100_000)]);
    assert_refused(
        &out,
        "ycancel",
        "user name is 100000 bytes; the limit is 128 (fixed)",
    );
    let out = c.run("yctl", &["drain", "n1", "--reason", &long(100_000)]);
    assert_refused(
        &out,
        "yctl",
        "drain reason is 100000 bytes; the limit is 256 (fixed)",
    );
    let out = c.run("yctl", &["drain", &long(300), "--reason", "r"]);
    assert_refused(
        &out,
        "yctl",
        "node name is 300 bytes; the limit is 255 (fixed)",
    );
    runtime().block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        let answer = client
            .list_jobs(pb::ListJobsRequest {
                user: long(3 << 20),
                ..Default::default()
            })
            .await;
        assert_invalid(
            answer,
            "user name is 3145728 bytes; the limit is 128 (fixed)",
        );
        let answer = client
            .cancel(pb::CancelRequest {
                user: long(1000),
                ..Default::default()
            })
            .await;
        assert_invalid(answer, "user name is 1000 bytes; the limit is 128 (fixed)");
        let answer = client
            .drain(pb::DrainRequest {
                name: "n1".into(),
                reason: long(5 << 20),
            })
            .await;
        assert_invalid(
            answer,
            "drain reason is 5242880 bytes; the limit is 256 (fixed)",
        );
    });
    assert!(c.jobs().is_empty(), "nothing was queued");
    assert_eq!(c.nodes()[0]["state"], "IDLE", "nothing was drained");
    // Names at their limit are fine, and listed whole.
    let name = long(256);
    let id = c.submit(&["--hold", "-J", &name, "--wrap", "true"]);
    assert_eq!(c.job(id)["name"], name.as_str());
}

#[test]
fn a_submit_is_refused_when_its_whole_launch_would_not_fit_and_one_that_fits_reaches_its_node() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)]);
    let config = ysched_common::Config::load_from(&c.conf).unwrap();
    // A poison job: a huge working directory, a relative checkpoint directory and
    // an array. Refused at submit, before anything is queued.
    let poison = pb::JobSpec {
        workdir: format!("/{}", "d".repeat(8_900_000)),
        checkpoint_dir: "ck".into(),
        array: "0-59".into(),
        ..held(&c)
    };
    assert_invalid(
        raw_submit(&c, poison),
        "working directory: path is 8900001 bytes",
    );
    // Arguments beyond what the launch may carry, with a script and environment each within
    // their own limit.
    let script = format!("#!/bin/sh\nexit 0\n#{}", "s".repeat((4 << 20) - 20));
    let over = pb::JobSpec {
        script: script.clone(),
        env: [("BIG".to_string(), "e".repeat(3 << 20))].into(),
        args: vec!["a".repeat(100_000); 40],
        ..held(&c)
    };
    let refusal = raw_submit(&c, over.clone()).unwrap_err();
    assert_eq!(refusal.code(), tonic::Code::InvalidArgument, "{refusal:?}");
    let message = refusal.message();
    assert!(
        message.starts_with("the job's launch message would be 10.9 MiB (script 4.0 MiB, ")
            && message.contains("arguments 3.9 MiB in 40,")
            && message.ends_with("; the limit is 10.0 MiB (2 x scheduler.max_script_mib + 2 MiB)"),
        "{message}"
    );
    let err = ysub::submit::check_payload_size(&over, &config)
        .unwrap_err()
        .to_string();
    assert_eq!(err, message, "ysub says the same");

    // Another user's job runs meanwhile; it must not be touched by what follows.
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "-G", "1", "--wrap", "sleep 120"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let theirs: u64 = stdout(&out).trim().parse().unwrap();
    c.wait_state(theirs, "RUNNING", Duration::from_secs(20));
    // A launch at its limit: accepted, and its LaunchJob reaches the agent (whatever becomes
    // of the exec of a 3 MiB environment there), once, not cycled as undeliverable.
    let parts_without_args = over.args.len() - 19;
    let mut at_limit = pb::JobSpec {
        hold: false,
        args: vec!["a".repeat(100_000); parts_without_args],
        ..over
    };
    let size = |spec: &pb::JobSpec| {
        let (env_bytes, env_vars) = ysched_common::limits::env_bytes(&spec.env);
        ysched_common::limits::launch_size(&ysched_common::limits::LaunchParts {
            script: &spec.script,
            env_bytes,
            env_vars,
            args: &spec.args,
            name: &spec.name,
            workdir: &spec.workdir,
            stdout: &spec.stdout_path,
            stderr: &spec.stderr_path,
            checkpoint_dir: None,
        })
    };
    let room = config.max_launch_bytes() - size(&at_limit);
    at_limit.args.push("a".repeat(room as usize - 6));
    assert_eq!(size(&at_limit), config.max_launch_bytes());
    let id = raw_submit(&c, at_limit)
        .expect("a launch at its limit")
        .job_id;
    let job = wait_terminal(&c, id);
    let reason = job["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        !reason.contains("attempt") && !reason.contains("never reached"),
        "the launch did not reach its node: {job}\n{}",
        c.logs()
    );
    let events = stdout(&c.run("yctl", &["show", "job", &id.to_string()]));
    // Placed once: its launch was delivered the first time, not retried as undeliverable.
    let history = events.split("Events:").nth(1).unwrap_or_default();
    assert_eq!(history.matches("scheduled").count(), 1, "{history}");
    let theirs = c.job(theirs);
    assert_eq!(
        (theirs["state"].as_str(), theirs["restart_count"].as_u64()),
        (Some("RUNNING"), Some(0)),
        "{theirs}"
    );
}

fn wait_terminal(c: &TestCluster, id: u64) -> Value {
    let start = Instant::now();
    loop {
        let job = c.job(id);
        let state = job["state"].as_str().unwrap_or_default().to_string();
        if !["PENDING", "RUNNING", "HELD", "PREEMPTING"].contains(&state.as_str()) {
            return job;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "job {id} still {state}\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn invisible_characters_and_odd_values_are_refused_with_a_clear_message() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)]);
    // Zero-width space, LRM, RLM, BOM and ALM pass no more than control characters.
    for (c_, code) in [
        ('\u{200b}', "U+200B"),
        ('\u{200e}', "U+200E"),
        ('\u{200f}', "U+200F"),
        ('\u{feff}', "U+FEFF"),
        ('\u{061c}', "U+061C"),
    ] {
        let name = format!("train{c_}ing");
        let out = c.run_as(
            NOBODY,
            NOBODY,
            "ysub",
            &["-J", &name, "--hold", "--wrap", "true"],
        );
        assert_refused(
            &out,
            "ysub",
            &format!("contains an invisible formatting character ({code})"),
        );
        assert!(!stderr(&out).contains(c_), "echoed raw: {:?}", stderr(&out));
        assert_invalid(
            raw_submit(&c, pb::JobSpec { name, ..held(&c) }),
            &format!("({code})"),
        );
        assert_invalid(
            raw_submit(
                &c,
                pb::JobSpec {
                    account: format!("a{c_}"),
                    ..held(&c)
                },
            ),
            &format!("({code})"),
        );
    }
    // Odd values.
    for (args, message) in [
        (
            &["-t", "1:99:99"][..],
            "invalid time limit '1:99:99': minutes must be 0 to 59 (got 99)",
        ),
        (
            &["-t", "00:60"],
            "invalid time limit '00:60': seconds must be 0 to 59 (got 60)",
        ),
        (&["--mem", "0"], "--mem 0 asks for no memory"),
        (&["-p", ""], "-p/--priority is empty"),
        (&["--gpu-type", ""], "--gpu-type is empty"),
        (&["--constraint", ""], "--constraint is empty"),
        (&["-D", ""], "-D/--chdir is empty"),
    ] {
        let out = c.run_as(
            NOBODY,
            NOBODY,
            "ysub",
            &[args, &["--hold", "--wrap", "true"]].concat(),
        );
        assert_refused(&out, "ysub", message);
    }
    assert_invalid(
        raw_submit(
            &c,
            pb::JobSpec {
                constraints: vec!["ib".into(), " ".into()],
                ..held(&c)
            },
        ),
        "an empty feature in --constraint",
    );
    assert!(c.jobs().is_empty(), "nothing was queued");
    // An index named many times is one task; a text beyond the limit is refused for it.
    let sevens = vec!["7"; 500].join(",");
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "--hold", "--array", &sevens, "--wrap", "true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let array: u64 = stdout(&out).trim().parse().unwrap();
    let tasks = yq_json(&c.run("yq", &["--json", "-j", &array.to_string()]));
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["display_id"], format!("{array}_7").as_str());
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &[
            "--hold",
            "--array",
            &vec!["7"; 20_000].join(","),
            "--wrap",
            "true",
        ],
    );
    assert_refused(
        &out,
        "ysub",
        "--array is 39999 bytes; the limit is 1024 (fixed)",
    );

    // A config whose heartbeat or node timeout is 0 keeps schedd from starting, saying why.
    for (key, message) in [
        (
            "heartbeat_secs = 0",
            "scheduler.heartbeat_secs = 0 is out of range",
        ),
        (
            "node_timeout_secs = 0",
            "scheduler.node_timeout_secs = 0 must be at least",
        ),
    ] {
        let conf = c.dir.path().join("bad.toml");
        let text = std::fs::read_to_string(&c.conf)
            .unwrap()
            .replace(
                "heartbeat_secs = 2\n",
                &format!("heartbeat_secs = 2\n{key}\n"),
            )
            .replacen(
                "heartbeat_secs = 2\nheartbeat_secs = 0",
                "heartbeat_secs = 0",
                1,
            );
        std::fs::write(&conf, text).unwrap();
        let out = std::process::Command::new(bin_dir().join("schedd"))
            .env("YSCHED_CONF", &conf)
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(stderr(&out).contains(message), "{}", stderr(&out));
    }
}

#[test]
fn a_user_is_held_to_max_jobs_per_user_in_all_and_per_tier() {
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 2, A100)],
        "max_jobs_per_user = 30",
        "[tiers.medium]\nvalue = 1000\n[tiers.low]\nvalue = 100\nmax_jobs_per_user = 10\n",
    );
    let submit_as_nobody = |c: &TestCluster, args: &[&str]| {
        c.run_as(
            NOBODY,
            NOBODY,
            "ysub",
            &[&["--parsable", "--hold"], args, &["--wrap", "true"]].concat(),
        )
    };
    let out = submit_as_nobody(&c, &["-p", "low", "--array", "0-10"]);
    assert_refused(
        &out,
        "ysub",
        "user nobody has 0 active jobs in tier 'low'; this array of 11 would exceed \
         tiers.low.max_jobs_per_user = 10",
    );
    let out = submit_as_nobody(&c, &["--array", "0-19"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first: u64 = stdout(&out).trim().parse().unwrap();
    let out = submit_as_nobody(&c, &["--array", "0-10"]);
    assert_refused(
        &out,
        "ysub",
        "user nobody has 20 active jobs; this array of 11 would exceed \
         scheduler.max_jobs_per_user = 30",
    );
    let out = submit_as_nobody(&c, &["-p", "low", "--array", "0-9"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = submit_as_nobody(&c, &[]);
    assert_refused(
        &out,
        "ysub",
        "user nobody has 30 active jobs; this job would exceed",
    );
    // Administrators are not limited.
    for _ in 0..3 {
        c.submit(&["--hold", "--array", "0-19", "--wrap", "true"]);
    }
    // Jobs that end leave room.
    let out = c.run_as(NOBODY, NOBODY, "ycancel", &[&format!("{first}_[0-4]")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = submit_as_nobody(&c, &["--array", "0-4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The count survives a restart of schedd.
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    let out = submit_as_nobody(&c, &[]);
    assert_refused(&out, "ysub", "user nobody has 30 active jobs");
    let jobs = c.jobs();
    let nobody = jobs.iter().filter(|j| j["user"] == "nobody").count();
    let active = jobs
        .iter()
        .filter(|j| j["user"] == "nobody" && j["state"] == "HELD")
        .count();
    assert_eq!((nobody, active), (35, 30));
}

/// Arbitrary and adversarial requests to every RPC, as `nobody`, against a schedd limited to
/// 1 GiB of address space: it never aborts, and answers another client within a second
/// throughout. `YSCHED_FUZZ_SECS` (default 8) sets how long; `YSCHED_FUZZ_SEED` replays a run.
#[test]
fn arbitrary_requests_to_every_rpc_never_abort_schedd_nor_starve_another_client() {
    let secs: f64 = std::env::var("YSCHED_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0);
    let seed: u64 = std::env::var("YSCHED_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("fuzz seed {seed} (YSCHED_FUZZ_SEED={seed} replays it), {secs} s");
    // nobody may keep 2,000 jobs: a hold or cancel of that many tasks holds schedd's lock
    // about 0.15 s in a debug build on two busy cores (a 10,000-task array's, 0.6 s; release
    // builds are ten times faster), so the bound of 1 s measures starvation, not the build.
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 4, A100)],
        "max_jobs_per_user = 2000",
        "",
    );
    c.restart_schedd_with_memory_limit(1 << 30);
    let config = ysched_common::Config::load_from(&c.conf).unwrap();
    let socket = c.socket().display().to_string();
    let max_message = config.max_message_bytes().to_string();
    let verbose = std::env::var_os("YSCHED_FUZZ_VERBOSE").is_some();
    let (stats, slowest) = slowest_answer_while(&c, || {
        let (secs, seed) = (secs.to_string(), seed.to_string());
        let mut args = vec![
            "--socket",
            &socket,
            "--seconds",
            &secs,
            "--seed",
            &seed,
            "--max-message",
            &max_message,
        ];
        if verbose {
            args.push("--verbose");
        }
        let fuzzer = c.spawn_as(NOBODY, NOBODY, "fuzz-client", &args);
        let out = fuzzer.wait_with_output().unwrap();
        if verbose {
            eprintln!("{}", stderr(&out));
        }
        assert!(out.status.success(), "fuzz-client failed: {}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("fuzz stats")
    });
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.schedd_pid().unwrap()))
        .unwrap_or_default();
    let peak = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or_default();
    eprintln!("fuzz: {stats}\nschedd {peak}, another client's slowest answer {slowest:?}");
    assert!(c.schedd_alive(), "schedd died (seed {seed}):\n{}", c.logs());
    assert!(
        slowest < Duration::from_secs(1),
        "another client waited {slowest:?} (seed {seed}): {stats}"
    );
    let per_rpc = stats["per_rpc"].as_object().unwrap();
    for rpc in ysched_tests::fuzz::RPCS {
        assert!(per_rpc.contains_key(rpc), "{rpc} never sent: {stats}");
    }
    let refused = stats["codes"]["InvalidArgument"].as_u64().unwrap_or(0);
    assert!(
        refused > 0 && stats["codes"]["Ok"].as_u64().unwrap_or(0) > 0,
        "{stats}"
    );
    // Still whole: it answers, and an ordinary user's submit and listing work.
    let log = std::fs::read_to_string(c.dir.path().join("schedd.log")).unwrap_or_default();
    assert!(
        !log.contains("panicked"),
        "schedd panicked (seed {seed}): {log}"
    );
    // The fuzzer's valid submits may have taken nobody to `max_jobs_per_user` (as the seed
    // has it): cancelling them is part of the check that the state is whole.
    let out = c.run_as(NOBODY, NOBODY, "ycancel", &["-u", "nobody"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "--hold", "--wrap", "true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = c.run_as(NOBODY, NOBODY, "yq", &["--me"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
