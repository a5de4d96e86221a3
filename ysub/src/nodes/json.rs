//! Nodes as JSON (`yctl nodes --json`, `yctl show node --json`): their GPUs, links and
//! outages, as the wire reports them.

use super::{gpu_holder, gpu_outage, Holder};
use serde::Serialize;
pub use ysched_common::gpu_json::GpuLinkJson;
use ysched_common::time::rfc3339;
use ysched_proto::NodeInfo;

/// A GPU as its node found it ([`ysched_common::gpu_json`], as `noded --inventory --json`
/// prints it), then what schedd knows of it.
#[derive(Debug, Serialize)]
pub struct GpuJson<'a> {
    #[serde(flatten)]
    pub gpu: ysched_common::gpu_json::GpuJson<'a>,
    /// The job holding it; null when idle, or when that job's usage is not the caller's to
    /// see (`scheduler.reports_public = false`).
    pub job: Option<u64>,
    /// Held by a job (`job` may still be null, see there).
    pub in_use: bool,
    /// Not out of service (see the node's `gpus_out_of_service`).
    pub in_service: bool,
}

/// A GPU out of service.
#[derive(Debug, Serialize)]
pub struct GpuOutageJson<'a> {
    pub index: u32,
    pub reason: &'a str,
    /// RFC 3339.
    pub since: String,
    pub since_ms: i64,
    /// `noded health` (its node found it failing) or the administrator who took it out.
    pub by: &'a str,
}

#[derive(Debug, Serialize)]
pub struct NodeJson<'a> {
    pub name: &'a str,
    pub state: &'a str,
    pub address: &'a str,
    pub cpus: u32,
    pub cpus_alloc: u32,
    pub mem_mib: u64,
    pub mem_alloc_mib: u64,
    pub features: &'a [String],
    pub reason: &'a str,
    /// RFC 3339; null when never seen.
    pub last_seen: Option<String>,
    /// The node stops its jobs after this long without schedd; 0: it never does.
    pub fence_after_secs: u32,
    pub gpus: Vec<GpuJson<'a>>,
    /// No new job gets these until an administrator returns them.
    pub gpus_out_of_service: Vec<GpuOutageJson<'a>>,
}

pub fn node_to_json(node: &NodeInfo) -> NodeJson<'_> {
    NodeJson {
        name: &node.name,
        state: &node.state,
        address: &node.address,
        cpus: node.cpus,
        cpus_alloc: node.cpus_alloc,
        mem_mib: node.mem_mib,
        mem_alloc_mib: node.mem_alloc_mib,
        features: &node.features,
        reason: &node.reason,
        last_seen: (node.last_seen_ms > 0).then(|| rfc3339(node.last_seen_ms)),
        fence_after_secs: node.fence_after_secs,
        gpus: node
            .gpus
            .iter()
            .enumerate()
            .map(|(position, gpu)| GpuJson {
                gpu: ysched_common::gpu_json::GpuJson {
                    index: gpu.index,
                    uuid: &gpu.uuid,
                    model: &gpu.model,
                    memory_mib: gpu.memory_mib,
                    pci_bus_id: &gpu.pci_bus_id,
                    numa_node: (gpu.numa_node >= 0).then_some(gpu.numa_node),
                    nvlink: &gpu.nvlink,
                    links: gpu
                        .links
                        .iter()
                        .map(|l| GpuLinkJson {
                            peer: l.peer,
                            pcie: &l.pcie,
                            nvlinks: l.nvlinks,
                        })
                        .collect(),
                },
                job: match gpu_holder(node, position) {
                    Some(Holder::Job(job)) => Some(job),
                    _ => None,
                },
                in_use: gpu_holder(node, position).is_some(),
                in_service: gpu_outage(node, gpu.index).is_none(),
            })
            .collect(),
        gpus_out_of_service: node
            .gpus_out_of_service
            .iter()
            .map(|o| GpuOutageJson {
                index: o.index,
                reason: &o.reason,
                since: rfc3339(o.since_ms),
                since_ms: o.since_ms,
                by: &o.by,
            })
            .collect(),
    }
}
