//! Session calls: `nvmlInit`, `nvmlShutdown`, error strings and the driver version.

use super::*;
use crate::machine::RETURN_CODES;
use std::sync::LazyLock;

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
