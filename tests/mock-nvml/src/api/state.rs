//! The library's state behind one lock: the machine file as last read, handles and event sets.

use super::{Device, Return, GPU_IS_LOST, INVALID_ARGUMENT, UNINITIALIZED, UNKNOWN};
use crate::machine::{self, Machine, MockGpu, MACHINE_ENV};
use std::ffi::{c_ulonglong, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// One GPU registered in an event set: its UUID, the events asked for, and how many of its
/// XIDs the set has delivered (or found already listed when it registered).
pub(super) struct Registration {
    pub(super) uuid: String,
    pub(super) events: c_ulonglong,
    pub(super) delivered: usize,
}

#[derive(Default)]
pub(super) struct State {
    /// `nvmlInit` calls not yet matched by `nvmlShutdown`.
    pub(super) initialized: u32,
    pub(super) path: PathBuf,
    /// The file's text as last read (or why it could not be read); `None` before the first
    /// read of a session.
    pub(super) text: Option<Result<String, String>>,
    pub(super) machine: Machine,
    /// Why the current version of the file cannot be served.
    pub(super) file_error: Option<String>,
    /// The UUID each handle stands for; handle `n` is entry `n - 1`.
    pub(super) handles: Vec<String>,
    /// Event sets; set `n` is entry `n - 1`, `None` once freed.
    pub(super) event_sets: Vec<Option<Vec<Registration>>>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

pub(super) fn lock() -> MutexGuard<'static, State> {
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
    pub(super) fn locate(&mut self) -> Result<(), String> {
        self.path = match std::env::var_os(MACHINE_ENV) {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => machine::sidecar(&own_path().ok_or("cannot find the mock library's own path")?),
        };
        Ok(())
    }

    /// Reads the file, and takes the machine it describes when its text changed. Reading a
    /// small file at each call is cheap, and unlike its time stamps, its text cannot fail to
    /// show a change.
    pub(super) fn refresh(&mut self) {
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
    pub(super) fn handle(&mut self, uuid: &str) -> Device {
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
    pub(super) fn position(&self, device: Device) -> Result<usize, Return> {
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

    pub(super) fn gpu(&self, position: usize) -> &MockGpu {
        &self.machine.gpus[position]
    }

    /// Before any call: initialized, a file that parses, and no fault for the call.
    pub(super) fn ready(&mut self, call: &str) -> Result<(), Return> {
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
    pub(super) fn device(&mut self, call: &str, device: Device) -> Result<usize, Return> {
        self.ready(call)?;
        let position = self.position(device)?;
        self.check_gpu(call, position)?;
        Ok(position)
    }

    pub(super) fn check_gpu(&self, call: &str, position: usize) -> Result<(), Return> {
        if let Some(code) = self.machine.fault(call, Some(position as u32)) {
            return Err(code);
        }
        if self.gpu(position).lost {
            return Err(GPU_IS_LOST);
        }
        Ok(())
    }
}
