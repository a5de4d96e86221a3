//! Device queries: count, handles, and each GPU's index, name, UUID, memory, PCI, NUMA and MIG.

use super::*;
use std::ffi::CStr;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Return {
    let mut state = lock();
    code(
        state
            .ready("nvmlDeviceGetCount_v2")
            .and_then(|()| put(count, state.machine.gpus.len() as c_uint)),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut Device,
) -> Return {
    let call = "nvmlDeviceGetHandleByIndex_v2";
    let mut state = lock();
    code(state.ready(call).and_then(|()| {
        let position = index as usize;
        if position >= state.machine.gpus.len() {
            return Err(INVALID_ARGUMENT);
        }
        state.check_gpu(call, position)?;
        let uuid = state.gpu(position).uuid.clone();
        put(device, state.handle(&uuid))
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut Device,
) -> Return {
    let call = "nvmlDeviceGetHandleByUUID";
    let mut state = lock();
    code(state.ready(call).and_then(|()| {
        if uuid.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: NVML's contract: a NUL-terminated string.
        let uuid = unsafe { CStr::from_ptr(uuid) }
            .to_str()
            .map_err(|_| INVALID_ARGUMENT)?
            .to_string();
        let position = state
            .machine
            .gpus
            .iter()
            .position(|g| g.uuid == uuid)
            .ok_or(NOT_FOUND)?;
        state.check_gpu(call, position)?;
        put(device, state.handle(&uuid))
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: Device, index: *mut c_uint) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetIndex", device)
            .and_then(|position| put(index, position as c_uint)),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: Device,
    name: *mut c_char,
    length: c_uint,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetName", device)
            .and_then(|position| put_str(&state.gpu(position).name, name, length)),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: Device,
    uuid: *mut c_char,
    length: c_uint,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetUUID", device)
            .and_then(|position| put_str(&state.gpu(position).uuid, uuid, length)),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: Device,
    memory: *mut MemoryV2,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetMemoryInfo_v2", device)
            .and_then(|position| {
                if memory.is_null() {
                    return Err(INVALID_ARGUMENT);
                }
                // SAFETY: non-null, and NVML's contract: the caller set the version field.
                if unsafe { (*memory).version } != MEMORY_V2 {
                    return Err(ARGUMENT_VERSION_MISMATCH);
                }
                let total = state.gpu(position).memory_mib * 1024 * 1024;
                put(
                    memory,
                    MemoryV2 {
                        version: MEMORY_V2,
                        total,
                        reserved: 0,
                        free: total,
                        used: 0,
                    },
                )
            }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: Device, pci: *mut PciInfo) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetPciInfo_v3", device)
            .and_then(|position| put(pci, pci_info(&state.gpu(position).pci_bus_id))),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(device: Device, node: *mut c_uint) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetNumaNodeId", device)
            .and_then(|position| put(node, state.gpu(position).numa_node.ok_or(NOT_SUPPORTED)?)),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: Device,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetMigMode", device)
            .and_then(|position| {
                let mode = c_uint::from(state.gpu(position).mig.ok_or(NOT_SUPPORTED)?);
                put(current, mode)?;
                put(pending, mode)
            }),
    )
}
