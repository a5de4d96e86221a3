//! `ysub`: submit a batch script, like sbatch.
//!
//! Options come from three places, later ones winning: the `#YSUB` lines of the script (top to
//! bottom), then the command line. Everything is checked before schedd is contacted, so a bad
//! option never submits anything.

use crate::client::{self, clap_error_message, reply_to, status_error, Client, OptionError};
use crate::script::{current_environment, exported_environment, script_directives};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser};
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use ysched_common::parse::{
    parse_bounded_u32, parse_job_mem_mib, parse_time_limit, MAX_CPUS, MAX_GPUS, MAX_NODES,
};
use ysched_common::text::{check_printable, escape_for_terminal};
use ysched_common::Config;
use ysched_common::JobState;
use ysched_common::WarnSignal;
use ysched_common::{ArraySpec, DependencyRequest};
use ysched_proto::{JobInfo, JobRef, JobSpec, SubmitRequest};

/// The job options, accepted both on the command line and in `#YSUB` lines.
#[derive(Args, Debug, Default, Clone, PartialEq)]
pub struct JobOptions {
    /// Job name [default: the script's file name, or `wrap`]
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// Priority tier [default: the configured default tier]
    #[arg(short = 'p', long = "priority", value_name = "TIER")]
    pub tier: Option<String>,
    /// GPUs for the whole job (at most 100000)
    #[arg(short = 'G', long, value_name = "N", value_parser = bounded("--gpus", 0, MAX_GPUS),
          allow_negative_numbers = true)]
    pub gpus: Option<u32>,
    /// Acceptable GPU model(s), e.g. `A100` or `A100|H100`
    #[arg(long = "gpu-type", value_name = "MODEL")]
    pub gpu_type: Option<String>,
    /// CPUs per node (1 to 100000)
    #[arg(short = 'c', long = "cpus", visible_alias = "cpus-per-task", value_name = "N",
          value_parser = bounded("--cpus", 1, MAX_CPUS),
          allow_negative_numbers = true)]
    pub cpus: Option<u32>,
    /// Memory per node: a number with an optional K, M, G or T suffix (default M), at most 1024T
    #[arg(long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// Time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED; at most 365 days
    #[arg(short = 't', long, value_name = "LIMIT")]
    pub time: Option<String>,
    /// Signal to send SECS seconds (default 60, at most 65535) before the time limit: a name
    /// (USR1, SIGUSR1, TERM...) or number; `B:` sends it to the batch shell only, else to every
    /// process of the job
    #[arg(long, value_name = "[B:]SIG[@SECS]", value_parser = warn_signal)]
    pub signal: Option<WarnSignal>,
    /// Seconds between SIGTERM and SIGKILL when the job is stopped [default: the tier's]
    #[arg(long, value_name = "SECONDS", value_parser = bounded("--grace", 0, u32::MAX),
          allow_negative_numbers = true)]
    pub grace: Option<u32>,
    /// Checkpoint directory [default: <checkpoint_root>/<job id>]
    #[arg(long = "checkpoint-dir", value_name = "DIR")]
    pub checkpoint_dir: Option<String>,
    /// Account to charge [default: your primary group]
    #[arg(short = 'A', long, value_name = "NAME")]
    pub account: Option<String>,
    /// Standard output file, relative to the working directory; `%j` is the job id, `%x` its
    /// name, `%u` the user, `%N` the node, `%A` the array id and `%a` the task index
    /// [default: ysched-%j.out, for an array task ysched-%A_%a.out]
    #[arg(short = 'o', long, value_name = "PATH")]
    pub output: Option<String>,
    /// Standard error file [default: the output file]
    #[arg(short = 'e', long, value_name = "PATH")]
    pub error: Option<String>,
    /// Working directory of the job [default: the current directory]
    #[arg(short = 'D', long, value_name = "DIR")]
    pub chdir: Option<String>,
    /// Environment to pass: ALL, NONE, or VAR[=value],... (may follow ALL or NONE) [default: ALL]
    #[arg(long, value_name = "ALL|NONE|VARS")]
    pub export: Option<String>,
    /// Submit the job held: it does not start until `yctl release`
    #[arg(long)]
    pub hold: bool,
    /// Wait for the job to end and exit with its exit code; for an array, for every task, and
    /// exit with the highest of their codes
    #[arg(short = 'W', long)]
    pub wait: bool,
    /// Nodes to spread the job over (1 to 10000)
    #[arg(short = 'N', long, value_name = "N", value_parser = bounded("--nodes", 1, MAX_NODES),
          allow_negative_numbers = true)]
    pub nodes: Option<u32>,
    /// Do not requeue the job when it is preempted
    #[arg(long = "no-requeue")]
    pub no_requeue: bool,
    /// Required GPU interconnect, e.g. `nvlink`
    #[arg(long, value_name = "KIND")]
    pub interconnect: Option<String>,
    /// Required node feature(s); repeatable or a comma list
    #[arg(long, value_name = "FEATURE")]
    pub constraint: Vec<String>,
    /// Print only the job id
    #[arg(long)]
    pub parsable: bool,
    /// Submit a job array: one task per index, each a job of its own (`12_7`, with
    /// YS_ARRAY_TASK_ID=7): `0-99`, `0-99:4` (every 4th), `1,5,9-12`, each with an optional
    /// `%N` (at most N tasks run at once). Indices go up to scheduler.max_array_size - 1
    #[arg(short = 'a', long, value_name = "SPEC", value_parser = array_spec)]
    pub array: Option<String>,
    /// Start only once other jobs got somewhere: `after:ID` (started), `afterany:ID` (ended),
    /// `afterok:ID` (completed), `afternotok:ID` (ended otherwise), each with `:ID:ID...`;
    /// clauses joined by `,` (all) or `?` (any); or `singleton` (no other job of this name and
    /// user runs). An ID is a job, an array (all its tasks) or a task (`12_7`)
    #[arg(short = 'd', long, value_name = "TYPE:ID[:ID...][,...]", value_parser = dependency)]
    pub dependency: Option<String>,
}

/// The value parser of a whole-number option that must lie in `min..=max`; its errors name
/// the option, the value and the bound (`--nodes must be at least 1 (got 0)`).
fn bounded(
    flag: &'static str,
    min: u32,
    max: u32,
) -> impl Fn(&str) -> Result<u32, OptionError> + Clone + Send + Sync + 'static {
    move |value| parse_bounded_u32(flag, value, min, max).map_err(|e| OptionError(e.to_string()))
}

/// The value parser of `--signal`.
fn warn_signal(value: &str) -> Result<WarnSignal, OptionError> {
    WarnSignal::parse(value).map_err(OptionError)
}

/// The largest `scheduler.max_array_size` a configuration may set: any index at or above it
/// is refused whatever the configuration says.
const MAX_ARRAY_SIZE_CEILING: u32 = 4_000_001;

/// The value parser of `--array`: its form. Whether its indices are within the cluster's
/// `scheduler.max_array_size` is checked by [`build_spec`], which knows that limit.
fn array_spec(value: &str) -> Result<String, OptionError> {
    match ArraySpec::parse(value, MAX_ARRAY_SIZE_CEILING) {
        Ok(_) => Ok(value.trim().to_string()),
        // Too large an index: [`build_spec`] says so, naming the limit that applies.
        Err(e) if e.contains("max_array_size") => Ok(value.trim().to_string()),
        Err(e) => Err(OptionError(e)),
    }
}

/// The value parser of `--dependency`: its form (schedd checks that the jobs exist).
fn dependency(value: &str) -> Result<String, OptionError> {
    DependencyRequest::parse(value)
        .map(|_| value.trim().to_string())
        .map_err(OptionError)
}

impl JobOptions {
    /// These options overridden by `later`: each value `later` sets replaces ours, a list
    /// `later` gives replaces ours, and a flag set in either stays set.
    pub fn overridden_by(self, later: JobOptions) -> JobOptions {
        JobOptions {
            job_name: later.job_name.or(self.job_name),
            tier: later.tier.or(self.tier),
            gpus: later.gpus.or(self.gpus),
            gpu_type: later.gpu_type.or(self.gpu_type),
            cpus: later.cpus.or(self.cpus),
            mem: later.mem.or(self.mem),
            time: later.time.or(self.time),
            signal: later.signal.or(self.signal),
            grace: later.grace.or(self.grace),
            checkpoint_dir: later.checkpoint_dir.or(self.checkpoint_dir),
            account: later.account.or(self.account),
            output: later.output.or(self.output),
            error: later.error.or(self.error),
            chdir: later.chdir.or(self.chdir),
            export: later.export.or(self.export),
            hold: later.hold || self.hold,
            wait: later.wait || self.wait,
            nodes: later.nodes.or(self.nodes),
            no_requeue: later.no_requeue || self.no_requeue,
            interconnect: later.interconnect.or(self.interconnect),
            constraint: if later.constraint.is_empty() {
                self.constraint
            } else {
                later.constraint
            },
            parsable: later.parsable || self.parsable,
            array: later.array.or(self.array),
            dependency: later.dependency.or(self.dependency),
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "ysub",
    version,
    about = "Submit a batch job to ysched",
    override_usage = "ysub [OPTIONS] SCRIPT [ARGS]...\n       ysub [OPTIONS] --wrap COMMAND",
    after_help = "Options may also be given in the script on `#YSUB` lines placed among the comments at its top; the command line overrides them."
)]
pub struct YsubCli {
    #[command(flatten)]
    pub options: JobOptions,
    /// Run COMMAND (with /bin/sh) instead of a script
    #[arg(long, value_name = "COMMAND")]
    pub wrap: Option<String>,
    /// The batch script, then the arguments passed to it (options after SCRIPT belong to it)
    #[arg(value_name = "SCRIPT [ARGS]", trailing_var_arg = true, num_args = 0..)]
    pub command: Vec<String>,
}

/// Just the job options, for parsing one `#YSUB` line with the same definitions.
#[derive(Parser, Debug)]
#[command(
    name = "#YSUB",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct DirectiveLine {
    #[command(flatten)]
    options: JobOptions,
}

/// The batch script to submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchScript {
    /// The job name when none is given: the script's file name, or `wrap`.
    pub default_name: String,
    pub contents: String,
    pub args: Vec<String>,
}

impl BatchScript {
    /// The script `--wrap COMMAND` runs.
    pub fn wrap(command: &str) -> BatchScript {
        BatchScript {
            default_name: "wrap".into(),
            contents: format!("#!/bin/sh\n{command}\n"),
            args: Vec::new(),
        }
    }

    /// Reads the script at `path` (copied into the job now, like sbatch does).
    pub fn read(path: &str, args: Vec<String>) -> Result<BatchScript> {
        let contents =
            std::fs::read(path).with_context(|| format!("cannot read batch script '{path}'"))?;
        let contents = String::from_utf8(contents)
            .map_err(|_| anyhow!("batch script '{path}' is not a text file (not valid UTF-8)"))?;
        if contents.trim().is_empty() {
            bail!("batch script '{path}' is empty");
        }
        let default_name = Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.to_string());
        Ok(BatchScript {
            default_name,
            contents,
            args,
        })
    }
}

/// The script named on the command line (or `--wrap`) and the options in effect: its
/// directives overridden by the command line.
pub fn resolve(cli: YsubCli) -> Result<(JobOptions, BatchScript)> {
    let script = match (cli.wrap, cli.command.split_first()) {
        (Some(_), Some(_)) => bail!("give either a script or --wrap, not both"),
        (Some(command), None) => return Ok((cli.options, BatchScript::wrap(&command))),
        (None, None) => {
            bail!("no batch script given (ysub [OPTIONS] SCRIPT [ARGS]... or ysub --wrap COMMAND)")
        }
        (None, Some((path, args))) => BatchScript::read(path, args.to_vec())?,
    };
    let options =
        options_from_directives(&script.contents, &script.default_name)?.overridden_by(cli.options);
    Ok((options, script))
}

/// The options set by a script's `#YSUB` lines, later lines overriding earlier ones except that
/// `--constraint`s add up. `script_name` only labels errors.
pub fn options_from_directives(contents: &str, script_name: &str) -> Result<JobOptions> {
    let directives = script_directives(contents).map_err(|e| anyhow!("{script_name}: {e}"))?;
    let mut options = JobOptions::default();
    for directive in directives {
        let line = DirectiveLine::try_parse_from(&directive.words).map_err(|e| {
            anyhow!(
                "{script_name}: line {}: invalid #YSUB directive: {}",
                directive.line,
                clap_error_message(&e)
            )
        })?;
        let mut constraints = std::mem::take(&mut options.constraint);
        constraints.extend(line.options.constraint.iter().cloned());
        options = options.overridden_by(line.options);
        options.constraint = constraints;
    }
    Ok(options)
}

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

/// The `ysub` binary.
pub fn main() -> ExitCode {
    match client::parse_args::<YsubCli>("ysub") {
        Ok(cli) => client::run_tool("ysub", || run(cli)),
        Err(code) => code,
    }
}

pub async fn run(cli: YsubCli) -> Result<ExitCode> {
    let (options, script) = resolve(cli)?;
    let config = Config::load()?;
    let spec = build_spec(&options, script, &SubmitContext::from_process(&config)?)?;
    check_payload_size(&spec, &config)?;
    let socket = client::socket_path(&config);
    let mut client = client::connect(&socket).await?;
    let submitted = reply_to(
        "submit",
        client.submit(SubmitRequest { spec: Some(spec) }).await,
    )?;
    let job_id = submitted.job_id;
    // An array prints its id, as sbatch does: its tasks are `<id>_<index>`.
    if options.parsable {
        println!("{job_id}");
    } else {
        println!("Submitted job {job_id}");
    }
    if !options.wait {
        return Ok(ExitCode::SUCCESS);
    }
    if submitted.array_task_count == 0 {
        let mut jobs = wait_for_jobs(client, &socket, job_id, 1, false).await?;
        let job = jobs
            .pop()
            .ok_or_else(|| anyhow!("job {job_id} was not seen to end"))?;
        let code = wait_exit_code(&job);
        eprintln!("{}", final_line(&job, code));
        return Ok(ExitCode::from(code));
    }
    let count = submitted.array_task_count;
    let tasks = wait_for_jobs(client, &socket, job_id, count, true).await?;
    let code = array_exit_code(&tasks);
    for task in &tasks {
        let task_code = wait_exit_code(task);
        if task_code != 0 {
            eprintln!("{}", final_line(task, task_code));
        }
    }
    eprintln!("{}", array_summary(job_id, &tasks, code));
    Ok(ExitCode::from(code))
}

/// How many times in a row `--wait` tries to re-establish its watch (once a second) before
/// giving up, e.g. while schedd restarts.
const WATCH_RETRIES: u32 = 60;

/// `--wait`: follows jobs `first`, `first + 1`, ... (`count` of them: an array's tasks have
/// consecutive job ids, the first being the array's id) one after another until each has
/// ended, and returns them as they ended, without their specs. Shows a spinner on a terminal.
async fn wait_for_jobs(
    mut client: Client,
    socket: &Path,
    first: u64,
    count: u32,
    is_array: bool,
) -> Result<Vec<JobInfo>> {
    let array = is_array.then_some(count);
    let spinner = std::io::stderr()
        .is_terminal()
        .then(|| new_spinner(first, array));
    let mut ended = Vec::with_capacity(count as usize);
    let mut outcome = Ok(());
    for job_id in (first..).take(count as usize) {
        let progress = array.map(|total| (ended.len(), total));
        match wait_for_job(&mut client, socket, job_id, spinner.as_ref(), progress).await {
            Ok(mut job) => {
                // Kept for the summary only: a spec carries the whole script.
                job.spec = None;
                ended.push(job);
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    if let Some(spinner) = spinner {
        spinner.finish_and_clear();
    }
    outcome.map(|()| ended)
}

/// Follows one job's `WatchJob` stream until it reports a terminal state. If the stream
/// breaks (schedd restarting) it reconnects and watches again.
async fn wait_for_job(
    client: &mut Client,
    socket: &Path,
    job_id: u64,
    spinner: Option<&indicatif::ProgressBar>,
    progress: Option<(usize, u32)>,
) -> Result<JobInfo> {
    let mut failures = 0u32;
    loop {
        match watch_until_terminal(client, job_id, spinner, progress, &mut failures).await {
            Ok(Some(job)) => return Ok(job),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        failures += 1;
        if failures > WATCH_RETRIES {
            return Err(anyhow!(
                "lost contact with schedd while waiting for job {job_id}"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Ok(reconnected) = client::connect(socket).await {
            *client = reconnected;
        }
    }
}

/// One watch: `Ok(Some(job))` once the job is finished, `Ok(None)` when the stream broke off
/// in a way worth retrying, an error when schedd refused (unknown job, ...).
async fn watch_until_terminal(
    client: &mut Client,
    job_id: u64,
    spinner: Option<&indicatif::ProgressBar>,
    progress: Option<(usize, u32)>,
    failures: &mut u32,
) -> Result<Option<JobInfo>> {
    let mut stream = match client
        .watch_job(JobRef {
            job_id,
            target: String::new(),
        })
        .await
    {
        Ok(response) => response.into_inner(),
        Err(status) if is_transient(&status) => return Ok(None),
        Err(status) => return Err(status_error(status)),
    };
    loop {
        match stream.message().await {
            Ok(Some(job)) => {
                *failures = 0;
                if let Some(spinner) = spinner {
                    spinner.set_message(spinner_message(&job, progress));
                }
                if is_finished(&job) {
                    return Ok(Some(job));
                }
            }
            // The stream ends only after a terminal state; ending before one means schedd went away.
            Ok(None) => return Ok(None),
            Err(status) if is_transient(&status) => return Ok(None),
            Err(status) => return Err(status_error(status)),
        }
    }
}

/// Errors that a broken connection produces, as opposed to a refusal by schedd.
fn is_transient(status: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        status.code(),
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Aborted
    )
}

fn is_finished(job: &JobInfo) -> bool {
    JobState::parse(&job.state).is_some_and(JobState::is_terminal)
}

/// `array`: the number of tasks when `job_id` is an array's id.
fn new_spinner(job_id: u64, array: Option<u32>) -> indicatif::ProgressBar {
    let spinner = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
        spinner.set_style(style);
    }
    spinner.set_message(match array {
        Some(tasks) => format!("Array {job_id} submitted ({tasks} tasks)"),
        None => format!("Job {job_id} submitted"),
    });
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner
}

/// `progress`: for an array's task, how many of how many tasks have ended.
fn spinner_message(job: &JobInfo, progress: Option<(usize, u32)>) -> String {
    let state = escape_for_terminal(&job.state);
    let mut message = format!("Job {} {state}", job_name(job));
    if !job.reason.is_empty() {
        message.push_str(&format!(" ({})", escape_for_terminal(&job.reason)));
    }
    if let Some((ended, total)) = progress {
        message.push_str(&format!(", {ended} of {total} tasks ended"));
    }
    message
}

/// The job as users name it: `12_7` for an array task.
fn job_name(job: &JobInfo) -> String {
    escape_for_terminal(&crate::jobs::display_id(job)).into_owned()
}

/// The exit code of `ysub --wait` for an array, as sbatch's: the highest of its tasks' (see
/// [`wait_exit_code`]), so 0 only when every task COMPLETED.
pub fn array_exit_code(tasks: &[JobInfo]) -> u8 {
    tasks.iter().map(wait_exit_code).max().unwrap_or(0)
}

/// The line `ysub --wait` ends with for an array: `Array 12: 3 tasks ended, 2 COMPLETED,
/// 1 FAILED (exit 3)`, states in the order first seen.
pub fn array_summary(array_id: u64, tasks: &[JobInfo], exit_code: u8) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for task in tasks {
        match counts.iter_mut().find(|(state, _)| *state == task.state) {
            Some((_, n)) => *n += 1,
            None => counts.push((&task.state, 1)),
        }
    }
    let states: Vec<String> = counts
        .iter()
        .map(|(state, n)| format!("{n} {}", escape_for_terminal(state)))
        .collect();
    format!(
        "Array {array_id}: {} tasks ended, {} (exit {exit_code})",
        tasks.len(),
        states.join(", ")
    )
}

/// The exit code `ysub --wait` returns for a finished job: 0 when it COMPLETED; otherwise never
/// 0: 128+signal when a signal killed it, its own exit code when that is non-zero, else 1 (a
/// CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED or OUT_OF_MEMORY job with nothing better to
/// report).
pub fn wait_exit_code(job: &JobInfo) -> u8 {
    if JobState::parse(&job.state) == Some(JobState::Completed) {
        return 0;
    }
    if let Some(signal) = job.signal.filter(|s| (1..128).contains(s)) {
        return 128 + signal as u8;
    }
    match job.exit_code {
        Some(code) if (1..=255).contains(&code) => code as u8,
        _ => 1,
    }
}

/// The line `ysub --wait` ends with on stderr, e.g. `Job 7 COMPLETED (exit 0)` (`Job 12_7 ...`
/// for an array task).
pub fn final_line(job: &JobInfo, exit_code: u8) -> String {
    let mut line = format!(
        "Job {} {} (exit {exit_code}",
        job_name(job),
        escape_for_terminal(&job.state)
    );
    if let Some(signal) = job.signal {
        line.push_str(&format!(", signal {signal}"));
    }
    line.push(')');
    if !job.reason.is_empty() && JobState::parse(&job.state) != Some(JobState::Completed) {
        line.push_str(": ");
        line.push_str(&escape_for_terminal(&job.reason));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use ysched_common::array::DEFAULT_MAX_ARRAY_SIZE;

    fn cli(args: &[&str]) -> YsubCli {
        YsubCli::try_parse_from(std::iter::once("ysub").chain(args.iter().copied())).unwrap()
    }

    fn context() -> SubmitContext {
        SubmitContext {
            cwd: PathBuf::from("/home/alice/proj"),
            env: vec![
                ("PATH".into(), "/bin".into()),
                ("HOME".into(), "/home/alice".into()),
            ],
            max_array_size: DEFAULT_MAX_ARRAY_SIZE,
        }
    }

    fn script(contents: &str) -> BatchScript {
        BatchScript {
            default_name: "train.sh".into(),
            contents: contents.into(),
            args: vec![],
        }
    }

    /// Resolves directives in `contents` and `args` like `resolve` does, without a file.
    fn spec_for(contents: &str, args: &[&str]) -> Result<JobSpec> {
        let options =
            options_from_directives(contents, "train.sh")?.overridden_by(cli(args).options);
        build_spec(&options, script(contents), &context())
    }

    #[test]
    fn options_after_the_script_belong_to_it() {
        let parsed = cli(&["-G", "2", "run.sh", "--epochs", "3", "-G", "x"]);
        assert_eq!(parsed.options.gpus, Some(2));
        assert_eq!(parsed.command, ["run.sh", "--epochs", "3", "-G", "x"]);
        let parsed = cli(&["--wrap", "echo hi", "-J", "w"]);
        assert_eq!(parsed.wrap.as_deref(), Some("echo hi"));
        assert_eq!(parsed.options.job_name.as_deref(), Some("w"));
    }

    #[test]
    fn bad_numbers_are_refused_by_the_parser() {
        for bad in [
            &["-G", "-1", "s.sh"][..],
            &["-G", "x", "s.sh"],
            &["-c", "0", "s.sh"],
            &["--grace", "-5", "s.sh"],
            &["-N", "two", "s.sh"],
            &["-N", "0", "s.sh"],
            &["-G", "4294967296", "s.sh"],
        ] {
            let args = std::iter::once("ysub").chain(bad.iter().copied());
            assert!(YsubCli::try_parse_from(args).is_err(), "{bad:?} accepted");
        }
    }

    fn parse_error(args: &[&str]) -> String {
        let e = YsubCli::try_parse_from(std::iter::once("ysub").chain(args.iter().copied()))
            .unwrap_err();
        clap_error_message(&e)
    }

    #[test]
    fn numbers_out_of_range_name_the_flag_and_the_bound() {
        assert_eq!(
            parse_error(&["-G", "4294967296", "s.sh"]),
            "--gpus 4294967296 exceeds the maximum of 100000"
        );
        assert_eq!(
            parse_error(&["-G", "100001", "s.sh"]),
            "--gpus 100001 exceeds the maximum of 100000"
        );
        assert_eq!(
            parse_error(&["-N", "0", "s.sh"]),
            "--nodes must be at least 1 (got 0)"
        );
        assert_eq!(
            parse_error(&["--nodes=10001", "s.sh"]),
            "--nodes 10001 exceeds the maximum of 10000"
        );
        assert_eq!(
            parse_error(&["-c", "0", "s.sh"]),
            "--cpus must be at least 1 (got 0)"
        );
        assert_eq!(
            parse_error(&["--cpus-per-task", "99999999999999999999999", "s.sh"]),
            "--cpus 99999999999999999999999 exceeds the maximum of 100000"
        );
        assert_eq!(
            parse_error(&["--grace", "4294967296", "s.sh"]),
            "--grace 4294967296 exceeds the maximum of 4294967295"
        );
        assert_eq!(
            parse_error(&["-G", "-1", "s.sh"]),
            "invalid --gpus '-1': use a whole number from 0 to 100000"
        );
        let ok = cli(&[
            "-G", "100000", "-N", "10000", "-c", "100000", "--grace", "0", "s.sh",
        ]);
        assert_eq!(
            (
                ok.options.gpus,
                ok.options.nodes,
                ok.options.cpus,
                ok.options.grace
            ),
            (Some(100_000), Some(10_000), Some(100_000), Some(0))
        );
        // The same in a directive, which names the line.
        let err = spec_for("#YSUB -N 0\n", &[]).unwrap_err().to_string();
        assert_eq!(
            err,
            "train.sh: line 1: invalid #YSUB directive: --nodes must be at least 1 (got 0)"
        );
    }

    #[test]
    fn signal_before_the_time_limit_as_sbatch_takes_it() {
        let warn = |contents: &str, args: &[&str]| spec_for(contents, args).unwrap().warn_signal;
        assert_eq!(warn("#!/bin/sh\n", &[]), None);
        let w = warn("#!/bin/sh\n", &["--signal", "USR1@2"]).unwrap();
        assert_eq!((w.signal, w.secs, w.batch_only), (10, 2, false));
        // SECS defaults to 60; `B:` is the batch shell only; the command line wins.
        let w = warn("#YSUB --signal=B:SIGTERM\n", &[]).unwrap();
        assert_eq!((w.signal, w.secs, w.batch_only), (15, 60, true));
        let w = warn("#YSUB --signal=B:SIGTERM\n", &["--signal", "12@30"]).unwrap();
        assert_eq!((w.signal, w.secs, w.batch_only), (12, 30, false));
        let err = parse_error(&["--signal", "USR9", "s.sh"]);
        assert!(err.contains("unknown signal 'USR9'"), "{err}");
        let err = parse_error(&["--signal", "USR1@70000", "s.sh"]);
        assert!(err.contains("70000 seconds is out of range"), "{err}");
        let err = spec_for("#YSUB --signal USR1@x\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("train.sh: line 1: invalid #YSUB directive: invalid --signal"),
            "{err}"
        );
    }

    #[test]
    fn huge_time_limits_and_sizes_are_refused_not_wrapped() {
        let err = spec_for("#!/bin/sh\n", &["-t", "307445734561825861"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "time limit '307445734561825861' exceeds the maximum of 365 days (365-00:00:00)"
        );
        assert!(spec_for("#!/bin/sh\n", &["-t", "999999999999999999"]).is_err());
        assert!(spec_for("#YSUB -t 366-00\n", &[]).is_err());
        assert_eq!(
            spec_for("#!/bin/sh\n", &["-t", "365-00:00:00"])
                .unwrap()
                .time_limit_secs,
            365 * 86_400
        );
        let err = spec_for("#!/bin/sh\n", &["--mem", "17179869184T"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("exceeds the maximum of 1024T"), "{err}");
    }

    #[test]
    fn names_and_accounts_must_be_printable() {
        let err = spec_for("#!/bin/sh\n", &["-J", "bad\nname"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "job name \"bad\\nname\" contains a control character (U+000A); names may not \
             contain control characters"
        );
        let err = spec_for("#YSUB -J \"\x1b[2J\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("(U+001B)"), "{err}");
        let err = spec_for("#!/bin/sh\n", &["-A", "ml\u{2066}"])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("account \"ml\\u{2066}\""), "{err}");
        // The script's file name is the default name: it must be printable too.
        let mut bad_file = script("#!/bin/sh\n");
        bad_file.default_name = "run\r.sh".into();
        assert!(build_spec(&JobOptions::default(), bad_file, &context()).is_err());
        // Printable Unicode is fine.
        let spec = spec_for("#!/bin/sh\n", &["-J", "训练-é 🚀", "-A", "équipe"]).unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.account.as_str()),
            ("训练-é 🚀", "équipe")
        );
    }

    #[test]
    fn empty_and_odd_values_are_refused_with_what_to_give() {
        for (args, wanted) in [
            (
                &["-p", ""][..],
                "-p/--priority is empty: give a tier, or leave -p out",
            ),
            (&["--gpu-type", ""], "--gpu-type is empty"),
            (&["--constraint", ""], "--constraint is empty"),
            (
                &["--constraint", "ib,,nvme"],
                "an empty feature in --constraint",
            ),
            (&["-D", ""], "-D/--chdir is empty"),
            (&["-A", " "], "-A/--account is empty"),
            (&["-J", ""], "-J/--job-name is empty"),
            (&["--mem", "0"], "--mem 0 asks for no memory"),
            (&["-t", "1:99:99"], "minutes must be 0 to 59 (got 99)"),
            (&["-t", "00:60"], "seconds must be 0 to 59 (got 60)"),
        ] {
            let err = spec_for("#!/bin/sh\n", args).unwrap_err().to_string();
            assert!(err.contains(wanted), "{args:?}: {err}");
        }
    }

    #[test]
    fn every_text_is_bounded_before_anything_is_sent() {
        let config = Config::default();
        let long = |n: usize| "x".repeat(n);
        for (args, wanted) in [
            (
                vec!["-J".to_string(), long(100_000)],
                "job name is 100000 bytes; the limit is 256 (fixed)",
            ),
            (
                vec!["-A".to_string(), long(129)],
                "account is 129 bytes; the limit is 128 (fixed)",
            ),
            (
                vec!["-p".to_string(), long(65)],
                "tier is 65 bytes; the limit is 64 (fixed)",
            ),
            (
                vec!["--gpu-type".to_string(), long(65)],
                "GPU model is 65 bytes; the limit is 64 (fixed)",
            ),
            (
                vec!["--constraint".to_string(), long(65)],
                "feature is 65 bytes; the limit is 64 (fixed)",
            ),
            (
                vec!["-D".to_string(), format!("/{}", long(5000))],
                "working directory: path is 5001 bytes; the limit is 4096 (fixed)",
            ),
            (vec!["-o".to_string(), long(4090)], "output file: path is"),
        ] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let err = match spec_for("#!/bin/sh\n", &args) {
                Err(e) => e.to_string(),
                Ok(spec) => check_payload_size(&spec, &config).unwrap_err().to_string(),
            };
            assert!(err.contains(wanted), "{wanted}: {err}");
            assert!(err.len() < 200, "{err}");
        }
    }

    #[test]
    fn payload_size_is_checked_like_schedd_does() {
        let config = Config::default();
        let limit = config.max_script_bytes() as usize;
        let mut spec = spec_for("#!/bin/sh\n", &["--export=NONE"]).unwrap();
        spec.script = "x".repeat(limit);
        assert!(check_payload_size(&spec, &config).is_ok());
        spec.script.push('x');
        assert_eq!(
            check_payload_size(&spec, &config).unwrap_err().to_string(),
            "script is 4.1 MiB; the limit is 4 MiB (scheduler.max_script_mib)"
        );
        spec.script = "x".repeat(50_001_719);
        assert_eq!(
            check_payload_size(&spec, &config).unwrap_err().to_string(),
            "script is 47.7 MiB; the limit is 4 MiB (scheduler.max_script_mib)"
        );
        // The environment counts names, values and 2 bytes per variable.
        spec.script = "#!/bin/sh\n".into();
        spec.env.insert("BIG".into(), "v".repeat(limit - 5));
        assert!(check_payload_size(&spec, &config).is_ok());
        spec.env.insert("A".into(), String::new());
        assert_eq!(
            check_payload_size(&spec, &config).unwrap_err().to_string(),
            "environment is 4.1 MiB; the limit is 4 MiB (scheduler.max_script_mib)"
        );
    }

    #[test]
    fn a_non_utf8_variable_is_refused_only_when_exported() {
        use std::os::unix::ffi::OsStringExt;
        let mut context = context();
        context
            .env
            .push(("LATIN1".into(), OsString::from_vec(b"caf\xe9".to_vec())));
        let options = |args: &[&str]| cli(args).options;
        let err = build_spec(&options(&[]), script("#!/bin/sh\n"), &context)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("environment variable LATIN1 is not valid UTF-8; "),
            "{err}"
        );
        for export in [
            "--export=NONE",
            "--export=PATH,X=1",
            "--export=ALL,LATIN1=x",
        ] {
            let spec = build_spec(&options(&[export]), script("#!/bin/sh\n"), &context)
                .unwrap_or_else(|e| panic!("{export}: {e}"));
            assert_ne!(
                spec.env.get("LATIN1").map(String::as_str),
                Some("caf\u{fffd}")
            );
        }
    }

    #[test]
    fn malformed_time_and_size_are_errors() {
        let err = spec_for("#!/bin/sh\n", &["-t", "1:2:3:4"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid time limit '1:2:3:4'"), "{err}");
        let err = spec_for("#!/bin/sh\n", &["--mem", "12Q"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid memory size '12Q'"), "{err}");
        let err = spec_for("#!/bin/sh\n#YSUB --time=soon\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid time limit 'soon'"), "{err}");
    }

    #[test]
    fn defaults() {
        let spec = spec_for("#!/bin/sh\necho hi\n", &[]).unwrap();
        assert_eq!(spec.name, "train.sh");
        assert_eq!(spec.workdir, "/home/alice/proj");
        assert_eq!(spec.env.len(), 2);
        assert_eq!(
            (
                spec.gpus,
                spec.cpus,
                spec.nodes,
                spec.mem_mib,
                spec.time_limit_secs
            ),
            (0, 0, 0, 0, 0)
        );
        assert_eq!(spec.grace_secs, None);
        assert_eq!(spec.script, "#!/bin/sh\necho hi\n");
        assert!(spec.tier.is_empty() && spec.stdout_path.is_empty() && !spec.hold);
    }

    #[test]
    fn directives_set_options_and_the_command_line_overrides_them() {
        let contents = "#!/bin/bash\n\
                        #YSUB -J \"my job\" -G 4 --gpu-type 'A100|H100'\n\
                        #YSUB -t 2:00:00 --mem 16G -p low\n\
                        #YSUB --constraint ib --constraint nvme,fast\n\
                        #YSUB --hold -o logs/%j.out\n\
                        python train.py\n\
                        #YSUB -G 99\n";
        let spec = spec_for(contents, &[]).unwrap();
        assert_eq!(spec.name, "my job");
        assert_eq!(spec.gpus, 4);
        assert_eq!(spec.gpu_type, "A100|H100");
        assert_eq!(spec.time_limit_secs, 7200);
        assert_eq!(spec.mem_mib, 16384);
        assert_eq!(spec.tier, "low");
        assert_eq!(spec.constraints, ["ib", "nvme", "fast"]);
        assert!(spec.hold);
        assert_eq!(spec.stdout_path, "logs/%j.out");

        let spec = spec_for(
            contents,
            &["-G", "2", "-J", "cli", "-p", "high", "--constraint", "x"],
        )
        .unwrap();
        assert_eq!(
            (spec.gpus, spec.name.as_str(), spec.tier.as_str()),
            (2, "cli", "high")
        );
        assert_eq!(spec.constraints, ["x"]);
        assert_eq!(spec.time_limit_secs, 7200, "untouched by the command line");
    }

    #[test]
    fn array_and_dependency_from_directives_and_the_command_line() {
        let contents =
            "#!/bin/sh\n#YSUB --array 0-99%4\n#YSUB -d afterok:12\necho $YS_ARRAY_TASK_ID\n";
        let spec = spec_for(contents, &[]).unwrap();
        assert_eq!(spec.array, "0-99%4");
        assert_eq!(spec.dependency, "afterok:12");
        // Short forms, `=` forms, and the command line winning.
        let spec = spec_for("#YSUB -a 1,5,9-12\n#YSUB --dependency=singleton\n", &[]).unwrap();
        assert_eq!(
            (spec.array.as_str(), spec.dependency.as_str()),
            ("1,5,9-12", "singleton")
        );
        let spec = spec_for(
            contents,
            &[
                "-a",
                "0-199:2%16",
                "--dependency",
                "afterany:12_7?afternotok:13_[1-3]",
            ],
        )
        .unwrap();
        assert_eq!(spec.array, "0-199:2%16");
        assert_eq!(spec.dependency, "afterany:12_7?afternotok:13_[1-3]");
        // A later line overrides an earlier one.
        let spec = spec_for("#YSUB --array 0-9\n#YSUB --array=3-4\n", &[]).unwrap();
        assert_eq!(spec.array, "3-4");
        // Neither: not an array, no dependency.
        let spec = spec_for("#!/bin/sh\n", &[]).unwrap();
        assert!(spec.array.is_empty() && spec.dependency.is_empty());
        let parsed = cli(&["-a", "0-3", "-d", "after:5", "s.sh"]);
        assert_eq!(parsed.options.array.as_deref(), Some("0-3"));
        assert_eq!(parsed.options.dependency.as_deref(), Some("after:5"));
    }

    #[test]
    fn bad_arrays_and_dependencies_are_refused_before_submitting() {
        assert_eq!(
            parse_error(&["--array", "5-1", "s.sh"]),
            "--array '5-1': range '5-1' goes backwards"
        );
        assert!(parse_error(&["-a", "0-9%0", "s.sh"]).contains("%0 would never run a task"));
        assert!(parse_error(&["-a", "x", "s.sh"]).contains("'x' is not a task index"));
        assert!(parse_error(&["-d", "afterwards:12", "s.sh"]).contains("unknown type 'afterwards'"));
        assert!(parse_error(&["-d", "afterok:12,afterany:3?after:4", "s.sh"]).contains("not both"));
        assert!(parse_error(&["-d", "afterok:x", "s.sh"]).contains("is not a job id"));
        // In a directive, the line is named.
        let err = spec_for("#!/bin/sh\n#YSUB --array 0-9:0\n", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "train.sh: line 2: invalid #YSUB directive: --array '0-9:0': a step of 0"
        );
        let err = spec_for("#YSUB -d afterok\n", &[]).unwrap_err().to_string();
        assert!(
            err.starts_with("train.sh: line 1: invalid #YSUB directive: --dependency 'afterok'"),
            "{err}"
        );
    }

    #[test]
    fn array_indices_must_be_below_the_configured_limit() {
        let options = |args: &[&str]| cli(args).options;
        let mut context = context();
        context.max_array_size = 100;
        assert!(build_spec(&options(&["-a", "0-99"]), script("#!/bin/sh\n"), &context).is_ok());
        let err = build_spec(&options(&["-a", "0-100"]), script("#!/bin/sh\n"), &context)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--array '0-100': index 100 is above the largest allowed, 99 \
             (scheduler.max_array_size = 100)"
        );
        // Past any configuration's limit, the parser leaves the message to the check that
        // knows the cluster's limit.
        let parsed = options(&["-a", "0-4000000000%2"]);
        let err = build_spec(&parsed, script("#!/bin/sh\n"), &self::context())
            .unwrap_err()
            .to_string();
        assert!(err.contains("(scheduler.max_array_size = 10001)"), "{err}");
    }

    #[test]
    fn an_array_waits_for_every_task_and_exits_with_the_highest_code() {
        let task = |id: u64, task: u32, state: &str, exit: Option<i32>| {
            JobInfo {
                display_id: format!("12_{task}"),
                array_job_id: Some(12),
                array_task_id: Some(task),
                ..finished(state, exit, None)
            }
            .with_id(id)
        };
        let all_ok = [
            task(12, 0, "COMPLETED", Some(0)),
            task(13, 1, "COMPLETED", Some(0)),
        ];
        assert_eq!(array_exit_code(&all_ok), 0);
        assert_eq!(
            array_summary(12, &all_ok, 0),
            "Array 12: 2 tasks ended, 2 COMPLETED (exit 0)"
        );
        let mixed = [
            task(12, 0, "COMPLETED", Some(0)),
            task(13, 1, "FAILED", Some(3)),
            task(14, 2, "FAILED", Some(2)),
            task(15, 3, "CANCELLED", None),
        ];
        assert_eq!(array_exit_code(&mixed), 3);
        assert_eq!(
            array_summary(12, &mixed, 3),
            "Array 12: 4 tasks ended, 1 COMPLETED, 2 FAILED, 1 CANCELLED (exit 3)"
        );
        assert_eq!(final_line(&mixed[1], 3), "Job 12_1 FAILED (exit 3)");
        assert_eq!(array_exit_code(&[]), 0);
        assert_eq!(
            spinner_message(&mixed[1], Some((1, 4))),
            "Job 12_1 FAILED, 1 of 4 tasks ended"
        );
    }

    trait WithId {
        fn with_id(self, id: u64) -> Self;
    }

    impl WithId for JobInfo {
        fn with_id(mut self, id: u64) -> Self {
            self.id = id;
            self
        }
    }

    #[test]
    fn later_directive_lines_override_earlier_ones() {
        let spec = spec_for("#YSUB -G 1\n#YSUB -G 3\n", &[]).unwrap();
        assert_eq!(spec.gpus, 3);
    }

    #[test]
    fn bad_directives_name_the_line() {
        let err = spec_for("#!/bin/sh\n\n#YSUB --bogus\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("train.sh: line 3: invalid #YSUB directive: "),
            "{err}"
        );
        assert!(err.contains("--bogus"), "{err}");
        let err = spec_for("#YSUB -G x\n", &[]).unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("'x'"), "{err}");
        assert!(spec_for("#YSUB stray.sh\n", &[]).is_err());
    }

    #[test]
    fn workdir_is_made_absolute() {
        let spec = spec_for("#!/bin/sh\n", &["-D", "./runs/../out"]).unwrap();
        assert_eq!(spec.workdir, "/home/alice/proj/runs/../out");
        let spec = spec_for("#!/bin/sh\n", &["-D", "/scratch/x/"]).unwrap();
        assert_eq!(spec.workdir, "/scratch/x");
    }

    #[test]
    fn export_option_selects_the_environment() {
        let spec = spec_for("#!/bin/sh\n", &["--export", "NONE"]).unwrap();
        assert!(spec.env.is_empty());
        let spec = spec_for("#!/bin/sh\n", &["--export=PATH,EPOCHS=3"]).unwrap();
        assert_eq!(spec.env.len(), 2);
        assert_eq!(spec.env["PATH"], "/bin");
        assert_eq!(spec.env["EPOCHS"], "3");
        assert!(spec_for("#!/bin/sh\n", &["--export", "9X"]).is_err());
    }

    #[test]
    fn wrap_builds_a_shell_script() {
        let (options, script) = resolve(cli(&["--wrap", "nvidia-smi -L", "-G", "1"])).unwrap();
        let spec = build_spec(&options, script, &context()).unwrap();
        assert_eq!(spec.name, "wrap");
        assert_eq!(spec.script, "#!/bin/sh\nnvidia-smi -L\n");
        assert_eq!(spec.gpus, 1);
        assert!(resolve(cli(&["--wrap", "x", "s.sh"])).is_err());
        assert!(resolve(cli(&[])).is_err());
    }

    #[test]
    fn script_files_are_read_with_their_arguments() {
        let path = std::env::temp_dir().join(format!("ysub-test-{}.sh", std::process::id()));
        std::fs::write(&path, "#!/bin/sh\n#YSUB -G 2\necho \"$@\"\n").unwrap();
        let path_text = path.to_str().unwrap();
        let (options, script) = resolve(cli(&["-t", "5", path_text, "a", "--b"])).unwrap();
        std::fs::remove_file(&path).unwrap();
        let spec = build_spec(&options, script, &context()).unwrap();
        assert_eq!(spec.name, path.file_name().unwrap().to_str().unwrap());
        assert_eq!(spec.args, ["a", "--b"]);
        assert_eq!((spec.gpus, spec.time_limit_secs), (2, 300));

        let err = resolve(cli(&["/nonexistent/job.sh"])).unwrap_err();
        assert!(
            format!("{err:#}").contains("'/nonexistent/job.sh'"),
            "{err:#}"
        );
    }

    fn finished(state: &str, exit_code: Option<i32>, signal: Option<i32>) -> JobInfo {
        JobInfo {
            id: 7,
            state: state.into(),
            exit_code,
            signal,
            ..Default::default()
        }
    }

    #[test]
    fn wait_exit_codes() {
        assert_eq!(wait_exit_code(&finished("COMPLETED", Some(0), None)), 0);
        assert_eq!(wait_exit_code(&finished("FAILED", Some(3), None)), 3);
        assert_eq!(wait_exit_code(&finished("FAILED", None, Some(9))), 137);
        assert_eq!(wait_exit_code(&finished("FAILED", None, None)), 1);
        assert_eq!(wait_exit_code(&finished("CANCELLED", Some(0), None)), 1);
        assert_eq!(wait_exit_code(&finished("CANCELLED", None, Some(15))), 143);
        assert_eq!(wait_exit_code(&finished("TIMEOUT", None, None)), 1);
        assert_eq!(wait_exit_code(&finished("NODE_FAIL", None, None)), 1);
        assert_eq!(wait_exit_code(&finished("PREEMPTED", Some(2), None)), 2);
        assert_eq!(wait_exit_code(&finished("FAILED", Some(256), None)), 1);
    }

    #[test]
    fn final_lines() {
        assert_eq!(
            final_line(&finished("COMPLETED", Some(0), None), 0),
            "Job 7 COMPLETED (exit 0)"
        );
        let mut job = finished("FAILED", None, Some(9));
        job.reason = "killed".into();
        assert_eq!(
            final_line(&job, 137),
            "Job 7 FAILED (exit 137, signal 9): killed"
        );
    }

    #[test]
    fn only_terminal_states_end_the_wait() {
        assert!(!is_finished(&finished("PENDING", None, None)));
        assert!(!is_finished(&finished("PREEMPTING", None, None)));
        assert!(is_finished(&finished("TIMEOUT", None, None)));
    }
}
