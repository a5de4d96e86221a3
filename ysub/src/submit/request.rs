//! The job spec `ysub` sends, built from the options in effect and the script, with every
//! check that can be made before schedd is contacted (the same ones schedd makes, with the
//! same messages).

use super::{BatchScript, JobOptions};
use crate::script::{current_environment, exported_environment};
use anyhow::{anyhow, bail, Context, Result};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use ysched_common::parse::{parse_job_mem_mib, parse_time_limit};
use ysched_common::text::check_printable;
use ysched_common::ArraySpec;
use ysched_common::Config;
use ysched_proto::JobSpec;

/// What a submission depends on besides its options: where and in what environment `ysub` runs.
#[derive(Debug, Clone)]
pub struct SubmitContext {
    pub cwd: PathBuf,
    /// The environment as the OS gives it: a variable that is not UTF-8 is refused only if it
    /// would be exported.
    pub env: Vec<(OsString, OsString)>,
    /// `scheduler.max_array_size`: `--array` indices must be below it (schedd checks it too).
    pub max_array_size: u32,
}

impl SubmitContext {
    pub fn from_process(config: &Config) -> Result<SubmitContext> {
        let cwd = std::env::current_dir().context("cannot determine the current directory")?;
        Ok(SubmitContext {
            cwd,
            env: current_environment().collect(),
            max_array_size: config.scheduler.max_array_size,
        })
    }
}

/// Builds the wire job spec, checking every option that can be checked here. Tier names and
/// GPU models are checked by schedd, which knows the cluster.
pub fn build_spec(
    options: &JobOptions,
    script: BatchScript,
    context: &SubmitContext,
) -> Result<JobSpec> {
    check_not_empty(options)?;
    let mem_mib = options
        .mem
        .as_deref()
        .map(parse_job_mem_mib)
        .transpose()?
        .unwrap_or(0);
    let time_limit_secs = match options.time.as_deref() {
        Some(limit) => parse_time_limit(limit)?.unwrap_or(0),
        None => 0,
    };
    let workdir = match options.chdir.as_deref() {
        Some(dir) => absolute_path(&context.cwd, dir),
        None => context.cwd.clone(),
    };
    let workdir = workdir.into_os_string().into_string().map_err(|dir| {
        anyhow!(
            "working directory {} is not valid UTF-8",
            PathBuf::from(dir).display()
        )
    })?;
    let env = exported_environment(
        options.export.as_deref().unwrap_or("ALL"),
        context.env.iter().cloned(),
    )
    .map_err(|e| anyhow!(e))?;
    let constraints: Vec<String> = options
        .constraint
        .iter()
        .flat_map(|c| c.split(','))
        .map(str::trim)
        .map(String::from)
        .collect();
    if constraints.iter().any(String::is_empty) {
        bail!("an empty feature in --constraint (give e.g. --constraint ib,nvme)");
    }
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    let name = options.job_name.clone().unwrap_or(script.default_name);
    // schedd refuses these too; checking here names the problem before anything is sent.
    ysched_common::limits::JOB_NAME
        .check_len(&name)
        .map_err(|e| anyhow!(e))?;
    check_printable("job name", &name).map_err(|e| anyhow!(e))?;
    check_printable("account", &text(&options.account)).map_err(|e| anyhow!(e))?;
    if let Some(array) = &options.array {
        ArraySpec::parse(array, context.max_array_size).map_err(|e| anyhow!(e))?;
    }

    Ok(JobSpec {
        name,
        tier: text(&options.tier),
        gpus: options.gpus.unwrap_or(0),
        gpu_type: text(&options.gpu_type),
        cpus: options.cpus.unwrap_or(0),
        mem_mib,
        time_limit_secs,
        grace_secs: options.grace,
        checkpoint_dir: text(&options.checkpoint_dir),
        account: text(&options.account),
        // Relative paths stay relative: the agent resolves them against the working directory.
        stdout_path: text(&options.output),
        stderr_path: text(&options.error),
        workdir,
        script: script.contents,
        args: script.args,
        env,
        hold: options.hold,
        nodes: options.nodes.unwrap_or(0),
        no_requeue: options.no_requeue,
        interconnect: text(&options.interconnect),
        constraints,
        warn_signal: options.signal.map(|w| ysched_proto::WarnSignal {
            signal: w.signal,
            secs: w.secs,
            batch_only: w.batch_only,
        }),
        array: text(&options.array),
        dependency: text(&options.dependency),
        ..Default::default()
    })
}

/// Refuses options given with an empty value (`-p ''`, `-D ''`): each would silently mean
/// something else (the default tier, the current directory) than what was written.
fn check_not_empty(options: &JobOptions) -> Result<()> {
    let given = [
        ("-J/--job-name", &options.job_name, "a job name"),
        (
            "-p/--priority",
            &options.tier,
            "a tier, or leave -p out for the default tier",
        ),
        (
            "--gpu-type",
            &options.gpu_type,
            "a GPU model, or leave --gpu-type out for any",
        ),
        (
            "-A/--account",
            &options.account,
            "an account, or leave -A out for your primary group",
        ),
        (
            "-D/--chdir",
            &options.chdir,
            "a directory, or leave -D out for the current one",
        ),
        ("-o/--output", &options.output, "a file"),
        ("-e/--error", &options.error, "a file"),
        ("--checkpoint-dir", &options.checkpoint_dir, "a directory"),
        ("--interconnect", &options.interconnect, "nvlink"),
        ("--mem", &options.mem, "a size such as 16G"),
        ("-t/--time", &options.time, "a time limit such as 1:00:00"),
        ("--array", &options.array, "indices such as 0-99"),
        ("--dependency", &options.dependency, "e.g. afterok:12"),
    ];
    for (flag, value, expected) in given {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            bail!("{flag} is empty: give {expected}");
        }
    }
    if options.constraint.iter().any(|c| c.trim().is_empty()) {
        bail!("--constraint is empty: give a feature, e.g. --constraint ib");
    }
    Ok(())
}

/// `dir` made absolute against `cwd`, without `.` components. Symlinks and `..` are kept: the
/// directory need not exist here, only on the node.
fn absolute_path(cwd: &Path, dir: &str) -> PathBuf {
    cwd.join(dir)
        .components()
        .filter(|c| *c != Component::CurDir)
        .collect()
}

/// What a job carries to its node: each text against its limit, the script and the
/// environment (names and values, plus 2 bytes each) against `scheduler.max_script_mib`, and
/// the launch as a whole (`ysched_common::limits::check_submit`): the check schedd makes,
/// made before the request is sent, with the same message.
pub fn check_payload_size(spec: &JobSpec, config: &Config) -> Result<()> {
    let request = ysched_common::SubmitRequest::from(spec.clone());
    ysched_common::limits::check_submit(&request, config).map_err(|e| anyhow::anyhow!(e))
}
