//! `WatchJob`'s streams: a job's changes until it ends, or each of several jobs (an array's
//! tasks) once it has ended. Each is produced by a task of its own into a queue of at most
//! [`QUEUED`] answers to its client, which waits while the queue is full: a client that does
//! not read holds up its own watch only. A queued answer is reserved in schedd's budget of
//! answers not yet read (see `answering`) until tonic takes it to send; past the caller's
//! room the watch ends with `RESOURCE_EXHAUSTED`.

use super::answering::Answering;
use crate::shell::Cluster;
use prost::Message;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::{Stream, StreamExt as _};
use tonic::{Response, Status};
use ysched_common::edge::answers::Reservation;
use ysched_common::{JobId, JobState};
use ysched_proto as pb;

pub(super) type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::JobInfo, Status>> + Send>>;

/// Answers a watch queues for its client at most.
const QUEUED: usize = 16;

/// A watch's queue to its client (see the module docs).
struct ToClient {
    tx: tokio::sync::mpsc::Sender<(Result<pb::JobInfo, Status>, Option<Reservation>)>,
    answering: Option<Answering>,
}

impl ToClient {
    /// The queue, and the stream tonic sends from it (each answer's reservation given back
    /// as tonic takes it).
    fn new(answering: Option<Answering>) -> (ToClient, WatchStream) {
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUED);
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|(answer, _held)| answer);
        (ToClient { tx, answering }, Box::pin(stream))
    }

    /// Queues `info` for the client, waiting while the queue is full; `false` when the watch
    /// is over: the client went away, or its caller's answers not yet read left no room for
    /// it (the stream then ends with that refusal).
    async fn send(&self, info: pb::JobInfo) -> bool {
        let held = match &self.answering {
            Some(answering) => match answering.reserve(info.encoded_len() as u64) {
                Ok(held) => held,
                Err(refusal) => {
                    self.fail(refusal).await;
                    return false;
                }
            },
            None => None,
        };
        self.tx.send((Ok(info), held)).await.is_ok()
    }

    /// Ends the stream with `status`.
    async fn fail(&self, status: Status) {
        let _ = self.tx.send((Err(status), None)).await;
    }

    /// Resolves once the client has gone away.
    async fn closed(&self) {
        self.tx.closed().await
    }
}

/// Resolves once `cluster` no longer leads (see `shell::retire`): its watches end, and the
/// clients watch again where the leader is.
fn retired(cluster: &Cluster) -> impl std::future::Future<Output = ()> + Send + 'static {
    cluster.retirement()
}

/// What a watch ends with when its schedd steps down: the tools ask again.
fn no_longer_leads() -> Status {
    Status::unavailable("this schedd no longer leads: watch again (the tools do)")
}

/// `WatchJob` of one job, as `seen_by_caller` shows it: `first`, then each change until it
/// ends.
pub(super) fn watch_one(
    cluster: &Arc<Cluster>,
    id: JobId,
    first: pb::JobInfo,
    mut changes: tokio::sync::broadcast::Receiver<JobId>,
    seen_by_caller: impl Fn(&ysched_common::Job) -> pb::JobInfo + Send + Sync + 'static,
    answering: Option<Answering>,
) -> Response<WatchStream> {
    let cluster = Arc::clone(cluster);
    let (tx, rx) = ToClient::new(answering);
    tokio::spawn(async move {
        let mut last = first;
        let terminal = |j: &pb::JobInfo| JobState::parse(&j.state).is_some_and(|s| s.is_terminal());
        if !tx.send(last.clone()).await || terminal(&last) {
            return;
        }
        loop {
            // A client that went away ends its watch at once, not at the job's next
            // change (a held job may never change: its watchers would pile up).
            let change = tokio::select! {
                change = changes.recv() => change,
                () = tx.closed() => return,
                () = retired(&cluster) => return tx.fail(no_longer_leads()).await,
            };
            match change {
                Ok(changed) if changed != id => continue,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            }
            let Ok(job) = cluster.job(id) else {
                return;
            };
            let info = seen_by_caller(&job);
            if info != last {
                last = info;
                if !tx.send(last.clone()).await || terminal(&last) {
                    return;
                }
            }
        }
    });
    Response::new(rx)
}

/// `WatchJob` of a name of several jobs (an array, `12_[1-5]`): each of `ids` once, when it
/// has ended (already ended ones first, in id order), without its spec; the stream ends after
/// the last. One stream for a whole array, where a watch per task cost a request per task to
/// `ysub --wait` and to schedd. A job that cannot be read any more (purged from the history)
/// ends the stream with the error.
///
/// What a watch holds is bounded whatever the array's size: a bit per job still waited for
/// (see [`Waiting`]), the stream's few queued answers, and while it looks at every job (the
/// first look, and after missed announcements) one chunk of them, looked at on a blocking
/// thread since ended tasks are read from the store.
pub(super) fn watch_ends(
    cluster: &Arc<Cluster>,
    ids: Vec<JobId>,
    mut changes: tokio::sync::broadcast::Receiver<JobId>,
    seen_by_caller: impl Fn(&ysched_common::Job) -> pb::JobInfo + Send + Sync + 'static,
    answering: Option<Answering>,
) -> Response<WatchStream> {
    use tokio::sync::broadcast::error::RecvError;
    let cluster = Arc::clone(cluster);
    let seen_by_caller = Arc::new(seen_by_caller);
    let (tx, rx) = ToClient::new(answering);
    tokio::spawn(async move {
        let mut waiting = Waiting::new(&ids);
        drop(ids);
        let mut look_at_all = true;
        loop {
            if look_at_all {
                look_at_all = false;
                // A chunk at a time on a blocking thread, its answers sent from here: a
                // client slow to read holds up its own watch, never a blocking thread.
                let mut after = None;
                loop {
                    let chunk: Vec<JobId> = waiting
                        .ids()
                        .filter(|id| after.is_none_or(|a| *id > a))
                        .take(LOOKED_AT_ONCE)
                        .collect();
                    let Some(&last) = chunk.last() else {
                        break;
                    };
                    after = Some(last);
                    let (cluster, seen) = (Arc::clone(&cluster), Arc::clone(&seen_by_caller));
                    let looked = tokio::task::spawn_blocking(move || {
                        chunk
                            .into_iter()
                            .map(|id| (id, ended(&cluster, &*seen, id)))
                            .collect::<Vec<_>>()
                    })
                    .await;
                    let looked = match looked {
                        Ok(looked) => looked,
                        Err(e) => {
                            tx.fail(Status::internal(format!("watch failed: {e}")))
                                .await;
                            return;
                        }
                    };
                    for (id, answer) in looked {
                        if !pass_on(&tx, &mut waiting, id, answer).await {
                            return;
                        }
                    }
                }
            }
            if waiting.is_empty() {
                return;
            }
            // As for one job: a client that went away ends its watch at once.
            let change = tokio::select! {
                change = changes.recv() => change,
                () = tx.closed() => return,
                () = retired(&cluster) => return tx.fail(no_longer_leads()).await,
            };
            match change {
                Ok(id) if waiting.contains(id) => {
                    let answer = ended(&cluster, &*seen_by_caller, id);
                    if !pass_on(&tx, &mut waiting, id, answer).await {
                        return;
                    }
                }
                Ok(_) => {}
                // Changes were missed: look at every job still waited for.
                Err(RecvError::Lagged(_)) => look_at_all = true,
                Err(RecvError::Closed) => return,
            }
        }
    });
    Response::new(rx)
}

/// What a watch does with what it found of job `id` (see [`ended`]): an ended job is sent and
/// no longer waited for. `false` when the watch is over: the client went away, or the job
/// could not be read (the error sent).
async fn pass_on(
    tx: &ToClient,
    waiting: &mut Waiting,
    id: JobId,
    answer: Result<Option<pb::JobInfo>, Status>,
) -> bool {
    match answer {
        Ok(None) => true,
        Ok(Some(info)) => {
            waiting.remove(id);
            tx.send(info).await
        }
        Err(status) => {
            tx.fail(status).await;
            false
        }
    }
}

/// How many jobs a watch looks at in one go on a blocking thread (see [`watch_ends`]).
const LOOKED_AT_ONCE: usize = 256;

/// Job `id` as its watcher sees it, without its spec, if it has ended.
fn ended(
    cluster: &Cluster,
    seen_by_caller: &dyn Fn(&ysched_common::Job) -> pb::JobInfo,
    id: JobId,
) -> Result<Option<pb::JobInfo>, Status> {
    let job = cluster.job(id)?;
    if !job.state.is_terminal() {
        return Ok(None);
    }
    let mut info = seen_by_caller(&job);
    info.spec = None;
    Ok(Some(info))
}

/// The jobs a watch still waits for, among the ids it was given: those ids as runs of
/// consecutive ones (an array's tasks are one run) and a bit each, so that a watch of a
/// 10,000-task array holds about 1.3 KB, not a set of 10,000 ids.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Waiting {
    /// `(first id, how many, the first one's place)`, ascending.
    runs: Vec<(u64, u64, usize)>,
    /// A bit per place: still waited for.
    bits: Vec<u64>,
    left: usize,
}

impl Waiting {
    /// `ids` ascending (as a name resolves).
    fn new(ids: &[JobId]) -> Waiting {
        let mut runs: Vec<(u64, u64, usize)> = Vec::new();
        for (place, id) in ids.iter().enumerate() {
            match runs.last_mut() {
                Some((first, len, _)) if *first + *len == id.0 => *len += 1,
                _ => runs.push((id.0, 1, place)),
            }
        }
        let mut bits = vec![u64::MAX; ids.len().div_ceil(64)];
        if !ids.len().is_multiple_of(64) {
            if let Some(last) = bits.last_mut() {
                *last = (1u64 << (ids.len() % 64)) - 1;
            }
        }
        Waiting {
            runs,
            bits,
            left: ids.len(),
        }
    }

    fn place(&self, id: JobId) -> Option<usize> {
        let i = self.runs.partition_point(|(first, _, _)| *first <= id.0);
        let (first, len, start) = *self.runs.get(i.checked_sub(1)?)?;
        (id.0 < first + len).then(|| start + (id.0 - first) as usize)
    }

    fn contains(&self, id: JobId) -> bool {
        self.place(id)
            .is_some_and(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }

    fn remove(&mut self, id: JobId) {
        if let Some(p) = self.place(id) {
            let word = &mut self.bits[p / 64];
            if *word & (1 << (p % 64)) != 0 {
                *word &= !(1 << (p % 64));
                self.left -= 1;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The ids still waited for, ascending.
    fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.runs.iter().flat_map(move |&(first, len, start)| {
            (0..len).filter_map(move |k| {
                let p = start + k as usize;
                (self.bits[p / 64] & (1 << (p % 64)) != 0).then_some(JobId(first + k))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{JobId, Waiting};

    fn ids(v: impl IntoIterator<Item = u64>) -> Vec<JobId> {
        v.into_iter().map(JobId).collect()
    }

    #[test]
    fn a_watch_waits_for_each_id_it_was_given_until_removed() {
        // An array's 130 tasks (past two words of bits), then a gap, then two more ids.
        let given = ids((12..142).chain([500, 501]));
        let mut waiting = Waiting::new(&given);
        assert_eq!(waiting.runs.len(), 2);
        assert_eq!(waiting.bits.len(), 3, "a bit per id");
        assert_eq!(waiting.ids().collect::<Vec<_>>(), given);
        for outside in [0, 11, 142, 499, 502, u64::MAX] {
            assert!(!waiting.contains(JobId(outside)), "{outside}");
        }
        for id in [12, 75, 76, 141, 500] {
            assert!(waiting.contains(JobId(id)));
            waiting.remove(JobId(id));
            assert!(!waiting.contains(JobId(id)));
            // Removing twice, or an id never given, changes nothing.
            waiting.remove(JobId(id));
            waiting.remove(JobId(id + 1000));
        }
        let left: Vec<JobId> = waiting.ids().collect();
        assert_eq!(left.len(), 132 - 5);
        assert_eq!(waiting.left, left.len());
        assert!(!left.contains(&JobId(75)) && left.contains(&JobId(74)));
        for id in left {
            assert!(!waiting.is_empty());
            waiting.remove(id);
        }
        assert!(waiting.is_empty());
        assert_eq!(waiting.ids().count(), 0);
    }

    #[test]
    fn a_watch_of_64_ids_uses_a_whole_word() {
        let mut waiting = Waiting::new(&ids(1..=64));
        assert_eq!(waiting.bits, [u64::MAX]);
        waiting.remove(JobId(64));
        assert!(waiting.contains(JobId(63)) && !waiting.contains(JobId(64)));
        assert_eq!(waiting.ids().count(), 63);
    }
}
