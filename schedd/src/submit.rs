//! Turns a client's wire `JobSpec` into a validated domain job, or a message naming what is
//! wrong. Runs before anything is written, so a refused submit changes nothing.

use crate::error::ApiError;
use crate::store::Payload;
use std::collections::BTreeMap;
use std::path::Path;
use ysched_common::{ArraySpec, Caller, Config, DependencyRequest, JobSpec};
use ysched_proto as pb;

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
    wire: pb::JobSpec,
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
    use ysched_common::text::{check_printable, excerpt};
    use ysched_common::{limits, parse};
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
    // The same bounds `ysub` enforces, for clients that bypass it.
    for (flag, value, max) in [
        ("--gpus", u64::from(wire.gpus), u64::from(parse::MAX_GPUS)),
        (
            "--nodes",
            u64::from(wire.nodes),
            u64::from(parse::MAX_NODES),
        ),
        ("--cpus", u64::from(wire.cpus), u64::from(parse::MAX_CPUS)),
    ] {
        if value > max {
            return Err(invalid(format!(
                "{flag} {value} exceeds the maximum of {max}"
            )));
        }
    }
    if wire.mem_mib > parse::MAX_MEM_MIB {
        return Err(invalid(format!(
            "--mem {}M exceeds the maximum of 1024T",
            wire.mem_mib
        )));
    }
    if wire.time_limit_secs > parse::MAX_TIME_LIMIT_SECS {
        return Err(invalid(format!(
            "time limit of {} seconds exceeds the maximum of 365 days ({} seconds)",
            wire.time_limit_secs,
            parse::MAX_TIME_LIMIT_SECS
        )));
    }
    // Tier names match case-insensitively, whatever case the config spells them in.
    let tier_name = if wire.tier.trim().is_empty() {
        config.scheduler.default_tier.clone()
    } else {
        config
            .tiers
            .keys()
            .find(|k| k.eq_ignore_ascii_case(wire.tier.trim()))
            .cloned()
            .unwrap_or_else(|| wire.tier.trim().to_string())
    };
    let Some(tier) = config.tier(&tier_name) else {
        return Err(invalid(format!(
            "unknown tier '{}' (tiers: {})",
            excerpt(&wire.tier, 64),
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
    let nodes_wanted = wire.nodes.max(1);
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
            Some(ysched_common::WarnSignal {
                signal: w.signal,
                secs: w.secs,
                batch_only: w.batch_only,
            })
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
    };
    Ok(ValidSubmit {
        spec,
        payload: Payload {
            script: wire.script,
            env: wire.env.into_iter().collect(),
        },
        grace_secs: grace,
        dependency,
    })
}

/// The size limits of what a job carries to its node, each text, the script and the
/// environment, and the launch as a whole (see [`ysched_common::limits::check_submit`]): the
/// check `ysub` makes too, with the same message.
pub fn check_payload_size(wire: &pb::JobSpec, config: &Config) -> Result<(), String> {
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

#[cfg(test)]
mod checkpoint_dir_tests {
    use super::*;

    fn spec(dir: Option<&str>) -> JobSpec {
        JobSpec {
            checkpoint_dir: dir.map(str::to_string),
            ..JobSpec::default()
        }
    }

    #[test]
    fn home_root_falls_back_when_the_home_is_missing() {
        let exists = |home: &Path| home == Path::new("/home/alice");
        let dir = |root, home: Option<&str>| {
            checkpoint_dir_with(&spec(None), 7, root, home.map(Path::new), exists)
        };
        let root = "~/.ysched/checkpoints";
        assert_eq!(
            dir(root, Some("/home/alice")),
            "/home/alice/.ysched/checkpoints/7"
        );
        // nobody's home on Debian, on RHEL, and a uid unknown to schedd's host.
        for home in [Some("/nonexistent"), Some("/"), None] {
            assert_eq!(dir(root, home), "/var/tmp/ysched-checkpoints/7", "{home:?}");
        }
        // A root outside the home is taken as it is, home or not.
        assert_eq!(dir("/shared/ck/", None), "/shared/ck/7");
        // The job's own --checkpoint-dir always wins.
        assert_eq!(
            checkpoint_dir_with(&spec(Some("/x/ck")), 7, root, None, exists),
            "/x/ck"
        );
    }

    #[test]
    fn the_real_home_test_sees_existing_directories() {
        let tmp = std::env::temp_dir();
        let root = "~/ck";
        assert_eq!(
            checkpoint_dir(&spec(None), 3, root, Some(&tmp)),
            format!("{}/ck/3", tmp.display())
        );
        assert_eq!(
            checkpoint_dir(&spec(None), 3, root, Some(Path::new("/nonexistent/x"))),
            "/var/tmp/ysched-checkpoints/3"
        );
    }
}

#[cfg(test)]
mod warn_signal_tests {
    use super::*;
    use ysched_common::Owner;

    fn submit(warn: Option<pb::WarnSignal>) -> Result<ValidSubmit, ApiError> {
        let owner = Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into()],
        };
        let wire = pb::JobSpec {
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            warn_signal: warn,
            ..Default::default()
        };
        validate(wire, &Caller::local(owner), &Config::default())
    }

    #[test]
    fn a_warning_signal_is_kept_and_bad_ones_are_named() {
        assert_eq!(submit(None).unwrap().spec.warn_signal, None);
        let w = pb::WarnSignal {
            signal: 10,
            secs: 2,
            batch_only: true,
        };
        let spec = submit(Some(w)).unwrap().spec;
        assert_eq!(spec.warn_signal.unwrap().to_string(), "B:USR1@2");
        let err = submit(Some(pb::WarnSignal { signal: 99, ..w })).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("unknown signal '99'")),
            "{err:?}"
        );
        let err = submit(Some(pb::WarnSignal { secs: 65_536, ..w })).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("65536 seconds is out of range")),
            "{err:?}"
        );
    }
}

#[cfg(test)]
mod account_tests {
    use super::*;
    use ysched_common::Owner;

    fn alice() -> Owner {
        Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into(), "ml".into()],
        }
    }

    fn config() -> Config {
        Config::parse(
            "[tiers.high]\nvalue = 10\nmax_gpus_per_account = 16\n\
             [tiers.medium]\nvalue = 5\nmax_gpus_per_user = 4\n\
             [accounts.vision]\nusers = [\"alice\"]\n\
             [accounts.nlp]\ngroups = [\"ml\"]\n\
             [accounts.infra]\n",
        )
        .unwrap()
    }

    fn submit(
        caller: Caller,
        account: &str,
        tier: &str,
        gpus: u32,
    ) -> Result<ValidSubmit, ApiError> {
        let wire = pb::JobSpec {
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            account: account.into(),
            tier: tier.into(),
            gpus,
            ..Default::default()
        };
        validate(wire, &caller, &config())
    }

    #[test]
    fn a_user_charges_only_accounts_they_belong_to() {
        let me = || Caller::local(alice());
        // The primary group by default, a group of the same name, the account's users, groups.
        assert_eq!(submit(me(), "", "high", 1).unwrap().spec.account, "alice");
        for ok in ["alice", "ml", "vision", "nlp"] {
            assert_eq!(submit(me(), ok, "high", 1).unwrap().spec.account, ok);
        }
        let err = submit(me(), "infra", "high", 1).unwrap_err();
        assert!(
            matches!(&err, ApiError::Denied(m) if m.contains("may not charge account 'infra'")
                && m.contains("members of the Unix group 'infra'")),
            "{err:?}"
        );
        // Administrators charge any account.
        let root = Caller::local(Owner {
            uid: 0,
            gid: 0,
            user: "root".into(),
            groups: vec!["root".into()],
        });
        assert_eq!(
            submit(root, "infra", "high", 1).unwrap().spec.account,
            "infra"
        );
    }

    #[test]
    fn root_relayed_from_an_untrusted_node_may_not_submit() {
        let root = Owner {
            uid: 0,
            gid: 0,
            user: "root".into(),
            groups: vec!["root".into(), "hpcadmin".into()],
        };
        let mut config = config();
        config.scheduler.admin_hosts = vec!["login1".into()];
        config.scheduler.admin_group = "hpcadmin".into();
        let relayed = |host: &str| {
            let caller = Caller {
                owner: root.clone(),
                host: Some(host.into()),
                admin: config.is_admin(&root, Some(host)),
            };
            let wire = pb::JobSpec {
                script: "#!/bin/sh\ntrue\n".into(),
                workdir: "/tmp".into(),
                ..Default::default()
            };
            validate(wire, &caller, &config)
        };
        // From a compute node, even when its root claims the admin group there.
        let err = relayed("n7").unwrap_err();
        assert!(
            matches!(&err, ApiError::Denied(m) if m == "root relayed from node n7 may not \
                submit jobs: jobs run as root only when submitted on the schedd host or on a \
                node of scheduler.admin_hosts"),
            "{err:?}"
        );
        // From an admin host, and on schedd's own socket, root submits as before.
        assert!(relayed("login1").is_ok());
        let local = Caller::local(root.clone());
        assert!(submit(local, "", "high", 1).is_ok());
        // Other users relayed from that node are not concerned.
        let alice = Caller {
            owner: alice(),
            host: Some("n7".into()),
            admin: false,
        };
        assert!(submit(alice, "", "high", 1).is_ok());
    }

    #[test]
    fn a_job_larger_than_its_tiers_quota_is_refused() {
        let me = || Caller::local(alice());
        assert!(submit(me(), "", "high", 16).is_ok());
        let err = submit(me(), "", "high", 17).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("17 GPUs")
                && m.contains("tiers.high.max_gpus_per_account")),
            "{err:?}"
        );
        assert!(submit(me(), "", "medium", 4).is_ok());
        let err = submit(me(), "", "medium", 5).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("tiers.medium.max_gpus_per_user")),
            "{err:?}"
        );
    }
}

#[cfg(test)]
mod array_tests {
    use super::*;
    use ysched_common::Owner;

    fn submit(array: &str, dependency: &str, config: &Config) -> Result<ValidSubmit, ApiError> {
        let owner = Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into()],
        };
        let wire = pb::JobSpec {
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            array: array.into(),
            dependency: dependency.into(),
            ..Default::default()
        };
        validate(wire, &Caller::local(owner), config)
    }

    #[test]
    fn arrays_are_parsed_and_bad_ones_named() {
        let config = Config::default();
        let ok = submit("0-99:4%16", "", &config).unwrap();
        let array = ok.spec.array.unwrap();
        assert_eq!((array.count, array.max_running), (25, 16));
        assert_eq!(submit("", "", &config).unwrap().spec.array, None);
        for (bad, wanted) in [
            ("5-1", "--array '5-1': range '5-1' goes backwards"),
            ("x", "'x' is not a task index"),
            ("0-9%0", "%0 would never run a task"),
        ] {
            let err = submit(bad, "", &config).unwrap_err();
            assert!(
                matches!(&err, ApiError::Invalid(m) if m.contains(wanted)),
                "{bad}: {err:?}"
            );
        }
        // scheduler.max_array_size bounds the indices.
        let mut small = Config::default();
        small.scheduler.max_array_size = 100;
        assert!(submit("0-99", "", &small).is_ok());
        let err = submit("0-100", "", &small).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("scheduler.max_array_size = 100")),
            "{err:?}"
        );
    }

    #[test]
    fn dependencies_are_parsed_and_resolved_later() {
        let config = Config::default();
        let ok = submit("", "afterok:12:13_[1-2],afterany:14", &config).unwrap();
        assert_eq!(
            ok.spec.dependency, None,
            "resolved at submit, under the lock"
        );
        let request = ok.dependency.unwrap();
        assert_eq!(request.clauses.len(), 2);
        assert_eq!(request.text, "afterok:12:13_[1-2],afterany:14");
        assert!(submit("", "", &config).unwrap().dependency.is_none());
        let err = submit("", "before:3", &config).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("unknown type 'before'")),
            "{err:?}"
        );
    }
}
