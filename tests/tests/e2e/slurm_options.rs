//! End-to-end tests of Slurm's job options as schedd carries them out: `-w`, `-x`,
//! `--exclusive`, `--begin`, `--partition`/`--qos` through `[slurm]`, and mail through
//! `notify.sendmail`. The specs go to schedd over gRPC as ysub would send them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ysched_proto as pb;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Submits `spec` as root on schedd's socket: the id, or schedd's refusal.
fn submit(c: &TestCluster, spec: pb::JobSpec) -> Result<u64, tonic::Status> {
    runtime().block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        client
            .submit(pb::SubmitRequest { spec: Some(spec) })
            .await
            .map(|r| r.into_inner().job_id)
    })
}

fn job(c: &TestCluster, script: &str) -> pb::JobSpec {
    pb::JobSpec {
        name: "slurmish".into(),
        script: format!("#!/bin/sh\n{script}\n"),
        workdir: c.work.display().to_string(),
        ..Default::default()
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn refused(answer: Result<u64, tonic::Status>, message: &str) {
    let status = answer.expect_err("schedd accepted it");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains(message),
        "expected {message:?} in {:?}",
        status.message()
    );
}

#[test]
fn nodelist_exclude_and_exclusive_choose_the_nodes() {
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 2, A100),
        FakeNode::uniform("n2", 2, A100),
        FakeNode::uniform("n3", 2, A100),
    ]);
    // -w n3: there, though n1 comes first.
    let listed = submit(
        &c,
        pb::JobSpec {
            gpus: 1,
            nodelist: names(&["n3"]),
            ..job(&c, "sleep 300")
        },
    )
    .unwrap();
    assert_eq!(c.wait_state(listed, "RUNNING", SECS(20))["node"], "n3");
    // -x n1,n2: beside it on n3.
    let excluding = submit(
        &c,
        pb::JobSpec {
            gpus: 1,
            exclude: names(&["n1", "n2"]),
            ..job(&c, "sleep 300")
        },
    )
    .unwrap();
    assert_eq!(c.wait_state(excluding, "RUNNING", SECS(20))["node"], "n3");
    // --exclusive: one GPU asked, a whole empty node taken.
    let whole = submit(
        &c,
        pb::JobSpec {
            gpus: 1,
            exclusive: true,
            ..job(&c, "sleep 300")
        },
    )
    .unwrap();
    let j = c.wait_state(whole, "RUNNING", SECS(20));
    let node = j["node"].as_str().unwrap().to_string();
    assert!(node == "n1" || node == "n2", "{j}");
    assert_eq!(j["gpus"].as_array().unwrap().len(), 2, "{j}");
    // A small job asking for that node waits beside it.
    let beside = submit(
        &c,
        pb::JobSpec {
            nodelist: vec![node.clone()],
            ..job(&c, "true")
        },
    )
    .unwrap();
    let waiting = c.wait_waiting(beside, SECS(20));
    assert_eq!(waiting["reason"], "Resources", "{waiting}");
    let out = c.run("yctl", &["show", "job", &beside.to_string()]);
    assert!(
        stdout(&out).contains("holds this node whole (--exclusive)"),
        "{}",
        stdout(&out)
    );
    // Typos are caught at submit.
    refused(
        submit(
            &c,
            pb::JobSpec {
                nodelist: names(&["gpu9"]),
                ..job(&c, "true")
            },
        ),
        "no node named 'gpu9' (nodes: n1, n2, n3)",
    );
    refused(
        submit(
            &c,
            pb::JobSpec {
                exclude: names(&["n4"]),
                ..job(&c, "true")
            },
        ),
        "no node named 'n4'",
    );
    // Once the whole-node job ends, the waiting one starts there.
    let out = c.run("ycancel", &[&whole.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        c.wait_state(beside, "COMPLETED", SECS(30))["node"],
        node.as_str()
    );
}

#[test]
fn a_job_with_a_begin_time_waits_for_it() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let begin = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3;
    let id = submit(
        &c,
        pb::JobSpec {
            begin_unix_secs: begin,
            ..job(&c, "date +%s > begun")
        },
    )
    .unwrap();
    let j = c.wait_waiting(id, SECS(10));
    assert_eq!(j["reason"], "BeginTime", "{j}");
    c.wait_state(id, "COMPLETED", SECS(30));
    let begun: u64 = read_when_exists(&c.path("begun"), SECS(5))
        .trim()
        .parse()
        .unwrap();
    assert!(begun >= begin, "started at {begun}, before {begin}");
}

#[test]
fn partitions_and_qos_name_tiers_through_the_config() {
    let c = TestCluster::start_with_config(
        vec![FakeNode::uniform("n1", 1, A100)],
        "[slurm]\npartitions = { gpu = \"high\" }\nqos = { normal = \"low\" }\n",
    );
    let tier_of = |partition: &str, qos: &str| {
        let id = submit(
            &c,
            pb::JobSpec {
                partition: partition.into(),
                qos: qos.into(),
                hold: true,
                ..job(&c, "true")
            },
        )
        .unwrap();
        c.job(id)["tier"].as_str().unwrap().to_string()
    };
    assert_eq!(tier_of("gpu", ""), "high");
    assert_eq!(tier_of("gpu", "normal"), "low");
    assert_eq!(tier_of("medium", ""), "medium");
    refused(
        submit(
            &c,
            pb::JobSpec {
                partition: "cpu".into(),
                ..job(&c, "true")
            },
        ),
        "unknown partition 'cpu' (tiers: critical, high, medium, low; mapped partition names: \
         gpu)",
    );
}

/// A sendmail that appends each message to `out`, in a directory of its own.
fn fake_sendmail(tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!(
        "ysched-e2e-mail-{tag}-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (script, out) = (dir.join("sendmail"), dir.join("mails"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ echo \"--- $*\"; cat; echo; }} >> '{}'\n",
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, out)
}

#[test]
fn begin_and_end_mails_go_through_sendmail() {
    let (sendmail, mails) = fake_sendmail("ok");
    let c = TestCluster::start_with_config(
        vec![FakeNode::uniform("n1", 1, A100)],
        &format!(
            "[notify]\nsendmail = {:?}\n",
            sendmail.display().to_string()
        ),
    );
    let id = submit(
        &c,
        pb::JobSpec {
            mail_types: names(&["BEGIN", "END"]),
            mail_user: "ops@example.org".into(),
            ..job(&c, "sleep 1")
        },
    )
    .unwrap();
    c.wait_state(id, "COMPLETED", SECS(30));
    let deadline = std::time::Instant::now() + SECS(20);
    let text = loop {
        let text = std::fs::read_to_string(&mails).unwrap_or_default();
        if text.contains(" Ended, ") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(text.contains("--- -i -t\n"), "{text}");
    assert!(text.contains("To: ops@example.org\r\n"), "{text}");
    assert!(
        text.contains(&format!(
            "Subject: ysched Job_id={id} Name=slurmish Began, Queued time "
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Subject: ysched Job_id={id} Name=slurmish Ended, Run time "
        )),
        "{text}"
    );
    assert!(text.contains(", COMPLETED, ExitCode 0\r\n"), "{text}");
    let _ = std::fs::remove_dir_all(sendmail.parent().unwrap());
}

#[test]
fn mail_is_refused_where_there_is_no_sendmail() {
    let c = TestCluster::start_with_config(
        vec![FakeNode::uniform("n1", 1, A100)],
        "[notify]\nsendmail = \"/nonexistent/sendmail\"\n",
    );
    refused(
        submit(
            &c,
            pb::JobSpec {
                mail_types: names(&["END"]),
                ..job(&c, "true")
            },
        ),
        "--mail-type needs sendmail on the scheduler host (/nonexistent/sendmail is not there); \
         ask your administrator or drop --mail-type",
    );
    // Without mail, the same job is welcome.
    assert!(submit(&c, job(&c, "true")).is_ok());
}
