//! Tests of job mail: which changes mail, their subjects, arrays, the sendmail check and the
//! mailer running a sendmail.

use super::*;
use crate::core::testkit::{JobBuilder as J, T0};
use std::collections::BTreeMap;
use std::sync::Arc;

fn with_mail(job: J, types: &[&str]) -> Job {
    let mut job = job.build();
    Arc::make_mut(&mut job.spec).mail_types = types.iter().map(|t| t.to_string()).collect();
    job
}

fn records(jobs: &[Job]) -> Records {
    let jobs: BTreeMap<JobId, Job> = jobs.iter().map(|j| (j.id, j.clone())).collect();
    Records::new(jobs, BTreeMap::new(), 100, Default::default())
}

/// `old` becomes `new` in one event: the mails it calls for.
fn mails(old: &[Job], new: &[Job]) -> Vec<Mail> {
    let mut out = Vec::new();
    collect(&records(old), new, &mut out);
    out
}

fn ended(mut job: Job, state: JobState, exit: i32) -> Job {
    job.state = state;
    job.exit_code = Some(exit);
    job.end_time = Some(T0 + 62_000);
    job
}

#[test]
fn start_and_end_mail_as_slurm_words_them() {
    let pending = with_mail(J::new(12).name("train"), &["BEGIN", "END"]);
    let mut running = with_mail(
        J::new(12)
            .name("train")
            .running_on("n1", &[0])
            .started(T0 + 5_000),
        &["BEGIN", "END"],
    );
    running.submit_time = T0;
    let began = mails(&[pending], std::slice::from_ref(&running));
    assert_eq!(began.len(), 1);
    assert_eq!(
        began[0].subject,
        "ysched Job_id=12 Name=train Began, Queued time 00:00:05"
    );
    assert_eq!(began[0].to, "alice");
    let done = ended(running.clone(), JobState::Completed, 0);
    let end = mails(&[running], &[done]);
    assert_eq!(
        end[0].subject,
        "ysched Job_id=12 Name=train Ended, Run time 00:00:57, COMPLETED, ExitCode 0"
    );
    assert!(end[0].body.contains("Nodes:   n1"), "{}", end[0].body);
}

#[test]
fn one_mail_per_end_the_most_specific_asked_for() {
    let running = with_mail(
        J::new(3).running_on("n1", &[0]),
        &["END", "FAIL", "TIME_LIMIT"],
    );
    let subject = |state, exit| {
        let out = mails(
            std::slice::from_ref(&running),
            &[ended(running.clone(), state, exit)],
        );
        assert_eq!(out.len(), 1);
        out[0].subject.clone()
    };
    assert!(subject(JobState::Timeout, 0).contains("Reached time limit"));
    assert!(subject(JobState::Failed, 1).contains(" Failed, "));
    assert!(subject(JobState::OutOfMemory, 137).contains(" Failed, "));
    assert!(subject(JobState::Cancelled, 0).contains(" Ended, "));
    // FAIL alone: a job that completed mails nothing.
    let fail_only = with_mail(J::new(4).running_on("n1", &[0]), &["FAIL"]);
    let done = ended(fail_only.clone(), JobState::Completed, 0);
    assert!(mails(&[fail_only], &[done]).is_empty());
}

#[test]
fn requeues_and_jobs_without_mail_types() {
    let running = with_mail(J::new(5).running_on("n1", &[0]), &["REQUEUE"]);
    let mut requeued = running.clone();
    requeued.state = JobState::Pending;
    requeued.alloc.clear();
    let out = mails(&[running], &[requeued]);
    assert!(out[0]
        .subject
        .starts_with("ysched Job_id=5 Name=job5 Requeued"));
    let quiet = J::new(6).running_on("n1", &[0]).build();
    let done = ended(quiet.clone(), JobState::Completed, 0);
    assert!(mails(&[quiet], &[done]).is_empty());
    // A job being submitted is not in the records yet: nothing to tell.
    assert!(mails(&[], &[with_mail(J::new(7), &["BEGIN"])]).is_empty());
}

#[test]
fn an_array_mails_once_unless_it_asks_for_every_task() {
    let task = |id: u64, n: u32, types: &[&str]| {
        let mut job = with_mail(J::new(id).array(10, (id - 10) as u32, 0), types);
        let spec = Arc::make_mut(&mut job.spec);
        let array = spec.array.as_mut().expect("an array task");
        array.count = n;
        array.min = 0;
        array.max = n - 1;
        job.state = JobState::Running;
        job
    };
    let tasks: Vec<Job> = (10..13).map(|id| task(id, 3, &["END"])).collect();
    // Task 10 ends while 11 and 12 run: no mail.
    let done10 = ended(tasks[0].clone(), JobState::Completed, 0);
    assert!(mails(&tasks, &[done10]).is_empty());
    // 11 and 12 end together, the last two: one mail for the array.
    let done = [
        ended(tasks[1].clone(), JobState::Completed, 0),
        ended(tasks[2].clone(), JobState::Failed, 2),
    ];
    let out = mails(&tasks[1..], &done);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].subject,
        "ysched Array Job_id=10_* Name=job12 Ended, Run time 00:00:00, last task 10_2 FAILED, \
         ExitCode 2"
    );
    // ARRAY_TASKS: each task on its own.
    let each: Vec<Job> = (10..13)
        .map(|id| task(id, 3, &["END", "ARRAY_TASKS"]))
        .collect();
    let done10 = ended(each[0].clone(), JobState::Completed, 0);
    let out = mails(&each, &[done10]);
    assert_eq!(out.len(), 1);
    assert!(out[0].subject.starts_with("ysched Job_id=10_0 "));
}

#[test]
fn a_recorded_address_that_is_no_address_mails_the_owner() {
    let mut running = with_mail(J::new(9).running_on("n1", &[0]), &["END"]);
    let done = |running: &Job| ended(running.clone(), JobState::Completed, 0);
    for (given, to) in [
        ("ops@example.org", "ops@example.org"),
        ("|/tmp/evil", "alice"),
        ("-oQ/tmp", "alice"),
        ("/etc/passwd", "alice"),
    ] {
        Arc::make_mut(&mut running.spec).mail_user = given.into();
        let out = mails(std::slice::from_ref(&running), &[done(&running)]);
        assert_eq!((out[0].to.as_str(), out[0].user.as_str()), (to, "alice"));
    }
}

#[test]
fn the_message_has_one_line_per_header() {
    let mail = Mail {
        user: "bob".into(),
        to: "bob@example.org\r\nBcc: eve@example.org".into(),
        subject: "ysched Job_id=1 Name=x Ended".into(),
        body: "line one\nline two\n".into(),
    };
    let text = mail.rfc5322();
    assert!(text.starts_with("To: bob@example.org  Bcc: eve@example.org\r\nSubject: "));
    assert!(text.ends_with("\r\n\r\nline one\r\nline two\r\n"));
}

#[test]
fn sendmail_must_be_an_executable_file() {
    let dir = std::env::temp_dir().join(format!("ysched-mail-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let notify = |path: &Path| NotifyConfig {
        sendmail: path.to_path_buf(),
        ..Default::default()
    };
    let missing = dir.join("missing");
    assert_eq!(
        check_sendmail(&notify(&missing)).unwrap_err(),
        format!(
            "--mail-type needs sendmail on the scheduler host ({} is not there); ask your \
             administrator or drop --mail-type",
            missing.display()
        )
    );
    let plain = dir.join("plain");
    std::fs::write(&plain, "not a program").unwrap();
    assert!(check_sendmail(&notify(&plain)).is_err());
    assert!(check_sendmail(&notify(&dir)).is_err());
    assert!(check_sendmail(&NotifyConfig {
        sendmail: PathBuf::new(),
        ..Default::default()
    })
    .unwrap_err()
    .contains("notify.sendmail is empty"));
    let script = dir.join("sendmail");
    write_script(&script, &dir.join("out"));
    assert_eq!(check_sendmail(&notify(&script)), Ok(()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sendmail that appends its arguments and standard input to `out`.
fn write_script(path: &Path, out: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\necho \"args: $*\" >> '{0}'\ncat >> '{0}'\n",
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_mailer_runs_sendmail_with_the_message_and_counts_failures() {
    let dir = std::env::temp_dir().join(format!("ysched-mailer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (script, out) = (dir.join("sendmail"), dir.join("out"));
    write_script(&script, &out);
    let mailer = Mailer::new(&NotifyConfig {
        sendmail: script.clone(),
        ..Default::default()
    });
    let mail = Mail {
        user: "alice".into(),
        to: "alice".into(),
        subject: "ysched Job_id=1 Name=x Began, Queued time 00:00:01".into(),
        body: "hello\n".into(),
    };
    mailer.send(vec![mail]);
    let broken = Mailer::new(&NotifyConfig {
        sendmail: dir.join("missing"),
        ..Default::default()
    });
    broken.send(vec![Mail {
        user: "bob".into(),
        to: "bob".into(),
        subject: "s".into(),
        body: String::new(),
    }]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while (mailer.counts().sent.load(Ordering::Relaxed) < 1
        || broken.counts().failed.load(Ordering::Relaxed) < 1)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.starts_with("args: -i -t\nTo: alice\r\nSubject: ysched Job_id=1"),
        "{text}"
    );
    assert_eq!(broken.counts().failed.load(Ordering::Relaxed), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dependency_that_can_never_be_met_mails_once() {
    let pending = with_mail(J::new(8), &["INVALID_DEPEND"]);
    let rec = records(std::slice::from_ref(&pending));
    let mut out = Vec::new();
    let never = vec![(JobId(8), PendingReason::DependencyNeverSatisfied)];
    collect_reasons(&rec, &never, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].subject,
        "ysched Job_id=8 Name=job8 Dependency never satisfied"
    );
    // Already known: no second mail.
    let mut told = pending.clone();
    told.reason = "DependencyNeverSatisfied".into();
    let mut out = Vec::new();
    collect_reasons(&records(&[told]), &never, &mut out);
    assert!(out.is_empty());
    // Other reasons mail nothing.
    let mut out = Vec::new();
    collect_reasons(&rec, &[(JobId(8), PendingReason::Resources)], &mut out);
    assert!(out.is_empty());
}
