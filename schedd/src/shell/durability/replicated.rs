//! A replicas' leader's durability: each change proposed as one entry of the Raft log at the
//! next flush, durable once a majority has it (and applied to every replica's store, this
//! one's too, once committed). A leader that cannot replicate acknowledges nothing more and
//! steps down (see `shell::retire`): it goes on as a follower, and leads again, if elected,
//! from what was committed.

use super::{Durability, Failure, Flushing, Unwritten};
use crate::error::ApiResult;
use crate::replica::Replica;
use crate::store::Batch;
use std::sync::{Mutex, OnceLock, PoisonError};
use tokio_util::sync::CancellationToken;

/// How long a leader waits for a majority to take its changes before it gives up the lead:
/// clients then get "no quorum" until one is back.
pub(in crate::shell) const REPLICATION_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(5);

/// A replicas' leader's durability.
pub(in crate::shell) struct Replicated {
    replica: Replica,
    /// The changes taken since the last flush, in the order they were made (under the state
    /// lock), each to be replicated as one entry.
    proposals: Mutex<Vec<Batch>>,
    /// Set once replication failed: why.
    failure: OnceLock<String>,
    /// Cancelled once replication failed: the leader steps down.
    retired: CancellationToken,
}

impl Replicated {
    /// The durability of the leader of `replica`, which steps down by `retired`.
    pub(in crate::shell) fn new(replica: Replica, retired: CancellationToken) -> Replicated {
        Replicated {
            replica,
            proposals: Mutex::default(),
            failure: OnceLock::new(),
            retired,
        }
    }

    fn no_quorum(what: &str) -> String {
        format!(
            "no quorum: a majority of scheduler.replicas did not take {what} within {} s: it \
             was not acknowledged, and takes effect only if this replica leads again once a \
             majority is back (check with yq before you repeat it)",
            REPLICATION_TIMEOUT.as_secs()
        )
    }
}

impl Durability for Replicated {
    fn take(&self, batch: Batch, _unwritten: &mut Unwritten) -> ApiResult<()> {
        // Replicated at the next flush, in this order; every replica (this one too) writes
        // it to its store when it is committed.
        self.proposals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(batch);
        Ok(())
    }

    fn write_held(&self, unwritten: &mut Unwritten) -> ApiResult<()> {
        // Nothing is held here (every change is proposed as it is taken): the submit loop's
        // round ends.
        unwritten.round = None;
        Ok(())
    }

    fn flush(&self) -> Flushing<'_> {
        let proposals = std::mem::take(
            &mut *self
                .proposals
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        Box::pin(async move {
            if let Some(why) = self.failure.get() {
                return Err(why.clone());
            }
            // Durable once a majority of the replicas have the changes in their logs; the
            // answer comes once this replica applied them to its store too.
            let why = match tokio::time::timeout(
                REPLICATION_TIMEOUT,
                self.replica.replicate_all(proposals),
            )
            .await
            {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => e.to_string(),
                Err(_) => Self::no_quorum("the change"),
            };
            self.fail(why.clone());
            Err(why)
        })
    }

    fn write_alone(&self, batch: Batch, runtime: &tokio::runtime::Handle) -> Result<(), Failure> {
        if let Some(why) = self.failure.get() {
            return Err(Failure::Lost(why.clone()));
        }
        // The timer is made inside the runtime's context.
        let replicated = runtime.block_on(async {
            tokio::time::timeout(REPLICATION_TIMEOUT, self.replica.replicate(batch)).await
        });
        // The caller, on the runtime, makes it fail for good (`fail` spawns the exit).
        match replicated {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Failure::Lost(e.to_string())),
            Err(_) => Err(Failure::Lost(Self::no_quorum("a removal"))),
        }
    }

    fn failure(&self) -> Option<String> {
        self.failure.get().cloned()
    }

    /// A leader that could not replicate (it lost the lead, or a majority of the replicas
    /// did not answer in time) holds changes in memory that may never be durable: from now
    /// on it acknowledges nothing (each waiting request is told why), and it steps down,
    /// leaving those changes behind; if it leads again it starts from what was committed.
    fn fail(&self, why: String) {
        if self.failure.set(why).is_ok() {
            self.retired.cancel();
        }
    }

    fn store_follows_flush(&self) -> bool {
        true
    }

    fn may_renew_fences(&self) -> bool {
        self.replica.has_quorum()
    }

    fn replica(&self) -> Option<&Replica> {
        Some(&self.replica)
    }
}
