//! Conversions between the domain records and the wire format (`ysched-proto`). Turning a
//! client's wire `JobSpec` into a domain one needs config and identity, so that validation
//! lives in schedd; everything plain lives here.

use crate::types::{AuditRecord, Gpu, GpuLink, Job, JobEvent, JobSpec, NodeAlloc, PcieRelation};
use ysched_proto as pb;

impl From<&Gpu> for pb::Gpu {
    fn from(g: &Gpu) -> Self {
        pb::Gpu {
            index: g.index,
            uuid: g.uuid.clone(),
            model: g.model.clone(),
            memory_mib: g.memory_mib,
            pci_bus_id: g.pci_bus_id.clone(),
            numa_node: g.numa_node.unwrap_or(-1),
            nvlink: g.nvlink.clone(),
            links: g
                .links
                .iter()
                .map(|l| pb::GpuLink {
                    peer: l.peer,
                    pcie: l.pcie.as_str().to_string(),
                    nvlinks: l.nvlinks,
                })
                .collect(),
        }
    }
}

impl From<&pb::Gpu> for Gpu {
    fn from(g: &pb::Gpu) -> Self {
        Gpu {
            index: g.index,
            uuid: g.uuid.clone(),
            model: g.model.clone(),
            memory_mib: g.memory_mib,
            pci_bus_id: g.pci_bus_id.clone(),
            numa_node: (g.numa_node >= 0).then_some(g.numa_node),
            nvlink: g.nvlink.clone(),
            // An unknown relation from a newer agent reads as the worst one.
            links: g
                .links
                .iter()
                .map(|l| GpuLink {
                    peer: l.peer,
                    pcie: PcieRelation::parse(&l.pcie).unwrap_or(PcieRelation::Sys),
                    nvlinks: l.nvlinks,
                })
                .collect(),
        }
    }
}

impl From<&NodeAlloc> for pb::NodeAlloc {
    fn from(a: &NodeAlloc) -> Self {
        pb::NodeAlloc {
            node: a.node.clone(),
            gpus: a.gpus.clone(),
            cpus: a.cpus,
            mem_mib: a.mem_mib,
        }
    }
}

impl From<&JobEvent> for pb::JobEvent {
    fn from(e: &JobEvent) -> Self {
        pb::JobEvent {
            time_ms: e.time,
            kind: e.kind.clone(),
            detail: e.detail.clone(),
        }
    }
}

impl From<&JobSpec> for pb::JobSpec {
    fn from(s: &JobSpec) -> Self {
        pb::JobSpec {
            name: s.name.clone(),
            tier: s.tier.clone(),
            gpus: s.gpus,
            gpu_type: s.gpu_types.join("|"),
            cpus: s.cpus,
            mem_mib: s.mem_mib,
            time_limit_secs: s.time_limit_secs.unwrap_or(0),
            grace_secs: s.grace_secs,
            checkpoint_dir: s.checkpoint_dir.clone().unwrap_or_default(),
            account: s.account.clone(),
            stdout_path: s.stdout_path.clone().unwrap_or_default(),
            stderr_path: s.stderr_path.clone().unwrap_or_default(),
            workdir: s.workdir.clone(),
            // The script can be large and the environment private: a listing leaves them out.
            script: String::new(),
            args: s.args.clone(),
            env: Default::default(),
            hold: s.hold,
            nodes: s.nodes,
            no_requeue: s.no_requeue,
            interconnect: s.interconnect.clone().unwrap_or_default(),
            constraints: s.constraints.clone(),
            warn_signal: s.warn_signal.map(|w| pb::WarnSignal {
                signal: w.signal,
                secs: w.secs,
                batch_only: w.batch_only,
            }),
            array: s.array.as_ref().map(|a| a.describe()).unwrap_or_default(),
            dependency: s
                .dependency
                .as_ref()
                .map(|d| d.text.clone())
                .unwrap_or_default(),
            nodelist: s.nodelist.clone(),
            exclude: s.exclude.clone(),
            exclusive: s.exclusive,
            begin_unix_secs: s.begin_unix_secs.unwrap_or(0),
            mail_types: s.mail_types.clone(),
            mail_user: s.mail_user.clone(),
            ntasks_per_node: s.ntasks_per_node,
            partition: s.partition.clone(),
            qos: s.qos.clone(),
            slurm_env: s.slurm_env,
            open_append: s.open_append,
            comment: s.comment.clone(),
        }
    }
}

impl From<&Job> for pb::JobInfo {
    fn from(j: &Job) -> Self {
        job_info(j, Some(Box::new(j.spec.as_ref().into())))
    }
}

/// A job for listings: without its spec, whose strings were most of the cost of listing
/// 10,000 jobs; the numbers a listing shows are in `gpus_requested` and `time_limit_secs`.
pub fn job_listing(j: &Job) -> pb::JobInfo {
    job_info(j, None)
}

/// [`job_listing`], encoded as prost encodes a `JobInfo`: what `schedd`'s store keeps of a
/// finished job for listings by end time, so that they copy these bytes instead of reading
/// and decoding the job's record (the encoding is the wire's, so it stays readable).
pub fn job_listing_bytes(j: &Job) -> Vec<u8> {
    prost::Message::encode_to_vec(&job_listing(j))
}

fn job_info(j: &Job, spec: Option<Box<pb::JobSpec>>) -> pb::JobInfo {
    pb::JobInfo {
        id: j.id.0,
        name: j.spec.name.clone(),
        user: j.owner.user.clone(),
        uid: j.owner.uid,
        gid: j.owner.gid,
        account: j.spec.account.clone(),
        tier: j.spec.tier.clone(),
        tier_value: j.tier_value,
        state: j.state.as_str().to_string(),
        reason: j.reason_shown().to_string(),
        alloc: j.alloc.iter().map(Into::into).collect(),
        restart_count: j.restart_count,
        exit_code: j.exit_code,
        signal: j.signal,
        submit_time_ms: j.submit_time,
        start_time_ms: j.start_time.unwrap_or(0),
        end_time_ms: j.end_time.unwrap_or(0),
        spec,
        checkpoint_dir: j.checkpoint_dir.clone(),
        grace_secs: j.grace_secs,
        gpus_requested: j.spec.gpus,
        time_limit_secs: j.spec.time_limit_secs.unwrap_or(0),
        last_checkpoint_ms: j.last_checkpoint.unwrap_or(0),
        // Known to schedd's scheduling loop only: its server fills them in.
        fair_share: None,
        queue_position: None,
        expected_start_ms: 0,
        expected_nodes: Vec::new(),
        array_job_id: j.array.map(|a| a.array_id.0),
        array_task_id: j.array.map(|a| a.task),
        display_id: j.display_id(),
        array_max_running: j.spec.array.as_ref().map_or(0, |a| a.max_running),
        // Decided per caller by schedd's server.
        usage_private: false,
        run_ms_before: j.run_ms_before,
        cancelling: j.state.holds_resources()
            && matches!(
                j.stop.as_ref().map(|s| &s.reason),
                Some(crate::StopReason::Cancel { .. })
            ),
        nodes_requested: j.spec.nodes.max(1),
        hold: j.hold().map_or("", |by| by.as_str()).to_string(),
    }
}

impl From<&AuditRecord> for pb::AuditEntry {
    fn from(a: &AuditRecord) -> Self {
        pb::AuditEntry {
            time_ms: a.time,
            user: a.user.clone(),
            uid: a.uid,
            action: a.action.clone(),
            job_id: a.job_id.map(|j| j.0).unwrap_or(0),
            detail: a.detail.clone(),
            host: a.host.clone().unwrap_or_default(),
        }
    }
}

impl From<&crate::types::RunRecord> for pb::RunUsage {
    fn from(r: &crate::types::RunRecord) -> Self {
        pb::RunUsage {
            job_id: r.job_id.0,
            restart_count: r.restart_count,
            account: r.account.clone(),
            user: r.user.clone(),
            uid: r.uid,
            tier: r.tier.clone(),
            gpus: r.gpus,
            cpus: r.cpus,
            queued_at_ms: r.queued_at,
            start_ms: r.start,
            end_ms: r.end,
            outcome: r.outcome.clone(),
            preempted_by: r.preempted_by.map_or(0, |j| j.0),
            preemptor_account: r.preemptor_account.clone().unwrap_or_default(),
            checkpoint_saved: r.checkpoint_saved,
            lost_gpu_secs: r.lost_gpu_secs,
        }
    }
}

impl From<&pb::RunUsage> for crate::types::RunRecord {
    fn from(r: &pb::RunUsage) -> Self {
        crate::types::RunRecord {
            job_id: crate::types::JobId(r.job_id),
            restart_count: r.restart_count,
            account: r.account.clone(),
            user: r.user.clone(),
            uid: r.uid,
            tier: r.tier.clone(),
            gpus: r.gpus,
            cpus: r.cpus,
            queued_at: r.queued_at_ms,
            start: r.start_ms,
            end: r.end_ms,
            outcome: r.outcome.clone(),
            preempted_by: (r.preempted_by != 0).then_some(crate::types::JobId(r.preempted_by)),
            preemptor_account: (!r.preemptor_account.is_empty())
                .then(|| r.preemptor_account.clone()),
            checkpoint_saved: r.checkpoint_saved,
            lost_gpu_secs: r.lost_gpu_secs,
        }
    }
}

/// A client's wire `JobSpec` as the domain's unchecked request: a move of every field, no
/// check (that is `schedd::submit::validate`'s).
impl From<pb::JobSpec> for crate::SubmitRequest {
    fn from(w: pb::JobSpec) -> Self {
        crate::SubmitRequest {
            name: w.name,
            tier: w.tier,
            gpus: w.gpus,
            gpu_type: w.gpu_type,
            cpus: w.cpus,
            mem_mib: w.mem_mib,
            time_limit_secs: w.time_limit_secs,
            grace_secs: w.grace_secs,
            checkpoint_dir: w.checkpoint_dir,
            account: w.account,
            stdout_path: w.stdout_path,
            stderr_path: w.stderr_path,
            workdir: w.workdir,
            script: w.script,
            args: w.args,
            env: w.env.into_iter().collect(),
            hold: w.hold,
            nodes: w.nodes,
            no_requeue: w.no_requeue,
            interconnect: w.interconnect,
            constraints: w.constraints,
            warn_signal: w.warn_signal.map(|s| crate::WarnSignal {
                signal: s.signal,
                secs: s.secs,
                batch_only: s.batch_only,
            }),
            array: w.array,
            dependency: w.dependency,
            nodelist: w.nodelist,
            exclude: w.exclude,
            exclusive: w.exclusive,
            begin_unix_secs: w.begin_unix_secs,
            mail_types: w.mail_types,
            mail_user: w.mail_user,
            ntasks_per_node: w.ntasks_per_node,
            partition: w.partition,
            qos: w.qos,
            slurm_env: w.slurm_env,
            open_append: w.open_append,
            comment: w.comment,
        }
    }
}
