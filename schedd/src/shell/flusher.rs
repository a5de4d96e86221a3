//! The flusher: one task makes everything applied so far durable for everybody (group
//! commit: concurrent requests share a flush), then lets go what waited for it: agent
//! commands in queue order, each after the flush that covers its change; job mails; watchers'
//! announcements; and the requests that asked. Everything else only asks for flushes
//! ([`Flushes`]).

use super::{lock, Cluster};
use crate::error::{ApiError, ApiResult};
use crate::state::commands::AgentCommand;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// A flush asked for: with whom to tell whether it made everything durable (`None`: nobody
/// waits).
type FlushWanted = Option<oneshot::Sender<bool>>;

/// Where flushes are asked for.
pub(super) struct Flushes(mpsc::UnboundedSender<FlushWanted>);

/// What the flusher reads its work from.
pub(super) type FlushQueue = mpsc::UnboundedReceiver<FlushWanted>;

impl Flushes {
    /// Flushes asked for here, and the queue [`Cluster::flush_loop`] takes them from.
    pub(super) fn new() -> (Flushes, FlushQueue) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Flushes(tx), rx)
    }

    /// Asks for a flush soon, with nobody waiting for it (commands or mails to let go).
    pub(super) fn soon(&self) {
        let _ = self.0.send(None);
    }

    /// Asks for a flush now; the answer says whether everything applied before made it.
    fn wait(&self) -> oneshot::Receiver<bool> {
        let (tx, rx) = oneshot::channel();
        let _ = self.0.send(Some(tx));
        rx
    }
}

impl Cluster {
    /// Asks for a flush of everything applied so far (at once, not when polled); the future
    /// is ready once it is durable and the queued agent messages are delivered.
    pub(super) fn request_flush(&self) -> impl std::future::Future<Output = ApiResult<()>> + '_ {
        let answer = self.flushes.wait();
        async move {
            match answer.await {
                Ok(true) => Ok(()),
                _ => Err(match self.durability.failure() {
                    Some(why) => ApiError::Unavailable(why),
                    None => ApiError::Internal("state store flush failed".into()),
                }),
            }
        }
    }

    /// The flusher's loop (see the module docs).
    pub(super) async fn flush_loop(self: Arc<Self>, mut queue: FlushQueue) {
        while let Some(first) = queue.recv().await {
            let mut waiters: Vec<_> = first.into_iter().collect();
            while let Ok(w) = queue.try_recv() {
                waiters.extend(w);
            }
            let (outbox, mails, announced, flushing) = {
                let mut st = lock(&self.state);
                if let Err(e) = self.durability.write_held(&mut st.unwritten) {
                    tracing::error!("writing held changes failed: {e}");
                }
                (
                    std::mem::take(&mut st.outbox),
                    std::mem::take(&mut st.mails),
                    std::mem::take(
                        &mut *self
                            .announced_after_flush
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner),
                    ),
                    // Taken with the outbox, under the lock: it covers what the outbox needs.
                    self.durability.flush(),
                )
            };
            let ok = flushing.await.is_ok();
            if ok {
                let st = lock(&self.state);
                for (node, msg) in outbox {
                    if let AgentCommand::Launch(order) = &msg {
                        ysched_common::stamp::stamp("d.launch_out", order.job.id.0);
                    }
                    st.sessions.send(&node, msg);
                }
                drop(st);
                // Durable now: the users may be told (queued, never waited for).
                self.mailer.send(mails);
                self.changed(announced);
            }
            for w in waiters {
                let _ = w.send(ok);
            }
        }
    }
}
