//! What schedd tells an agent, as domain data. `server` turns each into its wire message when
//! it is sent; nothing here knows the wire format.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use ysched_common::Job;

/// One message to one agent. An agent's messages arrive in the order they were queued.
#[derive(Debug, Clone)]
pub enum AgentCommand {
    /// The answer to a registration: the running jobs the agent must kill at once, and the
    /// session's secret that the agent's relayed client requests carry.
    Registered {
        kill_jobs: Vec<u64>,
        relay_token: Vec<u8>,
    },
    /// Start one part of a job.
    Launch(Box<LaunchOrder>),
    /// SIGTERM the job's part now, SIGKILL after `grace_secs`.
    Stop {
        job_id: u64,
        grace_secs: u32,
        reason: String,
    },
    /// The agent's report of a job's end is durable: it may forget it.
    Ack { job_id: u64 },
    /// The agent's heartbeat `seq` arrived: it may renew its fence lease from the time it
    /// sent that heartbeat.
    HeartbeatAck { seq: u64 },
    /// An administrator returned GPU `index` to service: forget its past faults, and say so
    /// in the next report (see `state::gpu_health`).
    ResumeGpu { index: u32 },
}

/// One part of a placed job: the job as placed (spec, owner, restart count, grace, checkpoint
/// directory), its script and environment (shared by the parts of a multi-node job), and this
/// part's place in the run.
#[derive(Debug, Clone)]
pub struct LaunchOrder {
    pub job: Job,
    pub payload: Arc<Payload>,
    pub gpus: Vec<u32>,
    pub rank: u32,
    pub nodelist: Vec<String>,
    pub master_addr: String,
    pub master_port: u32,
}

impl AgentCommand {
    pub fn stop(job_id: u64, grace_secs: u32, reason: &str) -> AgentCommand {
        AgentCommand::Stop {
            job_id,
            grace_secs,
            reason: reason.to_string(),
        }
    }
}

/// The parts of a job spec kept out of memory until launch.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Payload {
    pub script: String,
    pub env: BTreeMap<String, String>,
}
