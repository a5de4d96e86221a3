//! Agents that find their GPUs through NVML, as on real GPU hosts: each `noded` loads the mock
//! NVML library serving its machine, registers with the real `schedd`, and jobs are placed on
//! what it registered. A fault of NVML costs what it concerns: one GPU, or the GPUs of a node
//! (which still registers), never the agent. A GPU that fails as NVML reports it (an XID
//! event, a GPU the driver lost) is taken out of service by itself, through the same monitor
//! that watches real GPUs.

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

/// node `name`'s GPUs out of service, as (index, reason).
fn outages(c: &TestCluster, name: &str) -> Vec<(u64, String)> {
    node(&c.nodes(), name)["gpus_out_of_service"]
        .as_array()
        .expect("gpus_out_of_service")
        .iter()
        .map(|o| {
            (
                o["index"].as_u64().unwrap(),
                o["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The whole path on the NVML monitor, as on a real host: the driver reports XID 79 for the
/// GPU under a job; the agent's monitor sees the event, schedd takes that GPU out of service,
/// the job is stopped and requeued onto another GPU, and the job on the GPU next to it runs
/// on. An administrator returns it. A GPU the driver then loses is a state: it stays out of
/// service through a resume, for as long as NVML cannot see it.
#[test]
fn a_gpu_nvml_reports_failing_under_a_job_is_taken_out_and_the_job_runs_on_another() {
    let mut c = TestCluster::start_with_nvml_config(
        Vec::new(),
        vec![NvmlNode::new("n1", Machine::islands(A100, 4, 4, 2))],
        "",
        "gpu_health_secs = 1",
    );
    let victim = c.submit(&["-G", "1", "--wrap", "sleep 600"]);
    let bystander = c.submit(&["-G", "1", "--wrap", "sleep 600"]);
    let failed = job_gpus(&c.wait_state(victim, "RUNNING", SECS(20)))[0];
    let kept = job_gpus(&c.wait_state(bystander, "RUNNING", SECS(20)))[0];

    c.change_machine("n1", |m| m.gpus[failed as usize].xid = vec![79]);
    let mut rerun = serde_json::Value::Null;
    wait_until(SECS(30), "the job to run again after XID 79", || {
        rerun = c.job(victim);
        rerun["state"] == "RUNNING" && rerun["restart_count"] == 1
    });
    let moved_to = job_gpus(&rerun)[0];
    assert_ne!(moved_to, failed, "placed again on the GPU that failed");
    let out = outages(&c, "n1");
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, failed);
    assert!(out[0].1.contains("XID 79"), "{out:?}");
    // The job next to it was not touched.
    let b = c.job(bystander);
    assert_eq!(
        (b["state"].as_str(), b["restart_count"].as_u64()),
        (Some("RUNNING"), Some(0))
    );
    assert_eq!(job_gpus(&b), [kept]);

    // Returned after the repair: the event is forgotten and the GPU takes jobs again.
    let out = c.run("yctl", &["resume", "n1", "--gpu", &failed.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("back in service"), "{}", stdout(&out));
    assert_eq!(outages(&c, "n1"), []);
    let two = c.submit(&["-G", "2", "--wrap", "sleep 600"]);
    let two_gpus = job_gpus(&c.wait_state(two, "RUNNING", SECS(20)));
    assert!(
        two_gpus.contains(&failed),
        "{two_gpus:?} (free were {failed} and one more)"
    );

    // The driver loses the bystander's GPU: out of service while NVML cannot see it.
    c.change_machine("n1", |m| m.gpus[kept as usize].lost = true);
    wait_until(SECS(30), "the lost GPU out of service", || {
        outages(&c, "n1").iter().any(|(i, _)| *i == kept)
    });
    let out = c.run("yctl", &["resume", "n1", "--gpu", &kept.to_string()]);
    assert!(
        !out.status.success(),
        "a lost GPU was returned: {}",
        stdout(&out)
    );
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(said.contains("still reports"), "{said}");
    assert!(outages(&c, "n1").iter().any(|(i, _)| *i == kept));
}
