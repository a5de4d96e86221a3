//! Agents that find their GPUs through NVML, as on real GPU hosts: each `noded` loads the mock
//! NVML library serving its machine, registers with the real `schedd`, and jobs are placed on
//! what it registered. A fault of NVML costs what it concerns: one GPU, or the GPUs of a node
//! (which still registers), never the agent.

use std::time::Duration;
use ysched_tests::mock_nvml::{self, Machine};
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const H100: &str = "NVIDIA H100 80GB HBM3";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn node<'a>(nodes: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    nodes
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("node {name} not listed: {nodes:?}"))
}

fn gpu_indices(node: &serde_json::Value) -> Vec<u64> {
    node["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["index"].as_u64().unwrap())
        .collect()
}

#[test]
fn nodes_register_through_nvml_and_a_4_gpu_job_gets_one_nvlink_island() {
    let c = TestCluster::start_with_nvml(
        Vec::new(),
        vec![
            NvmlNode::new("isl", Machine::islands(A100, 8, 4, 4)),
            // NVML cannot read GPU 2's UUID: the other seven are offered.
            NvmlNode::new(
                "faulty",
                Machine::islands(H100, 8, 4, 4).with_fault(
                    "nvmlDeviceGetUUID",
                    Some(2),
                    "GPU_IS_LOST",
                ),
            ),
            // NVML cannot start: the node registers without GPUs (it still runs CPU jobs).
            NvmlNode::new(
                "nodriver",
                Machine::islands(H100, 8, 4, 4).with_fault("nvmlInit_v2", None, "NO_PERMISSION"),
            ),
        ],
    );
    let nodes = c.nodes();
    let isl = node(&nodes, "isl");
    assert_eq!(gpu_indices(isl), [0, 1, 2, 3, 4, 5, 6, 7]);
    for (i, gpu) in isl["gpus"].as_array().unwrap().iter().enumerate() {
        assert_eq!(gpu["uuid"], mock_nvml::uuid(i as u32), "{gpu}");
        assert_eq!(gpu["model"], A100, "{gpu}");
    }
    assert_eq!(isl["gpus"][5]["nvlink"], serde_json::json!([4, 6, 7]));
    assert_eq!(gpu_indices(node(&nodes, "faulty")), [0, 1, 3, 4, 5, 6, 7]);
    assert_eq!(gpu_indices(node(&nodes, "nodriver")), Vec::<u64>::new());
    for name in ["faulty", "nodriver"] {
        assert_ne!(node(&nodes, name)["state"], "DOWN", "{name}");
    }
    let logs = c.logs();
    assert!(
        logs.contains("GPU 2 is not offered: NVML cannot read its UUID: nvmlDeviceGetUUID: "),
        "{logs}"
    );
    assert!(
        logs.contains("GPU inventory failed, reporting no GPUs: cannot start NVML ("),
        "{logs}"
    );

    // The matrix schedd received, as nvidia-smi prints it.
    let out = c.run("yctl", &["nodes", "--topology", "isl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let matrix = stdout(&out);
    let row0 = matrix
        .lines()
        .find(|l| l.starts_with("GPU0"))
        .expect("row GPU0");
    assert_eq!(
        row0.split_whitespace().take(9).collect::<Vec<_>>(),
        ["GPU0", "X", "NV4", "NV4", "NV4", "SYS", "SYS", "SYS", "SYS"],
        "{matrix}"
    );

    // A 1-GPU job takes a GPU of one island; a 4-GPU NVLink job then gets the whole other one.
    let small = c.submit(&[
        "-G",
        "1",
        "--gpu-type",
        "A100",
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES; sleep 30",
    ]);
    c.wait_state(small, "RUNNING", SECS(10));
    let big = c.submit(&[
        "-G",
        "4",
        "--gpu-type",
        "A100",
        "--interconnect",
        "nvlink",
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES",
    ]);
    let j = c.wait_state(big, "COMPLETED", SECS(20));
    assert_eq!(j["node"], "isl");
    let seen = |id: u64| -> Vec<u32> {
        read_when_exists(&c.path(&format!("ysched-{id}.out")), SECS(5))
            .trim()
            .split(',')
            .map(|g| g.parse().unwrap())
            .collect()
    };
    let (small_gpus, big_gpus) = (seen(small), seen(big));
    assert_eq!(small_gpus.len(), 1);
    assert_eq!(big_gpus.len(), 4);
    assert!(
        big_gpus.iter().all(|g| g / 4 == big_gpus[0] / 4),
        "one island, got {big_gpus:?}"
    );
    assert_ne!(
        big_gpus[0] / 4,
        small_gpus[0] / 4,
        "{big_gpus:?} {small_gpus:?}"
    );
}

/// A library named by `--nvml-library` (or `node.nvml_library`) that does not load is a
/// configuration error: the agent does not start, and says which library.
#[test]
fn an_agent_whose_nvml_library_does_not_load_does_not_start() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let spool = c.dir.path().join("spool").join("bad");
    let out = c.run(
        "noded",
        &[
            "--name",
            "bad",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
            "--spool-dir",
            spool.to_str().unwrap(),
            "--client-socket",
            "",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "cannot load the NVML library /nonexistent/libnvidia-ml.so.1 (node.nvml_library or \
             --nvml-library): "
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(c.nodes().len(), 1);
}
