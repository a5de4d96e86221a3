//! Agents' messages as the state machine's reports, and its commands as agents' messages.

use crate::state::agent_events::Registration;
use crate::state::commands::{AgentCommand, LaunchOrder};
use crate::state::lifecycle::PartEnd;
use ysched_proto as pb;
use ysched_proto::scheduler_message::Msg;

/// An agent's `JobFinished` as the state machine's report.
pub(crate) fn part_end(f: &pb::JobFinished) -> PartEnd {
    PartEnd {
        job_id: f.job_id,
        exit_code: f.exit_code,
        signal: f.signal,
        end_time_ms: f.end_time_ms,
        timed_out: f.timed_out,
        term_time_ms: f.term_time_ms,
        killed: f.killed,
        error: f.error.clone(),
        checkpoint_saved: f.checkpoint_saved,
        restart_count: f.restart_count,
        out_of_memory: f.out_of_memory,
        fenced: f.fenced,
        node_fault: f.node_fault,
    }
}

/// Why an agent says its node cannot take jobs (`Heartbeat.unhealthy_reason`,
/// `Register.unhealthy_reason`), as a drain reason may hold it: printable, at most
/// [`UNHEALTHY_REASON_MAX_BYTES`]; `None` when empty (it can).
pub(crate) fn unhealthy_reason(reason: &str) -> Option<String> {
    let reason = reason.trim();
    if reason.is_empty() {
        return None;
    }
    let mut clean: String = reason
        .chars()
        .map(|c| {
            if ysched_common::text::is_unsafe_char(c) {
                '?'
            } else {
                c
            }
        })
        .collect();
    if clean.len() > UNHEALTHY_REASON_MAX_BYTES {
        let mut end = UNHEALTHY_REASON_MAX_BYTES;
        while !clean.is_char_boundary(end) {
            end -= 1;
        }
        clean.truncate(end);
        clean.push('…');
    }
    Some(clean)
}

/// The longest reason an agent's word on its health keeps.
pub(crate) const UNHEALTHY_REASON_MAX_BYTES: usize = 256;

/// An agent's `Register` as the state machine's registration.
pub(crate) fn registration(r: &pb::Register) -> Registration {
    Registration {
        name: r.name.clone(),
        address: r.address.clone(),
        cpus: r.cpus,
        mem_mib: r.mem_mib,
        gpus: r.gpus.iter().map(ysched_common::Gpu::from).collect(),
        features: r.features.clone(),
        running_jobs: r.running_jobs.clone(),
        finished: r.finished.iter().map(part_end).collect(),
        login: r.role == ysched_common::config::ROLE_LOGIN,
        fence_after_secs: r.fence_after_secs,
        unhealthy_reason: unhealthy_reason(&r.unhealthy_reason),
        gpu_faults: gpu_faults(&r.gpu_faults),
    }
}

/// An agent's GPU faults (`Heartbeat.gpu_faults`, `Register.gpu_faults`) as the state machine
/// takes them: reasons made printable and bounded as drain reasons are (an empty one says
/// only that the GPU fails), at most one per GPU and [`MAX_GPU_FAULTS`] in all (a node has
/// at most that many GPUs).
pub(crate) fn gpu_faults(faults: &[pb::GpuFault]) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = Vec::new();
    for fault in faults {
        if out.len() >= MAX_GPU_FAULTS {
            break;
        }
        if out.iter().any(|(index, _)| *index == fault.index) {
            continue;
        }
        let reason = unhealthy_reason(&fault.reason)
            .unwrap_or_else(|| "failing (its node gave no reason)".to_string());
        out.push((fault.index, reason));
    }
    out
}

/// The most GPU faults one report is read for: the most GPUs a node may have.
pub(crate) const MAX_GPU_FAULTS: usize = 64;

/// An agent's heartbeat's word on its GPUs.
pub(crate) fn gpu_report(h: &pb::Heartbeat) -> crate::state::gpu_health::GpuReport {
    crate::state::gpu_health::GpuReport {
        faults: gpu_faults(&h.gpu_faults),
        forgotten: h
            .gpu_faults_forgotten
            .iter()
            .take(MAX_GPU_FAULTS)
            .copied()
            .collect(),
    }
}

/// The wire form of a command to an agent.
pub(crate) fn scheduler_message(command: AgentCommand) -> pb::SchedulerMessage {
    let msg = match command {
        AgentCommand::Registered {
            kill_jobs,
            relay_token,
        } => Msg::Registered(pb::Registered {
            kill_jobs,
            relay_token,
        }),
        AgentCommand::Launch(order) => Msg::Launch(launch_job(&order)),
        AgentCommand::Stop {
            job_id,
            grace_secs,
            reason,
        } => Msg::Stop(pb::StopJob {
            job_id,
            grace_secs,
            reason,
        }),
        AgentCommand::Ack { job_id } => Msg::Ack(pb::AckFinished { job_id }),
        AgentCommand::HeartbeatAck { seq } => Msg::HeartbeatAck(pb::HeartbeatAck { seq }),
        AgentCommand::ResumeGpu { index } => Msg::ResumeGpu(pb::ResumeGpu { index }),
    };
    pb::SchedulerMessage { msg: Some(msg) }
}

fn launch_job(order: &LaunchOrder) -> pb::LaunchJob {
    let job = &order.job;
    let spec = &job.spec;
    pb::LaunchJob {
        job_id: job.id.0,
        name: spec.name.clone(),
        user: job.owner.user.clone(),
        uid: job.owner.uid,
        gid: job.owner.gid,
        workdir: spec.workdir.clone(),
        script: order.payload.script.clone(),
        args: spec.args.clone(),
        env: order
            .payload
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        stdout_path: spec.stdout_path.clone().unwrap_or_default(),
        stderr_path: spec.stderr_path.clone().unwrap_or_default(),
        gpus: order.gpus.clone(),
        restart_count: job.restart_count,
        checkpoint_dir: job.checkpoint_dir.clone(),
        time_limit_secs: spec.time_limit_secs.unwrap_or(0),
        grace_secs: job.grace_secs,
        node_rank: order.rank,
        nnodes: order.nodelist.len() as u32,
        nodelist: order.nodelist.clone(),
        master_addr: order.master_addr.clone(),
        master_port: order.master_port,
        // What the user asked for (`--mem`, `-c`) is the limit on every node of the job; 0
        // (not asked) is no limit.
        mem_bytes: spec.mem_mib.saturating_mul(1024 * 1024),
        cpus: spec.cpus,
        // `--signal`: sent before the time limit (by the agent, which keeps the time).
        warn_signal: spec.warn_signal.map_or(0, |w| w.signal),
        warn_secs: spec.warn_signal.map_or(0, |w| w.secs),
        warn_batch_only: spec.warn_signal.is_some_and(|w| w.batch_only),
        is_array_task: job.array.is_some(),
        array_job_id: job.array.map_or(0, |a| a.array_id.0),
        array_task_id: job.array.map_or(0, |a| a.task),
        array_task_count: spec.array.as_ref().map_or(0, |a| a.count),
        array_task_min: spec.array.as_ref().map_or(0, |a| a.min),
        array_task_max: spec.array.as_ref().map_or(0, |a| a.max),
        slurm_env: spec.slurm_env,
        open_append: spec.open_append,
        ntasks_per_node: spec.ntasks_per_node,
        // SLURM_JOB_PARTITION: what the job was submitted to, in the words it used.
        partition: if spec.partition.is_empty() {
            spec.tier.clone()
        } else {
            spec.partition.clone()
        },
        account: spec.account.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::{unhealthy_reason, UNHEALTHY_REASON_MAX_BYTES};

    #[test]
    fn an_agents_word_on_its_health_is_printable_and_bounded() {
        assert_eq!(unhealthy_reason("  "), None);
        assert_eq!(
            unhealthy_reason("spool full: No space left on device").as_deref(),
            Some("spool full: No space left on device")
        );
        assert_eq!(
            unhealthy_reason("bad\x1b[2Jthing\n").as_deref(),
            Some("bad?[2Jthing")
        );
        let long = unhealthy_reason(&"é".repeat(1000)).unwrap();
        assert!(long.len() <= UNHEALTHY_REASON_MAX_BYTES + '…'.len_utf8());
        assert!(long.ends_with('…'));
    }
}
