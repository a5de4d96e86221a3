//! Usage reports (`yctl report`) as a pure function of recorded runs, running jobs' usage so
//! far, the window and the cluster's size: no store, no lock, no clock (`now` is a parameter).
//! The shell feeds it from a scan of the store's `usage` tree on a blocking thread.
//!
//! What counts where, for a window `[from, to)` (its end taken as `now` when later):
//! - GPU and CPU time: the part of every run inside the window, whether the run ended (a run
//!   that began before `from` or ended after `to` is clipped) or still goes on;
//! - runs, outcomes, restarts, preemptions, checkpoints saved and GPU time lost: runs that
//!   *ended* in the window;
//! - waits: runs that *started* in the window (from the start of their wait: submit, release
//!   or requeue, to their start), as p50/p95 by the nearest-rank method;
//! - jobs: the distinct jobs with any of the above in the window;
//! - running: jobs still running now that have time in the window;
//! - capacity: the GPUs of the nodes schedd knows now times the window. An approximation: it
//!   ignores nodes added, removed or down during the window;
//! - days: UTC days, each with its part of the capacity and its GPU time, per group too.
//!
//! With `reports_public = false` a caller who is no administrator sees only the groups made of
//! runs of accounts they may charge (`visible`); the cluster's lines are of every run.

use std::collections::HashMap;
use ysched_common::time::Millis;
use ysched_common::{JobId, RunRecord, RunView};

pub const DAY_MS: Millis = 86_400_000;

/// What a report's groups are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Account,
    User,
    Tier,
}

impl GroupBy {
    /// `account` (also the default, for ""), `user` or `tier`.
    pub fn parse(s: &str) -> Result<GroupBy, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "account" | "accounts" => Ok(GroupBy::Account),
            "user" | "users" => Ok(GroupBy::User),
            "tier" | "tiers" => Ok(GroupBy::Tier),
            other => Err(format!(
                "report by \"{}\": expected account, user or tier",
                ysched_common::text::excerpt(other, 32)
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Account => "account",
            GroupBy::User => "user",
            GroupBy::Tier => "tier",
        }
    }
}

/// What the report is about.
#[derive(Debug, Clone)]
pub struct Params {
    pub from: Millis,
    pub to: Millis,
    /// The report's time: usage after it is not counted (the window ends at `min(to, now)`).
    pub now: Millis,
    pub by: GroupBy,
    /// GPUs of the cluster (the capacity's basis).
    pub gpus: u32,
    /// Tier names, highest first: the order of wait lines (others follow by name).
    pub tier_order: Vec<String>,
    /// Every account is visible (`reports_public`, or an administrator).
    pub all_accounts: bool,
}

/// How long runs of one tier waited to start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waits {
    pub tier: String,
    pub starts: u64,
    pub p50_ms: Millis,
    pub p95_ms: Millis,
    pub max_ms: Millis,
}

/// One account, user or tier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub gpu_ms: u64,
    pub cpu_ms: u64,
    pub jobs: u64,
    pub runs: u64,
    pub running: u64,
    pub restarts: u64,
    pub preemptions_suffered: u64,
    pub preemptions_caused: u64,
    pub checkpoints_saved: u64,
    pub lost_gpu_ms: u64,
    pub waits: Vec<Waits>,
    /// Runs that ended in the window per outcome, by name.
    pub outcomes: Vec<(String, u64)>,
}

/// One UTC day of the window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Day {
    pub start_ms: Millis,
    pub capacity_gpu_ms: u64,
    pub used_gpu_ms: u64,
    /// GPU time per group that day, in the order of the report's groups (zeros left out).
    pub groups: Vec<(String, u64)>,
}

/// The cluster as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterLines {
    pub gpus: u32,
    pub capacity_gpu_ms: u64,
    pub used_gpu_ms: u64,
    pub jobs: u64,
    pub runs: u64,
    pub running: u64,
    pub preemptions: u64,
    pub checkpoints_saved: u64,
    pub lost_gpu_ms: u64,
    pub restarts: u64,
    /// Waits per tier, highest first.
    pub start_latency: Vec<Waits>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub from: Millis,
    pub to: Millis,
    pub by: GroupBy,
    pub generated: Millis,
    pub all_accounts: bool,
    pub cluster: ClusterLines,
    /// Most GPU time first, then by name.
    pub groups: Vec<Group>,
    pub days: Vec<Day>,
}

/// A hasher for job ids (already well spread): a multiply, not SipHash, for a map of a
/// million entries filled in one report.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// No group: the run's account is not visible to the caller.
const HIDDEN: u32 = u32::MAX;

struct GroupAcc {
    name: String,
    gpu_ms: u64,
    cpu_ms: u64,
    jobs: u64,
    runs: u64,
    running: u64,
    restarts: u64,
    suffered: u64,
    caused: u64,
    saved: u64,
    lost_gpu_ms: u64,
    /// Waits by tier index.
    waits: Vec<Vec<Millis>>,
    /// Runs ended per outcome (a handful of names: a list beats a map).
    outcomes: Vec<(String, u64)>,
}

impl GroupAcc {
    fn new(name: &str) -> GroupAcc {
        GroupAcc {
            name: name.to_string(),
            gpu_ms: 0,
            cpu_ms: 0,
            jobs: 0,
            runs: 0,
            running: 0,
            restarts: 0,
            suffered: 0,
            caused: 0,
            saved: 0,
            lost_gpu_ms: 0,
            waits: Vec::new(),
            outcomes: Vec::new(),
        }
    }
}

fn push_wait(waits: &mut Vec<Vec<Millis>>, tier: usize, wait: Millis) {
    if waits.len() <= tier {
        waits.resize_with(tier + 1, Vec::new);
    }
    waits[tier].push(wait);
}

/// Collects runs one at a time (a store scan of a million), then [`Builder::finish`]es the
/// report.
pub struct Builder<'v> {
    p: Params,
    /// End of the window: `min(to, now)`.
    end: Millis,
    visible: Box<dyn FnMut(&str) -> bool + Send + 'v>,
    visible_memo: HashMap<String, bool>,
    groups: Vec<GroupAcc>,
    index: HashMap<String, u32>,
    /// Every job seen, with its group ([`HIDDEN`] for runs the caller may not see): the
    /// jobs' count, and a preemptor's group. A job's account, user and tier are fixed at
    /// submit, so all its runs are in one group.
    jobs: IdMap<u32>,
    /// Tier names by index (a handful).
    tiers: Vec<String>,
    /// Preempted runs that ended in the window: (preemptor, its account).
    victims: Vec<(u64, Option<String>)>,
    cluster: ClusterLines,
    cluster_waits: Vec<Vec<Millis>>,
    first_day: i64,
    /// Per day: GPU time, and per group index.
    days: Vec<(u64, Vec<u64>)>,
}

fn overlap(a: Millis, b: Millis, from: Millis, to: Millis) -> u64 {
    (b.min(to).saturating_sub(a.max(from))).max(0) as u64
}

/// The nearest-rank percentile `p` (0 < p <= 1) of sorted `v` (not empty).
fn percentile(v: &[Millis], p: f64) -> Millis {
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Wait lines of the tiers with starts, highest tier first (by `tier_order`, then name).
fn waits(by_tier: Vec<Vec<Millis>>, names: &[String], tier_order: &[String]) -> Vec<Waits> {
    let mut out: Vec<Waits> = by_tier
        .into_iter()
        .zip(names)
        .filter(|(v, _)| !v.is_empty())
        .map(|(mut v, tier)| {
            v.sort_unstable();
            Waits {
                starts: v.len() as u64,
                p50_ms: percentile(&v, 0.50),
                p95_ms: percentile(&v, 0.95),
                max_ms: *v.last().unwrap_or(&0),
                tier: tier.clone(),
            }
        })
        .collect();
    let rank = |t: &str| tier_order.iter().position(|x| x == t).unwrap_or(usize::MAX);
    out.sort_by(|a, b| rank(&a.tier).cmp(&rank(&b.tier)).then(a.tier.cmp(&b.tier)));
    out
}

impl<'v> Builder<'v> {
    /// A report of `p`; a group shows only runs whose account passes `visible`.
    pub fn new(p: Params, visible: impl FnMut(&str) -> bool + Send + 'v) -> Builder<'v> {
        let end = p.to.min(p.now).max(p.from);
        let first_day = p.from.div_euclid(DAY_MS);
        let n_days = if end > p.from {
            (end - 1).div_euclid(DAY_MS) - first_day + 1
        } else {
            0
        };
        let cluster = ClusterLines {
            gpus: p.gpus,
            capacity_gpu_ms: u64::from(p.gpus).saturating_mul((end - p.from) as u64),
            ..ClusterLines::default()
        };
        Builder {
            end,
            visible: Box::new(visible),
            visible_memo: HashMap::new(),
            groups: Vec::new(),
            index: HashMap::new(),
            jobs: IdMap::default(),
            tiers: Vec::new(),
            victims: Vec::new(),
            cluster,
            cluster_waits: Vec::new(),
            first_day,
            days: (0..n_days).map(|_| (0, Vec::new())).collect(),
            p,
        }
    }

    fn is_visible(&mut self, account: &str) -> bool {
        if self.p.all_accounts {
            return true;
        }
        if let Some(v) = self.visible_memo.get(account) {
            return *v;
        }
        let v = (self.visible)(account);
        self.visible_memo.insert(account.to_string(), v);
        v
    }

    fn group(&mut self, name: &str) -> u32 {
        if let Some(i) = self.index.get(name) {
            return *i;
        }
        self.groups.push(GroupAcc::new(name));
        let i = (self.groups.len() - 1) as u32;
        self.index.insert(name.to_string(), i);
        i
    }

    fn tier(&mut self, name: &str) -> usize {
        match self.tiers.iter().position(|t| t == name) {
            Some(i) => i,
            None => {
                self.tiers.push(name.to_string());
                self.tiers.len() - 1
            }
        }
    }

    /// Adds a run: one recorded when it ended, or (`running`) a running job's usage so far,
    /// ending `now`.
    pub fn add(&mut self, run: &RunRecord, running: bool) {
        self.add_view(&run.view(), running)
    }

    /// [`Builder::add`] for a borrowed run, as a store scan hands them out.
    pub fn add_view(&mut self, run: &RunView<'_>, running: bool) {
        let (from, to, end) = (self.p.from, self.p.to, self.end);
        let inside = overlap(run.start, run.end, from, end);
        let ended_in = !running && run.end >= from && run.end < to;
        let started_in = run.start >= from && run.start < to;
        let touched = inside > 0 || ended_in || started_in || (running && run.start < end);
        if !touched {
            return;
        }
        let gpus = u64::from(run.gpus);
        let gpu_ms = gpus.saturating_mul(inside);
        let cpu_ms = u64::from(run.cpus).saturating_mul(inside);
        let preempted = ended_in && run.preempted_by.is_some();
        let saved = preempted && run.checkpoint_saved;
        let lost_gpu_ms = if preempted && !saved {
            run.lost_gpu_secs.saturating_mul(1000)
        } else {
            0
        };
        let requeued = ended_in && run.outcome == crate::state::usage::REQUEUED;
        let wait = run.wait_ms();
        let tier = if started_in { self.tier(run.tier) } else { 0 };
        // The cluster's lines: every run.
        let c = &mut self.cluster;
        c.used_gpu_ms += gpu_ms;
        c.runs += u64::from(ended_in);
        c.restarts += u64::from(requeued);
        c.running += u64::from(running);
        c.preemptions += u64::from(preempted);
        c.checkpoints_saved += u64::from(saved);
        c.lost_gpu_ms += lost_gpu_ms;
        if started_in {
            push_wait(&mut self.cluster_waits, tier, wait);
        }
        if preempted {
            let by = run.preempted_by.map_or(0, |j| j.0);
            self.victims
                .push((by, run.preemptor_account.map(str::to_string)));
        }
        let gi = match self.jobs.get(&run.job_id.0) {
            Some(gi) => *gi,
            None => {
                let gi = if self.is_visible(run.account) {
                    let key = match self.p.by {
                        GroupBy::Account => run.account,
                        GroupBy::User => run.user,
                        GroupBy::Tier => run.tier,
                    };
                    let gi = self.group(key);
                    self.groups[gi as usize].jobs += 1;
                    gi
                } else {
                    HIDDEN
                };
                self.jobs.insert(run.job_id.0, gi);
                gi
            }
        };
        // Days.
        if inside > 0 {
            let (a, b) = (run.start.max(from), run.end.min(end));
            let first = (a.div_euclid(DAY_MS) - self.first_day).max(0) as usize;
            let last = ((b - 1).div_euclid(DAY_MS) - self.first_day) as usize;
            for d in first..=last.min(self.days.len().saturating_sub(1)) {
                let day_start = (self.first_day + d as i64) * DAY_MS;
                let ms = gpus.saturating_mul(overlap(a, b, day_start, day_start + DAY_MS));
                let day = &mut self.days[d];
                day.0 += ms;
                if gi != HIDDEN {
                    let gi = gi as usize;
                    if day.1.len() <= gi {
                        day.1.resize(gi + 1, 0);
                    }
                    day.1[gi] += ms;
                }
            }
        }
        if gi == HIDDEN {
            return;
        }
        let g = &mut self.groups[gi as usize];
        g.gpu_ms += gpu_ms;
        g.cpu_ms += cpu_ms;
        g.running += u64::from(running);
        if ended_in {
            g.runs += 1;
            g.restarts += u64::from(requeued);
            match g.outcomes.iter_mut().find(|(o, _)| o == run.outcome) {
                Some((_, n)) => *n += 1,
                None => g.outcomes.push((run.outcome.to_string(), 1)),
            }
        }
        g.suffered += u64::from(preempted);
        g.saved += u64::from(saved);
        g.lost_gpu_ms += lost_gpu_ms;
        if started_in {
            push_wait(&mut g.waits, tier, wait);
        }
    }

    pub fn finish(mut self) -> Report {
        // Preemptions caused: the preemptor's group, from its own runs (or, by account, the
        // account the victim's record names).
        for (by, account) in std::mem::take(&mut self.victims) {
            let gi = match self.jobs.get(&by) {
                Some(gi) if *gi != HIDDEN => Some(*gi),
                Some(_) => None,
                None => match (self.p.by, account) {
                    (GroupBy::Account, Some(a)) if self.is_visible(&a) => Some(self.group(&a)),
                    _ => None,
                },
            };
            if let Some(gi) = gi {
                self.groups[gi as usize].caused += 1;
            }
        }
        let tier_order = self.p.tier_order.clone();
        let tiers = std::mem::take(&mut self.tiers);
        let mut groups: Vec<(usize, Group)> = std::mem::take(&mut self.groups)
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                let mut outcomes = g.outcomes;
                outcomes.sort();
                let group = Group {
                    name: g.name,
                    gpu_ms: g.gpu_ms,
                    cpu_ms: g.cpu_ms,
                    jobs: g.jobs,
                    runs: g.runs,
                    running: g.running,
                    restarts: g.restarts,
                    preemptions_suffered: g.suffered,
                    preemptions_caused: g.caused,
                    checkpoints_saved: g.saved,
                    lost_gpu_ms: g.lost_gpu_ms,
                    waits: waits(g.waits, &tiers, &tier_order),
                    outcomes,
                };
                (i, group)
            })
            .collect();
        groups.sort_by(|a, b| b.1.gpu_ms.cmp(&a.1.gpu_ms).then(a.1.name.cmp(&b.1.name)));
        let (from, end) = (self.p.from, self.end);
        let days = std::mem::take(&mut self.days)
            .into_iter()
            .enumerate()
            .map(|(d, (used, per_group))| {
                let start = (self.first_day + d as i64) * DAY_MS;
                Day {
                    start_ms: start,
                    capacity_gpu_ms: u64::from(self.p.gpus).saturating_mul(overlap(
                        start,
                        start + DAY_MS,
                        from,
                        end,
                    )),
                    used_gpu_ms: used,
                    groups: groups
                        .iter()
                        .filter_map(|(i, g)| {
                            per_group
                                .get(*i)
                                .filter(|ms| **ms > 0)
                                .map(|ms| (g.name.clone(), *ms))
                        })
                        .collect(),
                }
            })
            .collect();
        let mut cluster = self.cluster;
        cluster.jobs = self.jobs.len() as u64;
        cluster.start_latency = waits(self.cluster_waits, &tiers, &tier_order);
        Report {
            from: self.p.from,
            to: self.p.to,
            by: self.p.by,
            generated: self.p.now,
            all_accounts: self.p.all_accounts,
            cluster,
            groups: groups.into_iter().map(|(_, g)| g).collect(),
            days,
        }
    }
}

/// The report of `runs` (recorded ones, as a scan from `p.from` on gives them) and `running`
/// (running jobs' usage so far) for `p`.
pub fn build(
    p: Params,
    runs: &[RunRecord],
    running: &[RunRecord],
    visible: impl FnMut(&str) -> bool + Send,
) -> Report {
    let mut b = Builder::new(p, visible);
    for r in runs {
        b.add(r, false);
    }
    for r in running {
        b.add(r, true);
    }
    b.finish()
}

// ------------------------------------------------------------------ trace export

/// What a trace row takes from a job's record (`yctl report --export-trace`): its id as
/// displayed and the parts of its spec `ysim` replays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceSpec {
    /// `12`, or `12_7` for a task of an array.
    pub display_id: String,
    /// Who submitted it and the account it charges: a record is taken for a job's runs only
    /// if they agree (imported runs may carry the id of another job).
    pub user: String,
    pub account: String,
    /// Accepted GPU models; empty: any.
    pub gpu_types: Vec<String>,
    /// `--nodes`, at least 1.
    pub nodes: u32,
    /// `--cpus`, at least 1.
    pub cpus: u32,
    /// `--mem` (0: none).
    pub mem_mib: u64,
    /// `--time` (`None`: no limit).
    pub time_limit_secs: Option<u64>,
    /// `--grace` as asked (`None`: the tier's default).
    pub grace_secs: Option<u32>,
}

impl TraceSpec {
    pub fn of(job: &ysched_common::Job) -> TraceSpec {
        let s = &job.spec;
        TraceSpec {
            display_id: job.display_id(),
            user: job.owner.user.clone(),
            account: s.account.clone(),
            gpu_types: s.gpu_types.clone(),
            nodes: s.nodes.max(1),
            cpus: s.cpus.max(1),
            mem_mib: s.mem_mib,
            time_limit_secs: s.time_limit_secs.filter(|t| *t > 0),
            grace_secs: s.grace_secs,
        }
    }
}

/// One job of an exported trace: a row of the CSV format of `docs/simulation.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    pub job_id: JobId,
    /// The job's id as displayed (`12_7`); its number when the job's record is unknown.
    pub display_id: String,
    /// `queued_at` of its first run (restart 0), else of the earliest run known.
    pub submit_ms: Millis,
    pub tier: String,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// The work the job needed (see [`TraceBuilder`]).
    pub duration_ms: Millis,
    /// Its last run's outcome and restart count.
    pub outcome: String,
    pub restarts: u32,
    /// From its spec; `None` when schedd has no record of the job (imported runs).
    pub spec: Option<TraceSpec>,
    /// CPUs of its last run (all nodes): stands in for the spec's.
    pub run_cpus: u32,
}

/// A job's runs so far, as the trace needs them.
struct TraceAcc {
    /// The run with the lowest restart count: (its restart count, its `queued_at`).
    first: (u32, Millis),
    /// The last run (highest restart count, then latest end): (its restart count, its end);
    /// the fields below but `work_ms` are its.
    last: (u32, Millis),
    outcome: String,
    cpus: u32,
    tier: String,
    account: String,
    user: String,
    gpus: u32,
    work_ms: Millis,
}

/// What a trace is made of: the jobs' rows, and how many jobs were left out because their
/// last run in the window went back to the queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// By submit time, then job id.
    pub rows: Vec<TraceRow>,
    pub unfinished: u64,
}

/// Builds the trace of `yctl report --export-trace` from recorded runs (those that ended in
/// the window, in any order) and the jobs' specs, as `docs/simulation.md` ("Producing it from
/// usage records") says: one row per job whose last run in the window ended it (any outcome
/// but `REQUEUED`); a job whose last run there went back to the queue was running or pending
/// at the window's end and is left out (counted in [`Trace::unfinished`]).
///
/// - `submit`: `queued_at` of the run with restart count 0, else of the earliest one known
///   (its first runs ended before the window);
/// - `duration`: the sum over its runs of `end - start`, less, for each run preempted without
///   a checkpoint saved, the work it lost (`lost_gpu_secs / gpus`, which it did again); a run
///   counts at least 0. A job that ended `TIMEOUT` needed its time limit (at least: it was
///   stopped there), when its spec gives one;
/// - tier, account, user, GPUs: from its last run (the same in all).
///
/// No store, no lock, no clock: the shell feeds it from a scan.
#[derive(Default)]
pub struct TraceBuilder {
    jobs: IdMap<TraceAcc>,
}

impl TraceBuilder {
    pub fn new() -> TraceBuilder {
        TraceBuilder::default()
    }

    /// Adds one recorded run.
    pub fn add(&mut self, run: &RunRecord) {
        self.add_view(&run.view())
    }

    /// [`TraceBuilder::add`] for a borrowed run, as a store scan hands them out.
    pub fn add_view(&mut self, run: &RunView<'_>) {
        let ran = run.end.saturating_sub(run.start).max(0);
        let lost = if run.preempted_by.is_some() && !run.checkpoint_saved && run.gpus > 0 {
            let ms = u128::from(run.lost_gpu_secs) * 1000 / u128::from(run.gpus);
            Millis::try_from(ms).unwrap_or(Millis::MAX)
        } else {
            0
        };
        let work = ran.saturating_sub(lost).max(0);
        let acc = self.jobs.entry(run.job_id.0).or_insert_with(|| TraceAcc {
            first: (run.restart_count, run.queued_at),
            last: (run.restart_count, run.end),
            outcome: run.outcome.to_string(),
            cpus: run.cpus,
            tier: run.tier.to_string(),
            account: run.account.to_string(),
            user: run.user.to_string(),
            gpus: run.gpus,
            work_ms: 0,
        });
        acc.work_ms = acc.work_ms.saturating_add(work);
        if run.restart_count < acc.first.0 {
            acc.first = (run.restart_count, run.queued_at);
        }
        if (run.restart_count, run.end) > acc.last {
            acc.last = (run.restart_count, run.end);
            acc.outcome.clear();
            acc.outcome.push_str(run.outcome);
            acc.cpus = run.cpus;
            if acc.tier != run.tier {
                acc.tier = run.tier.to_string();
            }
            if acc.account != run.account {
                acc.account = run.account.to_string();
            }
            if acc.user != run.user {
                acc.user = run.user.to_string();
            }
            acc.gpus = run.gpus;
        }
    }

    /// The jobs that ended (their last run is not `REQUEUED`), whose records the rows need.
    pub fn ended_jobs(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, a)| a.outcome != crate::state::usage::REQUEUED)
            .map(|(id, _)| JobId(*id))
            .collect();
        ids.sort_unstable();
        ids
    }

    /// No run was added.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The trace, with each job's spec as `spec` gives it (`None`: unknown; one of another
    /// user or account than the job's runs is taken as unknown).
    pub fn finish(self, mut spec: impl FnMut(JobId) -> Option<TraceSpec>) -> Trace {
        let mut trace = Trace::default();
        for (id, acc) in self.jobs {
            if acc.outcome == crate::state::usage::REQUEUED {
                trace.unfinished += 1;
                continue;
            }
            let job_id = JobId(id);
            let spec = spec(job_id).filter(|s| s.user == acc.user && s.account == acc.account);
            let duration_ms = match spec.as_ref().and_then(|s| s.time_limit_secs) {
                Some(limit) if acc.outcome == ysched_common::JobState::Timeout.as_str() => {
                    Millis::try_from(limit.saturating_mul(1000)).unwrap_or(Millis::MAX)
                }
                _ => acc.work_ms,
            };
            trace.rows.push(TraceRow {
                job_id,
                display_id: spec
                    .as_ref()
                    .map_or_else(|| id.to_string(), |s| s.display_id.clone()),
                submit_ms: acc.first.1,
                tier: acc.tier,
                account: acc.account,
                user: acc.user,
                gpus: acc.gpus,
                duration_ms,
                outcome: acc.outcome,
                restarts: acc.last.0,
                spec,
                run_cpus: acc.cpus,
            });
        }
        trace
            .rows
            .sort_by(|a, b| a.submit_ms.cmp(&b.submit_ms).then(a.job_id.cmp(&b.job_id)));
        trace
    }
}

/// The trace of `runs` (recorded runs that ended in the window, any order) with the jobs'
/// specs from `specs` (see [`TraceBuilder`]).
pub fn trace(runs: &[RunRecord], specs: &std::collections::BTreeMap<JobId, TraceSpec>) -> Trace {
    let mut b = TraceBuilder::new();
    for r in runs {
        b.add(r);
    }
    b.finish(|id| specs.get(&id).cloned())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod trace_tests;
