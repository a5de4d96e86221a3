//! How noded holds on to every process of a job: cgroups where it can, else process groups.
//!
//! Here: the cgroups noded creates for each job; what it finds on the host at start is in
//! [`host`].
//!
//! With a cgroup v2 hierarchy (`/sys/fs/cgroup` on current distributions, or the
//! controller-less `/sys/fs/cgroup/unified` of hybrid hosts), every job runs in its own cgroup,
//! `<root>/job_<id>.<node>.<hash>`. A process cannot leave it (setsid, double forks and daemons
//! stay in), so a stop reaches all of them and the job is over when the cgroup is empty. The
//! job's limits go to the v2 controllers when they are enabled there, else, on hybrid hosts, to
//! a cgroup of the same name in the v1 controller hierarchy (memory, cpu, pids), under noded's
//! own cgroup there: only for the limits the job has (a job without `--mem` gets no v1 memory
//! cgroup). Joining a v1 cgroup costs: each `cgroup.procs` write takes the kernel's global
//! cgroup lock, and the first after a quiet moment waits for an RCU grace period (6-7 ms on
//! the 2-core VM; measured, it was most of an idle job's start). So the job's first process
//! joins before its exec only the v1 cgroups whose limit must hold from its first instruction
//! (memory, pids); its CPU limit's cgroup is joined by the node's supervisor just after the
//! exec, off the job's start (a CPU quota is a rate: a few milliseconds unthrottled at the
//! start give the job at most those milliseconds).
//!
//! The root is `node.cgroup_root`, else detected: where systemd delegated a subtree to noded
//! (`Delegate=yes` with `DelegateSubgroup=`, noded running in a subgroup of its unit's cgroup,
//! which carries systemd's `trusted.delegate` mark), the unit's cgroup; otherwise `ysched` at
//! the top of the v2 hierarchy.
//!
//! Without a usable v2 hierarchy (none mounted, read-only, not ours to write), jobs fall back
//! to their process group, as before cgroups: what leaves the group escapes, and no limit is
//! enforced.

use super::cgroup::{write_setting, JobCgroup};
use host::HostCgroups;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use ysched_common::config::NO_CGROUPS;

/// `cpu.max` and `cpu.cfs_period_us`: the quota is counted per 100 ms.
const CPU_PERIOD_US: u64 = 100_000;
/// How many cgroups named after one job id may be tried: another noded on the same host
/// (tests, or a second agent) may use the same root and job ids.
const NAME_ATTEMPTS: u32 = 100;

/// `node.cgroup_root`, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupRoot {
    /// Empty: detect.
    Detect,
    /// `"none"`: process groups only.
    Disabled,
    At(PathBuf),
}

impl CgroupRoot {
    pub fn from_config(value: &str) -> CgroupRoot {
        match value {
            "" => CgroupRoot::Detect,
            NO_CGROUPS => CgroupRoot::Disabled,
            path => CgroupRoot::At(PathBuf::from(path)),
        }
    }
}

/// What noded uses to hold each job's processes together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    Cgroups(CgroupLayout),
    /// No usable cgroups, for this reason.
    ProcessGroups {
        reason: String,
    },
}

/// Where jobs' cgroups go and which limits can be enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The v2 directory holding the jobs' cgroups.
    pub root: PathBuf,
    /// `root` as `/proc/<pid>/cgroup` names it.
    pub root_name: String,
    pub memory: LimitSource,
    pub cpu: LimitSource,
    pub pids: LimitSource,
    /// `node.job_pids_max`; 0: none.
    pub pids_max: u64,
}

/// Where one kind of limit is enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitSource {
    /// By the controller in the v2 hierarchy (enabled for the root's children).
    V2,
    /// By a v1 controller hierarchy: the job's cgroup there goes under this directory.
    V1(PathBuf),
    /// Not at all, for this reason.
    Unavailable(String),
}

/// A job's limits on this node; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobLimits {
    pub mem_bytes: u64,
    pub cpus: u32,
}

impl Containment {
    /// Finds the cgroup hierarchy and prepares the root (created, controllers enabled for its
    /// children), or says why jobs get process groups only. Needs root for the usual paths.
    pub fn set_up(setting: &CgroupRoot, pids_max: u64) -> Containment {
        if *setting == CgroupRoot::Disabled {
            return Containment::ProcessGroups {
                reason: format!("node.cgroup_root = \"{NO_CGROUPS}\""),
            };
        }
        let host = match HostCgroups::read() {
            Ok(host) => host,
            Err(e) => {
                return Containment::ProcessGroups {
                    reason: format!("cannot read this process's cgroups from /proc: {e}"),
                }
            }
        };
        match host.set_up(setting, pids_max) {
            Ok(layout) => Containment::Cgroups(layout),
            Err(reason) => Containment::ProcessGroups { reason },
        }
    }

    pub fn layout(&self) -> Option<&CgroupLayout> {
        match self {
            Containment::Cgroups(layout) => Some(layout),
            Containment::ProcessGroups { .. } => None,
        }
    }
}

impl fmt::Display for Containment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Containment::Cgroups(layout) => {
                write!(
                    f,
                    "cgroups: each job in its own cgroup under {} (cgroup v2); ",
                    layout.root.display()
                )?;
                let limit = |what: &str, source: &LimitSource| match source {
                    LimitSource::V2 => format!("{what} limits by cgroup v2"),
                    LimitSource::V1(base) => {
                        format!("{what} limits by cgroup v1 ({})", base.display())
                    }
                    LimitSource::Unavailable(why) => format!("no {what} limits ({why})"),
                };
                write!(
                    f,
                    "{}, {}, {}",
                    limit("memory", &layout.memory),
                    limit("CPU", &layout.cpu),
                    limit("process", &layout.pids)
                )
            }
            Containment::ProcessGroups { reason } => write!(
                f,
                "process groups only ({reason}): a process that leaves its job's process group \
                 (setsid, daemonizing) escapes stops and time limits, and memory, CPU and \
                 process limits are not enforced"
            ),
        }
    }
}

impl CgroupLayout {
    /// Creates the cgroups of one job, with its limits, and returns them for its plan. The
    /// error is the message for `FinishedRecord::error`.
    ///
    /// The name is `job_<id>.<instance>`: several agents may share a host (a demo, a test
    /// suite with clusters side by side, each numbering its jobs from 1), and one agent's
    /// clean-up must never remove a directory another just created under the same job id.
    pub fn create_job_cgroup(
        &self,
        job_id: u64,
        instance: &str,
        limits: JobLimits,
    ) -> Result<JobCgroup, String> {
        let v1_bases = self.v1_bases(limits);
        for attempt in 1..=NAME_ATTEMPTS {
            let name = job_cgroup_name(job_id, instance, attempt);
            let cgroup = JobCgroup {
                dir: self.root.join(&name),
                name: format!("{}/{name}", self.root_name.trim_end_matches('/')),
                v1_dirs: v1_bases.iter().map(|(base, _)| base.join(&name)).collect(),
                v1_joined_after_exec: v1_bases
                    .iter()
                    .filter(|(_, before_exec)| !before_exec)
                    .map(|(base, _)| base.join(&name))
                    .collect(),
            };
            match create_all(&cgroup) {
                Ok(true) => {}
                // Taken, by another noded on this host or a leftover: try the next name.
                Ok(false) => continue,
                Err(e) => return Err(format!("cannot create the job's cgroup: {e}")),
            }
            if let Err(e) = self.apply_limits(&cgroup, limits) {
                let _ = cgroup.remove();
                return Err(format!("cannot set the job's limits: {e}"));
            }
            return Ok(cgroup);
        }
        Err(format!(
            "cannot create the job's cgroup: job_{job_id}.{instance} to \
             job_{job_id}.{instance}-{NAME_ATTEMPTS} all exist in {}",
            self.root.display()
        ))
    }

    /// The distinct v1 directories a job with `limits` needs a cgroup under (those of the
    /// limits it has), each with whether it must be joined before the job's exec: all but
    /// the CPU limit's (see the module docs).
    fn v1_bases(&self, limits: JobLimits) -> Vec<(PathBuf, bool)> {
        let mut bases: Vec<(PathBuf, bool)> = Vec::new();
        let needed = [
            (&self.memory, limits.mem_bytes > 0, true),
            (&self.cpu, limits.cpus > 0, false),
            (&self.pids, self.pids_max > 0, true),
        ];
        for (source, limited, before_exec) in needed {
            let LimitSource::V1(base) = source else {
                continue;
            };
            if !limited {
                continue;
            }
            // Controllers mounted together share a directory: joined before the exec if
            // any of them must be.
            match bases.iter_mut().find(|(b, _)| b == base) {
                Some((_, before)) => *before |= before_exec,
                None => bases.push((base.clone(), before_exec)),
            }
        }
        bases
    }

    /// The job's directory for one kind of limit, if it is enforced.
    fn limit_dir(&self, cgroup: &JobCgroup, source: &LimitSource) -> Option<PathBuf> {
        match source {
            LimitSource::V2 => Some(cgroup.dir.clone()),
            LimitSource::V1(base) => {
                let name = cgroup.dir.file_name()?;
                Some(base.join(name))
            }
            LimitSource::Unavailable(_) => None,
        }
    }

    fn apply_limits(&self, cgroup: &JobCgroup, limits: JobLimits) -> io::Result<()> {
        if limits.mem_bytes > 0 {
            if let Some(dir) = self.limit_dir(cgroup, &self.memory) {
                let bytes = limits.mem_bytes.to_string();
                if self.memory == LimitSource::V2 {
                    write_setting(&dir, "memory.max", &bytes)?;
                    // The limit is on memory; swapping would get around it.
                    if dir.join("memory.swap.max").exists() {
                        write_setting(&dir, "memory.swap.max", "0")?;
                    }
                } else {
                    write_setting(&dir, "memory.limit_in_bytes", &bytes)?;
                    // memory + swap, set after memory (it may not be below it).
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        write_setting(&dir, "memory.memsw.limit_in_bytes", &bytes)?;
                    }
                }
            }
        }
        if limits.cpus > 0 {
            if let Some(dir) = self.limit_dir(cgroup, &self.cpu) {
                let quota = (u64::from(limits.cpus) * CPU_PERIOD_US).to_string();
                if self.cpu == LimitSource::V2 {
                    write_setting(&dir, "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?;
                } else {
                    write_setting(&dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                    write_setting(&dir, "cpu.cfs_quota_us", &quota)?;
                }
            }
        }
        if self.pids_max > 0 {
            if let Some(dir) = self.limit_dir(cgroup, &self.pids) {
                write_setting(&dir, "pids.max", &self.pids_max.to_string())?;
            }
        }
        Ok(())
    }
}

/// The directory name of job `job_id`'s cgroups for the agent `instance` (see
/// [`instance_tag`]) at its `attempt`th try: `job_<id>.<instance>`, then `-<attempt>` added
/// when the plain name is taken.
fn job_cgroup_name(job_id: u64, instance: &str, attempt: u32) -> String {
    if attempt == 1 {
        format!("job_{job_id}.{instance}")
    } else {
        format!("job_{job_id}.{instance}-{attempt}")
    }
}

/// Whether `name` is the directory name of a job cgroup of the agent `instance` (any job,
/// any attempt; see [`job_cgroup_name`]).
pub fn is_job_cgroup_of(name: &str, instance: &str) -> bool {
    let Some((id, tag)) = name
        .strip_prefix("job_")
        .and_then(|rest| rest.split_once('.'))
    else {
        return false;
    };
    id.parse::<u64>().is_ok()
        && (tag == instance
            || tag
                .strip_prefix(instance)
                .and_then(|attempt| attempt.strip_prefix('-'))
                .is_some_and(|n| n.parse::<u32>().is_ok()))
}

/// What tells this agent's job cgroups from another's on the same host: its node name (in
/// the characters a directory name takes without surprise) and a hash of its spool
/// directory, which no two agents share.
pub fn instance_tag(node_name: &str, spool_dir: &Path) -> String {
    let name: String = node_name
        .chars()
        .take(48)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // FNV-1a: stable across runs and versions, unlike std's hasher.
    let spool = std::fs::canonicalize(spool_dir).unwrap_or_else(|_| spool_dir.to_path_buf());
    let hash = spool
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{name}.{:08x}", hash as u32)
}

/// Creates the job's v2 and v1 directories. `Ok(false)`: one of them exists already, and is
/// not a stale leftover (what this call created is removed again).
fn create_all(cgroup: &JobCgroup) -> io::Result<bool> {
    let mut created: Vec<&Path> = Vec::new();
    for dir in std::iter::once(&cgroup.dir).chain(&cgroup.v1_dirs) {
        let mut made = std::fs::create_dir(dir);
        if made
            .as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::AlreadyExists)
            && remove_if_stale(dir)
        {
            made = std::fs::create_dir(dir);
        }
        match made {
            Ok(()) => created.push(dir),
            Err(e) => {
                for made in created.iter().rev() {
                    let _ = std::fs::remove_dir(made);
                }
                return match e.kind() {
                    io::ErrorKind::AlreadyExists => Ok(false),
                    _ => Err(io::Error::new(
                        e.kind(),
                        format!("cannot create {}: {e}", dir.display()),
                    )),
                };
            }
        }
    }
    Ok(true)
}

/// Removes the job cgroup `dir` if it is a leftover: empty, and created long enough ago that
/// no launch can still be about to move a job into it (a supervisor killed with its job, a
/// crash). Whether it was removed.
fn remove_if_stale(dir: &Path) -> bool {
    const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
    let old_enough = std::fs::metadata(dir)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|created| created.elapsed().ok())
        .is_some_and(|age| age > STALE_AFTER);
    let empty = std::fs::read_to_string(dir.join("cgroup.procs"))
        .is_ok_and(|procs| procs.trim().is_empty());
    old_enough && empty && std::fs::remove_dir(dir).is_ok()
}

mod host;
mod mountinfo;
#[cfg(test)]
mod tests;
