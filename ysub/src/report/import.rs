//! `yctl usage import`: runs recorded elsewhere, from a JSON file, sent in batches.

use crate::client::{reply, Client};
use crate::output::print_stdout;
use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;
use ysched_common::time::Millis;
use ysched_proto::{ImportUsageRequest, RunUsage};

/// One run of a usage file: `RunRecord`'s fields (times in epoch milliseconds); `uid`, `cpus`,
/// `queued_at` (default: `start`), `restart_count`, `outcome` (default `COMPLETED`) and the
/// preemption fields may be left out.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageFileRun {
    job_id: u64,
    #[serde(default)]
    restart_count: u32,
    account: String,
    user: String,
    #[serde(default)]
    uid: u32,
    tier: String,
    gpus: u32,
    #[serde(default)]
    cpus: u32,
    #[serde(default)]
    queued_at: Option<Millis>,
    start: Millis,
    end: Millis,
    #[serde(default = "completed")]
    outcome: String,
    #[serde(default)]
    preempted_by: Option<u64>,
    #[serde(default)]
    preemptor_account: Option<String>,
    #[serde(default)]
    checkpoint_saved: bool,
    #[serde(default)]
    lost_gpu_secs: u64,
}

fn completed() -> String {
    "COMPLETED".into()
}

/// The runs of a usage file (see [`UsageFileRun`]) as the wire takes them.
pub fn parse_usage_file(text: &str) -> Result<Vec<RunUsage>> {
    let runs: Vec<UsageFileRun> =
        serde_json::from_str(text).context("expected a JSON array of runs")?;
    Ok(runs
        .into_iter()
        .map(|r| RunUsage {
            job_id: r.job_id,
            restart_count: r.restart_count,
            account: r.account,
            user: r.user,
            uid: r.uid,
            tier: r.tier,
            gpus: r.gpus,
            cpus: r.cpus,
            queued_at_ms: r.queued_at.unwrap_or(r.start),
            start_ms: r.start,
            end_ms: r.end,
            outcome: r.outcome,
            preempted_by: r.preempted_by.unwrap_or(0),
            preemptor_account: r.preemptor_account.unwrap_or_default(),
            checkpoint_saved: r.checkpoint_saved,
            lost_gpu_secs: r.lost_gpu_secs,
        })
        .collect())
}

/// How many runs go in one request: with names of at most 256 bytes (schedd refuses longer
/// ones), a request stays below schedd's message limit (at least 8 MiB).
const IMPORT_BATCH: usize = 5_000;

pub async fn import(client: &mut Client, file: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let runs = parse_usage_file(&text).with_context(|| format!("{}", file.display()))?;
    let mut imported = 0;
    for chunk in runs.chunks(IMPORT_BATCH) {
        imported += reply(
            client
                .import_usage(ImportUsageRequest {
                    runs: chunk.to_vec(),
                })
                .await,
        )?
        .imported;
    }
    let skipped = runs.len() as u64 - imported;
    print_stdout(&format!(
        "imported {imported} runs from {}{}\n",
        file.display(),
        if skipped > 0 {
            format!(" ({skipped} already recorded or repeated)")
        } else {
            String::new()
        }
    ))
}
