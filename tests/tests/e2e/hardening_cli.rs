//! End-to-end tests of what the CLIs refuse and how they print hostile text: numbers that
//! would overflow, control characters in names, oversized scripts, environments that are not
//! UTF-8, and argument errors, each as `<tool>: error: ...` with exit 1 and nothing queued.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};
use ysched_common::{Caller, Config};
use ysched_proto as pb;
use ysched_schedd::core::testkit::caller;
use ysched_schedd::shell::ApiError;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";

fn cluster() -> TestCluster {
    TestCluster::start(vec![FakeNode::uniform("n1", 4, A100)])
}

/// A CLI command set up as the harness sets up its own (config, work dir), for what
/// `TestCluster::run` cannot express: arguments and environment values that are not UTF-8.
fn tool(c: &TestCluster, bin: &str) -> Command {
    let mut cmd = Command::new(bin_dir().join(bin));
    cmd.env("YSCHED_CONF", &c.conf)
        .env_remove("RUST_LOG")
        .current_dir(&c.work)
        .stdin(Stdio::null());
    cmd
}

/// Asserts a refusal: exit 1, `<tool>: error: ` containing `message`, nothing on stdout.
fn assert_refused(out: &Output, tool: &str, message: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with(&format!("{tool}: error: ")), "{err}");
    assert!(err.contains(message), "expected {message:?} in {err:?}");
    assert!(stdout(out).is_empty(), "{}", stdout(out));
}

fn assert_nothing_queued(c: &TestCluster) {
    let jobs = c.jobs();
    assert!(jobs.is_empty(), "jobs were queued: {jobs:?}");
}

#[test]
fn overflowing_time_limits_are_refused_and_nothing_is_queued() {
    let c = cluster();
    // Without checked arithmetic these became a 44 s limit and 4659767778871345092 s.
    for limit in ["307445734561825861", "999999999999999999", "366-00:00:00"] {
        let out = c.run("ysub", &["-t", limit, "--wrap", "true"]);
        assert_refused(
            &out,
            "ysub",
            &format!("time limit '{limit}' exceeds the maximum of 365 days"),
        );
    }
    let out = c.run("ysub", &["--mem", "99999999999T", "--wrap", "true"]);
    assert_refused(&out, "ysub", "exceeds the maximum of 1024T");
    assert_nothing_queued(&c);
    // The maximum itself is fine.
    let id = c.submit(&["--hold", "-t", "365-00:00:00", "--wrap", "true"]);
    assert_eq!(c.job(id)["time_limit"], 365 * 86_400);
}

#[test]
fn control_characters_in_names_are_refused_at_submit() {
    let c = cluster();
    for (args, what) in [
        (&["-J", "bad\nname"][..], "a control character (U+000A)"),
        (&["-J", "\x1b[2J"], "a control character (U+001B)"),
        (
            &["-J", "ok", "-A", "acct\u{202e}"],
            "an invisible formatting character (U+202E)",
        ),
    ] {
        let out = c.run("ysub", &[args, &["--wrap", "true"]].concat());
        assert_refused(&out, "ysub", &format!("contains {what}"));
        assert!(!stderr(&out).contains('\x1b'), "{:?}", stderr(&out));
    }
    let out = c.run("ysub", &["-J", "bad\nname", "--wrap", "true"]);
    assert_eq!(
        stderr(&out),
        "ysub: error: job name \"bad\\nname\" contains a control character (U+000A); names may \
         not contain control characters\n"
    );
    assert_nothing_queued(&c);
}

/// A client that skips ysub's checks (a raw gRPC submit) meets the same refusals in schedd.
#[test]
fn schedd_refuses_what_ysub_would_have_refused() {
    let c = cluster();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let spec = || pb::JobSpec {
        name: "raw".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: c.work.display().to_string(),
        hold: true,
        ..Default::default()
    };
    let refusals = [
        (
            pb::JobSpec {
                name: "x\x1b[2J".into(),
                ..spec()
            },
            "job name \"x\\x1b[2J\" contains a control character (U+001B)",
        ),
        (
            pb::JobSpec {
                account: "a\nb".into(),
                ..spec()
            },
            "account \"a\\nb\" contains a control character (U+000A)",
        ),
        (
            pb::JobSpec {
                time_limit_secs: 4_659_767_778_871_345_092,
                ..spec()
            },
            "exceeds the maximum of 365 days",
        ),
        (
            pb::JobSpec {
                gpus: u32::MAX,
                ..spec()
            },
            "--gpus 4294967295 exceeds the maximum of 100000",
        ),
    ];
    runtime.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        for (spec, message) in refusals {
            let status = client
                .submit(pb::SubmitRequest { spec: Some(spec) })
                .await
                .unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(status.message().contains(message), "{status:?}");
        }
    });
    assert_nothing_queued(&c);
}

#[test]
fn printable_unicode_names_are_listed_intact() {
    let c = cluster();
    let name = "训练-é ✓ Ωmega";
    let id = c.submit(&["--hold", "-J", name, "-A", "équipe", "--wrap", "true"]);
    let out = c.run("yq", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with(&id.to_string()))
        .unwrap_or_else(|| panic!("job {id} not listed:\n{text}"));
    assert!(row.contains(&format!("  {name}  ")), "{text}");
    let job = c.job(id);
    assert_eq!(job["name"], name);
    assert_eq!(job["account"], "équipe");
    let out = c.run("yctl", &["show", "job", &id.to_string()]);
    assert!(
        stdout(&out).contains(&format!("JobName={name}\n")),
        "{}",
        stdout(&out)
    );
}

#[test]
fn oversized_script_is_refused_by_ysub_with_a_clear_message() {
    let c = cluster();
    let mut body = String::from("#!/bin/sh\ntrue\n");
    while body.len() < 5 * 1024 * 1024 {
        body.push_str("# padding padding padding padding padding padding padding\n");
    }
    body.truncate(5 * 1024 * 1024 - 1);
    body.push('\n');
    let script = c.script("big.sh", &body);
    let out = c.run("ysub", &[script.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "ysub: error: script is 5.0 MiB; the limit is 4 MiB (scheduler.max_script_mib)\n"
    );
    assert_nothing_queued(&c);
}

#[test]
fn non_utf8_environment_variable_is_refused_unless_not_exported() {
    let c = cluster();
    let bad = OsStr::from_bytes(b"caf\xe9");
    let out = tool(&c, "ysub")
        .env("YS_LATIN1_VAR", bad)
        .args(["--wrap", "true"])
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stderr(&out).as_str()),
        (
            Some(1),
            "ysub: error: environment variable YS_LATIN1_VAR is not valid UTF-8; ysched can \
             only carry UTF-8 environments: unset it or use --export=NONE/--export=VAR,...\n"
        )
    );
    let out = tool(&c, "ysub")
        .env("YS_LATIN1_VAR", bad)
        .args(["--export=YS_LATIN1_VAR", "--wrap", "true"])
        .output()
        .unwrap();
    assert_refused(
        &out,
        "ysub",
        "environment variable YS_LATIN1_VAR is not valid UTF-8",
    );
    assert_nothing_queued(&c);
    // Not exported: submitted.
    for export in ["--export=NONE", "--export=PATH"] {
        let out = tool(&c, "ysub")
            .env("YS_LATIN1_VAR", bad)
            .args([export, "--hold", "--parsable", "--wrap", "true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{export}: {}", stderr(&out));
    }
    assert_eq!(c.jobs().len(), 2);
}

#[test]
fn argument_errors_exit_1_with_tool_error() {
    let c = cluster();
    for (args, message) in [
        (
            &["-G", "4294967296"][..],
            "--gpus 4294967296 exceeds the maximum of 100000",
        ),
        (&["-N", "0"], "--nodes must be at least 1 (got 0)"),
        (&["-c", "0"], "--cpus must be at least 1 (got 0)"),
        (&["--grace", "-1"], "invalid --grace '-1'"),
    ] {
        let out = c.run("ysub", &[args, &["--wrap", "true"]].concat());
        assert_refused(&out, "ysub", message);
    }
    let out = tool(&c, "ysub")
        .arg("--wrap")
        .arg(OsStr::from_bytes(b"echo \xff"))
        .output()
        .unwrap();
    assert_refused(&out, "ysub", "argument 2 ('echo \\xff') is not valid UTF-8");
    assert_nothing_queued(&c);
    for (bin, args) in [
        ("yq", &["-j", "x"][..]),
        ("ycancel", &["nope"]),
        ("yctl", &["bogus"]),
    ] {
        let out = c.run(bin, args);
        assert_refused(&out, bin, "");
    }
    let out = c.run("yctl", &["drain", "n1", "--reason", "fan\x1b[2J"]);
    assert_refused(
        &out,
        "yctl",
        "drain reason \"fan\\x1b[2J\" contains a control character (U+001B)",
    );
    assert_eq!(c.nodes()[0]["state"], "IDLE");
    let out = c.run("ysub", &["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).starts_with("ysub "), "{}", stdout(&out));
}

// Unit tests of schedd's own checks, which a client without ysub's checks meets.

/// alice, in the group `ml`.
fn alice() -> Caller {
    caller("alice", 1000, &["ml"])
}

fn wire(name: &str) -> pb::JobSpec {
    pb::JobSpec {
        name: name.into(),
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: "/tmp".into(),
        ..Default::default()
    }
}

fn refusal(spec: pb::JobSpec) -> String {
    match ysched_schedd::submit::validate(spec.into(), &alice(), &Config::default()) {
        Err(ApiError::Invalid(message)) => message,
        Err(other) => panic!("not an invalid-argument refusal: {other:?}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn validate_refuses_control_characters_in_names_and_accounts() {
    assert_eq!(
        refusal(wire("bad\nname")),
        "job name \"bad\\nname\" contains a control character (U+000A); names may not contain \
         control characters"
    );
    assert!(refusal(wire("\x1b[2J")).contains("(U+001B)"));
    assert!(refusal(wire("a\u{2067}b")).contains("(U+2067)"));
    let err = refusal(pb::JobSpec {
        account: "ml\r".into(),
        ..wire("fine")
    });
    assert!(
        err.starts_with("account \"ml\\r\" contains a control character"),
        "{err}"
    );
    // A printable name passes.
    let result =
        ysched_schedd::submit::validate(wire("训练-é").into(), &alice(), &Config::default());
    assert!(result.is_ok(), "{:?}", result.err());
}

#[test]
fn validate_refuses_values_past_their_maximum() {
    let err = refusal(pb::JobSpec {
        time_limit_secs: 365 * 86_400 + 1,
        ..wire("t")
    });
    assert!(err.contains("exceeds the maximum of 365 days"), "{err}");
    for (spec, message) in [
        (
            pb::JobSpec {
                gpus: 100_001,
                ..wire("g")
            },
            "--gpus 100001 exceeds the maximum of 100000",
        ),
        (
            pb::JobSpec {
                nodes: u32::MAX,
                ..wire("n")
            },
            "--nodes 4294967295 exceeds the maximum of 10000",
        ),
        (
            pb::JobSpec {
                cpus: 100_001,
                ..wire("c")
            },
            "--cpus 100001 exceeds the maximum of 100000",
        ),
        (
            pb::JobSpec {
                mem_mib: u64::MAX,
                ..wire("m")
            },
            "exceeds the maximum of 1024T",
        ),
    ] {
        let err = refusal(spec);
        assert!(err.contains(message), "{err}");
    }
}

#[test]
fn schedd_payload_check_gives_the_same_message_as_ysub() {
    let config = Config::default();
    let spec = pb::JobSpec {
        script: "x".repeat(50_001_719),
        ..wire("big")
    };
    let message = "script is 47.7 MiB; the limit is 4 MiB (scheduler.max_script_mib)";
    assert_eq!(
        ysched_schedd::submit::check_payload_size(&spec.clone().into(), &config).unwrap_err(),
        message
    );
    assert_eq!(refusal(spec.clone()), message);
    assert_eq!(
        ysub::submit::check_payload_size(&spec, &config)
            .unwrap_err()
            .to_string(),
        message
    );
}
