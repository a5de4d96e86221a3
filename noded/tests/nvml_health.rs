//! The NVML health monitor against the mock NVML library: each test loads its own copy of the
//! library (a library of its own, with its own state) serving a machine file that the test
//! rewrites to inject faults into the running machine.

use std::path::PathBuf;
use ysched_common::Gpu;
use ysched_mock_nvml::machine::{self, Machine, RemappedRows};
use ysched_noded::gpu::{nvml_health, GpuFault, GpuHealth};

struct Rig {
    _dir: tempfile::TempDir,
    library: PathBuf,
    machine: Machine,
}

impl Rig {
    fn new(machine: Machine) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let library = machine::install(dir.path(), &machine);
        Rig {
            _dir: dir,
            library,
            machine,
        }
    }

    /// Changes the running machine.
    fn change(&mut self, edit: impl FnOnce(&mut Machine)) {
        edit(&mut self.machine);
        self.machine
            .write(&machine::sidecar(&self.library))
            .unwrap();
    }

    /// A monitor of every GPU of the machine as it is now, registered under its position.
    fn monitor(&self) -> Box<dyn GpuHealth> {
        let gpus: Vec<Gpu> = (0..self.machine.gpus.len())
            .map(|i| registered(i as u32, &self.machine.gpus[i].uuid))
            .collect();
        nvml_health(Some(&self.library), &gpus).unwrap()
    }
}

fn registered(index: u32, uuid: &str) -> Gpu {
    Gpu {
        index,
        uuid: uuid.into(),
        ..Default::default()
    }
}

fn fault(index: u32, reason: &str) -> GpuFault {
    GpuFault {
        index,
        reason: reason.into(),
    }
}

fn four_a100s() -> Machine {
    Machine::islands("NVIDIA A100-SXM4-80GB", 4, 4, 2)
}

#[test]
fn healthy_gpus_report_nothing() {
    let rig = Rig::new(four_a100s());
    let mut health = rig.monitor();
    assert_eq!(health.poll(), []);
    assert_eq!(health.poll(), []);
}

/// Errors counted before the monitor started are history; new ones are a fault until an
/// administrator returns the GPU, and only errors after that count again.
#[test]
fn new_uncorrectable_ecc_errors_are_a_fault_until_forgotten() {
    let mut rig = Rig::new(four_a100s());
    rig.change(|m| m.gpus[1].ecc_uncorrected = Some(3));
    let mut health = rig.monitor();
    assert_eq!(health.poll(), []);
    rig.change(|m| m.gpus[1].ecc_uncorrected = Some(5));
    assert_eq!(health.poll(), [fault(1, "2 uncorrectable ECC errors")]);
    assert_eq!(health.poll(), [fault(1, "2 uncorrectable ECC errors")]);
    health.forget(1);
    assert_eq!(health.poll(), []);
    rig.change(|m| m.gpus[1].ecc_uncorrected = Some(6));
    assert_eq!(health.poll(), [fault(1, "1 uncorrectable ECC error")]);
    // Forgetting another GPU changes nothing for this one.
    health.forget(0);
    assert_eq!(health.poll(), [fault(1, "1 uncorrectable ECC error")]);
}

/// A reset (or a driver reload) clears the volatile count: errors after it are counted from
/// the lower count, not hidden below the old one.
#[test]
fn ecc_counts_after_a_reset_count_from_zero() {
    let mut rig = Rig::new(four_a100s());
    rig.change(|m| m.gpus[2].ecc_uncorrected = Some(4));
    let mut health = rig.monitor();
    rig.change(|m| m.gpus[2].ecc_uncorrected = Some(0));
    assert_eq!(health.poll(), []);
    rig.change(|m| m.gpus[2].ecc_uncorrected = Some(1));
    assert_eq!(health.poll(), [fault(2, "1 uncorrectable ECC error")]);
}

/// States are faults while they last, whatever `forget` says.
#[test]
fn pending_retirement_and_row_remapping_last_while_they_last() {
    let mut rig = Rig::new(four_a100s());
    let mut health = rig.monitor();
    rig.change(|m| m.gpus[0].retired_pages_pending = Some(true));
    let retirement = "memory pages pending retirement (a GPU reset retires them)";
    assert_eq!(health.poll(), [fault(0, retirement)]);
    health.forget(0);
    assert_eq!(health.poll(), [fault(0, retirement)]);
    rig.change(|m| {
        m.gpus[0].retired_pages_pending = Some(false);
        m.gpus[3].remapped_rows = Some(RemappedRows {
            pending: true,
            ..Default::default()
        });
    });
    assert_eq!(
        health.poll(),
        [fault(3, "row remapping pending (a GPU reset applies it)")]
    );
    rig.change(|m| {
        m.gpus[3].remapped_rows = Some(RemappedRows {
            uncorrectable: 1,
            failed: true,
            ..Default::default()
        })
    });
    assert_eq!(
        health.poll(),
        [fault(3, "row remapping failed (the GPU needs service)")]
    );
    rig.change(|m| m.gpus[3].remapped_rows = Some(RemappedRows::default()));
    assert_eq!(health.poll(), []);
}

/// Critical XIDs are faults until forgotten, each delivered once; application XIDs (13, 31,
/// 43) are not; XIDs from before the monitor started are not either.
#[test]
fn critical_xids_are_faults_and_application_xids_are_not() {
    let mut rig = Rig::new(four_a100s());
    rig.change(|m| m.gpus[1].xid = vec![48]);
    let mut health = rig.monitor();
    assert_eq!(health.poll(), []);
    rig.change(|m| m.gpus[2].xid = vec![13, 31, 43]);
    assert_eq!(health.poll(), []);
    rig.change(|m| {
        m.gpus[2].xid.extend([79, 13]);
        m.gpus[0].xid = vec![94];
    });
    let expected = [
        fault(0, "XID 94: contained ECC error"),
        fault(2, "XID 79: GPU has fallen off the bus"),
    ];
    assert_eq!(health.poll(), expected);
    assert_eq!(health.poll(), expected);
    health.forget(2);
    assert_eq!(health.poll(), [fault(0, "XID 94: contained ECC error")]);
    // The first event is what is reported; later ones do not replace it.
    rig.change(|m| m.gpus[0].xid.push(48));
    assert_eq!(health.poll(), [fault(0, "XID 94: contained ECC error")]);
    health.forget(0);
    assert_eq!(health.poll(), []);
}

/// A GPU NVML calls lost, or no longer finds by its UUID, is a fault while that lasts.
#[test]
fn a_lost_or_vanished_gpu_is_a_fault_while_it_lasts() {
    let mut rig = Rig::new(four_a100s());
    let mut health = rig.monitor();
    rig.change(|m| m.gpus[1].lost = true);
    let lost = format!(
        "NVML reports GPU {} lost (off the bus or inaccessible)",
        machine::uuid(1)
    );
    assert_eq!(health.poll(), [fault(1, &lost)]);
    rig.change(|m| m.gpus[1].lost = false);
    assert_eq!(health.poll(), []);
    let gone = rig.machine.gpus[2].clone();
    rig.change(|m| {
        m.gpus.remove(2);
    });
    let vanished = format!("NVML no longer sees GPU {}", machine::uuid(2));
    assert_eq!(health.poll(), [fault(2, &vanished)]);
    // The others, now at other NVML positions, are still found by UUID and watched.
    rig.change(|m| m.gpus[2].ecc_uncorrected = Some(1));
    assert_eq!(
        health.poll(),
        [fault(2, &vanished), fault(3, "1 uncorrectable ECC error")]
    );
    rig.change(|m| m.gpus.insert(2, gone));
    assert_eq!(health.poll(), [fault(3, "1 uncorrectable ECC error")]);
}

/// A GPU that supports none of the checks (a consumer GPU: no ECC, no page retirement or row
/// remapping, no XID events) is healthy, not faulty.
#[test]
fn checks_a_gpu_does_not_support_are_not_faults() {
    let mut machine = Machine::pcie_only("NVIDIA GeForce RTX 4090", 2, 1);
    for gpu in &mut machine.gpus {
        gpu.ecc_uncorrected = None;
        gpu.retired_pages_pending = None;
        gpu.remapped_rows = None;
        gpu.mig = None;
    }
    let machine = machine.with_fault("nvmlDeviceRegisterEvents", None, "NOT_SUPPORTED");
    let mut rig = Rig::new(machine);
    let mut health = rig.monitor();
    assert_eq!(health.poll(), []);
    // Not registered for events, so an XID is not seen: the other checks still run.
    rig.change(|m| m.gpus[0].xid = vec![79]);
    assert_eq!(health.poll(), []);
    rig.change(|m| m.gpus[1].lost = true);
    assert_eq!(health.poll().len(), 1);
}

/// Trouble reading one GPU costs nothing: no fault for it, and the other GPUs' faults are
/// still reported.
#[test]
fn trouble_reading_a_gpu_is_not_a_fault() {
    let mut rig = Rig::new(
        four_a100s()
            .with_fault("nvmlDeviceGetTotalEccErrors", Some(0), "UNKNOWN")
            .with_fault("nvmlDeviceGetRetiredPagesPendingStatus", Some(0), "UNKNOWN")
            .with_fault("nvmlDeviceGetHandleByUUID", Some(2), "UNKNOWN"),
    );
    let mut health = rig.monitor();
    assert_eq!(health.poll(), []);
    rig.change(|m| {
        m.gpus[0].ecc_uncorrected = Some(9);
        m.gpus[0].retired_pages_pending = Some(true);
        m.gpus[1].retired_pages_pending = Some(true);
    });
    assert_eq!(
        health.poll(),
        [fault(
            1,
            "memory pages pending retirement (a GPU reset retires them)"
        )]
    );
    // Once it reads again, it is checked again.
    rig.change(|m| m.faults.clear());
    assert_eq!(health.poll().len(), 2);
}

/// GPUs are known by UUID: a fault carries the index the GPU was registered under, whatever
/// its NVML position, and GPUs the node did not register are not watched.
#[test]
fn gpus_are_matched_by_uuid() {
    let mut rig = Rig::new(four_a100s());
    let gpus = [
        registered(7, &machine::uuid(3)),
        registered(6, &machine::uuid(0)),
    ];
    let mut health = nvml_health(Some(&rig.library), &gpus).unwrap();
    rig.change(|m| {
        m.gpus[0].retired_pages_pending = Some(true);
        m.gpus[1].retired_pages_pending = Some(true);
        m.gpus[2].xid = vec![79];
        m.gpus[3].xid = vec![74];
    });
    assert_eq!(
        health.poll(),
        [
            fault(7, "XID 74: NVLink error"),
            fault(
                6,
                "memory pages pending retirement (a GPU reset retires them)"
            ),
        ]
    );
}

/// Without NVML there is no monitor, and the error says why.
#[test]
fn a_monitor_needs_nvml() {
    let gpus = [registered(0, &machine::uuid(0))];
    let missing = std::path::Path::new("/nonexistent/libnvidia-ml.so.1");
    let err = nvml_health(Some(missing), &gpus).err().unwrap().to_string();
    assert!(
        err.starts_with("cannot load the NVML library /nonexistent/libnvidia-ml.so.1"),
        "{err}"
    );
    let rig = Rig::new(four_a100s().with_fault("nvmlInit_v2", None, "NO_PERMISSION"));
    let err = nvml_health(Some(&rig.library), &gpus)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with("cannot start NVML (") && err.contains("nvmlInit_v2"),
        "{err}"
    );
    let rig = Rig::new(four_a100s().with_fault("nvmlInit_v2", None, "DRIVER_NOT_LOADED"));
    let err = nvml_health(Some(&rig.library), &gpus)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with("cannot watch GPU health: NVML unavailable:"),
        "{err}"
    );
}
