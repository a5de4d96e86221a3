//! The `NodeAgent` service: one bidirectional session per node agent.

use crate::shell::Cluster;
use crate::state::agent_events::AgentReport;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use ysched_common::edge::peer_log;
use ysched_proto as pb;
use ysched_proto::agent_message::Msg;

pub struct AgentApi {
    cluster: Arc<Cluster>,
}

impl AgentApi {
    pub fn new(cluster: Arc<Cluster>) -> Self {
        AgentApi { cluster }
    }
}

/// Refuses a request whose `authorization: Bearer <key>` is not the cluster key; a request
/// that carries it marks its connection authenticated (which keeps it open, see
/// [`super::tls::AgentConn`]).
pub fn key_check(key: String) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |req: Request<()>| {
        let given = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let info = super::tls::conn_info(&req);
        if constant_time_eq(given.trim().as_bytes(), key.as_bytes()) {
            if let Some(info) = info {
                info.mark_authenticated();
            }
            Ok(req)
        } else {
            let peer = info.map(|i| i.remote);
            let ip = peer.map_or_else(|| "an unknown address".to_string(), |p| p.ip().to_string());
            let from = peer.map_or_else(String::new, |p| format!(" from {p}"));
            peer_log::warn(
                "wrong cluster key",
                &ip,
                format_args!("agent connection refused: wrong or missing cluster key{from}"),
            );
            Err(Status::unauthenticated("wrong or missing cluster key"))
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

type SessionStream = Pin<Box<dyn Stream<Item = Result<pb::SchedulerMessage, Status>> + Send>>;

#[tonic::async_trait]
impl pb::node_agent_server::NodeAgent for AgentApi {
    type SessionStream = SessionStream;

    async fn session(
        &self,
        req: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<SessionStream>, Status> {
        let peer = super::tls::conn_info(&req)
            .map(|info| info.remote.to_string())
            .unwrap_or_else(|| "an unknown address".into());
        let mut inbound = req.into_inner();
        let reg = match inbound.next().await {
            Some(Ok(pb::AgentMessage {
                msg: Some(Msg::Register(r)),
            })) => r,
            Some(Err(e)) => return Err(e),
            _ => {
                return Err(Status::invalid_argument(
                    "an agent session must start with Register",
                ))
            }
        };
        let name = reg.name.clone();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let session_id = self
            .cluster
            .register_node(super::convert::registration(&reg), &peer, tx)
            .await?;
        tracing::info!(node = %name, "agent registered");
        let cluster = self.cluster.clone();
        tokio::spawn(async move {
            while let Some(msg) = inbound.next().await {
                match msg {
                    Ok(pb::AgentMessage {
                        msg: Some(Msg::Started(s)),
                    }) => {
                        let started = AgentReport::Started {
                            job_id: s.job_id,
                            pid: s.pid,
                            time: s.time_ms,
                        };
                        cluster.report(&name, session_id, started)
                    }
                    Ok(pb::AgentMessage {
                        msg: Some(Msg::Finished(f)),
                    }) => {
                        // A part that ended before its start was sent: the start first, as
                        // if it had come on its own just before.
                        if let Some(s) = &f.started {
                            let started = AgentReport::Started {
                                job_id: s.job_id,
                                pid: s.pid,
                                time: s.time_ms,
                            };
                            cluster.report(&name, session_id, started);
                        }
                        ysched_common::stamp::stamp("d.finished_in", f.job_id);
                        let ended = AgentReport::Finished(super::part_end(&f));
                        cluster.report(&name, session_id, ended)
                    }
                    Ok(pb::AgentMessage {
                        msg: Some(Msg::Heartbeat(h)),
                    }) => {
                        let checkpoints: Vec<(u64, i64)> = h
                            .checkpoints
                            .iter()
                            .map(|c| (c.job_id, c.newest_mtime_ms))
                            .collect();
                        let unhealthy = super::convert::unhealthy_reason(&h.unhealthy_reason);
                        let gpus = super::convert::gpu_report(&h);
                        cluster.heartbeat(
                            &name,
                            session_id,
                            h.seq,
                            &h.running_jobs,
                            &checkpoints,
                            unhealthy.as_deref(),
                            &gpus,
                        )
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(node = %name, "agent stream error: {e}");
                        break;
                    }
                }
            }
            cluster.node_disconnected(&name, session_id);
        });
        let out = tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
            .map(|command| Ok(super::convert::scheduler_message(command)));
        Ok(Response::new(Box::pin(out)))
    }
}
