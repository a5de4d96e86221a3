//! End-to-end tests of the modes of what the daemons write, with `nobody` as the user who looks:
//! after jobs (their scripts and environments hold secrets) ran on a cluster and on replicas,
//! nothing in schedd's state directories or in a node's spool is open to group or others but
//! the few entries that must be (each named below with why); schedd refuses to start on a
//! state directory others may read; and `yslurm install` refuses a directory another user
//! planted or may change.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;
/// A secret a job carries in its environment: what a loose mode would leak.
const SECRET: &str = "YS_TOKEN=hunter2-in-the-environment";

/// Every entry under `root` (not following links), `root` included: path → (mode with the
/// file type bits, owner).
fn walk(root: &Path) -> BTreeMap<PathBuf, (u32, u32)> {
    let mut found = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue; // removed meanwhile (a job's directory, a sled temporary file)
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                todo.extend(entries.flatten().map(|e| e.path()));
            }
        }
        found.insert(path, (meta.mode(), meta.uid()));
    }
    found
}

/// The entries under `root` that group or others may use, less the `allowed` ones (path →
/// its exact permission bits, each asserted): one line each, empty when all is well.
fn open_to_others(root: &Path, allowed: &dyn Fn(&Path) -> Option<u32>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (path, (mode, owner)) in walk(root) {
        let perms = mode & 0o7777;
        let kind = mode & libc::S_IFMT;
        if kind == libc::S_IFLNK {
            wrong.push(format!("{} is a symlink", path.display()));
            continue;
        }
        match allowed(&path) {
            Some(expected) if perms != expected => wrong.push(format!(
                "{} is mode {perms:04o}, not {expected:04o}",
                path.display()
            )),
            Some(_) => {}
            None if perms & 0o077 != 0 => wrong.push(format!(
                "{} is mode {perms:04o} (owner uid {owner}): group or others may use it",
                path.display()
            )),
            None => {}
        }
    }
    wrong
}

/// schedd's state directory: 0700, every file in it 0600, every directory 0700, root's.
fn assert_state_dir_private(state: &Path) {
    let entries = walk(state);
    assert!(entries.len() > 3, "{entries:?}");
    let mut wrong = Vec::new();
    for (path, (mode, owner)) in &entries {
        let expected = match mode & libc::S_IFMT {
            libc::S_IFDIR => 0o700,
            libc::S_IFREG => 0o600,
            _ => {
                wrong.push(format!(
                    "{} is neither a file nor a directory",
                    path.display()
                ));
                continue;
            }
        };
        if mode & 0o7777 != expected || *owner != 0 {
            wrong.push(format!(
                "{} is mode {:04o}, owner {owner}",
                path.display(),
                mode & 0o7777
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A node's spool: private but for what job users pass through.
fn assert_spool_private(spool: &Path) {
    let jobs = spool.join("jobs");
    let allowed = |path: &Path| -> Option<u32> {
        // The spool's root, `jobs/` and each job's directory: job users must pass through
        // them to run their script (`x`), and nobody may list them or create in them.
        if path == spool || path == jobs || path.parent() == Some(jobs.as_path()) {
            return Some(0o711);
        }
        None
    };
    let wrong = open_to_others(spool, &allowed);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // What the spool holds is root's, but each script: its job user's, 0700.
    for (path, (mode, owner)) in walk(spool) {
        if path.file_name().is_some_and(|n| n == "script") {
            assert_eq!(
                (mode & 0o7777, owner),
                (0o700, NOBODY),
                "{}",
                path.display()
            );
        } else {
            assert_eq!(owner, 0, "{} is not root's", path.display());
        }
    }
}

/// What nobody can see of `path`'s content: `cat` as nobody fails.
fn nobody_cannot_read(path: &Path) -> bool {
    use std::os::unix::process::CommandExt;
    !Command::new("cat")
        .arg(path)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn submit_as_nobody(c: &TestCluster, args: &[&str]) -> u64 {
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &[&["--parsable", "--export", &format!("ALL,{SECRET}")], args].concat(),
    );
    assert!(out.status.success(), "ysub {args:?}: {}", stderr(&out));
    stdout(&out).trim().parse().expect("job id")
}

#[test]
fn nothing_a_daemon_writes_is_open_to_group_or_others_but_what_must_be() {
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 2, A100),
        FakeNode::uniform("n2", 2, A100),
    ]);
    // Ended jobs, an array, and jobs still running (their scripts are in the spools now).
    let done = submit_as_nobody(&c, &["-G", "1", "--wrap", "echo done"]);
    let array = submit_as_nobody(&c, &["-G", "1", "--array", "0-3", "--wrap", "true"]);
    c.wait_state(done, "COMPLETED", SECS(30));
    wait_until(SECS(30), "the array ended", || {
        let jobs = c.jobs();
        let tasks: Vec<_> = jobs.iter().filter(|j| j["array_job_id"] == array).collect();
        tasks.len() == 4 && tasks.iter().all(|j| j["state"] == "COMPLETED")
    });
    let running: Vec<u64> = (0..2)
        .map(|_| submit_as_nobody(&c, &["-G", "2", "--wrap", "sleep 300"]))
        .collect();
    for id in &running {
        c.wait_state(*id, "RUNNING", SECS(30));
    }

    let state = c.state_dir();
    assert_state_dir_private(&state);
    for node in ["n1", "n2"] {
        let spool = c.spool_dir(node);
        assert_spool_private(&spool);
        assert!(nobody_cannot_read(&spool.join("journal")));
        assert!(nobody_cannot_read(&spool.join("lease")));
    }
    // The secret is in the store and the journals: nobody reads neither.
    for (path, (mode, _)) in walk(&state) {
        if mode & libc::S_IFMT == libc::S_IFREG {
            assert!(nobody_cannot_read(&path), "{}", path.display());
        }
    }
    // Outside: the exceptions, each on purpose. The client socket is 0666 (identity comes
    // from the kernel's peer credentials, not from the file's mode); the cluster CA
    // certificate is 0644 (public, copied to every node); the keys are 0600, each host's
    // own key and certificate too (in its identity directory, 0700).
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    let d = c.dir.path();
    assert_eq!(mode(&c.socket()), 0o666);
    assert_eq!(mode(&d.join("cluster-ca.crt")), 0o644);
    assert_eq!(mode(&d.join("cluster-ca.key")), 0o600);
    for node in ["n1", "n2"] {
        let identity = c.spool_dir(node).join("identity");
        assert_eq!(mode(&identity), 0o700);
        assert_eq!(mode(&identity.join("node.key")), 0o600);
        assert_eq!(mode(&identity.join("node.crt")), 0o600);
    }
    // Nothing was disturbed: the jobs run on.
    for id in running {
        assert_eq!(c.job(id)["state"], "RUNNING");
    }
}

#[test]
fn a_replicas_state_directory_is_private_too() {
    let mut r = Replicas::start(3);
    r.start_agent(&FakeNode::uniform("n1", 1, A100));
    let (leader, _) = r.leader(SECS(30));
    wait_until(SECS(30), "the agent registers", || {
        let out = r.run(leader, "yctl", &["nodes", "--json"]);
        out.status.success() && stdout(&out).contains("\"n1\"")
    });
    let ids: Vec<u64> = (0..5)
        .map(|i| {
            r.submit(
                leader,
                &["--hold", "-J", &format!("r{i}"), "--wrap", "true"],
            )
        })
        .collect();
    wait_until(SECS(30), "every replica has the jobs", || {
        (1..=3).all(|n| {
            let listed = r.jobs(n);
            ids.iter().all(|id| listed.iter().any(|j| j["id"] == *id))
        })
    });
    for n in 1..=3 {
        assert_state_dir_private(&r.dir.path().join(format!("state-{n}")));
    }
}

/// Runs schedd with the cluster's config until it exits (it is expected to refuse at once);
/// one that is still running after 20 s is killed, and the test fails.
fn schedd_once(c: &TestCluster) -> Output {
    let mut command = c.program(&bin_dir().join("schedd"));
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = TestCluster::spawn_when_free(&mut command).expect("run schedd");
    let deadline = std::time::Instant::now() + SECS(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("schedd started anyway: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn schedd_refuses_a_state_directory_others_may_read_and_starts_once_it_is_private() {
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let held = c.submit(&["--hold", "--wrap", "true"]);
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    let state = c.state_dir();
    let files_before = walk(&state);
    for mode in [0o755, 0o750, 0o705, 0o770, 0o701] {
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = schedd_once(&c);
        assert!(
            !out.status.success(),
            "schedd started on a {mode:04o} state dir"
        );
        let d = state.display();
        assert_eq!(
            stderr(&out).trim_end(),
            format!(
                "schedd: error: state directory {d} is mode {mode:04o}: it must be readable, \
                 writable and searchable by its owner only (chmod 700 {d})"
            )
        );
        // Refused before anything was opened or changed in it.
        assert_eq!(
            std::fs::metadata(&state).unwrap().mode() & 0o7777,
            mode,
            "schedd changed the mode it refused"
        );
        let after: Vec<PathBuf> = walk(&state).into_keys().collect();
        assert_eq!(after, files_before.keys().cloned().collect::<Vec<_>>());
    }
    // Once private again, schedd starts on it with the job it had.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    c.start_schedd();
    c.wait_nodes_up(1);
    assert_eq!(c.job(held)["state"], "HELD");
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

/// `yslurm install DIR` as root, with no other Slurm on PATH.
fn install(c: &TestCluster, dir: &Path) -> Output {
    let yslurm = c.bin_copy("yslurm");
    TestCluster::output_when_free(
        c.program(&yslurm)
            .args(["install", &dir.display().to_string()])
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null()),
    )
    .expect("run yslurm install")
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn yslurm_install_refuses_what_another_user_planted_or_may_change() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    // `work` is world-writable and sticky (as /tmp): nobody plants there.
    let target = c.dir.path().join("root-only");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let planted = c.path("slurm-bin");
    let theirs = c.path("their-bin");
    let entry = c.path("entry-bin");
    let open = c.path("open-bin");
    std::fs::create_dir(&entry).unwrap();
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    sh_as_nobody(&format!(
        "ln -s {} {} && mkdir {} && ln -s /nonexistent/elsewhere {}/sbatch",
        target.display(),
        planted.display(),
        theirs.display(),
        open.display()
    ));
    // An entry it would make, already there as a link (planted when the directory was open).
    std::os::unix::fs::symlink(c.path("elsewhere"), entry.join("squeue")).unwrap();
    let cases = [
        (
            &planted,
            format!(
                "{} is a symbolic link: give the directory itself (links in a directory others \
                 may write can be swapped); nothing was installed",
                planted.display()
            ),
        ),
        (
            &theirs,
            format!(
                "{} belongs to uid {NOBODY}: it must be yours or root's, or its owner could \
                 swap the links; nothing was installed",
                theirs.display()
            ),
        ),
        (
            &open,
            format!(
                "{} is mode 0777: others may write it (and swap the links); make it writable \
                 by its owner only (chmod go-w {}) or choose another directory; nothing was \
                 installed",
                open.display(),
                open.display()
            ),
        ),
        (
            &entry,
            format!(
                "{} is a symbolic link to {}, not to yslurm; nothing was installed",
                entry.join("squeue").display(),
                c.path("elsewhere").display()
            ),
        ),
    ];
    for (dir, message) in cases {
        let out = install(&c, dir);
        assert!(!out.status.success(), "installed in {}", dir.display());
        assert_eq!(
            stderr(&out).trim_end(),
            format!("yslurm install: error: {message}")
        );
    }
    // Nothing was made anywhere: not through the link, not beside the planted entries.
    assert!(entries(&target).is_empty(), "{:?}", entries(&target));
    assert!(entries(&theirs).is_empty());
    assert_eq!(entries(&open), ["sbatch"]);
    assert_eq!(entries(&entry), ["squeue"]);
    // A directory of root's that only root may write: installed.
    let mine = c.dir.path().join("slurm-bin");
    let out = install(&c, &mine);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(entries(&mine).contains(&"sbatch".to_string()));
}
