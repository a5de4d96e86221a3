//! The agent's session against a fake schedd: registration, launch, events, reconnects,
//! resending unacknowledged ends, acknowledgements, kills at registration.

use nix::unistd::{Gid, Uid, User};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tonic::{Request, Response, Status};
use ysched_noded::agent::{Agent, AgentConfig};
use ysched_noded::launch::{Launcher, LauncherOptions};
use ysched_proto as pb;
use ysched_proto::agent_message::Msg as AgentMsg;
use ysched_proto::node_agent_server::{NodeAgent, NodeAgentServer};
use ysched_proto::scheduler_message::Msg as SchedulerMsg;

/// A cluster CA and a fake schedd's TLS identity issued by it, as the real schedd has.
fn fake_schedd_tls() -> (String, tonic::transport::ServerTlsConfig) {
    let ca = ysched_common::tls::ClusterCa::generate().unwrap();
    let issued = ca.issue_server(&[]).unwrap();
    let identity = tonic::transport::Identity::from_pem(issued.cert_pem, issued.key_pem);
    (
        ca.cert_pem.clone(),
        tonic::transport::ServerTlsConfig::new().identity(identity),
    )
}

/// One agent session as the fake schedd sees it.
struct Session {
    authorization: Option<String>,
    inbound: tonic::Streaming<pb::AgentMessage>,
    outbound: mpsc::UnboundedSender<Result<pb::SchedulerMessage, Status>>,
}

impl Session {
    /// The next message that is not a heartbeat.
    async fn next(&mut self) -> AgentMsg {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.inbound.message())
                .await
                .expect("agent said nothing")
                .expect("stream error")
                .expect("agent closed the stream");
            match message.msg.expect("empty message") {
                AgentMsg::Heartbeat(_) => continue,
                other => return other,
            }
        }
    }

    async fn next_heartbeat(&mut self) -> pb::Heartbeat {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.inbound.message())
                .await
                .expect("no heartbeat")
                .unwrap()
                .unwrap();
            if let Some(AgentMsg::Heartbeat(heartbeat)) = message.msg {
                return heartbeat;
            }
        }
    }

    async fn register(&mut self, kill_jobs: Vec<u64>) -> pb::Register {
        let AgentMsg::Register(register) = self.next().await else {
            panic!("Register must come first");
        };
        self.send(SchedulerMsg::Registered(pb::Registered { kill_jobs }));
        register
    }

    fn send(&self, msg: SchedulerMsg) {
        self.outbound
            .send(Ok(pb::SchedulerMessage { msg: Some(msg) }))
            .expect("session gone");
    }
}

struct FakeSchedd {
    sessions: mpsc::UnboundedSender<Session>,
}

/// A fake schedd serving TLS on a free loopback port: the port, its sessions as they come,
/// the CA certificate agents must pin, and the server task.
async fn serve_fake_schedd() -> (
    u16,
    mpsc::UnboundedReceiver<Session>,
    String,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (sessions_tx, sessions) = mpsc::unbounded_channel();
    let (ca_cert_pem, tls) = fake_schedd_tls();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(NodeAgentServer::new(FakeSchedd {
                sessions: sessions_tx,
            }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    (port, sessions, ca_cert_pem, server)
}

#[tonic::async_trait]
impl NodeAgent for FakeSchedd {
    type SessionStream = UnboundedReceiverStream<Result<pb::SchedulerMessage, Status>>;

    async fn session(
        &self,
        request: Request<tonic::Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let (outbound, stream) = mpsc::unbounded_channel();
        let session = Session {
            authorization,
            inbound: request.into_inner(),
            outbound,
        };
        self.sessions
            .send(session)
            .map_err(|_| Status::unavailable("test over"))?;
        Ok(Response::new(UnboundedReceiverStream::new(stream)))
    }
}

async fn next_session(sessions: &mut mpsc::UnboundedReceiver<Session>) -> Session {
    tokio::time::timeout(Duration::from_secs(30), sessions.recv())
        .await
        .expect("agent did not (re)connect")
        .unwrap()
}

fn job(job_id: u64, workdir: &std::path::Path, script: &str) -> pb::LaunchJob {
    let me = User::from_uid(Uid::effective()).unwrap().unwrap();
    pb::LaunchJob {
        job_id,
        name: "t".into(),
        user: me.name,
        uid: me.uid.as_raw(),
        gid: Gid::effective().as_raw(),
        workdir: workdir.to_string_lossy().into_owned(),
        script: script.into(),
        grace_secs: 1,
        ..Default::default()
    }
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
        shepherd_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(spool.path(), "n1")
    })
    .unwrap();
    let (ca_cert_pem, tls) = fake_schedd_tls();
    let config = AgentConfig {
        name: "n1".into(),
        address: "127.0.0.1".into(),
        schedd: format!("127.0.0.1:{port}"),
        cluster_key: "sekrit".into(),
        ca_cert_pem,
        ca_cert_path: "test CA".into(),
        max_message_bytes: 64 << 20,
        heartbeat: Duration::from_secs(1),
        cpus: 4,
        mem_mib: 1024,
        gpus: vec![pb::Gpu {
            index: 0,
            uuid: "GPU-0".into(),
            ..Default::default()
        }],
        features: vec!["ib".into()],
    };
    let agent = tokio::spawn(Agent::new(config, launcher, events).unwrap().run());
    tokio::time::sleep(Duration::from_millis(400)).await;

    let (sessions_tx, mut sessions) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(NodeAgentServer::new(FakeSchedd {
                sessions: sessions_tx,
            }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );

    // Session 1: registration, then a job runs; the session breaks while it runs.
    let mut session = next_session(&mut sessions).await;
    assert_eq!(session.authorization.as_deref(), Some("Bearer sekrit"));
    let register = session.register(vec![]).await;
    assert_eq!(register.name, "n1");
    assert_eq!((register.cpus, register.mem_mib), (4, 1024));
    assert_eq!(register.gpus.len(), 1);
    assert_eq!(register.features, vec!["ib"]);
    assert_eq!(register.version, ysched_noded::VERSION);
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
    let mut session = next_session(&mut sessions).await;
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
    let mut session = next_session(&mut sessions).await;
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
    let mut session = next_session(&mut sessions).await;
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
    server.abort();
}

/// The real binary: stopping noded (SIGTERM) leaves the job running; the next noded
/// re-attaches to it and reports its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noded_process_restart_keeps_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (port, mut sessions, ca_cert_pem, server) = serve_fake_schedd().await;

    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("key"), "k3y\n").unwrap();
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
            .args(["--name", "n9", "--address", "10.1.2.3", "--fake-gpus"])
            .arg(path("gpus.toml"))
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };

    let mut noded = start_noded();
    let mut session = next_session(&mut sessions).await;
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
    let mut session = next_session(&mut sessions).await;
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
    server.abort();
}

/// Each heartbeat carries the newest modification time under each running job's checkpoint
/// directory; a directory with more entries than the scan's bound is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_carry_checkpoint_times_but_not_of_huge_directories() {
    let spool = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(spool.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (port, mut sessions, ca_cert_pem, server) = serve_fake_schedd().await;
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        shepherd_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(spool.path(), "n1")
    })
    .unwrap();
    let config = AgentConfig {
        name: "n1".into(),
        address: "127.0.0.1".into(),
        schedd: format!("127.0.0.1:{port}"),
        cluster_key: "sekrit".into(),
        ca_cert_pem,
        ca_cert_path: "test CA".into(),
        max_message_bytes: 64 << 20,
        heartbeat: Duration::from_secs(1),
        cpus: 4,
        mem_mib: 1024,
        gpus: vec![],
        features: vec![],
    };
    let agent = tokio::spawn(Agent::new(config, launcher, events).unwrap().run());
    let mut session = next_session(&mut sessions).await;
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
    server.abort();
}
