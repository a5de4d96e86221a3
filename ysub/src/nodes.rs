//! How nodes are shown by `yctl nodes` and `yctl show node`: a sinfo-like table with optional
//! per-GPU lines, the GPU topology matrix, and JSON.

use crate::output::{cell_num, format_mib, Column, Table};
use serde::Serialize;
use std::borrow::Cow;
use std::fmt::Write as _;
use ysched_common::text::escape_for_terminal;
use ysched_common::time::rfc3339;
use ysched_common::topo_matrix::format_topo_matrix;
use ysched_common::Gpu;
use ysched_proto::{GpuOutage, NodeInfo};

/// A GPU model without its vendor word: `NVIDIA A100-SXM4-80GB` → `A100-SXM4-80GB`.
pub fn short_model(model: &str) -> &str {
    let model = model.trim();
    match model.split_once(' ') {
        Some((vendor, rest))
            if ["nvidia", "amd", "intel"].contains(&vendor.to_ascii_lowercase().as_str()) =>
        {
            rest.trim_start()
        }
        _ => model,
    }
}

/// The node's GPUs by model, in order of first appearance: `8x A100-SXM4-80GB`, or
/// `4x A100-SXM4-80GB,4x H100` on a mixed node, `0` without GPUs; with how many are out of
/// service when some are: `8x A100-SXM4-80GB (1 out)`.
pub fn gpu_summary(node: &NodeInfo) -> String {
    let mut summary = gpu_models(node);
    let out = gpus_out(node);
    if out > 0 {
        let _ = write!(summary, " ({out} out)");
    }
    summary
}

/// The outage of GPU `index` of the node, if it is out of service.
pub fn gpu_outage(node: &NodeInfo, index: u32) -> Option<&GpuOutage> {
    node.gpus_out_of_service.iter().find(|o| o.index == index)
}

/// How many of the node's GPUs are out of service.
pub fn gpus_out(node: &NodeInfo) -> usize {
    node.gpus
        .iter()
        .filter(|g| gpu_outage(node, g.index).is_some())
        .count()
}

fn gpu_models(node: &NodeInfo) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for gpu in &node.gpus {
        let model = short_model(&gpu.model);
        match counts.iter_mut().find(|(m, _)| *m == model) {
            Some((_, n)) => *n += 1,
            None => counts.push((model, 1)),
        }
    }
    if counts.is_empty() {
        return "0".into();
    }
    let mut out = String::new();
    for (i, (model, n)) in counts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{n}x {}",
            if model.is_empty() { "unknown" } else { model }
        );
    }
    out
}

/// Who holds a GPU that is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Job(u64),
    /// A job whose usage is not the caller's to see (`scheduler.reports_public = false`).
    Private,
}

/// Who holds GPU `position` of the node (by position in `gpus`); `None`: it is idle.
fn gpu_holder(node: &NodeInfo, position: usize) -> Option<Holder> {
    match node.gpu_holders.get(position).copied() {
        None | Some(0) => None,
        Some(ysched_proto::PRIVATE_HOLDER) => Some(Holder::Private),
        Some(job) => Some(Holder::Job(job)),
    }
}

/// GPUs that are idle and in service: what a job could get now.
pub fn free_gpus(node: &NodeInfo) -> usize {
    node.gpus
        .iter()
        .enumerate()
        .filter(|(i, g)| gpu_holder(node, *i).is_none() && gpu_outage(node, g.index).is_none())
        .count()
}

pub const NODE_COLUMNS: &[Column; 8] = &[
    Column::left("NAME"),
    Column::left("STATE"),
    Column::left("GPUS"),
    Column::right("FREE"),
    Column::right("CPUS"),
    Column::right("MEM"),
    Column::left("FEATURES"),
    Column::left("REASON"),
];

/// The `yctl nodes` table: one row per node (CPUS and MEM as allocated/total, FEATURES
/// comma-separated or `-`, what `--constraint` matches against); with `long`,
/// each node's row is followed by one line per GPU: `gpu0 <model> job 17` or `... idle`.
pub fn format_nodes_table(nodes: &[NodeInfo], long: bool) -> String {
    let mut table = Table::with_capacity(NODE_COLUMNS, nodes.len());
    for node in nodes {
        table.push_row(node_row(node));
    }
    let mut rendered = String::new();
    table.render(&mut rendered, true);
    if !long {
        return rendered;
    }
    // Interleave: header, then each node's row followed by its GPU lines.
    let mut out = String::with_capacity(rendered.len() * 2);
    let mut rows = rendered.lines();
    if let Some(header) = rows.next() {
        out.push_str(header);
        out.push('\n');
    }
    for (node, row) in nodes.iter().zip(rows) {
        out.push_str(row);
        out.push('\n');
        out.push_str(&format_gpu_lines(node));
    }
    out
}

fn node_row(node: &NodeInfo) -> [Cow<'_, str>; 8] {
    // Names, models, features and reasons come from agents and admins: escape them.
    let escaped = |text: String| match escape_for_terminal(&text) {
        Cow::Borrowed(_) => Cow::Owned(text),
        Cow::Owned(escaped) => Cow::Owned(escaped),
    };
    [
        escape_for_terminal(&node.name),
        escape_for_terminal(&node.state),
        escaped(gpu_summary(node)),
        cell_num(free_gpus(node)),
        Cow::Owned(format!("{}/{}", node.cpus_alloc, node.cpus)),
        Cow::Owned(format!(
            "{}/{}",
            format_mib(node.mem_alloc_mib),
            format_mib(node.mem_mib)
        )),
        if node.features.is_empty() {
            Cow::Borrowed("-")
        } else {
            escaped(node.features.join(","))
        },
        if node.reason.is_empty() && !node.gpus_out_of_service.is_empty() {
            escaped(outages_in_brief(node))
        } else {
            escape_for_terminal(&node.reason)
        },
    ]
}

/// The REASON of a node that is not drained but has GPUs out of service: `gpu3: XID 79: …`,
/// `gpu3,gpu5 out of service` for several.
fn outages_in_brief(node: &NodeInfo) -> String {
    match node.gpus_out_of_service.as_slice() {
        [one] => format!("gpu{}: {}", one.index, one.reason),
        many => {
            let names: Vec<String> = many.iter().map(|o| format!("gpu{}", o.index)).collect();
            format!("{} out of service", names.join(","))
        }
    }
}

const GPU_COLUMNS: &[Column; 3] = &[
    Column::left("GPU"),
    Column::left("MODEL"),
    Column::left("USE"),
];

/// One indented line per GPU of the node: `  gpu0  A100-SXM4-80GB  job 17` or `... idle`;
/// a GPU out of service says so and why: `... out of service: XID 79: …` (`job 17, out of
/// service: …` while its job is being stopped).
pub fn format_gpu_lines(node: &NodeInfo) -> String {
    let mut table = Table::with_capacity(GPU_COLUMNS, node.gpus.len());
    for (position, gpu) in node.gpus.iter().enumerate() {
        let holder = match gpu_holder(node, position) {
            Some(Holder::Job(job)) => Some(Cow::Owned(format!("job {job}"))),
            Some(Holder::Private) => Some(Cow::Borrowed("in use")),
            None => None,
        };
        let usage = match (holder, gpu_outage(node, gpu.index)) {
            (Some(holder), None) => holder,
            (None, None) => Cow::Borrowed("idle"),
            (None, Some(outage)) => Cow::Owned(format!(
                "out of service: {}",
                escape_for_terminal(&outage.reason)
            )),
            (Some(holder), Some(outage)) => Cow::Owned(format!(
                "{holder}, out of service: {}",
                escape_for_terminal(&outage.reason)
            )),
        };
        table.push_row([
            Cow::Owned(format!("gpu{}", gpu.index)),
            escape_for_terminal(short_model(&gpu.model)),
            usage,
        ]);
    }
    let mut rendered = String::new();
    table.render(&mut rendered, false);
    let mut out = String::with_capacity(rendered.len() + 4 * node.gpus.len());
    for line in rendered.lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `yctl show node`'s list of the GPUs out of service, one line each with since when, who
/// took it out (`noded health`: its node found it failing) and why; empty when none is.
pub fn format_outages(node: &NodeInfo) -> String {
    if node.gpus_out_of_service.is_empty() {
        return String::new();
    }
    let mut out = String::from("GPUs out of service (yctl resume NODE --gpu N returns one):\n");
    for outage in &node.gpus_out_of_service {
        let _ = writeln!(
            out,
            "    gpu{}  since {}  by {}: {}",
            outage.index,
            rfc3339(outage.since_ms),
            escape_for_terminal(&outage.by),
            escape_for_terminal(&outage.reason)
        );
    }
    out
}

/// `yctl nodes --topology`: the node's GPU matrix as `nvidia-smi topo -m` prints it, from
/// what its agent reported.
pub fn format_node_topology(node: &NodeInfo) -> String {
    if node.gpus.is_empty() {
        return format!("Node {} has no GPUs.\n", escape_for_terminal(&node.name));
    }
    let gpus: Vec<Gpu> = node.gpus.iter().map(Gpu::from).collect();
    format_topo_matrix(&gpus)
}

#[derive(Debug, Serialize)]
pub struct GpuJson<'a> {
    pub index: u32,
    pub uuid: &'a str,
    pub model: &'a str,
    pub memory_mib: u64,
    pub pci_bus_id: &'a str,
    /// Null when unknown.
    pub numa_node: Option<i32>,
    pub nvlink: &'a [u32],
    /// How it reaches each other GPU of the node; empty when the agent did not say.
    pub links: Vec<GpuLinkJson<'a>>,
    /// The job holding it; null when idle, or when that job's usage is not the caller's to
    /// see (`scheduler.reports_public = false`).
    pub job: Option<u64>,
    /// Held by a job (`job` may still be null, see there).
    pub in_use: bool,
    /// Not out of service (see the node's `gpus_out_of_service`).
    pub in_service: bool,
}

/// A GPU out of service.
#[derive(Debug, Serialize)]
pub struct GpuOutageJson<'a> {
    pub index: u32,
    pub reason: &'a str,
    /// RFC 3339.
    pub since: String,
    pub since_ms: i64,
    /// `noded health` (its node found it failing) or the administrator who took it out.
    pub by: &'a str,
}

#[derive(Debug, Serialize)]
pub struct GpuLinkJson<'a> {
    pub peer: u32,
    /// PIX, PXB, PHB, NODE or SYS.
    pub pcie: &'a str,
    /// NVLink links between the two; 0: none.
    pub nvlinks: u32,
}

#[derive(Debug, Serialize)]
pub struct NodeJson<'a> {
    pub name: &'a str,
    pub state: &'a str,
    pub address: &'a str,
    pub cpus: u32,
    pub cpus_alloc: u32,
    pub mem_mib: u64,
    pub mem_alloc_mib: u64,
    pub features: &'a [String],
    pub reason: &'a str,
    /// RFC 3339; null when never seen.
    pub last_seen: Option<String>,
    /// The node stops its jobs after this long without schedd; 0: it never does.
    pub fence_after_secs: u32,
    pub gpus: Vec<GpuJson<'a>>,
    /// No new job gets these until an administrator returns them.
    pub gpus_out_of_service: Vec<GpuOutageJson<'a>>,
}

pub fn node_to_json(node: &NodeInfo) -> NodeJson<'_> {
    NodeJson {
        name: &node.name,
        state: &node.state,
        address: &node.address,
        cpus: node.cpus,
        cpus_alloc: node.cpus_alloc,
        mem_mib: node.mem_mib,
        mem_alloc_mib: node.mem_alloc_mib,
        features: &node.features,
        reason: &node.reason,
        last_seen: (node.last_seen_ms > 0).then(|| rfc3339(node.last_seen_ms)),
        fence_after_secs: node.fence_after_secs,
        gpus: node
            .gpus
            .iter()
            .enumerate()
            .map(|(position, gpu)| GpuJson {
                index: gpu.index,
                uuid: &gpu.uuid,
                model: &gpu.model,
                memory_mib: gpu.memory_mib,
                pci_bus_id: &gpu.pci_bus_id,
                numa_node: (gpu.numa_node >= 0).then_some(gpu.numa_node),
                nvlink: &gpu.nvlink,
                links: gpu
                    .links
                    .iter()
                    .map(|l| GpuLinkJson {
                        peer: l.peer,
                        pcie: &l.pcie,
                        nvlinks: l.nvlinks,
                    })
                    .collect(),
                job: match gpu_holder(node, position) {
                    Some(Holder::Job(job)) => Some(job),
                    _ => None,
                },
                in_use: gpu_holder(node, position).is_some(),
                in_service: gpu_outage(node, gpu.index).is_none(),
            })
            .collect(),
        gpus_out_of_service: node
            .gpus_out_of_service
            .iter()
            .map(|o| GpuOutageJson {
                index: o.index,
                reason: &o.reason,
                since: rfc3339(o.since_ms),
                since_ms: o.since_ms,
                by: &o.by,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
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
}
