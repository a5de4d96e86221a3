//! `noded --inventory`: the real binary prints what it would register and exits, without a
//! cluster key or schedd.

use std::path::Path;
use std::process::{Command, Output};

/// An HGX-like island of two NVLinked GPUs behind one PCIe switch, and a third GPU on the
/// other socket.
const GPUS: &str = r#"
[[gpu]]
index = 0
uuid = "GPU-a"
model = "NVIDIA A100-SXM4-80GB"
memory_mib = 81920
pci_bus_id = "0000:07:00.0"
numa_node = 0
nvlink = [1, 1, 1]
pcie = ["X", "PIX", "SYS"]

[[gpu]]
index = 1
uuid = "GPU-b"
model = "NVIDIA A100-SXM4-80GB"
memory_mib = 81920
pci_bus_id = "0000:0f:00.0"
numa_node = 0
nvlink = [0, 0, 0]
pcie = ["PIX", "X", "SYS"]

[[gpu]]
index = 2
uuid = "GPU-c"
model = "NVIDIA A100-SXM4-80GB"
memory_mib = 81920
pci_bus_id = "0000:87:00.0"
numa_node = 1
"#;

fn noded(dir: &Path, gpus: &str, args: &[&str]) -> Output {
    noded_with_config(dir, gpus, "", args)
}

/// As [`noded`], with more `[node]` keys in the config.
fn noded_with_config(dir: &Path, gpus: &str, node_config: &str, args: &[&str]) -> Output {
    let config = format!("[node]\nfeatures = [\"fast\"]\n{node_config}");
    std::fs::write(dir.join("ysched.toml"), config).unwrap();
    std::fs::write(dir.join("gpus.toml"), gpus).unwrap();
    Command::new(env!("CARGO_BIN_EXE_noded"))
        .env("YSCHED_CONF", dir.join("ysched.toml"))
        .env_remove("RUST_LOG")
        .args([
            "--name",
            "n7",
            "--cpus",
            "32",
            "--mem",
            "256G",
            "--fake-gpus",
        ])
        .arg(dir.join("gpus.toml"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn prints_gpus_and_the_topology_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let output = noded(dir.path(), GPUS, &["--inventory"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("Node n7: 32 CPUs, 262144 MiB memory, features: ")
            && lines[0].contains("fast"),
        "{text}"
    );
    assert!(lines[1].starts_with("Jobs contained by "), "{text}");
    assert_eq!(
        lines[4].split_whitespace().collect::<Vec<_>>(),
        [
            "0",
            "NVIDIA",
            "A100-SXM4-80GB",
            "81920",
            "MiB",
            "0000:07:00.0",
            "0",
            "1",
            "GPU-a"
        ]
    );
    let matrix_at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("GPU0  GPU1"))
        .expect(&text);
    assert_eq!(
        &lines[matrix_at..matrix_at + 4],
        [
            "      GPU0  GPU1  GPU2  NUMA Affinity",
            "GPU0  X     NV3   SYS   0",
            "GPU1  NV3   X     SYS   0",
            "GPU2  SYS   SYS   X     1",
        ]
    );
    assert!(text.contains("\nLegend:\n"), "{text}");
}

#[test]
fn prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let output = noded(dir.path(), GPUS, &["--inventory", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(value["name"], "n7");
    assert_eq!(value["cpus"], 32);
    assert!(value["features"]
        .as_array()
        .unwrap()
        .contains(&"fast".into()));
    assert_eq!(value["gpus"].as_array().unwrap().len(), 3);
    let mode = &value["containment"]["mode"];
    assert!(mode == "cgroups" || mode == "process-groups", "{value}");
    assert_eq!(
        value["gpus"][2]["links"],
        serde_json::json!([
            {"peer": 0, "pcie": "SYS", "nvlinks": 0},
            {"peer": 1, "pcie": "SYS", "nvlinks": 0},
        ])
    );
}

#[test]
fn says_how_jobs_are_contained() {
    let dir = tempfile::tempdir().unwrap();
    let output = noded_with_config(
        dir.path(),
        GPUS,
        "cgroup_root = \"none\"\n",
        &["--inventory"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.lines().nth(1).unwrap().starts_with(
            "Jobs contained by process groups only (node.cgroup_root = \"none\"): a process \
             that leaves its job's process group (setsid, daemonizing) escapes"
        ),
        "{text}"
    );
    let output = noded_with_config(
        dir.path(),
        GPUS,
        "cgroup_root = \"none\"\n",
        &["--inventory", "--json"],
    );
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(value["containment"]["mode"], "process-groups");
    assert_eq!(value["containment"]["cgroup_root"], serde_json::Value::Null);
}

#[test]
fn a_bad_file_fails_naming_file_and_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let bad = GPUS.replace(r#"["PIX", "X", "SYS"]"#, r#"["PIX", "X", "QPI"]"#);
    let output = noded(dir.path(), &bad, &["--inventory"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.starts_with("noded: error: invalid GPU inventory file ")
            && err.contains("gpus.toml")
            && err.contains(r#"GPU 1: unknown pcie relation "QPI" for GPU 2"#),
        "{err}"
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn json_needs_inventory() {
    let dir = tempfile::tempdir().unwrap();
    let output = noded(dir.path(), GPUS, &["--json"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}
