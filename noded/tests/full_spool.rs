//! A node whose spool fills up (a small tmpfs, filled to the last byte) while a real job
//! runs: the job runs on (its fence lease is renewed in place), its end is recorded (in the
//! room the node's journal keeps for it) and reported, a launch is refused as the node's
//! fault (not the job's), and the node says it cannot take jobs until there is room again.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;
use ysched_noded::launch::lease::{boottime_ms, Lease, LeaseKeeper};
use ysched_noded::launch::{JobEvent, Launcher, LauncherOptions};

struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

fn mount_tmpfs(dir: &Path, size: &str) -> Mounted {
    let ok = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0755"),
            "tmpfs",
        ])
        .arg(dir)
        .status()
        .unwrap();
    assert!(
        ok.success(),
        "cannot mount a tmpfs (the suite runs as root)"
    );
    Mounted(dir.to_path_buf())
}

/// Fills the file system holding `dir` until about `leave` bytes are free.
fn fill_leaving(dir: &Path, leave: u64) -> PathBuf {
    let path = dir.join("partly");
    let mut f = std::fs::File::create(&path).unwrap();
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    let free = st.blocks_available() as u64 * st.fragment_size() as u64;
    f.write_all(&vec![0x55u8; (free - leave) as usize]).unwrap();
    f.sync_all().unwrap();
    path
}

/// Fills the file system holding `dir` to the last byte.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = [0x55u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
    assert!(
        std::fs::write(dir.join("probe"), b"x").is_err(),
        "the spool is full"
    );
    path
}

fn launcher(fx: &Fixture) -> (Launcher, Events) {
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        spool_reserve_mib: 1,
        ..LauncherOptions::new(fx.spool.path(), NODE)
    })
    .unwrap();
    (launcher, Events::new(events))
}

fn health(events: &Events) -> Vec<Option<String>> {
    events
        .seen
        .iter()
        .filter_map(|e| match e {
            JobEvent::Health(h) => Some(h.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_full_spool_keeps_running_jobs_and_their_ends_and_refuses_launches_as_the_nodes_fault() {
    let fx = Fixture::new();
    let _mounted = mount_tmpfs(fx.spool.path(), "4m");
    let (launcher, mut events) = launcher(&fx);
    assert_eq!(launcher.check_health(), None);
    // Short of the reserve (node.spool_reserve_mib = 1), though writes still work.
    let below_reserve = fill_leaving(fx.spool.path(), 512 * 1024);
    let short = format!(
        "spool full: less than 1 MiB free in {} (node.spool_reserve_mib)",
        fx.spool.path().canonicalize().unwrap().display()
    );
    assert_eq!(launcher.check_health(), Some(short.clone()));
    std::fs::remove_file(below_reserve).unwrap();
    assert_eq!(launcher.check_health(), None);
    events.until("both changes", |e| health(e).len() == 2).await;
    assert_eq!(health(&events), [Some(short), None]);
    events.seen.clear();
    // A fence of 3 s, renewed as schedd's answers would: were a renewal to fail, the job
    // (8 s) would be stopped.
    let renewing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let renewer = {
        let mut lease = LeaseKeeper::new(launcher.lease_path(), 3).unwrap();
        let renewing = renewing.clone();
        std::thread::spawn(move || {
            while renewing.load(std::sync::atomic::Ordering::SeqCst) {
                lease.renew(boottime_ms());
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    launcher
        .launch(fx.job(1, "#!/bin/sh\nsleep 8\necho done\n"))
        .unwrap();
    events.wait_for_start(1).await;
    let filler = fill(fx.spool.path());

    // A launch now cannot write its script: the node's fault, said before the job's end.
    launcher.launch(fx.job(2, "#!/bin/sh\ntrue\n")).unwrap();
    events
        .until("the refused launch", |e| e.finished(2).is_some())
        .await;
    let refused = events.finished(2).unwrap();
    assert!(refused.node_fault, "{refused:?}");
    assert_eq!(
        refused.error,
        "cannot write the job script: No space left on device (os error 28)"
    );
    let full = Some("spool full: No space left on device".to_string());
    assert_eq!(health(&events), std::slice::from_ref(&full));
    let health_at = events
        .seen
        .iter()
        .position(|e| matches!(e, JobEvent::Health(_)))
        .unwrap();
    let end_at = events
        .seen
        .iter()
        .position(|e| matches!(e, JobEvent::Finished(f) if f.job_id == 2))
        .unwrap();
    assert!(health_at < end_at, "the node's word comes first");
    assert_eq!(launcher.unhealthy_reason(), full);

    // The running job runs on, its lease renewed on the full spool, and ends as it would.
    events
        .until("job 1's end", |e| e.finished(1).is_some())
        .await;
    let ended = events.finished(1).unwrap();
    assert_eq!(ended.exit_code, Some(0), "{ended:?}");
    assert!(!ended.fenced && ended.error.is_empty(), "{ended:?}");
    assert_eq!(fx.output("ysched-1.out"), "done\n");
    assert!(matches!(
        Lease::read(&launcher.lease_path()).unwrap(),
        Some(Lease::Until(deadline)) if deadline > boottime_ms()
    ));
    renewing.store(false, std::sync::atomic::Ordering::SeqCst);
    renewer.join().unwrap();
    // Both ends are in the node's journal, in the room it keeps for ends: none is lost.
    let job1 = fx.spool.path().join("jobs/1");
    assert!(!job1.join("finished.json").exists());
    let unacked: Vec<u64> = launcher
        .unacked_finished()
        .iter()
        .map(|f| f.job_id)
        .collect();
    assert_eq!(unacked, [1, 2]);
    // The probe finds the spool still full.
    assert_eq!(launcher.check_health(), full);

    // A noded restarted before schedd acknowledged the ends reports them again from the
    // journal.
    drop(launcher);
    let (launcher, mut events) = self::launcher(&fx);
    let recovery = launcher.recover().await.unwrap();
    assert_eq!(recovery.ended, [1, 2]);
    events
        .until("job 1's end again", |e| e.finished(1).is_some())
        .await;
    let again = events.finished(1).unwrap();
    assert_eq!(again.exit_code, Some(0), "{again:?}");
    assert_eq!(launcher.unacked_finished(), [again, refused]);

    // Room again: the node takes jobs.
    std::fs::remove_file(filler).unwrap();
    assert_eq!(launcher.check_health(), None);
    launcher.ack(1).unwrap();
    launcher.ack(2).unwrap();
    assert!(launcher.unacked_finished().is_empty());
    launcher
        .launch(fx.job(3, "#!/bin/sh\necho three\n"))
        .unwrap();
    let outcome = events.wait_for_end(3).await;
    assert_eq!(outcome.finished.exit_code, Some(0));
    assert!(!outcome.finished.node_fault);
}
