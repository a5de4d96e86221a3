//! The `ysim` binary: loads or generates a workload, runs it under each policy, prints the
//! comparison (table, `--json`) and writes `--html`.

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::path::PathBuf;
use ysim::workload::{alibaba, csv, factory};
use ysim::{output, policy, PolicySpec, Workload};

/// Replays a workload through ysched's real scheduler in virtual time and compares policies.
///
/// Every policy is a ysched config: the built-in ladder (fifo, tiers, preempt, +fairshare,
/// +backfill) or your own with --config. Same inputs and seed, same output.
#[derive(Parser, Debug)]
#[command(name = "ysim", version)]
struct Args {
    /// The workload: `factory` (generated), `alibaba` (the Alibaba GPU trace v2023), or a CSV
    /// file of jobs (format in docs/simulation.md).
    #[arg(long, visible_alias = "scenario", default_value = "factory")]
    trace: String,
    /// The Alibaba trace's folder (holding csv/).
    #[arg(long, default_value = alibaba::DEFAULT_DIR)]
    trace_dir: PathBuf,
    /// Divide the Alibaba trace's inter-arrival times by N, to create contention.
    #[arg(long, default_value_t = 1.0)]
    compress: f64,
    /// Replay the Alibaba trace without its gpu_spec model constraints.
    #[arg(long)]
    no_gpu_spec: bool,
    /// Keep this fraction of the Alibaba trace's nodes of each shape (model and GPU count),
    /// at least one of each, to put its tasks on a smaller cluster.
    #[arg(long, default_value_t = 1.0)]
    cluster_scale: f64,
    /// Days of the factory scenario.
    #[arg(long, default_value_t = 30.0)]
    days: f64,
    /// Nodes of the factory scenario, or of the uniform cluster a CSV trace runs on.
    #[arg(long)]
    nodes: Option<u32>,
    /// GPUs per node of the uniform cluster a CSV trace runs on.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// GPU model of the uniform cluster a CSV trace runs on.
    #[arg(long, default_value = factory::MODEL)]
    gpu_model: String,
    /// The cluster a CSV trace runs on, as CSV (name,gpus[,model,cpus,mem,nvlink]).
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Seed of the generated scenario and of the drawn checkpoint profiles.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Built-in policies to compare, comma-separated (fifo, tiers, preempt, +fairshare,
    /// +backfill). Default: all of them, unless --config is given.
    #[arg(long, value_delimiter = ',')]
    policy: Vec<String>,
    /// A ysched config file to evaluate as a policy (named after the file); repeatable.
    #[arg(long)]
    config: Vec<PathBuf>,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the results as one self-contained HTML file with charts.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// No timings on stderr.
    #[arg(long, short)]
    quiet: bool,
}

fn workload(args: &Args) -> Result<Workload> {
    match args.trace.as_str() {
        "factory" => Ok(factory::generate(&factory::Options {
            nodes: args.nodes.unwrap_or(12),
            days: args.days,
            seed: args.seed,
        })),
        "alibaba" => alibaba::load(&alibaba::Options {
            dir: args.trace_dir.clone(),
            compress: args.compress,
            constraints: !args.no_gpu_spec,
            cluster_scale: args.cluster_scale,
            seed: args.seed,
        }),
        file => {
            let path = PathBuf::from(file);
            if !path.exists() {
                bail!("--trace {file}: neither factory, alibaba nor an existing CSV file");
            }
            let nodes = match &args.cluster {
                Some(c) => csv::read_cluster(c)?,
                None => csv::uniform_cluster(
                    args.nodes.unwrap_or(12),
                    args.gpus_per_node,
                    &args.gpu_model,
                ),
            };
            csv::read_jobs(&path, nodes)
        }
    }
}

fn policies(args: &Args, w: &Workload) -> Result<Vec<PolicySpec>> {
    let names: Vec<String> = if args.policy.is_empty() && args.config.is_empty() {
        policy::BUILTIN.iter().map(|s| s.to_string()).collect()
    } else {
        args.policy.clone()
    };
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        out.push(policy::builtin(name, &w.accounts)?);
    }
    for path in &args.config {
        out.push(policy::from_file(path, &w.accounts)?);
    }
    Ok(out)
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("ysim: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<()> {
    let began = std::time::Instant::now();
    let w = workload(args)?;
    let policies = policies(args, &w)?;
    if !args.quiet {
        eprintln!(
            "ysim: {}: {} jobs on {} nodes ({} GPUs), loaded in {:.2} s",
            w.name,
            w.jobs.len(),
            w.nodes.len(),
            w.gpus(),
            began.elapsed().as_secs_f64()
        );
    }
    let report = ysim::compare(&w, &policies, args.seed, |r, took| {
        if !args.quiet {
            eprintln!(
                "ysim: {:<11} simulated in {:>7.2} s ({} passes, makespan {})",
                r.policy,
                took.as_secs_f64(),
                r.passes,
                output::duration(Some(r.makespan_hours * 3600.0))
            );
        }
    });
    if args.json {
        print!("{}", output::json(&report));
    } else {
        print!("{}", output::table(&report));
    }
    if let Some(path) = &args.html {
        let html = output::html(&report)?;
        std::fs::write(path, html).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
