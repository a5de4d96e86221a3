//! Prometheus metrics: the only module that knows `prometheus-client`.
//!
//! Two kinds of figures:
//! - **Counters and histograms**, moved where things happen: the shell calls
//!   [`Metrics::observe_jobs`] with each event's new job versions just before it takes them into
//!   memory (starts and their queue wait, preemptions, ends), [`Metrics::submitted`] once a
//!   submit is durable, [`Metrics::pass`] after each scheduling pass, and
//!   [`Metrics::checkpoints_saved`] for preempted runs whose last end report said a checkpoint
//!   was written. Each costs a few atomic additions and small map updates per changed job:
//!   cheap under the state lock (which is always taken before this module's own locks).
//! - **Gauges**: jobs by tier and state and the GPUs they hold are kept up to date by the same
//!   calls ([`ActiveJobs`]: a scrape never walks the jobs, of which there may be a hundred
//!   thousand); nodes and sessions are counted at scrape ([`Metrics::census`], one pass over
//!   the nodes under the lock), and [`Metrics::render`] sets and encodes them without it.
//!
//! Every name starts with `ysched_` and carries its unit (`_seconds`); counters end in
//! `_total`. Label values are tier names, job states, node names and GPU models: bounded by
//! the config and the cluster.
//!
//! Here: the registry, its families and what moves them ([`Metrics`]), and the tiers of
//! preempted runs that saved a checkpoint; `active`: the job counts kept event by event
//! ([`ActiveJobs`]); `census`: what a scrape sets the gauges from ([`Census`]).

use crate::state::agent_events::AgentReport;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use ysched_common::{Job, JobState, Node, StopReason, StopRequest};

mod active;
mod census;

pub use active::ActiveJobs;
use active::ACTIVE;
pub use census::{Census, GpuCount};

/// Queue wait (seconds): from a tenth of a second on an idle cluster to a week.
const WAIT_BUCKETS: [f64; 18] = [
    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0,
    28800.0, 86400.0, 259200.0, 604800.0,
];

/// A scheduling pass (seconds): microseconds on a small queue, up to seconds on a huge one.
const PASS_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A submit (seconds): dominated by the store's flush.
const SUBMIT_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabel {
    tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierStateLabels {
    tier: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeModelLabels {
    node: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS)
}

/// The exposition format a scraper asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    Text,
    /// OpenMetrics 1.0 text, for scrapers that ask for it in `Accept`.
    OpenMetrics,
}

impl Format {
    /// The format for an `Accept` header: OpenMetrics when the scraper names it, else text.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// schedd's metrics registry. Owned by the `Cluster`; scraped by the HTTP endpoint.
pub struct Metrics {
    registry: Registry,
    tiers: Vec<String>,
    submitted: Family<TierLabel, Counter>,
    started: Family<TierLabel, Counter>,
    ended: Family<TierStateLabels, Counter>,
    queue_wait: HistogramFamily<TierLabel>,
    preemptions: Family<TierLabel, Counter>,
    preempted_runs_ended: Family<TierLabel, Counter>,
    checkpoint_saves: Family<TierLabel, Counter>,
    pass_duration: Histogram,
    submit_duration: Histogram,
    jobs: Family<TierStateLabels, Gauge>,
    gpus: Family<NodeModelLabels, Gauge>,
    gpus_allocated: Family<NodeModelLabels, Gauge>,
    gpus_draining: Family<NodeModelLabels, Gauge>,
    gpus_out_of_service: Family<NodeModelLabels, Gauge>,
    gpu_failures: Family<NodeLabel, Counter>,
    node_up: Family<NodeLabel, Gauge>,
    agent_sessions: Family<KindLabel, Gauge>,
    /// The jobs in memory, counted event by event.
    active: Mutex<ActiveJobs>,
    /// One scrape at a time sets the gauges and encodes them.
    scrape: Mutex<()>,
}

impl Metrics {
    /// A registry whose per-tier series exist (at zero) for every configured tier from the
    /// start, so that `rate()` and dashboards see them before the first event.
    pub fn new<'a>(tiers: impl IntoIterator<Item = &'a str>) -> Metrics {
        let mut registry = Registry::with_prefix("ysched");
        let m = Metrics {
            tiers: tiers.into_iter().map(str::to_string).collect(),
            submitted: Family::default(),
            started: Family::default(),
            ended: Family::default(),
            queue_wait: Family::new_with_constructor(wait_histogram),
            preemptions: Family::default(),
            preempted_runs_ended: Family::default(),
            checkpoint_saves: Family::default(),
            pass_duration: Histogram::new(PASS_BUCKETS),
            submit_duration: Histogram::new(SUBMIT_BUCKETS),
            jobs: Family::default(),
            gpus: Family::default(),
            gpus_allocated: Family::default(),
            gpus_draining: Family::default(),
            gpus_out_of_service: Family::default(),
            gpu_failures: Family::default(),
            node_up: Family::default(),
            agent_sessions: Family::default(),
            active: Mutex::default(),
            scrape: Mutex::new(()),
            registry: Registry::default(),
        };
        registry.register(
            "jobs",
            "Jobs not yet finished, by tier and state (PENDING, HELD, RUNNING, PREEMPTING)",
            m.jobs.clone(),
        );
        registry.register(
            "jobs_submitted",
            "Jobs accepted by submit, by tier",
            m.submitted.clone(),
        );
        registry.register(
            "jobs_started",
            "Runs started (jobs placed on nodes, restarts included), by tier",
            m.started.clone(),
        );
        registry.register(
            "jobs_ended",
            "Jobs that reached a final state, by tier and that state",
            m.ended.clone(),
        );
        registry.register_with_unit(
            "queue_wait",
            "Time from the start of a job's wait (submit, release or requeue) to the start of \
             its run, observed at the start, by tier",
            Unit::Seconds,
            m.queue_wait.clone(),
        );
        registry.register(
            "preemptions",
            "Running jobs evicted for a higher tier, by the tier of the victim",
            m.preemptions.clone(),
        );
        registry.register(
            "preempted_runs_ended",
            "Runs of evicted jobs that have ended (requeued or PREEMPTED), by the tier of the \
             victim",
            m.preempted_runs_ended.clone(),
        );
        registry.register(
            "preemption_checkpoint_saves",
            "Runs of evicted jobs whose end report said a checkpoint was saved during the \
             grace, by the tier of the victim",
            m.checkpoint_saves.clone(),
        );
        registry.register_with_unit(
            "scheduling_pass_duration",
            "Duration of one scheduling pass (copy, decision off the lock, apply)",
            Unit::Seconds,
            m.pass_duration.clone(),
        );
        registry.register_with_unit(
            "submit_duration",
            "Time schedd took to accept a submit, until it was durable",
            Unit::Seconds,
            m.submit_duration.clone(),
        );
        registry.register("gpus", "GPUs registered, by node and model", m.gpus.clone());
        registry.register(
            "gpus_allocated",
            "GPUs held by running or preempting jobs, by node and model",
            m.gpus_allocated.clone(),
        );
        registry.register(
            "gpus_draining",
            "GPUs of nodes set to drain (draining or drained), by node and model",
            m.gpus_draining.clone(),
        );
        registry.register(
            "gpus_out_of_service",
            "GPUs out of service (found failing by their node, or taken out by an \
             administrator) until an administrator returns them, by node and model",
            m.gpus_out_of_service.clone(),
        );
        registry.register(
            "gpu_failures",
            "GPUs taken out of service because their node's health monitor found them failing \
             (XID errors, uncorrectable ECC errors, retired pages pending, lost by the driver), \
             by node",
            m.gpu_failures.clone(),
        );
        registry.register(
            "node_up",
            "1 when the node's agent has a live session, else 0",
            m.node_up.clone(),
        );
        registry.register(
            "agent_sessions",
            "Connected agent sessions, by kind (compute or login)",
            m.agent_sessions.clone(),
        );
        let m = Metrics { registry, ..m };
        for tier in &m.tiers {
            let t = TierLabel { tier: tier.clone() };
            for family in [
                &m.submitted,
                &m.started,
                &m.preemptions,
                &m.preempted_runs_ended,
                &m.checkpoint_saves,
            ] {
                let _ = family.get_or_create(&t);
            }
            let _ = m.queue_wait.get_or_create(&t);
            for state in JobState::ALL.into_iter().filter(|s| s.is_terminal()) {
                let _ = m.ended.get_or_create(&TierStateLabels {
                    tier: tier.clone(),
                    state: state.as_str(),
                });
            }
        }
        m
    }

    /// The jobs recovered from the store at start (active ones: not yet finished).
    pub fn recovered<'a>(&self, jobs: impl IntoIterator<Item = &'a Job>) {
        *self.active() = ActiveJobs::count(jobs);
    }

    /// A submitted job is durable and enters memory; its submit took `took`.
    pub fn submitted(&self, job: &Job, took: Duration) {
        self.submitted
            .get_or_create(&tier_label(&job.spec.tier))
            .inc();
        self.submit_duration.observe(took.as_secs_f64());
        self.active().add(job);
    }

    /// One submit of `jobs` (one job, or the tasks of an array) took `took`: each job counts
    /// as submitted, the submit's time is observed once.
    pub fn submitted_jobs(&self, jobs: &[Job], took: Duration) {
        let Some(first) = jobs.first() else {
            return;
        };
        self.submitted
            .get_or_create(&tier_label(&first.spec.tier))
            .inc_by(jobs.len() as u64);
        self.submit_duration.observe(took.as_secs_f64());
        let mut active = self.active();
        for job in jobs {
            active.add(job);
        }
    }

    fn active(&self) -> std::sync::MutexGuard<'_, ActiveJobs> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `n` GPUs of `node` were found failing and taken out of service.
    pub fn gpus_failed(&self, node: &str, n: usize) {
        if n > 0 {
            self.gpu_failures
                .get_or_create(&NodeLabel {
                    node: node.to_string(),
                })
                .inc_by(n as u64);
        }
    }

    /// A scheduling pass took `took`.
    pub fn pass(&self, took: Duration) {
        self.pass_duration.observe(took.as_secs_f64());
    }

    /// What an event did to jobs: `after` are its new job versions (a later version of a job
    /// wins), `before` the records they replace. Call it just before the records are taken
    /// into memory, once the event's batch is written.
    pub fn observe_jobs(&self, before: &crate::core::JobMap, after: &[Job]) {
        if after.is_empty() {
            return;
        }
        let mut active = self.active();
        for post in last_versions(after) {
            let pre = before.get(&post.id);
            if let Some(pre) = pre {
                active.remove(pre);
            }
            active.add(post);
            let tier = || tier_label(&post.spec.tier);
            if post.state.holds_resources() && !pre.is_some_and(|p| p.state.holds_resources()) {
                self.started.get_or_create(&tier()).inc();
                if let Some(start) = post.start_time {
                    let queued = post.queued_at.unwrap_or(post.submit_time);
                    let wait = (start - queued).max(0) as f64 / 1000.0;
                    self.queue_wait.get_or_create(&tier()).observe(wait);
                }
            }
            let was_preempted = pre.is_some_and(|p| preempting(p.stop.as_deref()));
            if preempting(post.stop.as_deref()) && !was_preempted {
                self.preemptions.get_or_create(&tier()).inc();
            }
            if was_preempted && !post.state.holds_resources() {
                self.preempted_runs_ended.get_or_create(&tier()).inc();
            }
            if post.state.is_terminal() && !pre.is_some_and(|p| p.state.is_terminal()) {
                self.ended
                    .get_or_create(&TierStateLabels {
                        tier: post.spec.tier.clone(),
                        state: post.state.as_str(),
                    })
                    .inc();
            }
        }
    }

    /// Preempted runs (of jobs in these tiers, one entry per run) that saved a checkpoint:
    /// see [`preempted_checkpoint_saves`].
    pub fn checkpoints_saved(&self, tiers: &[String]) {
        for tier in tiers {
            self.checkpoint_saves.get_or_create(&tier_label(tier)).inc();
        }
    }

    /// What the gauges show now: the job counts kept by events, and one pass over `nodes`.
    /// `sessions`: whether each live agent session is a login agent's.
    pub fn census(
        &self,
        nodes: &BTreeMap<String, Node>,
        sessions: impl IntoIterator<Item = bool>,
    ) -> Census {
        Census::count(&self.active(), nodes, sessions)
    }

    /// Sets the gauges from `census` and encodes every metric in `format`.
    pub fn render(&self, census: &Census, format: Format) -> String {
        let _one_at_a_time = self.scrape.lock().unwrap_or_else(|p| p.into_inner());
        self.jobs.clear();
        for tier in &self.tiers {
            for state in ACTIVE {
                let _ = self.jobs.get_or_create(&TierStateLabels {
                    tier: tier.clone(),
                    state: state.as_str(),
                });
            }
        }
        for ((tier, state), n) in &census.jobs {
            self.jobs
                .get_or_create(&TierStateLabels {
                    tier: tier.clone(),
                    state: state.as_str(),
                })
                .set(*n as i64);
        }
        for family in [
            &self.gpus,
            &self.gpus_allocated,
            &self.gpus_draining,
            &self.gpus_out_of_service,
        ] {
            family.clear();
        }
        for g in &census.gpus {
            let labels = NodeModelLabels {
                node: g.node.clone(),
                model: g.model.clone(),
            };
            self.gpus.get_or_create(&labels).set(g.total.into());
            self.gpus_allocated
                .get_or_create(&labels)
                .set(g.allocated.into());
            self.gpus_draining
                .get_or_create(&labels)
                .set(g.draining.into());
            self.gpus_out_of_service
                .get_or_create(&labels)
                .set(g.out_of_service.into());
        }
        self.node_up.clear();
        for (node, _) in &census.nodes_up {
            // Every node's failure count exists (at zero) before its first failure.
            let _ = self
                .gpu_failures
                .get_or_create(&NodeLabel { node: node.clone() });
        }
        for (node, up) in &census.nodes_up {
            self.node_up
                .get_or_create(&NodeLabel { node: node.clone() })
                .set(i64::from(*up));
        }
        for (kind, n) in [
            ("compute", census.compute_sessions),
            ("login", census.login_sessions),
        ] {
            self.agent_sessions
                .get_or_create(&KindLabel { kind })
                .set(n as i64);
        }
        let mut out = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail.
        let _ = match format {
            Format::Text => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            }
            Format::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut out, &self.registry)
            }
        };
        out
    }
}

fn tier_label(tier: &str) -> TierLabel {
    TierLabel {
        tier: tier.to_string(),
    }
}

fn preempting(stop: Option<&StopRequest>) -> bool {
    matches!(
        stop,
        Some(StopRequest {
            reason: StopReason::Preempt { .. },
            ..
        })
    )
}

/// The last version of each job in `after`, in no particular order.
fn last_versions(after: &[Job]) -> impl Iterator<Item = &Job> {
    let mut seen = BTreeSet::new();
    after.iter().rev().filter(move |j| seen.insert(j.id))
}

/// Of the preempted runs that an agents' report event ends (`after`: its new job versions;
/// `before`: the records they replace), the tiers of those whose last end report in `reports`
/// says a checkpoint was saved: the run's last part to end decides, as in
/// `lifecycle::part_ended`. A preempted run that ends otherwise (its node lost) saved none.
/// A run is preempted while its stop request is a preemption (a cancel during the grace
/// replaces it) and ends when its job holds no resources any more.
pub fn preempted_checkpoint_saves(
    before: &crate::core::JobMap,
    after: &[Job],
    reports: &[(String, AgentReport)],
) -> Vec<String> {
    let mut saved = Vec::new();
    for post in last_versions(after) {
        let Some(pre) = before.get(&post.id) else {
            continue;
        };
        if !preempting(pre.stop.as_deref()) || post.state.holds_resources() {
            continue;
        }
        let last_end = reports.iter().rev().find_map(|(_, r)| match r {
            AgentReport::Finished(end)
                if end.job_id == pre.id.0 && end.restart_count == pre.restart_count =>
            {
                Some(end.checkpoint_saved)
            }
            _ => None,
        });
        if last_end == Some(true) {
            saved.push(pre.spec.tier.clone());
        }
    }
    saved
}

#[cfg(test)]
mod tests;
