//! Random sequences of events against the state machine, as agents and clients might send
//! them (stale, duplicated, about unknown jobs or nodes): after every event the records keep
//! their invariants. No GPU is held twice, every allocation belongs to a job that holds
//! resources, no finished job stays in memory, and no job waits holding GPUs.

use super::agent_events::{AgentReport, Limits, Registration};
use super::client_events::NewJob;
use super::lifecycle::PartEnd;
use super::Records;
use crate::core::testkit::{NodeBuilder, A100, T0};
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
    },
    Cancel {
        pick: usize,
        root: bool,
    },
    Register {
        node: usize,
        keep: u8,
        junk: u64,
    },
    Silent {
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

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..=8, 1u32..=2, 0u8..4).prop_map(|(gpus, nodes, tier)| Op::Submit {
            gpus: gpus - gpus % nodes,
            nodes,
            tier
        }),
        Just(Op::Pass),
        Just(Op::Pass),
        (1usize..6).prop_map(|back| Op::StalePass { back }),
        any::<usize>().prop_map(|pick| Op::Started { pick }),
        (any::<usize>(), any::<usize>()).prop_map(|(first, second)| Op::Reports { first, second }),
        (
            any::<usize>(),
            0usize..3,
            -1i32..3,
            any::<bool>(),
            agent_time()
        )
            .prop_map(|(pick, node, exit, stale, at)| Op::End {
                pick,
                node,
                exit,
                stale,
                at
            }),
        (any::<usize>(), any::<bool>()).prop_map(|(pick, root)| Op::Cancel { pick, root }),
        (0usize..3, any::<u8>(), any::<u64>()).prop_map(|(node, keep, junk)| Op::Register {
            node,
            keep,
            junk
        }),
        (0usize..3).prop_map(|node| Op::Silent { node }),
        (any::<usize>(), any::<bool>()).prop_map(|(pick, hold)| Op::Hold { pick, hold }),
        (any::<usize>(), any::<bool>()).prop_map(|(pick, root)| Op::Requeue { pick, root }),
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

fn registration(rec: &Records, node: &str, keep: u8, junk: u64) -> Registration {
    let inventory = NodeBuilder::dgx(node, 4, A100).build();
    // Some of the jobs schedd places here, plus an id it may never have heard of.
    let mut running: Vec<u64> = rec
        .jobs
        .values()
        .filter(|j| j.runs_on(node))
        .enumerate()
        .filter(|(i, _)| keep & (1 << (i % 8)) != 0)
        .map(|(_, j)| j.id.0)
        .collect();
    running.push(junk % 50);
    Registration {
        name: node.into(),
        address: "10.0.0.1".into(),
        cpus: inventory.cpus,
        mem_mib: inventory.mem_mib,
        gpus: inventory.gpus.to_vec(),
        features: vec![],
        running_jobs: running,
        finished: vec![],
        login: false,
        fence_after_secs: 0,
    }
}

fn step(rec: &mut Records, history: &[Records], op: &Op, now: i64) {
    let tiers = default_tiers();
    let effects = match op {
        Op::StalePass { back } => {
            let old = &history[history.len().saturating_sub(*back)];
            let snap = Snapshot {
                jobs: &old.jobs,
                nodes: &old.nodes,
            };
            let plan = schedule(&snap, &Policy { tiers: &tiers }, now);
            let (plan, _) = rec.still_valid(plan);
            let payload = |_: JobId| Some(Arc::new(Payload::default()));
            rec.apply_plan(&plan, &payload, now)
        }
        Op::Submit { gpus, nodes, tier } => {
            let tier = ["low", "medium", "high", "critical"][*tier as usize];
            let dir = |id: JobId| format!("/ckpt/{id}");
            let new = NewJob {
                owner: owner(false),
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
            let (effects, job) = rec.submit(new, now);
            rec.commit(effects);
            rec.insert_job(job);
            return;
        }
        Op::Pass => {
            let snap = Snapshot {
                jobs: &rec.jobs,
                nodes: &rec.nodes,
            };
            let plan = schedule(&snap, &Policy { tiers: &tiers }, now);
            let payload = |_: JobId| Some(Arc::new(Payload::default()));
            rec.apply_plan(&plan, &payload, now)
        }
        Op::Started { pick: n } => {
            let Some(id) = pick(rec, *n) else { return };
            let Some(node) = rec.jobs[&id].alloc.first().map(|a| a.node.clone()) else {
                return;
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
        } => {
            let Some(id) = pick(rec, *n) else { return };
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
                ..PartEnd::default()
            };
            rec.job_finished(&node, &end, LIMITS, now)
        }
        Op::Cancel { pick: n, root } => {
            let Some(id) = pick(rec, *n) else { return };
            let none = |_: JobId| Ok(None);
            match rec.cancel(&Caller::local(owner(*root)), &[id.0], "", &none, now) {
                Ok((effects, _)) => effects,
                Err(_) => return,
            }
        }
        Op::Requeue { pick: n, root } => {
            let Some(id) = pick(rec, *n) else { return };
            let none = |_: JobId| Ok(None);
            match rec.requeue(&Caller::local(owner(*root)), id, &none, now) {
                Ok(effects) => effects,
                Err(_) => return,
            }
        }
        Op::Register { node, keep, junk } => {
            let reg = registration(rec, NODES[*node], *keep, *junk);
            rec.register(&reg, LIMITS, now).0
        }
        Op::Silent { node } => {
            let silent: BTreeSet<String> = [NODES[*node].to_string()].into();
            rec.fail_silent(&silent, 0, LIMITS, now)
        }
        Op::Hold { pick: n, hold } => {
            let Some(id) = pick(rec, *n) else { return };
            match rec.hold(&Caller::local(owner(false)), id, *hold, now) {
                Ok(effects) => effects,
                Err(_) => return,
            }
        }
    };
    rec.commit(effects);
}

fn check(rec: &Records) -> Result<(), TestCaseError> {
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
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_after_every_event(ops in proptest::collection::vec(op(), 1..60)) {
        let mut rec = Records {
            jobs: BTreeMap::new(),
            nodes: NODES
                .iter()
                .map(|n| (n.to_string(), NodeBuilder::dgx(n, 4, A100).build()))
                .collect(),
            next_job_id: 1,
            ..Records::default()
        };
        let mut history = vec![rec.clone()];
        // The scheduler's copy, refreshed now and then, must be what a full copy would be.
        let mut copy = super::SchedulerCopy::default();
        for (i, op) in ops.iter().enumerate() {
            step(&mut rec, &history, op, T0 + i as i64 * 1_000);
            check(&rec)?;
            if i % 3 == 0 {
                rec.refresh_copy(&mut copy);
                let full: BTreeMap<JobId, Job> = rec
                    .jobs
                    .iter()
                    .filter(|(_, j)| j.state == JobState::Pending || j.state.holds_resources())
                    .map(|(id, j)| (*id, Job { reason: String::new(), ..j.clone() }))
                    .collect();
                let refreshed: BTreeMap<JobId, Job> = copy
                    .jobs
                    .iter()
                    .map(|(id, j)| (*id, Job { reason: String::new(), ..j.clone() }))
                    .collect();
                prop_assert_eq!(refreshed, full, "the refreshed copy is the records");
            }
            history.push(rec.clone());
        }
    }
}
