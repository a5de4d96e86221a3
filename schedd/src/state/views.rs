//! What the read-only requests show, derived from the records: a node's state as `yctl
//! nodes` prints it, and which job holds each of its GPUs.

use ysched_common::Node;

/// A node with what is derived from the jobs on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub node: Node,
    /// DOWN, DRAINING, DRAINED (drained, or every GPU out of service), IDLE, ALLOCATED (every
    /// GPU taken or out of service) or MIXED.
    pub state: &'static str,
    /// The job holding each GPU, by position in `node.gpus`; 0: free; [`PRIVATE_HOLDER`]: a
    /// job the asker may not see.
    pub gpu_holders: Vec<u64>,
    pub cpus_alloc: u32,
    pub mem_alloc_mib: u64,
    /// Why it takes no job: its drain reason, or that every GPU is out of service; empty:
    /// neither.
    pub reason: String,
}

/// A GPU's holder that the asker may not see (`scheduler.reports_public = false`): the value
/// the wire gives it too (`ysched_proto::PRIVATE_HOLDER`, checked in `server::convert`).
pub const PRIVATE_HOLDER: u64 = u64::MAX;

pub fn node_view(n: &Node, jobs: &crate::core::JobMap) -> NodeView {
    let mut holders = vec![0u64; n.gpus.len()];
    let (mut cpus_alloc, mut mem_alloc, mut n_jobs) = (0u32, 0u64, 0);
    for j in jobs.values().filter(|j| j.state.holds_resources()) {
        for a in j.alloc.iter().filter(|a| a.node == n.name) {
            n_jobs += 1;
            cpus_alloc = cpus_alloc.saturating_add(a.cpus);
            mem_alloc = mem_alloc.saturating_add(a.mem_mib);
            for g in &a.gpus {
                if let Some(pos) = n.gpus.iter().position(|x| x.index == *g) {
                    holders[pos] = j.id.0;
                }
            }
        }
    }
    // A GPU out of service is as good as taken: ALLOCATED when the rest are busy.
    let taken_gpus = n
        .gpus
        .iter()
        .zip(&holders)
        .filter(|(g, h)| **h != 0 || n.gpu_out_of_service(g.index))
        .count();
    let state = if !n.connected {
        "DOWN"
    } else if n.drain_reason.is_some() || n.all_gpus_out_of_service() {
        // A node whose every GPU is out of service takes no job, as a drained one.
        if n_jobs > 0 {
            "DRAINING"
        } else {
            "DRAINED"
        }
    } else if n_jobs == 0 {
        "IDLE"
    } else if (n.gpus.is_empty() && cpus_alloc >= n.cpus)
        || (!n.gpus.is_empty() && taken_gpus == n.gpus.len())
    {
        "ALLOCATED"
    } else {
        "MIXED"
    };
    NodeView {
        reason: match &n.drain_reason {
            Some(reason) => reason.clone(),
            None if n.all_gpus_out_of_service() => {
                format!("all {} GPUs out of service", n.gpus.len())
            }
            None => String::new(),
        },
        node: n.clone(),
        state,
        gpu_holders: holders,
        cpus_alloc,
        mem_alloc_mib: mem_alloc,
    }
}
