//! GPU inventory: what GPUs this host has and how they are linked; and their health.
//!
//! Two backends behind one trait: [`FakeInventory`] reads a TOML file (for tests and for
//! machines without GPUs), [`NvmlInventory`] asks the NVIDIA driver (or the library
//! `node.nvml_library` names). Both fill every GPU's `links` (one per other GPU: PCIe relation
//! and NVLink count) through the pure functions of the topology module, which the NVML
//! backend's recorded answers are tested against. The `nvml_health` module watches the
//! registered GPUs through NVML ([`GpuHealth`]); the `fake_health` module, a fake file's.

mod fake;
mod fake_health;
mod nvml;
mod nvml_health;
mod topology;

pub use fake::FakeInventory;
pub use fake_health::{FakeFaults, FakeHealth};
pub use nvml::{NvmlInventory, DEFAULT_LIBRARY};
pub use nvml_health::{critical_xid, NvmlHealth};
pub use topology::{
    link_gpus, normalize_bus_id, nvlink_counts, pcie_relation, LinkKind, NvlinkCounts,
    NvmlTopology, RemoteEndpoint,
};

use std::path::{Path, PathBuf};
use ysched_common::Gpu;

/// Something that can list the GPUs of this host.
pub trait GpuInventory {
    /// The GPUs to offer.
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError>;

    /// The GPUs to offer, and those found but not offered, with why.
    fn detect(&self) -> Result<Detected, InventoryError> {
        Ok(Detected {
            gpus: self.gpus()?,
            excluded: Vec::new(),
        })
    }
}

/// What a backend found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Detected {
    /// The GPUs to offer, by index.
    pub gpus: Vec<Gpu>,
    /// GPUs found but not offered, by index.
    pub excluded: Vec<ExcludedGpu>,
}

/// A GPU the host has but does not offer: NVML could not describe it (a fault), or it is in a
/// mode ysched does not schedule (MIG enabled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExcludedGpu {
    /// NVML's index of the GPU.
    pub index: u32,
    /// Empty when NVML could not tell.
    pub uuid: String,
    /// Why it is not offered, naming the NVML call that failed if one did.
    pub reason: String,
    /// An NVML error, rather than a configuration the administrator chose.
    pub fault: bool,
}

impl std::fmt::Display for ExcludedGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GPU {}", self.index)?;
        if !self.uuid.is_empty() {
            write!(f, " ({})", self.uuid)?;
        }
        write!(f, " is not offered: {}", self.reason)
    }
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
    #[error(
        "cannot load the NVML library {path} (node.nvml_library or --nvml-library): {message}"
    )]
    Library { path: PathBuf, message: String },
    /// NVML failed as a whole (it cannot start, or cannot count the GPUs); the message names
    /// the call.
    #[error("{0}")]
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
/// inventory file's faults when given (see [`FakeHealth`]), else NVML's from `nvml_library`
/// (`None`: the driver's). A host where NVML cannot start has no GPU to watch (the inventory
/// found none) or a driver in trouble: that is logged, and nothing is watched.
pub fn health_monitor(
    fake_gpus: Option<&Path>,
    nvml_library: Option<&Path>,
    gpus: &[Gpu],
) -> Box<dyn GpuHealth> {
    match fake_gpus {
        Some(path) => Box::new(FakeHealth::new(path, gpus)),
        None if gpus.is_empty() => Box::new(NoHealth),
        None => match nvml_health(nvml_library, gpus) {
            Ok(monitor) => monitor,
            Err(e) => {
                tracing::error!("GPU health is not watched: {e}");
                Box::new(NoHealth)
            }
        },
    }
}

/// The backend the flags ask for: a fake inventory file when given, else NVML from
/// `nvml_library` (`None`: the driver's [`DEFAULT_LIBRARY`]).
pub fn inventory(
    fake_gpus: Option<&Path>,
    nvml_library: Option<&Path>,
) -> Box<dyn GpuInventory + Send + Sync> {
    match fake_gpus {
        Some(path) => Box::new(FakeInventory::new(path)),
        None => Box::new(NvmlInventory::new(nvml_library)),
    }
}

/// A health monitor of the registered `gpus` through NVML from `library` (`None`: the
/// driver's), keeping NVML open; see [`NvmlHealth`].
pub fn nvml_health(
    library: Option<&Path>,
    gpus: &[Gpu],
) -> Result<Box<dyn GpuHealth>, InventoryError> {
    Ok(Box::new(NvmlHealth::new(library, gpus)?))
}
