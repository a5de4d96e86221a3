//! The NVML backend: asks the NVIDIA driver through nvml-wrapper.
//!
//! A fault costs the smallest thing it can. NVML that cannot start, or cannot count its GPUs,
//! fails the inventory (there is nothing to offer). A GPU that NVML cannot open or describe
//! (handle, UUID, name, memory, PCI info, MIG mode) is left out, with the call and error as
//! the reason, and the others are offered. What only refines placement costs placement
//! quality: an unknown NUMA node comes from sysfs or stays unknown, a GPU whose NVLinks cannot
//! be read counts none of its own (its peers' reports of links to it still count), and a pair
//! whose PCIe relation cannot be read counts as SYS.

use super::topology::{normalize_bus_id, LinkKind, NvmlTopology, RemoteEndpoint};
use super::{Detected, ExcludedGpu, GpuInventory, InventoryError};
use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use ysched_common::Gpu;

/// NVML's `NVML_NVLINK_MAX_LINKS` (not re-exported by nvml-wrapper).
const MAX_NVLINKS: u32 = 18;

/// Values of NVML's `nvmlIntNvLinkDeviceType_t`.
const NVLINK_DEVICE_TYPE_GPU: u32 = 0;
const NVLINK_DEVICE_TYPE_SWITCH: u32 = 2;
const NVLINK_DEVICE_TYPE_UNKNOWN: u32 = 255;

/// The library nvml-wrapper loads when given none: the driver's, found by the loader.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

pub struct NvmlInventory {
    /// The NVML library to load; `None`: [`DEFAULT_LIBRARY`].
    library: Option<PathBuf>,
}

impl NvmlInventory {
    pub fn new(library: Option<&Path>) -> NvmlInventory {
        NvmlInventory {
            library: library.map(Path::to_path_buf),
        }
    }
}

impl GpuInventory for NvmlInventory {
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError> {
        Ok(self.detect()?.gpus)
    }

    /// Without the driver (no `libnvidia-ml.so.1`, or its kernel module not loaded) the host
    /// has no GPUs: logged, not an error.
    fn detect(&self) -> Result<Detected, InventoryError> {
        match open(self.library.as_deref())? {
            Opened::Nvml(nvml) => scan(&nvml),
            Opened::NoDriver(why) => {
                tracing::warn!("NVML unavailable, reporting no GPUs: {why}");
                Ok(Detected::default())
            }
        }
    }
}

/// NVML, or why there is none.
pub(super) enum Opened {
    /// Boxed: nvml-wrapper's `Nvml` holds every NVML function pointer (about 12 KB).
    Nvml(Box<Nvml>),
    /// No NVIDIA driver here: the default library is not installed, or the kernel driver is
    /// not loaded. A host without GPUs is not to be blamed for it.
    NoDriver(String),
}

/// Loads and initialises NVML from `library`, else from [`DEFAULT_LIBRARY`]. A library that
/// was named but cannot be loaded is [`InventoryError::Library`]; any other failure to start
/// is [`InventoryError::Nvml`], naming the call.
pub(super) fn open(library: Option<&Path>) -> Result<Opened, InventoryError> {
    let started = match library {
        Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
        None => Nvml::init(),
    };
    let named = || library.map_or(DEFAULT_LIBRARY.into(), |p| p.display().to_string());
    match started {
        Ok(nvml) => Ok(Opened::Nvml(Box::new(nvml))),
        Err(NvmlError::LibloadingError(e)) => match library {
            Some(path) => Err(InventoryError::Library {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
            None => Ok(Opened::NoDriver(e.to_string())),
        },
        Err(NvmlError::DriverNotLoaded) => Ok(Opened::NoDriver(format!(
            "{} says the NVIDIA driver is not loaded",
            named()
        ))),
        Err(e) => Err(InventoryError::Nvml(format!(
            "cannot start NVML ({}): nvmlInit_v2: {e}",
            named()
        ))),
    }
}

/// Every GPU NVML lists, described, or left out with the reason.
fn scan(nvml: &Nvml) -> Result<Detected, InventoryError> {
    let count = nvml.device_count().map_err(|e| {
        InventoryError::Nvml(format!(
            "NVML cannot count the GPUs: nvmlDeviceGetCount_v2: {e}"
        ))
    })?;
    let mut detected = Detected::default();
    // (NVML's enumeration position, the GPU's index): handles are fetched by position.
    let mut positions = Vec::new();
    let mut topology = NvmlTopology::default();
    let mut nvlink_queries = true;
    for position in 0..count {
        let device = match nvml.device_by_index(position) {
            Ok(device) => device,
            Err(e) => {
                detected.excluded.push(ExcludedGpu {
                    index: position,
                    uuid: String::new(),
                    reason: format!("NVML cannot open it: nvmlDeviceGetHandleByIndex_v2: {e}"),
                    fault: true,
                });
                continue;
            }
        };
        let index = device.index().unwrap_or(position);
        let gpu = match describe(&device, index) {
            Ok(gpu) => gpu,
            Err(excluded) => {
                detected.excluded.push(excluded);
                continue;
            }
        };
        if nvlink_queries {
            match active_links(nvml, &device) {
                Ok(links) => topology
                    .nvlinks
                    .extend(links.into_iter().map(|l| (index, l))),
                Err(NvlinkTrouble::Missing(e)) => {
                    // All GPUs share the driver: say it once and stop asking.
                    tracing::warn!("NVML cannot list NVLinks ({e}); reporting none");
                    nvlink_queries = false;
                }
                Err(NvlinkTrouble::Failed { call, link, error }) => tracing::warn!(
                    "GPU {index}: {call} (link {link}): {error}; its own NVLinks are not \
                     counted (its peers' reports of links to it still are)"
                ),
            }
        }
        positions.push((position, index));
        detected.gpus.push(gpu);
    }
    topology.common_ancestors = common_ancestors(nvml, &positions);
    topology.apply(&mut detected.gpus);
    detected.gpus.sort_by_key(|g| g.index);
    detected.excluded.sort_by_key(|g| g.index);
    Ok(detected)
}

/// A GPU's own attributes (its links are filled in later), or why it is not offered.
fn describe(device: &Device, index: u32) -> Result<Gpu, ExcludedGpu> {
    let left_out = |uuid: &str, reason: String, fault: bool| ExcludedGpu {
        index,
        uuid: uuid.to_string(),
        reason,
        fault,
    };
    let unreadable =
        |what: &str, call: &str, e: NvmlError| format!("NVML cannot read its {what}: {call}: {e}");
    let uuid = device
        .uuid()
        .map_err(|e| left_out("", unreadable("UUID", "nvmlDeviceGetUUID", e), true))?;
    let model = device
        .name()
        .map_err(|e| left_out(&uuid, unreadable("name", "nvmlDeviceGetName", e), true))?;
    let memory = device.memory_info().map_err(|e| {
        left_out(
            &uuid,
            unreadable("memory", "nvmlDeviceGetMemoryInfo_v2", e),
            true,
        )
    })?;
    let pci = device.pci_info().map_err(|e| {
        left_out(
            &uuid,
            unreadable("PCI info", "nvmlDeviceGetPciInfo_v3", e),
            true,
        )
    })?;
    match device.mig_mode() {
        Ok(mode) if mode.current != 0 => {
            return Err(left_out(
                &uuid,
                format!(
                    "MIG mode is enabled, and ysched schedules whole GPUs; disable it with \
                     `nvidia-smi -i {index} -mig 0` (it takes effect at the GPU's next reset) \
                     to offer this GPU"
                ),
                false,
            ))
        }
        Ok(mode) if mode.pending != 0 => tracing::warn!(
            "GPU {index} ({uuid}) has MIG mode pending: it is offered now, but will not be \
             once a reset enables MIG"
        ),
        Ok(_) => {}
        // A GPU without MIG, or a driver that predates it.
        Err(e) if is_missing_function(&e) || matches!(e, NvmlError::NotSupported) => {}
        // Offering a GPU whose MIG mode is unknown could hand jobs a GPU they cannot use.
        Err(e) => {
            return Err(left_out(
                &uuid,
                unreadable("MIG mode", "nvmlDeviceGetMigMode", e),
                true,
            ))
        }
    }
    let bus_id = normalize_bus_id(&pci.bus_id);
    let numa_node = match device.numa_node_id() {
        Ok(node) => i32::try_from(node).ok(),
        Err(e) => {
            // Older drivers lack nvmlDeviceGetNumaNodeId, and some platforms do not support
            // it; sysfs knows too.
            if !is_missing_function(&e) && !matches!(e, NvmlError::NotSupported) {
                tracing::warn!(
                    "GPU {index}: nvmlDeviceGetNumaNodeId: {e}; taking its NUMA node from sysfs"
                );
            }
            sysfs_numa_node(&bus_id)
        }
    };
    Ok(Gpu {
        index,
        uuid,
        model,
        memory_mib: memory.total / (1024 * 1024),
        pci_bus_id: bus_id,
        numa_node,
        nvlink: Vec::new(),
        links: Vec::new(),
    })
}

/// The installed driver predates the function.
pub(super) fn is_missing_function(e: &NvmlError) -> bool {
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
             (first: {first}; nvmlDeviceGetTopologyCommonAncestor)",
            failures.len()
        );
    }
    levels
}

/// Why a GPU's NVLinks could not be listed.
enum NvlinkTrouble {
    /// The driver lacks the NVLink functions: every GPU would answer the same.
    Missing(NvmlError),
    /// This GPU's answer was an error.
    Failed {
        call: &'static str,
        link: u32,
        error: NvmlError,
    },
}

/// The remote ends of a GPU's active NVLinks. A GPU without NVLink answers NotSupported and
/// one with fewer links than the maximum InvalidArg for the rest: both simply mean no link.
fn active_links(nvml: &Nvml, device: &Device) -> Result<Vec<RemoteEndpoint>, NvlinkTrouble> {
    let trouble = |call, link, error: NvmlError| {
        if is_missing_function(&error) {
            NvlinkTrouble::Missing(error)
        } else {
            NvlinkTrouble::Failed { call, link, error }
        }
    };
    let mut remotes = Vec::new();
    for link in 0..MAX_NVLINKS {
        let wrapper = device.link_wrapper_for(link);
        match wrapper.is_active() {
            Ok(true) => {}
            Ok(false) | Err(NvmlError::NotSupported | NvmlError::InvalidArg) => continue,
            Err(e) => return Err(trouble("nvmlDeviceGetNvLinkState", link, e)),
        }
        let pci = wrapper
            .remote_pci_info()
            .map_err(|e| trouble("nvmlDeviceGetNvLinkRemotePciInfo_v2", link, e))?;
        remotes.push(RemoteEndpoint {
            bus_id: pci.bus_id,
            kind: remote_device_type(nvml, device, link),
        });
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
