//! Tests of how nodes are shown: tables, GPU lines, topology and JSON.

use super::*;
use ysched_proto::{Gpu, GpuLink};

fn gpu(index: u32, model: &str) -> Gpu {
    Gpu {
        index,
        uuid: format!("GPU-{index}"),
        model: model.into(),
        memory_mib: 81920,
        pci_bus_id: format!("0000:{index:02x}:00.0"),
        numa_node: if index < 4 { 0 } else { -1 },
        nvlink: vec![],
        links: vec![],
    }
}

fn busy_node() -> NodeInfo {
    NodeInfo {
        name: "gpu01".into(),
        state: "MIXED".into(),
        address: "10.0.0.1".into(),
        cpus: 64,
        mem_mib: 512 * 1024,
        gpus: (0..8).map(|i| gpu(i, "NVIDIA A100-SXM4-80GB")).collect(),
        gpu_holders: vec![17, 17, 0, 0, 0, 0, 0, 0],
        reason: String::new(),
        cpus_alloc: 8,
        mem_alloc_mib: 16384,
        features: vec!["ib".into()],
        last_seen_ms: 1_767_225_600_000,
        fence_after_secs: 0,
        gpus_out_of_service: vec![],
    }
}

fn drained_node() -> NodeInfo {
    NodeInfo {
        name: "gpu02".into(),
        state: "DRAINED".into(),
        cpus: 32,
        mem_mib: 1536,
        gpus: vec![
            gpu(0, "NVIDIA H100 80GB HBM3"),
            gpu(1, "NVIDIA A100-PCIE-40GB"),
        ],
        reason: "bad fan".into(),
        ..Default::default()
    }
}

#[test]
fn node_text_is_escaped() {
    let mut node = drained_node();
    node.name = "gpu\x1b[2J".into();
    node.reason = "fan\nreplaced".into();
    node.features = vec!["ib\u{202e}".into()];
    node.gpus[0].model = "NVIDIA H100\x07".into();
    let out = format_nodes_table(std::slice::from_ref(&node), true);
    assert!(
        !out.contains(|c: char| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{out:?}"
    );
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .starts_with("gpu\\x1b[2J  DRAINED"),
        "{out}"
    );
    assert!(out.contains("ib\\u{202e}  fan\\nreplaced"), "{out}");
    assert!(out.contains("1x H100\\x07"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["gpu0", "H100\\x07", "idle"]),
        "{out}"
    );
    node.gpus.clear();
    assert_eq!(
        format_node_topology(&node),
        "Node gpu\\x1b[2J has no GPUs.\n"
    );
}

#[test]
fn models_and_summaries() {
    assert_eq!(short_model("NVIDIA A100-SXM4-80GB"), "A100-SXM4-80GB");
    assert_eq!(short_model("Tesla V100"), "Tesla V100");
    assert_eq!(gpu_summary(&busy_node()), "8x A100-SXM4-80GB");
    assert_eq!(
        gpu_summary(&drained_node()),
        "1x H100 80GB HBM3,1x A100-PCIE-40GB"
    );
    assert_eq!(gpu_summary(&NodeInfo::default()), "0");
    assert_eq!(free_gpus(&busy_node()), 6);
    // No holders reported: all free.
    assert_eq!(free_gpus(&drained_node()), 2);
}

#[test]
fn a_gpu_held_by_a_private_job_is_in_use_by_nobody_named() {
    let mut node = busy_node();
    node.gpu_holders[2] = ysched_proto::PRIVATE_HOLDER;
    assert_eq!(free_gpus(&node), 5);
    let lines = format_gpu_lines(&node);
    let lines: Vec<&str> = lines.lines().map(str::trim).collect();
    assert!(lines[0].ends_with("job 17"), "{lines:?}");
    assert!(lines[2].ends_with("in use"), "{lines:?}");
    assert!(lines[3].ends_with("idle"), "{lines:?}");
    let value = serde_json::to_value(node_to_json(&node)).unwrap();
    assert_eq!(value["gpus"][0]["job"], 17);
    assert_eq!(value["gpus"][0]["in_use"], true);
    assert_eq!(value["gpus"][2]["job"], serde_json::Value::Null);
    assert_eq!(value["gpus"][2]["in_use"], true);
    assert_eq!(value["gpus"][3]["in_use"], false);
}

#[test]
fn a_gpu_is_the_inventorys_object_then_what_schedd_knows() {
    // The fields in the order `yctl nodes --json` has always printed them.
    let fields = [
        "index",
        "uuid",
        "model",
        "memory_mib",
        "pci_bus_id",
        "numa_node",
        "nvlink",
        "links",
        "job",
        "in_use",
        "in_service",
    ];
    let text = serde_json::to_string(&node_to_json(&busy_node()).gpus[0]).unwrap();
    let keys: Vec<&str> = text
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|k| fields.contains(k))
        .collect();
    assert_eq!(keys, fields, "{text}");
}

#[test]
fn table() {
    let out = format_nodes_table(&[busy_node(), drained_node()], false);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATE", "GPUS", "FREE", "CPUS", "MEM", "FEATURES", "REASON"]
    );
    assert!(
        lines[1].starts_with("gpu01  MIXED    8x A100-SXM4-80GB"),
        "{out}"
    );
    assert!(
        lines[1].contains("  6  ")
            && lines[1].contains("8/64")
            && lines[1].contains("16G/512G  ib"),
        "{out}"
    );
    assert!(
        lines[2].ends_with("0/32   0M/1.5G  -         bad fan"),
        "{out}"
    );
}

#[test]
fn long_table_lists_gpus_under_each_node() {
    let out = format_nodes_table(&[busy_node(), drained_node()], true);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1 + 1 + 8 + 1 + 2);
    assert!(lines[1].starts_with("gpu01"));
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["gpu0", "A100-SXM4-80GB", "job", "17"]
    );
    assert_eq!(
        lines[4].split_whitespace().collect::<Vec<_>>(),
        ["gpu2", "A100-SXM4-80GB", "idle"]
    );
    assert!(lines[10].starts_with("gpu02"));
    assert_eq!(lines[11].trim(), "gpu0  H100 80GB HBM3  idle");
}

/// Two NVLinked pairs (0-1, 2-3) on two sockets, as an agent reports them.
fn bridged_node() -> NodeInfo {
    let gpus = (0..4u32)
        .map(|index| {
            let links: Vec<GpuLink> = (0..4u32)
                .filter(|&peer| peer != index)
                .map(|peer| {
                    let pair = peer / 2 == index / 2;
                    GpuLink {
                        peer,
                        pcie: if pair { "PHB" } else { "SYS" }.into(),
                        nvlinks: if pair { 4 } else { 0 },
                    }
                })
                .collect();
            Gpu {
                numa_node: (index / 2) as i32,
                nvlink: vec![index ^ 1],
                links,
                ..gpu(index, "NVIDIA RTX A6000")
            }
        })
        .collect();
    NodeInfo {
        name: "ws01".into(),
        gpus,
        ..Default::default()
    }
}

#[test]
fn topology_matrix_from_reported_links() {
    let out = format_node_topology(&bridged_node());
    assert!(
        out.starts_with(
            "      GPU0  GPU1  GPU2  GPU3  NUMA Affinity\n\
                 GPU0  X     NV4   SYS   SYS   0\n\
                 GPU1  NV4   X     SYS   SYS   0\n\
                 GPU2  SYS   SYS   X     NV4   1\n\
                 GPU3  SYS   SYS   NV4   X     1\n\n\
                 Legend:\n"
        ),
        "{out}"
    );
    // A relation the tool does not know (from a newer agent) reads as the worst one.
    let mut node = bridged_node();
    node.gpus[0].links[1].pcie = "C2C".into();
    let out = format_node_topology(&node);
    assert!(out.contains("\nGPU0  X     NV4   SYS   SYS   0\n"), "{out}");
    assert!(!out.contains("C2C"), "{out}");
    assert_eq!(
        format_node_topology(&NodeInfo {
            name: "cpu1".into(),
            ..Default::default()
        }),
        "Node cpu1 has no GPUs.\n"
    );
}

#[test]
fn json_carries_links() {
    let value = serde_json::to_value(node_to_json(&bridged_node())).unwrap();
    assert_eq!(
        value["gpus"][2]["links"][2],
        serde_json::json!({"peer": 3, "pcie": "PHB", "nvlinks": 4})
    );
}

#[test]
fn json() {
    let value = serde_json::to_value(node_to_json(&busy_node())).unwrap();
    assert_eq!(value["name"], "gpu01");
    assert_eq!(value["state"], "MIXED");
    assert_eq!(value["cpus_alloc"], 8);
    assert_eq!(value["features"], serde_json::json!(["ib"]));
    assert_eq!(value["last_seen"], "2026-01-01T00:00:00Z");
    assert_eq!(value["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(value["gpus"][0]["job"], 17);
    assert_eq!(value["gpus"][2]["job"], serde_json::Value::Null);
    assert_eq!(value["gpus"][0]["model"], "NVIDIA A100-SXM4-80GB");
    assert_eq!(value["gpus"][0]["numa_node"], 0);
    assert_eq!(value["gpus"][5]["numa_node"], serde_json::Value::Null);
    assert_eq!(value["gpus"][0]["links"], serde_json::json!([]));
    let value = serde_json::to_value(node_to_json(&drained_node())).unwrap();
    assert_eq!(value["reason"], "bad fan");
    assert_eq!(value["last_seen"], serde_json::Value::Null);
    assert_eq!(value["gpus_out_of_service"], serde_json::json!([]));
    assert_eq!(value["gpus"][0]["in_service"], true);
}

/// `busy_node` with GPU 1 (held by job 17, being stopped) and GPU 5 out of service.
fn node_with_outages() -> NodeInfo {
    let mut node = busy_node();
    node.gpus_out_of_service = vec![
        GpuOutage {
            index: 1,
            reason: "XID 79: GPU has fallen off the bus".into(),
            since_ms: 1_767_225_660_000,
            by: "noded health".into(),
        },
        GpuOutage {
            index: 5,
            reason: "fan\nnoise".into(),
            since_ms: 1_767_225_600_000,
            by: "root".into(),
        },
    ];
    node
}

#[test]
fn gpus_out_of_service_are_counted_listed_and_in_json() {
    let node = node_with_outages();
    assert_eq!(gpu_summary(&node), "8x A100-SXM4-80GB (2 out)");
    // 0 and 1 held, 5 out of service.
    assert_eq!(free_gpus(&node), 5);
    let out = format_nodes_table(std::slice::from_ref(&node), false);
    let row = out.lines().nth(1).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[2..7],
        ["8x", "A100-SXM4-80GB", "(2", "out)", "5"],
        "{out}"
    );
    assert!(row.ends_with("gpu1,gpu5 out of service"), "{out}");
    let mut one = node.clone();
    one.gpus_out_of_service.remove(1);
    let out = format_nodes_table(std::slice::from_ref(&one), false);
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .ends_with("gpu1: XID 79: GPU has fallen off the bus"),
        "{out}"
    );
    // A drain reason comes first.
    one.reason = "bad fan".into();
    let out = format_nodes_table(std::slice::from_ref(&one), false);
    assert!(out.lines().nth(1).unwrap().ends_with("bad fan"), "{out}");

    let lines = format_gpu_lines(&node);
    let lines: Vec<&str> = lines.lines().map(str::trim).collect();
    assert!(
        lines[1].ends_with("job 17, out of service: XID 79: GPU has fallen off the bus"),
        "{lines:?}"
    );
    assert!(
        lines[5].ends_with("out of service: fan\\nnoise"),
        "{lines:?}"
    );
    assert!(lines[6].ends_with("idle"), "{lines:?}");

    assert_eq!(
        format_outages(&node),
        "GPUs out of service (yctl resume NODE --gpu N returns one):\n    \
             gpu1  since 2026-01-01T00:01:00Z  by noded health: XID 79: GPU has fallen off \
             the bus\n    gpu5  since 2026-01-01T00:00:00Z  by root: fan\\nnoise\n"
    );
    assert_eq!(format_outages(&busy_node()), "");

    let value = serde_json::to_value(node_to_json(&node)).unwrap();
    assert_eq!(
        value["gpus_out_of_service"][0],
        serde_json::json!({
            "index": 1,
            "reason": "XID 79: GPU has fallen off the bus",
            "since": "2026-01-01T00:01:00Z",
            "since_ms": 1_767_225_660_000i64,
            "by": "noded health"
        })
    );
    assert_eq!(value["gpus"][1]["in_service"], false);
    assert_eq!(value["gpus"][1]["in_use"], true);
    assert_eq!(value["gpus"][2]["in_service"], true);
}
