//! `srun` inside a batch job: runs a command as the job's tasks on this node and waits for
//! them. ysched starts the batch script once on every node of a job, so each node's `srun`
//! starts that node's tasks; there is no interactive srun (no allocation is made here).
//!
//! Each task gets `SLURM_PROCID` (its rank in the job), `SLURM_LOCALID` (on this node) and
//! the step's counts; `--output`/`--error` patterns name its files. `srun` exits with the
//! highest exit code of its tasks (128 + N for a task killed by signal N). It outlives SIGINT,
//! SIGTERM, SIGUSR1 and SIGUSR2 without passing them on: ysched delivers a job's signals (a
//! stop's SIGTERM, `--signal` without `B:`) to every process of the job, the tasks included,
//! so a task would get each twice if srun forwarded it, and submitit's USR2 handler would
//! checkpoint twice; srun dying of USR2's default action would end the batch step early.

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, Stdio};
use tokio::signal::unix::{signal, SignalKind};
use ysched_common::limits::MAX_NTASKS_PER_NODE;

#[derive(Parser, Debug)]
#[command(
    name = "srun",
    about = "Slurm's srun inside a ysched batch job: run a command as the job's tasks on this node",
    override_usage = "srun [OPTIONS] COMMAND [ARGS]...",
    disable_version_flag = true
)]
pub struct SrunCli {
    /// Tasks in all, spread over the job's nodes as evenly as Slurm's block distribution
    /// [default: SLURM_NTASKS_PER_NODE (or YS_NTASKS_PER_NODE) on each node, else 1]
    #[arg(short = 'n', long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_NTASKS_PER_NODE)))]
    pub ntasks: Option<u32>,
    /// Tasks on each node
    #[arg(long = "ntasks-per-node", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_NTASKS_PER_NODE)))]
    pub ntasks_per_node: Option<u32>,
    /// Nodes: accepted when it is at most the job's (each node's srun runs that node's tasks)
    #[arg(short = 'N', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes: Option<u32>,
    /// Each task's standard output: %j job id, %A array id, %a array index, %t task rank,
    /// %n node rank, %N node name, %x job name, %u user, %% a percent sign
    #[arg(short = 'o', long, value_name = "PATTERN")]
    pub output: Option<String>,
    /// Each task's standard error [default: with --output, the same file]
    #[arg(short = 'e', long, value_name = "PATTERN")]
    pub error: Option<String>,
    /// append or truncate [default: the job's --open-mode, else truncate]
    #[arg(long = "open-mode", value_name = "MODE")]
    pub open_mode: Option<String>,
    /// Accepted: task output is never buffered by srun here
    #[arg(short = 'u', long)]
    pub unbuffered: bool,
    /// Accepted: the step's name is the job's
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// Accepted: the tasks share the job's CPUs
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// The command and its arguments
    #[arg(value_name = "COMMAND", trailing_var_arg = true, num_args = 1.., required = true)]
    pub command: Vec<OsString>,
}

/// The refusal outside a batch job.
pub const NO_INTERACTIVE: &str = "ysched has no interactive srun: srun runs only inside a \
    batch job (YS_JOB_ID is not set here); submit with `sbatch` or `ysub --wait` instead \
    (ysub --wrap 'COMMAND' --wait runs one command and waits for it)";

/// Where this node's tasks stand in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Rank of the first task of this node.
    pub first_rank: u32,
    /// Tasks on this node.
    pub count: u32,
    /// Tasks in all.
    pub total: u32,
}

/// The job as its environment describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobContext {
    pub job_id: String,
    pub array_job_id: Option<String>,
    pub array_task_id: Option<String>,
    pub name: String,
    pub user: String,
    pub node: String,
    pub node_rank: u32,
    pub nnodes: u32,
    pub tasks_per_node: Option<u32>,
    pub open_append: bool,
}

impl JobContext {
    /// From the variables noded sets (`YS_*`, and `SLURM_*` where the job has them).
    pub fn from_env(env: &BTreeMap<String, String>) -> Option<JobContext> {
        let get = |names: &[&str]| names.iter().find_map(|n| env.get(*n).cloned());
        let number = |names: &[&str]| get(names).and_then(|v| v.parse::<u32>().ok());
        Some(JobContext {
            job_id: get(&["YS_JOB_ID", "SLURM_JOB_ID"]).filter(|id| !id.is_empty())?,
            array_job_id: get(&["YS_ARRAY_JOB_ID", "SLURM_ARRAY_JOB_ID"]),
            array_task_id: get(&["YS_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_ID"]),
            name: get(&["YS_JOB_NAME", "SLURM_JOB_NAME"]).unwrap_or_default(),
            user: get(&["USER", "SLURM_JOB_USER"]).unwrap_or_default(),
            node: get(&["YS_NODE", "SLURMD_NODENAME"]).unwrap_or_default(),
            node_rank: number(&["YS_NODE_RANK", "SLURM_NODEID"]).unwrap_or(0),
            nnodes: number(&["YS_NNODES", "SLURM_JOB_NUM_NODES"])
                .unwrap_or(1)
                .max(1),
            tasks_per_node: number(&["SLURM_NTASKS_PER_NODE", "YS_NTASKS_PER_NODE"]),
            open_append: get(&["SLURM_OPEN_MODE"]).is_some_and(|m| m.starts_with('a')),
        })
    }
}

/// This node's tasks: `--ntasks-per-node`, else `-n` spread over the nodes (block: the first
/// `n % nodes` nodes take one more), else the job's tasks per node, else 1.
pub fn step(cli: &SrunCli, job: &JobContext) -> Result<Step> {
    let nodes = job.nnodes;
    if let Some(asked) = cli.nodes {
        if asked > nodes {
            bail!("-N {asked} is more than the job's {nodes} node(s)");
        }
    }
    let rank = job.node_rank.min(nodes - 1);
    if let Some(per_node) = cli.ntasks_per_node.or(if cli.ntasks.is_none() {
        job.tasks_per_node
    } else {
        None
    }) {
        return Ok(Step {
            first_rank: rank * per_node,
            count: per_node,
            total: per_node * nodes,
        });
    }
    let total = cli.ntasks.unwrap_or(nodes);
    let (base, extra) = (total / nodes, total % nodes);
    Ok(Step {
        first_rank: rank * base + rank.min(extra),
        count: base + u32::from(rank < extra),
        total,
    })
}

/// An output pattern expanded for the task of rank `rank`.
pub fn expand(pattern: &str, job: &JobContext, rank: u32) -> String {
    ysched_common::output_pattern::expand_with(pattern, |letter, out| {
        match letter {
            'j' => out.push_str(&job.job_id),
            'A' => out.push_str(job.array_job_id.as_deref().unwrap_or(&job.job_id)),
            'a' => out.push_str(job.array_task_id.as_deref().unwrap_or("0")),
            't' => out.push_str(&rank.to_string()),
            'n' => out.push_str(&job.node_rank.to_string()),
            'N' => out.push_str(&job.node),
            'x' => out.push_str(&job.name),
            'u' => out.push_str(&job.user),
            _ => return false,
        }
        true
    })
}

/// The `srun` command.
pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::args::parse_args_from::<SrunCli>("srun", args) {
        Ok(cli) => crate::client::run_tool("srun", || run(cli)),
        Err(code) => code,
    }
}

/// Opens the files of a pattern once each, shared by the tasks that name the same one.
struct Files {
    append: bool,
    open: BTreeMap<String, File>,
}

impl Files {
    fn get(&mut self, path: String) -> Result<Stdio> {
        if !self.open.contains_key(&path) {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .append(self.append)
                .truncate(!self.append)
                .mode(0o644)
                .open(&path)
                .with_context(|| format!("cannot open {path}"))?;
            self.open.insert(path.clone(), file);
        }
        let file = self.open[&path]
            .try_clone()
            .with_context(|| format!("cannot share {path}"))?;
        Ok(Stdio::from(file))
    }
}

pub async fn run(cli: SrunCli) -> Result<ExitCode> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let Some(job) = JobContext::from_env(&env) else {
        bail!(NO_INTERACTIVE);
    };
    let step = step(&cli, &job)?;
    let append = match cli.open_mode.as_deref() {
        None => job.open_append,
        Some("append" | "a") => true,
        Some("truncate" | "t") => false,
        Some(other) => bail!("--open-mode '{other}': use append or truncate"),
    };
    let mut files = Files {
        append,
        open: BTreeMap::new(),
    };
    let (program, args) = cli
        .command
        .split_first()
        .ok_or_else(|| anyhow!("no command given"))?;
    // Caught before any task starts, so that a signal for the whole job does not kill srun
    // (the tasks get it themselves) and the script waits for its tasks as Slurm's would.
    let caught = catch_job_signals();
    let mut children = Vec::with_capacity(step.count as usize);
    for local in 0..step.count {
        let rank = step.first_rank + local;
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .env("SLURM_PROCID", rank.to_string())
            .env("SLURM_LOCALID", local.to_string())
            .env("SLURM_NODEID", job.node_rank.to_string())
            .env("SLURM_NTASKS", step.total.to_string())
            .env("SLURM_NPROCS", step.total.to_string())
            .env("SLURM_STEP_NUM_TASKS", step.total.to_string())
            .env("SLURM_STEP_ID", "0")
            .env("SLURM_STEPID", "0")
            .env("SLURM_JOB_ID", &job.job_id)
            .env("YS_TASK_RANK", rank.to_string())
            .env("YS_TASK_LOCAL_RANK", local.to_string())
            .kill_on_drop(false);
        if let Some(output) = &cli.output {
            command.stdout(files.get(expand(output, &job, rank))?);
            let error = cli.error.as_deref().unwrap_or(output);
            command.stderr(files.get(expand(error, &job, rank))?);
        } else if let Some(error) = &cli.error {
            command.stderr(files.get(expand(error, &job, rank))?);
        }
        let child = command.spawn().with_context(|| {
            format!(
                "cannot run {}",
                crate::args::show_os_str(program.as_os_str())
            )
        })?;
        children.push(child);
    }
    drop(files);
    let mut highest = 0u8;
    for mut child in children {
        let status = child.wait().await.context("cannot wait for a task")?;
        let code = match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        };
        highest = highest.max(u8::try_from(code.clamp(0, 255)).unwrap_or(255));
    }
    drop(caught);
    Ok(ExitCode::from(highest))
}

/// Catches SIGINT, SIGTERM, SIGUSR1 and SIGUSR2 for as long as the streams live (and, with
/// tokio, afterwards: the handler stays installed), so that none ends srun.
fn catch_job_signals() -> Vec<tokio::signal::unix::Signal> {
    [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
    ]
    .into_iter()
    .filter_map(|kind| signal(kind).ok())
    .collect()
}
