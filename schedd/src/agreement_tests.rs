//! The CLIs and `schedd` agree: for every limit and list of words both check, the same bad
//! value is refused with the same message by `ysub` or `yctl update` (before anything is
//! sent) and by `schedd`'s own checks (for a client that bypasses them). Each case runs the
//! real CLI path (its parser, then the spec or request it builds) and `schedd`'s validation
//! of what that CLI would have sent with the bad value in it.

use crate::submit;
use crate::update::{self, UpdateRequest};
use clap::Parser;
use ysched_common::{Caller, Config, Owner, SubmitRequest};
use ysched_proto as pb;
use ysub::submit::{build_spec, check_payload_size, resolve, SubmitContext, YsubCli};

fn alice() -> Caller {
    Caller::local(Owner {
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        groups: vec!["alice".into()],
    })
}

/// The spec `ysub WORDS --wrap true` sends, or its refusal.
fn ysub(words: &[&str]) -> Result<pb::JobSpec, String> {
    let line = ["ysub"]
        .iter()
        .chain(words)
        .chain(&["--wrap", "true"])
        .copied();
    let cli = YsubCli::try_parse_from(line).map_err(|e| ysub::args::clap_error_message(&e))?;
    let config = Config::default();
    let context = SubmitContext {
        cwd: "/tmp".into(),
        env: Vec::new(),
        max_array_size: config.scheduler.max_array_size,
    };
    let (options, script) = resolve(cli).map_err(|e| e.to_string())?;
    let spec = build_spec(&options, script, &context).map_err(|e| e.to_string())?;
    check_payload_size(&spec, &config).map_err(|e| e.to_string())?;
    Ok(spec)
}

/// `schedd`'s refusal of `spec`.
fn schedd(spec: pb::JobSpec) -> String {
    match submit::validate(SubmitRequest::from(spec), &alice(), &Config::default()) {
        Ok(_) => "accepted".into(),
        Err(e) => e.to_string(),
    }
}

/// What `ysub` sends when nothing is wrong, for `schedd`'s side to change one field of.
fn fine() -> pb::JobSpec {
    let spec = ysub(&[]).expect("a plain submit");
    assert_eq!(schedd(spec.clone()), "accepted");
    spec
}

#[test]
fn ysub_and_schedd_refuse_a_bad_submit_alike() {
    let long = |n: usize| "x".repeat(n);
    let (name, comment, partition) = (long(257), long(1025), long(65));
    let cases: Vec<(Vec<&str>, pb::JobSpec)> = vec![
        (
            vec!["--gpus", "100001"],
            pb::JobSpec {
                gpus: 100_001,
                ..fine()
            },
        ),
        (
            vec!["--nodes", "10001"],
            pb::JobSpec {
                nodes: 10_001,
                ..fine()
            },
        ),
        (
            vec!["--cpus", "100001"],
            pb::JobSpec {
                cpus: 100_001,
                ..fine()
            },
        ),
        (
            vec!["--ntasks-per-node", "10001"],
            pb::JobSpec {
                ntasks_per_node: 10_001,
                ..fine()
            },
        ),
        (
            vec!["--mem", "1073741825M"],
            pb::JobSpec {
                mem_mib: 1_073_741_825,
                ..fine()
            },
        ),
        (
            vec!["--time", "365-00:00:01"],
            pb::JobSpec {
                time_limit_secs: 365 * 86_400 + 1,
                ..fine()
            },
        ),
        (
            vec!["-J", &name],
            pb::JobSpec {
                name: name.clone(),
                ..fine()
            },
        ),
        (
            vec!["-J", "a\nb"],
            pb::JobSpec {
                name: "a\nb".into(),
                ..fine()
            },
        ),
        (
            vec!["--comment", &comment],
            pb::JobSpec {
                comment: comment.clone(),
                ..fine()
            },
        ),
        (
            vec!["--partition", &partition],
            pb::JobSpec {
                partition: partition.clone(),
                ..fine()
            },
        ),
        (
            vec!["--mail-user", "a\u{202e}b"],
            pb::JobSpec {
                mail_user: "a\u{202e}b".into(),
                ..fine()
            },
        ),
        (
            vec!["--mail-user=-oQ/tmp"],
            pb::JobSpec {
                mail_user: "-oQ/tmp".into(),
                ..fine()
            },
        ),
        (
            vec!["--array", "0-10001"],
            pb::JobSpec {
                array: "0-10001".into(),
                ..fine()
            },
        ),
        (
            vec!["--signal=USR1@70000"],
            pb::JobSpec {
                warn_signal: Some(pb::WarnSignal {
                    signal: 10,
                    secs: 70_000,
                    batch_only: false,
                }),
                ..fine()
            },
        ),
        (
            vec!["--signal=99"],
            pb::JobSpec {
                warn_signal: Some(pb::WarnSignal {
                    signal: 99,
                    secs: 60,
                    batch_only: false,
                }),
                ..fine()
            },
        ),
        (
            vec!["-w", "n1,a\u{202e}b"],
            pb::JobSpec {
                nodelist: vec!["n1".into(), "a\u{202e}b".into()],
                ..fine()
            },
        ),
        (
            vec!["--dependency", "afterok:x"],
            pb::JobSpec {
                dependency: "afterok:x".into(),
                ..fine()
            },
        ),
    ];
    let mail = |words: &[&str]| pb::JobSpec {
        mail_types: words.iter().map(|w| w.to_string()).collect(),
        ..fine()
    };
    let mail_cases = [
        (
            vec!["--mail-type", "END,STAGE_OUT"],
            mail(&["END", "STAGE_OUT"]),
        ),
        (vec!["--mail-type", "NONE,END"], mail(&["NONE", "END"])),
        (vec!["--mail-type", "ARRAY_TASKS"], mail(&["ARRAY_TASKS"])),
    ];
    for (words, spec) in cases.into_iter().chain(mail_cases) {
        let cli = ysub(&words).expect_err("ysub refuses it");
        assert_eq!(cli, schedd(spec), "ysub {words:?}");
    }
}

/// The request `yctl update 12 WORDS` sends, or its refusal.
fn yctl_update(words: &[&str]) -> Result<pb::UpdateJobRequest, String> {
    let args = ysub::admin::update::UpdateArgs {
        job: "12".into(),
        settings: words.iter().map(|w| w.to_string()).collect(),
        tier: None,
        time: None,
        name: None,
        dependency: None,
        hold: false,
        release: false,
        json: false,
    };
    ysub::admin::update::update_request(&args).map_err(|e| e.to_string())
}

fn schedd_update(request: pb::UpdateJobRequest) -> String {
    let request = UpdateRequest {
        tier: request.tier,
        time_limit_secs: request.time_limit_secs,
        name: request.name,
        dependency: request.dependency,
        hold: request.hold,
    };
    match update::validate(&request, &alice(), &Config::default()) {
        Ok(_) => "accepted".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn yctl_update_and_schedd_refuse_a_bad_update_alike() {
    let fine = || {
        let request = yctl_update(&["JobName=x"]).expect("a plain update");
        assert_eq!(schedd_update(request.clone()), "accepted");
        request
    };
    let (name, tier) = ("x".repeat(257), "x".repeat(65));
    let cases = [
        (
            "TimeLimit=365-00:00:01".to_string(),
            pb::UpdateJobRequest {
                time_limit_secs: Some(365 * 86_400 + 1),
                ..fine()
            },
        ),
        (
            format!("JobName={name}"),
            pb::UpdateJobRequest {
                name: Some(name.clone()),
                ..fine()
            },
        ),
        (
            format!("Tier={tier}"),
            pb::UpdateJobRequest {
                tier: Some(tier.clone()),
                ..fine()
            },
        ),
    ];
    for (word, request) in cases {
        let cli = yctl_update(&[&word]).expect_err("yctl refuses it");
        assert_eq!(cli, schedd_update(request), "yctl update 12 {word}");
    }
}
