//! A GPU as JSON: the one schema `noded --inventory --json` prints and `yctl nodes --json` and
//! `yctl show node --json` print (with what `schedd` knows besides: its job, whether it is in
//! service), so that the two are the same objects where they overlap.

use serde::Serialize;

/// A GPU as its node found it.
#[derive(Debug, Serialize)]
pub struct GpuJson<'a> {
    pub index: u32,
    pub uuid: &'a str,
    pub model: &'a str,
    pub memory_mib: u64,
    pub pci_bus_id: &'a str,
    /// Null when unknown.
    pub numa_node: Option<i32>,
    pub nvlink: &'a [u32],
    /// How it reaches each other GPU of the node; empty when the agent did not say.
    pub links: Vec<GpuLinkJson<'a>>,
}

/// How a GPU reaches another GPU of its node.
#[derive(Debug, Serialize)]
pub struct GpuLinkJson<'a> {
    pub peer: u32,
    /// PIX, PXB, PHB, NODE or SYS.
    pub pcie: &'a str,
    /// NVLink links between the two; 0: none.
    pub nvlinks: u32,
}
