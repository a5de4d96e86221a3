//! Fair share, as Slurm's classic one: each account's past GPU usage, decayed with a half-life,
//! against its normalised shares, gives a factor between 0 and 1 that orders jobs inside a tier.
//!
//! - [`UsageBook`]: per account, the GPU-seconds of ended runs, raw and decayed, kept
//!   incrementally: each run is added once (the shell adds the runs every event ended), and
//!   decay is one multiplication per account, never a scan of the history.
//! - [`share_table`]: the book plus the running jobs (charged as they run) and the accounts'
//!   config, as one line per account (what `yctl shares` prints), and the factors the core
//!   orders by ([`ShareTable::factors`]).
//! - [`QueueView`]: what the last pass saw, for clients: the table and each pending job's place.
//!
//! Pure: no clock (time comes in as `now`), no I/O, ordered maps only. The same book, jobs and
//! `now` give the same factors.
//!
//! **Decay.** A GPU used at time `t` counts `2^(-(now - t) / H)` of a GPU-second per second at
//! `now`, `H` being the half-life. A run of `g` GPUs over `[s, e]` therefore counts
//! `g · H/ln 2 · (2^(-(now - e)/H) - 2^(-(now - s)/H))`: the exact integral, computed in
//! closed form. The book keeps these sums as of one reference time and multiplies them all by
//! `2^(-Δ/H)` when it moves on by `Δ`.
//!
//! **Factor.** `F = 2^(-U/S)`: `U` is the account's share of all decayed usage (a parent's
//! usage includes its children's), `S` its normalised shares: `shares / Σ top-level shares` at
//! the top, and `S(parent) · shares / Σ siblings' shares` below a parent. An account with no
//! usage has `F = 1`; one that used exactly its share has `F = 1/2`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use ysched_common::config::AccountConfig;
use ysched_common::time::Millis;
use ysched_common::{JobId, RunRecord};

use crate::core::FairShare;

#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod tests;

/// Each account's usage of GPUs by ended runs, raw and decayed.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageBook {
    half_life_ms: i64,
    /// The time the decayed sums are given at; it only moves forward.
    as_of: Millis,
    accounts: BTreeMap<String, Usage>,
}

/// GPU-seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Usage {
    /// Not decayed: all GPU-seconds ever recorded.
    raw: f64,
    /// Decayed to the book's `as_of` (or, in a [`share_table`], to its `now`).
    decayed: f64,
}

impl UsageBook {
    /// An empty book with this half-life (at least one millisecond), decayed sums as of
    /// `as_of`. Runs that ended before `as_of` are decayed to it when added.
    pub fn new(half_life_ms: i64, as_of: Millis) -> Self {
        UsageBook {
            half_life_ms: half_life_ms.max(1),
            as_of,
            accounts: BTreeMap::new(),
        }
    }

    pub fn half_life_ms(&self) -> i64 {
        self.half_life_ms
    }

    pub fn as_of(&self) -> Millis {
        self.as_of
    }

    /// Adds ended runs.
    pub fn add_runs(&mut self, runs: &[RunRecord]) {
        for run in runs {
            self.add_run(run);
        }
    }

    /// Adds one ended run: `gpus` over `[start, end]`. A run ending after the book's time moves
    /// the book on to its end first.
    pub fn add_run(&mut self, run: &RunRecord) {
        self.advance(run.end);
        let usage = self.accounts.entry(run.account.clone()).or_default();
        usage.raw += gpu_secs(run.gpus, run.start, run.end);
        usage.decayed +=
            decayed_gpu_secs(run.gpus, run.start, run.end, self.as_of, self.half_life_ms);
    }

    /// Moves the book's time on to `to` (never back), decaying every sum.
    pub fn advance(&mut self, to: Millis) {
        if to <= self.as_of {
            return;
        }
        let factor = decay(to - self.as_of, self.half_life_ms);
        for usage in self.accounts.values_mut() {
            usage.decayed *= factor;
        }
        self.as_of = to;
    }

    /// `account`'s GPU-seconds of ended runs: raw, and decayed to `now` (to the book's time if
    /// `now` is before it).
    pub fn usage(&self, account: &str, now: Millis) -> (f64, f64) {
        self.accounts.get(account).map_or((0.0, 0.0), |u| {
            (
                u.raw,
                u.decayed * decay(now - self.as_of, self.half_life_ms),
            )
        })
    }
}

/// `2^(-ms / half-life)`; 1 for a duration not above zero.
fn decay(ms: Millis, half_life_ms: i64) -> f64 {
    if ms <= 0 {
        return 1.0;
    }
    (-(ms as f64) / half_life_ms as f64).exp2()
}

/// GPU-seconds of `gpus` GPUs over `[start, end]`, not decayed.
fn gpu_secs(gpus: u32, start: Millis, end: Millis) -> f64 {
    f64::from(gpus) * (end - start).max(0) as f64 / 1000.0
}

/// GPU-seconds of `gpus` GPUs over `[start, end]` (`end <= at`), each instant `t` weighted by
/// `2^(-(at - t) / H)`: `g · H/ln 2 · 2^(-(at - end)/H) · (1 - 2^(-(end - start)/H))`. The last
/// factor goes through `exp_m1`, which keeps its precision for runs far shorter than `H`.
fn decayed_gpu_secs(gpus: u32, start: Millis, end: Millis, at: Millis, half_life_ms: i64) -> f64 {
    if end <= start || gpus == 0 {
        return 0.0;
    }
    let h = half_life_ms as f64;
    let ln2 = std::f64::consts::LN_2;
    let span = -(-((end - start) as f64) * ln2 / h).exp_m1();
    f64::from(gpus) * (h / 1000.0) / ln2 * decay(at - end, half_life_ms) * span
}

/// One account's line of `yctl shares`.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountShare {
    pub account: String,
    /// Empty: at the top.
    pub parent: String,
    /// As configured (1 for an account not in the config).
    pub shares: u32,
    /// Its share of the whole cluster: `S` of the factor.
    pub norm_shares: f64,
    /// GPU-seconds of ended runs and of running jobs so far, not decayed; a parent's include
    /// its children's.
    pub raw_gpu_secs: f64,
    /// The same, decayed to the table's time.
    pub decayed_gpu_secs: f64,
    /// Its share of all decayed usage: `U` of the factor.
    pub effective_usage: f64,
    /// `2^(-U/S)`: 1 without usage.
    pub factor: f64,
}

/// Every account's fair share at one time: config accounts, accounts with recorded usage, and
/// accounts of running jobs. Parents first, each followed by its children, by name.
///
/// An account with only pending jobs (not configured, never run) is left out: its factor is 1
/// anyway, and leaving it out of the normalisation scales every `S` by one constant, which
/// changes no account's place relative to another's. Finding those accounts would mean
/// reading every pending job's spec, most of the table's cost at 100,000 pending jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareTable {
    pub half_life_ms: i64,
    /// The time it was computed for (0: never).
    pub as_of: Millis,
    pub accounts: Vec<AccountShare>,
}

impl ShareTable {
    /// The core's input: every account's factor.
    pub fn factors(&self) -> FairShare {
        FairShare::new(self.accounts.iter().map(|a| (a.account.clone(), a.factor)))
    }
}

/// The fair share of every account at `now`: ended runs from `book`, running (and stopping)
/// jobs of `jobs` charged from their start to `now`, shares and parents from `config`. Only the
/// state of the other jobs is read.
pub fn share_table(
    book: &UsageBook,
    config: &BTreeMap<String, AccountConfig>,
    jobs: &crate::core::JobMap,
    now: Millis,
) -> ShareTable {
    // Each account's own usage at `now`.
    let to_now = decay(now - book.as_of, book.half_life_ms);
    let mut own: BTreeMap<&str, Usage> = book
        .accounts
        .iter()
        .map(|(name, u)| {
            let usage = Usage {
                raw: u.raw,
                decayed: u.decayed * to_now,
            };
            (name.as_str(), usage)
        })
        .collect();
    for name in config.keys() {
        own.entry(name).or_default();
    }
    for job in jobs.values().filter(|j| j.state.holds_resources()) {
        let Some(start) = job.start_time else {
            continue;
        };
        let gpus = job.alloc.iter().map(|a| a.gpus.len() as u32).sum();
        let usage = own.entry(job.spec.account.as_str()).or_default();
        usage.raw += gpu_secs(gpus, start, now);
        usage.decayed += decayed_gpu_secs(gpus, start, now, now, book.half_life_ms);
    }

    let shares_of = |name: &str| {
        config
            .get(name)
            .map_or(AccountConfig::default().shares, |a| a.shares)
    };
    let parent_of = |name: &str| config.get(name).map_or("", |a| a.parent.as_str());
    // Shares: of the top level, and of each parent's children.
    let mut top_sum = 0u64;
    let mut children_sum: BTreeMap<&str, u64> = BTreeMap::new();
    for name in own.keys() {
        let shares = u64::from(shares_of(name));
        match parent_of(name) {
            "" => top_sum += shares,
            parent => *children_sum.entry(parent).or_default() += shares,
        }
    }
    let top_norm = |name: &str| f64::from(shares_of(name)) / top_sum.max(1) as f64;
    let norm_shares = |name: &str| match parent_of(name) {
        "" => top_norm(name),
        parent => {
            top_norm(parent) * f64::from(shares_of(name))
                / children_sum.get(parent).copied().unwrap_or(1).max(1) as f64
        }
    };
    // A parent's usage includes its children's.
    let mut rolled = own.clone();
    for (name, usage) in &own {
        let parent = parent_of(name);
        if parent.is_empty() {
            continue;
        }
        // Always there: every config account is.
        if let Some(total) = rolled.get_mut(parent) {
            total.raw += usage.raw;
            total.decayed += usage.decayed;
        }
    }
    let total_decayed: f64 = own.values().map(|u| u.decayed).sum();

    let line = |name: &str| {
        let usage = rolled[name];
        let norm_shares = norm_shares(name);
        let effective_usage = if total_decayed > 0.0 {
            usage.decayed / total_decayed
        } else {
            0.0
        };
        AccountShare {
            account: name.to_string(),
            parent: parent_of(name).to_string(),
            shares: shares_of(name),
            norm_shares,
            raw_gpu_secs: usage.raw,
            decayed_gpu_secs: usage.decayed,
            effective_usage,
            factor: factor(effective_usage, norm_shares),
        }
    };
    let mut accounts = Vec::with_capacity(own.len());
    for name in own.keys().filter(|name| parent_of(name).is_empty()) {
        accounts.push(line(name));
        for child in own.keys().filter(|child| parent_of(child) == *name) {
            accounts.push(line(child));
        }
    }
    ShareTable {
        half_life_ms: book.half_life_ms,
        as_of: now,
        accounts,
    }
}

/// `2^(-usage / shares)`: 1 without usage, 0 for usage without shares.
pub fn factor(effective_usage: f64, norm_shares: f64) -> f64 {
    if effective_usage <= 0.0 {
        1.0
    } else if norm_shares <= 0.0 {
        0.0
    } else {
        (-effective_usage / norm_shares).exp2()
    }
}

/// What the last scheduling pass saw, for clients (`yq`, `yctl shares`, `yctl show job`).
#[derive(Debug, Clone, Default)]
pub struct QueueView {
    pub table: ShareTable,
    /// The factors the pass ordered by.
    pub factors: FairShare,
    /// The pending jobs in queue order, with the tier value they are queued at.
    queue: Vec<(JobId, i64)>,
    /// Each pending job's place in its tier's queue (1: next), by job id: made at the first
    /// question, not by every pass (a pass a second, a `yq` now and then).
    places: OnceLock<Vec<(JobId, u32)>>,
}

impl QueueView {
    /// `queue`: the pending jobs in queue order, as the pass walked them, with their tier
    /// values (`core::schedule_with_queue`).
    pub fn new(table: ShareTable, factors: FairShare, queue: Vec<(JobId, i64)>) -> Self {
        QueueView {
            table,
            factors,
            queue,
            places: OnceLock::new(),
        }
    }

    /// A pending job's place in its tier (1: next) at the last pass.
    pub fn place(&self, id: JobId) -> Option<u32> {
        let places = self.places.get_or_init(|| {
            let mut places = Vec::with_capacity(self.queue.len());
            let mut tier = None;
            let mut place = 0;
            for &(job, value) in &self.queue {
                if tier != Some(value) {
                    tier = Some(value);
                    place = 0;
                }
                place += 1;
                places.push((job, place));
            }
            places.sort_unstable();
            places
        });
        let i = places.binary_search_by_key(&id, |(j, _)| *j).ok()?;
        Some(places[i].1)
    }
}
