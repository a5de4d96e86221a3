//! Tests of the spool: records round-trip, files are private, an old spool is tightened.

use super::*;

#[test]
fn records_round_trip_and_ids_list() {
    let root = tempfile::tempdir().unwrap();
    let spool = Spool::open(root.path()).unwrap();
    let dir = spool.create_job_dir(42).unwrap();
    std::fs::create_dir(root.path().join("jobs/not-a-job")).unwrap();
    spool.create_job_dir(7).unwrap();
    assert_eq!(spool.job_ids().unwrap(), vec![7, 42]);

    assert_eq!(dir.read_exit().unwrap(), None);
    let exit = ExitRecord {
        exit_code: Some(3),
        end_time_ms: 5,
        ..Default::default()
    };
    dir.write_exit(&exit).unwrap();
    assert_eq!(dir.read_exit().unwrap(), Some(exit.clone()));
    // Into a blank, in place: the blank reads as nothing, the record fills its start.
    dir.prepare_exit().unwrap();
    assert_eq!(dir.read_exit().unwrap(), None);
    let failed = ExitRecord {
        error: Some("x".repeat(100_000)),
        node_fault: true,
        ..exit.clone()
    };
    dir.write_exit(&failed).unwrap();
    assert_eq!(
        std::fs::metadata(dir.exit()).unwrap().len(),
        EXIT_RECORD_BYTES as u64
    );
    let read = dir.read_exit().unwrap().unwrap();
    assert!(read.node_fault);
    assert_eq!(
        read.error.unwrap().len(),
        EXIT_ERROR_MAX_BYTES + '…'.len_utf8()
    );
    dir.write_exit(&exit).unwrap();
    dir.write_job_pid(1234).unwrap();
    assert_eq!(dir.read_job_pid(), Some(1234));
    assert!(!dir.has_stop_notice());
    assert_eq!(dir.read_stop_notice(), None);
    dir.write_stop_notice(77).unwrap();
    assert!(dir.has_stop_notice());
    assert_eq!(dir.read_stop_notice(), Some(77));
    assert_eq!(dir.lease(), Some(spool.lease_path()));
    assert_eq!(
        spool.lease_path(),
        root.path().canonicalize().unwrap().join("lease")
    );
    // An exit record of an older noded's per-job process (without the fence's fields) still
    // reads.
    std::fs::write(
        dir.exit(),
        br#"{"exit_code":1,"signal":null,"end_time_ms":9,"error":null}"#,
    )
    .unwrap();
    let old_exit = dir.read_exit().unwrap().unwrap();
    assert!(!old_exit.fenced && !old_exit.killed && old_exit.term_time_ms == 0);
    // A state file of an older noded (without the newer fields) still reads.
    let mut old: serde_json::Value = serde_json::to_value(JobRecord::unreadable(42)).unwrap();
    for key in ["kill_found_processes", "warn_sent"] {
        old["stop"].as_object_mut().unwrap().remove(key);
    }
    std::fs::write(dir.state(), old.to_string()).unwrap();
    assert_eq!(dir.read_record().unwrap().stop, StopState::default());
    // Its process's pid is under the name it gave it, read and written.
    old["shepherd_pid"] = 4321.into();
    std::fs::write(dir.state(), old.to_string()).unwrap();
    let record = dir.read_record().unwrap();
    assert_eq!(record.old_process_pid, Some(4321));
    let written = serde_json::to_value(&record).unwrap();
    assert_eq!(written["shepherd_pid"], 4321);

    std::fs::write(dir.finished(), b"{not json").unwrap();
    let err = dir.read_finished().unwrap_err().to_string();
    assert!(err.contains("finished.json"), "{err}");

    spool.remove_job(42).unwrap();
    spool.remove_job(42).unwrap();
    assert_eq!(spool.job_ids().unwrap(), vec![7]);
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn files_are_private_and_an_old_spool_is_tightened() {
    let root = tempfile::tempdir().unwrap();
    let spool = Spool::open(root.path()).unwrap();
    assert_eq!(mode(&root.path().join("jobs")), DIR_MODE);
    let dir = spool.create_job_dir(3).unwrap();
    assert_eq!(mode(dir.path()), DIR_MODE);
    dir.write_record(&JobRecord::unreadable(3)).unwrap();
    dir.write_exit(&ExitRecord::default()).unwrap();
    dir.write_finished(&FinishedRecord::default()).unwrap();
    dir.write_job_pid(99).unwrap();
    dir.write_stop_notice(1).unwrap();
    let files = [
        dir.state(),
        dir.exit(),
        dir.finished(),
        dir.pid(),
        dir.stop_notice(),
    ];
    for file in files {
        assert_eq!(mode(&file), FILE_MODE, "{}", file.display());
    }

    // As an older noded left it: everything readable by everyone.
    let open = |path: &Path, m: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(m)).unwrap()
    };
    std::fs::write(dir.script(), b"#!/bin/sh\n").unwrap();
    std::fs::write(dir.old_process_log(), b"log\n").unwrap();
    open(root.path(), 0o777);
    open(&root.path().join("jobs"), 0o755);
    open(dir.path(), 0o755);
    open(&dir.script(), 0o755);
    for file in [dir.state(), dir.exit(), dir.old_process_log()] {
        open(&file, 0o644);
    }
    // A link is never followed (nor changed).
    let outside = root.path().join("outside");
    std::fs::write(&outside, b"x").unwrap();
    open(&outside, 0o644);
    std::os::unix::fs::symlink(&outside, dir.path().join("link")).unwrap();

    let spool = Spool::open(root.path()).unwrap();
    let dir = spool.job_dir(3);
    assert_eq!(mode(root.path()), 0o711);
    assert_eq!(mode(&root.path().join("jobs")), DIR_MODE);
    assert_eq!(mode(dir.path()), DIR_MODE);
    assert_eq!(mode(&dir.script()), SCRIPT_MODE);
    for file in [dir.state(), dir.exit(), dir.old_process_log()] {
        assert_eq!(mode(&file), FILE_MODE, "{}", file.display());
    }
    assert_eq!(mode(&outside), 0o644);
}

#[test]
fn a_job_directory_is_removed_and_a_leftover_one_replaced() {
    let root = tempfile::tempdir().unwrap();
    let spool = Spool::open(root.path()).unwrap();
    // Today's directory: only the script.
    let dir = spool.create_job_dir(5).unwrap();
    std::fs::write(dir.script(), "#!/bin/sh\ntrue\n").unwrap();
    spool.remove_job(5).unwrap();
    assert!(!dir.path().exists());
    // An empty one, and one of an older noded's per-job process, holding more than a script.
    let dir = spool.create_job_dir(6).unwrap();
    spool.remove_job(6).unwrap();
    assert!(!dir.path().exists());
    let dir = spool.create_job_dir(7).unwrap();
    std::fs::write(dir.script(), "#!/bin/sh\ntrue\n").unwrap();
    dir.write_record(&JobRecord::unreadable(7)).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/file"), "x").unwrap();
    // Left behind: a new run's directory starts empty, with its mode.
    let again = spool.create_job_dir(7).unwrap();
    assert_eq!(std::fs::read_dir(again.path()).unwrap().count(), 0);
    assert_eq!(mode(again.path()), DIR_MODE);
    spool.remove_job(7).unwrap();
    assert!(!again.path().exists());
    assert!(spool.job_ids().unwrap().is_empty());
}
