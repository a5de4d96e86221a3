//! Every input's maximum, in one table ([`ALL`]): what is limited, where users give it, the
//! maximum, and the config key that sets it (or "fixed"). The CLIs check these before they
//! send anything and `schedd` checks them again where a request enters (before its state lock),
//! with the same one-line message, e.g. `job name is 100000 bytes; the limit is 256 (fixed)`.
//! The numbers a job asks for (GPUs, nodes, CPUs, memory, time) have their maxima in a table
//! of their own ([`MAXIMA`], `maxima.rs`). `docs/admin-guide.md` ("Limits") lists every row
//! of both; a unit test keeps them in step.
//!
//! Everything is measured in bytes (UTF-8) or in items. Why each number:
//!
//! * names shown in `yq` (job name, account, tier, GPU model, feature) are a line's worth, so
//!   that one user's name cannot make every listing slow or huge;
//! * paths are Linux's `PATH_MAX` (4096), measured once made absolute;
//! * lists of jobs (`ycancel 1 2 3`, `yq -j`) and dependencies are far above what a person
//!   types and far below what costs `schedd` anything;
//! * what a job carries to its node (script, environment, arguments, paths) is bounded as a
//!   whole by [`check_launch_size`], so that an accepted job always fits the message that
//!   launches it.

use crate::config::Config;
use crate::parse::format_size;

mod maxima;
pub use maxima::*;

/// How a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// UTF-8 bytes of a text.
    Bytes,
    /// Items of a list.
    Items,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What is limited, as messages name it: `job name`, `job names in one request`.
    pub what: &'static str,
    /// Where users give it (for the docs): `ysub -J`, `yq -j, ycancel, yctl hold`.
    pub given_by: &'static str,
    /// The maximum: a fixed one, or the default of the config key.
    pub max: u64,
    pub unit: Unit,
    /// The config key that sets it, `fixed`, or how it derives from config keys.
    pub key: &'static str,
}

impl Limit {
    /// Refuses `value` when it is longer than this (fixed) limit: `job name is 100000 bytes;
    /// the limit is 256 (fixed)`. The value itself is never echoed.
    pub fn check_len(&self, value: &str) -> Result<(), String> {
        self.check_count(value.len() as u64)
    }

    /// Refuses a size or count over this (fixed) limit.
    pub fn check_count(&self, n: u64) -> Result<(), String> {
        check(self, n, self.max)
    }

    /// Refuses a size or count over `max`, the value of this limit's config key.
    pub fn check_count_with(&self, n: u64, max: u64) -> Result<(), String> {
        check(self, n, max)
    }

    /// The default maximum as the admin guide's table writes it: `256 bytes`, `4 MiB`, `1000`.
    pub fn default_text(&self) -> String {
        match self.unit {
            Unit::Bytes if self.max >= 1 << 20 && self.max.is_multiple_of(1 << 20) => {
                format!("{} MiB", self.max >> 20)
            }
            Unit::Bytes => format!("{} bytes", self.max),
            Unit::Items => self.max.to_string(),
        }
    }

    /// The refusal for `n` over `max`.
    pub fn refusal(&self, n: u64, max: u64) -> String {
        match self.unit {
            Unit::Bytes => format!(
                "{} is {n} bytes; the limit is {max} ({})",
                self.what, self.key
            ),
            Unit::Items => format!("{}: {n}; the limit is {max} ({})", self.what, self.key),
        }
    }
}

fn check(limit: &Limit, n: u64, max: u64) -> Result<(), String> {
    if n > max {
        Err(limit.refusal(n, max))
    } else {
        Ok(())
    }
}

const fn bytes(what: &'static str, given_by: &'static str, max: u64) -> Limit {
    Limit {
        what,
        given_by,
        max,
        unit: Unit::Bytes,
        key: "fixed",
    }
}

const fn items(what: &'static str, given_by: &'static str, max: u64) -> Limit {
    Limit {
        what,
        given_by,
        max,
        unit: Unit::Items,
        key: "fixed",
    }
}

pub const JOB_NAME: Limit = bytes("job name", "ysub -J", 256);
pub const ACCOUNT: Limit = bytes("account", "ysub -A", 128);
pub const TIER: Limit = bytes("tier", "ysub -p", 64);
/// Each model of `--gpu-type A100|H100`.
pub const GPU_TYPE: Limit = bytes("GPU model", "ysub --gpu-type (each model)", 64);
pub const GPU_TYPES: Limit = items("GPU models of --gpu-type", "ysub --gpu-type", 16);
/// Each feature of `--constraint`.
pub const CONSTRAINT: Limit = bytes("feature", "ysub --constraint (each feature)", 64);
pub const CONSTRAINTS: Limit = items("features of --constraint", "ysub --constraint", 64);
pub const INTERCONNECT: Limit = bytes("interconnect", "ysub --interconnect", 64);
/// The working directory, output and error files and the checkpoint directory, each made
/// absolute (a relative one is counted with the working directory in front).
pub const PATH: Limit = bytes(
    "path",
    "ysub -D, -o, -e, --checkpoint-dir (each, made absolute)",
    4096,
);
pub const ARRAY: Limit = bytes("--array", "ysub --array", 1024);
pub const DEPENDENCY: Limit = bytes("--dependency", "ysub --dependency", 1024);
pub const DEPENDENCY_TARGETS: Limit = items(
    "jobs named by --dependency",
    "ysub --dependency (each ID)",
    100,
);
/// The jobs a dependency stands for once each array is counted as its tasks.
pub const DEPENDENCY_JOBS: Limit = Limit {
    what: "jobs a --dependency stands for (an array counts its tasks)",
    given_by: "ysub --dependency",
    max: crate::array::DEFAULT_MAX_ARRAY_SIZE as u64,
    unit: Unit::Items,
    key: "scheduler.max_array_size",
};
/// One job as users name it: `12`, `12_7`, `12_[1-5,9]`.
pub const JOB_TARGET: Limit = bytes(
    "job id",
    "ycancel, yq -j, yctl hold|release|requeue|show",
    1024,
);
pub const TARGET_RANGES: Limit = items(
    "task ranges in one job id",
    "ycancel, yq -j, yctl hold|release|requeue|show",
    128,
);
/// Job ids and names in one request (`ycancel 1 2 3`, `yq -j 1,2,3`).
pub const TARGETS: Limit = items("job ids in one request", "ycancel, yq -j", 1000);
/// The jobs one request stands for once every array is counted as its tasks.
pub const JOBS_NAMED: Limit = Limit {
    what: "jobs one request names (an array counts its tasks)",
    given_by: "ycancel, yq -j, yctl hold|release",
    max: 100_000,
    unit: Unit::Items,
    key: "fixed, or scheduler.max_array_size if larger",
};
pub const USER: Limit = bytes("user name", "yq -u, ycancel -u", 128);
/// Jobs in one reply of a listing (`ListJobs`): a larger answer comes in pages (the clients
/// follow them), so that no one request makes `schedd` build an unbounded reply.
pub const JOBS_PER_REPLY: Limit = Limit {
    what: "jobs in one reply of a listing (larger answers come in pages, which the tools follow)",
    given_by: "yq, ycancel -u, sacct, squeue",
    max: 50_000,
    unit: Unit::Items,
    key: "fixed",
};
/// Bytes in one reply of a listing: with [`JOBS_PER_REPLY`], what one page of a listing may
/// hold, so that a page of long entries (a path of 4 KiB each) is as bounded as one of short
/// ones. Less when the caller's room for answers not yet read is smaller (see
/// [`UNREAD_ANSWERS_PER_USER`]): the page is then cut shorter, and the tools follow the pages.
pub const LISTING_BYTES_PER_REPLY: Limit = Limit {
    what: "bytes in one reply of a listing (larger answers come in pages, which the tools follow)",
    given_by: "yq, ycancel -u, sacct, squeue",
    max: 8 << 20,
    unit: Unit::Bytes,
    key: "fixed",
};
/// Answers (encoded) a daemon holds for one client connection that the client has not read
/// yet: listings, reports, watches' queued events. Reserved before an answer is handed to the
/// connection, given back once it is sent or the connection is gone; past it a request is
/// refused (`RESOURCE_EXHAUSTED`). Above [`LISTING_BYTES_PER_REPLY`], so a page always fits.
pub const UNREAD_ANSWERS_PER_CONNECTION: Limit = bytes(
    "answers not yet read on one client connection (schedd's or a node's socket)",
    "any client",
    16 << 20,
);
/// The same for all the connections of one user (uid) together, on schedd (its own socket and
/// every node's relay) or on one node: what a user who asks and never reads costs at most.
pub const UNREAD_ANSWERS_PER_USER: Limit = bytes(
    "answers not yet read by one user (uid), on schedd or on one node",
    "any client",
    32 << 20,
);
/// The same for every user together, on schedd or on one node; its last
/// [`UNREAD_ANSWERS_KEPT_FOR_SMALL`] goes only to users who hold less than
/// [`SMALL_ANSWERS_HOLDER`], so that users who flood together do not starve another's `yq`.
pub const UNREAD_ANSWERS: Limit = bytes(
    "answers not yet read by all users together, on schedd or on one node",
    "any client",
    256 << 20,
);
/// The part of [`UNREAD_ANSWERS`] kept for users who hold little (see [`SMALL_ANSWERS_HOLDER`]).
pub const UNREAD_ANSWERS_KEPT_FOR_SMALL: u64 = 32 << 20;
/// A user holding at most this much (with the answer asked for) may use the part of
/// [`UNREAD_ANSWERS`] kept for small answers: a person's `yq --me` or `ysub`, however full the
/// rest is.
pub const SMALL_ANSWERS_HOLDER: u64 = 1 << 20;
/// The least room a page of a listing is built in: below it the request is refused rather than
/// answered a few jobs at a time.
pub const LISTING_BYTES_AT_LEAST: u64 = 64 << 10;
pub const STATES: Limit = items("job states in one request", "yq -t", 32);
pub const STATE: Limit = bytes("job state", "yq -t (each state)", 32);
pub const NODE_NAME: Limit = bytes(
    "node name",
    "yctl drain|resume|show node; an agent's registration",
    255,
);
pub const DRAIN_REASON: Limit = bytes("drain reason", "yctl drain --reason", 256);
/// A node has at most 64 GPUs (the scheduling core's masks).
pub const GPUS_NAMED: Limit = items("GPUs in one request", "yctl drain|resume --gpu", 64);
pub const REPORT_BY: Limit = bytes("report grouping", "yctl report --by", 32);
/// `-w/--nodelist` and `-x/--exclude`, each, as node names (host lists expanded).
pub const NODES_LISTED: Limit = items(
    "nodes of --nodelist or --exclude",
    "ysub -w, -x (each list, host lists expanded)",
    10_000,
);
pub const PARTITION: Limit = bytes("partition", "ysub --partition", 64);
pub const QOS: Limit = bytes("QOS", "ysub --qos", 64);
pub const MAIL_USER: Limit = bytes("mail address", "ysub --mail-user", 256);
pub const MAIL_TYPES: Limit = items("mail types of --mail-type", "ysub --mail-type", 16);
pub const MAIL_TYPE: Limit = bytes("mail type", "ysub --mail-type (each type)", 32);
pub const COMMENT: Limit = bytes("comment", "ysub --comment", 1024);
/// The latest `--begin` (seconds since the epoch): the end of year 9999 UTC, as far as dates
/// are written with four digits.
pub const MAX_BEGIN_UNIX_SECS: u64 = 253_402_300_799;

/// The script, and separately the environment (names and values, plus two bytes each).
pub const SCRIPT: Limit = Limit {
    what: "script",
    given_by: "ysub SCRIPT, --wrap; the environment (--export) separately",
    max: 4 << 20,
    unit: Unit::Bytes,
    key: "scheduler.max_script_mib",
};
/// Everything a job carries to its node, as [`launch_size`] counts it.
pub const LAUNCH: Limit = Limit {
    what: "the job's launch message",
    given_by: "ysub: script, environment, arguments, name, paths together",
    max: (2 * 4 + 2) << 20,
    unit: Unit::Bytes,
    key: "2 x scheduler.max_script_mib + 2 MiB",
};
pub const ARRAY_SIZE: Limit = Limit {
    what: "array task index",
    given_by: "ysub --array (indices 0 to this minus 1)",
    max: crate::array::DEFAULT_MAX_ARRAY_SIZE as u64,
    unit: Unit::Items,
    key: "scheduler.max_array_size",
};
pub const JOBS_PER_USER: Limit = Limit {
    what: "active jobs per user (queued, held, running; an array counts its tasks)",
    given_by: "ysub",
    max: DEFAULT_MAX_JOBS_PER_USER as u64,
    unit: Unit::Items,
    key: "scheduler.max_jobs_per_user, tiers.NAME.max_jobs_per_user",
};

/// The default of `scheduler.max_jobs_per_user`, as Slurm's `MaxJobCount`-style defaults go:
/// a user's queue of ten thousand tasks is plenty, and costs `schedd` a few MiB.
pub const DEFAULT_MAX_JOBS_PER_USER: u32 = 10_000;

/// Every row, in the order of the admin guide's table.
pub const ALL: &[Limit] = &[
    JOB_NAME,
    ACCOUNT,
    TIER,
    GPU_TYPE,
    GPU_TYPES,
    CONSTRAINT,
    CONSTRAINTS,
    INTERCONNECT,
    PATH,
    SCRIPT,
    LAUNCH,
    ARRAY,
    ARRAY_SIZE,
    DEPENDENCY,
    DEPENDENCY_TARGETS,
    DEPENDENCY_JOBS,
    JOB_TARGET,
    TARGET_RANGES,
    TARGETS,
    JOBS_NAMED,
    USER,
    JOBS_PER_REPLY,
    LISTING_BYTES_PER_REPLY,
    STATES,
    STATE,
    NODE_NAME,
    DRAIN_REASON,
    GPUS_NAMED,
    REPORT_BY,
    NODES_LISTED,
    PARTITION,
    QOS,
    MAIL_USER,
    MAIL_TYPES,
    MAIL_TYPE,
    COMMENT,
    JOBS_PER_USER,
    UNREAD_ANSWERS_PER_CONNECTION,
    UNREAD_ANSWERS_PER_USER,
    UNREAD_ANSWERS,
];

/// The most jobs one request may name (see [`JOBS_NAMED`]): enough for any one array.
pub fn max_jobs_named(config: &Config) -> u64 {
    JOBS_NAMED
        .max
        .max(u64::from(config.scheduler.max_array_size))
}

/// The most jobs one dependency may stand for (see [`DEPENDENCY_JOBS`]): any one array.
pub fn max_dependency_jobs(config: &Config) -> u64 {
    u64::from(config.scheduler.max_array_size)
}

/// The parts of a job that travel in its `LaunchJob` message, as the submit gives them.
#[derive(Debug, Clone, Copy)]
pub struct LaunchParts<'a> {
    pub script: &'a str,
    /// The environment's size as [`env_bytes`] counts it, and its number of variables.
    pub env_bytes: u64,
    pub env_vars: u64,
    pub args: &'a [String],
    pub name: &'a str,
    /// Each path made absolute; `None` for the checkpoint directory: derived by `schedd`,
    /// counted at [`PATH`]'s maximum.
    pub workdir: &'a str,
    pub stdout: &'a str,
    pub stderr: &'a str,
    pub checkpoint_dir: Option<&'a str>,
}

/// Bytes a protobuf field of `len` bytes costs on the wire at most besides its content (its
/// tag and length).
const FIELD_OVERHEAD: u64 = 6;

/// The environment's size as [`Config::check_payload_size`] counts it (names and values,
/// plus two bytes each), and its number of variables.
pub fn env_bytes<'a>(env: impl IntoIterator<Item = (&'a String, &'a String)>) -> (u64, u64) {
    env.into_iter()
        .fold((0u64, 0u64), |(bytes, n), (name, value)| {
            (
                bytes.saturating_add(name.len() as u64 + value.len() as u64 + 2),
                n + 1,
            )
        })
}

/// What the launch's environment weighs on the wire: each variable is a map entry, framed
/// (entry, name and value: tag and length each) beyond the two bytes [`env_bytes`] counts.
fn env_wire_bytes(parts: &LaunchParts) -> u64 {
    parts
        .env_bytes
        .saturating_add(parts.env_vars.saturating_mul(3 * FIELD_OVERHEAD - 2))
}

/// What the job's part of its `LaunchJob` message weighs: script, environment (with each
/// entry's framing), arguments (each with its framing), name and paths. The rest of the
/// message (ids, GPUs, the node list: at most [`NODE_LIST_BYTES`]) is covered by the headroom
/// between [`Config::max_launch_bytes`] and [`Config::max_message_bytes`].
pub fn launch_size(parts: &LaunchParts) -> u64 {
    let text = |s: &str| s.len() as u64 + FIELD_OVERHEAD;
    let args = parts
        .args
        .iter()
        .map(|a| text(a))
        .fold(0u64, u64::saturating_add);
    let checkpoint = parts.checkpoint_dir.map_or(PATH.max, |d| d.len() as u64) + FIELD_OVERHEAD;
    [
        text(parts.script),
        env_wire_bytes(parts),
        args,
        text(parts.name),
        text(parts.workdir),
        text(parts.stdout),
        text(parts.stderr),
        checkpoint,
    ]
    .into_iter()
    .fold(0u64, u64::saturating_add)
}

/// The most the node list of a launch weighs: every node of the largest job, each name at its
/// limit with its framing.
pub const NODE_LIST_BYTES: u64 = MAX_NODES as u64 * (NODE_NAME.max + FIELD_OVERHEAD);

/// Refuses a job whose launch would not fit what every link accepts: `the job's launch
/// message would be 10.5 MiB (script 4.0 MiB, environment 4.0 MiB, arguments 2.4 MiB, name
/// and paths 12.1 KiB); the limit is 10 MiB (2 x scheduler.max_script_mib + 2 MiB)`. The one
/// check `ysub` makes before sending and `schedd` makes at submit.
pub fn check_launch_size(parts: &LaunchParts, config: &Config) -> Result<(), String> {
    let total = launch_size(parts);
    let limit = config.max_launch_bytes();
    if total <= limit {
        return Ok(());
    }
    let args: u64 = parts.args.iter().map(|a| a.len() as u64).sum();
    let env = env_wire_bytes(parts);
    let rest = total
        .saturating_sub(parts.script.len() as u64)
        .saturating_sub(env)
        .saturating_sub(args);
    Err(format!(
        "the job's launch message would be {} (script {}, environment {}, arguments {} in {}, \
         name and paths {}); the limit is {} ({})",
        format_size(total),
        format_size(parts.script.len() as u64),
        format_size(env),
        format_size(args),
        parts.args.len(),
        format_size(rest),
        format_size(limit),
        LAUNCH.key
    ))
}

/// `path` made absolute against `workdir` (an empty path stays empty): how the paths of a
/// job are measured, and how `schedd` stores its checkpoint directory.
pub fn absolute_path(path: &str, workdir: &str) -> String {
    if path.is_empty() || path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{path}", workdir.trim_end_matches('/'))
    }
}

/// A submit's own `--checkpoint-dir`, made absolute; `None`: schedd derives one.
pub fn checkpoint_dir(spec: &crate::SubmitRequest) -> Option<String> {
    (!spec.checkpoint_dir.trim().is_empty())
        .then(|| absolute_path(&spec.checkpoint_dir, &spec.workdir))
}

/// Every text of a submit against its limit, by length only (what the texts mean is checked
/// after): `job name is 100000 bytes; the limit is 256 (fixed)`.
pub fn check_submit_texts(spec: &crate::SubmitRequest) -> Result<(), String> {
    JOB_NAME.check_len(&spec.name)?;
    ACCOUNT.check_len(&spec.account)?;
    TIER.check_len(&spec.tier)?;
    INTERCONNECT.check_len(&spec.interconnect)?;
    let models: Vec<&str> = spec.gpu_type.split('|').collect();
    GPU_TYPES.check_count(models.len() as u64)?;
    for model in models {
        GPU_TYPE.check_len(model)?;
    }
    CONSTRAINTS.check_count(spec.constraints.len() as u64)?;
    for feature in &spec.constraints {
        CONSTRAINT.check_len(feature)?;
    }
    ARRAY.check_len(&spec.array)?;
    DEPENDENCY.check_len(&spec.dependency)?;
    for list in [&spec.nodelist, &spec.exclude] {
        NODES_LISTED.check_count(list.len() as u64)?;
        for node in list {
            NODE_NAME.check_len(node)?;
        }
    }
    PARTITION.check_len(&spec.partition)?;
    QOS.check_len(&spec.qos)?;
    MAIL_USER.check_len(&spec.mail_user)?;
    MAIL_TYPES.check_count(spec.mail_types.len() as u64)?;
    for mail_type in &spec.mail_types {
        MAIL_TYPE.check_len(mail_type)?;
    }
    COMMENT.check_len(&spec.comment)?;
    for (what, path) in [
        ("working directory", spec.workdir.clone()),
        (
            "output file",
            absolute_path(&spec.stdout_path, &spec.workdir),
        ),
        (
            "error file",
            absolute_path(&spec.stderr_path, &spec.workdir),
        ),
        (
            "checkpoint directory",
            checkpoint_dir(spec).unwrap_or_default(),
        ),
    ] {
        PATH.check_len(&path).map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

/// Every limit of a submit that needs no cluster state, in the order `ysub` and `schedd`
/// both check them: the texts ([`check_submit_texts`]), the script and the environment
/// ([`Config::check_payload_size`]), then the launch as a whole ([`check_launch_size`]).
pub fn check_submit(spec: &crate::SubmitRequest, config: &Config) -> Result<(), String> {
    check_submit_texts(spec)?;
    config.check_payload_size(&spec.script, &spec.env)?;
    let checkpoint = checkpoint_dir(spec);
    let (env_bytes, env_vars) = env_bytes(&spec.env);
    let parts = LaunchParts {
        script: &spec.script,
        env_bytes,
        env_vars,
        args: &spec.args,
        name: &spec.name,
        workdir: &spec.workdir,
        stdout: &spec.stdout_path,
        stderr: &spec.stderr_path,
        checkpoint_dir: checkpoint.as_deref(),
    };
    check_launch_size(&parts, config)
}

#[cfg(test)]
mod tests;
