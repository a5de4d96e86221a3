//! GPU inventory: what GPUs this host has and how they are linked.
//!
//! Two backends behind one trait: [`FakeInventory`] reads a TOML file (for tests and for
//! machines without GPUs), [`NvmlInventory`] asks the NVIDIA driver. Both fill every GPU's
//! `links` (one per other GPU: PCIe relation and NVLink count) through the pure functions of
//! the topology module, which the NVML backend's recorded answers are tested against.

mod fake;
mod nvml;
mod topology;

pub use fake::{FakeFaults, FakeHealth, FakeInventory};
pub use nvml::NvmlInventory;
pub use topology::{
    link_gpus, normalize_bus_id, nvlink_counts, pcie_relation, LinkKind, NvlinkCounts,
    NvmlTopology, RemoteEndpoint,
};

use std::path::{Path, PathBuf};
use ysched_common::Gpu;

/// Something that can list the GPUs of this host.
pub trait GpuInventory {
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError>;
}

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot read GPU inventory file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid GPU inventory file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("NVML query failed: {0}")]
    Nvml(String),
}

/// A GPU found failing, in words an administrator can act on (e.g. "XID 79: GPU has fallen
/// off the bus", "2 uncorrectable ECC errors", "pages pending retirement", "NVML no longer
/// sees GPU-…").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFault {
    /// The GPU's index, as registered (`Gpu::index`).
    pub index: u32,
    pub reason: String,
}

/// Watches the GPUs found at start-up for faults; the agent polls it every
/// `node.gpu_health_secs` on a blocking thread.
pub trait GpuHealth: Send {
    /// The GPUs failing now, at most one fault each. A fault that is an event (an XID error, a
    /// new uncorrectable ECC error) stays in the set until [`GpuHealth::forget`] is called for
    /// its GPU; a fault that is a state (pages pending retirement, a GPU NVML no longer sees)
    /// is in the set while it lasts. Trouble reading one GPU costs that GPU at most, never the
    /// poll: the monitor logs it (rate-limited) and carries on.
    fn poll(&mut self) -> Vec<GpuFault>;
    /// An administrator returned this GPU to service (`yctl resume NODE --gpu N`): forget its
    /// past events. A state that persists is reported again at the next poll.
    fn forget(&mut self, index: u32);
}

/// A monitor that finds nothing: for hosts where nothing can watch the GPUs.
pub struct NoHealth;

impl GpuHealth for NoHealth {
    fn poll(&mut self) -> Vec<GpuFault> {
        Vec::new()
    }

    fn forget(&mut self, _index: u32) {}
}

/// The health monitor the flags ask for, watching the GPUs found at start (`gpus`): the fake
/// inventory file's faults when given (see [`FakeHealth`]), else NVML's.
pub fn health_monitor(fake_gpus: Option<&Path>, gpus: &[Gpu]) -> Box<dyn GpuHealth> {
    match fake_gpus {
        Some(path) => Box::new(FakeHealth::new(path, gpus)),
        // merged with NvmlHealth: this branch becomes the NVML monitor
        // (`nvml_health(config.node.nvml_library, gpus)`, with its error logged and `NoHealth`
        // in its place); until then, real GPUs are not watched.
        None => Box::new(NoHealth),
    }
}

/// The backend the flags ask for: a fake inventory file when given, else NVML.
pub fn inventory(fake_gpus: Option<&Path>) -> Box<dyn GpuInventory + Send + Sync> {
    match fake_gpus {
        Some(path) => Box::new(FakeInventory::new(path)),
        None => Box::new(NvmlInventory),
    }
}
