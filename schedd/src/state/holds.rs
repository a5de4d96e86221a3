//! Holds and releases, as Slurm tells them apart: a user's hold (`JobHeldUser`), which the
//! job's owner or an administrator may release, and an administrator's (`JobHeldAdmin`),
//! which only an administrator may. Which hold a caller sets, whether they may lift one, and
//! what either changes in a job: `yctl hold`/`release` and `yctl update --hold`/`--release`
//! both ask [`step`], so they cannot disagree.

use crate::error::ApiError;
use ysched_common::time::Millis;
use ysched_common::{Caller, HeldBy, Job, JobState};

/// What holding (or releasing) one job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Hold a PENDING job, or make a user's hold an administrator's.
    Hold(HeldBy),
    /// Release a HELD job.
    Release,
}

/// Why holding (or releasing) one job changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoStep {
    /// Held already, by this kind of hold (one the caller may not raise).
    AlreadyHeld(HeldBy),
    /// Not held: nothing to release.
    NotHeld,
    /// Held by an administrator, and the caller is not one: refused.
    AdminHold,
    /// Neither PENDING nor HELD: only a queued job is held or released.
    Elsewhere(JobState),
}

/// The hold `caller` sets on `job`: an administrator's on another's job, else a user's (an
/// administrator holding their own job holds it as its user, as `ysub --hold` does).
pub fn hold_of(caller: &Caller, job: &Job) -> HeldBy {
    if caller.is_admin() && caller.owner.uid != job.owner.uid {
        HeldBy::Admin
    } else {
        HeldBy::User
    }
}

/// What holding (`hold`) or releasing `job` does for `caller` (who may act on it: the owner
/// check is the caller's). A user may neither release an administrator's hold nor, by holding
/// again, make it their own; an administrator holding another's job that its user holds
/// makes the hold theirs.
pub fn step(job: &Job, caller: &Caller, hold: bool) -> Result<Step, NoStep> {
    let by = hold_of(caller, job);
    match (hold, job.state) {
        (true, JobState::Pending) => Ok(Step::Hold(by)),
        (true, JobState::Held) if job.held_by == HeldBy::User && by == HeldBy::Admin => {
            Ok(Step::Hold(HeldBy::Admin))
        }
        (true, JobState::Held) => Err(NoStep::AlreadyHeld(job.held_by)),
        (false, JobState::Held) if job.held_by == HeldBy::Admin && !caller.is_admin() => {
            Err(NoStep::AdminHold)
        }
        (false, JobState::Held) => Ok(Step::Release),
        (false, JobState::Pending) => Err(NoStep::NotHeld),
        (_, state) => Err(NoStep::Elsewhere(state)),
    }
}

/// `job` as `step` leaves it.
pub fn apply(job: &mut Job, step: Step, now: Millis) {
    match step {
        Step::Hold(by) => {
            job.state = JobState::Held;
            job.held_by = by;
            job.reason = by.reason().into();
            // A held job is not waiting to run: its wait begins when it is released.
            job.queued_at = None;
        }
        Step::Release => {
            job.state = JobState::Pending;
            job.held_by = HeldBy::User;
            job.reason = String::new();
            job.queued_at = Some(now);
        }
    }
}

/// The history entry's detail: `by alice`, or `by root (an administrator's hold)`.
pub fn event_detail(caller: &Caller, step: Step) -> String {
    match step {
        Step::Hold(HeldBy::Admin) => {
            format!("by {} (an administrator's hold)", caller.owner.user)
        }
        _ => format!("by {}", caller.owner.user),
    }
}

/// The refusal of a user's release of an administrator's hold on job `shown` (`12`, `12_7`).
pub fn admin_hold_refused(shown: &str) -> ApiError {
    ApiError::Denied(format!(
        "job {shown} is held by an administrator: only an administrator may release it"
    ))
}

/// The refusal of one job's hold or release, as the single-job forms say it.
pub fn refusal(job: &Job, hold: bool, why: NoStep) -> ApiError {
    let shown = job.display_id();
    match why {
        NoStep::AlreadyHeld(HeldBy::Admin) => {
            ApiError::Conflict(format!("job {shown} is already held by an administrator"))
        }
        NoStep::AlreadyHeld(HeldBy::User) => {
            ApiError::Conflict(format!("job {shown} is already held"))
        }
        NoStep::NotHeld => ApiError::Conflict(format!("job {shown} is not held")),
        NoStep::AdminHold => admin_hold_refused(&shown),
        NoStep::Elsewhere(state) => {
            let (from, verb) = if hold {
                (JobState::Pending, "held")
            } else {
                (JobState::Held, "released")
            };
            ApiError::Conflict(format!(
                "job {shown} is {state}: only {from} jobs can be {verb}"
            ))
        }
    }
}
