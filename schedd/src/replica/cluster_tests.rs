//! Three replicas in one process, linked by direct calls: they agree on one state, a new
//! leader takes over when the leader stops, a minority cannot write, and a wiped replica
//! catches up from a snapshot and the log after it.

use super::network::{answer, Answer, Link, LinkError, Message};
use super::tests::{batch, view};
use super::*;
use crate::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Routes each message straight to the target's Raft, unless the target is down.
#[derive(Default)]
struct Direct {
    replicas: Mutex<BTreeMap<u64, openraft::Raft<TypeConfig>>>,
    down: Mutex<BTreeSet<u64>>,
}

impl Link for Direct {
    fn call<'a>(
        &'a self,
        target: u64,
        addr: &'a str,
        message: Message,
        body: Vec<u8>,
    ) -> Answer<'a> {
        Box::pin(async move {
            let unreachable = |why: &str| LinkError::new(target, addr, why);
            if self.down.lock().unwrap().contains(&target) {
                return Err(unreachable("down"));
            }
            let raft = self.replicas.lock().unwrap().get(&target).cloned();
            let raft = raft.ok_or_else(|| unreachable("not started"))?;
            answer(&raft, message, &body)
                .await
                .map_err(|e| unreachable(&e.to_string()))
        })
    }
}

const FAST: Timing = Timing {
    heartbeat_ms: 50,
    election_min_ms: 200,
    election_max_ms: 400,
    snapshot_every: 8,
};

struct Cluster {
    link: Arc<Direct>,
    dirs: BTreeMap<u64, tempfile::TempDir>,
    stores: BTreeMap<u64, Store>,
    replicas: BTreeMap<u64, Replica>,
}

impl Cluster {
    async fn start() -> Cluster {
        let mut c = Cluster {
            link: Arc::default(),
            dirs: BTreeMap::new(),
            stores: BTreeMap::new(),
            replicas: BTreeMap::new(),
        };
        for id in 1..=3 {
            c.start_replica(id).await;
        }
        let members = (1..=3).map(|id| (id, format!("replica-{id}"))).collect();
        c.replicas[&1].initialize(&members).await.unwrap();
        c
    }

    /// Starts replica `id` on a fresh store (a wiped one, if it ran before).
    async fn start_replica(&mut self, id: u64) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let link: Arc<dyn Link> = self.link.clone();
        let replica = Replica::start(id, store.clone(), link, FAST).await.unwrap();
        self.link
            .replicas
            .lock()
            .unwrap()
            .insert(id, replica.raft.clone());
        self.link.down.lock().unwrap().remove(&id);
        self.dirs.insert(id, dir);
        self.stores.insert(id, store);
        self.replicas.insert(id, replica);
    }

    async fn stop_replica(&mut self, id: u64) {
        self.link.down.lock().unwrap().insert(id);
        self.replicas.remove(&id).unwrap().shutdown().await;
        self.stores.remove(&id);
    }

    /// The leader the running replicas agree on, once they do.
    async fn leader(&self) -> u64 {
        for _ in 0..200 {
            let seen: BTreeSet<Option<u64>> = self.replicas.values().map(|r| r.leader()).collect();
            if let [Some(leader)] = seen.into_iter().collect::<Vec<_>>()[..] {
                if self.replicas.contains_key(&leader) {
                    return leader;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no leader the replicas agree on");
    }

    /// Waits until every running replica applied `index`.
    async fn applied(&self, index: u64) {
        for r in self.replicas.values() {
            r.raft
                .wait(Some(Duration::from_secs(10)))
                .applied_index_at_least(Some(index), "applied")
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_and_a_new_leader_takes_over() {
    let mut c = Cluster::start().await;
    let leader = c.leader().await;
    let mut last = 0;
    for i in 1..=10 {
        last = c.replicas[&leader].replicate(batch(i)).await.unwrap();
    }
    c.applied(last).await;
    let views: BTreeSet<String> = c.stores.values().map(view).collect();
    assert_eq!(views.len(), 1, "replicas differ");
    assert!(views.iter().next().unwrap().contains("entry 10"));

    // A follower refuses to replicate, naming the leader.
    let follower = *c.replicas.keys().find(|id| **id != leader).unwrap();
    let err = c.replicas[&follower]
        .replicate(batch(99))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ReplicaError::NotLeader(Some((id, _))) if id == leader),
        "{err}"
    );

    c.stop_replica(leader).await;
    let new_leader = c.leader().await;
    assert_ne!(new_leader, leader);
    for i in 11..=20 {
        last = c.replicas[&new_leader].replicate(batch(i)).await.unwrap();
    }
    c.applied(last).await;
    let views: BTreeSet<String> = c.stores.values().map(view).collect();
    assert_eq!(views.len(), 1, "the two left differ");
    let state = views.into_iter().next().unwrap();
    assert!(state.contains("entry 10") && state.contains("entry 20"));
    assert!(!state.contains("entry 99"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_cannot_write() {
    let mut c = Cluster::start().await;
    let leader = c.leader().await;
    c.replicas[&leader].replicate(batch(1)).await.unwrap();
    let others: Vec<u64> = c
        .replicas
        .keys()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    for id in others {
        c.stop_replica(id).await;
    }
    let write = c.replicas[&leader].replicate(batch(2));
    // No majority: the write never commits (the leader steps down or waits).
    let r = tokio::time::timeout(Duration::from_secs(2), write).await;
    assert!(!matches!(r, Ok(Ok(_))), "a lone replica committed a write");
    assert!(!view(&c.stores[&leader]).contains("entry 2\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_replica_catches_up_from_a_snapshot_and_the_log() {
    let mut c = Cluster::start().await;
    let leader = c.leader().await;
    let wiped = *c.replicas.keys().find(|id| **id != leader).unwrap();
    c.stop_replica(wiped).await;
    let mut last = 0;
    // Past several snapshots (every 8 entries), so that the log before them is purged and
    // the wiped replica needs the snapshot.
    for i in 1..=30 {
        last = c.replicas[&leader].replicate(batch(i)).await.unwrap();
    }
    c.start_replica(wiped).await;
    c.applied(last).await;
    let metrics = c.replicas[&wiped].raft.metrics().borrow().clone();
    assert!(
        metrics.snapshot.is_some(),
        "caught up without a snapshot: {metrics:?}"
    );
    let views: BTreeSet<String> = c.stores.values().map(view).collect();
    assert_eq!(views.len(), 1, "the wiped replica differs");
    assert!(views.iter().next().unwrap().contains("entry 30"));
    // And it can lead.
    c.stop_replica(leader).await;
    let new_leader = c.leader().await;
    let index = c.replicas[&new_leader].replicate(batch(31)).await.unwrap();
    c.applied(index).await;
    assert!(view(&c.stores[&wiped]).contains("entry 31"));
}

/// An audit entry written at `time`.
fn audited(time: i64, detail: &str) -> ysched_common::AuditRecord {
    ysched_common::AuditRecord {
        time,
        user: "root".into(),
        uid: 0,
        action: "drain".into(),
        job_id: None,
        detail: detail.into(),
        host: None,
    }
}

/// What each replica's store holds of the history and the audit log.
fn history(store: &Store) -> String {
    let finished: Vec<u64> = store
        .finished_jobs()
        .unwrap()
        .iter()
        .map(|j| j.id.0)
        .collect();
    let audit: Vec<String> = store
        .audit_log(0)
        .unwrap()
        .into_iter()
        .map(|a| a.detail)
        .collect();
    format!("{finished:?} {audit:?}\n{}", view(store))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_audit_expire_alike_on_every_replica() {
    use crate::store::tests::job;
    use ysched_common::{JobId, JobState};
    let mut c = Cluster::start().await;
    let leader = c.leader().await;
    // One follower misses the first entries and catches up from a snapshot: its audit
    // entries then come partly from the leader's store, partly from its own writes.
    let wiped = *c.replicas.keys().find(|id| **id != leader).unwrap();
    c.stop_replica(wiped).await;
    let now = ysched_common::time::now_ms();
    let mut last = 0;
    for i in 1..=30u64 {
        let mut b = crate::store::Batch::default();
        let mut done = job(i, JobState::Completed);
        done.end_time = Some(1_000 + i as i64);
        b.put_job(&done);
        b.event(JobId(i), 1_000 + i as i64, "ended", "exit 0");
        b.audit(&audited(1_000 + i as i64, &format!("old {i}")));
        b.set_next_job_id(i + 1);
        last = c.replicas[&leader].replicate(b).await.unwrap();
        if i == 20 {
            c.start_replica(wiped).await;
        }
    }
    let mut b = crate::store::Batch::default();
    b.put_job(&job(31, JobState::Pending));
    b.audit(&audited(now, "recent"));
    b.set_next_job_id(32);
    c.replicas[&leader].replicate(b).await.unwrap();
    c.applied(last + 1).await;
    let before: BTreeSet<String> = c.stores.values().map(history).collect();
    assert_eq!(
        before.len(),
        1,
        "the replicas differ before the expiry: {before:#?}"
    );

    // The leader's shell runs the retention at once: finished jobs past a second, audit
    // entries past a day.
    let mut config = ysched_common::Config::default();
    config.scheduler.keep_finished = "1s".into();
    config.scheduler.audit_keep_days = 1;
    let _leading = crate::shell::Cluster::start_leading(
        config,
        c.stores[&leader].clone(),
        c.replicas[&leader].clone(),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let index = c.replicas[&leader]
            .raft
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |l| l.index);
        c.applied(index).await;
        let after: BTreeSet<String> = c.stores.values().map(history).collect();
        let leader_history = history(&c.stores[&leader]);
        if leader_history.starts_with("[] [\"recent\"]") && after.len() == 1 {
            assert!(leader_history.contains("JobId(31)"), "{leader_history}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replicas do not hold the same history after the expiry: {after:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
