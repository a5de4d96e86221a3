//! A fleet of simulated agents in one process, for load tests: each is a node with a fake
//! 8-GPU inventory that speaks the real agent protocol to a real `schedd` (TLS with the
//! cluster CA, the cluster key, one session per node). Jobs "run" as timers: started at
//! once, finished after `YS_SIM_DURATION_MS` from the job's environment (else the fleet's
//! default), stopped jobs end at once as if killed by SIGTERM. Only the processes are
//! simulated: schedd, its store and its API are the real ones. Like noded, a node keeps its
//! running jobs and unacknowledged ends across sessions and reports them when it registers
//! again, so a schedd restart loses nothing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use ysched_common::time::now_ms;
use ysched_proto as pb;
use ysched_proto::agent_message::Msg as AgentMsg;
use ysched_proto::node_agent_client::NodeAgentClient;
use ysched_proto::scheduler_message::Msg as SchedulerMsg;

/// How to reach schedd, and what the nodes look like.
#[derive(Clone)]
pub struct FleetConfig {
    /// schedd's agent address, `host:port`.
    pub schedd: String,
    pub ca_cert_pem: String,
    pub cluster_key: String,
    pub nodes: usize,
    pub gpus_per_node: u32,
    /// How long a job runs when its environment does not say (`YS_SIM_DURATION_MS`).
    pub default_duration: Duration,
    pub heartbeat: Duration,
}

/// Counters the fleet keeps while it runs.
#[derive(Default)]
pub struct FleetStats {
    /// Sessions registered (a reconnect counts again).
    pub registered: AtomicU64,
    pub started: AtomicU64,
    /// Ends acknowledged by schedd, each job's run once.
    pub finished: AtomicU64,
}

/// What a simulated node keeps across its sessions, as noded keeps its spool: the jobs it
/// runs and the ends schedd has not acknowledged (resent at the next registration).
#[derive(Default)]
struct NodeState {
    /// Running jobs: id -> (the timer that finishes it, the run's restart count).
    running: BTreeMap<u64, (tokio::task::AbortHandle, u32)>,
    unacked: BTreeMap<u64, pb::JobFinished>,
    /// The current session's outbox, while there is one.
    outbox: Option<mpsc::Sender<pb::AgentMessage>>,
}

type Shared = Arc<Mutex<NodeState>>;

/// Starts every node's session (on the current tokio runtime) and returns at once; the
/// sessions run until the runtime ends.
pub fn start(config: FleetConfig) -> Arc<FleetStats> {
    let stats = Arc::new(FleetStats::default());
    for i in 0..config.nodes {
        let config = config.clone();
        let stats = stats.clone();
        tokio::spawn(async move {
            let name = format!("sim{i:04}");
            let node: Shared = Default::default();
            let mut retry = Duration::from_millis(100);
            loop {
                // A session ends when schedd goes away (at the end of a benchmark, too):
                // reconnect quietly with backoff and jitter, as agents do.
                let registered = session(&config, &name, &stats, &node).await;
                node.lock().unwrap().outbox = None;
                if registered {
                    retry = Duration::from_millis(100);
                }
                tokio::time::sleep(jittered(retry, i as u64)).await;
                retry = (retry * 2).min(Duration::from_secs(5));
            }
        });
    }
    stats
}

/// `wait` scaled by a pseudo-random factor in [0.5, 1.0), different per node and per call.
fn jittered(wait: Duration, node: u64) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(node);
    let unit = (h.finish() % 1000) as f64 / 1000.0;
    wait.mul_f64(0.5 + unit / 2.0)
}

fn gpus(n: u32) -> Vec<pb::Gpu> {
    (0..n)
        .map(|i| pb::Gpu {
            index: i,
            uuid: format!("GPU-sim-{i}"),
            model: "NVIDIA A100-SXM4-80GB".into(),
            memory_mib: 81920,
            numa_node: -1,
            nvlink: (0..n).filter(|j| *j != i).collect(),
            ..Default::default()
        })
        .collect()
}

fn message(msg: AgentMsg) -> pb::AgentMessage {
    pb::AgentMessage { msg: Some(msg) }
}

/// A job's end: kept until acknowledged, and sent now if a session is up.
async fn report_end(node: &Shared, end: pb::JobFinished) {
    let outbox = {
        let mut state = node.lock().unwrap();
        state.running.remove(&end.job_id);
        state.unacked.insert(end.job_id, end.clone());
        state.outbox.clone()
    };
    if let Some(outbox) = outbox {
        let _ = outbox.send(message(AgentMsg::Finished(end))).await;
    }
}

/// One session; returns whether it registered.
async fn session(config: &FleetConfig, name: &str, stats: &FleetStats, node: &Shared) -> bool {
    let mut registered = false;
    let _ = session_inner(config, name, stats, node, &mut registered).await;
    registered
}

async fn session_inner(
    config: &FleetConfig,
    name: &str,
    stats: &FleetStats,
    node: &Shared,
    registered: &mut bool,
) -> anyhow::Result<()> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&config.ca_cert_pem))
        .domain_name(ysched_common::tls::SCHEDD_TLS_NAME);
    let channel = Endpoint::from_shared(format!("https://{}", config.schedd))?
        .tls_config(tls)?
        .connect()
        .await?;
    let mut client = NodeAgentClient::new(channel).max_decoding_message_size(64 << 20);
    let (out, outgoing) = mpsc::channel::<pb::AgentMessage>(1024);
    let (running_jobs, finished) = {
        let state = node.lock().unwrap();
        (
            state.running.keys().copied().collect(),
            state.unacked.values().cloned().collect(),
        )
    };
    out.send(message(AgentMsg::Register(pb::Register {
        name: name.into(),
        address: "127.0.0.1".into(),
        cpus: 64,
        mem_mib: 512 * 1024,
        gpus: gpus(config.gpus_per_node),
        version: "fleet".into(),
        running_jobs,
        finished,
        ..Default::default()
    })))
    .await?;
    let mut request = tonic::Request::new(ReceiverStream::new(outgoing));
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", config.cluster_key).parse()?,
    );
    let mut inbound = client.session(request).await?.into_inner();
    *registered = true;
    stats.registered.fetch_add(1, Ordering::Relaxed);
    node.lock().unwrap().outbox = Some(out.clone());
    let mut heartbeat = tokio::time::interval(config.heartbeat);
    let mut seq = 0;
    loop {
        tokio::select! {
            received = inbound.message() => {
                let Some(msg) = received? else { return Ok(()) };
                match msg.msg {
                    Some(SchedulerMsg::Registered(reply)) => {
                        let mut state = node.lock().unwrap();
                        for id in reply.kill_jobs {
                            if let Some((task, _)) = state.running.remove(&id) {
                                task.abort();
                            }
                        }
                    }
                    Some(SchedulerMsg::Launch(job)) => {
                        let now = now_ms();
                        out.send(message(AgentMsg::Started(pb::JobStarted {
                            job_id: job.job_id,
                            pid: 1000 + (job.job_id % 30000) as u32,
                            time_ms: now,
                        })))
                        .await?;
                        stats.started.fetch_add(1, Ordering::Relaxed);
                        let duration = job
                            .env
                            .get("YS_SIM_DURATION_MS")
                            .and_then(|v| v.parse().ok())
                            .map(Duration::from_millis)
                            .unwrap_or(config.default_duration);
                        let (id, restart_count) = (job.job_id, job.restart_count);
                        let node2 = node.clone();
                        let mut state = node.lock().unwrap();
                        let task = tokio::spawn(async move {
                            tokio::time::sleep(duration).await;
                            let end = pb::JobFinished {
                                job_id: id,
                                exit_code: Some(0),
                                end_time_ms: now_ms(),
                                restart_count,
                                ..Default::default()
                            };
                            report_end(&node2, end).await;
                        });
                        state.running.insert(id, (task.abort_handle(), restart_count));
                    }
                    Some(SchedulerMsg::Stop(stop)) => {
                        let stopped = node.lock().unwrap().running.remove(&stop.job_id);
                        if let Some((task, restart_count)) = stopped {
                            task.abort();
                            let now = now_ms();
                            let end = pb::JobFinished {
                                job_id: stop.job_id,
                                signal: Some(15),
                                end_time_ms: now,
                                term_time_ms: now,
                                stop_requested: true,
                                restart_count,
                                ..Default::default()
                            };
                            report_end(node, end).await;
                        }
                    }
                    Some(SchedulerMsg::Ack(ack))
                        if node.lock().unwrap().unacked.remove(&ack.job_id).is_some() =>
                    {
                        stats.finished.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
            _ = heartbeat.tick() => {
                seq += 1;
                let running_jobs = node.lock().unwrap().running.keys().copied().collect();
                let beat = pb::Heartbeat { running_jobs, seq, ..Default::default() };
                out.send(message(AgentMsg::Heartbeat(beat))).await?;
            }
        }
    }
}
