//! NVML's entry points, as `nvml.h` declares them, answered from the machine file.
//!
//! Device handles are small integers (1, 2, …) standing for the UUID they were handed out for,
//! so a handle stays valid while the file changes under it, and names a GPU that left the file
//! as lost. Event set handles are numbered the same way.

use crate::machine::{self, Machine, MockGpu, MACHINE_ENV, RETURN_CODES};
use std::ffi::{c_char, c_uint, c_ulonglong, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// `nvmlReturn_t`.
pub type Return = c_uint;
/// `nvmlDevice_t`: an opaque pointer.
pub type Device = *mut c_void;
/// `nvmlEventSet_t`: an opaque pointer.
pub type EventSet = *mut c_void;

const SUCCESS: Return = 0;
const UNINITIALIZED: Return = 1;
const INVALID_ARGUMENT: Return = 2;
const NOT_SUPPORTED: Return = 3;
const NOT_FOUND: Return = 6;
const INSUFFICIENT_SIZE: Return = 7;
const TIMEOUT: Return = 10;
const GPU_IS_LOST: Return = 15;
const ARGUMENT_VERSION_MISMATCH: Return = 25;
const UNKNOWN: Return = 999;

/// `NVML_NVLINK_MAX_LINKS`.
const MAX_NVLINKS: c_uint = 18;
/// `nvmlEventTypeXidCriticalError`: the only event type the mock supports.
const EVENT_XID: c_ulonglong = 8;
/// `nvmlIntNvLinkDeviceType_t`.
const NVLINK_DEVICE_GPU: c_uint = 0;
const NVLINK_DEVICE_SWITCH: c_uint = 2;
const NVLINK_DEVICE_UNKNOWN: c_uint = 255;
/// `nvmlMemoryErrorType_t` and `nvmlEccCounterType_t`.
const MEMORY_ERROR_CORRECTED: c_uint = 0;
const MEMORY_ERROR_UNCORRECTED: c_uint = 1;
const ECC_COUNTER_TYPES: c_uint = 2;

/// `nvmlPciInfo_t`.
#[repr(C)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2`: the version a caller of `nvmlDeviceGetMemoryInfo_v2` must set.
const MEMORY_V2: c_uint = (std::mem::size_of::<MemoryV2>() as c_uint) | (2 << 24);

/// `nvmlEventData_t`.
#[repr(C)]
pub struct EventData {
    pub device: Device,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// One GPU registered in an event set: its UUID, the events asked for, and how many of its
/// XIDs the set has delivered (or found already listed when it registered).
struct Registration {
    uuid: String,
    events: c_ulonglong,
    delivered: usize,
}

#[derive(Default)]
struct State {
    /// `nvmlInit` calls not yet matched by `nvmlShutdown`.
    initialized: u32,
    path: PathBuf,
    /// The file's text as last read (or why it could not be read); `None` before the first
    /// read of a session.
    text: Option<Result<String, String>>,
    machine: Machine,
    /// Why the current version of the file cannot be served.
    file_error: Option<String>,
    /// The UUID each handle stands for; handle `n` is entry `n - 1`.
    handles: Vec<String>,
    /// Event sets; set `n` is entry `n - 1`, `None` once freed.
    event_sets: Vec<Option<Vec<Registration>>>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

fn lock() -> MutexGuard<'static, State> {
    // Nothing panics while holding it; if something did, the state is still usable.
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The path of this library as it was loaded.
fn own_path() -> Option<PathBuf> {
    // SAFETY: dladdr only reads the address; `info` is a valid out-pointer, and the name it
    // fills in points into the loader's data, which lives as long as the library.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let here = own_path as *const c_void;
        if libc::dladdr(here, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let name = CStr::from_ptr(info.dli_fname).to_bytes();
        Some(PathBuf::from(OsStr::from_bytes(name)))
    }
}

impl State {
    /// Where the machine file is: `$YSCHED_MOCK_NVML`, else beside this library.
    fn locate(&mut self) -> Result<(), String> {
        self.path = match std::env::var_os(MACHINE_ENV) {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => machine::sidecar(&own_path().ok_or("cannot find the mock library's own path")?),
        };
        Ok(())
    }

    /// Reads the file, and takes the machine it describes when its text changed. Reading a
    /// small file at each call is cheap, and unlike its time stamps, its text cannot fail to
    /// show a change.
    fn refresh(&mut self) {
        let text = std::fs::read_to_string(&self.path).map_err(|e| e.to_string());
        if self.text.as_ref() == Some(&text) {
            return;
        }
        let parsed = text.clone().and_then(|text| Machine::parse(&text));
        self.text = Some(text);
        match parsed {
            Ok(machine) => {
                self.machine = machine;
                self.file_error = None;
            }
            Err(e) => {
                let message = format!(
                    "mock NVML: cannot serve the machine file {} (set {MACHINE_ENV}, or put it \
                     beside the library): {e}",
                    self.path.display()
                );
                eprintln!("{message}");
                self.file_error = Some(message);
            }
        }
    }

    /// The handle standing for `uuid`.
    fn handle(&mut self, uuid: &str) -> Device {
        let n = match self.handles.iter().position(|u| u == uuid) {
            Some(at) => at + 1,
            None => {
                self.handles.push(uuid.to_string());
                self.handles.len()
            }
        };
        n as Device
    }

    /// The position of the GPU a handle stands for.
    fn position(&self, device: Device) -> Result<usize, Return> {
        let uuid = (device as usize)
            .checked_sub(1)
            .and_then(|at| self.handles.get(at))
            .ok_or(INVALID_ARGUMENT)?;
        self.machine
            .gpus
            .iter()
            .position(|g| &g.uuid == uuid)
            .ok_or(GPU_IS_LOST)
    }

    fn gpu(&self, position: usize) -> &MockGpu {
        &self.machine.gpus[position]
    }

    /// Before any call: initialized, a file that parses, and no fault for the call.
    fn ready(&mut self, call: &str) -> Result<(), Return> {
        if self.initialized == 0 {
            return Err(UNINITIALIZED);
        }
        self.refresh();
        if self.file_error.is_some() {
            return Err(UNKNOWN);
        }
        match self.machine.fault(call, None) {
            Some(code) => Err(code),
            None => Ok(()),
        }
    }

    /// Before a call about a device: [`State::ready`], a handle to a GPU still there, no fault
    /// for it, and the GPU not lost. Its position.
    fn device(&mut self, call: &str, device: Device) -> Result<usize, Return> {
        self.ready(call)?;
        let position = self.position(device)?;
        self.check_gpu(call, position)?;
        Ok(position)
    }

    fn check_gpu(&self, call: &str, position: usize) -> Result<(), Return> {
        if let Some(code) = self.machine.fault(call, Some(position as u32)) {
            return Err(code);
        }
        if self.gpu(position).lost {
            return Err(GPU_IS_LOST);
        }
        Ok(())
    }
}

fn code(result: Result<(), Return>) -> Return {
    result.err().unwrap_or(SUCCESS)
}

/// Writes through an out-pointer the caller passed.
fn put<T>(out: *mut T, value: T) -> Result<(), Return> {
    if out.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: NVML's contract: a non-null out-pointer points to a writable T.
    unsafe { out.write(value) };
    Ok(())
}

/// Copies `text` and its terminating NUL into the caller's buffer of `length` bytes.
fn put_str(text: &str, buffer: *mut c_char, length: c_uint) -> Result<(), Return> {
    if buffer.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    if text.len() + 1 > length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller's buffer holds `length` bytes, and we write at most that many.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buffer, text.len());
        buffer.add(text.len()).write(0);
    }
    Ok(())
}

/// `text` in a fixed C char array, cut to fit with its NUL.
fn c_array<const N: usize>(text: &str) -> [c_char; N] {
    let mut out = [0; N];
    for (to, &byte) in out.iter_mut().zip(text.as_bytes().iter().take(N - 1)) {
        *to = byte as c_char;
    }
    out
}

fn pci_info(bus_id: &str) -> PciInfo {
    let (domain, bus, device, _) = machine::parse_bus_id(bus_id).unwrap_or_default();
    PciInfo {
        bus_id_legacy: c_array(&format!("{domain:04x}:{bus:02x}:{device:02x}.0")),
        domain,
        bus,
        device,
        pci_device_id: 0x20b2_10de,
        pci_sub_system_id: 0x1463_10de,
        bus_id: c_array(bus_id),
    }
}

fn init(call: &str) -> Return {
    let mut state = lock();
    if state.initialized == 0 {
        if let Err(e) = state.locate() {
            eprintln!("mock NVML: {e}");
            return UNKNOWN;
        }
        // Read the file afresh: a new session starts from what it says now.
        state.text = None;
        state.handles.clear();
        state.event_sets.clear();
    }
    state.refresh();
    if state.file_error.is_some() {
        return UNKNOWN;
    }
    if let Some(code) = state.machine.fault(call, None) {
        return code;
    }
    state.initialized += 1;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> Return {
    init("nvmlInit_v2")
}

#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Return {
    init("nvmlInitWithFlags")
}

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> Return {
    let mut state = lock();
    if state.initialized == 0 {
        return UNINITIALIZED;
    }
    state.initialized -= 1;
    if state.initialized == 0 {
        state.handles.clear();
        state.event_sets.clear();
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: Return) -> *const c_char {
    // NUL-terminated copies of RETURN_CODES' texts, made once and kept: callers hold on to them.
    static TEXTS: LazyLock<Vec<(Return, std::ffi::CString)>> = LazyLock::new(|| {
        RETURN_CODES
            .iter()
            .filter_map(|&(_, code, text)| Some((code, std::ffi::CString::new(text).ok()?)))
            .collect()
    });
    TEXTS
        .iter()
        .find(|(code, _)| *code == result)
        .or_else(|| TEXTS.iter().find(|(code, _)| *code == UNKNOWN))
        .map_or(std::ptr::null(), |(_, text)| text.as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> Return {
    let mut state = lock();
    code(state.ready("nvmlSystemGetDriverVersion").and_then(|()| {
        let text = state.machine.driver_version.clone();
        put_str(&text, version, length)
    }))
}

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

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: Device,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetTotalEccErrors", device)
            .and_then(|position| {
                let uncorrected = state.gpu(position).ecc_uncorrected.ok_or(NOT_SUPPORTED)?;
                if counter_type >= ECC_COUNTER_TYPES {
                    return Err(INVALID_ARGUMENT);
                }
                // Volatile and aggregate alike; corrected errors are not modelled.
                match error_type {
                    MEMORY_ERROR_UNCORRECTED => put(count, uncorrected),
                    MEMORY_ERROR_CORRECTED => put(count, 0),
                    _ => Err(INVALID_ARGUMENT),
                }
            }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: Device,
    is_pending: *mut c_uint,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetRetiredPagesPendingStatus", device)
            .and_then(|position| {
                let pending = state.gpu(position).retired_pages_pending;
                put(is_pending, c_uint::from(pending.ok_or(NOT_SUPPORTED)?))
            }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: Device,
    correctable: *mut c_uint,
    uncorrectable: *mut c_uint,
    is_pending: *mut c_uint,
    failure_occurred: *mut c_uint,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetRemappedRows", device)
            .and_then(|position| {
                let rows = state
                    .gpu(position)
                    .remapped_rows
                    .clone()
                    .ok_or(NOT_SUPPORTED)?;
                put(correctable, rows.correctable)?;
                put(uncorrectable, rows.uncorrectable)?;
                put(is_pending, c_uint::from(rows.pending))?;
                put(failure_occurred, c_uint::from(rows.failed))
            }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: Device,
    event_types: *mut c_ulonglong,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceGetSupportedEventTypes", device)
            .and_then(|_| put(event_types, EVENT_XID)),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut EventSet) -> Return {
    let mut state = lock();
    code(state.ready("nvmlEventSetCreate").and_then(|()| {
        state.event_sets.push(Some(Vec::new()));
        put(set, state.event_sets.len() as EventSet)
    }))
}

/// The live event set a handle stands for.
fn event_set(state: &mut State, set: EventSet) -> Result<&mut Vec<Registration>, Return> {
    (set as usize)
        .checked_sub(1)
        .and_then(|at| state.event_sets.get_mut(at))
        .and_then(Option::as_mut)
        .ok_or(INVALID_ARGUMENT)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: Device,
    event_types: c_ulonglong,
    set: EventSet,
) -> Return {
    let mut state = lock();
    code(
        state
            .device("nvmlDeviceRegisterEvents", device)
            .and_then(|position| {
                if event_types & !EVENT_XID != 0 {
                    return Err(NOT_SUPPORTED);
                }
                let gpu = state.gpu(position);
                let (uuid, listed) = (gpu.uuid.clone(), gpu.xid.len());
                let registrations = event_set(&mut state, set)?;
                registrations.retain(|r| r.uuid != uuid);
                registrations.push(Registration {
                    uuid,
                    events: event_types,
                    delivered: listed,
                });
                Ok(())
            }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: EventSet,
    data: *mut EventData,
    _timeout_ms: c_uint,
) -> Return {
    let mut state = lock();
    code(state.ready("nvmlEventSetWait_v2").and_then(|()| {
        let machine = state.machine.clone();
        let mut some_lost = false;
        let mut event = None;
        for registration in event_set(&mut state, set)?.iter_mut() {
            let Some(gpu) = machine.gpus.iter().find(|g| g.uuid == registration.uuid) else {
                some_lost = true;
                continue;
            };
            some_lost |= gpu.lost;
            // A shorter list is a new history: deliver what is added to it from now on.
            registration.delivered = registration.delivered.min(gpu.xid.len());
            if event.is_none() && registration.events & EVENT_XID != 0 && !gpu.lost {
                if let Some(&xid) = gpu.xid.get(registration.delivered) {
                    registration.delivered += 1;
                    event = Some((gpu.uuid.clone(), xid));
                }
            }
        }
        match event {
            Some((uuid, xid)) => {
                let device = state.handle(&uuid);
                put(
                    data,
                    EventData {
                        device,
                        event_type: EVENT_XID,
                        event_data: xid,
                        gpu_instance_id: c_uint::MAX,
                        compute_instance_id: c_uint::MAX,
                    },
                )
            }
            None if some_lost => Err(GPU_IS_LOST),
            None => Err(TIMEOUT),
        }
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: EventSet) -> Return {
    let mut state = lock();
    code(state.ready("nvmlEventSetFree").and_then(|()| {
        event_set(&mut state, set)?;
        state.event_sets[set as usize - 1] = None;
        Ok(())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_strings_and_calls_before_init() {
        // SAFETY: the strings are static and NUL-terminated; the out-pointer is valid.
        unsafe {
            let text = |code| CStr::from_ptr(nvmlErrorString(code)).to_str().unwrap();
            assert_eq!(text(GPU_IS_LOST), "GPU is lost");
            assert_eq!(text(NOT_SUPPORTED), "Not Supported");
            assert_eq!(text(12345), "Unknown Error");
            let mut count = 0;
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), UNINITIALIZED);
            assert_eq!(nvmlShutdown(), UNINITIALIZED);
        }
    }
}
