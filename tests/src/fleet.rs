//! A fleet of simulated agents in one process, for load tests: each is a node with a fake
//! 8-GPU inventory that speaks the real agent protocol to a real `schedd` (TLS with the
//! cluster CA, the cluster key, one session per node). Jobs "run" as timers: started at
//! once, finished after `YS_SIM_DURATION_MS` from the job's environment (else the fleet's
//! default), stopped jobs end at once as if killed by SIGTERM. Only the processes are
//! simulated: schedd, its store and its API are the real ones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    pub registered: AtomicU64,
    pub started: AtomicU64,
    pub finished: AtomicU64,
}

/// Starts every node's session (on the current tokio runtime) and returns at once; the
/// sessions run until the runtime ends.
pub fn start(config: FleetConfig) -> Arc<FleetStats> {
    let stats = Arc::new(FleetStats::default());
    for i in 0..config.nodes {
        let config = config.clone();
        let stats = stats.clone();
        tokio::spawn(async move {
            let name = format!("sim{i:04}");
            loop {
                // A session ends when schedd goes away (at the end of a benchmark, too):
                // reconnect quietly, as agents do.
                let _ = session(&config, &name, &stats).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
    stats
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

async fn session(config: &FleetConfig, name: &str, stats: &FleetStats) -> anyhow::Result<()> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&config.ca_cert_pem))
        .domain_name(ysched_common::tls::SCHEDD_TLS_NAME);
    let channel = Endpoint::from_shared(format!("https://{}", config.schedd))?
        .tls_config(tls)?
        .connect()
        .await?;
    let mut client = NodeAgentClient::new(channel).max_decoding_message_size(64 << 20);
    let (out, outgoing) = mpsc::channel::<pb::AgentMessage>(1024);
    let send = |msg| pb::AgentMessage { msg: Some(msg) };
    out.send(send(AgentMsg::Register(pb::Register {
        name: name.into(),
        address: "127.0.0.1".into(),
        cpus: 64,
        mem_mib: 512 * 1024,
        gpus: gpus(config.gpus_per_node),
        version: "fleet".into(),
        ..Default::default()
    })))
    .await?;
    let mut request = tonic::Request::new(ReceiverStream::new(outgoing));
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", config.cluster_key).parse()?,
    );
    let mut inbound = client.session(request).await?.into_inner();
    stats.registered.fetch_add(1, Ordering::Relaxed);
    // Running jobs: id -> (the timer that finishes it, the run's restart count).
    type Running = std::collections::BTreeMap<u64, (tokio::task::AbortHandle, u32)>;
    let running: Arc<std::sync::Mutex<Running>> = Default::default();
    let mut heartbeat = tokio::time::interval(config.heartbeat);
    loop {
        tokio::select! {
            message = inbound.message() => {
                let Some(message) = message? else { return Ok(()) };
                match message.msg {
                    Some(SchedulerMsg::Launch(job)) => {
                        let now = now_ms();
                        out.send(send(AgentMsg::Started(pb::JobStarted {
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
                        let out = out.clone();
                        let running2 = running.clone();
                        let (id, restart_count) = (job.job_id, job.restart_count);
                        let task = tokio::spawn(async move {
                            tokio::time::sleep(duration).await;
                            running2.lock().unwrap().remove(&id);
                            let _ = out
                                .send(send(AgentMsg::Finished(pb::JobFinished {
                                    job_id: id,
                                    exit_code: Some(0),
                                    end_time_ms: now_ms(),
                                    restart_count,
                                    ..Default::default()
                                })))
                                .await;
                        });
                        running
                            .lock()
                            .unwrap()
                            .insert(id, (task.abort_handle(), restart_count));
                    }
                    Some(SchedulerMsg::Stop(stop)) => {
                        let stopped = running.lock().unwrap().remove(&stop.job_id);
                        if let Some((task, restart_count)) = stopped {
                            task.abort();
                            let now = now_ms();
                            out.send(send(AgentMsg::Finished(pb::JobFinished {
                                job_id: stop.job_id,
                                signal: Some(15),
                                end_time_ms: now,
                                term_time_ms: now,
                                stop_requested: true,
                                restart_count,
                                ..Default::default()
                            })))
                            .await?;
                        }
                    }
                    Some(SchedulerMsg::Ack(_)) => {
                        stats.finished.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
            _ = heartbeat.tick() => {
                let running_jobs = running.lock().unwrap().keys().copied().collect();
                let beat = pb::Heartbeat { running_jobs, ..Default::default() };
                out.send(send(AgentMsg::Heartbeat(beat))).await?;
            }
        }
    }
}
