//! Policies: each is a ysched config (plus whether fair share orders the queue). The built-in
//! ones form a ladder, each adding one feature to the one before:
//!
//! | name         | tiers                      | preemption | fair share | backfill |
//! |--------------|----------------------------|------------|------------|----------|
//! | `fifo`       | one priority (all equal)   | no         | no         | no       |
//! | `tiers`      | the default tiers' order   | no         | no         | no       |
//! | `preempt`    | the default tiers          | yes        | no         | no       |
//! | `+fairshare` | the default tiers          | yes        | yes        | no       |
//! | `+backfill`  | the default tiers          | yes        | yes        | yes      |
//!
//! `+backfill` is schedd's configuration out of the box. `fifo` keeps the tier names (so that
//! results still show them) but gives them one value: jobs go in submit order, first fit (a
//! pass places whatever fits, in queue order). A config file (`--config`) is evaluated as
//! schedd runs it, fair share included.

use crate::engine::PolicySpec;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use ysched_common::config::AccountConfig;
use ysched_common::Config;

/// The built-in policies, in ladder order.
pub const BUILTIN: [&str; 5] = ["fifo", "tiers", "preempt", "+fairshare", "+backfill"];

/// A built-in policy; `accounts` are the workload's teams and shares, if it has any.
pub fn builtin(name: &str, accounts: &BTreeMap<String, AccountConfig>) -> Result<PolicySpec> {
    let mut config = Config {
        accounts: accounts.clone(),
        ..Config::default()
    };
    let (mut backfill, mut fair_share) = (false, false);
    match name {
        "fifo" => {
            for tier in config.tiers.values_mut() {
                tier.value = 0;
                tier.may_preempt = false;
                tier.preemptible = false;
            }
        }
        "tiers" => {
            for tier in config.tiers.values_mut() {
                tier.may_preempt = false;
            }
        }
        "preempt" => {}
        "+fairshare" => fair_share = true,
        "+backfill" => (backfill, fair_share) = (true, true),
        other => bail!(
            "unknown policy '{other}' (built-in: {}; or --config FILE)",
            BUILTIN.join(", ")
        ),
    }
    config.scheduler.backfill = backfill;
    Ok(PolicySpec {
        name: name.to_string(),
        config,
        fair_share,
    })
}

/// A policy from a ysched config file, named after the file; its accounts are the workload's
/// where the file lists none.
pub fn from_file(path: &Path, accounts: &BTreeMap<String, AccountConfig>) -> Result<PolicySpec> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let mut config = Config::parse(&text)
        .map_err(|e| anyhow::anyhow!("invalid config {}: {e}", path.display()))?;
    if config.accounts.is_empty() {
        config.accounts = accounts.clone();
    }
    let name = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    Ok(PolicySpec {
        name,
        config,
        fair_share: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder() {
        let none = BTreeMap::new();
        let fifo = builtin("fifo", &none).unwrap();
        assert!(fifo
            .config
            .tiers
            .values()
            .all(|t| t.value == 0 && !t.may_preempt));
        let tiers = builtin("tiers", &none).unwrap();
        assert!(tiers.config.tiers.values().all(|t| !t.may_preempt));
        assert!(tiers.config.tiers["high"].value > tiers.config.tiers["low"].value);
        let preempt = builtin("preempt", &none).unwrap();
        assert!(preempt.config.tiers["high"].may_preempt);
        assert!(!preempt.config.scheduler.backfill && !preempt.fair_share);
        let full = builtin("+backfill", &none).unwrap();
        assert!(full.config.scheduler.backfill && full.fair_share);
        assert_eq!(full.config.tiers, Config::default().tiers);
        assert!(builtin("lottery", &none).is_err());
    }
}
