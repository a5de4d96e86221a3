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
//! - capacity: for each node schedd knows now, its GPUs times the part of the window from its
//!   first registration on (a node of an older store, whose registration is not known: the
//!   whole window). Nodes removed before now are not counted, time a node was down is;
//! - days: UTC days, each with its part of the capacity and its GPU time, per group too.
//!
//! With `reports_public = false` a caller who is no administrator sees only the groups made of
//! runs of accounts they may charge (`visible`); the cluster's lines are of every run.

use super::{IdMap, DAY_MS};
use std::collections::HashMap;
use ysched_common::time::Millis;
use ysched_common::RunRecord;
use ysched_common::RunView;

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
    /// The nodes schedd knows now (the capacity's basis).
    pub nodes: Vec<NodeCapacity>,
    /// Tier names, highest first: the order of wait lines (others follow by name).
    pub tier_order: Vec<String>,
    /// Every account is visible (`reports_public`, or an administrator).
    pub all_accounts: bool,
}

/// One node's part of the capacity: its GPUs, from its first registration on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCapacity {
    pub gpus: u32,
    /// When it first registered (epoch ms); 0: not known, counted over the whole window.
    pub registered_at: Millis,
}

/// The GPU time `nodes` offered in `[from, to)`: each node from its registration on.
fn capacity(nodes: &[NodeCapacity], from: Millis, to: Millis) -> u64 {
    nodes
        .iter()
        .map(|n| u64::from(n.gpus).saturating_mul(overlap(n.registered_at, to, from, to)))
        .fold(0, u64::saturating_add)
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
            gpus: p.nodes.iter().map(|n| n.gpus).fold(0, u32::saturating_add),
            capacity_gpu_ms: capacity(&p.nodes, p.from, end),
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
                    capacity_gpu_ms: capacity(
                        &self.p.nodes,
                        start.max(from),
                        (start + DAY_MS).min(end),
                    ),
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
