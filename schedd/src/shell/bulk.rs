//! Bulk reads of the history (a listing that reads finished jobs from the store: `yq --all`,
//! `sacct`, a page of a whole history) on a pool of threads of their own at nice 10, as the
//! upkeep runs: when a history flood and a person's `yq --me` want the CPU at once, the
//! person's short request wins it, and the flood is only slower.

use super::*;
use std::sync::OnceLock;

/// Threads that read the history at once, at most: more would only share the same cores.
const BULK_THREADS: usize = 8;

/// The pool: a runtime whose blocking threads are the bulk reads'. Made at the first one and
/// never dropped (a runtime may not be dropped on another's worker).
fn pool() -> &'static tokio::runtime::Runtime {
    static POOL: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    POOL.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(BULK_THREADS)
            .thread_name("history-read")
            .on_thread_start(upkeep::lower_priority)
            .build()
            .expect("the history readers' pool")
    })
}

impl Cluster {
    /// [`Cluster::off_runtime`] for a bulk read of the history: on the pool of threads at nice
    /// 10 (see the module docs).
    pub async fn off_runtime_bulk<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Cluster) -> ApiResult<T> + Send + 'static,
    ) -> ApiResult<T> {
        let cluster = Arc::clone(self);
        pool()
            .spawn_blocking(move || work(&cluster))
            .await
            .map_err(|e| ApiError::Internal(format!("a read of the history failed: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    /// The nice value of the calling thread.
    fn thread_nice() -> libc::c_int {
        // SAFETY: gettid has no arguments; getpriority reads its integer arguments only.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[tokio::test]
    async fn bulk_reads_run_at_nice_10_and_the_caller_stays_as_it_was() {
        let caller = thread_nice();
        let read = super::pool().spawn_blocking(thread_nice).await.unwrap();
        assert!(read == 10 || (read > 10 && caller > 10), "nice {read}");
        assert_eq!(thread_nice(), caller);
    }
}
