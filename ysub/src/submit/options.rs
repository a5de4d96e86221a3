//! The job options `ysub` takes, on its command line and in `#YSUB` lines, with the value
//! parsers that check each one's form, and the command line itself.

use crate::args::OptionError;
use clap::{Args, Parser};
use ysched_common::parse::{parse_bounded_u32, MAX_CPUS, MAX_GPUS, MAX_NODES};
use ysched_common::WarnSignal;
use ysched_common::{ArraySpec, DependencyRequest};

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
/// `scheduler.max_array_size` is checked by [`super::build_spec`], which knows that limit.
fn array_spec(value: &str) -> Result<String, OptionError> {
    match ArraySpec::parse(value, MAX_ARRAY_SIZE_CEILING) {
        Ok(_) => Ok(value.trim().to_string()),
        // Too large an index: [`super::build_spec`] says so, naming the limit that applies.
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
