//! `noded --inventory --json` through NVML: the real binary loads the mock NVML library
//! (`tests/mock-nvml`), which serves machines of the common shapes and injected NVML errors.
//! What a fault costs is checked call by call: the node, one GPU, or only placement quality.

use serde_json::Value;
use std::process::{Command, Output};
use ysched_mock_nvml::machine::{self, Machine};

const A100: &str = "NVIDIA A100-SXM4-80GB";

/// Runs `noded --inventory --nvml-library <mock> ARGS` on `machine`.
fn noded(machine: &Machine, args: &[&str]) -> Output {
    noded_with_library(machine, &machine::library().to_string_lossy(), args)
}

fn noded_with_library(machine: &Machine, library: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ysched.toml");
    std::fs::write(&config, "[node]\ncgroup_root = \"none\"\n").unwrap();
    let machine_file = dir.path().join("machine.toml");
    machine.write(&machine_file).unwrap();
    Command::new(env!("CARGO_BIN_EXE_noded"))
        .env("YSCHED_CONF", &config)
        .env(machine::MACHINE_ENV, &machine_file)
        .env_remove("RUST_LOG")
        .args([
            "--name",
            "n1",
            "--cpus",
            "64",
            "--mem",
            "512G",
            "--inventory",
        ])
        .args(["--nvml-library", library])
        .args(args)
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The JSON inventory of `machine`, which must succeed, and what noded logged.
fn inventory(machine: &Machine) -> (Value, String) {
    let output = noded(machine, &["--json"]);
    let log = stderr(&output);
    assert!(output.status.success(), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    (serde_json::from_slice(&output.stdout).unwrap(), log)
}

/// Each GPU as one line: index, UUID, model, memory, bus id, NUMA node and NVLink peers.
fn gpu_lines(v: &Value) -> Vec<String> {
    v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            format!(
                "{} {} {} {} {} {} {}",
                g["index"],
                g["uuid"].as_str().unwrap(),
                g["model"].as_str().unwrap(),
                g["memory_mib"],
                g["pci_bus_id"].as_str().unwrap(),
                g["numa_node"],
                g["nvlink"]
            )
        })
        .collect()
}

/// The `links` of every GPU as a matrix, `X` on the diagonal, one row per GPU: each GPU must
/// have exactly one link to every other.
fn matrix(v: &Value, cell: impl Fn(&Value) -> String) -> Vec<String> {
    let gpus = v["gpus"].as_array().unwrap();
    gpus.iter()
        .map(|gpu| {
            assert_eq!(gpu["links"].as_array().unwrap().len(), gpus.len() - 1);
            gpus.iter()
                .map(|peer| {
                    if peer["index"] == gpu["index"] {
                        return "X".to_string();
                    }
                    let link = gpu["links"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|l| l["peer"] == peer["index"])
                        .unwrap_or_else(|| panic!("no link to {}: {gpu}", peer["index"]));
                    cell(link)
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn pcie(v: &Value) -> Vec<String> {
    matrix(v, |l| l["pcie"].as_str().unwrap().to_string())
}

fn nvlinks(v: &Value) -> Vec<String> {
    matrix(v, |l| l["nvlinks"].to_string())
}

fn indices(v: &Value) -> Vec<u64> {
    v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["index"].as_u64().unwrap())
        .collect()
}

/// The bus ids the mock's builders give GPUs 0..8, as noded normalizes them.
const BUS_IDS: [&str; 8] = [
    "0000:07:00.0",
    "0000:17:00.0",
    "0000:27:00.0",
    "0000:37:00.0",
    "0000:47:00.0",
    "0000:57:00.0",
    "0000:67:00.0",
    "0000:77:00.0",
];

/// The expected GPU lines: per GPU, model, memory, NUMA node and NVLink peers.
fn expected_lines(model: &str, memory: u64, numa: &[u32], nvlink: &[&str]) -> Vec<String> {
    (0..numa.len())
        .map(|i| {
            format!(
                "{i} {} {model} {memory} {} {} {}",
                machine::uuid(i as u32),
                BUS_IDS[i],
                numa[i],
                nvlink[i]
            )
        })
        .collect()
}

fn rows(rows: &[&str]) -> Vec<String> {
    rows.iter().map(|r| r.to_string()).collect()
}

/// Two 4-GPU NVLink islands (4 links per pair), an island per NUMA node, PCIe-switch pairs.
fn islands() -> Machine {
    Machine::islands(A100, 8, 4, 4)
}

const ISLAND_NVLINK: [&str; 8] = [
    "[1,2,3]", "[0,2,3]", "[0,1,3]", "[0,1,2]", "[5,6,7]", "[4,6,7]", "[4,5,7]", "[4,5,6]",
];

const ISLAND_PCIE: [&str; 8] = [
    "X PIX NODE NODE SYS SYS SYS SYS",
    "PIX X NODE NODE SYS SYS SYS SYS",
    "NODE NODE X PIX SYS SYS SYS SYS",
    "NODE NODE PIX X SYS SYS SYS SYS",
    "SYS SYS SYS SYS X PIX NODE NODE",
    "SYS SYS SYS SYS PIX X NODE NODE",
    "SYS SYS SYS SYS NODE NODE X PIX",
    "SYS SYS SYS SYS NODE NODE PIX X",
];

const ISLAND_NVLINKS: [&str; 8] = [
    "X 4 4 4 0 0 0 0",
    "4 X 4 4 0 0 0 0",
    "4 4 X 4 0 0 0 0",
    "4 4 4 X 0 0 0 0",
    "0 0 0 0 X 4 4 4",
    "0 0 0 0 4 X 4 4",
    "0 0 0 0 4 4 X 4",
    "0 0 0 0 4 4 4 X",
];

/// Every other GPU of eight, as a JSON list.
fn all_but(i: usize) -> String {
    let others: Vec<String> = (0..8).filter(|&j| j != i).map(|j| j.to_string()).collect();
    format!("[{}]", others.join(","))
}

/// DGX A100: 8 GPUs with 12 NVLinks each, 2 to each of 6 NVSwitches; PCIe pairs behind two
/// levels of switches, each pair on its own NUMA node (3, 1, 7, 5 as on the real box).
#[test]
fn dgx_a100_is_one_nvswitch_fabric_of_nv12() {
    let numa = [3, 3, 1, 1, 7, 7, 5, 5];
    let mut dgx = Machine::nvswitch(A100, 8, 6, 12);
    for (gpu, node) in dgx.gpus.iter_mut().zip(numa) {
        gpu.numa_node = Some(node);
    }
    let (v, log) = inventory(&dgx);
    let others: Vec<String> = (0..8).map(all_but).collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    assert_eq!(gpu_lines(&v), expected_lines(A100, 81920, &numa, &others));
    assert_eq!(
        pcie(&v),
        rows(&[
            "X PXB SYS SYS SYS SYS SYS SYS",
            "PXB X SYS SYS SYS SYS SYS SYS",
            "SYS SYS X PXB SYS SYS SYS SYS",
            "SYS SYS PXB X SYS SYS SYS SYS",
            "SYS SYS SYS SYS X PXB SYS SYS",
            "SYS SYS SYS SYS PXB X SYS SYS",
            "SYS SYS SYS SYS SYS SYS X PXB",
            "SYS SYS SYS SYS SYS SYS PXB X",
        ])
    );
    assert_eq!(
        nvlinks(&v),
        rows(&[
            "X 12 12 12 12 12 12 12",
            "12 X 12 12 12 12 12 12",
            "12 12 X 12 12 12 12 12",
            "12 12 12 X 12 12 12 12",
            "12 12 12 12 X 12 12 12",
            "12 12 12 12 12 X 12 12",
            "12 12 12 12 12 12 X 12",
            "12 12 12 12 12 12 12 X",
        ])
    );
    assert_eq!(v["excluded"], serde_json::json!([]));
    assert!(!log.contains("WARN") && !log.contains("ERROR"), "{log}");
}

/// DGX H100: 18 NVLinks per GPU (NVML's maximum) into 4 NVSwitches; two NUMA nodes.
#[test]
fn dgx_h100_uses_all_eighteen_links() {
    let model = "NVIDIA H100 80GB HBM3";
    let mut dgx = Machine::nvswitch(model, 8, 4, 18);
    for gpu in &mut dgx.gpus {
        gpu.memory_mib = 81559;
    }
    let (v, _) = inventory(&dgx);
    let others: Vec<String> = (0..8).map(all_but).collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    let numa = [0, 0, 0, 0, 1, 1, 1, 1];
    assert_eq!(gpu_lines(&v), expected_lines(model, 81559, &numa, &others));
    assert_eq!(pcie(&v)[0], "X PXB NODE NODE SYS SYS SYS SYS");
    assert_eq!(pcie(&v)[5], "SYS SYS SYS SYS PXB X NODE NODE");
    assert!(nvlinks(&v)
        .iter()
        .all(|row| row.split(' ').filter(|&c| c == "18").count() == 7));
}

#[test]
fn two_nvlink_islands_of_four() {
    let (v, _) = inventory(&islands());
    let numa = [0, 0, 0, 0, 1, 1, 1, 1];
    assert_eq!(
        gpu_lines(&v),
        expected_lines(A100, 81920, &numa, &ISLAND_NVLINK)
    );
    assert_eq!(pcie(&v), rows(&ISLAND_PCIE));
    assert_eq!(nvlinks(&v), rows(&ISLAND_NVLINKS));
}

/// Four L40S cards without NVLink (and without MIG), in PCIe-switch pairs on two NUMA nodes.
#[test]
fn pcie_only_node_on_two_numa_nodes() {
    let mut machine = Machine::pcie_only("NVIDIA L40S", 4, 2);
    for gpu in &mut machine.gpus {
        gpu.memory_mib = 46068;
        gpu.mig = None;
    }
    let (v, log) = inventory(&machine);
    assert_eq!(
        gpu_lines(&v),
        expected_lines("NVIDIA L40S", 46068, &[0, 0, 1, 1], &["[]"; 4])
    );
    assert_eq!(
        pcie(&v),
        rows(&[
            "X PIX SYS SYS",
            "PIX X SYS SYS",
            "SYS SYS X PIX",
            "SYS SYS PIX X"
        ])
    );
    assert!(nvlinks(&v)
        .iter()
        .all(|row| row.split(' ').all(|c| c == "X" || c == "0")));
    assert!(!log.contains("WARN"), "{log}");
}

/// A driver or platform that answers NOT_SUPPORTED to the NVLink queries: no NVLink, said by
/// nothing (a PCIe card answers the same); one that lacks the functions: no NVLink, said once.
#[test]
fn nvlink_not_supported_or_missing_leaves_pcie() {
    for (error, warning) in [
        ("NOT_SUPPORTED", None),
        ("FUNCTION_NOT_FOUND", Some("NVML cannot list NVLinks")),
    ] {
        let machine = islands().with_fault("nvmlDeviceGetNvLinkState", None, error);
        let (v, log) = inventory(&machine);
        assert_eq!(indices(&v), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert!(
            v["gpus"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| g["nvlink"] == serde_json::json!([])),
            "{error}: {v}"
        );
        assert_eq!(pcie(&v), rows(&ISLAND_PCIE), "{error}");
        match warning {
            Some(warning) => assert_eq!(log.matches(warning).count(), 1, "{error}: {log}"),
            None => assert!(!log.contains("NVLink"), "{error}: {log}"),
        }
    }
}

/// ysched schedules whole GPUs: a GPU in MIG mode is not offered, and `--inventory` says why
/// and how to change it. The other GPUs are offered, linked among themselves.
#[test]
fn a_gpu_in_mig_mode_is_not_offered() {
    let mut machine = islands();
    machine.gpus[5].mig = Some(true);
    let (v, _) = inventory(&machine);
    assert_eq!(indices(&v), [0, 1, 2, 3, 4, 6, 7]);
    let excluded = v["excluded"].as_array().unwrap();
    assert_eq!(excluded.len(), 1, "{v}");
    assert_eq!(excluded[0]["index"], 5);
    assert_eq!(excluded[0]["uuid"], machine::uuid(5));
    assert_eq!(excluded[0]["fault"], false);
    let reason = excluded[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("MIG mode is enabled") && reason.contains("nvidia-smi -i 5 -mig 0"),
        "{reason}"
    );
    assert_eq!(v["gpus"][4]["nvlink"], serde_json::json!([6, 7]));
    assert_eq!(nvlinks(&v)[4], "0 0 0 0 X 4 4");
    assert_eq!(pcie(&v)[4], "SYS SYS SYS SYS X NODE NODE");

    let output = noded(&machine, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let line = format!(
        "GPU 5 ({}) is not offered: MIG mode is enabled",
        machine::uuid(5)
    );
    assert!(text.lines().any(|l| l.starts_with(&line)), "{text}");
}

/// A GPU NVML cannot open or describe costs that GPU only: it is left out with the call and
/// the error, and the rest of the node is offered.
#[test]
fn a_gpu_nvml_cannot_describe_is_left_out_alone() {
    for (call, reason, uuid_known) in [
        (
            "nvmlDeviceGetHandleByIndex_v2",
            "NVML cannot open it: nvmlDeviceGetHandleByIndex_v2: ",
            false,
        ),
        (
            "nvmlDeviceGetUUID",
            "NVML cannot read its UUID: nvmlDeviceGetUUID: ",
            false,
        ),
        (
            "nvmlDeviceGetName",
            "NVML cannot read its name: nvmlDeviceGetName: ",
            true,
        ),
        (
            "nvmlDeviceGetMemoryInfo_v2",
            "NVML cannot read its memory: nvmlDeviceGetMemoryInfo_v2: ",
            true,
        ),
        (
            "nvmlDeviceGetPciInfo_v3",
            "NVML cannot read its PCI info: nvmlDeviceGetPciInfo_v3: ",
            true,
        ),
        (
            "nvmlDeviceGetMigMode",
            "NVML cannot read its MIG mode: nvmlDeviceGetMigMode: ",
            true,
        ),
    ] {
        let machine = islands().with_fault(call, Some(2), "GPU_IS_LOST");
        let (v, _) = inventory(&machine);
        assert_eq!(indices(&v), [0, 1, 3, 4, 5, 6, 7], "{call}");
        let excluded = &v["excluded"];
        assert_eq!(excluded.as_array().unwrap().len(), 1, "{call}: {v}");
        assert_eq!(excluded[0]["index"], 2, "{call}");
        assert_eq!(excluded[0]["fault"], true, "{call}");
        let uuid = if uuid_known {
            machine::uuid(2)
        } else {
            "".into()
        };
        assert_eq!(excluded[0]["uuid"], uuid, "{call}");
        let text = excluded[0]["reason"].as_str().unwrap();
        assert!(
            text.starts_with(reason) && text.contains("fell off the bus"),
            "{call}: {text}"
        );
        // The others keep their links to each other, and none to the missing GPU.
        assert_eq!(v["gpus"][2]["index"], 3);
        assert_eq!(v["gpus"][2]["nvlink"], serde_json::json!([0, 1]), "{call}");
        assert_eq!(nvlinks(&v)[0], "X 4 4 0 0 0 0", "{call}");
        assert_eq!(pcie(&v)[2], "NODE NODE X SYS SYS SYS SYS", "{call}");
    }
}

/// NVML that cannot start, or cannot count its GPUs, fails `--inventory` with one line naming
/// the call (the daemon then registers no GPUs); a library that was named but does not load
/// fails it too. A driver that is installed but not loaded is a host without GPUs.
#[test]
fn nvml_that_cannot_start_or_count_fails_the_inventory() {
    for (machine, expected) in [
        (
            islands().with_fault("nvmlInit_v2", None, "NO_PERMISSION"),
            "noded: error: cannot start NVML (",
        ),
        (
            islands().with_fault("nvmlDeviceGetCount_v2", None, "UNKNOWN"),
            "noded: error: NVML cannot count the GPUs: nvmlDeviceGetCount_v2: an internal \
             driver error occurred",
        ),
    ] {
        let output = noded(&machine, &["--json"]);
        let log = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{log}");
        assert!(log.starts_with(expected), "{log}");
        assert_eq!(log.lines().count(), 1, "{log}");
    }
    let init = stderr(&noded(
        &islands().with_fault("nvmlInit_v2", None, "NO_PERMISSION"),
        &[],
    ));
    assert!(
        init.contains("nvmlInit_v2: the current user does not have permission"),
        "{init}"
    );

    let output = noded_with_library(&islands(), "/nonexistent/libnvidia-ml.so.1", &[]);
    let log = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{log}");
    assert!(
        log.starts_with(
            "noded: error: cannot load the NVML library /nonexistent/libnvidia-ml.so.1 \
             (node.nvml_library or --nvml-library): "
        ),
        "{log}"
    );

    let (v, log) = inventory(&islands().with_fault("nvmlInit_v2", None, "DRIVER_NOT_LOADED"));
    assert_eq!(v["gpus"], serde_json::json!([]));
    assert!(
        log.contains("NVML unavailable, reporting no GPUs")
            && log.contains("the NVIDIA driver is not loaded"),
        "{log}"
    );
}

/// A NUMA node NVML cannot give comes from sysfs, else stays unknown; the GPU is offered. A
/// GPU that does not support the query is not worth a warning.
#[test]
fn an_unknown_numa_node_costs_nothing_but_itself() {
    let mut machine = Machine::pcie_only("NVIDIA L4", 4, 2);
    // Bus ids in a PCI domain no host has, so that sysfs has no answer either.
    machine.gpus[2].pci_bus_id = "00007F00:27:00.0".into();
    machine.gpus[3].pci_bus_id = "00007F00:37:00.0".into();
    machine.gpus[3].numa_node = None;
    let machine = machine.with_fault("nvmlDeviceGetNumaNodeId", Some(2), "UNKNOWN");
    let (v, log) = inventory(&machine);
    assert_eq!(indices(&v), [0, 1, 2, 3]);
    let numa: Vec<&Value> = v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["numa_node"])
        .collect();
    assert_eq!(numa, [&0.into(), &0.into(), &Value::Null, &Value::Null]);
    assert_eq!(v["gpus"][2]["pci_bus_id"], "7f00:27:00.0");
    assert!(
        log.contains(
            "GPU 2: nvmlDeviceGetNumaNodeId: an internal driver error occurred; taking its \
             NUMA node from sysfs"
        ),
        "{log}"
    );
    assert!(!log.contains("GPU 3"), "{log}");
}

/// A GPU whose NVLinks cannot be read counts none of its own; its peers' reports of their
/// links to it still count, so an island stays an island. The GPU is offered.
#[test]
fn a_gpu_whose_nvlinks_fail_still_counts_by_its_peers() {
    for call in [
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    ] {
        let machine = islands().with_fault(call, Some(0), "UNKNOWN");
        let (v, log) = inventory(&machine);
        assert_eq!(indices(&v), [0, 1, 2, 3, 4, 5, 6, 7], "{call}");
        assert_eq!(nvlinks(&v), rows(&ISLAND_NVLINKS), "{call}");
        assert!(
            log.contains(&format!(
                "GPU 0: {call} (link 0): an internal driver error occurred; its own NVLinks \
                 are not counted"
            )),
            "{call}: {log}"
        );
        assert_eq!(log.matches("its own NVLinks").count(), 1, "{call}: {log}");
    }
}

/// Pairs whose PCIe relation NVML cannot give count as SYS, said once; a platform that does
/// not support the query makes every pair SYS.
#[test]
fn unknown_pcie_relations_count_as_sys() {
    let machine = islands().with_fault("nvmlDeviceGetTopologyCommonAncestor", Some(1), "UNKNOWN");
    let (v, log) = inventory(&machine);
    assert_eq!(indices(&v), [0, 1, 2, 3, 4, 5, 6, 7]);
    let mut expected = rows(&ISLAND_PCIE);
    expected[0] = "X SYS NODE NODE SYS SYS SYS SYS".into();
    expected[1] = "SYS X SYS SYS SYS SYS SYS SYS".into();
    expected[2] = "NODE SYS X PIX SYS SYS SYS SYS".into();
    expected[3] = "NODE SYS PIX X SYS SYS SYS SYS".into();
    assert_eq!(pcie(&v), expected);
    assert_eq!(nvlinks(&v), rows(&ISLAND_NVLINKS));
    assert!(
        log.contains("NVML could not tell the PCIe relation of 7 GPU pair(s), which count as SYS"),
        "{log}"
    );

    let machine =
        islands().with_fault("nvmlDeviceGetTopologyCommonAncestor", None, "NOT_SUPPORTED");
    let (v, log) = inventory(&machine);
    assert!(pcie(&v)
        .iter()
        .all(|row| row.split(' ').all(|c| c == "X" || c == "SYS")));
    assert_eq!(
        log.matches("every GPU pair counts as SYS").count(),
        1,
        "{log}"
    );
}
