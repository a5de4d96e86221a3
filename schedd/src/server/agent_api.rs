//! The `NodeAgent` service: one bidirectional session per node agent, registered only under
//! the name and role its certificate gives (see `check_registration`).

use super::auth::Credential;
use crate::shell::Cluster;
use crate::state::agent_events::AgentReport;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use ysched_common::edge::peer_log;
use ysched_common::tls::HostRole;
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

/// A host registers only as itself: the name and role its certificate says (whose
/// generation the interceptor checked, and the registration checks again under the state's
/// lock). A holder of the cluster key may give any name, as before certificates: logged.
fn check_registration(
    credential: &Credential,
    reg: &pb::Register,
    peer: &str,
) -> Result<(), Status> {
    let Credential::Certificate(identity) = credential else {
        peer_log::warn(
            "registered with the cluster key",
            peer,
            format_args!(
                "node '{}' registered from {peer} with the shared cluster key, not a \
                 certificate of its own: enrol it (`yctl node enrol {}`)",
                ysched_common::edge::cap_message(&reg.name, 64),
                ysched_common::edge::cap_message(&reg.name, 64)
            ),
        );
        return Ok(());
    };
    let role = if reg.role == ysched_common::config::ROLE_LOGIN {
        HostRole::Login
    } else {
        HostRole::Compute
    };
    if identity.role == HostRole::Replica || identity.name != reg.name || identity.role != role {
        let claimed = ysched_common::edge::cap_message(&reg.name, 64);
        peer_log::warn(
            "registration as another host",
            peer,
            format_args!(
                "refused the registration of {role} node '{claimed}' from {peer}: its \
                 certificate names {identity}"
            ),
        );
        return Err(Status::permission_denied(format!(
            "this host's certificate names {identity}: it may register only as that (not as \
             {role} node '{claimed}')"
        )));
    }
    Ok(())
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
        let credential = super::auth::Credential::of(&req)
            .cloned()
            .ok_or_else(|| Status::unauthenticated("an agent session needs a credential"))?;
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
        check_registration(&credential, &reg, &peer)?;
        if let Some(identity) = credential.identity() {
            self.cluster.adopt_host(identity, &peer).await?;
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let session_id = self
            .cluster
            .register_node(
                super::convert::agent::registration(&reg),
                &peer,
                tx,
                credential.identity(),
            )
            .await?;
        tracing::info!(node = %name, "agent registered");
        let cluster = self.cluster.clone();
        tokio::spawn(async move {
            // A schedd that steps down hears nothing more (the agent finds the leader).
            let retired = cluster.retirement();
            tokio::pin!(retired);
            loop {
                let msg = tokio::select! {
                    msg = inbound.next() => match msg {
                        Some(msg) => msg,
                        None => break,
                    },
                    () = &mut retired => return,
                };
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
                        let unhealthy =
                            super::convert::agent::unhealthy_reason(&h.unhealthy_reason);
                        let gpus = super::convert::agent::gpu_report(&h);
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
            .map(|command| Ok(super::convert::agent::scheduler_message(command)));
        Ok(Response::new(Box::pin(out)))
    }
}
