//! Where a change becomes durable, chosen once at start: one `schedd`'s store (each change
//! written at once or held for the next write, then flushed: [`LocalStore`]), or the
//! replicas' Raft log (each change proposed, then committed by a majority and applied to
//! every replica's store: [`Replicated`]). The shell runs events and flushes the same way
//! over either; nothing is acknowledged, launched or stopped before [`Durability::flush`]
//! covered it.

mod local;
mod replicated;

pub(super) use local::{LocalStore, StoreWatch};
pub(super) use replicated::Replicated;

use crate::error::ApiResult;
use crate::store::{self, Batch};
use std::future::Future;
use std::pin::Pin;

/// Changes memory took before the store: always within one hold of the lock, or until the
/// next write or flush, and only for changes nothing answers (one `schedd` only). sled 0.34
/// writes its log buffer out, and wakes every one of its IO threads, at each transaction,
/// whatever its size: most of schedd's CPU per job went there while each submit and each
/// agent's start report was a transaction of its own. Every write first writes what is held
/// here (in one transaction with it), and so does the flush before it flushes: a change held
/// here is as durable as one written and not yet flushed, and nothing is acknowledged,
/// launched or stopped before the flush that covers it. Its room was checked before memory
/// took it (a refusal still changes nothing); sled failing a write ends schedd (see
/// [`store_failed`]), the store the truth again at the restart.
#[derive(Default)]
pub(super) struct Unwritten {
    /// Changes that need no flush of their own (agents' start reports): written with the next
    /// write or flush, which they ask for.
    pub(super) held: Vec<Batch>,
    /// The event running now may be held (set around it).
    pub(super) hold: bool,
    /// While the submit loop runs a round: its events' changes, written together at its end,
    /// before the lock is let go.
    pub(super) round: Option<Vec<Batch>>,
}

/// Why a change made durable on its own was not.
#[derive(Debug)]
pub(super) enum Failure {
    /// The store refused it and changed nothing (a full disk): it may be tried again later.
    Refused(store::Error),
    /// Durability failed for good (the replicas' quorum is lost): this `schedd` acknowledges
    /// nothing more (one `schedd` exits; a replicas' leader steps down).
    Lost(String),
}

/// A flush that resolves once everything taken before it is durable.
pub(super) type Flushing<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// Where a change becomes durable (see the module docs).
pub(super) trait Durability: Send + Sync {
    /// Takes an event's change (its room checked): written now with what is held, or held,
    /// or kept with the submit loop's round (one `schedd`); proposed at the next flush
    /// (replicas).
    fn take(&self, batch: Batch, unwritten: &mut Unwritten) -> ApiResult<()>;

    /// Writes what is held and the round's changes, before a flush or at a round's end.
    fn write_held(&self, unwritten: &mut Unwritten) -> ApiResult<()>;

    /// Makes everything taken so far durable; `Err` says why not, and then this `schedd`
    /// acknowledges nothing more (see [`Durability::failure`]).
    fn flush(&self) -> Flushing<'_>;

    /// Makes one change durable on its own, from a thread outside the runtime (`runtime`'s
    /// handle: the upkeep's steps).
    fn write_alone(&self, batch: Batch, runtime: &tokio::runtime::Handle) -> Result<(), Failure>;

    /// Why nothing is acknowledged any more, once durability failed for good.
    fn failure(&self) -> Option<String>;

    /// Durability failed for good (`why`): from now on nothing is acknowledged; one
    /// `schedd` exits shortly, to start again from what is durable, and a replicas' leader
    /// steps down (see `retire`).
    fn fail(&self, why: String);

    /// Whether the store has a change only once a flush covered it (replicas apply what is
    /// committed): watchers then hear of a reported change after that flush.
    fn store_follows_flush(&self) -> bool;

    /// Whether heartbeats may be acknowledged now, renewing nodes' fences: a leader of
    /// replicas only while a majority acknowledged it lately.
    fn may_renew_fences(&self) -> bool;

    /// The replica this `schedd` leads, if it is one.
    fn replica(&self) -> Option<&crate::replica::Replica>;
}
