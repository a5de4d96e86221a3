//! A submit as a client asked for it, before any check: the domain form of the wire's
//! `JobSpec`, which schedd validates (`schedd::submit::validate`) and ysim builds directly.

use crate::signals::WarnSignal;
use std::collections::BTreeMap;

/// What a client asked for, unchecked: empty strings and zeros mean "not given" exactly as
/// on the wire (`proto/ysched.proto`, `JobSpec`), so the same defaults apply however the
/// request arrived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitRequest {
    pub name: String,
    /// Empty: the configured default tier.
    pub tier: String,
    /// Total for the job.
    pub gpus: u32,
    /// Empty: any model; `A100|H100`: either.
    pub gpu_type: String,
    /// 0: 1.
    pub cpus: u32,
    /// 0: no memory request.
    pub mem_mib: u64,
    /// 0: no limit.
    pub time_limit_secs: u64,
    /// `None`: the tier's default grace.
    pub grace_secs: Option<u32>,
    /// Empty: `<checkpoint_root>/<job id>`.
    pub checkpoint_dir: String,
    /// Empty: the user's primary group.
    pub account: String,
    pub stdout_path: String,
    pub stderr_path: String,
    /// Absolute.
    pub workdir: String,
    /// The batch script's contents.
    pub script: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub hold: bool,
    /// 0: 1.
    pub nodes: u32,
    pub no_requeue: bool,
    pub interconnect: String,
    pub constraints: Vec<String>,
    /// As asked for, not yet checked (`WarnSignal::check`).
    pub warn_signal: Option<WarnSignal>,
    /// `--array` as typed.
    pub array: String,
    /// `--dependency` as typed.
    pub dependency: String,
    /// `-w/--nodelist`: exactly these nodes (names, host lists already expanded).
    pub nodelist: Vec<String>,
    /// `-x/--exclude`: never these nodes.
    pub exclude: Vec<String>,
    /// `--exclusive`: whole nodes.
    pub exclusive: bool,
    /// `--begin`, seconds since the epoch; 0: now.
    pub begin_unix_secs: u64,
    /// `--mail-type`, upper case as typed (`BEGIN`, `END`, `ALL`...).
    pub mail_types: Vec<String>,
    /// `--mail-user`; empty: the submitting user.
    pub mail_user: String,
    /// `--ntasks-per-node`; 0: not given.
    pub ntasks_per_node: u32,
    /// Slurm's `--partition`: a tier name or a key of `slurm.partitions`.
    pub partition: String,
    /// Slurm's `--qos`: a tier name or a key of `slurm.qos`.
    pub qos: String,
    /// `--slurm-env`: set Slurm's `SLURM_*` variables in the job too.
    pub slurm_env: bool,
    /// `--open-mode=append`.
    pub open_append: bool,
    /// `--comment` (or Slurm's `--wckey`).
    pub comment: String,
}
