//! Random sequences of events against the state machine, as agents and clients might send
//! them (stale, duplicated, about unknown jobs or nodes, fenced, from nodes whose GPUs
//! changed), with silent-node ticks at random times: after every event the records keep
//! their invariants. No GPU is held twice, every allocation belongs to a job that holds
//! resources, no finished job stays in memory, no job waits holding GPUs, the node views
//! hold whatever the allocations name, a job leaves a silent node alive (requeued, or its
//! part there ended) only once the node's fence has surely stopped it, a tick repeated
//! changes nothing, and a node whose GPUs changed under jobs is drained. Every run that ends
//! is recorded exactly once (`usage`), in the event that ends it. The scheduler's copy and the
//! kept listing entries follow every change.

use super::agent_events::{AgentReport, Limits, Registration};
use super::lifecycle::{PartEnd, FENCE_SLACK_MS};
use super::submission::NewJob;
use super::{Effects, Records};
use crate::core::testkit::{NodeBuilder, A100, H100, T0};
use crate::core::{schedule, Policy, Snapshot};
use crate::store::Payload;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::config::default_tiers;
use ysched_common::{Caller, Job, JobId, JobSpec, JobState, Owner};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const LIMITS: Limits = Limits {
    max_requeues: 2,
    max_launch_attempts: 2,
};

#[derive(Debug, Clone)]
enum Op {
    Submit {
        gpus: u32,
        nodes: u32,
        tier: u8,
    },
    Pass,
    /// A pass that ran on the records as they were `back` events ago (the pass runs without
    /// the lock): only what still holds of its plan may be applied.
    StalePass {
        back: usize,
    },
    Started {
        pick: usize,
    },
    /// Several agents' reports as one event (the shell batches what arrived together): a
    /// start and an end of one job, and an end of another.
    Reports {
        first: usize,
        second: usize,
    },
    End {
        pick: usize,
        node: usize,
        exit: i32,
        stale: bool,
        /// The agent's end and SIGTERM times: anything an agent could send, extremes too.
        at: i64,
        /// Its node's fence stopped it.
        fenced: bool,
    },
    Cancel {
        pick: usize,
        root: bool,
    },
    Register {
        node: usize,
        keep: u8,
        junk: u64,
        /// Of the jobs not kept running, those reported ended by the node's fence.
        fenced: u8,
        /// The node's `fence_after_secs`: 0 (never) or some seconds.
        fence: u32,
        /// Which GPUs it reports (see [`inventory`]).
        inventory: u8,
    },
    /// The shell's tick with these nodes silent (a bit mask over [`NODES`]), `later` ms after
    /// the previous event.
    Silent {
        nodes: u8,
        later: i64,
    },
    Resume {
        node: usize,
    },
    Hold {
        pick: usize,
        hold: bool,
    },
    Requeue {
        pick: usize,
        root: bool,
    },
}

/// A time as an agent might report it: none, around now, or anything at all.
fn agent_time() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(i64::MIN),
        Just(i64::MAX),
        any::<i64>(),
        (T0 - 1_000_000..T0 + 1_000_000),
    ]
}

/// A node's `fence_after_secs`: mostly some seconds, sometimes 0 (it never fences).
fn fence_secs() -> impl Strategy<Value = u32> {
    prop_oneof![1 => Just(0u32), 3 => 2u32..90]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u32..=8, 1u32..=2, 0u8..4).prop_map(|(gpus, nodes, tier)| Op::Submit {
            gpus: gpus - gpus % nodes,
            nodes,
            tier
        }),
        3 => Just(Op::Pass),
        1 => (1usize..6).prop_map(|back| Op::StalePass { back }),
        1 => any::<usize>().prop_map(|pick| Op::Started { pick }),
        1 => (any::<usize>(), any::<usize>())
            .prop_map(|(first, second)| Op::Reports { first, second }),
        2 => (
            any::<usize>(),
            0usize..3,
            -1i32..3,
            any::<bool>(),
            agent_time(),
            prop::bool::weighted(0.3),
        )
            .prop_map(|(pick, node, exit, stale, at, fenced)| Op::End {
                pick,
                node,
                exit,
                stale,
                at,
                fenced
            }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, root)| Op::Cancel { pick, root }),
        2 => (
            0usize..3,
            any::<u8>(),
            any::<u64>(),
            any::<u8>(),
            fence_secs(),
            any::<u8>()
        )
            .prop_map(
                |(node, keep, junk, fenced, fence, inventory)| Op::Register {
                    node,
                    keep,
                    junk,
                    fenced,
                    fence,
                    inventory
                }
            ),
        // Ticks at once, a little later, or long after.
        3 => (
            1u8..8,
            prop_oneof![Just(0i64), 0i64..20_000, 0i64..200_000]
        )
            .prop_map(|(nodes, later)| Op::Silent { nodes, later }),
        1 => (0usize..3).prop_map(|node| Op::Resume { node }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, hold)| Op::Hold { pick, hold }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, root)| Op::Requeue { pick, root }),
    ]
}

fn owner(root: bool) -> Owner {
    if root {
        Owner {
            uid: 0,
            gid: 0,
            user: "root".into(),
            groups: vec![],
        }
    } else {
        Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec![],
        }
    }
}

fn pick(rec: &Records, n: usize) -> Option<JobId> {
    let ids: Vec<JobId> = rec.jobs.keys().copied().collect();
    (!ids.is_empty()).then(|| ids[n % ids.len()])
}

/// The GPUs a node reports: mostly the four it started with; sometimes one fewer, another
/// model, or a gap in the indices (GPU 3 gone, GPU 5 new).
fn inventory(node: &str, which: u8) -> Vec<ysched_common::Gpu> {
    match which % 6 {
        3 => NodeBuilder::dgx(node, 3, A100).build().gpus.to_vec(),
        4 => NodeBuilder::dgx(node, 4, H100).build().gpus.to_vec(),
        5 => {
            let mut gpus = NodeBuilder::dgx(node, 4, A100).build().gpus.to_vec();
            gpus[3].index = 5;
            gpus
        }
        _ => NodeBuilder::dgx(node, 4, A100).build().gpus.to_vec(),
    }
}

struct Reg {
    keep: u8,
    junk: u64,
    fenced: u8,
    fence: u32,
    inventory: u8,
}

fn registration(rec: &Records, node: &str, r: &Reg) -> Registration {
    let shape = NodeBuilder::dgx(node, 4, A100).build();
    // Some of the jobs schedd places here, plus an id it may never have heard of; of the
    // others, some ended by the fence while the node was away.
    let mut running = Vec::new();
    let mut finished = Vec::new();
    for (i, job) in rec.jobs.values().filter(|j| j.runs_on(node)).enumerate() {
        if r.keep & (1 << (i % 8)) != 0 {
            running.push(job.id.0);
        } else if r.fenced & (1 << (i % 8)) != 0 {
            finished.push(PartEnd {
                job_id: job.id.0,
                signal: Some(15),
                fenced: true,
                restart_count: job.restart_count,
                ..PartEnd::default()
            });
        }
    }
    running.push(r.junk % 50);
    Registration {
        name: node.into(),
        address: "10.0.0.1".into(),
        cpus: shape.cpus,
        mem_mib: shape.mem_mib,
        gpus: inventory(node, r.inventory),
        features: vec![],
        running_jobs: running,
        finished,
        login: false,
        fence_after_secs: r.fence,
        unhealthy_reason: None,
        gpu_faults: Vec::new(),
    }
}

fn step(rec: &mut Records, history: &[Records], op: &Op, now: i64) -> Result<(), TestCaseError> {
    let tiers = default_tiers();
    let effects = match op {
        Op::StalePass { back } => {
            let old = &history[history.len().saturating_sub(*back)];
            let snap = Snapshot::new(&old.jobs, &old.nodes);
            let plan = schedule(&snap, &Policy::new(&tiers), now);
            let (plan, _) = rec.still_valid(plan);
            let payload = |_: JobId| Some(Arc::new(Payload::default()));
            rec.apply_plan(&plan, &payload, now)
        }
        Op::Submit { gpus, nodes, tier } => {
            let tier = ["low", "medium", "high", "critical"][*tier as usize];
            let dir = |id: JobId| format!("/ckpt/{id}");
            let new = NewJob {
                owner: owner(false),
                from_host: None,
                spec: JobSpec {
                    tier: tier.into(),
                    gpus: *gpus,
                    nodes: *nodes,
                    cpus: 1,
                    ..JobSpec::default()
                },
                payload: Payload::default(),
                grace_secs: 5,
                tier_value: tiers[tier].value,
                checkpoint_dir: &dir,
            };
            let effects = rec.submit(new, now);
            return commit(rec, effects, now);
        }
        Op::Pass => {
            let snap = Snapshot::new(&rec.jobs, &rec.nodes);
            let plan = schedule(&snap, &Policy::new(&tiers), now);
            let payload = |_: JobId| Some(Arc::new(Payload::default()));
            rec.apply_plan(&plan, &payload, now)
        }
        Op::Started { pick: n } => {
            let Some(id) = pick(rec, *n) else {
                return Ok(());
            };
            let Some(node) = rec.jobs[&id].alloc.first().map(|a| a.node.clone()) else {
                return Ok(());
            };
            rec.job_started(&node, id.0, 42, now)
        }
        Op::Reports { first, second } => {
            let mut reports = Vec::new();
            for (n, start) in [(*first, true), (*second, false)] {
                let Some(id) = pick(rec, n) else { continue };
                let job = &rec.jobs[&id];
                let Some(node) = job.alloc.first().map(|a| a.node.clone()) else {
                    continue;
                };
                if start {
                    let started = AgentReport::Started {
                        job_id: id.0,
                        pid: 42,
                        time: now,
                    };
                    reports.push((node.clone(), started));
                }
                let end = PartEnd {
                    job_id: id.0,
                    exit_code: Some(0),
                    restart_count: job.restart_count,
                    ..PartEnd::default()
                };
                reports.push((node, AgentReport::Finished(end)));
            }
            rec.agent_reports(&reports, LIMITS, now)
        }
        Op::End {
            pick: n,
            node,
            exit,
            stale,
            at,
            fenced,
        } => {
            let Some(id) = pick(rec, *n) else {
                return Ok(());
            };
            let job = &rec.jobs[&id];
            // Mostly the part's own node; sometimes another, or a report of an earlier run.
            let node = job
                .alloc
                .get(*node % job.alloc.len().max(1))
                .map(|a| a.node.clone())
                .unwrap_or_else(|| NODES[*node].to_string());
            let end = PartEnd {
                job_id: id.0,
                exit_code: (*exit >= 0).then_some(*exit),
                signal: (*exit < 0).then_some(9),
                restart_count: job.restart_count + u32::from(*stale),
                end_time_ms: *at,
                term_time_ms: at.wrapping_mul(3),
                fenced: *fenced,
                ..PartEnd::default()
            };
            rec.job_finished(&node, &end, LIMITS, now)
        }
        Op::Cancel { pick: n, root } => {
            let Some(id) = pick(rec, *n) else {
                return Ok(());
            };
            let none = |_: JobId| Ok(None);
            match rec.cancel(&Caller::local(owner(*root)), &[id.0], "", &none, now) {
                Ok((effects, _)) => effects,
                Err(_) => return Ok(()),
            }
        }
        Op::Requeue { pick: n, root } => {
            let Some(id) = pick(rec, *n) else {
                return Ok(());
            };
            let none = |_: JobId| Ok(None);
            match rec.requeue(&Caller::local(owner(*root)), id, &none, now) {
                Ok(effects) => effects,
                Err(_) => return Ok(()),
            }
        }
        Op::Register {
            node,
            keep,
            junk,
            fenced,
            fence,
            inventory,
        } => {
            let name = NODES[*node];
            let r = Reg {
                keep: *keep,
                junk: *junk,
                fenced: *fenced,
                fence: *fence,
                inventory: *inventory,
            };
            let reg = registration(rec, name, &r);
            let busy = rec.jobs.values().any(|j| j.runs_on(name));
            let changed = *rec.nodes[name].gpus != reg.gpus;
            let effects = rec.register(&reg, LIMITS, now).0;
            commit(rec, effects, now)?;
            let node = &rec.nodes[name];
            prop_assert_eq!(&*node.gpus, &reg.gpus, "the new inventory is taken");
            if busy && changed {
                prop_assert!(
                    node.drain_reason
                        .as_ref()
                        .is_some_and(|r| r.contains("GPU inventory changed while jobs ran")),
                    "node {} changed under jobs but is not drained: {:?}",
                    name,
                    node.drain_reason
                );
            }
            return Ok(());
        }
        Op::Silent { nodes, .. } => {
            let silent: BTreeSet<String> = NODES
                .iter()
                .enumerate()
                .filter(|(i, _)| nodes & (1 << i) != 0)
                .map(|(_, n)| n.to_string())
                .collect();
            let before = rec.clone();
            let effects = rec.fail_silent(&silent, SINCE, LIMITS, now);
            commit(rec, effects, now)?;
            // The shell ends a silent node's session.
            for name in &silent {
                rec.nodes.get_mut(name).unwrap().connected = false;
            }
            check_fences(&before, rec, &silent, now)?;
            // A tick again at the same time changes nothing.
            let again = rec.fail_silent(&silent, SINCE, LIMITS, now);
            prop_assert!(
                again.jobs.is_empty() && again.writes_nothing(),
                "a second tick rewrote {:?}",
                again.changed
            );
            return Ok(());
        }
        Op::Resume { node } => {
            match rec.drain(&Caller::local(owner(true)), NODES[*node], None, now) {
                Ok(effects) => effects,
                Err(_) => return Ok(()),
            }
        }
        Op::Hold { pick: n, hold } => {
            let Some(id) = pick(rec, *n) else {
                return Ok(());
            };
            match rec.hold(&Caller::local(owner(false)), id, *hold, now) {
                Ok(effects) => effects,
                Err(_) => return Ok(()),
            }
        }
    };
    commit(rec, effects, now)
}

/// Commits an event through the reactor, as the shell and ysim do, its runs recorded first
/// (`Records::account_runs`): each run that the event ends (a job that held resources from a
/// start no longer does) is recorded exactly once, and no other.
fn commit(rec: &mut Records, effects: Effects, now: i64) -> Result<(), TestCaseError> {
    let ongoing = |rec: &Records| -> BTreeSet<(JobId, i64, u32)> {
        rec.jobs
            .values()
            .filter(|j| j.state.holds_resources())
            .filter_map(|j| Some((j.id, j.start_time?, j.restart_count)))
            .collect()
    };
    let before = ongoing(rec);
    let kept = super::reactor::testing::apply(rec, effects, now);
    let mut recorded: Vec<(JobId, i64, u32)> = kept
        .runs
        .0
        .iter()
        .map(|r| (r.job_id, r.start, r.restart_count))
        .collect();
    recorded.sort();
    let ended: Vec<(JobId, i64, u32)> = before.difference(&ongoing(rec)).copied().collect();
    prop_assert_eq!(recorded, ended, "runs recorded, runs ended");
    Ok(())
}

/// When schedd started, for the silent ticks: after the first events, so that both a node's
/// `last_seen` and this floor decide its contact time.
const SINCE: i64 = T0 + 5_000;

/// A job that held resources on a silent node and, after the tick, no longer does so while
/// it lives on (requeued, or its part there counted as ended) may do so only because every
/// such node fences and its fence and the job's grace are over: otherwise it could run twice.
fn check_fences(
    before: &Records,
    after: &Records,
    silent: &BTreeSet<String>,
    now: i64,
) -> Result<(), TestCaseError> {
    for old in before.jobs.values().filter(|j| j.state.holds_resources()) {
        let Some(new) = after.jobs.get(&old.id) else {
            continue; // ended (NODE_FAIL, CANCELLED): it is not run again
        };
        for a in old.alloc.iter().filter(|a| silent.contains(&a.node)) {
            if new.runs_on(&a.node) && new.restart_count == old.restart_count {
                continue;
            }
            let node = &before.nodes[&a.node];
            let grace = old
                .grace_secs
                .max(old.stop.as_ref().map_or(0, |s| s.grace_secs));
            let done = node.last_seen.max(SINCE)
                + i64::from(node.fence_after_secs) * 1000
                + i64::from(grace) * 1000
                + FENCE_SLACK_MS;
            prop_assert!(
                node.fence_after_secs > 0 && now >= done,
                "job {} left silent node {} (fence {}s) at {} before its fence was done at {}",
                old.id,
                a.node,
                node.fence_after_secs,
                now,
                done
            );
            prop_assert!(
                !old.spec.no_requeue,
                "job {} requeued despite --no-requeue",
                old.id
            );
        }
    }
    Ok(())
}

fn check(rec: &Records) -> Result<(), TestCaseError> {
    // The views of nodes whose GPUs changed under their jobs: whatever the allocations name.
    for node in rec.nodes.values() {
        let view = super::views::node_view(node, &rec.jobs);
        prop_assert_eq!(view.gpu_holders.len(), node.gpus.len());
    }
    let mut holder: BTreeMap<(String, u32), JobId> = BTreeMap::new();
    for job in rec.jobs.values() {
        prop_assert!(
            !job.state.is_terminal(),
            "finished job {} in memory",
            job.id
        );
        if job.state.holds_resources() {
            prop_assert!(!job.alloc.is_empty(), "job {} runs nowhere", job.id);
            for a in &job.alloc {
                prop_assert!(rec.nodes.contains_key(&a.node));
                for g in &a.gpus {
                    if let Some(other) = holder.insert((a.node.clone(), *g), job.id) {
                        prop_assert!(false, "GPU {}:{g} held by {other} and {}", a.node, job.id);
                    }
                }
            }
        } else {
            prop_assert!(
                job.alloc.is_empty(),
                "job {} is {} but holds {:?}",
                job.id,
                job.state,
                job.alloc
            );
        }
        if job.state == JobState::Pending || job.state == JobState::Held {
            prop_assert!(
                job.stop.is_none(),
                "queued job {} has a stop request",
                job.id
            );
        }
    }
    // The per-user counts `max_jobs_per_user` is checked against follow every event.
    prop_assert_eq!(
        rec.kept_active_counts(),
        &rec.recount_active(),
        "active jobs per user, kept and counted"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_after_every_event(
        ops in proptest::collection::vec(op(), 1..60),
        fences in proptest::collection::vec(fence_secs(), 3),
    ) {
        let mut rec = Records {
            jobs: BTreeMap::new(),
            nodes: NODES
                .iter()
                .zip(&fences)
                .map(|(n, fence)| {
                    let mut node = NodeBuilder::dgx(n, 4, A100).build();
                    node.fence_after_secs = *fence;
                    (n.to_string(), node)
                })
                .collect(),
            next_job_id: 1,
            ..Records::default()
        };
        let mut history = vec![rec.clone()];
        // The scheduler's copy, refreshed now and then, must be what a full copy would be.
        let mut copy = super::SchedulerCopy::default();
        let mut now = T0;
        for (i, op) in ops.iter().enumerate() {
            now += 1_000;
            if let Op::Silent { later, .. } = op {
                now += later;
            }
            step(&mut rec, &history, op, now)?;
            check(&rec)?;
            if i % 3 == 0 {
                rec.refresh_copy(&mut copy);
                // Job for job the records' own, shared: not a copy of them.
                let full: Vec<(&JobId, &std::sync::Arc<Job>)> = rec
                    .jobs
                    .iter()
                    .filter(|(_, j)| !j.state.is_terminal())
                    .collect();
                prop_assert_eq!(copy.jobs.len(), full.len(), "the refreshed copy is the records");
                prop_assert!(
                    full.iter().all(|(id, j)| copy
                        .jobs
                        .get(id)
                        .is_some_and(|c| std::sync::Arc::ptr_eq(c, j))),
                    "the refreshed copy shares the records' jobs"
                );
            }
            if i % 2 == 0 {
                // A listing: every entry kept from an earlier one is what the job is now.
                let encode = |job: &Job| super::ListingBytes::from(format!("{job:?}").into_bytes());
                let mut stale = Vec::new();
                rec.visit_listed(&BTreeSet::new(), |_| true, Some(&encode), |job, kept| {
                    if kept.map(|k| &k[..]) != Some(&encode(job)[..]) {
                        stale.push(job.id);
                    }
                });
                prop_assert!(stale.is_empty(), "listing entries kept after a change: {:?}", stale);
                prop_assert!(rec.kept_listings().keys().all(|id| rec.jobs.contains_key(id)));
                // One owner kept per user with active jobs, shared by their jobs.
                let users: BTreeSet<u32> = rec.jobs.values().map(|j| j.owner.uid).collect();
                prop_assert_eq!(rec.owners.keys().copied().collect::<BTreeSet<u32>>(), users);
                prop_assert!(rec
                    .jobs
                    .values()
                    .all(|j| Arc::ptr_eq(&j.owner, &rec.owners[&j.owner.uid])));
            }
            history.push(rec.clone());
        }
    }
}
