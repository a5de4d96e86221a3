//! The `replicas_catch_up` group: three schedd replicas in this process, linked by
//! direct calls (their Raft, log and store as in `schedd`; no gRPC). A follower wiped while
//! 100,000 jobs are written catches up (a snapshot of the store, then the log after it): how
//! long until it has applied what the leader has, and how much memory that takes. Then the
//! leader stops and a follower is elected: how long `schedd` takes from there to serving, from
//! the state it kept warm as a follower, and from its store.

use crate::figure::Figure;
use crate::setup::env_usize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ysched_common::{JobId, JobState};
use ysched_schedd::core::testkit::JobBuilder;
use ysched_schedd::replica::network::{answer, Answer, Link, LinkError, Message};
use ysched_schedd::replica::{Replica, Timing};
use ysched_schedd::store::{Batch, Payload, Store};

/// Routes each message straight to the target's Raft, unless the target is down.
#[derive(Default)]
struct Direct {
    replicas: Mutex<BTreeMap<u64, Replica>>,
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
            let replica = self.replicas.lock().unwrap().get(&target).cloned();
            let replica = replica.ok_or_else(|| unreachable("not started"))?;
            answer(&replica.raft, message, &body)
                .await
                .map_err(|e| unreachable(&e.to_string()))
        })
    }
}

/// A week: the fair share's default half-life.
const HALF_LIFE_MS: i64 = 7 * 24 * 3_600_000;

struct Replicas {
    link: Arc<Direct>,
    dirs: BTreeMap<u64, tempfile::TempDir>,
    stores: BTreeMap<u64, Store>,
    replicas: BTreeMap<u64, Replica>,
}

impl Replicas {
    /// Starts replica `id` on a fresh state directory (a wiped one, if it ran before).
    async fn start(&mut self, id: u64) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let link: Arc<dyn Link> = self.link.clone();
        let replica =
            Replica::start_keeping_warm(id, store.clone(), link, Timing::default(), HALF_LIFE_MS)
                .await
                .unwrap();
        self.link
            .replicas
            .lock()
            .unwrap()
            .insert(id, replica.clone());
        self.link.down.lock().unwrap().remove(&id);
        self.dirs.insert(id, dir);
        self.stores.insert(id, store);
        self.replicas.insert(id, replica);
    }

    async fn stop(&mut self, id: u64) {
        self.link.down.lock().unwrap().insert(id);
        self.replicas.remove(&id).unwrap().shutdown().await;
        self.stores.remove(&id);
    }

    /// The leader the running replicas agree on, once they do.
    async fn leader(&self) -> u64 {
        for _ in 0..400 {
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
}

/// Job `id` as a submit writes it: its record (queued), its script and environment, its
/// history's first entry and the id counter.
fn submitted(id: u64) -> Batch {
    let mut b = Batch::default();
    let mut job = JobBuilder::new(id).build();
    job.state = JobState::Pending;
    b.put_job(&job);
    b.put_payload(
        JobId(id),
        &Payload {
            script: format!("#!/bin/bash\n#YSUB --gpus=1\npython train.py --seed {id}\n"),
            env: (0..20)
                .map(|i| (format!("VAR_{i}"), "x".repeat(24)))
                .collect(),
        },
    );
    b.event(JobId(id), 1_000, "submitted", "by alice from login1");
    b.set_next_job_id(id + 1);
    b
}

/// This process's resident memory: now, and its peak so far (MiB).
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub fn replicas_catch_up(rt: &tokio::runtime::Runtime) -> Vec<Figure> {
    let n_jobs = env_usize("REPLICAS_JOBS", 100_000) as u64;
    rt.block_on(async {
        let mut c = Replicas {
            link: Arc::default(),
            dirs: BTreeMap::new(),
            stores: BTreeMap::new(),
            replicas: BTreeMap::new(),
        };
        for id in 1..=3 {
            c.start(id).await;
        }
        let members = (1..=3).map(|id| (id, format!("replica-{id}"))).collect();
        c.replicas[&1].initialize(&members).await.unwrap();
        let leader = c.leader().await;
        let wiped = *c.replicas.keys().find(|id| **id != leader).unwrap();
        c.stop(wiped).await;

        let t = Instant::now();
        let mut next = 1;
        while next <= n_jobs {
            let upto = (next + 999).min(n_jobs);
            let batches = (next..=upto).map(submitted).collect();
            c.replicas[&leader].replicate_all(batches).await.unwrap();
            next = upto + 1;
        }
        // An empty entry after them all: its index is the leader's last.
        let target = c.replicas[&leader]
            .replicate(Batch::default())
            .await
            .unwrap();
        println!(
            "replicas: {n_jobs} jobs written as {target} entries in {:.1} s",
            t.elapsed().as_secs_f64()
        );

        let (rss_before, _) = rss_mib();
        let t = Instant::now();
        c.start(wiped).await;
        c.replicas[&wiped]
            .raft
            .wait(Some(Duration::from_secs(600)))
            .applied_index_at_least(Some(target), "caught up")
            .await
            .unwrap();
        let catch_up = t.elapsed().as_secs_f64();
        let (_, peak) = rss_mib();
        let from_snapshot = c.replicas[&wiped].raft.metrics().borrow().snapshot;
        println!(
            "replicas: the wiped replica caught up in {catch_up:.2} s (snapshot {from_snapshot:?}); \
             resident memory {rss_before:.0} MiB before, peak {peak:.0} MiB"
        );
        assert_eq!(
            c.stores[&wiped].recover().unwrap().active_jobs.len() as u64,
            n_jobs,
            "the wiped replica lacks jobs"
        );

        // The leader goes; one of the others is elected and starts serving: from what it kept
        // warm, then (a second start on the same replica finds it handed over) from its store.
        c.stop(leader).await;
        let new_leader = c.leader().await;
        let replica = c.replicas[&new_leader].clone();
        replica
            .raft
            .wait(Some(Duration::from_secs(60)))
            .applied_index_at_least(Some(target + 1), "the new term's entry")
            .await
            .unwrap();
        let store = c.stores[&new_leader].clone();
        let config = ysched_common::Config::default();
        let t = Instant::now();
        let warm = ysched_schedd::shell::Cluster::start_leading(
            config.clone(),
            store.clone(),
            replica.clone(),
        )
        .unwrap();
        let warm_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let cold =
            ysched_schedd::shell::Cluster::start_leading(config, store, replica.clone()).unwrap();
        let cold_s = t.elapsed().as_secs_f64();
        println!(
            "replicas: election to serving with {n_jobs} queued jobs: {:.0} ms from the warm \
             state, {:.0} ms from the store",
            warm_s * 1000.0,
            cold_s * 1000.0
        );
        drop((warm, cold));
        vec![
            Figure {
                name: "replicas: wiped replica's catch-up, 100k jobs (s)",
                value: catch_up,
                unit: "s",
                target: 60.0,
                higher_is_better: false,
            },
            Figure {
                name: "replicas: catch-up's peak memory growth (MiB)",
                value: (peak - rss_before).max(0.0),
                unit: "MiB",
                target: 1024.0,
                higher_is_better: false,
            },
            Figure {
                name: "replicas: new leader serving, warm, 100k queued (ms)",
                value: warm_s * 1000.0,
                unit: "ms",
                target: 1000.0,
                higher_is_better: false,
            },
            Figure {
                name: "replicas: new leader serving, cold, 100k queued (ms)",
                value: cold_s * 1000.0,
                unit: "ms",
                target: 10_000.0,
                higher_is_better: false,
            },
        ]
    })
}
