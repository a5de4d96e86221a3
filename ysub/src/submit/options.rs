//! The job options `ysub` takes, on its command line and in `#YSUB` lines, with the value
//! parsers that check each one's form, and the command line itself.

use crate::args::OptionError;
pub use crate::slurm::values::GresGpus;
use clap::{Args, Parser};
use ysched_common::limits::{
    MAX_ARRAY_SIZE_CEILING, MAX_CPUS, MAX_GPUS, MAX_NODES, MAX_NTASKS_PER_NODE,
};
use ysched_common::parse::parse_bounded_u32;
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
    #[arg(short = 'H', long)]
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
    #[arg(long = "no-requeue", overrides_with = "requeue")]
    pub no_requeue: bool,
    /// Requeue the job when it is preempted (the default; cancels an earlier --no-requeue)
    #[arg(long, hide = true, overrides_with = "no_requeue")]
    pub requeue: bool,
    /// Required GPU interconnect, e.g. `nvlink`
    #[arg(long, value_name = "KIND")]
    pub interconnect: Option<String>,
    /// Required node feature(s); repeatable or a comma list
    #[arg(short = 'C', long, value_name = "FEATURE")]
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
    /// Run on exactly these nodes: names or a host list, e.g. `node[1-4,7],gpu01` (at most
    /// 10000); the job's node count defaults to their number
    #[arg(short = 'w', long, value_name = "HOSTS", value_parser = host_list("--nodelist"))]
    pub nodelist: Option<NodeNames>,
    /// Never run on these nodes: names or a host list
    #[arg(short = 'x', long, value_name = "HOSTS", value_parser = host_list("--exclude"))]
    pub exclude: Option<NodeNames>,
    /// Take whole nodes: every GPU, every CPU and all the memory of each of the job's nodes
    #[arg(long)]
    pub exclusive: bool,
    /// Do not start before TIME, in this host's local time: now+1hour, now+30minutes, 16:00,
    /// 2026-12-24, 2026-12-24T16:00, midnight, noon, teatime, tomorrow...; at most 365 days ahead
    #[arg(short = 'b', long, value_name = "TIME", value_parser = begin_time)]
    pub begin: Option<u64>,
    /// Mail on these events: NONE, BEGIN, END, FAIL, REQUEUE, TIME_LIMIT, TIME_LIMIT_50,
    /// TIME_LIMIT_80, TIME_LIMIT_90, ARRAY_TASKS, INVALID_DEPEND or ALL (a comma list)
    #[arg(long = "mail-type", value_name = "TYPES", value_parser = mail_types)]
    pub mail_type: Option<MailTypes>,
    /// Where the mail goes [default: your user name]
    #[arg(long = "mail-user", value_name = "ADDRESS")]
    pub mail_user: Option<String>,
    /// Processes your launcher (torchrun, mpirun) starts per node, 1 to 10000: the job sees
    /// YS_NTASKS_PER_NODE and YS_NTASKS; the script still starts once per node
    #[arg(long = "ntasks-per-node", value_name = "N",
          value_parser = bounded("--ntasks-per-node", 1, MAX_NTASKS_PER_NODE),
          allow_negative_numbers = true)]
    pub ntasks_per_node: Option<u32>,
    /// GPUs on each node (the job's GPUs are N times its nodes), instead of -G
    #[arg(long = "gpus-per-node", value_name = "N", hide = true,
          value_parser = bounded("--gpus-per-node", 0, MAX_GPUS), allow_negative_numbers = true)]
    pub gpus_per_node: Option<u32>,
    /// Slurm's `gpu[:TYPE][:N]`: N GPUs (default 1) on each node, of model TYPE
    #[arg(long, value_name = "gpu[:TYPE][:N]", hide = true, value_parser = gres)]
    pub gres: Option<GresGpus>,
    /// Slurm's partition: a tier name, or one the site maps to a tier (`-p` is the tier itself)
    #[arg(long, value_name = "NAME", hide = true)]
    pub partition: Option<String>,
    /// Slurm's QOS: a tier name, or one the site maps to a tier
    #[arg(short = 'q', long, value_name = "NAME", hide = true)]
    pub qos: Option<String>,
    /// Give the job Slurm's SLURM_* variables too (SLURM_JOB_ID, SLURM_PROCID...)
    #[arg(long = "slurm-env")]
    pub slurm_env: bool,
    /// How the output and error files are opened: `append` to them, or `truncate` them (the
    /// default)
    #[arg(long = "open-mode", value_name = "MODE", value_enum)]
    pub open_mode: Option<OpenMode>,
    /// Free text kept with the job (at most 1024 bytes), shown by `yctl show job`
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
    /// Slurm's workload key, kept as the comment `wckey=KEY` unless --comment is given
    #[arg(long, value_name = "KEY", hide = true)]
    pub wckey: Option<String>,
    /// Slurm's `-c/--cpus-per-task` in `#SBATCH` lines: CPUs per task, times the tasks per
    /// node. Not a ysub flag: ysub's `-c` is CPUs per node.
    #[arg(skip)]
    pub cpus_per_task: Option<u32>,
    /// Slurm's `-n/--ntasks` in `#SBATCH` lines: tasks in all (nodes times tasks per node).
    #[arg(skip)]
    pub ntasks: Option<u32>,
}

/// Node names, a host list already expanded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeNames(pub Vec<String>);

/// `--mail-type`'s events, upper case; empty for `NONE`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailTypes(pub Vec<String>);

/// `--open-mode`: how the output and error files are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OpenMode {
    Append,
    Truncate,
}

/// The value parser of `--nodelist` and `--exclude`: a host list, expanded here.
fn host_list(
    flag: &'static str,
) -> impl Fn(&str) -> Result<NodeNames, OptionError> + Clone + Send + Sync + 'static {
    move |value| {
        crate::slurm::expand_hostlist(flag, value, crate::slurm::MAX_HOSTS)
            .map(NodeNames)
            .map_err(OptionError)
    }
}

/// The value parser of `--begin`: the instant, read now in this host's local time.
fn begin_time(value: &str) -> Result<u64, OptionError> {
    let now = ysched_common::time::now_ms() / 1000;
    ysched_common::time::parse_begin(value, now, &ysched_common::time::SystemLocalTime)
        .map_err(|e| OptionError(e.to_string()))
}

/// The value parser of `--mail-type`: a comma list of [`ysched_common::mail_types`]' words,
/// checked as schedd checks them, and sent as given (upper case, each once; none for `NONE`).
fn mail_types(value: &str) -> Result<MailTypes, OptionError> {
    let words: Vec<&str> = value.split(',').collect();
    ysched_common::mail_types::parse(&words).map_err(OptionError)?;
    let mut types: Vec<String> = Vec::new();
    for word in words.iter().map(|w| w.trim().to_ascii_uppercase()) {
        if word != ysched_common::mail_types::NONE && !types.contains(&word) {
            types.push(word);
        }
    }
    Ok(MailTypes(types))
}

/// The value parser of `--gres`: Slurm's `gpu[:TYPE][:N]` ([`crate::slurm::values::gres`]).
fn gres(value: &str) -> Result<GresGpus, OptionError> {
    crate::slurm::values::gres(value).map_err(OptionError)
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
    ///
    /// The GPU count is one choice however it is given (`-G`, `--gpus-per-node`, `--gres`): a
    /// later source giving any of them replaces all three. So are the CPUs (ysub's `-c` per
    /// node, Slurm's `--cpus-per-task` in `#SBATCH` lines).
    pub fn overridden_by(self, later: JobOptions) -> JobOptions {
        let later_gpus =
            later.gpus.is_some() || later.gpus_per_node.is_some() || later.gres.is_some();
        let (gpus, gpus_per_node, gres) = if later_gpus {
            (later.gpus, later.gpus_per_node, later.gres)
        } else {
            (self.gpus, self.gpus_per_node, self.gres)
        };
        let (cpus, cpus_per_task) = if later.cpus.is_some() || later.cpus_per_task.is_some() {
            (later.cpus, later.cpus_per_task)
        } else {
            (self.cpus, self.cpus_per_task)
        };
        JobOptions {
            job_name: later.job_name.or(self.job_name),
            tier: later.tier.or(self.tier),
            gpu_type: later.gpu_type.or(self.gpu_type),
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
            // `--requeue` cancels an earlier `--no-requeue`, and the other way round.
            no_requeue: !later.requeue && (later.no_requeue || self.no_requeue),
            requeue: !later.no_requeue && (later.requeue || self.requeue),
            interconnect: later.interconnect.or(self.interconnect),
            constraint: if later.constraint.is_empty() {
                self.constraint
            } else {
                later.constraint
            },
            parsable: later.parsable || self.parsable,
            array: later.array.or(self.array),
            dependency: later.dependency.or(self.dependency),
            nodelist: later.nodelist.or(self.nodelist),
            exclude: later.exclude.or(self.exclude),
            exclusive: later.exclusive || self.exclusive,
            begin: later.begin.or(self.begin),
            mail_type: later.mail_type.or(self.mail_type),
            mail_user: later.mail_user.or(self.mail_user),
            ntasks_per_node: later.ntasks_per_node.or(self.ntasks_per_node),
            ntasks: later.ntasks.or(self.ntasks),
            partition: later.partition.or(self.partition),
            qos: later.qos.or(self.qos),
            slurm_env: later.slurm_env || self.slurm_env,
            open_mode: later.open_mode.or(self.open_mode),
            comment: later.comment.or(self.comment),
            wckey: later.wckey.or(self.wckey),
            gpus,
            gpus_per_node,
            gres,
            cpus,
            cpus_per_task,
        }
    }
}

/// Just the job options, for parsing option words with the command line's definitions: a
/// `#YSUB` line, or the ysub options an sbatch option translates to.
#[derive(Parser, Debug)]
#[command(
    name = "#YSUB",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
pub(crate) struct OptionWords {
    #[command(flatten)]
    pub options: JobOptions,
}

#[derive(Parser, Debug)]
#[command(
    name = "ysub",
    version,
    about = "Submit a batch job to ysched",
    override_usage = "ysub [OPTIONS] SCRIPT [ARGS]...\n       ysub [OPTIONS] --wrap COMMAND",
    after_help = "Options may also be given in the script on `#YSUB` lines placed among the comments at its top; the command line overrides them. `#SBATCH` lines are read too, through the table of Slurm's options in the user guide; `#YSUB` lines override them."
)]
pub struct YsubCli {
    #[command(flatten)]
    pub options: JobOptions,
    /// Run COMMAND (with /bin/sh) instead of a script
    #[arg(long, value_name = "COMMAND")]
    pub wrap: Option<String>,
    /// Print the user guide's table of sbatch's options, as Markdown, and exit
    #[arg(long = "slurm-options-markdown", hide = true)]
    pub slurm_options_markdown: bool,
    /// The batch script, then the arguments passed to it (options after SCRIPT belong to it)
    #[arg(value_name = "SCRIPT [ARGS]", trailing_var_arg = true, num_args = 0..)]
    pub command: Vec<String>,
}
