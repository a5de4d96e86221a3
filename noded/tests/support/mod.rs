//! The fixture of the launcher tests: a spool and working directory, launchers over them,
//! their events, and looks at the processes of jobs.

// Each test file uses part of it.
#![allow(dead_code)]

pub mod fake_schedd;

use nix::unistd::{Gid, Uid, User};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::sync::mpsc::UnboundedReceiver;
use ysched_noded::launch::{
    CgroupRoot, Containment, FinishedRecord, JobCgroup, JobEvent, JobParams, JobStarted, Launcher,
    LauncherOptions,
};

pub const NODE: &str = "n1";

/// A spool and a working directory that any user may use (jobs may run as `nobody`).
pub struct Fixture {
    pub spool: TempDir,
    pub work: TempDir,
}

impl Fixture {
    pub fn new() -> Fixture {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let fixture = Fixture {
            spool: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        };
        let open = |dir: &Path, mode| {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        open(fixture.spool.path(), 0o755);
        open(fixture.work.path(), 0o777);
        fixture
    }

    pub fn launcher(&self) -> (Launcher, Events) {
        let (launcher, events) = Launcher::with_options(LauncherOptions {
            supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
            ..LauncherOptions::new(self.spool.path(), NODE)
        })
        .unwrap();
        (launcher, Events::new(events))
    }

    /// A launcher of a node with `node.allow_root_jobs = false`.
    pub fn launcher_refusing_root(&self) -> (Launcher, Events) {
        let (launcher, events) = Launcher::with_options(LauncherOptions {
            supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
            allow_root_jobs: false,
            ..LauncherOptions::new(self.spool.path(), NODE)
        })
        .unwrap();
        (launcher, Events::new(events))
    }

    pub fn workdir(&self) -> &Path {
        self.work.path()
    }

    /// A job of the current user running `script` in the working directory.
    pub fn job(&self, job_id: u64, script: &str) -> JobParams {
        let me = User::from_uid(Uid::effective()).unwrap().unwrap();
        JobParams {
            job_id,
            name: format!("job{job_id}"),
            user: me.name,
            uid: me.uid.as_raw(),
            gid: Gid::effective().as_raw(),
            workdir: self.workdir().to_string_lossy().into_owned(),
            script: script.to_string(),
            grace_secs: 5,
            ..Default::default()
        }
    }

    pub fn output(&self, name: &str) -> String {
        std::fs::read_to_string(self.workdir().join(name)).unwrap_or_default()
    }

    /// The node supervisor's log (what it did with each job), for failure messages.
    pub fn supervisor_log(&self) -> String {
        std::fs::read_to_string(self.spool.path().join("supervisor.log")).unwrap_or_default()
    }
}

/// The launcher's events, kept so that waiting for one job never loses another's.
pub struct Events {
    receiver: UnboundedReceiver<JobEvent>,
    pub seen: Vec<JobEvent>,
}

/// Events of one job until it finishes.
pub struct Outcome {
    pub started: Option<JobStarted>,
    pub finished: FinishedRecord,
}

impl Events {
    pub fn new(receiver: UnboundedReceiver<JobEvent>) -> Events {
        Events {
            receiver,
            seen: Vec::new(),
        }
    }

    pub fn started(&self, job_id: u64) -> Option<JobStarted> {
        self.seen.iter().find_map(|e| match e {
            JobEvent::Started(s) if s.job_id == job_id => Some(*s),
            _ => None,
        })
    }

    pub fn finished(&self, job_id: u64) -> Option<FinishedRecord> {
        self.seen.iter().find_map(|e| match e {
            JobEvent::Finished(f) if f.job_id == job_id => Some(f.clone()),
            _ => None,
        })
    }

    /// Receives events until `done` holds, for at most 60 s.
    pub async fn until(&mut self, what: &str, done: impl Fn(&Events) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = tokio::time::timeout(left, self.receiver.recv())
                .await
                .unwrap_or_else(|_| panic!("{what}: timed out; events so far: {:?}", self.seen))
                .expect("event channel closed");
            self.seen.push(event);
        }
    }

    pub async fn wait_for_start(&mut self, job_id: u64) -> JobStarted {
        self.until(&format!("start of job {job_id}"), |events| {
            if let Some(f) = events.finished(job_id) {
                panic!("job {job_id} ended before starting: {f:?}");
            }
            events.started(job_id).is_some()
        })
        .await;
        self.started(job_id).unwrap()
    }

    /// Waits for the job's end and forgets its events (a job id may be launched again).
    pub async fn wait_for_end(&mut self, job_id: u64) -> Outcome {
        self.until(&format!("end of job {job_id}"), |events| {
            events.finished(job_id).is_some()
        })
        .await;
        let outcome = Outcome {
            started: self.started(job_id),
            finished: self.finished(job_id).unwrap(),
        };
        self.seen.retain(|e| match e {
            JobEvent::Started(s) => s.job_id != job_id,
            JobEvent::Finished(f) => f.job_id != job_id,
            JobEvent::Health(_) => true,
        });
        outcome
    }
}

/// Live (non-zombie) processes whose process group is `pgid`. Processes that died are
/// zombies until someone reaps them, which in a container may be never.
pub fn live_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command in parentheses: state ppid pgrp ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            members.push(pid);
        }
    }
    members
}

pub async fn assert_group_empties(pgid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !live_members(pgid).is_empty() {
        assert!(
            Instant::now() < deadline,
            "processes left in group {pgid}: {:?}",
            live_members(pgid)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn is_root() -> bool {
    Uid::effective().is_root()
}

/// Says that the running test could not run here and passes it: one line
/// `SKIPPED: <test>: <why>` written straight to stderr (not captured by the test harness, so
/// it shows even when the test passes), which `scripts/test.sh` counts and lists at the end.
/// Never skip silently: a test that returns early without this line passed for nothing.
pub fn skipped(why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// Both ways of holding a job's processes together, for tests that run in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// What noded detects on this host: cgroups where the v2 hierarchy is writable.
    Detected,
    /// `node.cgroup_root = "none"`: process groups only.
    ProcessGroups,
}

impl Fixture {
    /// A launcher that contains jobs as `mode` says.
    pub fn launcher_in(&self, mode: Mode) -> (Launcher, Events) {
        let cgroup_root = match mode {
            Mode::Detected => CgroupRoot::Detect,
            Mode::ProcessGroups => CgroupRoot::Disabled,
        };
        let (launcher, events) = Launcher::with_options(LauncherOptions {
            supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
            cgroup_root,
            ..LauncherOptions::new(self.spool.path(), NODE)
        })
        .unwrap();
        (launcher, Events::new(events))
    }

    /// The cgroups noded recorded for a job (in the node's journal, until acknowledged).
    pub fn job_cgroup(&self, job_id: u64) -> Option<JobCgroup> {
        let root = self.spool.path().canonicalize().unwrap();
        let live = ysched_noded::launch::journal::read_live(&root).unwrap();
        let record = live.jobs.get(&job_id)?.record.clone()?;
        record.plan.and_then(|plan| plan.cgroup)
    }

    /// Waits (at most 10 s) until the job's output file contains `text`.
    pub async fn wait_for_output(&self, name: &str, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.output(name);
            if out.contains(text) {
                return out;
            }
            assert!(Instant::now() < deadline, "{text:?} never came: {out:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The writable cgroup v2 hierarchy of this host, if any: where noded must choose cgroups.
pub fn writable_cgroup_v2() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let point = PathBuf::from(fields.get(4)?);
        let read_only = fields.get(5)?.split(',').any(|o| o == "ro");
        let is_standard =
            point == Path::new("/sys/fs/cgroup") || point == Path::new("/sys/fs/cgroup/unified");
        (after.starts_with("cgroup2 ")
            && is_standard
            && !read_only
            && nix::unistd::access(&point, nix::unistd::AccessFlags::W_OK).is_ok())
        .then_some(point)
    })
}

/// Checks that the launcher chose what this host allows: cgroups exactly when a v2 hierarchy
/// is writable here. Returns whether jobs get cgroups.
pub fn check_containment(launcher: &Launcher, mode: Mode) -> bool {
    let containment = launcher.containment();
    let expected = mode == Mode::Detected && writable_cgroup_v2().is_some();
    match containment {
        Containment::Cgroups(_) => assert!(expected, "cgroups chosen unexpectedly: {containment}"),
        Containment::ProcessGroups { .. } => {
            assert!(!expected, "cgroup v2 is writable here, yet: {containment}")
        }
    }
    eprintln!("{mode:?}: jobs contained by {containment}");
    expected
}

/// Whether `pid` is a live process (not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// The pids a job wrote to a file in the working directory, once it has.
pub async fn pids_in(fx: &Fixture, name: &str, count: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids: Vec<u32> = fx
            .output(name)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.len() >= count {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never listed {count} pids"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks that none of `pids` is alive and that the job's cgroups, if any, are gone.
pub fn assert_all_gone(pids: &[u32], cgroup: Option<&JobCgroup>) {
    let living: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(living.is_empty(), "still alive: {living:?}");
    if let Some(cgroup) = cgroup {
        assert!(!cgroup.dir.exists(), "{} left behind", cgroup.dir.display());
        for dir in &cgroup.v1_dirs {
            assert!(!dir.exists(), "{} left behind", dir.display());
        }
    }
}
