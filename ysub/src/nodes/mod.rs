//! How nodes are shown by `yctl nodes` and `yctl show node`: a sinfo-like table with optional
//! per-GPU lines, the GPU topology matrix, and JSON.
//! The JSON is in [`json`].

mod json;

pub use json::{node_to_json, GpuJson, GpuLinkJson, GpuOutageJson, NodeJson};

use crate::output::{cell_num, format_mib, Column, Table};

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

/// A node's GPUs per model (short names, as `short_model`), in the order first seen.
pub fn gpu_model_counts(node: &NodeInfo) -> Vec<(&str, usize)> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for gpu in &node.gpus {
        let model = short_model(&gpu.model);
        match counts.iter_mut().find(|(m, _)| *m == model) {
            Some((_, n)) => *n += 1,
            None => counts.push((model, 1)),
        }
    }
    counts
}

fn gpu_models(node: &NodeInfo) -> String {
    let counts = gpu_model_counts(node);
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

#[cfg(test)]
mod tests;
