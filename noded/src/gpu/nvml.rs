//! The NVML backend: asks the NVIDIA driver through nvml-wrapper.

use super::topology::{normalize_bus_id, LinkKind, NvmlTopology, RemoteEndpoint};
use super::{GpuInventory, InventoryError};
use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::collections::BTreeMap;
use ysched_common::Gpu;

/// NVML's `NVML_NVLINK_MAX_LINKS` (not re-exported by nvml-wrapper).
const MAX_NVLINKS: u32 = 18;

/// Values of NVML's `nvmlIntNvLinkDeviceType_t`.
const NVLINK_DEVICE_TYPE_GPU: u32 = 0;
const NVLINK_DEVICE_TYPE_SWITCH: u32 = 2;
const NVLINK_DEVICE_TYPE_UNKNOWN: u32 = 255;

pub struct NvmlInventory;

impl GpuInventory for NvmlInventory {
    /// Without the driver (no `libnvidia-ml.so.1`) the host has no GPUs: logged, not an error.
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError> {
        let nvml = match Nvml::init() {
            Ok(nvml) => nvml,
            Err(e) => {
                tracing::warn!("NVML unavailable, reporting no GPUs: {e}");
                return Ok(Vec::new());
            }
        };
        let failed = |what: &str, e: NvmlError| InventoryError::Nvml(format!("{what}: {e}"));
        let count = nvml.device_count().map_err(|e| failed("device count", e))?;
        let mut gpus = Vec::new();
        // (NVML's enumeration position, the GPU's index): handles are fetched by position.
        let mut positions = Vec::new();
        let mut topology = NvmlTopology::default();
        let mut nvlink_queries = true;
        for position in 0..count {
            let device = nvml
                .device_by_index(position)
                .map_err(|e| failed(&format!("device {position}"), e))?;
            let index = device.index().unwrap_or(position);
            let what = |attr: &str| format!("GPU {index} {attr}");
            let bus_id = normalize_bus_id(
                &device
                    .pci_info()
                    .map_err(|e| failed(&what("PCI info"), e))?
                    .bus_id,
            );
            let numa_node = match device.numa_node_id() {
                Ok(node) => i32::try_from(node).ok(),
                // Older drivers lack nvmlDeviceGetNumaNodeId; sysfs knows too.
                Err(_) => sysfs_numa_node(&bus_id),
            };
            if nvlink_queries {
                match active_links(&nvml, &device) {
                    Ok(links) => topology
                        .nvlinks
                        .extend(links.into_iter().map(|l| (index, l))),
                    Err(e) => {
                        // All GPUs share the driver: say it once and stop asking.
                        tracing::warn!("NVML cannot list NVLinks ({e}); reporting none");
                        nvlink_queries = false;
                    }
                }
            }
            positions.push((position, index));
            gpus.push(Gpu {
                index,
                uuid: device.uuid().map_err(|e| failed(&what("UUID"), e))?,
                model: device.name().map_err(|e| failed(&what("name"), e))?,
                memory_mib: device
                    .memory_info()
                    .map_err(|e| failed(&what("memory"), e))?
                    .total
                    / (1024 * 1024),
                pci_bus_id: bus_id,
                numa_node,
                nvlink: Vec::new(),
                links: Vec::new(),
            });
        }
        topology.common_ancestors = common_ancestors(&nvml, &positions);
        topology.apply(&mut gpus);
        gpus.sort_by_key(|g| g.index);
        Ok(gpus)
    }
}

/// The installed driver predates the function.
fn is_missing_function(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound
    )
}

/// `topology_common_ancestor` of every pair of GPUs, given as (position, index). A pair NVML
/// cannot answer is left out, so it counts as SYS; that costs placement quality, never the
/// node, and is logged once rather than per pair.
fn common_ancestors(nvml: &Nvml, positions: &[(u32, u32)]) -> BTreeMap<(u32, u32), TopologyLevel> {
    let mut levels = BTreeMap::new();
    let mut failures = Vec::new();
    for (i, &(position_a, a)) in positions.iter().enumerate() {
        for &(position_b, b) in &positions[i + 1..] {
            // The call consumes the other handle and `Device` is not `Clone`: fetch both anew.
            let answer = nvml.device_by_index(position_a).and_then(|device| {
                device.topology_common_ancestor(nvml.device_by_index(position_b)?)
            });
            match answer {
                Ok(level) => {
                    levels.insert((a, b), level);
                }
                // A missing function, or a platform where it is not supported: every other
                // pair would answer the same.
                Err(e) if is_missing_function(&e) || matches!(e, NvmlError::NotSupported) => {
                    tracing::warn!(
                        "NVML cannot tell how GPUs are connected over PCIe ({e}); \
                         every GPU pair counts as SYS"
                    );
                    return BTreeMap::new();
                }
                Err(e) => failures.push(format!("GPU {a}-{b}: {e}")),
            }
        }
    }
    if let Some(first) = failures.first() {
        tracing::warn!(
            "NVML could not tell the PCIe relation of {} GPU pair(s), which count as SYS \
             (first: {first})",
            failures.len()
        );
    }
    levels
}

/// The remote ends of a GPU's active NVLinks. A GPU without NVLink answers NotSupported and
/// one with fewer links than the maximum InvalidArg for the rest: both simply mean no link.
/// Only a driver without the NVLink functions is an error, so the caller can say so once.
fn active_links(nvml: &Nvml, device: &Device) -> Result<Vec<RemoteEndpoint>, NvmlError> {
    let mut remotes = Vec::new();
    for link in 0..MAX_NVLINKS {
        let wrapper = device.link_wrapper_for(link);
        match wrapper.is_active() {
            Ok(true) => {}
            Err(e) if is_missing_function(&e) => return Err(e),
            Ok(false) | Err(_) => continue,
        }
        match wrapper.remote_pci_info() {
            Ok(pci) => remotes.push(RemoteEndpoint {
                bus_id: pci.bus_id,
                kind: remote_device_type(nvml, device, link),
            }),
            Err(e) => tracing::debug!("NVLink {link}: no remote PCI info: {e}"),
        }
    }
    Ok(remotes)
}

/// What the link's far end is. nvml-wrapper 0.13's `NvLink::remote_device_type` hands NVML
/// a pointer to a temporary and so always answers `Unknown`; call the symbol directly.
fn remote_device_type(nvml: &Nvml, device: &Device, link: u32) -> LinkKind {
    let Ok(get_type) = nvml.lib().nvmlDeviceGetNvLinkRemoteDeviceType.as_ref() else {
        return LinkKind::Unknown; // the driver predates the call
    };
    let mut kind = NVLINK_DEVICE_TYPE_UNKNOWN;
    // SAFETY: the handle belongs to a live `Device` of this `Nvml`, and `kind` is a valid
    // out-pointer for the call's duration.
    let status = unsafe { get_type(device.handle(), link, &mut kind) };
    match (status, kind) {
        (0, NVLINK_DEVICE_TYPE_GPU) => LinkKind::Gpu,
        (0, NVLINK_DEVICE_TYPE_SWITCH) => LinkKind::Switch,
        _ => LinkKind::Unknown,
    }
}

fn sysfs_numa_node(bus_id: &str) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/sys/bus/pci/devices/{bus_id}/numa_node")).ok()?;
    text.trim().parse().ok().filter(|&node: &i32| node >= 0)
}
