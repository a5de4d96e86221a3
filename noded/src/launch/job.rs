//! From a launch request ([`JobParams`]) to a concrete plan for the node's supervisor
//! ([`ExecPlan`]).
//!
//! The plan says who runs what, where, with which environment (see [`super::environment`])
//! and output files. Everything that needs the user database happens here, in noded, before
//! any fork: name-service lookups are not safe in a forked child.

use super::cgroup::JobCgroup;
use super::environment::job_environment;
use nix::sys::signal::Signal;
use nix::unistd::{Uid, User};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Default output file, as sbatch's `slurm-%j.out`.
pub const DEFAULT_STDOUT: &str = "ysched-%j.out";
/// Default output file of an array task, as sbatch's `slurm-%A_%a.out`.
pub const DEFAULT_ARRAY_STDOUT: &str = "ysched-%A_%a.out";

/// The launch request as schedd sent it: its `LaunchJob`, converted at the edge
/// ([`crate::convert`]), serializable for the spool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobParams {
    pub job_id: u64,
    pub name: String,
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub workdir: String,
    /// Kept in the spool's `script` file, not in `state.json`.
    #[serde(skip)]
    pub script: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub stdout_path: String,
    pub stderr_path: String,
    pub gpus: Vec<u32>,
    pub restart_count: u32,
    pub checkpoint_dir: String,
    pub time_limit_secs: u64,
    pub grace_secs: u32,
    pub node_rank: u32,
    pub nnodes: u32,
    pub nodelist: Vec<String>,
    pub master_addr: String,
    pub master_port: u32,
    /// Memory limit on this node, bytes; 0: none.
    #[serde(default)]
    pub mem_bytes: u64,
    /// CPU quota, in CPUs; 0: none.
    #[serde(default)]
    pub cpus: u32,
    /// Signal sent `warn_secs` before the time limit; 0: none.
    #[serde(default)]
    pub warn_signal: i32,
    #[serde(default)]
    pub warn_secs: u32,
    /// `warn_signal` goes to the batch shell only, not to every process of the job.
    #[serde(default)]
    pub warn_batch_only: bool,
    /// Which task of which array this job is; `None`: not an array task.
    #[serde(default)]
    pub array: Option<ArrayTaskParams>,
    /// The job also gets Slurm's `SLURM_*` variables (`--slurm-env`, or the node's
    /// `node.slurm_env` default, applied by the launcher before planning).
    #[serde(default)]
    pub slurm_env: bool,
    /// `--open-mode=append`: the output files are appended to from the first run on.
    #[serde(default)]
    pub open_append: bool,
    /// `--ntasks-per-node`: processes the job's own launcher starts per node; 0: not given.
    #[serde(default)]
    pub ntasks_per_node: u32,
    /// Slurm's partition as given, else the tier (for `SLURM_JOB_PARTITION`).
    #[serde(default)]
    pub partition: String,
    /// The account charged (for `SLURM_JOB_ACCOUNT`).
    #[serde(default)]
    pub account: String,
}

/// An array task's place in its array (`LaunchJob.array_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTaskParams {
    /// The array's id: its first task's job id.
    pub array_job_id: u64,
    /// This task's index.
    pub task_id: u32,
    /// How many tasks the array has, and its smallest and largest index.
    pub task_count: u32,
    pub task_min: u32,
    pub task_max: u32,
}

/// Everything the node's supervisor needs to start the job, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecPlan {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (from `getgrouplist`).
    pub groups: Vec<u32>,
    /// noded runs as root and must become the job user; otherwise the job runs as noded's
    /// own user, which was checked to be the job user.
    pub switch_user: bool,
    pub workdir: PathBuf,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The program named by the script's `#!` line, which the job's first process checks as the job
    /// user before exec (execve would only say ENOENT, as if the script itself were missing).
    #[serde(default)]
    pub interpreter: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub stdout: PathBuf,
    /// `None`: stderr goes to the stdout file.
    pub stderr: Option<PathBuf>,
    /// A requeued job appends to the output of its earlier runs, and the parts of a
    /// multi-node job append to one shared file (truncating would let one part erase another's
    /// first lines, in whatever order the parts start); `--open-mode=append` asks for it from
    /// the first run on (submitit keeps one log across its requeues and its `srun`).
    pub append_output: bool,
    /// Created (as the job user) before the job starts.
    pub checkpoint_dir: Option<PathBuf>,
    /// The job's cgroups, created by noded before the job is handed over; `None`: the job is
    /// contained by its process group only.
    #[serde(default)]
    pub cgroup: Option<JobCgroup>,
}

impl ExecPlan {
    /// The job's checkpoint directory as scanned: with the job user's rights (see
    /// [`super::checkpoint_scan`]).
    pub fn checkpoint(&self) -> Option<super::checkpoint_scan::CheckpointDir> {
        Some(super::checkpoint_scan::CheckpointDir {
            path: self.checkpoint_dir.clone()?,
            scan_as: self.switch_user.then(|| super::checkpoint_scan::ScanAs {
                uid: self.uid,
                gid: self.gid,
                groups: self.groups.clone(),
            }),
        })
    }
}

/// Resolves the user and paths of `job`. The error is the message for `FinishedRecord::error`.
/// `client_socket` is the client socket of this node's agent, if it serves one.
pub fn plan_job(
    job: &JobParams,
    node_name: &str,
    script: &Path,
    client_socket: Option<&Path>,
) -> Result<ExecPlan, String> {
    if job.warn_signal != 0 && Signal::try_from(job.warn_signal).is_err() {
        return Err(format!(
            "warn_signal {} is not a signal on this node",
            job.warn_signal
        ));
    }
    let user = resolve_user(job)?;
    let running_as_root = Uid::effective().is_root();
    if !running_as_root && user.uid != Uid::effective() {
        return Err(format!(
            "noded runs as uid {} (not root) and can only run jobs of its own user, not {} (uid {})",
            Uid::effective(),
            user.name,
            user.uid
        ));
    }
    let groups = if running_as_root {
        let name = CString::new(user.name.as_str())
            .map_err(|_| format!("invalid user name {:?}", user.name))?;
        let groups: Vec<u32> = nix::unistd::getgrouplist(&name, user.gid)
            .map_err(|e| format!("cannot list the groups of user {}: {e}", user.name))?
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        // The job's gid (the submitter's primary group at submit, maybe from newgrp) must
        // be one of the user's groups: root would grant any other.
        if !groups.contains(&job.gid) {
            return Err(format!(
                "gid {} is not a group of user {}",
                job.gid, user.name
            ));
        }
        groups
    } else {
        Vec::new()
    };

    // Only the form is checked here: whether the directory exists, and whether the job user
    // may enter it, is found out by the job's first process after it became the job user. Asked
    // by root, the answer would tell a user about paths they cannot see (a missing directory
    // under /root reads "No such file", an existing one "Permission denied").
    let workdir = PathBuf::from(&job.workdir);
    if !workdir.is_absolute() {
        return Err(format!(
            "working directory {:?} is not an absolute path",
            job.workdir
        ));
    }

    let vars = PatternVars {
        job_id: job.job_id,
        job_name: &job.name,
        user: &user.name,
        node: Some(node_name),
        array: job.array.map(|a| (a.array_job_id, a.task_id)),
    };
    let default_stdout = if job.array.is_some() {
        DEFAULT_ARRAY_STDOUT
    } else {
        DEFAULT_STDOUT
    };
    let stdout_pattern = non_empty_or(&job.stdout_path, default_stdout);
    let stdout = workdir.join(expand_pattern(stdout_pattern, &vars));
    let stderr = (!job.stderr_path.is_empty())
        .then(|| workdir.join(expand_pattern(&job.stderr_path, &vars)))
        .filter(|stderr| *stderr != stdout);

    let checkpoint_dir = (!job.checkpoint_dir.is_empty())
        .then(|| workdir.join(expand_home(&job.checkpoint_dir, &user.dir)));

    // A script without an interpreter line runs under /bin/sh, as sbatch does. The
    // interpreter is checked by the job's first process, as the job user (see the workdir).
    let (program, args, interpreter) = match interpreter(&job.script) {
        Some(interpreter) => (
            script.to_owned(),
            job.args.clone(),
            Some(PathBuf::from(interpreter)),
        ),
        None => {
            let mut args = vec![script.to_string_lossy().into_owned()];
            args.extend(job.args.iter().cloned());
            (PathBuf::from("/bin/sh"), args, None)
        }
    };

    Ok(ExecPlan {
        env: job_environment(job, node_name, checkpoint_dir.as_deref(), client_socket),
        user: user.name,
        uid: user.uid.as_raw(),
        gid: job.gid,
        groups,
        switch_user: running_as_root,
        workdir,
        program,
        args,
        interpreter,
        stdout,
        stderr,
        append_output: job.restart_count > 0 || job.nnodes > 1 || job.open_append,
        checkpoint_dir,
        cgroup: None,
    })
}

/// Writes the job's script into its (fresh) spool directory, readable and executable by the
/// job user only: owned by them when noded runs as root, mode 0700. It never exists with a
/// wider mode or another owner, not even for a moment.
pub fn write_script(path: &Path, job: &JobParams, plan: &ExecPlan) -> io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(path)?;
    if plan.switch_user {
        std::os::unix::fs::fchown(&file, Some(plan.uid), Some(plan.gid))?;
    }
    // The mode given to open is filtered by the umask; the owner needs read and execute.
    file.set_permissions(std::fs::Permissions::from_mode(0o700))?;
    io::Write::write_all(&mut file, job.script.as_bytes())
}

fn resolve_user(job: &JobParams) -> Result<User, String> {
    let user = User::from_uid(Uid::from_raw(job.uid))
        .map_err(|e| format!("cannot look up uid {}: {e}", job.uid))?
        .ok_or_else(|| format!("no such user on this node: {} (uid {})", job.user, job.uid))?;
    // Uids must mean the same user on every node; running as someone else is worse than
    // not running at all.
    if !job.user.is_empty() && user.name != job.user {
        return Err(format!(
            "uid {} is user {} on this node, not {}",
            job.uid, user.name, job.user
        ));
    }
    Ok(user)
}

/// The program named by a `#!` line, if the script has one.
fn interpreter(script: &str) -> Option<&str> {
    let line = script.strip_prefix("#!")?.lines().next().unwrap_or("");
    Some(line.split_whitespace().next().unwrap_or(""))
}

fn non_empty_or<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.is_empty() {
        default
    } else {
        value
    }
}

pub use ysched_common::text::PatternVars;

/// Expands sbatch-style patterns in an output path (see
/// [`ysched_common::text::expand_output_pattern`]).
pub fn expand_pattern(pattern: &str, vars: &PatternVars) -> String {
    ysched_common::text::expand_output_pattern(pattern, vars)
}

/// A leading `~` is the job user's home directory.
fn expand_home(path: &str, home: &Path) -> PathBuf {
    if path == "~" {
        home.to_owned()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> PatternVars<'static> {
        PatternVars {
            job_id: 42,
            job_name: "train",
            user: "alice",
            node: Some("n1"),
            array: None,
        }
    }

    #[test]
    fn patterns_expand() {
        assert_eq!(expand_pattern("ysched-%j.out", &vars()), "ysched-42.out");
        assert_eq!(expand_pattern("%x-%u-%N-%j", &vars()), "train-alice-n1-42");
        assert_eq!(expand_pattern("100%%-%q-%", &vars()), "100%-%q-%");
    }

    #[test]
    fn array_patterns_expand() {
        let task = PatternVars {
            job_id: 19,
            array: Some((12, 7)),
            ..vars()
        };
        assert_eq!(
            expand_pattern(DEFAULT_ARRAY_STDOUT, &task),
            "ysched-12_7.out"
        );
        assert_eq!(expand_pattern("%x-%A_%a.%j", &task), "train-12_7.19");
        assert_eq!(expand_pattern("%%A%%a", &task), "%A%a");
        // A plain job: %A is its job id, %a is 0.
        assert_eq!(expand_pattern("out-%A_%a.log", &vars()), "out-42_0.log");
    }

    /// Task 7 of array 12 (job 19), as launched.
    fn array_launch() -> JobParams {
        JobParams {
            job_id: 19,
            name: "sweep".into(),
            array: Some(ArrayTaskParams {
                array_job_id: 12,
                task_id: 7,
                task_count: 25,
                task_min: 0,
                task_max: 96,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_record_written_before_arrays_reads_as_a_plain_job() {
        let params = array_launch();
        let mut old = serde_json::to_value(JobParams::default()).unwrap();
        old.as_object_mut().unwrap().remove("array");
        let old: JobParams = serde_json::from_value(old).unwrap();
        assert_eq!(old.array, None);
        let round: JobParams =
            serde_json::from_str(&serde_json::to_string(&params).unwrap()).unwrap();
        assert_eq!(round.array, params.array);
    }

    #[test]
    fn home_expands() {
        let home = Path::new("/home/alice");
        assert_eq!(
            expand_home("~/ck/1", home),
            PathBuf::from("/home/alice/ck/1")
        );
        assert_eq!(expand_home("~", home), PathBuf::from("/home/alice"));
        assert_eq!(expand_home("/shared/ck", home), PathBuf::from("/shared/ck"));
    }

    #[test]
    fn plan_rejects_bad_workdir_and_unknown_uid() {
        let me = Uid::effective().as_raw();
        let name = User::from_uid(Uid::effective()).unwrap().unwrap().name;
        let job = JobParams {
            job_id: 1,
            uid: me,
            gid: nix::unistd::Gid::effective().as_raw(),
            user: name.clone(),
            workdir: "/nonexistent/dir".into(),
            ..Default::default()
        };
        // Whether it exists is for the job user to find out (in the job's first process), not
        // noded.
        let plan = plan_job(&job, "n1", Path::new("/s"), None).unwrap();
        assert_eq!(plan.workdir, PathBuf::from("/nonexistent/dir"));

        let relative = JobParams {
            workdir: "rel".into(),
            ..job.clone()
        };
        assert!(plan_job(&relative, "n1", Path::new("/s"), None)
            .unwrap_err()
            .contains("absolute"));

        let ghost = JobParams {
            uid: 4_000_000_000,
            user: "ghost".into(),
            ..job.clone()
        };
        let err = plan_job(&ghost, "n1", Path::new("/s"), None).unwrap_err();
        assert!(
            err.contains("no such user") && err.contains("ghost"),
            "{err}"
        );

        let bad_warning = JobParams {
            warn_signal: 99,
            ..job.clone()
        };
        let err = plan_job(&bad_warning, "n1", Path::new("/s"), None).unwrap_err();
        assert_eq!(err, "warn_signal 99 is not a signal on this node");

        let wrong_name = JobParams {
            user: "not-me".into(),
            ..job
        };
        let err = plan_job(&wrong_name, "n1", Path::new("/s"), None).unwrap_err();
        assert!(err.contains("not-me"), "{err}");
    }

    #[test]
    fn plan_resolves_paths_and_interpreter() {
        let me = Uid::effective().as_raw();
        let name = User::from_uid(Uid::effective()).unwrap().unwrap().name;
        let job = JobParams {
            job_id: 9,
            name: "t".into(),
            uid: me,
            gid: nix::unistd::Gid::effective().as_raw(),
            user: name,
            workdir: "/tmp".into(),
            script: "echo hi\n".into(),
            args: vec!["a".into()],
            stderr_path: "err-%j".into(),
            checkpoint_dir: "ck/%j".into(),
            ..Default::default()
        };
        let plan = plan_job(&job, "n1", Path::new("/spool/script"), None).unwrap();
        assert_eq!(plan.stdout, PathBuf::from("/tmp/ysched-9.out"));
        assert_eq!(plan.stderr, Some(PathBuf::from("/tmp/err-9")));
        assert_eq!(plan.program, PathBuf::from("/bin/sh"));
        assert_eq!(plan.args, vec!["/spool/script", "a"]);
        assert_eq!(plan.checkpoint_dir, Some(PathBuf::from("/tmp/ck/%j")));
        assert!(!plan.append_output);

        assert_eq!(plan.interpreter, None);

        // --open-mode=append: appended to from the first run on.
        let appending = JobParams {
            open_append: true,
            ..job.clone()
        };
        assert!(
            plan_job(&appending, "n1", Path::new("/s"), None)
                .unwrap()
                .append_output
        );

        // Checked later, as the job user.
        let missing = JobParams {
            script: "#!/no/such/shell -e\n".into(),
            ..job.clone()
        };
        let plan = plan_job(&missing, "n1", Path::new("/s"), None).unwrap();
        assert_eq!(plan.interpreter, Some(PathBuf::from("/no/such/shell")));

        let shebang = JobParams {
            script: "#!/bin/sh -e\n".into(),
            stderr_path: "ysched-%j.out".into(),
            restart_count: 1,
            ..job
        };
        let plan = plan_job(&shebang, "n1", Path::new("/spool/script"), None).unwrap();
        assert_eq!(plan.program, PathBuf::from("/spool/script"));
        assert_eq!(plan.args, vec!["a"]);
        assert_eq!(plan.stderr, None, "same file as stdout");
        assert!(plan.append_output);
    }

    #[test]
    fn array_tasks_write_to_their_own_files() {
        let me = Uid::effective().as_raw();
        let name = User::from_uid(Uid::effective()).unwrap().unwrap().name;
        let task = JobParams {
            uid: me,
            gid: nix::unistd::Gid::effective().as_raw(),
            user: name,
            workdir: "/tmp".into(),
            script: "echo hi\n".into(),
            ..array_launch()
        };
        let plan = plan_job(&task, "n1", Path::new("/s"), None).unwrap();
        assert_eq!(plan.stdout, PathBuf::from("/tmp/ysched-12_7.out"));
        assert_eq!(plan.stderr, None);
        assert_eq!(plan.env["YS_ARRAY_TASK_ID"], "7");

        let named = JobParams {
            stdout_path: "logs/%x-%A_%a.out".into(),
            stderr_path: "logs/%A-%a-%j.err".into(),
            ..task.clone()
        };
        let plan = plan_job(&named, "n1", Path::new("/s"), None).unwrap();
        assert_eq!(plan.stdout, PathBuf::from("/tmp/logs/sweep-12_7.out"));
        assert_eq!(plan.stderr, Some(PathBuf::from("/tmp/logs/12-7-19.err")));

        // A plain job keeps ysched-%j.out, and %A_%a there is its id and 0.
        let plain = JobParams {
            array: None,
            stderr_path: "e-%A_%a".into(),
            ..task
        };
        let plan = plan_job(&plain, "n1", Path::new("/s"), None).unwrap();
        assert_eq!(plan.stdout, PathBuf::from("/tmp/ysched-19.out"));
        assert_eq!(plan.stderr, Some(PathBuf::from("/tmp/e-19_0")));
        assert!(!plan.env.contains_key("YS_ARRAY_JOB_ID"));
    }
}
