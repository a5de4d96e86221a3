//! A replicas' leader that loses the lead steps down rather than exit: its `Cluster` retires
//! (its loops end, agents' sessions close, every change and every waiting request is refused
//! with why) and the replica goes on as a follower; if it leads again, a new `Cluster` is
//! loaded from what was committed. Nothing a retired cluster held in memory and had not made
//! durable is acted on: commands to agents leave only after a flush, which it no longer has.

use super::{lock, Cluster};
use crate::error::{ApiError, ApiResult};
use std::future::Future;

impl Cluster {
    /// Steps down (`why`: what the log and the refused requests say): from now on this
    /// cluster changes nothing and sends nothing, its loops and watches end, and every agent
    /// session closes, so that the agents find the leader.
    pub fn retire(&self, why: String) {
        if self.retired.is_cancelled() {
            return;
        }
        tracing::warn!("stepping down: {why}");
        // Waiting requests and those still to come are refused with why.
        self.durability.fail(why);
        self.retired.cancel();
        let mut st = lock(&self.state);
        st.sessions.close_all();
        st.outbox.clear();
        st.mails.clear();
    }

    /// Resolves once this cluster retired: when it stepped down, or when its replication
    /// failed (which retires it from within).
    pub fn retirement(&self) -> impl Future<Output = ()> + Send + 'static {
        self.retired.clone().cancelled_owned()
    }

    /// Whether this cluster retired.
    pub fn is_retired(&self) -> bool {
        self.retired.is_cancelled()
    }

    /// `UNAVAILABLE` (with why) once retired.
    pub(super) fn refuse_if_retired(&self) -> ApiResult<()> {
        if !self.retired.is_cancelled() {
            return Ok(());
        }
        Err(ApiError::Unavailable(
            self.durability.failure().unwrap_or_else(|| {
                "this schedd no longer leads: ask again (the tools reach the leader)".into()
            }),
        ))
    }

    /// Runs `work` (a loop of this cluster's) on a task of its own until it ends or the
    /// cluster retires.
    pub(super) fn spawn_until_retired(&self, work: impl Future<Output = ()> + Send + 'static) {
        let retired = self.retired.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = retired.cancelled() => {}
                () = work => {}
            }
        });
    }
}
