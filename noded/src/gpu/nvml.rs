//! The NVML backend: asks the NVIDIA driver through nvml-wrapper.

use super::topology::{normalize_bus_id, nvlink_peers, LinkKind, RemoteEndpoint};
use super::{GpuInventory, InventoryError};
use nvml_wrapper::{Device, Nvml};
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
        let failed = |what: &str, e: nvml_wrapper::error::NvmlError| {
            InventoryError::Nvml(format!("{what}: {e}"))
        };
        let count = nvml.device_count().map_err(|e| failed("device count", e))?;
        let mut gpus = Vec::new();
        let mut links = Vec::new();
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
            links.extend(active_links(&nvml, &device).into_iter().map(|l| (index, l)));
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

        let bus_ids: Vec<(u32, String)> = gpus
            .iter()
            .map(|g| (g.index, g.pci_bus_id.clone()))
            .collect();
        let mut peers = nvlink_peers(&bus_ids, &links);
        for gpu in &mut gpus {
            gpu.nvlink = peers.remove(&gpu.index).unwrap_or_default();
        }
        gpus.sort_by_key(|g| g.index);
        Ok(gpus)
    }
}

/// The remote ends of a GPU's active NVLinks. A GPU without NVLink answers NotSupported,
/// which simply means no links.
fn active_links(nvml: &Nvml, device: &Device) -> Vec<RemoteEndpoint> {
    let mut remotes = Vec::new();
    for link in 0..MAX_NVLINKS {
        let wrapper = device.link_wrapper_for(link);
        if !wrapper.is_active().unwrap_or(false) {
            continue;
        }
        match wrapper.remote_pci_info() {
            Ok(pci) => remotes.push(RemoteEndpoint {
                bus_id: pci.bus_id,
                kind: remote_device_type(nvml, device, link),
            }),
            Err(e) => tracing::debug!("NVLink {link}: no remote PCI info: {e}"),
        }
    }
    remotes
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
