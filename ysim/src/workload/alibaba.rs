//! The Alibaba GPU cluster trace v2023 ("openb", Weng et al., USENIX ATC '23): its 1,523
//! nodes and 8,152 tasks, mapped onto ysched.
//!
//! **Mapping** (also in `docs/simulation.md`):
//! - nodes: `openb_node_list_all_node.csv` as they are (CPU-only nodes included, with no
//!   GPU); the trace has no topology, so no NVLink is assumed;
//! - tasks: `openb_pod_list_gpuspec33.csv` (with `gpu_spec` model constraints as
//!   `--gpu-type`), or `openb_pod_list_default.csv` without constraints;
//! - QoS to tier: `LS` -> `high`, `Guaranteed` and `Burstable` -> `medium`, `BE` -> `low`;
//!   the account (team) is the QoS class, since the trace has no user or team column;
//! - a fractional-GPU task (`gpu_milli` < 1000) asks for one whole GPU (rounded up): ysched
//!   does not share GPUs;
//! - duration: `deletion_time - scheduled_time`; tasks that never ran in the trace (`Pending`,
//!   no `scheduled_time`) have no duration and are left out;
//! - submit: `creation_time / compress`: `--compress N` divides inter-arrival times to create
//!   contention (the trace's cluster is mostly idle: its peak load is about 1 % of its GPUs);
//! - checkpoints: the trace has none, so each task gets the factory's training-run profile
//!   ([`super::factory::checkpoint_profile`]), drawn from the seed.

use super::csv::records;
use super::factory::checkpoint_profile;
use super::{SimJob, SimNode, Workload, SEC};
use crate::rng::Rng;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where the trace lies in this project's checkout (`../shared/traces/...` from the
/// workspace).
pub const DEFAULT_DIR: &str = "../shared/traces/alibaba-gpu-v2023";

/// Where to get the trace, which the repository does not ship (its licence is unclear).
const WHERE_TO_GET_IT: &str = "the Alibaba trace is not part of ysched: download \
    cluster-trace-gpu-v2023/csv/ (openb_node_list_all_node.csv, openb_pod_list_gpuspec33.csv, \
    openb_pod_list_default.csv) from https://github.com/alibaba/clusterdata into DIR/csv/ and \
    pass --trace-dir DIR; or try the sample shipped with ysim: --trace ysim/samples/week.csv \
    --cluster ysim/samples/nodes.csv";

/// Reads one of the trace's files, saying where to get the trace when it is not there.
fn read_trace_file(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "cannot read {}: not found; {WHERE_TO_GET_IT}",
                path.display()
            )
        }
        read => read.with_context(|| format!("cannot read {} (see --trace-dir)", path.display())),
    }
}

/// QoS class -> tier.
pub const QOS_TIERS: [(&str, &str); 4] = [
    ("LS", "high"),
    ("Guaranteed", "medium"),
    ("Burstable", "medium"),
    ("BE", "low"),
];

#[derive(Debug, Clone)]
pub struct Options {
    /// The trace's folder (holding `csv/`).
    pub dir: PathBuf,
    /// Inter-arrival times are divided by this (1: as recorded).
    pub compress: f64,
    /// Use `gpu_spec` model constraints (the `gpuspec33` task list).
    pub constraints: bool,
    /// Keep this fraction (0 to 1] of the nodes of each shape (GPU model and count), at least
    /// one of each: a smaller cluster for the same tasks.
    pub cluster_scale: f64,
    pub seed: u64,
}

/// The tier of a QoS class.
pub fn tier_of(qos: &str) -> Option<&'static str> {
    QOS_TIERS.iter().find(|(q, _)| *q == qos).map(|(_, t)| *t)
}

fn field<'a>(row: &'a std::collections::BTreeMap<String, String>, col: &str) -> &'a str {
    row.get(col).map_or("", String::as_str)
}

fn number(row: &std::collections::BTreeMap<String, String>, col: &str) -> Result<i64> {
    let v = field(row, col);
    v.parse()
        .map_err(|_| anyhow!("{col} '{v}' is not a whole number"))
}

/// The trace's nodes.
pub fn read_nodes(dir: &Path) -> Result<Vec<SimNode>> {
    let path = dir.join("csv/openb_node_list_all_node.csv");
    let text = read_trace_file(&path)?;
    let mut nodes = Vec::new();
    for (no, row) in records(&text)? {
        let at = || format!("{} line {no}", path.display());
        let gpus = number(&row, "gpu").with_context(at)? as u32;
        nodes.push(SimNode {
            name: field(&row, "sn").to_string(),
            gpus,
            model: match field(&row, "model") {
                "" => "none".to_string(),
                m => m.to_string(),
            },
            nvlink: false,
            cpus: (number(&row, "cpu_milli").with_context(at)? / 1000) as u32,
            mem_mib: number(&row, "memory_mib").with_context(at)? as u64,
        });
    }
    if nodes.is_empty() {
        bail!("{}: no nodes", path.display());
    }
    Ok(nodes)
}

/// The first `scale` of the nodes of each shape (GPU model and count), rounded up: every
/// shape keeps at least one node, so every task that fitted somewhere still does.
pub fn scale_cluster(nodes: &[SimNode], scale: f64) -> Vec<SimNode> {
    let mut shapes: std::collections::BTreeMap<(&str, u32), usize> = Default::default();
    for n in nodes {
        *shapes.entry((n.model.as_str(), n.gpus)).or_default() += 1;
    }
    let keep: std::collections::BTreeMap<(&str, u32), usize> = shapes
        .into_iter()
        .map(|(shape, count)| (shape, ((count as f64 * scale).ceil() as usize).max(1)))
        .collect();
    let mut taken: std::collections::BTreeMap<(&str, u32), usize> = Default::default();
    nodes
        .iter()
        .filter(|n| {
            let shape = (n.model.as_str(), n.gpus);
            let t = taken.entry(shape).or_default();
            *t += 1;
            *t <= keep[&shape]
        })
        .cloned()
        .collect()
}

/// The trace as a workload.
pub fn load(opts: &Options) -> Result<Workload> {
    if !(opts.compress >= 1.0 && opts.compress.is_finite()) {
        bail!("--compress must be at least 1");
    }
    if !(opts.cluster_scale > 0.0 && opts.cluster_scale <= 1.0) {
        bail!("--cluster-scale must be above 0 and at most 1");
    }
    let all_nodes = read_nodes(&opts.dir)?;
    let nodes = scale_cluster(&all_nodes, opts.cluster_scale);
    let file = if opts.constraints {
        "openb_pod_list_gpuspec33.csv"
    } else {
        "openb_pod_list_default.csv"
    };
    let path = opts.dir.join("csv").join(file);
    let text = read_trace_file(&path)?;
    let rng = Rng::new(opts.seed).fork(0xA11BABA);
    let (mut tasks, mut unscheduled, mut fractional, mut constrained) = (0, 0, 0, 0);
    let mut jobs = Vec::new();
    for (no, row) in records(&text)? {
        let at = || format!("{} line {no}", path.display());
        tasks += 1;
        let name = field(&row, "name").to_string();
        if field(&row, "scheduled_time").is_empty() {
            unscheduled += 1;
            continue;
        }
        let qos = field(&row, "qos");
        let tier = tier_of(qos).ok_or_else(|| anyhow!("{}: unknown qos '{qos}'", at()))?;
        let created = number(&row, "creation_time").with_context(at)?;
        let scheduled = number(&row, "scheduled_time").with_context(at)?;
        let deleted = number(&row, "deletion_time").with_context(at)?;
        let mut gpus = number(&row, "num_gpu").with_context(at)? as u32;
        let milli = number(&row, "gpu_milli").with_context(at)?;
        if gpus == 1 && milli < 1000 {
            fractional += 1;
        }
        if gpus == 0 && milli > 0 {
            fractional += 1;
            gpus = 1;
        }
        let gpu_types: Vec<String> = field(&row, "gpu_spec")
            .split('|')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if !gpu_types.is_empty() {
            constrained += 1;
        }
        let mut r = rng.fork(no as u64);
        let profile = checkpoint_profile(&mut r);
        jobs.push(SimJob {
            name,
            submit_ms: (created as f64 * 1000.0 / opts.compress).round() as i64,
            tier: tier.to_string(),
            account: qos.to_ascii_lowercase(),
            user: format!("{}-user", qos.to_ascii_lowercase()),
            gpus,
            nodes: 1,
            gpu_types: if gpus > 0 { gpu_types } else { Vec::new() },
            cpus: (number(&row, "cpu_milli").with_context(at)? as u64)
                .div_ceil(1000)
                .max(1) as u32,
            mem_mib: number(&row, "memory_mib").with_context(at)? as u64,
            duration_ms: ((deleted - scheduled) * 1000).max(SEC),
            time_limit_secs: None,
            checkpoint_interval_ms: profile.interval_ms,
            checkpoint_write_ms: profile.write_ms,
            grace_secs: profile.grace_secs,
        });
    }
    let gpus: u64 = nodes.iter().map(|n| u64::from(n.gpus)).sum();
    let mut w = Workload {
        name: format!(
            "alibaba-gpu-v2023 ({}{}{})",
            if opts.constraints {
                "gpuspec33"
            } else {
                "default"
            },
            if opts.compress != 1.0 {
                format!(", compress {}", opts.compress)
            } else {
                String::new()
            },
            if opts.cluster_scale != 1.0 {
                format!(", cluster scale {}", opts.cluster_scale)
            } else {
                String::new()
            }
        ),
        notes: vec![
            format!(
                "{tasks} tasks read; {unscheduled} never ran in the trace (no scheduled_time, \
                 so no duration) and are left out: {} replayed on {} nodes with {gpus} GPUs",
                jobs.len(),
                nodes.len()
            ),
            "QoS -> tier: LS -> high, Guaranteed/Burstable -> medium, BE -> low; account = QoS \
             class (the trace has no team column)"
                .into(),
            format!(
                "{fractional} fractional-GPU tasks rounded up to one whole GPU; {constrained} \
                 tasks keep their gpu_spec model constraint"
            ),
            format!(
                "inter-arrival times divided by {} (--compress); durations as recorded \
                 (deletion - scheduled)",
                opts.compress
            ),
            "no checkpoint data in the trace: each task gets the factory's training-run \
             checkpoint profile (interval, write time, grace), drawn from the seed"
                .into(),
            "no time limits in the trace: backfill has nothing to plan with".into(),
        ],
        nodes,
        jobs,
        window_ms: 0,
        accounts: Default::default(),
    };
    if opts.cluster_scale != 1.0 {
        w.notes.push(format!(
            "cluster scaled by {} (--cluster-scale): {} of the trace's {} nodes, at least one \
             of each shape (GPU model and count)",
            opts.cluster_scale,
            w.nodes.len(),
            all_nodes.len()
        ));
    }
    w.finish(SEC);
    Ok(w)
}
