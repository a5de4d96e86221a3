//! The agent's session against a fake schedd: registration, launch, events, reconnects,
//! resending unacknowledged ends, acknowledgements, kills at registration, heartbeats and
//! the fence lease they renew, login nodes.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;
use support::fake_schedd::*;
use ysched_noded::agent::{Agent, AgentConfig};
use ysched_noded::launch::lease::{boottime_ms, Lease};
use ysched_noded::launch::{Launcher, LauncherOptions};
use ysched_proto as pb;
use ysched_proto::agent_message::Msg as AgentMsg;
use ysched_proto::scheduler_message::Msg as SchedulerMsg;

/// Writes a cluster key as an administrator installs one: readable by its owner only (noded
/// refuses any other).
fn write_key(path: &std::path::Path, key: &str) {
    std::fs::write(path, key).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_with_schedd_end_to_end() {
    let spool = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(spool.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    // schedd is not up yet when the agent starts: it must keep retrying.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(spool.path(), "n1")
    })
    .unwrap();
    let (ca_cert_pem, tls) = fake_schedd_tls();
    let config = AgentConfig {
        replicas: Vec::new(),
        gpus: vec![pb::Gpu {
            index: 0,
            uuid: "GPU-0".into(),
            ..Default::default()
        }],
        features: vec!["ib".into()],
        ..agent_config(port, ca_cert_pem.clone())
    };
    let agent = tokio::spawn(Agent::new(config, launcher, events).unwrap().run());
    tokio::time::sleep(Duration::from_millis(400)).await;

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let mut schedd = Schedd::serve(listener, ca_cert_pem, tls);

    // Session 1: registration, then a job runs; the session breaks while it runs.
    let mut session = schedd.next_session().await;
    assert_eq!(session.authorization.as_deref(), Some("Bearer sekrit"));
    let register = session.register(vec![]).await;
    assert_eq!(register.name, "n1");
    assert_eq!((register.cpus, register.mem_mib), (4, 1024));
    assert_eq!(register.gpus.len(), 1);
    assert_eq!(register.features, vec!["ib"]);
    assert_eq!(register.version, ysched_noded::VERSION);
    assert_eq!(register.role, "compute");
    assert_eq!(register.fence_after_secs, 30);
    assert!(register.running_jobs.is_empty() && register.finished.is_empty());
    session.send(SchedulerMsg::Launch(job(
        1,
        work.path(),
        "#!/bin/sh\nsleep 2\nexit 4\n",
    )));
    let AgentMsg::Started(started) = session.next().await else {
        panic!("expected JobStarted");
    };
    assert_eq!(started.job_id, 1);
    assert!(started.pid > 1);
    // Unknown jobs are ignored, not fatal.
    session.send(SchedulerMsg::Stop(pb::StopJob {
        job_id: 999,
        grace_secs: 1,
        reason: "test".into(),
    }));
    drop(session); // schedd "restarts"

    // Session 2: the job is still running; it ends and is reported, but not acknowledged.
    let mut session = schedd.next_session().await;
    let register = session.register(vec![]).await;
    assert_eq!(register.running_jobs, vec![1]);
    assert!(register.finished.is_empty());
    let AgentMsg::Finished(finished) = session.next().await else {
        panic!("expected JobFinished");
    };
    assert_eq!((finished.job_id, finished.exit_code), (1, Some(4)));
    assert_eq!(
        session.next_heartbeat().await.running_jobs,
        Vec::<u64>::new()
    );
    drop(session);

    // Session 3: the unacknowledged end is resent at registration; the ack forgets it.
    let mut session = schedd.next_session().await;
    let register = session.register(vec![]).await;
    assert_eq!(register.finished, vec![finished]);
    session.send(SchedulerMsg::Ack(pb::AckFinished { job_id: 1 }));
    session.send(SchedulerMsg::Launch(job(
        2,
        work.path(),
        "#!/bin/sh\nsleep 100\n",
    )));
    let AgentMsg::Started(started) = session.next().await else {
        panic!("expected JobStarted");
    };
    assert_eq!(started.job_id, 2);
    assert!(
        !spool.path().join("jobs/1").exists(),
        "acknowledged job forgotten"
    );
    drop(session);

    // Session 4: schedd no longer knows job 2 and has it killed at registration.
    let mut session = schedd.next_session().await;
    let register = session.register(vec![2]).await;
    assert_eq!(register.running_jobs, vec![2]);
    assert!(register.finished.is_empty());
    let AgentMsg::Finished(finished) = session.next().await else {
        panic!("expected JobFinished");
    };
    assert_eq!(finished.job_id, 2);
    assert_eq!(finished.signal, Some(libc::SIGKILL));
    assert!(finished.killed && finished.stop_requested);

    agent.abort();
}

/// The real binary: stopping noded (SIGTERM) leaves the job running; the next noded
/// re-attaches to it and reports its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noded_process_restart_keeps_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut schedd = Schedd::start().await;
    let (port, ca_cert_pem) = (schedd.port, schedd.ca_cert_pem.clone());

    let path = |name: &str| dir.path().join(name);
    write_key(&path("key"), "k3y\n");
    // The agent pins the CA found beside the cluster key.
    std::fs::write(path("cluster-ca.crt"), ca_cert_pem).unwrap();
    std::fs::write(
        path("ysched.toml"),
        format!(
            "[scheduler]\ncluster_key_file = {:?}\nheartbeat_secs = 1\n\
             [node]\nspool_dir = {:?}\nschedd = \"127.0.0.1:{port}\"\nfeatures = [\"fast\"]\n",
            path("key"),
            path("spool"),
        ),
    )
    .unwrap();
    std::fs::write(
        path("gpus.toml"),
        "[[gpu]]\nindex = 0\nuuid = \"GPU-a\"\nmodel = \"NVIDIA A100-SXM4-80GB\"\nmemory_mib = 81920\nnvlink = [1]\n\
         [[gpu]]\nindex = 1\nuuid = \"GPU-b\"\nmodel = \"NVIDIA A100-SXM4-80GB\"\nmemory_mib = 81920\nnvlink = [0]\n",
    )
    .unwrap();
    let start_noded = || {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_noded"))
            .env("YSCHED_CONF", path("ysched.toml"))
            .args(["--name", "n9", "--address", "10.1.2.3", "--client-socket"])
            .arg(path("noded.sock"))
            .arg("--fake-gpus")
            .arg(path("gpus.toml"))
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };

    let mut noded = start_noded();
    let mut session = schedd.next_session().await;
    assert_eq!(session.authorization.as_deref(), Some("Bearer k3y"));
    let register = session.register(vec![]).await;
    assert_eq!(
        (register.name.as_str(), register.address.as_str()),
        ("n9", "10.1.2.3")
    );
    assert_eq!(register.gpus.len(), 2);
    assert_eq!(register.gpus[1].nvlink, vec![0]);
    assert!(register.features.contains(&"fast".to_string()));
    session.send(SchedulerMsg::Launch(job(
        7,
        work.path(),
        "#!/bin/sh\nsleep 3\nexit 9\n",
    )));
    let AgentMsg::Started(started) = session.next().await else {
        panic!("expected JobStarted");
    };

    // Stop noded; the job must survive it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(noded.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = noded.wait().await.unwrap();
    assert!(status.success(), "noded exits cleanly on SIGTERM: {status}");
    assert!(
        std::path::Path::new(&format!("/proc/{}", started.pid)).exists(),
        "job still running"
    );
    drop(session);

    let _noded = start_noded();
    let mut session = schedd.next_session().await;
    let register = session.register(vec![]).await;
    assert_eq!(register.running_jobs, vec![7]);
    let AgentMsg::Finished(finished) = session.next().await else {
        panic!("expected JobFinished");
    };
    assert_eq!(
        (finished.job_id, finished.exit_code),
        (7, Some(9)),
        "{finished:?}"
    );
}

/// Each heartbeat carries the newest modification time under each running job's checkpoint
/// directory; a directory with more entries than the scan's bound is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_carry_checkpoint_times_but_not_of_huge_directories() {
    let spool = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(spool.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut schedd = Schedd::start().await;
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(spool.path(), "n1")
    })
    .unwrap();
    let config = schedd.agent_config();
    let agent = tokio::spawn(Agent::new(config, launcher, events).unwrap().run());
    let mut session = schedd.next_session().await;
    session.register(vec![]).await;

    // Job 1 saves a checkpoint once started; job 2's directory holds 5,000 files (past the
    // bound of 4,096), one of them fresh.
    let huge = work.path().join("ck2");
    std::fs::create_dir(&huge).unwrap();
    for i in 0..5000 {
        std::fs::write(huge.join(i.to_string()), b"").unwrap();
    }
    let before = ysched_common::time::now_ms();
    let mut saver = job(
        1,
        work.path(),
        "#!/bin/sh\nsleep 0.3\necho x > \"$YS_CHECKPOINT_DIR/step\"\nsleep 100\n",
    );
    saver.checkpoint_dir = work.path().join("ck1").to_string_lossy().into_owned();
    let mut hoarder = job(2, work.path(), "#!/bin/sh\nsleep 100\n");
    hoarder.checkpoint_dir = huge.to_string_lossy().into_owned();
    session.send(SchedulerMsg::Launch(saver));
    session.send(SchedulerMsg::Launch(hoarder));

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut beats_with_job_1 = 0;
    while beats_with_job_1 < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "no heartbeat reported job 1's checkpoint"
        );
        let beat = session.next_heartbeat().await;
        assert!(
            beat.checkpoints.iter().all(|c| c.job_id != 2),
            "a directory past the bound was reported: {beat:?}"
        );
        if let Some(c) = beat.checkpoints.iter().find(|c| c.job_id == 1) {
            assert!(
                c.newest_mtime_ms >= before - 1000
                    && c.newest_mtime_ms <= ysched_common::time::now_ms(),
                "{c:?}, launched at {before}"
            );
            assert!(beat.running_jobs.contains(&1));
            beats_with_job_1 += 1;
        }
    }

    for job_id in [1, 2] {
        session.send(SchedulerMsg::Stop(pb::StopJob {
            job_id,
            grace_secs: 1,
            reason: "test over".into(),
        }));
    }
    let mut ended = Vec::new();
    while ended.len() < 2 {
        if let AgentMsg::Finished(finished) = session.next().await {
            ended.push(finished.job_id);
        }
    }
    agent.abort();
}

/// Waits (at most 10 s) until the lease file holds a deadline other than `old`.
async fn lease_changed_from(path: &std::path::Path, old: Option<u64>) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(Lease::Until(ms)) = Lease::read(path).unwrap() {
            if Some(ms) != old {
                return ms;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease {} never changed from {old:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The registration and each acknowledged heartbeat renew the fence lease to the time the
/// agent *sent* them plus `fence_after_secs`, never backwards; heartbeats are numbered from 1
/// in each session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_renew_the_fence_lease_from_send_times() {
    const F_MS: u64 = 30_000;
    let spool = tempfile::tempdir().unwrap();
    std::fs::set_permissions(spool.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut schedd = Schedd::start().await;
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(spool.path(), "n1")
    })
    .unwrap();
    let lease = launcher.lease_path();
    assert_eq!(lease, spool.path().canonicalize().unwrap().join("lease"));
    let before_register = boottime_ms();
    let agent = tokio::spawn(
        Agent::new(schedd.agent_config(), launcher, events)
            .unwrap()
            .run(),
    );

    let mut session = schedd.next_session().await;
    let register = session.take_register().await;
    let register_received = boottime_ms();
    assert_eq!(register.role, "compute");
    assert_eq!(register.fence_after_secs, 30);
    assert_eq!(
        Lease::read(&lease).unwrap(),
        Some(Lease::Off),
        "made at start (renewals only rewrite it), fencing nothing before schedd answers"
    );
    // A late answer: the lease still counts from when the Register was sent.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let answered = boottime_ms();
    session.send(SchedulerMsg::Registered(pb::Registered::default()));
    let registered_until = lease_changed_from(&lease, None).await;
    assert!(
        registered_until >= before_register + F_MS && registered_until <= register_received + F_MS,
        "deadline {registered_until}: Register sent in [{before_register}, {register_received}]"
    );
    assert!(registered_until < answered + F_MS - 500);

    let beat = session.next_heartbeat().await;
    assert_eq!(beat.seq, 1);
    let beat = session.next_heartbeat().await;
    let beat_2_received = boottime_ms();
    assert_eq!(beat.seq, 2);
    // Acknowledged late too: the deadline is heartbeat 2's sending plus F.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let acked = boottime_ms();
    session.send(SchedulerMsg::HeartbeatAck(pb::HeartbeatAck { seq: 2 }));
    let renewed = lease_changed_from(&lease, Some(registered_until)).await;
    assert!(
        renewed > registered_until && renewed <= beat_2_received + F_MS,
        "renewed to {renewed}; heartbeat 2 received at {beat_2_received}"
    );
    assert!(
        renewed < acked + F_MS - 500,
        "{renewed} counts from the ack at {acked}"
    );

    // Heartbeat 1 was acknowledged with 2 (an older send time would move the deadline
    // back); 999 was never sent. Neither changes the lease.
    session.send(SchedulerMsg::HeartbeatAck(pb::HeartbeatAck { seq: 1 }));
    session.send(SchedulerMsg::HeartbeatAck(pb::HeartbeatAck { seq: 999 }));
    let beat = session.next_heartbeat().await;
    assert_eq!(beat.seq, 3);
    assert_eq!(Lease::read(&lease).unwrap(), Some(Lease::Until(renewed)));

    // A new session numbers its heartbeats from 1 again.
    drop(session);
    let mut session = schedd.next_session().await;
    session.register(vec![]).await;
    let reregistered = lease_changed_from(&lease, Some(renewed)).await;
    assert!(reregistered > renewed);
    assert_eq!(session.next_heartbeat().await.seq, 1);
    agent.abort();
}

/// `noded --no-jobs`: a login node registers no resources and no fencing, says "off" in its
/// lease (stopping any fence of an earlier run), refuses every launch, and serves its
/// client socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_node_offers_nothing_runs_nothing_and_relays_clients() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut schedd = Schedd::start().await;
    let path = |name: &str| dir.path().join(name);
    write_key(&path("key"), &format!("{KEY}\n"));
    std::fs::write(path("cluster-ca.crt"), &schedd.ca_cert_pem).unwrap();
    std::fs::write(
        path("ysched.toml"),
        format!(
            "[scheduler]\ncluster_key_file = {:?}\nheartbeat_secs = 1\n\
             [node]\nspool_dir = {:?}\nschedd = \"127.0.0.1:{}\"\nfeatures = [\"fast\"]\n\
             fence_after_secs = 5\n",
            path("key"),
            path("spool"),
            schedd.port,
        ),
    )
    .unwrap();
    // What an earlier compute agent of this host left.
    std::fs::create_dir(path("spool")).unwrap();
    Lease::Until(1).write(&path("spool/lease")).unwrap();
    let socket = path("run/noded.sock");
    let _noded = tokio::process::Command::new(env!("CARGO_BIN_EXE_noded"))
        .env("YSCHED_CONF", path("ysched.toml"))
        .args(["--name", "login1", "--address", "10.0.0.9", "--no-jobs"])
        .arg("--client-socket")
        .arg(&socket)
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let mut session = schedd.next_session().await;
    let register = session.register(vec![]).await;
    assert_eq!(register.name, "login1");
    assert_eq!(register.role, "login");
    assert_eq!(register.fence_after_secs, 0);
    assert_eq!((register.cpus, register.mem_mib), (0, 0));
    assert!(register.gpus.is_empty() && register.features.is_empty());
    assert_eq!(Lease::read(&path("spool/lease")).unwrap(), Some(Lease::Off));

    session.send(SchedulerMsg::Launch(job(
        3,
        work.path(),
        "#!/bin/sh\necho ran > ran.txt\n",
    )));
    let AgentMsg::Finished(finished) = session.next().await else {
        panic!("a launch on a login node must end at once, never start");
    };
    assert_eq!(finished.job_id, 3);
    assert!(
        finished.error.contains("login1 is a login node"),
        "{finished:?}"
    );
    assert!(!work.path().join("ran.txt").exists());

    let mut client = unix_client(&socket).await;
    let reply = client
        .submit(pb::SubmitRequest::default())
        .await
        .expect("relayed submit");
    assert_eq!(reply.into_inner().job_id, 4242);
    let call = schedd.next_call().await;
    let caller = call.caller.expect("caller named");
    assert_eq!(caller.node, "login1");
    assert_eq!(caller.uid, nix::unistd::getuid().as_raw());
    assert_eq!(caller.relay_token, RELAY_TOKEN);
    assert_ne!(
        call.remote, session.remote,
        "relayed on a connection of its own"
    );
}

/// The real binary, frozen (SIGSTOP) while its job runs and schedd stays silent: the job's
/// supervisor stops the job on its own once the lease runs out (`fence_after_secs = 2`), and
/// noded, thawed, reports the end as fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_noded_still_fences_its_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut schedd = Schedd::start().await;
    let path = |name: &str| dir.path().join(name);
    write_key(&path("key"), &format!("{KEY}\n"));
    std::fs::write(path("cluster-ca.crt"), &schedd.ca_cert_pem).unwrap();
    std::fs::write(
        path("ysched.toml"),
        format!(
            "[scheduler]\ncluster_key_file = {:?}\nheartbeat_secs = 1\n\
             [node]\nspool_dir = {:?}\nschedd = \"127.0.0.1:{}\"\nfence_after_secs = 2\n\
             cgroup_root = \"none\"\n",
            path("key"),
            path("spool"),
            schedd.port,
        ),
    )
    .unwrap();
    let mut noded = tokio::process::Command::new(env!("CARGO_BIN_EXE_noded"))
        .env("YSCHED_CONF", path("ysched.toml"))
        .args([
            "--name",
            "n5",
            "--address",
            "127.0.0.1",
            "--client-socket",
            "",
        ])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let noded_pid = nix::unistd::Pid::from_raw(noded.id().unwrap() as i32);

    let mut session = schedd.next_session().await;
    let session_seen = std::time::Instant::now();
    let register = session.register(vec![]).await;
    assert_eq!(register.fence_after_secs, 2);
    session.send(SchedulerMsg::Launch(job(
        11,
        work.path(),
        "#!/bin/sh\ntrap 'echo got-term; exit 3' TERM\nsh -c 'echo ready; exec sleep 100' &\nwait\n",
    )));
    let AgentMsg::Started(started) = session.next().await else {
        panic!("expected JobStarted");
    };
    // Heartbeats are never acknowledged: the lease runs out 2 s after the Register went out.
    nix::sys::signal::kill(noded_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let out = work.path().join("ysched-11.out");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{}", started.pid)).exists()
        && !std::fs::read_to_string(&out)
            .unwrap_or_default()
            .contains("got-term")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the job was not fenced while noded was stopped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        session_seen.elapsed() >= Duration::from_millis(1900),
        "fenced before the lease ran out"
    );
    nix::sys::signal::kill(noded_pid, nix::sys::signal::Signal::SIGCONT).unwrap();

    let finished = loop {
        match session.next().await {
            AgentMsg::Finished(finished) => break finished,
            _ => continue,
        }
    };
    assert_eq!(finished.job_id, 11);
    assert!(finished.fenced && !finished.stop_requested, "{finished:?}");
    assert_eq!(finished.exit_code, Some(3), "{finished:?}");
    assert!(
        finished.term_time_ms > 0 && !finished.killed,
        "{finished:?}"
    );
    noded.kill().await.unwrap();
}

/// Waits for the first heartbeat that `wanted` accepts (they come every second, and at once
/// when the GPUs' health changes).
async fn heartbeat_where(
    session: &mut Session,
    wanted: impl Fn(&pb::Heartbeat) -> bool,
) -> pb::Heartbeat {
    for _ in 0..20 {
        let beat = session.next_heartbeat().await;
        if wanted(&beat) {
            return beat;
        }
    }
    panic!("no such heartbeat in 20");
}

fn fault_indices(beat: &pb::Heartbeat) -> Vec<(u32, String)> {
    beat.gpu_faults
        .iter()
        .map(|f| (f.index, f.reason.clone()))
        .collect()
}

/// The GPU health thread: a fault written to the fake inventory reaches schedd in the
/// heartbeats (at once, not a heartbeat later) and stays after the file is repaired (an
/// event), until schedd says the GPU was returned to service: then the next report, taken
/// after the forget, confirms it. An agent without a health thread confirms at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_faults_reach_schedd_and_forgets_are_confirmed() {
    use ysched_noded::gpu::{health_monitor, FakeInventory, GpuInventory};
    use ysched_noded::gpu_watch::GpuWatch;
    let spool = tempfile::tempdir().unwrap();
    std::fs::set_permissions(spool.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let gpus_file = spool.path().join("gpus.toml");
    let write_gpus = |fault_of_1: &str| {
        let text: String = (0..2)
            .map(|i| {
                let extra = if i == 1 { fault_of_1 } else { "" };
                format!(
                    "[[gpu]]\nindex = {i}\nuuid = \"GPU-{i}\"\nmodel = \"NVIDIA A10\"\n\
                     memory_mib = 24576\n{extra}\n"
                )
            })
            .collect();
        let new = spool.path().join("gpus.toml.new");
        std::fs::write(&new, text).unwrap();
        std::fs::rename(&new, &gpus_file).unwrap();
    };
    write_gpus("");
    let gpus = FakeInventory::new(&gpus_file).gpus().unwrap();
    let watch = GpuWatch::start(
        Some(health_monitor(Some(&gpus_file), None, &gpus)),
        Some(Duration::from_millis(100)),
    );
    let mut schedd = Schedd::start().await;
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(spool.path(), "n1")
    })
    .unwrap();
    let config = AgentConfig {
        replicas: Vec::new(),
        gpus: gpus.iter().map(pb::Gpu::from).collect(),
        // Heartbeats far apart: a fault must not wait for the next one.
        heartbeat: Duration::from_secs(3600),
        fence_after_secs: 0,
        ..schedd.agent_config()
    };
    let agent = Agent::new(config, launcher, events)
        .unwrap()
        .with_gpu_watch(watch);
    let agent = tokio::spawn(agent.run());
    let mut session = schedd.next_session().await;
    let register = session.register(vec![]).await;
    assert!(register.gpu_faults.is_empty());

    write_gpus("fault = \"XID 79: GPU has fallen off the bus\"");
    let xid = vec![(1, "XID 79: GPU has fallen off the bus".to_string())];
    let beat = tokio::time::timeout(Duration::from_secs(10), session.next_heartbeat())
        .await
        .expect("a heartbeat at once, not an hour later");
    assert_eq!(fault_indices(&beat), xid);
    assert!(beat.gpu_faults_forgotten.is_empty());

    // Repaired in the file: an event is still reported until forgotten.
    write_gpus("");
    tokio::time::sleep(Duration::from_millis(300)).await;
    session.send(SchedulerMsg::ResumeGpu(pb::ResumeGpu { index: 1 }));
    let beat = heartbeat_where(&mut session, |b| !b.gpu_faults_forgotten.is_empty()).await;
    assert_eq!(beat.gpu_faults_forgotten, [1]);
    assert!(beat.gpu_faults.is_empty(), "{beat:?}");

    // A new session's registration carries the set the thread found meanwhile.
    write_gpus("failing = \"pages pending retirement\"");
    let beat = heartbeat_where(&mut session, |b| !b.gpu_faults.is_empty()).await;
    assert_eq!(beat.gpu_faults[0].reason, "pages pending retirement");
    drop(session);
    let mut session = schedd.next_session().await;
    let register = session.register(vec![]).await;
    assert_eq!(register.gpu_faults.len(), 1);
    agent.abort();

    // Without a health thread, a forget is confirmed at once.
    let spool = tempfile::tempdir().unwrap();
    std::fs::set_permissions(spool.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(spool.path(), "n1")
    })
    .unwrap();
    let config = AgentConfig {
        replicas: Vec::new(),
        heartbeat: Duration::from_secs(3600),
        fence_after_secs: 0,
        ..schedd.agent_config()
    };
    let agent = tokio::spawn(Agent::new(config, launcher, events).unwrap().run());
    let mut session = schedd.next_session().await;
    session.register(vec![]).await;
    session.send(SchedulerMsg::ResumeGpu(pb::ResumeGpu { index: 0 }));
    let beat = tokio::time::timeout(Duration::from_secs(10), session.next_heartbeat())
        .await
        .expect("a heartbeat at once");
    assert_eq!(beat.gpu_faults_forgotten, [0]);
    agent.abort();
}
