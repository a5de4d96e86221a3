//! End-to-end tests of what root does on a user's behalf, with real
//! daemons and the unprivileged user `nobody` as the attacker: output files that could block
//! (a FIFO), a launch stuck before its exec on a hung filesystem (a FUSE mount nobody serves)
//! that must still be cancelled, timed out and preempted, report files written where another
//! user planted links, checkpoint directories swapped for a link to a root-only directory,
//! other accounts' usage with `reports_public = false`, root relayed from a compute node, and
//! secret keys others may read.

use serde_json::Value;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};
use ysched_common::time::rfc3339;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;

fn submit_as_nobody(c: &TestCluster, args: &[&str]) -> u64 {
    let out = c.run_as(NOBODY, NOBODY, "ysub", &[&["--parsable"], args].concat());
    assert!(out.status.success(), "ysub {args:?}: {}", stderr(&out));
    stdout(&out).trim().parse().expect("job id")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}{}",
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

fn reason(job: &Value) -> String {
    job["reason"].as_str().unwrap_or_default().to_string()
}

/// Runs `sh -c script` as nobody (the attacker planting things).
fn sh_as_nobody(script: &str) {
    use std::os::unix::process::CommandExt;
    let out = Command::new("sh")
        .args(["-c", script])
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", stderr(&out));
}

/// How many of the node's GPUs no job holds.
fn free_gpus(c: &TestCluster) -> usize {
    c.nodes()[0]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["in_use"] == false)
        .count()
}

#[test]
fn an_output_fifo_fails_the_launch_at_once_naming_it_and_frees_the_gpu() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    // FIFOs of nobody's: one nobody reads, one with a reader waiting (which would get the
    // job's output), and a symlink to the first.
    let lonely = c.path("lonely.fifo");
    let read = c.path("read.fifo");
    let link = c.path("link.out");
    sh_as_nobody(&format!(
        "mkfifo {} {} && ln -s {} {}",
        lonely.display(),
        read.display(),
        lonely.display(),
        link.display()
    ));
    let reader = {
        use std::os::unix::process::CommandExt;
        Command::new("cat")
            .arg(&read)
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let cases: [(&[&str], String); 3] = [
        (
            &["-o", lonely.to_str().unwrap()],
            format!("output file {} is a FIFO", lonely.display()),
        ),
        (
            &["-e", read.to_str().unwrap()],
            format!("error file {} is a FIFO", read.display()),
        ),
        (
            &["-o", link.to_str().unwrap()],
            format!("output file {} is a FIFO", link.display()),
        ),
    ];
    for (output, message) in cases {
        let started = Instant::now();
        let id = submit_as_nobody(
            &c,
            &[&["-G", "1"], output, &["--wrap", "echo secret"]].concat(),
        );
        let j = c.wait_state(id, "FAILED", SECS(10));
        assert_eq!(
            reason(&j),
            format!("launch failed: {message}: -o and -e must name a regular file (or /dev/null)")
        );
        // At once, not when someone reads the FIFO; and the GPU is free again.
        assert!(started.elapsed() < SECS(10));
        wait_until(SECS(10), "the GPU freed", || free_gpus(&c) == 1);
    }
    // The reader got nothing of the job's output.
    let out = reader.wait_with_output().unwrap();
    assert_eq!(out.stdout, b"", "the FIFO's reader got the job's output");

    // /dev/null and regular files (also through a symlink of the user's) are fine.
    let log = c.path("real.log");
    let to_log = c.path("to-log.out");
    sh_as_nobody(&format!("ln -s {} {}", log.display(), to_log.display()));
    let id = submit_as_nobody(
        &c,
        &[
            "-G",
            "1",
            "-o",
            "/dev/null",
            "-e",
            to_log.to_str().unwrap(),
            "--wrap",
            "echo out; echo err >&2",
        ],
    );
    c.wait_state(id, "COMPLETED", SECS(10));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "err\n");
    assert_eq!(std::fs::metadata(&log).unwrap().uid(), NOBODY);
}

/// A FUSE file system that nobody serves, as a hung NFS server: every access to it blocks (in
/// a killable wait) until it is dropped, which aborts the connection and unmounts it.
struct HungMount {
    path: PathBuf,
    fuse: Option<OwnedFd>,
}

impl HungMount {
    fn new(path: PathBuf) -> HungMount {
        std::fs::create_dir_all(&path).unwrap();
        let fuse: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("/dev/fuse (the suite runs as root)")
            .into();
        let options = std::ffi::CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            fuse.as_raw_fd()
        ))
        .unwrap();
        let target = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mount(2) with NUL-terminated strings that live across the call.
        let mounted = unsafe {
            libc::mount(
                c"ysched-hung".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        };
        assert_eq!(
            mounted,
            0,
            "cannot mount a FUSE file system: {}",
            std::io::Error::last_os_error()
        );
        HungMount {
            path,
            fuse: Some(fuse),
        }
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        // Closing the connection fails every waiting request (ENOTCONN): the stuck launches
        // end.
        drop(self.fuse.take());
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Whether a launch on node n1 of `c` is stuck in the kernel before its exec: a job's first
/// process (still the image of the node's supervisor, `noded __supervisor <spool>`, from
/// which it was forked) in an uninterruptible wait, i.e. blocked on the hung mount. One
/// launch at a time is stuck in these tests, so `_id` needs no telling apart.
fn stuck_before_exec(c: &TestCluster, _id: u64) -> bool {
    let job_dir = c.dir.path().canonicalize().unwrap().join("spool/n1");
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            return false;
        };
        let mut args = cmdline.split(|b| *b == 0);
        let is_launch = args.nth(1) == Some(b"__supervisor".as_slice())
            && args.next() == Some(job_dir.as_os_str().as_encoded_bytes());
        let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // The state follows the command name in parentheses.
        is_launch
            && state
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('D'))
    })
}

/// Submits, as nobody, a low job of one GPU whose output is on the hung mount, and waits
/// until its launch is stuck there.
fn submit_stuck(c: &TestCluster, hung: &HungMount, extra: &[&str]) -> u64 {
    let out = hung.path.join("out");
    let id = submit_as_nobody(
        c,
        &[
            &["-G", "1", "-p", "low", "--grace", "2"],
            extra,
            &["-o", out.to_str().unwrap(), "--wrap", "echo never"],
        ]
        .concat(),
    );
    wait_until(SECS(20), "the launch stuck on the hung mount", || {
        stuck_before_exec(c, id)
    });
    assert_eq!(c.job(id)["state"], "RUNNING");
    id
}

/// Its owner cancels a stuck launch: CANCELLED within its grace, the GPU free.
fn cancel_stuck(c: &TestCluster, hung: &HungMount) {
    let id = submit_stuck(c, hung, &[]);
    let asked = Instant::now();
    ok(&c.run_as(NOBODY, NOBODY, "ycancel", &[&id.to_string()]));
    let j = c.wait_state(id, "CANCELLED", SECS(10));
    assert!(asked.elapsed() < SECS(2 + 5), "{:?}", asked.elapsed());
    assert!(reason(&j).contains("cancelled by nobody"), "{j}");
    wait_until(SECS(10), "the GPU freed", || free_gpus(c) == 1);
    assert!(!stuck_before_exec(c, id));
}

#[test]
fn a_launch_stuck_on_a_hung_filesystem_is_cancelled_timed_out_and_preempted() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    // Dropped before the cluster: its launches end, and its mount is gone before the
    // cluster's directory is removed.
    let hung = HungMount::new(c.path("hung"));

    // 1. Its owner cancels it.
    cancel_stuck(&c, &hung);

    // 2. Its time limit counts from the launch: TIMEOUT.
    let id = submit_stuck(&c, &hung, &["-t", "0:03"]);
    let j = c.wait_state(id, "TIMEOUT", SECS(3 + 2 + 10));
    assert_eq!(reason(&j), "time limit reached");
    wait_until(SECS(10), "the GPU freed", || free_gpus(&c) == 1);

    // 3. A higher tier preempts it: the preemptor runs, the victim goes back to the queue.
    let victim = submit_stuck(&c, &hung, &[]);
    let high = submit_as_nobody(&c, &["-G", "1", "-p", "high", "--wrap", "true"]);
    c.wait_state(high, "COMPLETED", SECS(20));
    let v = c.job(victim);
    assert!(v["restart_count"].as_u64().unwrap() >= 1, "{v}");
    ok(&c.run("ycancel", &[&victim.to_string()]));
    c.wait_state(victim, "CANCELLED", SECS(10));
    drop(hung);
}

#[test]
fn without_cgroups_a_stuck_launch_is_cancelled_through_the_group_it_recorded() {
    let c = TestCluster::start_with_config(
        vec![FakeNode::uniform("n1", 1, A100)],
        "cgroup_root = \"none\"",
    );
    let hung = HungMount::new(c.path("hung"));
    cancel_stuck(&c, &hung);
    drop(hung);
}

/// The report files root writes into a directory nobody may write.
#[test]
fn report_files_are_written_through_nothing_another_user_planted() {
    let c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, A100)],
        "reports_public = false",
        "",
    );
    let done = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(done, "COMPLETED", SECS(10));
    // A file of root's that nobody may not read or write, and what nobody plants in a
    // directory both may write: symlinks to it under the report's fixed temporary names of
    // old, its own world-writable file, and a symlink at the report's name itself.
    let precious = c.dir.path().join("precious");
    std::fs::write(&precious, "root's\n").unwrap();
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o600)).unwrap();
    let shared = c.path("reports");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let html = shared.join("usage.html");
    let trace = shared.join("trace.csv");
    sh_as_nobody(&format!(
        "cd {dir} && ln -s {p} usage.html.tmp && ln -s {p} .usage.html.tmp && \
         ln -s {p} trace.csv.tmp && : > usage.tmp && chmod 666 usage.tmp && \
         ln -s {p} trace.csv",
        dir = shared.display(),
        p = precious.display()
    ));
    // The administrator keeps the report private: the file exists, root's, 0600.
    std::fs::write(&html, "").unwrap();
    std::fs::set_permissions(&html, std::fs::Permissions::from_mode(0o600)).unwrap();

    ok(&c.run(
        "yctl",
        &["report", "--since", "1d", "--html", html.to_str().unwrap()],
    ));
    ok(&c.run(
        "yctl",
        &[
            "report",
            "--since",
            "1d",
            "--export-trace",
            trace.to_str().unwrap(),
        ],
    ));
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "root's\n");
    assert_eq!(std::fs::metadata(&precious).unwrap().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(shared.join("usage.tmp")).unwrap().len(),
        0
    );
    let meta = std::fs::symlink_metadata(&html).unwrap();
    assert!(meta.is_file() && meta.uid() == 0 && meta.mode() & 0o777 == 0o600);
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
    // The symlink at the trace's name was replaced, not written through.
    let meta = std::fs::symlink_metadata(&trace).unwrap();
    assert!(meta.is_file() && meta.uid() == 0, "{meta:?}");
    assert!(std::fs::read_to_string(&trace)
        .unwrap()
        .starts_with("job_id,"));
    // nobody cannot read the private report.
    let out = {
        use std::os::unix::process::CommandExt;
        Command::new("cat")
            .arg(&html)
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap()
    };
    assert!(!out.status.success() && out.stdout.is_empty());
    // No temporary file is left behind: only what was planted, and the two reports.
    let mut names: Vec<String> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".usage.html.tmp",
            "trace.csv",
            "trace.csv.tmp",
            "usage.html",
            "usage.html.tmp",
            "usage.tmp"
        ]
    );
}

fn epoch_ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The job's `last_checkpoint` as `yctl show job --json` gives it (RFC 3339, seconds).
fn last_checkpoint(c: &TestCluster, id: u64) -> Option<String> {
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(v["last_checkpoint"].as_str()?.to_string())
}

#[test]
fn a_checkpoint_directory_swapped_for_a_link_to_a_root_only_directory_shows_nothing_of_it() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    // A directory only root may read, with a checkpoint newer than the job's own.
    let private = c.dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let secret_time = SystemTime::now() - SECS(600);
    let secret = std::fs::File::create(private.join("model.pt")).unwrap();
    secret.set_modified(secret_time).unwrap();

    // A control job first (the lower id: a scan reads its directory before the other's), then
    // the job whose directory nobody swaps.
    let control_dir = c.path("ck-control");
    let swapped_dir = c.path("ck-swapped");
    let control = submit_as_nobody(
        &c,
        &[
            "--checkpoint-dir",
            control_dir.to_str().unwrap(),
            "--wrap",
            "sleep 60",
        ],
    );
    let swapped = submit_as_nobody(
        &c,
        &[
            "--checkpoint-dir",
            swapped_dir.to_str().unwrap(),
            "--wrap",
            "sleep 60",
        ],
    );
    c.wait_state(swapped, "RUNNING", SECS(10));
    c.wait_state(control, "RUNNING", SECS(10));
    wait_until(SECS(10), "the checkpoint directories made", || {
        swapped_dir.is_dir() && control_dir.is_dir()
    });
    // The job's own checkpoint, an hour old, is seen.
    let own_time = SystemTime::now() - SECS(3600);
    sh_as_nobody(&format!(
        "touch -d @{} {}/step1.pt",
        epoch_ms(own_time) / 1000,
        swapped_dir.display()
    ));
    let own = rfc3339(epoch_ms(own_time));
    wait_until(SECS(20), "its own checkpoint reported", || {
        last_checkpoint(&c, swapped).as_ref() == Some(&own)
    });
    // nobody swaps the directory for a link to the private one; then the control job saves.
    sh_as_nobody(&format!(
        "mv {d} {d}.old && ln -s {p} {d} && touch {ctl}/step1.pt",
        d = swapped_dir.display(),
        p = private.display(),
        ctl = control_dir.display()
    ));
    let control_saved = std::fs::metadata(control_dir.join("step1.pt"))
        .unwrap()
        .modified()
        .unwrap();
    let control_saved = rfc3339(epoch_ms(control_saved));
    // A scan that saw the control's checkpoint read the swapped directory after the swap.
    wait_until(SECS(20), "the control's checkpoint reported", || {
        last_checkpoint(&c, control).as_ref() == Some(&control_saved)
    });
    assert_eq!(
        last_checkpoint(&c, swapped),
        Some(own),
        "the root-only directory's newest time ({}) leaked",
        rfc3339(epoch_ms(secret_time))
    );
    for id in [control, swapped] {
        ok(&c.run("ycancel", &[&id.to_string()]));
    }
}

#[test]
fn private_usage_hides_other_accounts_gpus_run_times_and_fair_share_in_every_view() {
    let c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, A100)],
        "reports_public = false",
        "",
    );
    // nobody's own job (first: it makes the checkpoint root, where root's may write too);
    // root's running job holds the GPU; root's second waits with a place and a factor.
    let mine = submit_as_nobody(&c, &["--wrap", "sleep 60"]);
    c.wait_state(mine, "RUNNING", SECS(10));
    let running = c.submit(&["-A", "ops", "-G", "1", "--wrap", "sleep 60"]);
    let waiting = c.submit(&["-A", "ops", "-G", "1", "--wrap", "true"]);
    c.wait_state(running, "RUNNING", SECS(10));
    wait_until(SECS(10), "the waiting job's place", || {
        c.job(waiting)["fair_share"].is_f64()
    });
    let as_nobody = |args: &[&str]| -> Value {
        serde_json::from_str(&ok(&c.run_as(NOBODY, NOBODY, args[0], &args[1..]))).unwrap()
    };
    let listed = as_nobody(&["yq", "-a", "--json"]);
    let by_id = |id: u64| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id)
            .cloned()
            .unwrap()
    };
    let r = by_id(running);
    assert_eq!(r["state"], "RUNNING");
    assert_eq!(r["account"], "ops");
    assert_eq!(r["usage_private"], true);
    for field in ["node", "start_time", "fair_share", "last_checkpoint"] {
        assert_eq!(r[field], Value::Null, "{field}: {r}");
    }
    assert_eq!(r["gpus"], serde_json::json!([]));
    assert_eq!(r["gpus_requested"], 1);
    let w = by_id(waiting);
    assert_eq!(w["fair_share"], Value::Null, "{w}");
    assert!(w["queue_position"].is_u64(), "{w}");
    // nobody's own job, in full.
    let m = by_id(mine);
    assert_eq!(m["usage_private"], false);
    assert_eq!(m["node"], "n1");
    assert!(m["start_time"].is_string());
    // The table says so rather than showing zeros.
    let table = ok(&c.run_as(NOBODY, NOBODY, "yq", &["-a", "-l"]));
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{running} ")))
        .unwrap();
    assert!(
        line.ends_with("(private)") && line.contains(" - "),
        "{line}"
    );
    // yctl show job: no history, no nodes.
    let shown = as_nobody(&["yctl", "show", "job", &running.to_string(), "--json"]);
    assert_eq!(shown["usage_private"], true);
    assert_eq!(shown["events"], serde_json::json!([]));
    assert_eq!(shown["node"], Value::Null);
    let text = ok(&c.run_as(
        NOBODY,
        NOBODY,
        "yctl",
        &["show", "job", &running.to_string()],
    ));
    assert!(
        text.contains("NodeList=private") && text.contains("RunTime=private"),
        "{text}"
    );
    // yctl nodes: the GPU is in use, by whom is not said.
    let nodes = as_nobody(&["yctl", "nodes", "--json"]);
    assert_eq!(nodes[0]["gpus"][0]["in_use"], true);
    assert_eq!(nodes[0]["gpus"][0]["job"], Value::Null);
    // yctl shares: not root's account.
    let shares = ok(&c.run_as(NOBODY, NOBODY, "yctl", &["shares"]));
    assert!(!shares.contains("ops"), "{shares}");

    // root, an administrator, sees all of it.
    let r = c.job(running);
    assert_eq!(r["usage_private"], false);
    assert_eq!(r["node"], "n1");
    assert!(c.job(waiting)["fair_share"].is_f64());
    assert_eq!(c.nodes()[0]["gpus"][0]["job"], running);
    // Every job is still queued or running (a sleep 60 has no reason to end by itself). The
    // waiting job is cancelled first: once the running one is gone, it starts and ends
    // (`true`) before the next ycancel.
    for id in [waiting, running, mine] {
        let j = c.job(id);
        assert!(
            j["state"] == "RUNNING" || j["state"] == "PENDING",
            "job {id} ended: {j}"
        );
        ok(&c.run("ycancel", &[&id.to_string()]));
    }
}

#[test]
fn root_relayed_from_a_compute_node_may_not_submit_and_is_audited() {
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, A100)],
        "admin_hosts = [\"login2\"]",
        "",
    );
    c.start_login_agent("login2");
    // Root on a compute node without a job there: the node relays nothing of root's.
    let out = c.run_on(Some("n1"), 0, 0, "ysub", &["--wrap", "id -u > /tmp/never"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "node 'n1' is a compute node: it relays only the users with a job running on it, \
             and uid 0 has none there"
        ),
        "{}",
        stderr(&out)
    );
    assert!(c.jobs().is_empty(), "{:?}", c.jobs());
    // With a job of root's running there (submitted on the schedd host), root on n1 is
    // relayed, as an ordinary user: it may not submit, and the refusal is audited.
    let running = c.submit(&["-G", "0", "--wrap", "sleep 60"]);
    c.wait_state(running, "RUNNING", SECS(10));
    let out = c.run_on(Some("n1"), 0, 0, "ysub", &["--wrap", "id -u > /tmp/never"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        "ysub: error: root relayed from node n1 may not submit jobs: jobs run as root only \
         when submitted on the schedd host or on a node of scheduler.admin_hosts"
    );
    assert_eq!(c.jobs().len(), 1, "{:?}", c.jobs());
    let audit: Vec<Value> =
        serde_json::from_str(&ok(&c.run("yctl", &["audit", "--json"]))).unwrap();
    let refused = audit
        .iter()
        .find(|e| e["action"] == "submit_refused")
        .expect("the refusal is audited");
    assert_eq!(refused["user"], "root");
    assert_eq!(refused["host"], "n1");
    // nobody with a job on the same node submits as before, and root on a trusted host too.
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "-G", "0", "--wrap", "sleep 60"],
    );
    let nobodys: u64 = ok(&out).trim().parse().unwrap();
    c.wait_state(nobodys, "RUNNING", SECS(10));
    let id: u64 = ok(&c.run_on(
        Some("n1"),
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "--wrap", "true"],
    ))
    .trim()
    .parse()
    .unwrap();
    c.wait_state(id, "COMPLETED", SECS(10));
    let id: u64 = ok(&c.run_on(
        Some("login2"),
        0,
        0,
        "ysub",
        &["--parsable", "--wrap", "true"],
    ))
    .trim()
    .parse()
    .unwrap();
    let j = c.wait_state(id, "COMPLETED", SECS(10));
    assert_eq!(j["uid"], 0);
    for job in [running, nobodys] {
        ok(&c.run("ycancel", &[&job.to_string()]));
    }
}

/// Runs a daemon binary with the cluster's config until it exits (it must, within 10 s).
fn run_daemon(c: &TestCluster, bin: &str, args: &[&str]) -> Output {
    let mut child = Command::new(bin_dir().join(bin))
        .args(args)
        .env("YSCHED_CONF", &c.conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + SECS(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{bin} started although its key is readable by others");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn daemons_refuse_to_start_on_a_key_others_may_read() {
    let mut c = TestCluster::start_with_cluster_key(vec![FakeNode::uniform("n1", 1, A100)]);
    let key = c.dir.path().join("cluster.key");
    let ca_key = c.dir.path().join("cluster-ca.key");
    for path in [&key, &ca_key] {
        assert_eq!(std::fs::metadata(path).unwrap().mode() & 0o777, 0o600);
    }
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    let chmod = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    for (path, what, mode) in [
        (&key, "cluster key", 0o644),
        (&key, "cluster key", 0o660),
        (&ca_key, "cluster CA key", 0o644),
    ] {
        chmod(path, mode);
        let out = run_daemon(&c, "schedd", &[]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            stderr(&out).trim(),
            format!(
                "schedd: error: {what} {} is mode {mode:04o}: it must be readable and \
                 writable by its owner only (chmod 600 {})",
                path.display(),
                path.display()
            )
        );
        chmod(path, 0o600);
    }
    chmod(&key, 0o640);
    let out = run_daemon(
        &c,
        "noded",
        &["--name", "n9", "--spool-dir", "/nonexistent/spool"],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "cluster key {} is mode 0640: it must be readable and writable by its owner only",
            key.display()
        )),
        "{}",
        stderr(&out)
    );
    // Back to 0600: both start again.
    chmod(&key, 0o600);
    c.start_schedd();
    c.wait_nodes_up(1);
}
