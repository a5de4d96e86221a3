//! Turns a client's submit request (`SubmitRequest`, the domain form of the wire's `JobSpec`)
//! into a validated domain job, or a message naming what is wrong. Runs before anything is
//! written, so a refused submit changes nothing.

use crate::error::ApiError;
use crate::store::Payload;
use std::collections::BTreeMap;
use std::path::Path;
use ysched_common::{ArraySpec, Caller, Config, DependencyRequest, JobSpec, SubmitRequest};

/// A submit as the client asked for it, checked and with defaults resolved: the spec
/// (without script and env, which go into the payload), the payload, and the grace. Whether
/// some node could ever run it is checked against the nodes at submit (`core::check_satisfiable`).
#[derive(Debug, Clone)]
pub struct ValidSubmit {
    pub spec: JobSpec,
    pub payload: Payload,
    pub grace_secs: u32,
    /// `--dependency` as parsed: its targets are resolved into job ids under the lock, at
    /// submit (into `spec.dependency`).
    pub dependency: Option<DependencyRequest>,
}

/// Checks a submit and resolves defaults, without looking at the cluster's state (so without
/// its lock).
pub fn validate(
    wire: SubmitRequest,
    caller: &Caller,
    config: &Config,
) -> Result<ValidSubmit, ApiError> {
    let owner = &caller.owner;
    // A job runs as its submitter's uid on whichever node it is placed: root relayed from a
    // node the cluster does not trust with root (outside `scheduler.admin_hosts`) would run
    // root processes on every other node. Refused (and audited, as any denied submit).
    if owner.is_root() && !config.trusts_root_of(caller.host.as_deref()) {
        return Err(ApiError::Denied(format!(
            "root relayed from node {} may not submit jobs: jobs run as root only when \
             submitted on the schedd host or on a node of scheduler.admin_hosts",
            caller.host.as_deref().unwrap_or_default()
        )));
    }
    use ysched_common::limits;
    use ysched_common::text::{check_printable, excerpt};
    let invalid = ApiError::Invalid;
    // Every text first, by its length, before anything looks at its content, then what the
    // job will carry to its node: the same limits `ysub` checks (`ysched_common::limits`).
    limits::check_submit_texts(&wire).map_err(invalid)?;
    // Names and accounts are printed by `yq` and friends on other users' terminals.
    check_printable("job name", &wire.name).map_err(invalid)?;
    check_printable("account", &wire.account).map_err(invalid)?;
    check_printable("tier", &wire.tier).map_err(invalid)?;
    check_printable("GPU model", &wire.gpu_type).map_err(invalid)?;
    for feature in &wire.constraints {
        check_printable("feature", feature).map_err(invalid)?;
    }
    check_printable("partition", &wire.partition).map_err(invalid)?;
    check_printable("QOS", &wire.qos).map_err(invalid)?;
    check_printable("mail address", &wire.mail_user).map_err(invalid)?;
    // Empty: the submitting user. Otherwise an address or a user name, never an option of
    // sendmail's, a program or a file (the check `ysub` makes too).
    let mail_user = wire.mail_user.trim();
    if !mail_user.is_empty() {
        ysched_common::mail_address::check_mail_user(mail_user).map_err(invalid)?;
    }
    check_printable("comment", &wire.comment).map_err(invalid)?;
    // The same bounds `ysub` enforces, for clients that bypass it, with its messages.
    limits::GPUS.check(wire.gpus.into()).map_err(invalid)?;
    limits::NODES.check(wire.nodes.into()).map_err(invalid)?;
    limits::CPUS.check(wire.cpus.into()).map_err(invalid)?;
    limits::MEM.check(wire.mem_mib).map_err(invalid)?;
    limits::TIME_LIMIT
        .check(wire.time_limit_secs)
        .map_err(invalid)?;
    let tier_name = resolve_tier(&wire, config).map_err(invalid)?;
    let Some(tier) = config.tier(&tier_name) else {
        // Unreachable: a resolved name is a configured tier.
        return Err(invalid(format!(
            "unknown tier '{}' (tiers: {})",
            excerpt(&tier_name, 64),
            config.tier_names().join(", ")
        )));
    };
    if !tier_allows(tier, caller) {
        return Err(ApiError::Denied(format!(
            "user {} may not submit to tier '{tier_name}' ({})",
            owner.user,
            who_may(tier)
        )));
    }
    // The account charged: `-A`, else the submitter's primary group (always theirs).
    if !wire.account.is_empty() && !caller.is_admin() && !config.may_charge(owner, &wire.account) {
        return Err(ApiError::Denied(format!(
            "user {} may not charge account '{}' ({})",
            owner.user,
            wire.account,
            who_may_charge(config, &wire.account)
        )));
    }
    // A job larger than its tier's quota could never start: refuse it now. One within it
    // waits for the quota to free up (AccountLimit, UserLimit).
    for (limit, key) in [
        (tier.max_gpus_per_account, "max_gpus_per_account"),
        (tier.max_gpus_per_user, "max_gpus_per_user"),
    ] {
        if limit > 0 && wire.gpus > limit {
            let per = if key.ends_with("account") {
                "account"
            } else {
                "user"
            };
            return Err(invalid(format!(
                "the job asks for {} GPUs, more than tier '{tier_name}' lets one {per} hold \
                 ({limit}, tiers.{tier_name}.{key})",
                wire.gpus
            )));
        }
    }
    let nodelist = node_names("--nodelist", &wire.nodelist).map_err(invalid)?;
    let exclude = node_names("--exclude", &wire.exclude).map_err(invalid)?;
    if let Some(both) = nodelist.iter().find(|n| exclude.contains(n)) {
        return Err(invalid(format!(
            "node '{}' is both in --nodelist and in --exclude",
            excerpt(both, 64)
        )));
    }
    // `-w` names the job's nodes: it runs on each of them, so their number is its size.
    let nodes_wanted = match u32::try_from(nodelist.len()) {
        Ok(0) => wire.nodes.max(1),
        Ok(listed) if wire.nodes == 0 || wire.nodes == listed => listed,
        _ => {
            return Err(invalid(format!(
                "--nodes {} differs from the {} nodes of --nodelist (the job runs on each \
                 listed node; drop --nodes or list as many nodes)",
                wire.nodes,
                nodelist.len()
            )))
        }
    };
    if nodes_wanted > limits::MAX_NODES {
        return Err(invalid(format!(
            "--nodelist of {nodes_wanted} nodes exceeds the maximum of {} nodes",
            limits::MAX_NODES
        )));
    }
    let begin_unix_secs = match wire.begin_unix_secs {
        0 => None,
        secs if secs > limits::MAX_BEGIN_UNIX_SECS => {
            return Err(invalid(format!(
                "--begin {secs} (seconds since the epoch) is after the year 9999"
            )))
        }
        secs => Some(secs),
    };
    let mail_types = ysched_common::mail_types::parse(&wire.mail_types).map_err(invalid)?;
    if !mail_types.is_empty() && config.notify.sendmail().is_none() {
        return Err(invalid(
            "--mail-type needs sendmail on the scheduler host, and mail is turned off there \
             (notify.sendmail is empty); ask your administrator or drop --mail-type"
                .into(),
        ));
    }
    limits::NTASKS_PER_NODE
        .check(wire.ntasks_per_node.into())
        .map_err(invalid)?;
    if !wire.gpus.is_multiple_of(nodes_wanted) {
        return Err(invalid(format!(
            "--gpus {} cannot be split evenly over --nodes {nodes_wanted}",
            wire.gpus
        )));
    }
    let grace = match wire.grace_secs {
        Some(g) if g > tier.max_grace => {
            return Err(invalid(format!(
                "--grace {g} exceeds the maximum of {} seconds for tier '{tier_name}'",
                tier.max_grace
            )))
        }
        Some(g) => g,
        None => tier.default_grace,
    };
    if wire.script.is_empty() {
        return Err(invalid("empty job script".into()));
    }
    check_payload_size(&wire, config).map_err(invalid)?;
    if !wire.workdir.starts_with('/') {
        return Err(invalid(format!(
            "working directory '{}' is not an absolute path",
            excerpt(&wire.workdir, 80)
        )));
    }
    let checkpoint_dir = limits::checkpoint_dir(&wire);
    let gpu_types: Vec<String> = wire
        .gpu_type
        .split('|')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    if wire.gpu_type.contains('|') && gpu_types.len() != wire.gpu_type.split('|').count() {
        return Err(invalid(format!(
            "malformed --gpu-type '{}'",
            excerpt(&wire.gpu_type, 64)
        )));
    }
    if wire.constraints.iter().any(|c| c.trim().is_empty()) {
        return Err(invalid("an empty feature in --constraint".into()));
    }
    if !gpu_types.is_empty() && wire.gpus == 0 {
        return Err(invalid("--gpu-type given without --gpus".into()));
    }
    let interconnect = match wire.interconnect.trim() {
        "" => None,
        "nvlink" => Some("nvlink".to_string()),
        other => {
            return Err(invalid(format!(
                "unknown --interconnect '{}' (known: nvlink)",
                excerpt(other, 32)
            )))
        }
    };
    let warn_signal = match wire.warn_signal {
        Some(w) => {
            ysched_common::WarnSignal::check(w.signal, w.secs).map_err(invalid)?;
            Some(w)
        }
        None => None,
    };
    // `--array`: one job per task, all sharing this spec.
    let array = if wire.array.trim().is_empty() {
        None
    } else {
        Some(ArraySpec::parse(&wire.array, config.scheduler.max_array_size).map_err(invalid)?)
    };
    // `--dependency`: parsed now, its targets resolved at submit (under the lock).
    let dependency = if wire.dependency.trim().is_empty() {
        None
    } else {
        Some(DependencyRequest::parse(&wire.dependency).map_err(invalid)?)
    };
    let opt = |s: String| (!s.trim().is_empty()).then_some(s);
    let spec = JobSpec {
        name: if wire.name.is_empty() {
            "job".into()
        } else {
            wire.name
        },
        tier: tier_name,
        gpus: wire.gpus,
        gpu_types,
        cpus: wire.cpus.max(1),
        mem_mib: wire.mem_mib,
        time_limit_secs: (wire.time_limit_secs > 0).then_some(wire.time_limit_secs),
        grace_secs: wire.grace_secs,
        checkpoint_dir,
        account: opt(wire.account).unwrap_or_else(|| {
            owner
                .groups
                .first()
                .cloned()
                .unwrap_or_else(|| owner.user.clone())
        }),
        stdout_path: opt(wire.stdout_path),
        stderr_path: opt(wire.stderr_path),
        workdir: wire.workdir,
        script: String::new(),
        args: wire.args,
        env: BTreeMap::new(),
        hold: wire.hold,
        nodes: nodes_wanted,
        no_requeue: wire.no_requeue,
        interconnect,
        constraints: wire
            .constraints
            .into_iter()
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect(),
        warn_signal,
        array,
        dependency: None,
        nodelist,
        exclude,
        exclusive: wire.exclusive,
        begin_unix_secs,
        mail_types,
        mail_user: wire.mail_user.trim().to_string(),
        ntasks_per_node: wire.ntasks_per_node,
        partition: wire.partition.trim().to_string(),
        qos: wire.qos.trim().to_string(),
        // noded's business (see `LaunchJob`): only flags to keep.
        slurm_env: wire.slurm_env,
        open_append: wire.open_append,
        comment: wire.comment,
    };
    Ok(ValidSubmit {
        spec,
        payload: Payload {
            script: wire.script,
            env: wire.env,
        },
        grace_secs: grace,
        dependency,
    })
}

/// `-w` or `-x`'s node names, each printable, not empty, and named once; sorted.
fn node_names(flag: &str, names: &[String]) -> Result<Vec<String>, String> {
    use ysched_common::text::{check_printable, excerpt};
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let name = name.trim();
        check_printable("node name", name)?;
        if name.is_empty() || name.contains(',') || name.contains(char::is_whitespace) {
            return Err(format!(
                "{flag}: '{}' is not a node name (give names, host lists expanded)",
                excerpt(name, 64)
            ));
        }
        if !seen.insert(name) {
            return Err(format!("{flag} names node '{}' twice", excerpt(name, 64)));
        }
        out.push(name.to_string());
    }
    // Sorted: placement looks names up by binary search (`core::demand::listed`).
    out.sort_unstable();
    Ok(out)
}

/// The job's tier: `-p/--priority` (a tier name, any case) wins, then Slurm's `--qos`, then
/// `--partition` (each a tier name or a name `[slurm]` maps), else `scheduler.default_tier`.
/// Every partition and QOS given must mean a tier, used or not, so that a typo is caught.
fn resolve_tier(wire: &SubmitRequest, config: &Config) -> Result<String, String> {
    use ysched_common::config::SlurmName;
    use ysched_common::text::excerpt;
    let from_qos = (!wire.qos.trim().is_empty())
        .then(|| config.tier_of_slurm_name(SlurmName::Qos, &wire.qos))
        .transpose()?;
    let from_partition = (!wire.partition.trim().is_empty())
        .then(|| config.tier_of_slurm_name(SlurmName::Partition, &wire.partition))
        .transpose()?;
    let tier = wire.tier.trim();
    if tier.is_empty() {
        return Ok(from_qos
            .or(from_partition)
            .unwrap_or_else(|| config.scheduler.default_tier.clone()));
    }
    config.tier_named(tier).ok_or_else(|| {
        format!(
            "unknown tier '{}' (tiers: {})",
            excerpt(&wire.tier, 64),
            config.tier_names().join(", ")
        )
    })
}

/// The size limits of what a job carries to its node, each text, the script and the
/// environment, and the launch as a whole (see [`ysched_common::limits::check_submit`]): the
/// check `ysub` makes too, with the same message.
pub fn check_payload_size(wire: &SubmitRequest, config: &Config) -> Result<(), String> {
    ysched_common::limits::check_submit(wire, config)
}

pub use ysched_common::config::FALLBACK_CHECKPOINT_ROOT;

/// The checkpoint directory for a job: its own `--checkpoint-dir`, else
/// `<checkpoint_root>/<id>` with `~` as the owner's home. An owner without a usable home (none
/// known, `/`, or a directory that does not exist, as `nobody`'s `/nonexistent`) gets
/// `<FALLBACK_CHECKPOINT_ROOT>/<id>` instead of a path no job of theirs could create.
pub fn checkpoint_dir(spec: &JobSpec, id: u64, root: &str, owner_home: Option<&Path>) -> String {
    checkpoint_dir_with(spec, id, root, owner_home, Path::is_dir)
}

/// Whether [`checkpoint_dir`] looks at the owner's home for `spec` (its own directory not
/// given, and the root under `~`): only then need a submit check that the home exists.
pub fn needs_owner_home(spec: &JobSpec, root: &str) -> bool {
    spec.checkpoint_dir.is_none() && root.starts_with('~')
}

/// [`checkpoint_dir`] with the test for an existing home given (schedd checks the home before
/// taking its state lock: a hanging automounted home must not stall every request).
pub fn checkpoint_dir_with(
    spec: &JobSpec,
    id: u64,
    root: &str,
    owner_home: Option<&Path>,
    home_exists: impl Fn(&Path) -> bool,
) -> String {
    if let Some(dir) = &spec.checkpoint_dir {
        return dir.clone();
    }
    let root = match root.strip_prefix('~') {
        Some(rest) => {
            let home = owner_home
                .filter(|home| home.is_absolute() && *home != Path::new("/"))
                .filter(|home| home_exists(home));
            match home {
                Some(home) => format!("{}{rest}", home.display()),
                None => FALLBACK_CHECKPOINT_ROOT.to_string(),
            }
        }
        None => root.to_string(),
    };
    format!("{}/{id}", root.trim_end_matches('/'))
}

/// Administrators may use every tier; otherwise empty allow lists mean everyone. Root that is
/// not an administrator (relayed from a node outside `admin_hosts`) is not `root` of the
/// lists: the name stands for the cluster's administrator, as in the default `critical` tier.
pub fn tier_allows(tier: &ysched_common::TierConfig, caller: &Caller) -> bool {
    if caller.is_admin() || (tier.allow_users.is_empty() && tier.allow_groups.is_empty()) {
        return true;
    }
    let owner = &caller.owner;
    (tier.allow_users.contains(&owner.user) && !owner.is_root())
        || tier.allow_groups.iter().any(|g| owner.groups.contains(g))
}

/// Who may charge account `name`, for a refusal's message.
fn who_may_charge(config: &Config, name: &str) -> String {
    let mut parts = vec![format!("members of the Unix group '{name}'")];
    if let Some(a) = config.accounts.get(name) {
        if !a.users.is_empty() {
            parts.push(format!("users {}", a.users.join(", ")));
        }
        if !a.groups.is_empty() {
            parts.push(format!("members of {}", a.groups.join(", ")));
        }
    }
    format!("allowed: {}", parts.join("; "))
}

fn who_may(tier: &ysched_common::TierConfig) -> String {
    let mut parts = vec!["root".to_string()];
    parts.extend(tier.allow_users.iter().filter(|u| *u != "root").cloned());
    if !tier.allow_groups.is_empty() {
        parts.push(format!("members of {}", tier.allow_groups.join(", ")));
    }
    format!("allowed: {}", parts.join(", "))
}
