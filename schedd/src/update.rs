//! Turns a client's `yctl update` request into checked changes ([`ValidUpdate`]), before the
//! state lock: what a submit would refuse is refused here with the submit's words (tier
//! permission and name, time-limit bounds, the dependency's syntax). What needs the job
//! (whether it is pending, a limit only lowered, the dependency's targets and cycles) is
//! checked by [`crate::state::Records::update_job`].

use crate::error::ApiError;
pub use crate::state::update::TierChange;
use ysched_common::text::{check_printable, excerpt};
use ysched_common::{limits, Caller, Config, DependencyRequest};

/// An update's changes, each `None` when not asked for.
#[derive(Debug, Clone, Default)]
pub struct ValidUpdate {
    pub tier: Option<TierChange>,
    /// `Some(None)`: no limit.
    pub time_limit_secs: Option<Option<u64>>,
    pub name: Option<String>,
    /// `Some(None)`: no dependency any more.
    pub dependency: Option<Option<DependencyRequest>>,
    /// `Some(true)`: hold; `Some(false)`: release.
    pub hold: Option<bool>,
}

impl ValidUpdate {
    /// Whether it asks for no change at all.
    pub fn is_empty(&self) -> bool {
        self.tier.is_none()
            && self.time_limit_secs.is_none()
            && self.name.is_none()
            && self.dependency.is_none()
            && self.hold.is_none()
    }
}

/// The tier `text` names: a tier's name in any case, else a Slurm partition or QOS name the
/// config's `[slurm]` maps (`yctl update JOB Partition=gpu` and `QOS=` reach schedd as this
/// text, as `--priority` does).
pub fn resolve_tier(config: &Config, text: &str) -> Option<String> {
    use ysched_common::config::SlurmName;
    config
        .tier_of_slurm_name(SlurmName::Partition, text)
        .or_else(|_| config.tier_of_slurm_name(SlurmName::Qos, text))
        .ok()
}

/// An update as the client asked for it (the wire's `UpdateJobRequest` without its job),
/// unchecked: each field `None` when not given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateRequest {
    pub tier: Option<String>,
    /// 0: no limit.
    pub time_limit_secs: Option<u64>,
    pub name: Option<String>,
    /// Empty: no dependency.
    pub dependency: Option<String>,
    pub hold: Option<bool>,
}

/// Checks the fields of an update request against the config and the caller's permissions.
pub fn validate(
    request: &UpdateRequest,
    caller: &Caller,
    config: &Config,
) -> Result<ValidUpdate, ApiError> {
    let invalid = ApiError::Invalid;
    let mut update = ValidUpdate::default();
    if let Some(text) = &request.tier {
        limits::TIER.check_len(text).map_err(invalid)?;
        check_printable("tier", text).map_err(invalid)?;
        let Some(name) = resolve_tier(config, text) else {
            let mapped: Vec<&str> = config
                .slurm
                .partitions
                .keys()
                .chain(config.slurm.qos.keys())
                .map(String::as_str)
                .collect();
            let mapped = if mapped.is_empty() {
                String::new()
            } else {
                format!(
                    "; partitions and QOS names mapped to tiers: {}",
                    mapped.join(", ")
                )
            };
            return Err(invalid(format!(
                "unknown tier '{}' (tiers: {}{mapped})",
                excerpt(text, 64),
                config.tier_names().join(", ")
            )));
        };
        let tier = config
            .tier(&name)
            .ok_or_else(|| ApiError::Internal(format!("tier '{name}' vanished from the config")))?;
        if !crate::submit::tier_allows(tier, caller) {
            return Err(ApiError::Denied(format!(
                "user {} may not use tier '{name}' (only the users and groups that may submit \
                 to it: tiers.{name}.allow_users, allow_groups)",
                caller.owner.user
            )));
        }
        update.tier = Some(TierChange {
            value: tier.value,
            max_gpus_per_account: tier.max_gpus_per_account,
            max_gpus_per_user: tier.max_gpus_per_user,
            name,
        });
    }
    if let Some(secs) = request.time_limit_secs {
        limits::TIME_LIMIT.check(secs).map_err(invalid)?;
        update.time_limit_secs = Some((secs > 0).then_some(secs));
    }
    if let Some(name) = &request.name {
        limits::JOB_NAME.check_len(name).map_err(invalid)?;
        check_printable("job name", name).map_err(invalid)?;
        if name.trim().is_empty() {
            return Err(invalid("the job name is empty".into()));
        }
        update.name = Some(name.clone());
    }
    if let Some(text) = &request.dependency {
        limits::DEPENDENCY.check_len(text).map_err(invalid)?;
        update.dependency = Some(if text.trim().is_empty() {
            None
        } else {
            Some(DependencyRequest::parse(text).map_err(invalid)?)
        });
    }
    update.hold = request.hold;
    if update.is_empty() {
        return Err(invalid(
            "nothing to update: give a tier, time limit, name, dependency, hold or release".into(),
        ));
    }
    Ok(update)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ysched_common::Owner;

    fn caller(user: &str, uid: u32) -> Caller {
        Caller {
            owner: Owner {
                user: user.into(),
                uid,
                gid: uid,
                groups: vec![user.into()],
            },
            host: None,
            admin: uid == 0,
        }
    }

    fn request() -> UpdateRequest {
        UpdateRequest::default()
    }

    #[test]
    fn tiers_resolve_in_any_case_and_within_permission() {
        let config = Config::default();
        let alice = caller("alice", 1000);
        let mut r = request();
        r.tier = Some("HIGH".into());
        let update = validate(&r, &alice, &config).unwrap();
        assert_eq!(update.tier.unwrap().name, "high");
        r.tier = Some("gold".into());
        let err = validate(&r, &alice, &config).unwrap_err().to_string();
        assert!(err.contains("unknown tier 'gold'"), "{err}");
        // The default `critical` tier is root's only.
        r.tier = Some("critical".into());
        let err = validate(&r, &alice, &config).unwrap_err();
        assert!(matches!(err, ApiError::Denied(_)), "{err}");
        assert!(validate(&r, &caller("root", 0), &config).is_ok());
    }

    #[test]
    fn fields_are_checked_as_at_submit() {
        let config = Config::default();
        let alice = caller("alice", 1000);
        let err = validate(&request(), &alice, &config)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nothing to update"), "{err}");
        let mut r = request();
        r.time_limit_secs = Some(limits::MAX_TIME_LIMIT_SECS + 1);
        assert!(validate(&r, &alice, &config).is_err());
        r.time_limit_secs = Some(0);
        assert_eq!(
            validate(&r, &alice, &config).unwrap().time_limit_secs,
            Some(None)
        );
        let mut r = request();
        r.name = Some("bad\nname".into());
        assert!(validate(&r, &alice, &config).is_err());
        r.name = Some("x".repeat(300));
        assert!(validate(&r, &alice, &config).is_err());
        let mut r = request();
        r.dependency = Some("afterok:".into());
        assert!(validate(&r, &alice, &config).is_err());
        r.dependency = Some(String::new());
        assert!(matches!(
            validate(&r, &alice, &config).unwrap().dependency,
            Some(None)
        ));
        let mut r = request();
        r.hold = Some(false);
        assert_eq!(validate(&r, &alice, &config).unwrap().hold, Some(false));
    }
}
