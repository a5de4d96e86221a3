//! NVML's entry points, as `nvml.h` declares them, answered from the machine file.
//!
//! Device handles are small integers (1, 2, …) standing for the UUID they were handed out for,
//! so a handle stays valid while the file changes under it, and names a GPU that left the file
//! as lost. Event set handles are numbered the same way.

mod device;
mod events;
mod health;
mod session;
mod state;
mod topology;

pub use device::*;
pub use events::*;
pub use health::*;
pub use session::*;
pub use topology::*;

use crate::machine;
use state::{lock, Registration, State};
use std::ffi::{c_char, c_uint, c_ulonglong, c_void};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

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
