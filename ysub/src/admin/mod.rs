//! `yctl`: cluster administration and inspection, like scontrol/sinfo.
//!
//! - [`cli`]: its command line, and what it checks before sending anything.
//! - [`drain`]: drain reasons and what resuming GPUs prints.
//! - [`audit`]: the audit log as a table and as JSON.
//! - [`update`]: `yctl update`'s flags and `KEY=VALUE` words, and what it prints.
//! - [`cluster`]: schedd's replicas (`yctl cluster`) as a table and as JSON.
//! - [`hosts`]: hosts' credentials (`yctl node enrol|revoke|hosts`).

pub mod audit;
pub mod cli;
pub mod cluster;
pub mod drain;
pub mod hosts;
pub mod update;

pub use audit::{audit_to_json, format_audit_table, AuditJson};
pub use cli::{check_limits, Command, ShowCommand, YctlCli};
pub use drain::{check_drain_reason, format_gpu_resumes};

use crate::client::{self, reply, Client};
use crate::jobs::{flatten_targets, format_job_detail, job_detail_to_json, job_ref};
use crate::nodes::{
    format_gpu_lines, format_node_topology, format_nodes_table, format_outages, node_to_json,
    NodeJson,
};
use crate::output::{print_json, print_stdout};
use crate::shares::{format_shares_table, shares_to_json};
use anyhow::{anyhow, Result};
use std::process::ExitCode;
use ysched_common::time::now_ms;
use ysched_proto::{
    AuditEntry, AuditRequest, ClusterStatusRequest, DrainGpuRequest, DrainRequest,
    ListNodesRequest, NodeInfo, NodeRef, ResumeGpuRequest, SharesRequest,
};

/// The `yctl` binary.
pub fn main() -> ExitCode {
    match crate::args::parse_args::<YctlCli>("yctl") {
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
        Command::Update(args) => {
            let request = update::update_request(&args)?;
            let job = request
                .job
                .as_ref()
                .map(|j| j.target.clone())
                .unwrap_or_default();
            let updated = reply(client.update_job(request).await)?;
            if args.json {
                print_json(&update::UpdateJson {
                    job: &job,
                    changed: &updated.changed,
                })?;
            } else {
                print_stdout(&update::updated_line(&job, &updated))?;
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
        Command::Cluster {
            change: Some(change),
            ..
        } => {
            let done = reply(client.change_cluster(change.request()).await)?;
            print_stdout(&format!(
                "{}\n",
                ysched_common::text::escape_for_terminal(&done.done)
            ))?;
        }
        Command::Cluster { json, change: None } => {
            let status = reply(client.cluster_status(ClusterStatusRequest {}).await)?;
            if json {
                let rows: Vec<cluster::ClusterJson> = status
                    .replicas
                    .iter()
                    .map(cluster::cluster_to_json)
                    .collect();
                print_json(&rows)?;
            } else {
                print_stdout(&cluster::format_cluster_table(&status))?;
            }
        }
        Command::Node { command } => hosts::run(&mut client, command).await?,
        Command::Audit { limit, json } => {
            let entries = audit_log(&mut client, limit).await?;
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

/// The newest `limit` entries of the audit log (all of it when `None`), page by page: schedd
/// sends a page bounded in bytes and says where the next begins.
async fn audit_log(client: &mut Client, limit: Option<u32>) -> Result<Vec<AuditEntry>> {
    let mut entries = Vec::new();
    let mut before_id = 0;
    loop {
        let left = limit.map(|n| n.saturating_sub(entries.len() as u32));
        if left == Some(0) {
            return Ok(entries);
        }
        let page = reply(
            client
                .audit(AuditRequest {
                    limit: left.unwrap_or(0),
                    before_id,
                })
                .await,
        )?;
        entries.extend(page.entries);
        // 0: no older entries (a schedd that does not page sends them all at once); each
        // page must begin further back than the last.
        if page.next_before_id == 0 || (before_id != 0 && page.next_before_id >= before_id) {
            return Ok(entries);
        }
        before_id = page.next_before_id;
    }
}

/// A node by name from the full list: there is no single-node RPC, and the list is small.
fn find_node<'a>(nodes: &'a [NodeInfo], name: &str) -> Result<&'a NodeInfo> {
    nodes
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| anyhow!("unknown node '{}'", ysched_common::text::excerpt(name, 64)))
}

#[cfg(test)]
mod tests;
