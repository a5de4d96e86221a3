//! The replicas' storage: openraft's own storage suite over sled, and what replication relies
//! on besides: entries applied in order and once, the log kept across a restart, and a
//! snapshot plus the log after it making the same state as the whole log.

use super::*;
use crate::store::tests::job;
use crate::store::{Batch, Store};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote,
};
use ysched_common::{JobId, JobState};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path()).expect("store");
        Ok((dir, LogStore::new(store.clone()), StateMachine::new(store)))
    }
}

#[test]
fn passes_openraft_storage_suite() {
    Suite::test_all(Builder).unwrap();
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// Entry `index` of a made-up history: a job submitted with its event; every third entry
/// also ends the job before it and counts the ids on.
pub(super) fn batch(index: u64) -> Batch {
    let mut b = Batch::default();
    b.put_job(&job(index, JobState::Pending));
    b.event(
        JobId(index),
        index as i64,
        "submitted",
        format!("entry {index}"),
    );
    if index.is_multiple_of(3) {
        let mut done = job(index - 1, JobState::Completed);
        done.end_time = Some(index as i64 * 10);
        b.put_job(&done);
        b.event(JobId(index - 1), index as i64, "ended", "exit 0");
        b.set_next_job_id(index + 1);
    }
    b
}

/// A snapshot's bytes, read from its file.
async fn bytes_of(mut file: Box<tokio::fs::File>) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    file.seek(std::io::SeekFrom::Start(0)).await.unwrap();
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).await.unwrap();
    bytes
}

/// `bytes` received by `sm` as a snapshot sent to it, ready to install.
async fn receive(sm: &mut StateMachine, bytes: &[u8]) -> Box<tokio::fs::File> {
    use tokio::io::AsyncWriteExt;
    let mut receiving = sm.begin_receiving_snapshot().await.unwrap();
    receiving.write_all(bytes).await.unwrap();
    receiving.flush().await.unwrap();
    receiving
}

fn entry(index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(batch(index)),
    }
}

/// What the state says, as schedd reads it: active jobs, nodes, the id counter, finished
/// jobs and every job's history.
pub(super) fn view(store: &Store) -> String {
    let rec = store.recover().unwrap();
    let finished = store.finished_jobs().unwrap();
    let mut events = Vec::new();
    for j in rec.active_jobs.values().chain(finished.iter()) {
        events.push((j.id, store.job_events(j).unwrap()));
    }
    events.sort_by_key(|(id, _)| *id);
    format!(
        "{:?}\n{:?}\n{}\n{:?}\n{:?}",
        rec.active_jobs, rec.nodes, rec.next_job_id, finished, events
    )
}

#[tokio::test]
async fn entries_are_applied_in_order_and_once() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (
        Store::open(a_dir.path()).unwrap(),
        Store::open(b_dir.path()).unwrap(),
    );
    let mut sm = StateMachine::new(a.clone());
    sm.apply((1..=20).map(entry)).await.unwrap();
    for i in 1..=20 {
        b.apply(batch(i)).unwrap();
    }
    let expected = view(&b);
    assert_eq!(view(&a), expected);
    assert!(view(&a).contains("entry 20"));
    // Applied again (a replay after a crash): nothing changes, no event is repeated.
    sm.apply((5..=20).map(entry)).await.unwrap();
    assert_eq!(view(&a), expected);
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 20)));
}

/// `b` given state of its own (job 99, entry 1), which an installed snapshot replaces whole;
/// `a` given entries 1 to 12, and its snapshot of them.
async fn snapshot_of_twelve_over_state_of_its_own(
    a: &mut StateMachine,
    b: &mut StateMachine,
) -> openraft::storage::Snapshot<TypeConfig> {
    b.apply([Entry {
        log_id: log_id(1, 1),
        payload: EntryPayload::Normal(batch(99)),
    }])
    .await
    .unwrap();
    a.apply((1..=12).map(entry)).await.unwrap();
    a.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_snapshot_and_the_log_after_it_make_the_same_state_as_the_whole_log() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = StateMachine::new(Store::open(a_dir.path()).unwrap());
    let b_store = Store::open(b_dir.path()).unwrap();
    let mut b = StateMachine::new(b_store.clone());
    let snapshot = snapshot_of_twelve_over_state_of_its_own(&mut a, &mut b).await;
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 12)));
    a.apply((13..=20).map(entry)).await.unwrap();

    let bytes = bytes_of(snapshot.snapshot).await;
    let receiving = receive(&mut b, &bytes).await;
    b.install_snapshot(&snapshot.meta, receiving).await.unwrap();
    assert_eq!(b.applied_state().await.unwrap().0, Some(log_id(1, 12)));
    b.apply((13..=20).map(entry)).await.unwrap();

    let whole = tempfile::tempdir().unwrap();
    let whole = Store::open(whole.path()).unwrap();
    for i in 1..=20 {
        whole.apply(batch(i)).unwrap();
    }
    assert_eq!(view(&b_store), view(&whole));
    assert!(!view(&b_store).contains("entry 99"));
    assert_eq!(
        b.get_current_snapshot().await.unwrap().unwrap().meta,
        snapshot.meta
    );
}

#[tokio::test]
async fn a_snapshot_that_cannot_be_read_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut sm = StateMachine::new(store.clone());
    sm.apply((1..=3).map(entry)).await.unwrap();
    let before = view(&store);
    let good = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let good_bytes = bytes_of(good.snapshot).await;
    for bad in [
        b"not a snapshot".to_vec(),
        good_bytes[..good_bytes.len() - 3].to_vec(),
    ] {
        let receiving = receive(&mut sm, &bad).await;
        let err = sm
            .install_snapshot(&good.meta, receiving)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("snapshot"), "{err}");
        assert_eq!(view(&store), before);
    }
}

#[tokio::test]
async fn the_log_and_the_vote_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let vote = Vote::new_committed(3, 2);
    {
        let mut log = LogStore::new(Store::open(dir.path()).unwrap());
        log.blocking_append((1..=5).map(entry)).await.unwrap();
        log.save_vote(&vote).await.unwrap();
        log.truncate(log_id(1, 5)).await.unwrap();
        log.purge(log_id(1, 2)).await.unwrap();
    }
    // The first store's flusher may hold sled's lock a moment after its drop.
    let mut log = LogStore::new(crate::store::tests::reopen(dir.path()));
    assert_eq!(log.read_vote().await.unwrap(), Some(vote));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 2)));
    assert_eq!(state.last_log_id, Some(log_id(1, 4)));
    let entries = log.try_get_log_entries(0..10).await.unwrap();
    let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
    assert_eq!(indexes, vec![3, 4]);
    match &entries[0].payload {
        EntryPayload::Normal(b) => assert_eq!(b.to_bytes(), batch(3).to_bytes()),
        other => panic!("{other:?}"),
    }
}

/// What the warm state holds of the store: the state start-up would read.
fn warm_view(warm: &Warm) -> String {
    format!("{:?}", warm.recovered)
}

fn recovered_view(store: &Store) -> String {
    format!("{:?}", store.recover().unwrap())
}

#[tokio::test]
async fn a_follower_keeps_warm_what_recovery_reads_and_hands_it_over_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    // Some state before the replica starts: read whole at start.
    store.apply(batch(1)).unwrap();
    let mut sm = StateMachine::keeping_warm(store.clone(), 3_600_000).unwrap();
    sm.apply((2..=20).map(entry)).await.unwrap();
    let warm = sm
        .take_warm()
        .expect("kept warm, of the entry applied last");
    assert_eq!(warm_view(&warm), recovered_view(&store));
    assert!(!warm.recovered.active_jobs.is_empty());
    // Handed over once: the leader keeps its records from then on.
    sm.apply((21..=22).map(entry)).await.unwrap();
    assert!(sm.take_warm().is_none());
}

#[tokio::test]
async fn a_warm_state_not_of_the_last_entry_applied_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut sm = StateMachine::keeping_warm(store.clone(), 3_600_000).unwrap();
    sm.apply((1..=3).map(entry)).await.unwrap();
    // An entry applied to the store behind the state machine's back.
    let mut other = StateMachine::new(store.clone());
    other.apply((4..=4).map(entry)).await.unwrap();
    assert!(sm.take_warm().is_none());
}

#[tokio::test]
async fn an_installed_snapshot_rebuilds_the_warm_state() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = StateMachine::new(Store::open(a_dir.path()).unwrap());
    let b_store = Store::open(b_dir.path()).unwrap();
    let mut b = StateMachine::keeping_warm(b_store.clone(), 3_600_000).unwrap();
    let snapshot = snapshot_of_twelve_over_state_of_its_own(&mut a, &mut b).await;
    let bytes = bytes_of(snapshot.snapshot).await;
    let receiving = receive(&mut b, &bytes).await;
    b.install_snapshot(&snapshot.meta, receiving).await.unwrap();
    b.apply((13..=20).map(entry)).await.unwrap();
    let warm = b.take_warm().expect("rebuilt after the snapshot");
    assert_eq!(warm_view(&warm), recovered_view(&b_store));
    assert!(!warm.recovered.active_jobs.contains_key(&JobId(99)));
}
