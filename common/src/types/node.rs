//! A node as schedd knows it: its GPUs and their topology, admin state, and GPU outages.

use crate::time::Millis;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One GPU as the node agent reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub memory_mib: u64,
    pub pci_bus_id: String,
    pub numa_node: Option<i32>,
    /// Indices of local GPUs this one reaches over NVLink (directly or through an NVSwitch).
    pub nvlink: Vec<u32>,
    /// How this GPU reaches each other GPU of the node, as `nvidia-smi topo -m` shows it.
    /// Empty when the agent reported no topology (treated as `SYS` between every pair).
    #[serde(default)]
    pub links: Vec<GpuLink>,
}

/// The path between two GPUs of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLink {
    pub peer: u32,
    /// PCIe relation (`topology_common_ancestor`).
    pub pcie: PcieRelation,
    /// Number of NVLink links between the two (0: none). Through an NVSwitch: the links of
    /// this GPU to the switch fabric.
    pub nvlinks: u32,
}

/// PCIe relation of two GPUs, best first (the order `nvidia-smi topo -m` documents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PcieRelation {
    /// Behind one PCIe switch (or on the same board).
    Pix,
    /// Across several PCIe switches, not the host bridge.
    Pxb,
    /// Through a PCIe host bridge (the CPU).
    Phb,
    /// Across host bridges within one NUMA node.
    Node,
    /// Across NUMA nodes (the SMP interconnect).
    Sys,
}

impl PcieRelation {
    pub fn as_str(self) -> &'static str {
        match self {
            PcieRelation::Pix => "PIX",
            PcieRelation::Pxb => "PXB",
            PcieRelation::Phb => "PHB",
            PcieRelation::Node => "NODE",
            PcieRelation::Sys => "SYS",
        }
    }

    pub fn parse(s: &str) -> Option<PcieRelation> {
        Some(match s.trim().to_ascii_uppercase().as_str() {
            "PIX" => PcieRelation::Pix,
            "PXB" => PcieRelation::Pxb,
            "PHB" => PcieRelation::Phb,
            "NODE" => PcieRelation::Node,
            "SYS" => PcieRelation::Sys,
            _ => return None,
        })
    }
}

impl Gpu {
    /// The PCIe relation to `peer`; `SYS` when unknown.
    pub fn pcie_to(&self, peer: u32) -> PcieRelation {
        self.links
            .iter()
            .find(|l| l.peer == peer)
            .map(|l| l.pcie)
            .unwrap_or(PcieRelation::Sys)
    }

    pub fn has_nvlink_to(&self, peer: u32) -> bool {
        self.nvlink.contains(&peer)
    }
}

/// A node as schedd knows it: what its agent reported at registration plus admin state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub address: String,
    pub cpus: u32,
    pub mem_mib: u64,
    /// Shared, never changed in place: a registration brings a new list. Copies of the node
    /// (the scheduler's snapshot) share it, so the scheduler can tell by its address that a
    /// node's inventory is the one it already knows the topology of.
    pub gpus: Arc<Vec<Gpu>>,
    pub features: Vec<String>,
    /// Set by `yctl drain`: no new jobs; running ones finish.
    pub drain_reason: Option<String>,
    /// The drain is the node's own: its agent said it cannot take jobs (a full spool), and
    /// it is resumed when the agent says it can again. An administrator's drain or resume
    /// clears it (theirs is never undone by the node).
    #[serde(default)]
    pub drained_by_node: bool,
    /// Its agent has a live session.
    pub connected: bool,
    pub last_seen: Millis,
    /// When its agent first registered (epoch ms), kept across re-registrations and
    /// restarts: reports count the node's capacity from then on. 0: not known (the node was
    /// recorded by a schedd from before this field), counted as always there.
    #[serde(default)]
    pub registered_at: Millis,
    /// Jobs schedd no longer counts as running that the agent still ran when it registered
    /// (they were failed while it was away) and is killing now. Their GPUs are in use until
    /// the agent reports them gone, so the node takes no new job meanwhile. Not persisted:
    /// the next registration reports them again.
    #[serde(skip)]
    pub killing: BTreeSet<u64>,
    /// Its agent stops its jobs after this long without schedd (`node.fence_after_secs`, as
    /// it registered); 0: it never does, so the jobs of a silent node cannot be run again.
    #[serde(default)]
    pub fence_after_secs: u32,
    /// GPUs out of service, by index: no new job gets them. Its node's health monitor found
    /// them failing, or an administrator took them out; they return only when an
    /// administrator says so (`yctl resume NODE --gpu N`), whatever the node reports later.
    /// Kept across registrations, even for an index the node no longer reports.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_out_of_service: BTreeMap<u32, GpuOutage>,
    /// GPUs an administrator returned to service whose agent has not yet confirmed that it
    /// forgot their past faults: faults it reports for them are ignored until it does (they
    /// may predate the forget), and no job gets them meanwhile (the confirmation may say they
    /// still fail). Kept in the store, so that a restarted schedd (or an agent
    /// that was away) still waits for the confirmation, and asks again at registration.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub gpus_forgetting: BTreeSet<u32>,
}

/// Who took a GPU out of service when its node's health monitor found it failing
/// ([`GpuOutage::by`]); an administrator's outage names the administrator (a user name has no
/// space).
pub const GPU_HEALTH_BY: &str = "noded health";

/// Why a GPU is out of service, since when, and who took it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuOutage {
    /// The fault (`XID 79: GPU has fallen off the bus`) or the administrator's reason.
    pub reason: String,
    pub since: Millis,
    /// [`GPU_HEALTH_BY`], or the administrator's user name.
    pub by: String,
}

impl GpuOutage {
    /// Its node found it failing (rather than an administrator taking it out).
    pub fn failed(&self) -> bool {
        self.by == GPU_HEALTH_BY
    }
}

impl Node {
    /// May receive new jobs: connected, not drained, not killing leftovers, and with a GPU
    /// in service unless it has none (a node whose every GPU failed takes no job, not even a
    /// CPU-only one: it needs someone's attention).
    pub fn is_schedulable(&self) -> bool {
        self.connected
            && self.drain_reason.is_none()
            && self.killing.is_empty()
            && !self.all_gpus_out_of_service()
    }

    /// GPU `index` is out of service.
    pub fn gpu_out_of_service(&self, index: u32) -> bool {
        self.gpus_out_of_service.contains_key(&index)
    }

    /// The GPUs no new job may get: those out of service, and those returned to service whose
    /// node has not yet confirmed that it does not find them failing (`gpus_forgetting`).
    pub fn unusable_gpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.gpus_out_of_service
            .keys()
            .chain(&self.gpus_forgetting)
            .copied()
    }

    /// The node has GPUs and none of them is in service.
    pub fn all_gpus_out_of_service(&self) -> bool {
        !self.gpus_out_of_service.is_empty()
            && !self.gpus.is_empty()
            && self.gpus.iter().all(|g| self.gpu_out_of_service(g.index))
    }

    /// How many of its GPUs are out of service (outages of indices it no longer reports
    /// are not counted).
    pub fn gpus_out_count(&self) -> usize {
        if self.gpus_out_of_service.is_empty() {
            return 0;
        }
        self.gpus
            .iter()
            .filter(|g| self.gpu_out_of_service(g.index))
            .count()
    }
}

/// Whether a requested GPU type matches a model name: the model without the vendor word equals
/// the type or begins with `type-` or `type ` (e.g. `NVIDIA H100 80GB HBM3`), case-insensitively (`A100` matches `NVIDIA A100-SXM4-80GB`,
/// `A10` does not).
pub fn gpu_type_matches(wanted: &str, model: &str) -> bool {
    let model = model.trim();
    let bare = model
        .split_once(' ')
        .filter(|(vendor, _)| {
            ["nvidia", "amd", "intel"].contains(&vendor.to_ascii_lowercase().as_str())
        })
        .map(|(_, rest)| rest.trim())
        .unwrap_or(model);
    let (bare, wanted) = (
        bare.to_ascii_lowercase(),
        wanted.trim().to_ascii_lowercase(),
    );
    if wanted.is_empty() {
        return false;
    }
    bare == wanted
        || bare
            .strip_prefix(&wanted)
            .is_some_and(|rest| rest.starts_with('-') || rest.starts_with(' '))
}
