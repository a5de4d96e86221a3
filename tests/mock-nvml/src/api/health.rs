//! Memory health: ECC error counts, retired pages pending and remapped rows.

use super::*;

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
