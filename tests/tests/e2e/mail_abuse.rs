//! End-to-end tests of job mail against a user who abuses it, `nobody`: an array whose every
//! task mails its start and end floods only nobody's own share of the mail queue (another
//! user's mail still goes out, and the log gets one line for the drops, not one per mail), and
//! `--mail-user` values that are a program, a file or an option of sendmail's are refused by
//! ysub, yslurm's sbatch and schedd alike.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use ysched_proto as pb;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;

/// A sendmail that waits until `gate` exists, then writes its arguments and the message to a
/// file of its own in `out` (four may run at once).
fn gated_sendmail(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (script, gate, out) = (dir.join("sendmail"), dir.join("gate"), dir.join("mails"));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nwhile [ ! -e '{gate}' ]; do sleep 0.05; done\n\
             f=$(mktemp '{out}/mail.XXXXXX')\n{{ echo \"--- $*\"; cat; }} > \"$f\"\n",
            gate = gate.display(),
            out = out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, gate, out)
}

/// The messages sendmail was given so far.
fn mails(out: &Path) -> Vec<String> {
    std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

fn submit_as_nobody(c: &TestCluster, args: &[&str]) -> u64 {
    let out = c.run_as(NOBODY, NOBODY, "ysub", &[&["--parsable"], args].concat());
    assert!(out.status.success(), "ysub {args:?}: {}", stderr(&out));
    stdout(&out).trim().parse().expect("job id")
}

/// One user's flood drops that user's mail only. The bounds are small here
/// (`notify.max_queued_per_user`) and so is the array; the defaults scale both up.
fn flood_leaves_others_mail(per_user: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let (sendmail, gate, out) = gated_sendmail(tmp.path());
    let c = TestCluster::start_with_config(
        vec![FakeNode::uniform("n1", 8, A100)],
        &format!(
            "[notify]\nsendmail = {:?}\nmax_queued = 40\nmax_queued_per_user = {per_user}\n\
             max_per_user_per_minute = 1000\n",
            sendmail.display().to_string()
        ),
    );
    // nobody's array: 60 tasks, each mailing its start and its end: 120 mails, while the
    // sendmails wait at the gate (four hold one each).
    let tasks = 60;
    let array = submit_as_nobody(
        &c,
        &[
            "-G",
            "1",
            "--array",
            &format!("0-{}", tasks - 1),
            "--mail-type=BEGIN,END,ARRAY_TASKS",
            "--wrap",
            "true",
        ],
    );
    wait_until(SECS(40), "the array ended", || {
        let jobs = c.jobs();
        let done = jobs
            .iter()
            .filter(|j| j["array_job_id"] == array && j["state"] == "COMPLETED")
            .count();
        done == tasks
    });
    // Root's own job, after the flood: its end is mailed.
    let theirs = c.submit(&[
        "--mail-type=END",
        "--mail-user=ops@example.org",
        "--wrap",
        "true",
    ]);
    c.wait_state(theirs, "COMPLETED", SECS(20));
    std::fs::write(&gate, "").unwrap();
    let ended = format!("Subject: ysched Job_id={theirs} Name=wrap Ended, ");
    wait_until(SECS(30), "root's end mail went out", || {
        mails(&out).iter().any(|m| m.contains(&ended))
    });
    let sent = mails(&out);
    let to_root: Vec<&String> = sent.iter().filter(|m| m.contains(&ended)).collect();
    assert_eq!(to_root.len(), 1);
    assert!(
        to_root[0].starts_with("--- -i -t\nTo: ops@example.org\r\n"),
        "{}",
        to_root[0]
    );
    // The drops, said once: nobody's mail beyond their share (and the four held at the gate).
    let log = c.dir.path().join("schedd.log");
    let deadline = std::time::Instant::now() + SECS(10);
    let about_drops = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        let about_drops: Vec<String> = text
            .lines()
            .filter(|l| l.contains("dropped"))
            .map(String::from)
            .collect();
        if !about_drops.is_empty() || std::time::Instant::now() > deadline {
            break about_drops;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(about_drops.len(), 1, "{about_drops:#?}");
    let dropped: usize = about_drops[0]
        .split("job mail: dropped ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", about_drops[0]));
    assert!(
        about_drops[0].ends_with(&format!(
            "job mail: dropped {dropped} mails of user nobody (their share of the mail queue, \
             {per_user} mails, was full: notify.max_queued_per_user)"
        )),
        "{}",
        about_drops[0]
    );
    // What was not dropped went out: at most nobody's share and the four at the gate.
    let sent_to_nobody = 2 * tasks - dropped;
    assert!(
        (1..=per_user as usize + 4).contains(&sent_to_nobody),
        "{sent_to_nobody}"
    );
    let theirs_subject = format!("Subject: ysched Job_id={array}_");
    wait_until(SECS(30), "nobody's queued mail went out", || {
        let n = mails(&out)
            .iter()
            .filter(|m| m.contains(&theirs_subject))
            .count();
        n == sent_to_nobody
    });
    std::thread::sleep(Duration::from_secs(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().filter(|l| l.contains("dropped")).count(), 1);
    // Nothing else was disturbed: every task and root's job completed (checked above).
}

#[test]
fn one_users_mail_flood_drops_only_their_own_mail_said_in_one_line() {
    flood_leaves_others_mail(10);
}

#[test]
fn mail_user_must_be_an_address_in_ysub_sbatch_and_schedd_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let (sendmail, gate, out) = gated_sendmail(tmp.path());
    std::fs::write(&gate, "").unwrap();
    let c = TestCluster::start_with_config(
        vec![FakeNode::uniform("n1", 1, A100)],
        &format!(
            "[notify]\nsendmail = {:?}\n",
            sendmail.display().to_string()
        ),
    );
    let yslurm = c.bin_copy("yslurm");
    let work = c.work.display().to_string();
    for hostile in [
        "|/tmp/evil",
        "/etc/passwd",
        "-oQ/tmp",
        "ops@example.org -oQ/tmp",
    ] {
        let expected = ysched_common::mail_address::check_mail_user(hostile).unwrap_err();
        let flag = format!("--mail-user={hostile}");
        let ysub = c.run_as(
            NOBODY,
            NOBODY,
            "ysub",
            &["--mail-type=END", &flag, "--wrap", "true"],
        );
        assert!(!ysub.status.success());
        assert_eq!(stderr(&ysub).trim_end(), format!("ysub: error: {expected}"));
        let sbatch = {
            use std::os::unix::process::CommandExt;
            TestCluster::output_when_free(
                c.program(&yslurm)
                    .args(["sbatch", "--mail-type=END", &flag, "--wrap", "true"])
                    .uid(NOBODY)
                    .gid(NOBODY)
                    .stdin(Stdio::null()),
            )
            .unwrap()
        };
        assert!(!sbatch.status.success());
        assert!(stderr(&sbatch).contains(&expected), "{}", stderr(&sbatch));
        // A client without ysub's checks: schedd says the same.
        let (work, value) = (work.clone(), hostile.to_string());
        let status = call_as(&c.socket(), NOBODY, NOBODY, |mut client| async move {
            let spec = pb::JobSpec {
                name: "mail".into(),
                script: "#!/bin/sh\ntrue\n".into(),
                workdir: work,
                mail_types: vec!["END".into()],
                mail_user: value,
                ..Default::default()
            };
            client
                .submit(pb::SubmitRequest { spec: Some(spec) })
                .await
                .unwrap_err()
        });
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), expected);
    }
    // Nothing was queued, and an address or a user name is welcome.
    assert!(c.jobs().is_empty());
    for fine in ["ops@example.org", "nobody"] {
        let id = submit_as_nobody(
            &c,
            &[
                "--mail-type=END",
                &format!("--mail-user={fine}"),
                "--wrap",
                "true",
            ],
        );
        c.wait_state(id, "COMPLETED", SECS(20));
        let subject = format!("Subject: ysched Job_id={id} ");
        wait_until(SECS(20), "the end mail went out", || {
            mails(&out).iter().any(|m| m.contains(&subject))
        });
        let mail = mails(&out)
            .into_iter()
            .find(|m| m.contains(&subject))
            .unwrap();
        assert!(
            mail.starts_with(&format!("--- -i -t\nTo: {fine}\r\n")),
            "{mail}"
        );
    }
}
