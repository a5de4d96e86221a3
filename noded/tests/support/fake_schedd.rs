//! A fake schedd for the agent's tests: TLS on a loopback port with its own cluster CA (which
//! agents pin), the `NodeAgent` service handing each agent session to the test, and the
//! `Ysched` service on the same port recording the client requests agents relay.

use nix::unistd::{Gid, Uid, User};
use prost::Message as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use ysched_noded::agent::AgentConfig;
use ysched_proto as pb;
use ysched_proto::agent_message::Msg as AgentMsg;
use ysched_proto::node_agent_server::{NodeAgent, NodeAgentServer};
use ysched_proto::scheduler_message::Msg as SchedulerMsg;
use ysched_proto::ysched_server::{Ysched, YschedServer};

/// The cluster key the tests' agents use.
pub const KEY: &str = "sekrit";
/// The relay token the fake schedd gives each session.
pub const RELAY_TOKEN: &[u8] = b"fake-relay-token";

/// A cluster CA and a fake schedd's TLS identity issued by it, as the real schedd has.
pub fn fake_schedd_tls() -> (String, tonic::transport::ServerTlsConfig) {
    let ca = ysched_common::tls::ClusterCa::generate().unwrap();
    let issued = ca.issue_server(&[]).unwrap();
    let identity = tonic::transport::Identity::from_pem(issued.cert_pem, issued.key_pem);
    (
        ca.cert_pem.clone(),
        tonic::transport::ServerTlsConfig::new().identity(identity),
    )
}

/// One agent session as the fake schedd sees it.
pub struct Session {
    pub authorization: Option<String>,
    /// The agent's end of the connection the session came on.
    pub remote: Option<SocketAddr>,
    inbound: tonic::Streaming<pb::AgentMessage>,
    outbound: mpsc::UnboundedSender<Result<pb::SchedulerMessage, Status>>,
}

impl Session {
    /// The next message, heartbeats included.
    pub async fn next_any(&mut self) -> AgentMsg {
        let message = tokio::time::timeout(Duration::from_secs(30), self.inbound.message())
            .await
            .expect("agent said nothing")
            .expect("stream error")
            .expect("agent closed the stream");
        message.msg.expect("empty message")
    }

    /// The next message that is not a heartbeat.
    pub async fn next(&mut self) -> AgentMsg {
        loop {
            match self.next_any().await {
                AgentMsg::Heartbeat(_) => continue,
                other => return other,
            }
        }
    }

    pub async fn next_heartbeat(&mut self) -> pb::Heartbeat {
        loop {
            if let AgentMsg::Heartbeat(heartbeat) = self.next_any().await {
                return heartbeat;
            }
        }
    }

    /// Takes the Register (which must come first) without answering it.
    pub async fn take_register(&mut self) -> pb::Register {
        let AgentMsg::Register(register) = self.next().await else {
            panic!("Register must come first");
        };
        register
    }

    pub async fn register(&mut self, kill_jobs: Vec<u64>) -> pb::Register {
        let register = self.take_register().await;
        self.send(SchedulerMsg::Registered(pb::Registered {
            kill_jobs,
            relay_token: RELAY_TOKEN.to_vec(),
        }));
        register
    }

    pub fn send(&self, msg: SchedulerMsg) {
        self.outbound
            .send(Ok(pb::SchedulerMessage { msg: Some(msg) }))
            .expect("session gone");
    }
}

pub struct FakeSchedd {
    pub sessions: mpsc::UnboundedSender<Session>,
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
        let remote = request.remote_addr();
        let (outbound, stream) = mpsc::unbounded_channel();
        let session = Session {
            authorization,
            remote,
            inbound: request.into_inner(),
            outbound,
        };
        self.sessions
            .send(session)
            .map_err(|_| Status::unavailable("test over"))?;
        Ok(Response::new(UnboundedReceiverStream::new(stream)))
    }
}

/// A client request relayed to the fake schedd, as it arrived.
#[derive(Debug, Clone)]
pub struct RelayedCall {
    pub method: &'static str,
    pub authorization: Option<String>,
    /// `ysched-caller-bin`, decoded.
    pub caller: Option<pb::RelayedCaller>,
    /// How many `ysched-caller-bin` values came (a client's own must never be passed on).
    pub caller_values: usize,
    /// Metadata the relay must not pass on, if it came.
    pub spoofed: Option<String>,
    pub remote: Option<SocketAddr>,
}

/// The fake's `Ysched` service: records each request. `Submit` answers job id 4242,
/// `GetJob` NOT_FOUND (for job [`HUGE_ERROR_JOB`] with a message far over HTTP/2's header
/// limits, as schedd's refusal of `ysub -A <60,000 z>` once was), `WatchJob` two states of the job;
/// anything else is UNIMPLEMENTED.
pub struct FakeClients {
    pub calls: mpsc::UnboundedSender<RelayedCall>,
}

/// What a relayed `GetJob` is refused with.
pub const NOT_FOUND_MESSAGE: &str = "job 5 is not known to the fake schedd";
/// The job whose `GetJob` is refused with a 120,000-byte message.
pub const HUGE_ERROR_JOB: u64 = 6;

impl FakeClients {
    fn record<T>(&self, method: &'static str, request: &Request<T>) {
        let metadata = request.metadata();
        let caller_values = metadata.get_all_bin("ysched-caller-bin").iter().count();
        let caller = metadata
            .get_bin("ysched-caller-bin")
            .and_then(|v| v.to_bytes().ok())
            .and_then(|bytes| pb::RelayedCaller::decode(bytes).ok());
        let _ = self.calls.send(RelayedCall {
            method,
            authorization: metadata
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(String::from),
            caller,
            caller_values,
            spoofed: metadata
                .get("x-spoofed")
                .and_then(|v| v.to_str().ok())
                .map(String::from),
            remote: request.remote_addr(),
        });
    }

    fn unimplemented<T, R>(&self, method: &'static str, request: &Request<T>) -> Result<R, Status> {
        self.record(method, request);
        Err(Status::unimplemented(format!("fake schedd: no {method}")))
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::JobInfo, Status>> + Send>>;

#[tonic::async_trait]
impl Ysched for FakeClients {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitReply>, Status> {
        self.record("submit", &request);
        Ok(Response::new(pb::SubmitReply {
            job_id: 4242,
            array_task_count: 0,
        }))
    }

    async fn get_job(
        &self,
        request: Request<pb::JobRef>,
    ) -> Result<Response<pb::JobDetail>, Status> {
        self.record("get_job", &request);
        if request.get_ref().job_id == HUGE_ERROR_JOB {
            // The account echoed twice, as a refusal did: over 64 KiB, four times the
            // header limit, which makes h2 fail the whole connection, not just the stream.
            let account = "z".repeat(60_000);
            return Err(Status::not_found(format!(
                "user nobody may not charge account '{account}' (allowed: members of the \
                 Unix group '{account}')"
            )));
        }
        Err(Status::not_found(NOT_FOUND_MESSAGE))
    }

    type WatchJobStream = WatchStream;

    async fn watch_job(
        &self,
        request: Request<pb::JobRef>,
    ) -> Result<Response<Self::WatchJobStream>, Status> {
        self.record("watch_job", &request);
        let id = request.into_inner().job_id;
        let states = ["RUNNING", "COMPLETED"].map(|state| {
            Ok(pb::JobInfo {
                id,
                name: state.to_string(),
                ..Default::default()
            })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(states))))
    }

    async fn list_jobs(
        &self,
        request: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::JobList>, Status> {
        self.unimplemented("list_jobs", &request)
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelReply>, Status> {
        self.unimplemented("cancel", &request)
    }

    async fn hold(&self, request: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        self.unimplemented("hold", &request)
    }

    async fn release(&self, request: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        self.unimplemented("release", &request)
    }

    async fn list_nodes(
        &self,
        request: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::NodeList>, Status> {
        self.unimplemented("list_nodes", &request)
    }

    async fn drain(
        &self,
        request: Request<pb::DrainRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.unimplemented("drain", &request)
    }

    async fn resume(&self, request: Request<pb::NodeRef>) -> Result<Response<pb::Empty>, Status> {
        self.unimplemented("resume", &request)
    }

    async fn requeue(&self, request: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        self.unimplemented("requeue", &request)
    }

    async fn audit(
        &self,
        request: Request<pb::AuditRequest>,
    ) -> Result<Response<pb::AuditList>, Status> {
        self.unimplemented("audit", &request)
    }

    async fn shares(
        &self,
        request: Request<pb::SharesRequest>,
    ) -> Result<Response<pb::ShareList>, Status> {
        self.unimplemented("shares", &request)
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportReply>, Status> {
        self.unimplemented("report", &request)
    }

    async fn export_trace(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::TraceReply>, Status> {
        self.unimplemented("export_trace", &request)
    }

    async fn import_usage(
        &self,
        request: Request<pb::ImportUsageRequest>,
    ) -> Result<Response<pb::ImportUsageReply>, Status> {
        self.unimplemented("import_usage", &request)
    }

    async fn drain_gpu(
        &self,
        request: Request<pb::DrainGpuRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.unimplemented("drain_gpu", &request)
    }

    async fn resume_gpu(
        &self,
        request: Request<pb::ResumeGpuRequest>,
    ) -> Result<Response<pb::ResumeGpuReply>, Status> {
        self.unimplemented("resume_gpu", &request)
    }

    async fn update_job(
        &self,
        request: Request<pb::UpdateJobRequest>,
    ) -> Result<Response<pb::UpdateJobReply>, Status> {
        self.unimplemented("update_job", &request)
    }

    async fn cluster_status(
        &self,
        request: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusReply>, Status> {
        self.unimplemented("cluster_status", &request)
    }

    async fn enrol_host(
        &self,
        request: Request<pb::EnrolHostRequest>,
    ) -> Result<Response<pb::EnrolHostReply>, Status> {
        self.unimplemented("enrol_host", &request)
    }

    async fn change_cluster(
        &self,
        request: Request<pb::ClusterChangeRequest>,
    ) -> Result<Response<pb::ClusterChangeReply>, Status> {
        self.unimplemented("change_cluster", &request)
    }

    async fn revoke_host(
        &self,
        request: Request<pb::NodeRef>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.unimplemented("revoke_host", &request)
    }

    async fn list_hosts(
        &self,
        request: Request<pb::ListHostsRequest>,
    ) -> Result<Response<pb::HostList>, Status> {
        self.unimplemented("list_hosts", &request)
    }
}

/// A fake schedd serving TLS.
pub struct Schedd {
    pub port: u16,
    pub sessions: mpsc::UnboundedReceiver<Session>,
    pub calls: mpsc::UnboundedReceiver<RelayedCall>,
    /// The CA certificate agents must pin.
    pub ca_cert_pem: String,
    pub server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Schedd {
    /// A fake schedd on a free loopback port.
    pub async fn start() -> Schedd {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (ca_cert_pem, tls) = fake_schedd_tls();
        Schedd::serve(listener, ca_cert_pem, tls)
    }

    /// A fake schedd on `listener`, with the TLS identity `tls` issued by `ca_cert_pem`.
    pub fn serve(
        listener: tokio::net::TcpListener,
        ca_cert_pem: String,
        tls: tonic::transport::ServerTlsConfig,
    ) -> Schedd {
        let port = listener.local_addr().unwrap().port();
        let (sessions_tx, sessions) = mpsc::unbounded_channel();
        let (calls_tx, calls) = mpsc::unbounded_channel();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .tls_config(tls)
                .unwrap()
                .add_service(NodeAgentServer::new(FakeSchedd {
                    sessions: sessions_tx,
                }))
                .add_service(YschedServer::new(FakeClients { calls: calls_tx }))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Schedd {
            port,
            sessions,
            calls,
            ca_cert_pem,
            server,
        }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The next agent session.
    pub async fn next_session(&mut self) -> Session {
        next_session(&mut self.sessions).await
    }

    /// The next relayed request.
    pub async fn next_call(&mut self) -> RelayedCall {
        tokio::time::timeout(Duration::from_secs(30), self.calls.recv())
            .await
            .expect("no relayed request came")
            .unwrap()
    }

    /// An agent of node `n1` with the test key, reporting to this schedd.
    pub fn agent_config(&self) -> AgentConfig {
        agent_config(self.port, self.ca_cert_pem.clone())
    }
}

impl Drop for Schedd {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub async fn next_session(sessions: &mut mpsc::UnboundedReceiver<Session>) -> Session {
    tokio::time::timeout(Duration::from_secs(30), sessions.recv())
        .await
        .expect("agent did not (re)connect")
        .unwrap()
}

/// An agent of node `n1` (4 CPUs, 1 GiB, no GPU, heartbeats every second, fencing after
/// 30 s) with the test key, reporting to the schedd on `port`.
pub fn agent_config(port: u16, ca_cert_pem: String) -> AgentConfig {
    AgentConfig {
        replicas: Vec::new(),
        name: "n1".into(),
        address: "127.0.0.1".into(),
        schedd: format!("127.0.0.1:{port}"),
        credential: ysched_noded::credential::HostCredential {
            own: None,
            cluster_key: Some(KEY.into()),
        },
        ca_cert_pem,
        ca_cert_path: "test CA".into(),
        max_message_bytes: 64 << 20,
        heartbeat: Duration::from_secs(1),
        cpus: 4,
        mem_mib: 1024,
        gpus: vec![],
        features: vec![],
        role: ysched_common::config::ROLE_COMPUTE.into(),
        fence_after_secs: 30,
    }
}

/// A job of the current user running `script` in `workdir`, grace 1 s.
pub fn job(job_id: u64, workdir: &std::path::Path, script: &str) -> pb::LaunchJob {
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

/// A client of a Unix socket (a host's client socket), as the CLIs connect.
pub async fn unix_client(
    path: &std::path::Path,
) -> ysched_proto::ysched_client::YschedClient<tonic::transport::Channel> {
    let path = path.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .expect("cannot connect to the client socket");
    ysched_proto::ysched_client::YschedClient::new(channel)
}
