//! Per-node reasons a pending job does not run, for `yctl show job`.

use std::collections::BTreeSet;

use ysched_common::time::Millis;
use ysched_common::{Job, JobId};

use super::demand::NodeDemand;
use super::fit::{fit_on_node, plural};
use super::node_view::Claim;
use super::order::{pending_in_order, queue_key};
use super::pass::{HeldBack, Pass};
use super::{Policy, Snapshot, Topologies};

/// For every known node, in name order: why `job` does not fit there right now, or "fits".
///
/// "Right now" means as the scheduler sees it when the job's turn comes: the pass is replayed
/// for every pending job ahead of it in the queue, so room taken or reserved by those shows up
/// here too (with backfill, a job that ends before a reservation starts may use its room, as in
/// the pass). For a gang, each line speaks of the job's per-node share. A job that the pass
/// does not consider for room at all (its dependency, `singleton`, its array's `%N`) says so
/// on every line, after the node's own answer.
pub fn explain(
    job: &Job,
    snap: &Snapshot<'_>,
    policy: &Policy<'_>,
    now: Millis,
) -> Vec<(String, String)> {
    let mut pass = Pass::new(snap, policy, now, &mut Topologies::default());
    let key = queue_key(job, policy.fair_share);
    for ahead in pending_in_order(snap.jobs, policy.fair_share)
        .into_iter()
        .take_while(|j| queue_key(j, policy.fair_share) < key)
    {
        pass.step(ahead);
    }
    let held_back = pass.held_back(job).map(|held| held_back_why(job, held));
    let demand = NodeDemand::of(&job.spec).ending(pass.ends_by(job));
    snap.nodes
        .values()
        .map(|node| {
            let why = if !node.connected {
                "agent not connected".to_string()
            } else if let Some(drain_reason) = &node.drain_reason {
                format!("drained: {drain_reason}")
            } else if !node.killing.is_empty() {
                let ids: Vec<String> = node.killing.iter().map(|id| id.to_string()).collect();
                format!("killing leftover processes of ended jobs {}", ids.join(","))
            } else if node.all_gpus_out_of_service() {
                format!("{} out of service", plural(node.gpus.len() as u32, "GPU"))
            } else if let Some(view) = pass.views().get(node.name.as_str()) {
                match fit_on_node(view, &demand) {
                    Ok(_) => "fits".to_string(),
                    // The free count leaves them out: say why the node looks smaller.
                    Err(misfit) if demand.gpus > 0 && view.out_of_service() != 0 => {
                        let out = view.topology().indices_of(view.out_of_service());
                        let list: Vec<String> = out.iter().map(u32::to_string).collect();
                        let gpus = if out.len() == 1 { "GPU" } else { "GPUs" };
                        format!("{misfit} ({gpus} {} out of service)", list.join(","))
                    }
                    Err(misfit) => {
                        // Name the jobs ahead in the queue that took room in this pass: the
                        // node can look free in `yq` yet be promised to them.
                        let ahead: BTreeSet<JobId> = view
                            .holds()
                            .iter()
                            .filter(|h| h.claim != Claim::Running && h.job != job.id)
                            .map(|h| h.job)
                            .collect();
                        if misfit.is_transient() && !ahead.is_empty() {
                            let ids: Vec<String> = ahead.iter().map(JobId::to_string).collect();
                            format!("{misfit} (taken by jobs ahead: {})", ids.join(","))
                        } else {
                            misfit.to_string()
                        }
                    }
                }
            } else {
                // Unreachable: the pass has a view of every schedulable node.
                "not schedulable".to_string()
            };
            match &held_back {
                Some(held) => (node.name.clone(), format!("{why}; {held}")),
                None => (node.name.clone(), why),
            }
        })
        .collect()
}

/// What holds `job` back before any fit, in words.
fn held_back_why(job: &Job, held: HeldBack) -> String {
    let text = job.spec.dependency.as_ref().map_or("", |d| d.text.as_str());
    let reason = held.reason();
    match held {
        HeldBack::BeginTime => {
            let begin = job.spec.begin_unix_secs.map_or(0, super::pass::begin_ms);
            format!(
                "the job may not start before {} (--begin, {reason})",
                ysched_common::time::rfc3339(begin)
            )
        }
        HeldBack::Dependency => format!("the job waits for its dependency {text} ({reason})"),
        HeldBack::NeverSatisfied => {
            format!("the job's dependency {text} can never be satisfied ({reason})")
        }
        HeldBack::Singleton => format!(
            "the job waits until no other job named {} of {} runs (singleton, {reason})",
            job.spec.name, job.owner.user
        ),
        HeldBack::ArrayLimit => {
            let max = job.spec.array.as_ref().map_or(0, |a| a.max_running);
            let array = job.array.map_or(job.id, |a| a.array_id);
            format!(
                "array {array} already runs {} (its limit %{max}, {reason})",
                plural(max, "task")
            )
        }
    }
}
