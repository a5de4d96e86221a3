//! The simulation proper: schedd's state machine (`Records`) and scheduling core driven by a
//! virtual clock, with simulated agents (see `agents.rs`) instead of processes.
//!
//! Every event goes through schedd's own reactor (`state::reactor`), as in schedd's shell,
//! with the virtual clock, a journal that drops the store's change, an observer that keeps
//! what happened to the workload's jobs and runs (`outcome::Seen`), and an outbox whose
//! commands go to the simulated agents once the event is committed.
//!
//! A scheduling pass is `shell::scheduling::schedule_once` without the lock and the thread:
//! the scheduler's copy brought up to date, the share table and factors,
//! `core::schedule_with`, the reasons that changed, `Records::apply_plan` (and
//! `Records::still_valid`, which cannot cut a plan made and applied in one step: checked in
//! debug builds, skipped in release ones).
//!
//! Events are kept in one queue ordered by (virtual time, sequence number), so that two events
//! at the same instant are handled in the order they were caused. A pass runs once all events
//! of an instant are handled, if one of them woke the scheduler (as schedd's loop wakes on a
//! `Notify`); at most one pass per instant: a wake after the instant's pass runs the next one
//! 1 ms later (schedd rests as long as the pass took before the next).

use crate::agents::{Agents, Delivery};
use crate::outcome::{Decision, JobOutcome, Outcome, Seen};
use crate::workload::{SimNode, Workload};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::time::Millis;
use ysched_common::{Caller, Config, Gpu, GpuLink, JobId, JobState, Owner, PcieRelation};
use ysched_schedd::core::{self, Backfill, FairShare, Policy, Snapshot, Topologies};
use ysched_schedd::fair_share::{share_table, UsageBook};
use ysched_schedd::state::agent_events::{Limits, Registration};
use ysched_schedd::state::lifecycle::PartEnd;
use ysched_schedd::state::plan::describe_alloc;
use ysched_schedd::state::reactor::{At, NoJournal, Ports, Reactor};
use ysched_schedd::state::submission::NewJob;
use ysched_schedd::state::{AgentCommand, Effects, Records, SchedulerCopy};
use ysched_schedd::store::Payload;
use ysched_schedd::store::Room;
use ysched_schedd::submit::{self, ValidSubmit};

/// The virtual clock's start: Monday 2026-01-05 00:00:00 UTC. Workload times are offsets
/// from it.
pub const EPOCH_MS: Millis = 1_767_571_200_000;

/// A policy: a config, and whether fair share orders each tier (schedd always does; the
/// baselines `fifo`, `tiers` and `preempt` do not, to show what each step adds).
#[derive(Debug, Clone)]
pub struct PolicySpec {
    pub name: String,
    pub config: Config,
    pub fair_share: bool,
}

/// What happens at a virtual instant.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// The workload's job with this index is submitted.
    Submit(usize),
    /// A simulated agent's report or timer (see `agents.rs`).
    Agent(crate::agents::AgentEvent),
    /// Something that changes with time alone (a victim passing its tier's `min_runtime`),
    /// or a wake deferred to the next millisecond.
    Wake,
}

/// The event queue: (time, sequence) -> event.
#[derive(Default)]
pub(crate) struct Queue {
    events: BTreeMap<(Millis, u64), Event>,
    seq: u64,
}

impl Queue {
    pub(crate) fn push(&mut self, at: Millis, event: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), event);
    }

    fn next_time(&self) -> Option<Millis> {
        self.events.keys().next().map(|(t, _)| *t)
    }

    fn pop(&mut self) -> Option<(Millis, Event)> {
        self.events.pop_first().map(|((t, _), e)| (t, e))
    }
}

/// One simulation: the records, the scheduler's state between passes, the agents.
struct Sim<'w> {
    workload: &'w Workload,
    policy: &'w PolicySpec,
    limits: Limits,
    rec: Records,
    copy: SchedulerCopy,
    /// Kept between passes, as schedd's scheduling loop keeps its own.
    topologies: Topologies,
    /// For the submit-time check, as the shell keeps a separate one.
    submit_topologies: Topologies,
    /// schedd's reactor: every event goes through it, with no store.
    reactor: Reactor,
    queue: Queue,
    agents: Agents,
    payload: Arc<Payload>,
    now: Millis,
    wake: bool,
    last_pass: Option<Millis>,
    /// Wakes already queued for time-only conditions.
    wakes_queued: BTreeSet<Millis>,
    uids: BTreeMap<String, u32>,
    /// What the events show of the workload's jobs.
    seen: Seen,
}

/// Runs `workload` under `policy`. Deterministic: the same workload and policy give the same
/// outcome. (Randomness belongs to the workload generators, which take the seed.)
pub fn simulate(workload: &Workload, policy: &PolicySpec) -> Outcome {
    let config = &policy.config;
    const WEEK_MS: i64 = 7 * 24 * 3_600_000;
    let half_life = config.fair_share_half_life_ms().unwrap_or(WEEK_MS);
    let mut sim = Sim {
        workload,
        policy,
        limits: Limits {
            max_requeues: config.scheduler.max_requeues,
            max_launch_attempts: config.scheduler.max_launch_attempts,
        },
        // As a fresh store starts.
        rec: Records::new(BTreeMap::new(), BTreeMap::new(), 1, Default::default()),
        copy: SchedulerCopy::default(),
        topologies: Topologies::default(),
        submit_topologies: Topologies::default(),
        reactor: Reactor::new(UsageBook::new(half_life, EPOCH_MS), Default::default()),
        queue: Queue::default(),
        agents: Agents::default(),
        payload: Arc::new(Payload {
            script: "#!/bin/sh\n# simulated by ysim\n".into(),
            env: BTreeMap::new(),
        }),
        now: EPOCH_MS,
        wake: false,
        last_pass: None,
        wakes_queued: BTreeSet::new(),
        uids: BTreeMap::new(),
        seen: Seen {
            index: BTreeMap::new(),
            out: Outcome {
                jobs: vec![JobOutcome::default(); workload.jobs.len()],
                ..Outcome::default()
            },
        },
    };
    for node in &workload.nodes {
        sim.register(node);
    }
    for (i, job) in workload.jobs.iter().enumerate() {
        sim.queue.push(EPOCH_MS + job.submit_ms, Event::Submit(i));
    }
    sim.run();
    sim.finish()
}

/// The GPUs a node's agent registers: `n` of `model`, each NVLinked to every other one (or to
/// none), PCIe across NUMA nodes (`SYS`), as `noded --fake-gpus` reports a uniform box.
pub fn node_gpus(node: &SimNode) -> Vec<Gpu> {
    (0..node.gpus)
        .map(|i| {
            let peers: Vec<u32> = (0..node.gpus).filter(|j| *j != i).collect();
            Gpu {
                index: i,
                uuid: format!("GPU-{}-{i:04}", node.name),
                model: node.model.clone(),
                memory_mib: 81920,
                pci_bus_id: String::new(),
                numa_node: None,
                nvlink: if node.nvlink {
                    peers.clone()
                } else {
                    Vec::new()
                },
                links: peers
                    .iter()
                    .map(|&peer| GpuLink {
                        peer,
                        pcie: PcieRelation::Sys,
                        nvlinks: u32::from(node.nvlink),
                    })
                    .collect(),
            }
        })
        .collect()
}

impl Sim<'_> {
    fn run(&mut self) {
        while let Some(t) = self.queue.next_time() {
            self.now = t;
            while self.queue.next_time() == Some(t) {
                let (_, event) = self.queue.pop().expect("an event");
                self.handle(event);
            }
            if self.wake {
                self.wake = false;
                if self.last_pass == Some(t) {
                    self.queue.push(t + 1, Event::Wake);
                } else {
                    self.last_pass = Some(t);
                    self.pass();
                }
            }
        }
        self.seen.out.end_ms = self.now - EPOCH_MS;
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Submit(i) => self.submit(i),
            Event::Wake => {
                self.wakes_queued.remove(&self.now);
                self.wake = true;
            }
            Event::Agent(ev) => {
                let jobs = &self.workload.jobs;
                let index = &self.seen.index;
                let spec_of = |id: u64| &jobs[index[&JobId(id)]];
                match self.agents.handle(ev, self.now, &spec_of) {
                    Delivery::Nothing => {}
                    Delivery::Started { node, job } => {
                        self.run_event(|rec, now| rec.job_started(&node, job, 1000, now));
                    }
                    Delivery::Checkpoint { node, job } => {
                        // A heartbeat's checkpoint time: memory only, no event.
                        self.rec
                            .note_checkpoints(&node, &[(job, self.now)], self.now);
                    }
                    Delivery::Finished { node, end, lost } => {
                        if let Some((restart, lost_gpu_ms)) = lost {
                            let i = self.seen.index[&JobId(end.job_id)];
                            self.seen.out.jobs[i]
                                .lost_gpu_ms
                                .insert(restart, lost_gpu_ms);
                        }
                        let limits = self.limits;
                        self.run_event(|rec, now| rec.job_finished(&node, &end, limits, now));
                    }
                }
                for (at, ev) in self.agents.take_scheduled() {
                    self.queue.push(at, Event::Agent(ev));
                }
            }
        }
    }

    /// Runs an event through schedd's reactor, with no store: usage records, commit, fair
    /// share, then the commands to the agents. Returns the submit's jobs, if it was one.
    fn run_event(
        &mut self,
        event: impl FnOnce(&Records, Millis) -> Effects,
    ) -> Vec<ysched_common::Job> {
        let mut commands = Vec::new();
        let ports = Ports {
            clock: &At(self.now),
            journal: &mut NoJournal,
            observer: &mut self.seen,
            outbox: &mut commands,
        };
        let done = self
            .reactor
            .run(&mut self.rec, ports, Room::Cluster, |rec, now| {
                Ok((event(rec, now), ()))
            })
            .expect("no journal refuses");
        self.wake |= done.wake;
        for (node, command) in commands {
            self.deliver(&node, command);
        }
        done.submitted
    }

    fn deliver(&mut self, node: &str, command: AgentCommand) {
        let jobs = &self.workload.jobs;
        let index = &self.seen.index;
        let spec_of = |id: u64| &jobs[index[&JobId(id)]];
        self.agents.command(node, command, self.now, &spec_of);
        for (at, ev) in self.agents.take_scheduled() {
            self.queue.push(at, Event::Agent(ev));
        }
    }

    fn register(&mut self, node: &SimNode) {
        let reg = Registration {
            name: node.name.clone(),
            address: format!("sim-{}", node.name),
            cpus: node.cpus,
            mem_mib: node.mem_mib,
            gpus: node_gpus(node),
            ..Registration::default()
        };
        let limits = self.limits;
        self.run_event(|rec, now| rec.register(&reg, limits, now).0);
    }

    fn owner(&mut self, user: &str, account: &str) -> Owner {
        let next = 1000 + self.uids.len() as u32;
        let uid = if user == "root" {
            0
        } else {
            *self.uids.entry(user.to_string()).or_insert(next)
        };
        Owner {
            uid,
            gid: uid,
            user: user.to_string(),
            groups: vec![account.to_string()],
        }
    }

    /// A submit, as `client_api` and `Cluster::submit` do it: validated against the config
    /// (by an administrator: tier permissions are not simulated), checked against the nodes,
    /// then `Records::submit`.
    fn submit(&mut self, i: usize) {
        let job = &self.workload.jobs[i];
        let config = &self.policy.config;
        let request = ysched_common::SubmitRequest {
            name: job.name.clone(),
            tier: job.tier.clone(),
            gpus: job.gpus,
            gpu_type: job.gpu_types.join("|"),
            cpus: job.cpus,
            mem_mib: job.mem_mib,
            time_limit_secs: job.time_limit_secs.unwrap_or(0),
            grace_secs: job.grace_secs,
            account: job.account.clone(),
            workdir: "/sim".into(),
            script: self.payload.script.clone(),
            nodes: job.nodes,
            ..Default::default()
        };
        let owner = self.owner(&job.user, &job.account);
        let caller = Caller {
            owner: owner.clone(),
            host: None,
            admin: true,
        };
        let refuse = |out: &mut Outcome, why: String| out.jobs[i].refused = Some(why);
        let valid = match submit::validate(request, &caller, config) {
            Ok(v) => v,
            Err(e) => return refuse(&mut self.seen.out, e.to_string()),
        };
        let ValidSubmit {
            spec,
            payload,
            grace_secs,
            ..
        } = valid;
        if let Err(e) =
            core::check_satisfiable_with(&spec, self.rec.nodes(), &mut self.submit_topologies)
        {
            return refuse(&mut self.seen.out, e);
        }
        let tier_value = config.tier(&spec.tier).map(|t| t.value).unwrap_or(0);
        self.seen.out.jobs[i].tier = Some(spec.tier.clone());
        let dir = |id: JobId| format!("/sim/checkpoints/{}", id.0);
        let new = NewJob {
            owner,
            from_host: None,
            spec,
            payload,
            grace_secs,
            tier_value,
            checkpoint_dir: &dir,
        };
        let jobs = self.run_event(|rec, now| rec.submit(new, now));
        for j in &jobs {
            self.seen.index.insert(j.id, i);
            self.seen.out.jobs[i].id = Some(j.id);
        }
        // No flush to wait for: durable at once.
        self.reactor.submit_durable(&mut self.rec, jobs);
    }

    /// `Cluster::schedule_once`, without the lock: the same inputs to the same functions.
    ///
    /// A pass with no job pending is skipped: its plan could only be empty (placements and
    /// evictions are made for pending jobs), so skipping it changes nothing but the time.
    fn pass(&mut self) {
        if !self
            .rec
            .jobs()
            .values()
            .any(|j| j.state == JobState::Pending)
        {
            return;
        }
        self.seen.out.passes += 1;
        let now = self.now;
        self.rec.refresh_copy(&mut self.copy);
        let config = &self.policy.config;
        let factors = if self.policy.fair_share {
            share_table(
                &self.reactor.usage_book(),
                &config.accounts,
                &self.copy.jobs,
                now,
            )
            .factors()
        } else {
            FairShare::none().clone()
        };
        let policy = Policy {
            tiers: &config.tiers,
            fair_share: &factors,
            backfill: Backfill::configured(&config.scheduler),
        };
        let snap = Snapshot::new(&self.copy.jobs, self.rec.nodes());
        let plan = core::schedule_changes(&snap, &policy, now, &mut self.topologies);
        // The plan was made from the records as they are (no request can come between the
        // pass and its apply here), so `still_valid` could only keep all of it: checked in
        // debug builds, skipped in release ones, where it is an eighth of a large pass.
        #[cfg(debug_assertions)]
        {
            let (kept, dropped) = self.rec.still_valid(plan.clone());
            assert!(
                !dropped
                    && kept.placements == plan.placements
                    && kept.evictions == plan.evictions
                    && kept.pending_reasons == plan.pending_reasons,
                "still_valid cut a fresh plan"
            );
        }
        for ev in &plan.evictions {
            self.seen.out.decisions.push(Decision::Evict {
                at: now - EPOCH_MS,
                victim: ev.victim.0,
                preemptor: ev.preemptor.0,
                node: ev.node.clone(),
            });
        }
        for p in &plan.placements {
            let restart = self.rec.jobs().get(&p.job).map_or(0, |j| j.restart_count);
            self.seen.out.decisions.push(Decision::Start {
                at: now - EPOCH_MS,
                job: p.job.0,
                restart,
                alloc: describe_alloc(&p.alloc),
            });
            if let Some(&i) = self.seen.index.get(&p.job) {
                let o = &mut self.seen.out.jobs[i];
                o.first_start.get_or_insert(now - EPOCH_MS);
            }
        }
        let payload = Arc::clone(&self.payload);
        let lookup = move |_: JobId| Some(Arc::clone(&payload));
        self.run_event(|rec, now| rec.apply_plan(&plan, &lookup, now));
        self.wake_for_min_runtime();
    }

    /// schedd looks again at least once a second, which catches a victim passing its tier's
    /// `min_runtime`; here that instant gets a pass of its own, when a job waits.
    fn wake_for_min_runtime(&mut self) {
        let tiers = &self.policy.config.tiers;
        if tiers.values().all(|t| t.min_runtime == 0) {
            return;
        }
        let waiting = self
            .rec
            .jobs()
            .values()
            .any(|j| j.state == JobState::Pending);
        if !waiting {
            return;
        }
        let next = self
            .rec
            .jobs()
            .values()
            .filter(|j| j.state == JobState::Running && j.stop.is_none())
            .filter_map(|j| {
                let min = tiers.get(&j.spec.tier)?.min_runtime;
                let at = j.start_time? + (min as i64) * 1000;
                (min > 0 && at > self.now).then_some(at)
            })
            .min();
        if let Some(at) = next {
            if self.wakes_queued.insert(at) {
                self.queue.push(at, Event::Wake);
            }
        }
    }

    fn finish(mut self) -> Outcome {
        // Jobs still active never got to run to the end (nothing left could start them).
        for (id, job) in self.rec.jobs() {
            if let Some(&i) = self.seen.index.get(id) {
                self.seen.out.jobs[i].restarts = job.restart_count;
            }
        }
        self.seen.out
    }
}

/// The `PartEnd` an agent reports, as the simulated agents build it.
pub(crate) fn part_end(job_id: u64, restart: u32, now: Millis) -> PartEnd {
    PartEnd {
        job_id,
        exit_code: Some(0),
        signal: None,
        end_time_ms: now,
        timed_out: false,
        term_time_ms: 0,
        killed: false,
        error: String::new(),
        checkpoint_saved: false,
        restart_count: restart,
        out_of_memory: false,
        fenced: false,
        node_fault: false,
    }
}
