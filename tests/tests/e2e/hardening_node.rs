//! End-to-end tests of the node's defences: root jobs refused by config, paths checked as the
//! job user, private spool files, and a checkpoint directory for users without a home.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;

fn one_node(extra_toml: &str) -> TestCluster {
    TestCluster::start_with_config(vec![FakeNode::uniform("n1", 8, A100)], extra_toml)
}

/// Submits as `nobody` and returns the id.
fn submit_as_nobody(c: &TestCluster, args: &[&str]) -> u64 {
    let out = c.run_as(NOBODY, NOBODY, "ysub", &[&["--parsable"], args].concat());
    assert!(out.status.success(), "ysub {args:?}: {}", stderr(&out));
    stdout(&out).trim().parse().expect("job id")
}

fn reason(job: &serde_json::Value) -> String {
    job["reason"].as_str().unwrap_or_default().to_string()
}

#[test]
fn root_jobs_fail_on_a_node_that_refuses_them_and_others_still_run() {
    let c = one_node("allow_root_jobs = false");
    let root_job = c.submit(&["--wrap", "echo ran"]);
    let j = c.wait_state(root_job, "FAILED", SECS(10));
    assert_eq!(
        reason(&j),
        "launch failed: node n1 refuses to run jobs as root (node.allow_root_jobs = false)"
    );
    assert!(
        !c.path(&format!("ysched-{root_job}.out")).exists(),
        "nothing ran as root"
    );

    let user_job = submit_as_nobody(&c, &["--wrap", "echo ran"]);
    c.wait_state(user_job, "COMPLETED", SECS(10));
    assert_eq!(
        read_when_exists(&c.path(&format!("ysched-{user_job}.out")), SECS(5)),
        "ran\n"
    );
}

#[test]
fn working_directory_is_checked_as_the_job_user() {
    let c = one_node("");
    // A directory only root may enter, with one existing subdirectory.
    let secret = c.dir.path().join("secret");
    std::fs::create_dir_all(secret.join("exists")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut reasons = Vec::new();
    for sub in ["exists", "missing"] {
        let workdir = secret.join(sub);
        let workdir = workdir.to_str().unwrap();
        let id = submit_as_nobody(&c, &["-D", workdir, "--wrap", "true"]);
        let j = c.wait_state(id, "FAILED", SECS(10));
        let reason = reason(&j);
        assert!(reason.contains(workdir), "{reason}");
        reasons.push(reason.replace(workdir, "DIR"));
    }
    assert_eq!(
        reasons[0], reasons[1],
        "nobody learns nothing about what exists under a root-only directory"
    );
    assert!(reasons[0].contains("Permission denied"), "{}", reasons[0]);
}

#[test]
fn other_users_cannot_read_a_jobs_script_or_environment_on_the_node() {
    let c = one_node("");
    let marker = c.path("started");
    let id = submit_as_nobody(
        &c,
        &[
            "--wrap",
            &format!("echo up > {}; sleep 3", marker.display()),
        ],
    );
    read_when_exists(&marker, SECS(10));
    let jobs = c.dir.path().join("spool/n1/jobs");
    let dir = jobs.join(id.to_string());
    assert!(dir.join("script").exists(), "the spool is where expected");
    // uid 1 (daemon): an unprivileged user other than the job's.
    let try_as_other = |program: &str, path: &Path| {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(program)
            .arg(path)
            .uid(1)
            .gid(1)
            .output()
            .unwrap()
    };
    for file in ["script", "state.json"] {
        let out = try_as_other("cat", &dir.join(file));
        assert!(!out.status.success(), "uid 1 read {file}: {}", stdout(&out));
    }
    assert!(
        !try_as_other("ls", &jobs).status.success(),
        "uid 1 listed jobs/"
    );
    assert_eq!(std::fs::metadata(dir.join("script")).unwrap().uid(), NOBODY);
    c.wait_state(id, "COMPLETED", SECS(10));
}

#[test]
fn user_without_a_home_gets_a_private_fallback_checkpoint_directory() {
    let nobody = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(NOBODY))
        .unwrap()
        .expect("user nobody");
    if nobody.dir.is_dir() && nobody.dir != Path::new("/") {
        skipped(&format!(
            "nobody has a home here ({}): no fallback to check",
            nobody.dir.display()
        ));
        return;
    }
    let mut c = one_node("");
    // The default checkpoint_root (`~/.ysched/checkpoints`): nobody's home, /nonexistent,
    // does not exist.
    let text = std::fs::read_to_string(&c.conf).unwrap();
    let text: String = text
        .lines()
        .filter(|l| !l.starts_with("checkpoint_root"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&c.conf, text).unwrap();
    c.stop_schedd(nix::sys::signal::Signal::SIGTERM);
    c.start_schedd();
    c.wait_nodes_up(1);

    // Held until a directory an earlier run of this test may have left under the same id
    // (ids restart at 1 in every test cluster) is gone.
    let id = submit_as_nobody(
        &c,
        &[
            "--hold",
            "--wrap",
            "echo \"ck=$YS_CHECKPOINT_DIR\"; echo state > \"$YS_CHECKPOINT_DIR/ck\"",
        ],
    );
    let dir = Path::new("/var/tmp/ysched-checkpoints").join(id.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let out = c.run("yctl", &["release", &id.to_string()]);
    assert!(out.status.success(), "yctl release: {}", stderr(&out));
    let j = c.wait_state(id, "COMPLETED", SECS(10));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_eq!(j["checkpoint_dir"], dir.to_str().unwrap());
        let out = read_when_exists(&c.path(&format!("ysched-{id}.out")), SECS(5));
        assert_eq!(out, format!("ck={}\n", dir.display()));
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (NOBODY, 0o700));
        let root = std::fs::symlink_metadata(dir.parent().unwrap()).unwrap();
        assert_eq!(root.uid(), 0);
        assert_eq!(root.mode() & 0o022, 0);
        assert_eq!(std::fs::read_to_string(dir.join("ck")).unwrap(), "state\n");
    }));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
