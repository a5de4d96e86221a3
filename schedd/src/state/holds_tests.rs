//! A user's hold and an administrator's, as pure events: who may release which, through
//! `yctl hold`/`release` and `yctl update`, and that a refused release changes nothing.

use super::targets::Resolved;
use super::update::JobUpdate;
use super::{JobEventKind, Records};
use crate::core::testkit::{alice, root, JobBuilder, T0};
use crate::error::{ApiError, ApiResult};
use ysched_common::{Caller, HeldBy, Job, JobId, JobState, JobTarget};

const NOW: i64 = T0 + 1_000;

fn none_finished(_: JobId) -> ApiResult<Option<Job>> {
    Ok(None)
}

fn named(rec: &Records, text: &str) -> Resolved {
    rec.resolve(&JobTarget::parse(text).unwrap(), &none_finished)
        .unwrap()
}

fn hold(on: bool) -> JobUpdate {
    JobUpdate {
        hold: Some(on),
        ..JobUpdate::default()
    }
}

/// alice's pending job 1, held by root: committed.
fn held_by_root() -> Records {
    let mut rec = Records::with_jobs(vec![JobBuilder::new(1).build()]);
    let fx = rec.hold(&root(), JobId(1), true, NOW).unwrap();
    rec.commit(fx);
    rec
}

const REFUSED: &str = "job 1 is held by an administrator: only an administrator may release it";

#[test]
fn an_administrators_hold_is_released_only_by_an_administrator() {
    let mut rec = held_by_root();
    let job = &rec.jobs[&JobId(1)];
    assert_eq!(job.state, JobState::Held);
    assert_eq!(job.held_by, HeldBy::Admin);
    assert_eq!(job.reason, "JobHeldAdmin");
    assert_eq!(job.hold(), Some(HeldBy::Admin));
    // alice's release is refused, changing nothing: an error has no effects.
    assert_eq!(
        rec.hold(&alice(), JobId(1), false, NOW).err(),
        Some(ApiError::Denied(REFUSED.into()))
    );
    let one = named(&rec, "1");
    assert_eq!(
        rec.hold_targets(&alice(), &one, false, NOW).err(),
        Some(ApiError::Denied(REFUSED.into()))
    );
    // Nor may she make it her own by holding again.
    assert_eq!(
        rec.hold(&alice(), JobId(1), true, NOW).err(),
        Some(ApiError::Conflict(
            "job 1 is already held by an administrator".into()
        ))
    );
    // root releases it.
    let fx = rec.hold(&root(), JobId(1), false, NOW).unwrap();
    assert_eq!(fx.jobs[0].state, JobState::Pending);
    assert_eq!(fx.jobs[0].held_by, HeldBy::User);
    assert_eq!(fx.jobs[0].reason, "");
    assert_eq!(fx.jobs[0].queued_at, Some(NOW));
    rec.commit(fx);
    assert_eq!(rec.jobs[&JobId(1)].hold(), None);
}

#[test]
fn a_users_hold_is_released_by_the_user_or_an_administrator_and_made_an_administrators() {
    let rec = Records::with_jobs(vec![JobBuilder::new(1).build()]);
    let fx = rec.hold(&alice(), JobId(1), true, NOW).unwrap();
    let job = &fx.jobs[0];
    assert_eq!(
        (job.held_by, job.reason.as_str()),
        (HeldBy::User, "JobHeldUser")
    );
    assert_eq!(fx.events[0].detail, "by alice");
    assert_eq!(fx.audit[0].detail, "");
    let mut held = rec.clone();
    held.commit(fx);
    for who in [alice(), root()] {
        let fx = held.hold(&who, JobId(1), false, NOW).unwrap();
        assert_eq!(fx.jobs[0].state, JobState::Pending, "{}", who.owner.user);
    }
    // An administrator holding it makes the hold theirs: alice may no longer release it.
    let fx = held.hold(&root(), JobId(1), true, NOW).unwrap();
    assert_eq!(fx.jobs[0].held_by, HeldBy::Admin);
    assert_eq!(fx.jobs[0].reason, "JobHeldAdmin");
    assert_eq!(fx.events[0].kind, JobEventKind::Held);
    assert_eq!(fx.events[0].detail, "by root (an administrator's hold)");
    assert_eq!(fx.audit[0].detail, "an administrator's hold");
    held.commit(fx);
    assert_eq!(
        held.hold(&alice(), JobId(1), false, NOW).err(),
        Some(ApiError::Denied(REFUSED.into()))
    );
}

#[test]
fn an_administrator_holding_their_own_job_holds_it_as_its_user() {
    let admin_alice = Caller {
        admin: true,
        ..alice()
    };
    let mut rec = Records::with_jobs(vec![JobBuilder::new(1).build()]);
    let fx = rec.hold(&admin_alice, JobId(1), true, NOW).unwrap();
    assert_eq!(fx.jobs[0].held_by, HeldBy::User);
    rec.commit(fx);
    // Holding it again changes nothing, as for any user.
    assert_eq!(
        rec.hold(&admin_alice, JobId(1), true, NOW).err(),
        Some(ApiError::Conflict("job 1 is already held".into()))
    );
    // Another administrator's hold of it is theirs; alice, an administrator, may release it.
    let fx = rec.hold(&root(), JobId(1), true, NOW).unwrap();
    rec.commit(fx);
    assert_eq!(rec.jobs[&JobId(1)].held_by, HeldBy::Admin);
    assert!(rec.hold(&admin_alice, JobId(1), false, NOW).is_ok());
}

#[test]
fn update_keeps_an_administrators_hold_too() {
    let rec = held_by_root();
    let (alice, root) = (alice(), root());
    let update =
        |caller, on| rec.update_job(caller, &named(&rec, "1"), &hold(on), &none_finished, NOW);
    assert_eq!(
        update(&alice, false).err(),
        Some(ApiError::Denied(REFUSED.into()))
    );
    assert_eq!(
        update(&alice, true).err(),
        Some(ApiError::Conflict(
            "job 1 is already held by an administrator".into()
        ))
    );
    // Other changes of her held job are hers to make; the hold stays an administrator's.
    let renamed = JobUpdate {
        name: Some("x".into()),
        ..JobUpdate::default()
    };
    let (fx, _) = rec
        .update_job(&alice, &named(&rec, "1"), &renamed, &none_finished, NOW)
        .unwrap();
    assert_eq!(fx.jobs[0].held_by, HeldBy::Admin);
    let (fx, changed) = update(&root, false).unwrap();
    assert_eq!(changed, ["released"]);
    assert_eq!(fx.jobs[0].state, JobState::Pending);
    // An administrator's hold through update, of a pending job and of a user's hold.
    let pending = Records::with_jobs(vec![JobBuilder::new(1).build()]);
    let (fx, changed) = pending
        .update_job(
            &root,
            &named(&pending, "1"),
            &hold(true),
            &none_finished,
            NOW,
        )
        .unwrap();
    assert_eq!(changed, ["held by an administrator"]);
    assert_eq!(fx.jobs[0].held_by, HeldBy::Admin);
    let mut user_held = pending.clone();
    let fx = user_held.hold(&alice, JobId(1), true, NOW).unwrap();
    user_held.commit(fx);
    let (fx, changed) = user_held
        .update_job(
            &root,
            &named(&user_held, "1"),
            &hold(true),
            &none_finished,
            NOW,
        )
        .unwrap();
    assert_eq!(changed, ["held by an administrator (was held by its user)"]);
    assert_eq!(fx.jobs[0].held_by, HeldBy::Admin);
}

#[test]
fn a_job_submitted_held_is_held_by_its_user_and_an_older_hold_reads_as_one() {
    let held = JobBuilder::new(1).held().build();
    assert_eq!(held.hold(), Some(HeldBy::User));
    assert_eq!(held.reason_shown(), "JobHeldUser");
    // An earlier version stored `"reason":"Held"` and no kind of hold.
    let mut json = serde_json::to_value(&held).unwrap();
    assert!(json.get("held_by").is_none(), "a user's hold is left out");
    json["reason"] = "Held".into();
    let old: Job = serde_json::from_value(json).unwrap();
    assert_eq!(old.hold(), Some(HeldBy::User));
    assert_eq!(old.reason_shown(), "JobHeldUser");
    // An administrator's hold is written, and read back.
    let admin = JobBuilder::new(2).held_by_admin().build();
    let json = serde_json::to_value(&admin).unwrap();
    assert_eq!(json["held_by"], "admin");
    let back: Job = serde_json::from_value(json).unwrap();
    assert_eq!(back.reason_shown(), "JobHeldAdmin");
}
