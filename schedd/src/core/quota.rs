//! The tiers' GPU quotas: what a job counts against them, and whether it may hold more.
//!
//! A job counts what it holds, not what it asked for: an `--exclusive` job takes every node it
//! runs on whole (nothing else may be placed beside it, whatever GPUs it asked for), so it
//! counts every GPU of each of those nodes, out of service or not: `--exclusive -G 0` on an
//! 8-GPU node counts 8. The same count is used at submit (a job that could only ever hold more
//! than its quota is refused, [`check_quota_reachable`]), in a pass (a placement that would go
//! over waits with `AccountLimit` or `UserLimit`) and for the jobs that run.

use std::collections::BTreeMap;

use ysched_common::{Job, JobSpec, Node, NodeAlloc, TierConfig};

use super::demand::{n_nodes, NodeDemand};
use super::fit::{fit_on_node, plural};
use super::node_view::NodeView;
use super::{PendingReason, Topologies};

/// The GPUs a job holding `allocs` counts against its tier's quotas: those of its
/// allocations, or for an `--exclusive` job every GPU of each of its nodes (`node_gpus` says
/// how many a node has; a node it does not know counts the allocation's).
pub(crate) fn gpus_charged(
    spec: &JobSpec,
    allocs: &[NodeAlloc],
    node_gpus: impl Fn(&str) -> Option<u32>,
) -> u32 {
    allocs.iter().fold(0u32, |sum, alloc| {
        let given = alloc.gpus.len() as u32;
        let held = if spec.exclusive {
            node_gpus(&alloc.node).map_or(given, |all| all.max(given))
        } else {
            given
        };
        sum.saturating_add(held)
    })
}

/// GPUs held per (tier, account) and per (tier, user), for the tiers with a quota: by running
/// and stopping jobs, and by the jobs a pass placed or let preempt (they will hold them).
#[derive(Debug, Default)]
pub(crate) struct Quotas<'a> {
    /// Some tier has a quota; without one, the pass looks nothing up.
    any: bool,
    accounts: BTreeMap<(&'a str, &'a str), u32>,
    users: BTreeMap<(&'a str, &'a str), u32>,
}

impl<'a> Quotas<'a> {
    pub(crate) fn new(tiers: &BTreeMap<String, TierConfig>) -> Self {
        Quotas {
            any: tiers
                .values()
                .any(|t| t.max_gpus_per_account > 0 || t.max_gpus_per_user > 0),
            ..Quotas::default()
        }
    }

    /// Whether some tier has a quota (else nothing is counted).
    pub(crate) fn any(&self) -> bool {
        self.any
    }

    /// Counts `gpus` held by `job` against its tier's quotas.
    pub(crate) fn charge(&mut self, job: &'a Job, tiers: &BTreeMap<String, TierConfig>, gpus: u32) {
        if !self.any || gpus == 0 {
            return;
        }
        let Some(tier) = tiers.get(&job.spec.tier) else {
            return;
        };
        let name = job.spec.tier.as_str();
        if tier.max_gpus_per_account > 0 {
            let held = self
                .accounts
                .entry((name, job.spec.account.as_str()))
                .or_default();
            *held = held.saturating_add(gpus);
        }
        if tier.max_gpus_per_user > 0 {
            let held = self
                .users
                .entry((name, job.owner.user.as_str()))
                .or_default();
            *held = held.saturating_add(gpus);
        }
    }

    /// `AccountLimit` or `UserLimit` when `job` holding `gpus` would take its account or its
    /// user over its tier's quota.
    pub(crate) fn exceeded(
        &self,
        job: &'a Job,
        tiers: &BTreeMap<String, TierConfig>,
        gpus: u32,
    ) -> Option<PendingReason> {
        if !self.any || gpus == 0 {
            return None;
        }
        let tier = tiers.get(&job.spec.tier)?;
        let over = |left: Option<u32>| left.is_some_and(|left| gpus > left);
        let (account, user) = self.left(job, tier);
        if over(account) {
            Some(PendingReason::AccountLimit)
        } else if over(user) {
            Some(PendingReason::UserLimit)
        } else {
            None
        }
    }

    /// The most GPUs `job` may still hold within its tier's quotas; `None`: no quota applies.
    pub(crate) fn room(&self, job: &'a Job, tiers: &BTreeMap<String, TierConfig>) -> Option<u32> {
        if !self.any {
            return None;
        }
        let tier = tiers.get(&job.spec.tier)?;
        match self.left(job, tier) {
            (Some(a), Some(u)) => Some(a.min(u)),
            (a, u) => a.or(u),
        }
    }

    /// What the account and the user of `job` may still hold in its tier (`None`: no quota).
    fn left(&self, job: &'a Job, tier: &TierConfig) -> (Option<u32>, Option<u32>) {
        let name = job.spec.tier.as_str();
        let left = |held: &BTreeMap<(&'a str, &'a str), u32>, who: &'a str, max: u32| {
            (max > 0).then(|| max.saturating_sub(held.get(&(name, who)).copied().unwrap_or(0)))
        };
        (
            left(&self.accounts, &job.spec.account, tier.max_gpus_per_account),
            left(&self.users, &job.owner.user, tier.max_gpus_per_user),
        )
    }
}

/// A tier's GPU quotas, as the submit-time and update checks read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierQuota<'t> {
    /// The tier's name, as the config spells it.
    pub tier: &'t str,
    /// `tiers.NAME.max_gpus_per_account` (0: none).
    pub per_account: u32,
    /// `tiers.NAME.max_gpus_per_user` (0: none).
    pub per_user: u32,
}

impl<'t> TierQuota<'t> {
    pub fn of(tier: &'t str, config: &TierConfig) -> Self {
        TierQuota {
            tier,
            per_account: config.max_gpus_per_account,
            per_user: config.max_gpus_per_user,
        }
    }
}

/// Submit-time check: could the job ever start within its tier's quotas, on the nodes known
/// now (as if empty)? An `--exclusive` job holds every GPU of each node it takes, so one whose
/// every possible node has more GPUs than its quota could never start; it is refused now
/// rather than left waiting forever. A job that is not exclusive holds what it asks for,
/// which `submit::validate` checks against the quota without the nodes.
pub fn check_quota_reachable(
    spec: &JobSpec,
    quota: &TierQuota<'_>,
    nodes: &BTreeMap<String, Node>,
    topologies: &mut Topologies,
) -> Result<(), String> {
    if !spec.exclusive || (quota.per_account == 0 && quota.per_user == 0) {
        return Ok(());
    }
    let Some(least) = least_whole_gpus(spec, nodes, topologies) else {
        // Too few nodes could take it at all: the satisfiability check says why.
        return Ok(());
    };
    for (limit, key, per) in [
        (quota.per_account, "max_gpus_per_account", "account"),
        (quota.per_user, "max_gpus_per_user", "user"),
    ] {
        if limit > 0 && least > limit {
            let tier = quota.tier;
            let wanted = n_nodes(spec);
            let nodes = if wanted == 1 {
                "a node".to_string()
            } else {
                format!("{wanted} nodes")
            };
            return Err(format!(
                "the job takes whole nodes (--exclusive) and would hold at least {} (every \
                 GPU of {nodes} that could take it), more than tier '{tier}' lets one {per} \
                 hold ({limit}, tiers.{tier}.{key})",
                plural(least, "GPU")
            ));
        }
    }
    Ok(())
}

/// The fewest GPUs an `--exclusive` job could hold: the GPUs of its `--nodes` smallest nodes
/// among those that could take it (empty); `None` when too few could.
fn least_whole_gpus(
    spec: &JobSpec,
    nodes: &BTreeMap<String, Node>,
    topologies: &mut Topologies,
) -> Option<u32> {
    let demand = NodeDemand::of(spec);
    let mut sizes: Vec<u32> = nodes
        .values()
        .filter(|node| fit_on_node(&NodeView::whole(node, topologies.of(node)), &demand).is_ok())
        .map(|node| node.gpus.len() as u32)
        .collect();
    let wanted = n_nodes(spec) as usize;
    if sizes.len() < wanted {
        return None;
    }
    sizes.sort_unstable();
    Some(
        sizes[..wanted]
            .iter()
            .fold(0u32, |sum, n| sum.saturating_add(*n)),
    )
}
