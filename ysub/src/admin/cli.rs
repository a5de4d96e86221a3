//! The command line of `yctl`, and what it checks before it sends anything.

use super::check_drain_reason;
use crate::jobs::{flatten_targets, parse_single_target, parse_target_list, TargetList};
use anyhow::{anyhow, Result};
use clap::{Parser, Subcommand};
use ysched_common::JobTarget;

#[derive(Parser, Debug)]
#[command(
    name = "yctl",
    version,
    about = "Inspect and administer a ysched cluster"
)]
pub struct YctlCli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List nodes and their GPUs
    Nodes {
        /// Also list each GPU and the job holding it
        #[arg(short = 'l', long)]
        long: bool,
        #[arg(long)]
        json: bool,
        /// Print NODE's GPU matrix (NVLink and PCIe paths) as `nvidia-smi topo -m` does
        #[arg(long, value_name = "NODE", conflicts_with_all = ["long", "json"])]
        topology: Option<String>,
    },
    /// Stop scheduling new jobs on nodes (or, with --gpu, on GPUs of one node); running jobs
    /// finish
    Drain {
        #[arg(value_name = "NODE", required = true)]
        nodes: Vec<String>,
        /// Why (required)
        #[arg(long, required = true)]
        reason: String,
        /// Only these GPUs of the node (indices, comma-separated): taken out of service
        #[arg(long, value_name = "N[,N...]", value_delimiter = ',', num_args = 1)]
        gpu: Vec<u32>,
    },
    /// Return drained nodes to service (or, with --gpu, GPUs of one node out of service,
    /// whether they failed or were drained)
    Resume {
        #[arg(value_name = "NODE", required = true)]
        nodes: Vec<String>,
        /// Only these GPUs of the node (indices, comma-separated)
        #[arg(long, value_name = "N[,N...]", value_delimiter = ',', num_args = 1)]
        gpu: Vec<u32>,
    },
    /// Show everything about a job or a node
    Show {
        #[command(subcommand)]
        what: ShowCommand,
    },
    /// Keep pending jobs from starting
    Hold {
        /// Jobs (space- or comma-separated): `12` (a job, or every task of array 12), `12_7`
        /// (one task), `12_[1-5,9]` (some tasks)
        #[arg(value_name = "JOBID", required = true, value_parser = parse_target_list)]
        jobs: Vec<TargetList>,
    },
    /// Let held jobs start again
    Release {
        /// Jobs (space- or comma-separated): `12` (a job, or every task of array 12), `12_7`
        /// (one task), `12_[1-5,9]` (some tasks)
        #[arg(value_name = "JOBID", required = true, value_parser = parse_target_list)]
        jobs: Vec<TargetList>,
    },
    /// Change a pending or held job (or an array's pending tasks), as `scontrol update`: its
    /// tier, time limit (only lower, unless you are an administrator), name, dependency, or
    /// hold it or release it
    Update(super::update::UpdateArgs),
    /// Stop running jobs (SIGTERM, SIGKILL after their grace) and queue them again, keeping
    /// their place in the queue; as `scontrol requeue`. Not for jobs submitted with --no-requeue
    Requeue {
        /// Jobs (space- or comma-separated): `12` (a job, or every task of array 12), `12_7`
        /// (one task), `12_[1-5,9]` (some tasks)
        #[arg(value_name = "JOBID", required = true, value_parser = parse_target_list)]
        jobs: Vec<TargetList>,
    },
    /// Usage per account, user or tier over a window (default: the last 7 days): GPU-hours,
    /// share of capacity, jobs, waits per tier, preemptions, checkpoints, work lost; the
    /// cluster's capacity, daily utilization and start latency. With --export-trace, the
    /// window's finished jobs as a CSV trace that `ysim --trace FILE` replays
    Report(crate::report::ReportArgs),
    /// Usage records: import runs recorded elsewhere
    Usage {
        #[command(subcommand)]
        command: crate::report::UsageCommand,
    },
    /// Fair share per account (like sshare): shares, raw and decayed GPU usage, normalised
    /// share, effective usage and the factor that orders jobs inside a tier
    Shares {
        #[arg(long)]
        json: bool,
    },
    /// Show schedd's replicas (scheduler.replicas): each one's role, term, log and lag
    /// behind the leader, as the replica that answers sees them. Any replica answers,
    /// followers too, with or without a quorum
    Cluster {
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        change: Option<super::cluster::ClusterCommand>,
    },
    /// Hosts' own credentials: enrol a host (a one-time token for its agent), revoke one,
    /// list them
    Node {
        #[command(subcommand)]
        command: super::hosts::NodeCommand,
    },
    /// Show the audit log, newest first: refused submits, preemptions, cancels, holds,
    /// requeues, drains
    Audit {
        /// Only the newest N entries [default: all]
        #[arg(short = 'n', long, value_name = "N")]
        limit: Option<u32>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ShowCommand {
    /// A job: its request, state, allocation and event history
    Job {
        /// The job: `12`, or `12_7` for task 7 of array 12
        #[arg(value_name = "JOBID", value_parser = parse_single_target)]
        job: JobTarget,
        #[arg(long)]
        json: bool,
    },
    /// A node and its GPUs
    Node {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

/// What `yctl` checks before it sends anything: drain reasons, node names and job lists
/// within their limits (`ysched_common::limits`), as schedd checks them.
pub fn check_limits(command: &Command) -> Result<()> {
    use ysched_common::limits::NODE_NAME;
    let node_names = |nodes: &[String]| -> Result<()> {
        for name in nodes {
            NODE_NAME.check_len(name).map_err(|e| anyhow!(e))?;
        }
        Ok(())
    };
    let gpus = |nodes: &[String], gpus: &[u32]| -> Result<()> {
        if gpus.is_empty() {
            return Ok(());
        }
        if nodes.len() != 1 {
            return Err(anyhow!(
                "--gpu names GPUs of one node; give exactly one NODE"
            ));
        }
        ysched_common::limits::GPUS_NAMED
            .check_count(gpus.len() as u64)
            .map_err(|e| anyhow!(e))
    };
    match command {
        Command::Drain { reason, nodes, gpu } => {
            check_drain_reason(reason)?;
            gpus(nodes, gpu)?;
            node_names(nodes)
        }
        Command::Resume { nodes, gpu } => {
            gpus(nodes, gpu)?;
            node_names(nodes)
        }
        Command::Show {
            what: ShowCommand::Node { name, .. },
        } => node_names(std::slice::from_ref(name)),
        Command::Hold { jobs } | Command::Release { jobs } | Command::Requeue { jobs } => {
            crate::jobs::check_target_count(&flatten_targets(jobs))
        }
        Command::Update(args) => super::update::update_request(args).map(|_| ()),
        Command::Node {
            command: super::hosts::NodeCommand::Revoke { name },
        } => node_names(std::slice::from_ref(name)),
        _ => Ok(()),
    }
}
