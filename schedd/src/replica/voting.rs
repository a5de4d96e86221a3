//! Whether this replica may vote. A replica's vote is worth something only while its log
//! holds everything it acknowledged: one whose store was wiped (a lost disk) and voted at once
//! could elect a replica that lacks changes a majority acknowledged, and those would be lost.
//! So a replica whose store is empty at start does not vote until it knows better:
//!
//! - the cluster is new (a majority of `scheduler.replicas` answer, none with a log): it
//!   votes, there is nothing to lose ([`VoteGuard::formed`]);
//! - the cluster exists: if it is still a voter there, schedd refuses to start (an
//!   administrator removes it first); otherwise it joins: it takes the log as a learner and
//!   votes only once a membership entry written after it joined makes it a voter
//!   (`yctl cluster promote`, once it has caught up: [`VoteGuard::joined`] and
//!   [`VoteGuard::membership_applied`]). The joining is durable, so that a restart in the
//!   middle does not make it a voter.
//!
//! A replica whose store holds a log votes as before. A store restored from an older copy
//! cannot be told apart from a current one: the admin guide's restore procedure removes and
//! adds the replica as for a lost disk.

use crate::store::Store;
use std::sync::{Arc, Mutex, PoisonError};

/// `raft_meta` key: the log index the cluster had reached when this replica joined with an
/// empty store (u64 big-endian); present while it does not vote yet.
const JOINING_AFTER: &[u8] = b"joining_after";
/// `raft_meta` key of this replica's vote (see `log_store`).
const VOTE: &[u8] = b"vote";

/// Where a replica stands (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Voting {
    /// It votes.
    Voter,
    /// Its store was empty at start, and it does not know yet whether the cluster is new.
    Undecided,
    /// It joined an existing cluster when its log had reached `after`: it votes once a
    /// membership entry after that makes it a voter.
    Joining { after: u64 },
}

/// This replica's [`Voting`], shared by its Raft service and the task that decides it.
#[derive(Clone)]
pub struct VoteGuard {
    state: Arc<Mutex<Voting>>,
    store: Store,
}

impl VoteGuard {
    /// The guard of the replica over `store`, as its store says at start.
    pub fn open(store: &Store) -> crate::store::Result<VoteGuard> {
        let state = match store.replica_value(JOINING_AFTER)? {
            Some(bytes) => Voting::Joining {
                after: <[u8; 8]>::try_from(bytes.as_slice()).map_or(0, u64::from_be_bytes),
            },
            None if store_is_empty(store)? => Voting::Undecided,
            None => Voting::Voter,
        };
        Ok(VoteGuard {
            state: Arc::new(Mutex::new(state)),
            store: store.clone(),
        })
    }

    pub fn state(&self) -> Voting {
        *self.lock()
    }

    /// Why this replica refuses a vote now; `None`: it votes.
    pub fn refusal(&self, place: u64) -> Option<String> {
        match self.state() {
            Voting::Voter => None,
            Voting::Undecided => Some(format!(
                "replica {place} does not vote: its store was empty at start, and it has not \
                 yet heard from a majority of the replicas whether the cluster is new"
            )),
            Voting::Joining { after } => Some(format!(
                "replica {place} does not vote: it joined with an empty store after log index \
                 {after}, and votes once promoted (`yctl cluster promote {place}`)"
            )),
        }
    }

    /// The cluster is new: this replica votes from now on.
    pub fn formed(&self) {
        let mut state = self.lock();
        if *state == Voting::Undecided {
            *state = Voting::Voter;
        }
    }

    /// This replica joins an existing cluster whose log had reached `after`: durable before
    /// anything else is.
    pub async fn joined(&self, after: u64) -> crate::store::Result<()> {
        self.store
            .set_replica_value(JOINING_AFTER, &after.to_be_bytes())?;
        self.store.flush().await?;
        *self.lock() = Voting::Joining { after };
        Ok(())
    }

    /// A membership entry at log index `index` applied (or received), making this replica a
    /// voter or not: a joining one votes from then on if the entry came after it joined.
    pub async fn membership_applied(&self, index: u64, voter: bool) -> crate::store::Result<()> {
        let Voting::Joining { after } = self.state() else {
            return Ok(());
        };
        if !voter || index <= after {
            return Ok(());
        }
        self.store.remove_replica_value(JOINING_AFTER)?;
        self.store.flush().await?;
        *self.lock() = Voting::Voter;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Voting> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps `guard` up to date with the membership replica `id`'s Raft knows (see
/// [`VoteGuard::membership_applied`]), until its Raft stops.
pub async fn follow_membership(raft: openraft::Raft<super::TypeConfig>, id: u64, guard: VoteGuard) {
    let mut metrics = raft.metrics();
    loop {
        let (index, voter) = {
            let m = metrics.borrow_and_update();
            let stored = &m.membership_config;
            (
                stored.log_id().map_or(0, |l| l.index),
                stored.membership().voter_ids().any(|v| v == id),
            )
        };
        if let Err(e) = guard.membership_applied(index, voter).await {
            tracing::error!("cannot record that replica {id} votes again: {e}");
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Whether the replica's store has never held anything: no log entry, no vote, no applied
/// state (a log purged after a snapshot still leaves the snapshot's mark).
fn store_is_empty(store: &Store) -> crate::store::Result<bool> {
    Ok(store.log_last()?.is_none()
        && store.replica_value(VOTE)?.is_none()
        && store.state_mark(crate::store::APPLIED_MARK)?.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_empty_store_votes_only_once_formed_or_promoted_after_it_joined() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let guard = VoteGuard::open(&store).unwrap();
        assert_eq!(guard.state(), Voting::Undecided);
        assert!(guard.refusal(2).unwrap().contains("empty at start"));
        guard.joined(40).await.unwrap();
        // A restart in the middle keeps it joining.
        let again = VoteGuard::open(&store).unwrap();
        assert_eq!(again.state(), Voting::Joining { after: 40 });
        // Old memberships (from before it joined) do not make it a voter; nor a learner's.
        again.membership_applied(12, true).await.unwrap();
        again.membership_applied(55, false).await.unwrap();
        assert!(again.refusal(2).unwrap().contains("once promoted"));
        again.membership_applied(56, true).await.unwrap();
        assert_eq!(again.state(), Voting::Voter);
        assert_eq!(again.refusal(2), None);
        // By then its store holds the log (here: a vote) and no mark of joining.
        store.set_replica_value(VOTE, b"{}").unwrap();
        assert_eq!(VoteGuard::open(&store).unwrap().state(), Voting::Voter);
        // `formed` only decides an undecided one.
        again.formed();
        assert_eq!(again.state(), Voting::Voter);
        // A store that holds a vote votes at once.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.set_replica_value(VOTE, b"{}").unwrap();
        assert_eq!(VoteGuard::open(&store).unwrap().state(), Voting::Voter);
        let dir = tempfile::tempdir().unwrap();
        let fresh = VoteGuard::open(&Store::open(dir.path()).unwrap()).unwrap();
        fresh.formed();
        assert_eq!(fresh.state(), Voting::Voter);
    }
}
