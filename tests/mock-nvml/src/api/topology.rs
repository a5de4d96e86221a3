//! Topology: each GPU's NVLinks and where they lead, and two GPUs' PCIe common ancestor.

use super::*;
use crate::machine::MockGpu;

/// The far end of an active NVLink of the GPU at `position`.
fn nvlink_remote(gpu: &MockGpu, link: c_uint) -> Result<Option<&str>, Return> {
    if gpu.nvlink.is_empty() {
        return Err(NOT_SUPPORTED);
    }
    match gpu.nvlink.get(link as usize) {
        Some(remote) if remote.is_empty() => Ok(None),
        Some(remote) => Ok(Some(remote)),
        // Past the GPU's links (or NVML's maximum): no such link.
        None => Err(INVALID_ARGUMENT),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: Device,
    link: c_uint,
    is_active: *mut c_uint,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetNvLinkState", device)
            .and_then(|position| {
                if link >= MAX_NVLINKS {
                    return Err(INVALID_ARGUMENT);
                }
                let active = nvlink_remote(state.gpu(position), link)?.is_some();
                put(is_active, c_uint::from(active))
            }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    device: Device,
    link: c_uint,
    pci: *mut PciInfo,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetNvLinkRemotePciInfo_v2", device)
            .and_then(|position| {
                let remote = nvlink_remote(state.gpu(position), link)?.ok_or(INVALID_ARGUMENT)?;
                put(pci, pci_info(remote))
            }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    device: Device,
    link: c_uint,
    kind: *mut c_uint,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetNvLinkRemoteDeviceType", device)
            .and_then(|position| {
                let remote = nvlink_remote(state.gpu(position), link)?.ok_or(INVALID_ARGUMENT)?;
                let machine = &state.machine;
                let is = |bus: &String| machine::same_bus_id(bus, remote);
                let remote_kind = if machine.gpus.iter().any(|g| is(&g.pci_bus_id)) {
                    NVLINK_DEVICE_GPU
                } else if machine.nvswitches.iter().any(is) {
                    NVLINK_DEVICE_SWITCH
                } else {
                    NVLINK_DEVICE_UNKNOWN
                };
                put(kind, remote_kind)
            }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    device1: Device,
    device2: Device,
    level: *mut c_uint,
) -> Return {
    let call = "nvmlDeviceGetTopologyCommonAncestor";
    let mut state = lock();
    code(state.device(call, device1).and_then(|a| {
        let b = state.position(device2)?;
        state.check_gpu(call, b)?;
        if a == b {
            return Err(INVALID_ARGUMENT);
        }
        put(level, state.machine.level(a as u32, b as u32))
    }))
}
