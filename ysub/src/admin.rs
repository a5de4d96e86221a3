//! `yctl`: cluster administration and inspection, like scontrol/sinfo.

use crate::client::{self, reply};
use crate::jobs::{
    flatten_targets, format_job_detail, job_detail_to_json, job_ref, parse_single_target,
    parse_target_list, TargetList,
};
use crate::nodes::{
    format_gpu_lines, format_node_topology, format_nodes_table, format_outages, node_to_json,
    NodeJson,
};
use crate::output::{print_json, print_stdout};
use crate::output::{Column, Table};
use crate::shares::{format_shares_table, shares_to_json};
use anyhow::{anyhow, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;
use std::borrow::Cow;
use std::process::ExitCode;
use ysched_common::text::{check_printable, escape_for_terminal};
use ysched_common::time::now_ms;
use ysched_common::time::rfc3339;
use ysched_common::JobTarget;
use ysched_proto::{
    AuditEntry, AuditRequest, DrainGpuRequest, DrainRequest, GpuResumed, ListNodesRequest,
    NodeInfo, NodeRef, ResumeGpuRequest, SharesRequest,
};

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

/// The `yctl` binary.
pub fn main() -> ExitCode {
    match client::parse_args::<YctlCli>("yctl") {
        Ok(cli) => client::run_tool("yctl", || run(cli)),
        Err(code) => code,
    }
}

pub async fn run(cli: YctlCli) -> Result<ExitCode> {
    check_limits(&cli.command)?;
    let (mut client, _) = client::connect_from_config().await?;
    match cli.command {
        Command::Nodes {
            topology: Some(name),
            ..
        } => {
            let nodes = reply(client.list_nodes(ListNodesRequest {}).await)?.nodes;
            print_stdout(&format_node_topology(find_node(&nodes, &name)?))?;
        }
        Command::Nodes {
            long,
            json,
            topology: None,
        } => {
            let nodes = reply(client.list_nodes(ListNodesRequest {}).await)?.nodes;
            if json {
                let objects: Vec<NodeJson> = nodes.iter().map(node_to_json).collect();
                print_json(&objects)?;
            } else {
                print_stdout(&format_nodes_table(&nodes, long))?;
            }
        }
        Command::Drain { nodes, reason, gpu } if !gpu.is_empty() => {
            let node = nodes.into_iter().next().unwrap_or_default();
            reply(
                client
                    .drain_gpu(DrainGpuRequest {
                        node,
                        gpus: gpu,
                        reason,
                    })
                    .await,
            )?;
        }
        Command::Resume { nodes, gpu } if !gpu.is_empty() => {
            let node = nodes.into_iter().next().unwrap_or_default();
            let resumed = reply(
                client
                    .resume_gpu(ResumeGpuRequest {
                        node: node.clone(),
                        gpus: gpu,
                    })
                    .await,
            )?;
            let (text, all_back) = format_gpu_resumes(&node, &resumed.gpus);
            print_stdout(&text)?;
            if !all_back {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Drain { nodes, reason, .. } => {
            for name in nodes {
                reply(
                    client
                        .drain(DrainRequest {
                            name,
                            reason: reason.clone(),
                        })
                        .await,
                )?;
            }
        }
        Command::Resume { nodes, .. } => {
            for name in nodes {
                reply(client.resume(NodeRef { name }).await)?;
            }
        }
        Command::Show {
            what: ShowCommand::Job { job, json },
        } => {
            let detail = reply(client.get_job(job_ref(&job)).await)?;
            let job = detail
                .job
                .as_ref()
                .ok_or_else(|| anyhow!("schedd sent no job for {job}"))?;
            if json {
                print_json(&job_detail_to_json(job, &detail.events, now_ms()))?;
            } else {
                print_stdout(&format_job_detail(&detail, now_ms()))?;
            }
        }
        Command::Show {
            what: ShowCommand::Node { name, json },
        } => {
            let nodes = reply(client.list_nodes(ListNodesRequest {}).await)?.nodes;
            let node = find_node(&nodes, &name)?;
            if json {
                print_json(&node_to_json(node))?;
            } else {
                let mut out = format_nodes_table(std::slice::from_ref(node), false);
                out.push_str(&match node.fence_after_secs {
                    0 => "Fence: off (a silent node's jobs end NODE_FAIL)\n".to_string(),
                    secs => format!(
                        "Fence: stops its jobs after {secs} s without schedd (then they may be \
                         requeued elsewhere)\n"
                    ),
                });
                out.push_str(&format_gpu_lines(node));
                out.push_str(&format_outages(node));
                print_stdout(&out)?;
            }
        }
        Command::Hold { jobs } => {
            for target in flatten_targets(&jobs) {
                reply(client.hold(job_ref(&target)).await)?;
            }
        }
        Command::Release { jobs } => {
            for target in flatten_targets(&jobs) {
                reply(client.release(job_ref(&target)).await)?;
            }
        }
        Command::Requeue { jobs } => {
            for target in flatten_targets(&jobs) {
                reply(client.requeue(job_ref(&target)).await)?;
            }
        }
        Command::Report(args) => crate::report::report(&mut client, &args).await?,
        Command::Usage {
            command: crate::report::UsageCommand::Import { file },
        } => crate::report::import(&mut client, &file).await?,
        Command::Shares { json } => {
            let list = reply(client.shares(SharesRequest {}).await)?;
            if json {
                print_json(&shares_to_json(&list))?;
            } else {
                print_stdout(&format_shares_table(&list))?;
            }
        }
        Command::Audit { limit, json } => {
            let entries = reply(
                client
                    .audit(AuditRequest {
                        limit: limit.unwrap_or(0),
                    })
                    .await,
            )?
            .entries;
            if json {
                let objects: Vec<AuditJson> = entries.iter().map(audit_to_json).collect();
                print_json(&objects)?;
            } else {
                print_stdout(&format_audit_table(&entries))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
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
        _ => Ok(()),
    }
}

/// What `yctl resume NODE --gpu N` prints, one line per GPU, and whether every GPU is back
/// in service (else yctl exits 1: one still fails).
pub fn format_gpu_resumes(node: &str, gpus: &[GpuResumed]) -> (String, bool) {
    let node = escape_for_terminal(node);
    let mut out = String::new();
    let mut all_back = true;
    for gpu in gpus {
        let index = gpu.index;
        let line = if !gpu.still_failing.is_empty() {
            all_back = false;
            format!(
                "GPU {index} of {node} still reports: {}; it is out of service again (repair \
                 it, then resume it again)",
                escape_for_terminal(&gpu.still_failing)
            )
        } else if gpu.confirmed {
            format!("GPU {index} of {node} is back in service")
        } else {
            format!(
                "GPU {index} of {node} is back in service, not yet confirmed by its node ({}): \
                 if the node still finds it failing, it goes out of service again",
                escape_for_terminal(&gpu.pending)
            )
        };
        out.push_str(&line);
        out.push('\n');
    }
    (out, all_back)
}

/// A drain reason must say something, and it is shown to everyone by `yctl nodes` and
/// `yctl show job`: no control characters, at most `limits::DRAIN_REASON` bytes.
pub fn check_drain_reason(reason: &str) -> Result<()> {
    if reason.trim().is_empty() {
        return Err(anyhow!("--reason must not be empty"));
    }
    ysched_common::limits::DRAIN_REASON
        .check_len(reason)
        .map_err(|e| anyhow!(e))?;
    check_printable("drain reason", reason).map_err(|e| anyhow!(e))
}

/// A node by name from the full list: there is no single-node RPC, and the list is small.
fn find_node<'a>(nodes: &'a [NodeInfo], name: &str) -> Result<&'a NodeInfo> {
    nodes
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| anyhow!("unknown node '{}'", ysched_common::text::excerpt(name, 64)))
}

const AUDIT_COLUMNS: &[Column; 5] = &[
    Column::left("TIME"),
    Column::left("USER"),
    Column::left("ACTION"),
    Column::right("JOB"),
    Column::left("DETAIL"),
];

/// The `yctl audit` table; JOB is `-` for entries about no job (drains, resumes).
pub fn format_audit_table(entries: &[AuditEntry]) -> String {
    let mut table = Table::with_capacity(AUDIT_COLUMNS, entries.len());
    for entry in entries {
        table.push_row([
            Cow::Owned(rfc3339(entry.time_ms)),
            // A request relayed from another host says where from: `alice@login1`.
            if entry.host.is_empty() {
                escape_for_terminal(&entry.user)
            } else {
                Cow::Owned(format!(
                    "{}@{}",
                    escape_for_terminal(&entry.user),
                    escape_for_terminal(&entry.host)
                ))
            },
            escape_for_terminal(&entry.action),
            if entry.job_id == 0 {
                Cow::Borrowed("-")
            } else {
                Cow::Owned(entry.job_id.to_string())
            },
            escape_for_terminal(&entry.detail),
        ]);
    }
    let mut out = String::new();
    table.render(&mut out, true);
    out
}

#[derive(Debug, Serialize)]
pub struct AuditJson<'a> {
    pub time: String,
    pub user: &'a str,
    pub uid: u32,
    pub action: &'a str,
    /// Null for entries about no job.
    pub job_id: Option<u64>,
    pub detail: &'a str,
    /// The node whose agent relayed the request; null: schedd's own host (or schedd itself).
    pub host: Option<&'a str>,
}

pub fn audit_to_json(entry: &AuditEntry) -> AuditJson<'_> {
    AuditJson {
        time: rfc3339(entry.time_ms),
        user: &entry.user,
        uid: entry.uid,
        action: &entry.action,
        job_id: (entry.job_id != 0).then_some(entry.job_id),
        detail: &entry.detail,
        host: (!entry.host.is_empty()).then_some(entry.host.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<YctlCli, clap::Error> {
        YctlCli::try_parse_from(std::iter::once("yctl").chain(args.iter().copied()))
    }

    #[test]
    fn subcommands() {
        assert!(matches!(
            parse(&["nodes", "-l"]).unwrap().command,
            Command::Nodes {
                long: true,
                json: false,
                topology: None
            }
        ));
        assert!(matches!(
            parse(&["nodes", "--topology", "gpu01"]).unwrap().command,
            Command::Nodes { topology: Some(name), .. } if name == "gpu01"
        ));
        match parse(&["show", "job", "12", "--json"]).unwrap().command {
            Command::Show {
                what: ShowCommand::Job { job, json: true },
            } => assert_eq!(job_ref(&job), job_ref(&JobTarget::parse("12").unwrap())),
            other => panic!("{other:?}"),
        }
        match parse(&["drain", "gpu01", "--reason", "bad fan"])
            .unwrap()
            .command
        {
            Command::Drain { nodes, reason, gpu } => assert_eq!(
                (nodes, reason.as_str(), gpu),
                (vec!["gpu01".to_string()], "bad fan", vec![])
            ),
            other => panic!("{other:?}"),
        }
        match parse(&["resume", "gpu01", "--gpu", "3,5"]).unwrap().command {
            Command::Resume { nodes, gpu } => {
                assert_eq!((nodes, gpu), (vec!["gpu01".to_string()], vec![3, 5]))
            }
            other => panic!("{other:?}"),
        }
        let command = parse(&["drain", "gpu01", "--gpu", "7", "--reason", "flaky"])
            .unwrap()
            .command;
        assert!(check_limits(&command).is_ok());
        assert!(matches!(command, Command::Drain { gpu, .. } if gpu == [7]));
        let two = parse(&["resume", "gpu01", "gpu02", "--gpu", "1"])
            .unwrap()
            .command;
        assert_eq!(
            check_limits(&two).unwrap_err().to_string(),
            "--gpu names GPUs of one node; give exactly one NODE"
        );
        assert!(parse(&["resume", "gpu01", "--gpu", "x"]).is_err());
        let names = |command: Command| -> Vec<String> {
            match command {
                Command::Hold { jobs } | Command::Release { jobs } | Command::Requeue { jobs } => {
                    flatten_targets(&jobs)
                        .iter()
                        .map(ToString::to_string)
                        .collect()
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(names(parse(&["hold", "3,4"]).unwrap().command), ["3", "4"]);
        assert_eq!(
            names(parse(&["requeue", "7", "8,9"]).unwrap().command),
            ["7", "8", "9"]
        );
        assert!(parse(&["requeue"]).is_err());
        assert!(matches!(
            parse(&["shares", "--json"]).unwrap().command,
            Command::Shares { json: true }
        ));
    }

    #[test]
    fn audit_rows_and_json() {
        let entries = [
            AuditEntry {
                time_ms: 1_767_225_600_000,
                user: "root".into(),
                action: "drain".into(),
                detail: "gpu01: bad fan".into(),
                ..Default::default()
            },
            AuditEntry {
                time_ms: 1_767_225_601_000,
                user: "schedd".into(),
                action: "preempt".into(),
                job_id: 12,
                detail: "for job 15".into(),
                ..Default::default()
            },
        ];
        let out = format_audit_table(&entries);
        let rows: Vec<&str> = out.lines().collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[1],
            "2026-01-01T00:00:00Z  root    drain      -  gpu01: bad fan"
        );
        assert!(rows[2].contains("preempt   12  for job 15"), "{out}");
        let value = serde_json::to_value(audit_to_json(&entries[1])).unwrap();
        assert_eq!(value["job_id"], 12);
        assert_eq!(value["time"], "2026-01-01T00:00:01Z");
        assert_eq!(
            serde_json::to_value(audit_to_json(&entries[0])).unwrap()["job_id"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn audit_text_is_escaped() {
        let entry = AuditEntry {
            time_ms: 1_767_225_600_000,
            user: "eve\x1b[2J".into(),
            action: "submit-refused".into(),
            detail: "job name \"a\nb\"\u{202e}".into(),
            ..Default::default()
        };
        let out = format_audit_table(std::slice::from_ref(&entry));
        assert_eq!(out.lines().count(), 2, "{out}");
        assert!(
            !out.contains('\x1b') && !out.contains('\u{202e}'),
            "{out:?}"
        );
        assert!(
            out.contains("eve\\x1b[2J  submit-refused    -  job name \"a\\nb\"\\u{202e}"),
            "{out}"
        );
        assert_eq!(
            serde_json::to_value(audit_to_json(&entry)).unwrap()["user"],
            "eve\x1b[2J"
        );
    }

    #[test]
    fn gpu_resumes_say_what_became_of_each_gpu() {
        let gpus = [
            GpuResumed {
                index: 3,
                confirmed: true,
                ..Default::default()
            },
            GpuResumed {
                index: 4,
                pending: "node n1 is DOWN; it is told when it registers again".into(),
                ..Default::default()
            },
        ];
        let (out, all_back) = format_gpu_resumes("n1", &gpus);
        assert!(all_back);
        assert_eq!(
            out,
            "GPU 3 of n1 is back in service\n\
             GPU 4 of n1 is back in service, not yet confirmed by its node (node n1 is DOWN; it \
             is told when it registers again): if the node still finds it failing, it goes out \
             of service again\n"
        );
        let failing = [GpuResumed {
            index: 2,
            still_failing: "pages pending retirement".into(),
            ..Default::default()
        }];
        let (out, all_back) = format_gpu_resumes("n1", &failing);
        assert!(!all_back);
        assert_eq!(
            out,
            "GPU 2 of n1 still reports: pages pending retirement; it is out of service again \
             (repair it, then resume it again)\n"
        );
    }

    #[test]
    fn drain_reasons_must_be_printable() {
        assert!(check_drain_reason("fan replaced, Ünïcode ok").is_ok());
        assert_eq!(
            check_drain_reason("  ").unwrap_err().to_string(),
            "--reason must not be empty"
        );
        assert_eq!(
            check_drain_reason("bad\nfan").unwrap_err().to_string(),
            "drain reason \"bad\\nfan\" contains a control character (U+000A); reasons may \
             not contain control characters"
        );
        assert!(check_drain_reason("x\u{2029}").is_err());
    }

    #[test]
    fn topology_needs_a_node_and_stands_alone() {
        assert!(parse(&["nodes", "--topology"]).is_err());
        assert!(parse(&["nodes", "--topology", "gpu01", "-l"]).is_err());
        assert!(parse(&["nodes", "--topology", "gpu01", "--json"]).is_err());
    }

    #[test]
    fn nodes_are_found_by_exact_name() {
        let nodes = [NodeInfo {
            name: "gpu01".into(),
            ..Default::default()
        }];
        assert_eq!(find_node(&nodes, "gpu01").unwrap().name, "gpu01");
        assert_eq!(
            find_node(&nodes, "gpu1").unwrap_err().to_string(),
            "unknown node 'gpu1'"
        );
    }

    #[test]
    fn job_commands_take_array_targets() {
        let refs = |args: &[&str]| -> Vec<(u64, String)> {
            match parse(args).unwrap().command {
                Command::Hold { jobs } | Command::Release { jobs } | Command::Requeue { jobs } => {
                    flatten_targets(&jobs)
                        .iter()
                        .map(|t| {
                            let r = job_ref(t);
                            (r.job_id, r.target)
                        })
                        .collect()
                }
                other => panic!("{other:?}"),
            }
        };
        // A task is never sent as its array's id, which an older server would act on.
        assert_eq!(
            refs(&["hold", "12_[100-199],13", "12_7"]),
            [
                (0, "12_[100-199]".to_string()),
                (13, "13".to_string()),
                (0, "12_7".to_string())
            ]
        );
        assert_eq!(
            refs(&["release", "12_[1-3,9]"]),
            [(0, "12_[1-3,9]".to_string())]
        );
        assert_eq!(refs(&["requeue", "12_4"]), [(0, "12_4".to_string())]);
        match parse(&["show", "job", "12_7"]).unwrap().command {
            Command::Show {
                what: ShowCommand::Job { job, json: false },
            } => {
                let r = job_ref(&job);
                assert_eq!((r.job_id, r.target.as_str()), (0, "12_7"));
            }
            other => panic!("{other:?}"),
        }
        // One job at a time.
        let err = parse(&["show", "job", "12_[1-5]"]).unwrap_err().to_string();
        assert!(err.contains("names 5 tasks"), "{err}");
        assert!(parse(&["show", "job", "12_[5]"]).is_ok());
        assert!(parse(&["hold", "12_"]).is_err());
    }

    #[test]
    fn drain_needs_a_reason_and_ids_must_be_numbers() {
        assert!(parse(&["drain", "gpu01"]).is_err());
        assert!(parse(&["hold", "x"]).is_err());
        assert!(parse(&["release"]).is_err());
        assert!(parse(&["show", "job", "-3"]).is_err());
    }
}
