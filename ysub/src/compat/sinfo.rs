//! `sinfo`: the nodes as one Slurm partition, `ysched`, grouped by state, or one line per
//! node (`-N`), in Slurm's columns and `%` codes.

use crate::client::{self, reply};
use crate::nodes::gpu_model_counts;
use crate::slurm::compress_hostlist;
use crate::slurm::format::{parse_percent_format, render_line, Piece};
use crate::slurm::words::{node_state, parse_node_states};
use anyhow::{anyhow, Result};
use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;
use ysched_proto::{ListNodesRequest, NodeInfo};

/// The one partition sinfo shows: every node of the cluster (tiers are priorities, not sets of
/// nodes), marked as the default one.
pub const PARTITION: &str = "ysched";

/// sinfo's default format, partition-oriented.
pub const DEFAULT_FORMAT: &str = "%9P %.5a %.10l %.6D %.6t %N";
/// sinfo's default format with `-N`, node-oriented.
pub const NODE_FORMAT: &str = "%N %.6D %9P %.6t";

const CODES: [char; 12] = ['n', 'N', 'P', 'a', 'T', 't', 'G', 'C', 'm', 'c', 'l', 'D'];

#[derive(Parser, Debug)]
#[command(
    name = "sinfo",
    about = "Slurm's sinfo on ysched: the nodes as one partition",
    disable_version_flag = true,
    disable_help_flag = true
)]
pub struct SinfoCli {
    /// One line per node
    #[arg(short = 'N', long = "Node")]
    pub node: bool,
    /// Leave out the header
    #[arg(short = 'h', long)]
    pub noheader: bool,
    /// Columns as `%` codes: %n %N %P %a %T %t %G %C %m %c %l %D
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Only this partition (there is one: ysched)
    #[arg(short = 'p', long, value_name = "PARTITION")]
    pub partition: Option<String>,
    /// Only nodes in these states (idle, mix, alloc, drng, drain, down; comma list)
    #[arg(short = 't', long = "states", value_name = "STATES")]
    pub states: Option<String>,
    /// Only these nodes (comma list)
    #[arg(short = 'n', long = "nodes", value_name = "NODES")]
    pub nodes: Option<String>,
    /// Every partition (the default here)
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// The `sinfo` command.
pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::args::parse_args_from::<SinfoCli>("sinfo", args) {
        Ok(cli) => client::run_tool("sinfo", || run(cli)),
        Err(code) => code,
    }
}

/// The columns asked for.
pub fn pieces(cli: &SinfoCli) -> Result<Vec<Piece>> {
    let format = match (&cli.format, cli.node) {
        (Some(format), _) => format.as_str(),
        (None, true) => NODE_FORMAT,
        (None, false) => DEFAULT_FORMAT,
    };
    parse_percent_format(format, &CODES).map_err(|e| anyhow!(e))
}

/// `gpu:MODEL:N` per model, comma-joined, or `(null)` without GPUs.
fn gres(node: &NodeInfo) -> String {
    let counts = gpu_model_counts(node);
    if counts.is_empty() {
        return "(null)".into();
    }
    counts
        .iter()
        .map(|(model, n)| {
            if model.is_empty() {
                format!("gpu:{n}")
            } else {
                format!("gpu:{model}:{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The value of `code` for a group of nodes that share every other field.
fn field(nodes: &[&NodeInfo], code: char) -> String {
    let first = nodes[0];
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    match code {
        'n' | 'N' => compress_hostlist(&names),
        'P' => format!("{PARTITION}*"),
        'a' => "up".into(),
        'T' => node_state(&first.state).long.into(),
        't' => node_state(&first.state).short.into(),
        'G' => gres(first),
        'C' => {
            let (alloc, total) = nodes.iter().fold((0u64, 0u64), |(a, t), n| {
                (a + u64::from(n.cpus_alloc), t + u64::from(n.cpus))
            });
            // Allocated/idle/other/total; a node out of service has all its CPUs as other.
            let out: u64 = nodes
                .iter()
                .filter(|n| matches!(n.state.as_str(), "DRAINED" | "DOWN"))
                .map(|n| u64::from(n.cpus.saturating_sub(n.cpus_alloc)))
                .sum();
            let idle = total.saturating_sub(alloc).saturating_sub(out);
            format!("{alloc}/{idle}/{out}/{total}")
        }
        'm' => first.mem_mib.to_string(),
        'c' => first.cpus.to_string(),
        'l' => "infinite".into(),
        'D' => nodes.len().to_string(),
        _ => String::new(),
    }
}

fn header(code: char) -> &'static str {
    match code {
        'n' => "HOSTNAMES",
        'N' => "NODELIST",
        'P' => "PARTITION",
        'a' => "AVAIL",
        'T' | 't' => "STATE",
        'G' => "GRES",
        'C' => "CPUS(A/I/O/T)",
        'm' => "MEMORY",
        'c' => "CPUS",
        'l' => "TIMELIMIT",
        'D' => "NODES",
        _ => "",
    }
}

/// The table: one line per node with `-N`, else nodes grouped by every field the format
/// shows but the node names and counts (sinfo's grouping).
pub fn format_nodes(
    pieces: &[Piece],
    nodes: &[NodeInfo],
    per_node: bool,
    noheader: bool,
) -> String {
    let mut out = String::new();
    if !noheader {
        out.push_str(&render_line(pieces, |code| header(code).to_string()));
        out.push('\n');
    }
    let mut groups: Vec<(String, Vec<&NodeInfo>)> = Vec::new();
    for node in nodes {
        if per_node {
            groups.push((String::new(), vec![node]));
            continue;
        }
        let key = render_line(pieces, |code| match code {
            'n' | 'N' | 'D' | 'C' => String::new(),
            code => field(&[node], code),
        });
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(node),
            None => groups.push((key, vec![node])),
        }
    }
    for (_, members) in &groups {
        out.push_str(&render_line(pieces, |code| field(members, code)));
        out.push('\n');
    }
    out
}

/// Whether a node passes the filters.
pub fn wanted(cli: &SinfoCli, node: &NodeInfo) -> Result<bool> {
    if let Some(partition) = &cli.partition {
        if !partition.split(',').any(|p| p.trim() == PARTITION) {
            return Ok(false);
        }
    }
    if let Some(names) = &cli.nodes {
        if !names.split(',').any(|n| n.trim() == node.name) {
            return Ok(false);
        }
    }
    if let Some(states) = &cli.states {
        let wanted = parse_node_states(states).map_err(|e| anyhow!(e))?;
        if !wanted.contains(&node_state(&node.state).short) {
            return Ok(false);
        }
    }
    Ok(true)
}

pub async fn run(cli: SinfoCli) -> Result<ExitCode> {
    let pieces = pieces(&cli)?;
    let (mut client, _) = client::connect_from_config().await?;
    let mut nodes = reply(client.list_nodes(ListNodesRequest {}).await)?.nodes;
    let mut kept = Vec::with_capacity(nodes.len());
    for node in nodes.drain(..) {
        if wanted(&cli, &node)? {
            kept.push(node);
        }
    }
    crate::output::print_stdout(&format_nodes(&pieces, &kept, cli.node, cli.noheader))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ysched_proto::Gpu;

    fn cli(args: &[&str]) -> SinfoCli {
        SinfoCli::try_parse_from(std::iter::once("sinfo").chain(args.iter().copied())).unwrap()
    }

    fn node(name: &str, state: &str, gpus: u32) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            state: state.into(),
            cpus: 32,
            cpus_alloc: if state == "IDLE" { 0 } else { 8 },
            mem_mib: 256_000,
            gpus: (0..gpus)
                .map(|index| Gpu {
                    index,
                    model: "NVIDIA A100".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn nodes_are_grouped_by_state_in_one_partition() {
        let nodes = [
            node("n1", "IDLE", 8),
            node("n2", "MIXED", 8),
            node("n3", "IDLE", 8),
            node("n4", "DRAINED", 8),
        ];
        let text = format_nodes(&pieces(&cli(&[])).unwrap(), &nodes, false, false);
        assert_eq!(
            text,
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
             ysched*      up   infinite      2   idle n[1,3]\n\
             ysched*      up   infinite      1    mix n2\n\
             ysched*      up   infinite      1  drain n4\n"
        );
        let text = format_nodes(
            &pieces(&cli(&["-N", "-h"])).unwrap(),
            &nodes[..2],
            true,
            true,
        );
        assert_eq!(
            text,
            "n1      1 ysched*     idle\nn2      1 ysched*      mix\n"
        );
        let text = format_nodes(
            &pieces(&cli(&["-o", "%n %G %C %c %m %T"])).unwrap(),
            &nodes[1..2],
            true,
            true,
        );
        assert_eq!(text, "n2 gpu:A100:8 8/24/0/32 32 256000 mixed\n");
    }

    #[test]
    fn filters() {
        let n = node("n1", "IDLE", 0);
        assert!(wanted(&cli(&["-p", "ysched", "-t", "idle,mix"]), &n).unwrap());
        assert!(!wanted(&cli(&["-p", "gpu"]), &n).unwrap());
        assert!(!wanted(&cli(&["-t", "alloc"]), &n).unwrap());
        assert!(!wanted(&cli(&["-n", "n2"]), &n).unwrap());
        assert!(wanted(&cli(&["-t", "bogus"]), &n).is_err());
        assert_eq!(gres(&n), "(null)");
    }
}
