//! GPU inventory: what GPUs this host has and how they are linked.
//!
//! Two backends behind one trait: [`FakeInventory`] reads a TOML file (for tests and for
//! machines without GPUs), [`NvmlInventory`] asks the NVIDIA driver. Both fill every GPU's
//! `links` (one per other GPU: PCIe relation and NVLink count) through the pure functions of
//! the topology module, which the NVML backend's recorded answers are tested against.

mod fake;
mod nvml;
mod topology;

pub use fake::FakeInventory;
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

/// The backend the flags ask for: a fake inventory file when given, else NVML.
pub fn inventory(fake_gpus: Option<&Path>) -> Box<dyn GpuInventory + Send + Sync> {
    match fake_gpus {
        Some(path) => Box::new(FakeInventory::new(path)),
        None => Box::new(NvmlInventory),
    }
}
