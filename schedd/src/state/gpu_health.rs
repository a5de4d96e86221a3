//! GPUs out of service. A node's agent reports the GPUs its health monitor finds failing (XID
//! errors, uncorrectable ECC errors, pages pending retirement, a GPU the driver lost) in every
//! heartbeat and at registration; schedd takes each newly named GPU out of service (that GPU,
//! not the node), audited, and stops the job running on it, which is requeued once stopped by
//! the usual rules (`lifecycle::gpu_failed`). An administrator may take GPUs out too (`yctl
//! drain NODE --gpu N`: a job on one runs on), and returns GPUs to service (`yctl resume NODE
//! --gpu N`), whoever took them out: a repaired GPU needs an administrator's word, whatever the
//! node reports later.
//!
//! A resume tells the agent to forget the GPU's past faults (events such as an XID error stay
//! in its monitor's set until then); until the agent confirms that it did, in a report whose
//! fault set was taken after the forget, faults it reports for that GPU are ignored (they may
//! predate the forget) and no job gets the GPU. A GPU the confirming report still names fails
//! for good (a lasting fault): it goes out of service again.
//!
//! Outages and GPUs awaiting confirmation are part of the node's record: written before they
//! count, and kept across schedd restarts and the node's registrations.

use super::agent_events::{node_audit, Limits, Working};
use super::client_events::audit_record;
use super::commands::AgentCommand;
use super::history::JobEventKind;
use super::lifecycle;
use super::{Effects, Records};
use crate::error::{ApiError, ApiResult};
use ysched_common::time::{rfc3339, Millis};
use ysched_common::{Caller, GpuOutage, JobId, Node, GPU_HEALTH_BY};

/// What a node's agent says of its GPUs' health, in every heartbeat and at registration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuReport {
    /// The GPUs its health monitor finds failing now, by index, with the fault in words.
    pub faults: Vec<(u32, String)>,
    /// GPUs whose past faults it forgot (schedd asked it to, after an administrator's resume)
    /// before it took `faults`.
    pub forgotten: Vec<u32>,
}

impl GpuReport {
    /// Whether this report changes anything on `node`: a GPU it names goes out of service, or
    /// it confirms a forget schedd waits for. Most heartbeats change nothing, and the shell asks
    /// this under the lock before it runs an event.
    pub fn changes(&self, node: &Node) -> bool {
        self.forgotten
            .iter()
            .any(|i| node.gpus_forgetting.contains(i))
            || self
                .faults
                .iter()
                .any(|(index, _)| takes_out(node, *index, &self.forgotten))
    }
}

/// Whether a reported fault of GPU `index` takes it out of service on `node`: a GPU the node
/// has, not already out for a failure, and not awaiting the confirmation of a forget (unless
/// this report confirms it: then the fault outlived the forget).
fn takes_out(node: &Node, index: u32, forgotten: &[u32]) -> bool {
    node.gpus.iter().any(|g| g.index == index)
        && !node
            .gpus_out_of_service
            .get(&index)
            .is_some_and(GpuOutage::failed)
        && (!node.gpus_forgetting.contains(&index) || forgotten.contains(&index))
}

/// Applies `report` to `node` (the event's copy of it): confirmed forgets leave
/// `gpus_forgetting`, and each GPU newly found failing goes out of service (replacing an
/// administrator's outage: a failure is more than a suspicion), audited as `gpu_failed` by
/// `noded`. Returns the GPUs newly out of service, with their faults.
pub(super) fn apply_report(
    node: &mut Node,
    report: &GpuReport,
    now: Millis,
    fx: &mut Effects,
) -> Vec<(u32, String)> {
    let mut newly = Vec::new();
    for (index, fault) in &report.faults {
        if !takes_out(node, *index, &report.forgotten) || newly.iter().any(|(i, _)| i == index) {
            continue;
        }
        let after_resume = node.gpus_forgetting.contains(index);
        let detail = if after_resume {
            format!(
                "node {} GPU {index} still fails after it was returned to service: {fault}",
                node.name
            )
        } else {
            format!("node {} GPU {index}: {fault}", node.name)
        };
        fx.audit(node_audit(&node.name, "gpu_failed", detail, now));
        node.gpus_out_of_service.insert(
            *index,
            GpuOutage {
                reason: fault.clone(),
                since: now,
                by: GPU_HEALTH_BY.to_string(),
            },
        );
        newly.push((*index, fault.clone()));
    }
    for index in &report.forgotten {
        node.gpus_forgetting.remove(index);
    }
    newly
}

/// Stops the jobs that run on a GPU of `node` out of service for a failure and are not being
/// stopped yet (see [`lifecycle::gpu_failed`]), in the event's working copies; a job already
/// being stopped is told in its history when its GPU is among the `newly` failed.
pub(super) fn stop_jobs_on_failed_gpus(
    work: &mut Working<'_>,
    fx: &mut Effects,
    node: &Node,
    newly: &[(u32, String)],
    limits: Limits,
    now: Millis,
) {
    let failed = |index: &u32| {
        node.gpus_out_of_service
            .get(index)
            .filter(|o| o.failed())
            .map(|o| o.reason.clone())
    };
    if !node.gpus_out_of_service.values().any(GpuOutage::failed) {
        return;
    }
    let name = node.name.as_str();
    let here: Vec<JobId> = work
        .records()
        .jobs
        .values()
        .filter(|j| j.runs_on(name))
        .map(|j| j.id)
        .collect();
    for id in here {
        let Some(job) = work.job(id) else {
            continue;
        };
        let Some((gpu, fault)) = job
            .alloc
            .iter()
            .filter(|a| a.node == name)
            .flat_map(|a| a.gpus.iter())
            .find_map(|g| failed(g).map(|fault| (*g, fault)))
        else {
            work.forget_if_unchanged(id);
            continue;
        };
        match lifecycle::gpu_failed(job, name, gpu, &fault, limits.max_requeues, now) {
            Some(((at, kind, detail), nodes, grace)) => {
                fx.event(id, at, kind, detail);
                fx.stop_parts(id, &nodes, grace, "GPU failed");
            }
            None if newly.iter().any(|(i, _)| *i == gpu) => {
                let detail = format!(
                    "GPU {gpu} of {name} failed: {fault}; the job was being stopped already"
                );
                fx.event(id, now, JobEventKind::GpuFailed, detail);
            }
            None => {}
        }
        work.forget_if_unchanged(id);
    }
}

/// The GPU indices of a node as a short list for messages: `0-7`, `0,2,5`.
fn describe_indices(node: &Node) -> String {
    let indices: Vec<u32> = node.gpus.iter().map(|g| g.index).collect();
    let contiguous = indices.windows(2).all(|w| w[1] == w[0] + 1);
    match (indices.first(), indices.last()) {
        (None, _) | (_, None) => "none".into(),
        (Some(first), Some(last)) if contiguous && indices.len() > 2 => format!("{first}-{last}"),
        _ => indices
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// The administrator check of GPU drains and resumes.
fn check_admin(caller: &Caller) -> ApiResult<()> {
    if caller.is_admin() {
        return Ok(());
    }
    Err(ApiError::Denied(format!(
        "only administrators may take GPUs out of service or return them ({} is not one: \
         root on the schedd host, scheduler.admin_group, root on scheduler.admin_hosts)",
        caller.describe()
    )))
}

impl Records {
    /// A node's agent reported its GPUs' health (see [`GpuReport`]): GPUs newly failing go
    /// out of service and the jobs on them are stopped and requeued (see
    /// [`stop_jobs_on_failed_gpus`]); confirmed forgets are recorded. Nothing when the report
    /// changes nothing ([`GpuReport::changes`]).
    pub fn gpu_report(
        &self,
        name: &str,
        report: &GpuReport,
        limits: Limits,
        now: Millis,
    ) -> Effects {
        let mut fx = Effects::default();
        let Some(node) = self.nodes.get(name).filter(|n| report.changes(n)) else {
            return fx;
        };
        let mut node = node.clone();
        // A confirmed forget lets the GPU take jobs (if it does not fail still).
        fx.wake = report
            .forgotten
            .iter()
            .any(|i| node.gpus_forgetting.contains(i));
        let newly = apply_report(&mut node, report, now, &mut fx);
        let mut work = Working::new(self);
        stop_jobs_on_failed_gpus(&mut work, &mut fx, &node, &newly, limits, now);
        work.finish(&mut fx);
        fx.put_node(node);
        fx
    }

    /// An administrator takes GPUs `gpus` of node `name` out of service with `reason` (`yctl
    /// drain NODE --gpu N`): no new job gets them; a job running on one runs on, as on a
    /// drained node. A GPU out of service for a failure keeps its failure as the reason.
    /// Each GPU is audited (`drain_gpu`).
    pub fn drain_gpus(
        &self,
        caller: &Caller,
        name: &str,
        gpus: &[u32],
        reason: &str,
        now: Millis,
    ) -> ApiResult<Effects> {
        check_admin(caller)?;
        ysched_common::text::check_printable("drain reason", reason).map_err(ApiError::Invalid)?;
        let mut node = self.node_for_gpus(name, gpus)?.clone();
        for index in gpus {
            if !node.gpus.iter().any(|g| g.index == *index) {
                return Err(ApiError::NotFound(format!(
                    "node {name} has no GPU {index} (its GPUs: {})",
                    describe_indices(&node)
                )));
            }
        }
        let mut fx = Effects::default();
        for index in gpus {
            if let Some(outage) = node.gpus_out_of_service.get(index).filter(|o| o.failed()) {
                return Err(ApiError::Conflict(format!(
                    "GPU {index} of {name} is out of service already: it failed ({}, since {})",
                    outage.reason,
                    rfc3339(outage.since)
                )));
            }
            node.gpus_out_of_service.insert(
                *index,
                GpuOutage {
                    reason: reason.to_string(),
                    since: now,
                    by: caller.owner.user.clone(),
                },
            );
            let detail = format!("node {name} GPU {index}: {reason}");
            fx.audit(audit_record(caller, "drain_gpu", None, detail, now));
        }
        fx.put_node(node);
        Ok(fx)
    }

    /// An administrator returns GPUs `gpus` of node `name` to service (`yctl resume NODE --gpu
    /// N`), whoever took them out: each is audited (`resume_gpu`), and the node's agent is told
    /// to forget its past faults (`ResumeGpu`, after the flush; again at its next registration
    /// until it confirms, see [`GpuReport::forgotten`]). A GPU that is not out of service is
    /// refused, so that a mistyped index is noticed.
    pub fn resume_gpus(
        &self,
        caller: &Caller,
        name: &str,
        gpus: &[u32],
        now: Millis,
    ) -> ApiResult<Effects> {
        check_admin(caller)?;
        let mut node = self.node_for_gpus(name, gpus)?.clone();
        // No job gets the GPUs before their node confirms (see `Node::unusable_gpus`): that
        // wakes the scheduler.
        let mut fx = Effects::default();
        for index in gpus {
            let Some(outage) = node.gpus_out_of_service.remove(index) else {
                let what = if node.gpus.iter().any(|g| g.index == *index) {
                    "is in service (not out of service)".to_string()
                } else {
                    format!("does not exist (its GPUs: {})", describe_indices(&node))
                };
                return Err(ApiError::Conflict(format!("GPU {index} of {name} {what}")));
            };
            let detail = format!(
                "node {name} GPU {index} (was: {}, since {}, by {})",
                outage.reason,
                rfc3339(outage.since),
                outage.by
            );
            fx.audit(audit_record(caller, "resume_gpu", None, detail, now));
            node.gpus_forgetting.insert(*index);
            fx.command(name, AgentCommand::ResumeGpu { index: *index });
        }
        fx.put_node(node);
        Ok(fx)
    }

    /// The node a GPU request names, and a list of GPUs that says something.
    fn node_for_gpus(&self, name: &str, gpus: &[u32]) -> ApiResult<&Node> {
        let node = self.nodes.get(name).ok_or_else(|| {
            ApiError::NotFound(format!(
                "unknown node '{}'",
                ysched_common::text::excerpt(name, 64)
            ))
        })?;
        if gpus.is_empty() {
            return Err(ApiError::Invalid("name at least one GPU (--gpu N)".into()));
        }
        ysched_common::limits::GPUS_NAMED
            .check_count(gpus.len() as u64)
            .map_err(ApiError::Invalid)?;
        Ok(node)
    }
}
