//! The NVML health monitor: faults that make a registered GPU unfit for jobs.
//!
//! It watches the registered GPUs (found by UUID), keeping NVML open between polls.
//!
//! Events, reported until [`GpuHealth::forget`]: a critical XID error (from an event set that
//! each poll drains without waiting), and uncorrectable ECC errors beyond the volatile count
//! seen at start or at the last `forget`. States, reported while they last: NVML no longer
//! finding the GPU or calling it lost, memory pages pending retirement, and row remapping
//! pending or failed (A100 and later). A GPU that does not support a check (a consumer GPU has
//! no ECC) simply is not checked for it.

use super::nvml::{is_missing_function, open, Opened};
use super::{GpuFault, GpuHealth, InventoryError};
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEventData_t, nvmlEventSet_t, nvmlEventTypeXidCriticalError,
};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};
use ysched_common::Gpu;

/// The most events one poll takes from the event set: a GPU flooding XIDs cannot hold the poll.
const MAX_EVENTS_PER_POLL: usize = 256;

/// How often the same trouble reading the same GPU is logged again.
const COMPLAIN_EVERY: Duration = Duration::from_secs(600);

/// XIDs that mean the GPU needs a reset or a reboot, or service, with what each means (from
/// NVIDIA's XID catalog). Every other XID is an application's error (13 graphics engine
/// exception, 31 memory page fault, 43 GPU stopped processing, 45 preemptive cleanup, …) or
/// informational, and is not a fault of the GPU.
const CRITICAL_XIDS: &[(u64, &str)] = &[
    (48, "double-bit ECC error"),
    (62, "internal micro-controller halt"),
    (63, "ECC page retirement or row remapping recording event"),
    (64, "ECC page retirement or row remapping recording failure"),
    (74, "NVLink error"),
    (79, "GPU has fallen off the bus"),
    (94, "contained ECC error"),
    (95, "uncontained ECC error"),
    (119, "GSP RPC timeout"),
    (120, "GSP error"),
    (140, "unrecovered ECC error"),
];

/// What a critical XID means; `None` for the others.
pub fn critical_xid(xid: u64) -> Option<&'static str> {
    CRITICAL_XIDS
        .iter()
        .find(|&&(critical, _)| critical == xid)
        .map(|&(_, meaning)| meaning)
}

/// A raw NVML handle, usable from any thread (NVML is thread-safe). Raw because nvml-wrapper's
/// `Device` and `EventSet` borrow the `Nvml` that this monitor owns alongside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Raw<T>(T);
// SAFETY: NVML handles are plain identifiers that NVML accepts from any thread.
unsafe impl<T> Send for Raw<T> {}

/// One registered GPU and what the monitor knows of it.
struct Watched {
    index: u32,
    uuid: String,
    /// The event fault seen since start or the last `forget`: the first one is kept.
    event: Option<String>,
    /// The volatile uncorrectable ECC count at start or at the last `forget`; `None` until
    /// read.
    ecc_baseline: Option<u64>,
    /// The handle registered for XID events, which their data names.
    handle: Option<Raw<nvmlDevice_t>>,
}

pub struct NvmlHealth {
    gpus: Vec<Watched>,
    /// The XID event set; `None` when NVML could not make one.
    events: Option<Raw<nvmlEventSet_t>>,
    /// When each (GPU, call) trouble was last logged.
    complaints: HashMap<(u32, &'static str), Instant>,
    // Last: dropped after `Drop::drop` has freed the event set with it.
    nvml: Box<Nvml>,
}

/// A GPU's state fault, as opposed to a read that failed.
enum Check<T> {
    Value(T),
    /// The GPU or the driver does not offer this check.
    Unsupported,
    Lost,
    Failed(NvmlError),
}

fn check<T>(result: Result<T, NvmlError>) -> Check<T> {
    match result {
        Ok(value) => Check::Value(value),
        Err(NvmlError::NotSupported) => Check::Unsupported,
        Err(e) if is_missing_function(&e) => Check::Unsupported,
        Err(NvmlError::GpuLost) => Check::Lost,
        Err(e) => Check::Failed(e),
    }
}

impl NvmlHealth {
    /// Opens NVML from `library` (default: the driver's) and starts watching `gpus`, the GPUs
    /// this node registered, matched by UUID. A GPU NVML cannot find is reported at the first
    /// poll.
    pub fn new(library: Option<&Path>, gpus: &[Gpu]) -> Result<NvmlHealth, InventoryError> {
        let nvml = match open(library)? {
            Opened::Nvml(nvml) => nvml,
            Opened::NoDriver(why) => {
                return Err(InventoryError::Nvml(format!(
                    "cannot watch GPU health: NVML unavailable: {why}"
                )))
            }
        };
        let mut health = NvmlHealth {
            gpus: gpus
                .iter()
                .map(|gpu| Watched {
                    index: gpu.index,
                    uuid: gpu.uuid.clone(),
                    event: None,
                    ecc_baseline: None,
                    handle: None,
                })
                .collect(),
            events: None,
            complaints: HashMap::new(),
            nvml,
        };
        for at in 0..health.gpus.len() {
            health.gpus[at].ecc_baseline = health.ecc_count(at);
        }
        health.watch_xids();
        Ok(health)
    }

    /// Makes the XID event set and registers every GPU in it. A GPU that does not support XID
    /// events is watched for the rest.
    fn watch_xids(&mut self) {
        let set = match create_event_set(&self.nvml) {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!("NVML cannot watch for XID errors (nvmlEventSetCreate: {e})");
                return;
            }
        };
        self.events = Some(Raw(set));
        let Ok(register) = nvml_sym(self.nvml.lib().nvmlDeviceRegisterEvents.as_ref()) else {
            tracing::warn!("NVML cannot watch for XID errors: no nvmlDeviceRegisterEvents");
            return;
        };
        for gpu in &mut self.gpus {
            let Ok(device) = self.nvml.device_by_uuid(gpu.uuid.as_str()) else {
                continue; // the first poll reports it
            };
            // SAFETY: a live handle and event set of this `Nvml`.
            let status = unsafe {
                let handle = device.handle();
                let status = register(handle, nvmlEventTypeXidCriticalError.into(), set);
                if status == 0 {
                    gpu.handle = Some(Raw(handle));
                }
                status
            };
            match check(nvml_try(status)) {
                Check::Value(()) => {}
                Check::Unsupported => tracing::info!(
                    "GPU {}: no XID events (not supported); its other checks go on",
                    gpu.index
                ),
                Check::Lost => {} // the first poll reports it
                Check::Failed(e) => tracing::warn!(
                    "GPU {}: cannot watch for XID errors (nvmlDeviceRegisterEvents: {e})",
                    gpu.index
                ),
            }
        }
    }

    /// Takes every pending event from the set, without waiting.
    fn drain_events(&mut self) {
        let Some(Raw(set)) = self.events else {
            return;
        };
        let Ok(&wait) = nvml_sym(self.nvml.lib().nvmlEventSetWait_v2.as_ref()) else {
            return;
        };
        for _ in 0..MAX_EVENTS_PER_POLL {
            // SAFETY: an all-zero nvmlEventData_t is valid (a null handle, numbers).
            let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
            // SAFETY: a live event set of this `Nvml`, and a valid out-pointer.
            match nvml_try(unsafe { wait(set, &mut data, 0) }) {
                Ok(()) => self.on_event(&data),
                Err(NvmlError::Timeout) => return,
                // Some GPU of the set is lost; the checks by UUID find which.
                Err(NvmlError::GpuLost) => return,
                Err(e) => {
                    self.complain(u32::MAX, "nvmlEventSetWait_v2", &e);
                    return;
                }
            }
        }
    }

    fn on_event(&mut self, data: &nvmlEventData_t) {
        if data.eventType & u64::from(nvmlEventTypeXidCriticalError) == 0 {
            return;
        }
        let xid = data.eventData;
        let Some(gpu) = self
            .gpus
            .iter_mut()
            .find(|g| g.handle == Some(Raw(data.device)))
        else {
            return;
        };
        match critical_xid(xid) {
            Some(meaning) => {
                tracing::warn!("GPU {} ({}): XID {xid}: {meaning}", gpu.index, gpu.uuid);
                gpu.event
                    .get_or_insert_with(|| format!("XID {xid}: {meaning}"));
            }
            None => tracing::info!(
                "GPU {}: XID {xid}, an application's error, not a fault of the GPU",
                gpu.index
            ),
        }
    }

    /// The GPU's volatile uncorrectable ECC count, when it can be read.
    fn ecc_count(&mut self, at: usize) -> Option<u64> {
        let device = self.nvml.device_by_uuid(self.gpus[at].uuid.as_str()).ok()?;
        device
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .ok()
    }

    /// The GPU's fault now, if any; updates its event fault.
    fn examine(&mut self, at: usize) -> Option<String> {
        let (index, uuid) = (self.gpus[at].index, self.gpus[at].uuid.clone());
        let lost = || {
            Some(format!(
                "NVML reports GPU {uuid} lost (off the bus or inaccessible)"
            ))
        };
        let device = match self.nvml.device_by_uuid(uuid.as_str()) {
            Ok(device) => device,
            Err(NvmlError::NotFound) => return Some(format!("NVML no longer sees GPU {uuid}")),
            Err(NvmlError::GpuLost) => return lost(),
            Err(e) => {
                let e = e.to_string();
                self.complain(index, "nvmlDeviceGetHandleByUUID", &e);
                return self.gpus[at].event.clone();
            }
        };
        let mut states = Vec::new();
        let mut troubles = Vec::new();

        match check(device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)) {
            Check::Value(count) => {
                let gpu = &mut self.gpus[at];
                match gpu.ecc_baseline {
                    Some(base) if count > base => {
                        let new = count - base;
                        let plural = if new == 1 { "" } else { "s" };
                        gpu.event.get_or_insert_with(|| {
                            format!("{new} uncorrectable ECC error{plural}")
                        });
                    }
                    // A lower count: the driver reloaded or the GPU was reset, clearing it.
                    _ => gpu.ecc_baseline = Some(count),
                }
            }
            Check::Unsupported => {}
            Check::Lost => return lost(),
            Check::Failed(e) => troubles.push(("nvmlDeviceGetTotalEccErrors", e)),
        }
        match check(device.are_pages_pending_retired()) {
            Check::Value(true) => {
                states.push("memory pages pending retirement (a GPU reset retires them)".into())
            }
            Check::Value(false) | Check::Unsupported => {}
            Check::Lost => return lost(),
            Check::Failed(e) => troubles.push(("nvmlDeviceGetRetiredPagesPendingStatus", e)),
        }
        match check(remapped_rows(&self.nvml, &device)) {
            Check::Value(rows) if rows.failed => {
                states.push("row remapping failed (the GPU needs service)".into())
            }
            Check::Value(rows) if rows.pending => {
                states.push("row remapping pending (a GPU reset applies it)".into())
            }
            Check::Value(_) | Check::Unsupported => {}
            Check::Lost => return lost(),
            Check::Failed(e) => troubles.push(("nvmlDeviceGetRemappedRows", e)),
        }
        for (call, e) in troubles {
            self.complain(index, call, &e);
        }
        // An event first: it is what an administrator must acknowledge.
        self.gpus[at].event.clone().or(states.into_iter().next())
    }

    /// Logs trouble reading a GPU (`u32::MAX`: the event set), at most every
    /// [`COMPLAIN_EVERY`] for the same GPU and call.
    fn complain(&mut self, index: u32, call: &'static str, error: &dyn std::fmt::Display) {
        let now = Instant::now();
        let due = self
            .complaints
            .get(&(index, call))
            .is_none_or(|last| now.duration_since(*last) >= COMPLAIN_EVERY);
        if due {
            self.complaints.insert((index, call), now);
            let what = if index == u32::MAX {
                "GPU health".to_string()
            } else {
                format!("GPU {index}")
            };
            tracing::warn!("{what}: {call}: {error}; not counted as a fault");
        }
    }
}

impl GpuHealth for NvmlHealth {
    fn poll(&mut self) -> Vec<GpuFault> {
        self.drain_events();
        (0..self.gpus.len())
            .filter_map(|at| {
                let reason = self.examine(at)?;
                Some(GpuFault {
                    index: self.gpus[at].index,
                    reason,
                })
            })
            .collect()
    }

    fn forget(&mut self, index: u32) {
        let Some(at) = self.gpus.iter().position(|g| g.index == index) else {
            return;
        };
        self.gpus[at].event = None;
        // From now on, only errors beyond today's count are new (read again at the next poll
        // when it cannot be read now).
        self.gpus[at].ecc_baseline = self.ecc_count(at);
    }
}

impl Drop for NvmlHealth {
    fn drop(&mut self) {
        if let (Some(Raw(set)), Ok(free)) = (
            self.events.take(),
            nvml_sym(self.nvml.lib().nvmlEventSetFree.as_ref()),
        ) {
            // SAFETY: a live event set of this `Nvml`, freed once.
            unsafe { free(set) };
        }
    }
}

fn create_event_set(nvml: &Nvml) -> Result<nvmlEventSet_t, NvmlError> {
    let create = nvml_sym(nvml.lib().nvmlEventSetCreate.as_ref())?;
    let mut set: nvmlEventSet_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    nvml_try(unsafe { create(&mut set) })?;
    Ok(set)
}

struct RemappedRows {
    pending: bool,
    failed: bool,
}

/// `nvmlDeviceGetRemappedRows`, which nvml-wrapper 0.13 does not wrap.
fn remapped_rows(nvml: &Nvml, device: &Device) -> Result<RemappedRows, NvmlError> {
    let get = nvml_sym(nvml.lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut correctable, mut uncorrectable, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: a live handle of this `Nvml`, and valid out-pointers.
    nvml_try(unsafe {
        get(
            device.handle(),
            &mut correctable,
            &mut uncorrectable,
            &mut pending,
            &mut failed,
        )
    })?;
    Ok(RemappedRows {
        pending: pending != 0,
        failed: failed != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critical_xids_are_named_and_application_xids_are_not() {
        assert_eq!(critical_xid(79), Some("GPU has fallen off the bus"));
        assert_eq!(critical_xid(48), Some("double-bit ECC error"));
        for application in [13, 31, 43, 45, 999] {
            assert_eq!(critical_xid(application), None, "XID {application}");
        }
    }
}
