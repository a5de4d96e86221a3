//! XID events: event sets created, GPUs registered in them, waited on and freed.

use super::*;

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
