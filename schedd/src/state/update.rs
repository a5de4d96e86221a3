//! `yctl update` (Slurm's `scontrol update job`): a pending or held job's tier, time limit,
//! name, dependency or held state changed, as one event. Everything is checked first (a
//! refusal changes nothing); the job's history gets an `updated` entry naming the changes,
//! the audit log an `update` record, and the scheduler looks again.

use super::client_events::{audit_record, check_owner, FinishedLookup};
use super::dependencies::TargetStates;
use super::history::JobEventKind;
use super::holds;
use super::targets::Resolved;
use super::{Effects, Records};
use crate::error::{ApiError, ApiResult};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::array::fold_tasks;
use ysched_common::time::{format_elapsed, Millis};
use ysched_common::{Caller, Dependency, HeldBy, Job, JobId, JobSpec, JobState};

/// A tier a job moves to, with what the update needs of its config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierChange {
    /// As the config spells it.
    pub name: String,
    pub value: i64,
    /// `tiers.NAME.max_gpus_per_account` and `max_gpus_per_user` (0: none): a job larger
    /// than either could never start there, and is refused as at submit.
    pub max_gpus_per_account: u32,
    pub max_gpus_per_user: u32,
}

/// The changes of one update, checked against the config ([`crate::update::validate`]) and
/// with the dependency resolved; each `None` when not asked for.
#[derive(Debug, Clone, Default)]
pub struct JobUpdate {
    pub tier: Option<TierChange>,
    /// `Some(None)`: no limit.
    pub time_limit_secs: Option<Option<u64>>,
    pub name: Option<String>,
    /// `Some(None)`: no dependency any more; else the dependency with its targets' states.
    pub dependency: Option<Option<(Dependency, TargetStates)>>,
    /// `Some(true)`: hold; `Some(false)`: release.
    pub hold: Option<bool>,
}

/// A time limit as `yctl show job` and `-t` write it (`UNLIMITED` for none).
fn limit_text(limit: Option<u64>) -> String {
    match limit {
        Some(secs) => format_elapsed(secs),
        None => "UNLIMITED".into(),
    }
}

impl Records {
    /// Applies `update` to what `target` names: one job, which must be PENDING or HELD, or
    /// tasks of an array, of which the PENDING and HELD ones change (the others are passed
    /// over; refused when none is). The owner or an administrator only. A time limit may
    /// only be lowered but by an administrator (as in Slurm); a hold of a held job and a
    /// release of one not held are refused for one job, passed over for an array's tasks. A
    /// dependency that would make a job wait for itself is refused. Returns the effects and
    /// what changed, as the reply says it (of the first job changed).
    pub fn update_job(
        &self,
        caller: &Caller,
        target: &Resolved,
        update: &JobUpdate,
        finished: FinishedLookup<'_>,
        now: Millis,
    ) -> ApiResult<(Effects, Vec<String>)> {
        let shown = ysched_common::text::excerpt(&target.target.to_string(), 60);
        let mut jobs: Vec<&Job> = Vec::new();
        for id in &target.ids {
            if let Some(job) = self.jobs.get(id) {
                check_owner(job, caller)?;
                jobs.push(job);
            }
        }
        let single = target.array.is_none();
        if single {
            let Some(job) = jobs.first() else {
                let id = target.ids.first().copied().unwrap_or(target.target.id);
                return Err(match finished(id)? {
                    Some(j) => ApiError::Conflict(format!(
                        "job {} already finished ({}): only a pending job can be updated",
                        j.display_id(),
                        j.state
                    )),
                    None => ApiError::NotFound(format!("invalid job id {id}: no such job")),
                });
            };
            if !matches!(job.state, JobState::Pending | JobState::Held) {
                return Err(ApiError::Conflict(format!(
                    "job {} is {}: only a pending job can be updated",
                    job.display_id(),
                    job.state
                )));
            }
            if let Some(hold) = update.hold {
                holds::step(job, caller, hold).map_err(|why| holds::refusal(job, hold, why))?;
            }
        }
        jobs.retain(|j| matches!(j.state, JobState::Pending | JobState::Held));
        if jobs.is_empty() {
            return Err(ApiError::Conflict(format!(
                "no task of {shown} is pending: only a pending job can be updated"
            )));
        }
        // Each job as checked: a non-administrator's time limit only lower, a tier's quota,
        // an administrator's hold released only by an administrator.
        for job in &jobs {
            self.check_update(caller, job, update)?;
            if update.hold == Some(false)
                && holds::step(job, caller, false) == Err(holds::NoStep::AdminHold)
            {
                return Err(holds::admin_hold_refused(&job.display_id()));
            }
        }
        if let Some(tier) = &update.tier {
            self.check_whole_nodes_quota(&jobs, tier)?;
            let moving = jobs.iter().filter(|j| j.spec.tier != tier.name).count() as u64;
            self.check_tier_room(caller, &jobs[0].owner.uid, &tier.name, moving)?;
        }
        if let Some(Some((dependency, _))) = &update.dependency {
            let updated: BTreeSet<JobId> = jobs.iter().map(|j| j.id).collect();
            self.check_no_cycle(dependency, &updated)?;
        }
        let by = &caller.owner.user;
        let mut fx = Effects {
            wake: true,
            ..Effects::default()
        };
        // The tasks of an array share their spec: each shared spec changed once, and shared
        // again by the tasks that shared it.
        let mut specs: BTreeMap<*const JobSpec, Arc<JobSpec>> = BTreeMap::new();
        let mut first_changes: Option<Vec<String>> = None;
        let mut tasks = Vec::new();
        for job in &jobs {
            // A hold the caller may not change (another's, or none to release) is passed over.
            let hold_step = update
                .hold
                .and_then(|hold| holds::step(job, caller, hold).ok());
            let changes = describe(job, update, hold_step);
            let (mut spec_changed, mut new) = (false, (*job).clone());
            if update.tier.is_some()
                || update.time_limit_secs.is_some()
                || update.name.is_some()
                || update.dependency.is_some()
            {
                let spec = specs
                    .entry(Arc::as_ptr(&job.spec))
                    .or_insert_with(|| Arc::new(changed_spec(&job.spec, update)));
                spec_changed = **spec != *job.spec;
                new.spec = Arc::clone(spec);
            }
            if let Some(tier) = &update.tier {
                new.tier_value = tier.value;
            }
            if let Some(step) = hold_step {
                holds::apply(&mut new, step, now);
            }
            let hold_changes = hold_step.is_some();
            if !spec_changed && !hold_changes {
                continue;
            }
            fx.event(
                job.id,
                now,
                JobEventKind::Updated,
                format!("by {by}: {}", changes.join(", ")),
            );
            tasks.extend(job.array.map(|a| a.task));
            first_changes.get_or_insert(changes);
            fx.put_job(new);
        }
        let Some(changes) = first_changes else {
            return Ok((Effects::default(), Vec::new()));
        };
        let (audit_job, detail) = match target.array {
            Some(array_id) => {
                tasks.sort_unstable();
                (
                    array_id,
                    format!(
                        "{} tasks of array {array_id} ({array_id}_[{}]): {}",
                        tasks.len(),
                        fold_tasks(&tasks),
                        changes.join(", ")
                    ),
                )
            }
            None => (jobs[0].id, changes.join(", ")),
        };
        fx.audit(audit_record(caller, "update", Some(audit_job), detail, now));
        if let Some(Some((_, states))) = &update.dependency {
            fx.dependency_targets = states.clone();
        }
        Ok((fx, changes))
    }

    /// What the update may not do to `job` for `caller`: raise its time limit (but an
    /// administrator), move it to a tier whose per-account or per-user GPU quota it exceeds.
    fn check_update(&self, caller: &Caller, job: &Job, update: &JobUpdate) -> ApiResult<()> {
        let id = job.display_id();
        if let Some(limit) = update.time_limit_secs {
            let now = job.spec.time_limit_secs;
            let raises = match (limit, now) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(new), Some(old)) => new > old,
            };
            if raises && !caller.is_admin() {
                return Err(ApiError::Denied(format!(
                    "job {id}'s time limit is {}: only an administrator may raise it (to {}); \
                     you may lower it",
                    limit_text(now),
                    limit_text(limit)
                )));
            }
        }
        if let Some(tier) = &update.tier {
            for (limit, key, per) in [
                (tier.max_gpus_per_account, "max_gpus_per_account", "account"),
                (tier.max_gpus_per_user, "max_gpus_per_user", "user"),
            ] {
                if limit > 0 && job.spec.gpus > limit {
                    return Err(ApiError::Invalid(format!(
                        "job {id} asks for {} GPUs, more than tier '{}' lets one {per} hold \
                         ({limit}, tiers.{}.{key})",
                        job.spec.gpus, tier.name, tier.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// Refuses moving an `--exclusive` job to a tier whose quota is smaller than every node
    /// it could take (it would hold them whole: see `core::check_quota_reachable`). Once per
    /// spec: an array's tasks share theirs.
    fn check_whole_nodes_quota(&self, jobs: &[&Job], tier: &TierChange) -> ApiResult<()> {
        let quota = crate::core::TierQuota {
            tier: &tier.name,
            per_account: tier.max_gpus_per_account,
            per_user: tier.max_gpus_per_user,
        };
        let mut topologies = crate::core::Topologies::default();
        let mut checked = BTreeSet::new();
        for job in jobs.iter().filter(|j| checked.insert(Arc::as_ptr(&j.spec))) {
            crate::core::check_quota_reachable(&job.spec, &quota, &self.nodes, &mut topologies)
                .map_err(|why| ApiError::Invalid(format!("job {}: {why}", job.display_id())))?;
        }
        Ok(())
    }

    /// Refuses moving `count` jobs of user `uid` to `tier` past the tier's `max_jobs_per_user`
    /// (administrators are not limited).
    fn check_tier_room(&self, caller: &Caller, uid: &u32, tier: &str, count: u64) -> ApiResult<()> {
        if caller.is_admin() || count == 0 {
            return Ok(());
        }
        if let Some(&limit) = self.limits.jobs_per_user_in_tier.get(tier) {
            let in_tier = self
                .active_jobs_of(*uid)
                .per_tier
                .get(tier)
                .copied()
                .unwrap_or(0);
            if in_tier.saturating_add(count) > limit {
                return Err(ApiError::Invalid(format!(
                    "user {} has {in_tier} active jobs in tier '{tier}'; moving {count} more \
                     there would exceed tiers.{tier}.max_jobs_per_user = {limit}",
                    caller.owner.user
                )));
            }
        }
        Ok(())
    }

    /// Refuses a dependency through which a job of `updated` would wait for itself: a target
    /// that is one of them, or an active job whose own dependencies lead back to one. Each
    /// job and each shared spec is looked at once.
    fn check_no_cycle(&self, dependency: &Dependency, updated: &BTreeSet<JobId>) -> ApiResult<()> {
        let text = ysched_common::text::excerpt(&dependency.text, 60);
        let mut seen: BTreeSet<JobId> = BTreeSet::new();
        let mut seen_specs: BTreeSet<*const JobSpec> = BTreeSet::new();
        // Each job to look at, with the target of the new dependency it was reached from.
        let mut stack: Vec<(JobId, JobId)> = dependency.targets().map(|id| (id, id)).collect();
        while let Some((id, via)) = stack.pop() {
            if updated.contains(&id) {
                let through = if id == via {
                    String::new()
                } else {
                    format!(" (through job {})", self.shown(via))
                };
                return Err(ApiError::Invalid(format!(
                    "--dependency '{text}': job {} would wait for itself{through}",
                    self.shown(id)
                )));
            }
            if !seen.insert(id) {
                continue;
            }
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            if let Some(dep) = &job.spec.dependency {
                if seen_specs.insert(Arc::as_ptr(&job.spec)) {
                    stack.extend(dep.targets().map(|next| (next, via)));
                }
            }
        }
        Ok(())
    }

    /// A job as users name it (`12_7` for a task), or its id when not active.
    fn shown(&self, id: JobId) -> String {
        self.jobs
            .get(&id)
            .map_or_else(|| id.0.to_string(), |job| job.display_id())
    }
}

/// `spec` with the update's changes to it.
fn changed_spec(spec: &JobSpec, update: &JobUpdate) -> JobSpec {
    let mut spec = spec.clone();
    if let Some(tier) = &update.tier {
        spec.tier = tier.name.clone();
    }
    if let Some(limit) = update.time_limit_secs {
        spec.time_limit_secs = limit;
    }
    if let Some(name) = &update.name {
        spec.name = name.clone();
    }
    if let Some(dependency) = &update.dependency {
        spec.dependency = dependency.as_ref().map(|(d, _)| d.clone());
    }
    spec
}

/// What the update changes of `job`, as its history and the reply say it: `tier high (was
/// low)`, `time limit 1:00:00 (was 2:00:00)`, `name x (was y)`, `dependency afterok:12
/// (was none)`, `held`, `released`. Changes to what it already is are left out.
fn describe(job: &Job, update: &JobUpdate, hold: Option<holds::Step>) -> Vec<String> {
    let spec = &job.spec;
    let mut out = Vec::new();
    if let Some(tier) = update.tier.as_ref().filter(|t| t.name != spec.tier) {
        out.push(format!("tier {} (was {})", tier.name, spec.tier));
    }
    if let Some(limit) = update
        .time_limit_secs
        .filter(|l| *l != spec.time_limit_secs)
    {
        out.push(format!(
            "time limit {} (was {})",
            limit_text(limit),
            limit_text(spec.time_limit_secs)
        ));
    }
    if let Some(name) = update.name.as_ref().filter(|n| **n != spec.name) {
        out.push(format!("name {name} (was {})", spec.name));
    }
    if let Some(dependency) = &update.dependency {
        let text =
            |d: Option<&Dependency>| d.map_or_else(|| "none".to_string(), |d| d.text.clone());
        let new = text(dependency.as_ref().map(|(d, _)| d));
        let old = text(spec.dependency.as_ref());
        if new != old || dependency.as_ref().map(|(d, _)| d) != spec.dependency.as_ref() {
            out.push(format!("dependency {new} (was {old})"));
        }
    }
    match (hold, job.state) {
        (Some(holds::Step::Hold(HeldBy::Admin)), JobState::Held) => {
            out.push("held by an administrator (was held by its user)".into())
        }
        (Some(holds::Step::Hold(HeldBy::Admin)), _) => out.push("held by an administrator".into()),
        (Some(holds::Step::Hold(HeldBy::User)), _) => out.push("held".into()),
        (Some(holds::Step::Release), _) => out.push("released".into()),
        (None, _) => {}
    }
    out
}
