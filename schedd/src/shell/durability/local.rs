//! One `schedd`'s durability: its store, written at once (or with the next write, for the
//! changes held), and flushed, against a power loss too (`store::stable`); a write or flush
//! that does not return is caught by a watchdog thread.

use super::{Durability, Failure, Flushing, Unwritten};
use crate::error::ApiResult;
use crate::store::{Batch, Store};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Arc;
use ysched_common::time::now_ms;

/// sled fails for good after a failed flush or a write that failed inside it (every later
/// write fails, or never returns, until it is reopened), and the changes it could not flush
/// are already in memory: the only safe state is the one on disk. Exit, so that the service
/// manager restarts schedd from the store (everything acknowledged is there). A full disk is
/// refused before this (`Store::check_room`).
pub(in crate::shell) fn store_failed(e: &dyn std::fmt::Display) -> ! {
    tracing::error!(
        "state store write failed: {e}; exiting so that schedd restarts from what is on disk \
         (nothing acknowledged is lost)"
    );
    eprintln!("schedd: fatal: state store write failed: {e}");
    std::process::exit(75)
}

/// How long one write or flush of the store may take before schedd counts the store as
/// wedged (sled waits forever on a write that failed under it) and exits 75, as for a failed
/// flush. A write takes milliseconds, a flush at most a few seconds on a loaded disk.
const STORE_STALL: std::time::Duration = std::time::Duration::from_secs(60);

/// Watches the store's writes and flushes from a thread of its own: one that has not
/// returned after [`STORE_STALL`] ends schedd (exit 75), with a log line, rather than leave
/// every request waiting for it forever.
#[derive(Default)]
pub(in crate::shell) struct StoreWatch {
    /// When the write in progress began (ms since the epoch); 0: none.
    write_since: AtomicI64,
    /// When the flush in progress began; 0: none.
    flush_since: AtomicI64,
}

impl StoreWatch {
    pub(in crate::shell) fn start(self: &Arc<Self>) {
        let watch = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("store-watch".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let limit = STORE_STALL.as_millis() as i64;
                let now = now_ms();
                for (what, since) in [("write", &watch.write_since), ("flush", &watch.flush_since)]
                {
                    let since = since.load(Relaxed);
                    if since > 0 && now - since > limit {
                        store_failed(&format!(
                            "a {what} of the state store has not returned for {} s (is its \
                             disk full or failing?)",
                            (now - since) / 1000
                        ));
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the state store's watchdog: {e}");
        }
    }

    /// Marks a write busy until the returned guard is dropped.
    pub(in crate::shell) fn writing(&self) -> impl Drop + '_ {
        busy(&self.write_since)
    }

    fn flushing(&self) -> impl Drop + '_ {
        busy(&self.flush_since)
    }
}

/// Marks `slot` busy until the returned guard is dropped.
fn busy(slot: &AtomicI64) -> impl Drop + '_ {
    struct Busy<'a>(&'a AtomicI64);
    impl Drop for Busy<'_> {
        fn drop(&mut self) {
            self.0.store(0, Relaxed);
        }
    }
    slot.store(now_ms().max(1), Relaxed);
    Busy(slot)
}

/// One `schedd`'s store as its durability.
pub(in crate::shell) struct LocalStore {
    store: Store,
    watch: Arc<StoreWatch>,
}

impl LocalStore {
    pub(in crate::shell) fn new(store: Store, watch: Arc<StoreWatch>) -> LocalStore {
        LocalStore { store, watch }
    }

    /// `batches` in as few transactions as the store can make of them. A failure that leaves
    /// sled working (only a test's injected one: the room was checked before) loses them, as a
    /// crash before a flush would: the caller refuses its requests.
    fn write_group(&self, batches: Vec<Batch>) -> ApiResult<()> {
        if batches.is_empty() {
            return Ok(());
        }
        let _busy = self.watch.writing();
        match self.store.apply_group(batches) {
            Err(e) if e.is_fatal_write() => store_failed(&e),
            Err(e) => Err(e.into()),
            Ok(()) => Ok(()),
        }
    }
}

impl Durability for LocalStore {
    fn take(&self, batch: Batch, unwritten: &mut Unwritten) -> ApiResult<()> {
        if unwritten.hold || unwritten.round.is_some() {
            match &mut unwritten.round {
                Some(round) => round.push(batch),
                None => unwritten.held.push(batch),
            }
            return Ok(());
        }
        let mut batches = std::mem::take(&mut unwritten.held);
        batches.push(batch);
        self.write_group(batches)
    }

    fn write_held(&self, unwritten: &mut Unwritten) -> ApiResult<()> {
        let mut batches = std::mem::take(&mut unwritten.held);
        batches.extend(unwritten.round.take().unwrap_or_default());
        self.write_group(batches)
    }

    fn flush(&self) -> Flushing<'_> {
        Box::pin(async move {
            let _busy = self.watch.flushing();
            match self.store.flush().await {
                Ok(()) => Ok(()),
                Err(e) => store_failed(&e),
            }
        })
    }

    fn write_alone(&self, batch: Batch, _runtime: &tokio::runtime::Handle) -> Result<(), Failure> {
        let _busy = self.watch.writing();
        match self.store.apply(batch) {
            Err(e) if e.is_fatal_write() => store_failed(&e),
            Err(e) => Err(Failure::Refused(e)),
            Ok(()) => Ok(()),
        }
    }

    fn failure(&self) -> Option<String> {
        None
    }

    fn fail(&self, why: String) {
        store_failed(&why)
    }

    fn store_follows_flush(&self) -> bool {
        false
    }

    fn may_renew_fences(&self) -> bool {
        true
    }

    fn replica(&self) -> Option<&crate::replica::Replica> {
        None
    }
}
