//! `--scenario factory`: a generated workload shaped like the motivating case, a "model
//! factory" where several teams share a cluster of 8-GPU nodes. Every distribution is stated
//! here (and in `docs/simulation.md`); all draws come from the seed.
//!
//! - **Cluster**: `nodes` (default 12) nodes of 8 NVLinked `NVIDIA A100-SXM4-80GB`, 64 CPUs,
//!   512 GiB.
//! - **Teams**: `vision`, `language`, `speech`, `recsys` (shares 4, 3, 2, 1 in the config that
//!   comes with the scenario), three users each; a job's team is drawn by share.
//! - **`low` training runs**, any time of day, Poisson arrivals sized to keep 70 % of the GPUs
//!   busy on average: 4 GPUs (30 %), 8 (50 %) or 16 on two nodes (20 %); duration log-normal,
//!   median 16 h, σ 0.7, clamped to [2 h, 7 d]; time limit the duration times U(1.1, 2)
//!   rounded up to the hour. At the start, a backlog of runs filling 70 % of the GPUs (with
//!   what is left of their duration, U(0, 1) of a draw) is submitted, so that the cluster is
//!   busy from the first hour.
//! - **`medium` sweeps**: on weekdays between 09:00 and 18:00 UTC, 6 sweeps a day (Poisson),
//!   each of U{10..40} jobs submitted within a minute: 1 GPU (50 %), 2 (30 %) or 4 (20 %);
//!   duration log-normal, median 1 h, σ 0.6, clamped to [5 min, 3.5 h]; time limit 4 h.
//! - **`high` release jobs**: weekdays 09:00–18:00, 4 a day (Poisson): 8 GPUs (70 %) or 16
//!   (30 %); duration log-normal, median 2 h, σ 0.5, clamped to [30 min, 8 h]; time limit
//!   12 h.
//! - **`critical` hotfixes**: any time, one a week on average (Poisson): 8 GPUs, duration
//!   log-normal, median 45 min, σ 0.5, clamped to [10 min, 3 h]; time limit 4 h; no
//!   checkpoints (`--no-requeue` is not used: they are never preempted anyway).
//! - **Checkpoints** ([`checkpoint_profile`]): training runs and release jobs checkpoint every
//!   30 min (50 %), 1 h (30 %) or 2 h (20 %); writing a checkpoint takes log-normal, median
//!   60 s, σ 0.6 (p95 about 160 s); 80 % of them ask for `--grace 180`, the others keep the
//!   tier's default (30 s). Sweep jobs: half never checkpoint, half every 15 min; writing
//!   takes log-normal, median 20 s, σ 0.6; they keep the default grace.

use super::{SimJob, SimNode, Workload, DAY, HOUR, MIN, SEC};
use crate::rng::Rng;
use std::collections::BTreeMap;
use ysched_common::config::AccountConfig;
use ysched_common::time::Millis;

pub const GPUS_PER_NODE: u32 = 8;
pub const MODEL: &str = "NVIDIA A100-SXM4-80GB";
pub const TEAMS: [(&str, u32); 4] = [("vision", 4), ("language", 3), ("speech", 2), ("recsys", 1)];

#[derive(Debug, Clone)]
pub struct Options {
    pub nodes: u32,
    pub days: f64,
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 12,
            days: 30.0,
            seed: 1,
        }
    }
}

/// How a job checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointProfile {
    pub interval_ms: Millis,
    pub write_ms: Millis,
    pub grace_secs: Option<u32>,
}

/// A training job's checkpoint behaviour (see the module docs).
pub fn checkpoint_profile(r: &mut Rng) -> CheckpointProfile {
    let interval = *r.weighted(&[(30 * MIN, 0.5), (60 * MIN, 0.3), (120 * MIN, 0.2)]);
    let write = r.lognormal(60.0, 0.6).clamp(1.0, 3600.0);
    CheckpointProfile {
        interval_ms: interval,
        write_ms: (write * 1000.0).round() as Millis,
        grace_secs: r.chance(0.8).then_some(180),
    }
}

/// A sweep job's checkpoint behaviour.
fn sweep_checkpoint_profile(r: &mut Rng) -> CheckpointProfile {
    let interval = if r.chance(0.5) { 0 } else { 15 * MIN };
    let write = r.lognormal(20.0, 0.6).clamp(1.0, 3600.0);
    CheckpointProfile {
        interval_ms: interval,
        write_ms: (write * 1000.0).round() as Millis,
        grace_secs: None,
    }
}

/// The scenario's accounts: the teams and their shares.
pub fn accounts() -> BTreeMap<String, AccountConfig> {
    TEAMS
        .iter()
        .map(|(team, shares)| {
            (
                team.to_string(),
                AccountConfig {
                    shares: *shares,
                    ..AccountConfig::default()
                },
            )
        })
        .collect()
}

fn nodes(n: u32) -> Vec<SimNode> {
    (0..n)
        .map(|i| SimNode {
            name: format!("gpu{i:03}"),
            gpus: GPUS_PER_NODE,
            model: MODEL.into(),
            nvlink: true,
            cpus: 64,
            mem_mib: 512 * 1024,
        })
        .collect()
}

fn clamp_ms(hours: f64, lo: Millis, hi: Millis) -> Millis {
    ((hours * HOUR as f64).round() as Millis).clamp(lo, hi)
}

struct Gen {
    /// Never drawn from: every stream is a fork of it, so that more of one kind of job (more
    /// days, more nodes) never moves the draws of another.
    base: Rng,
    jobs: Vec<SimJob>,
    counter: BTreeMap<&'static str, u32>,
}

impl Gen {
    /// The stream of the `n`th draw of `kind`.
    fn stream(&self, kind: u64, n: u64) -> Rng {
        self.base.fork((kind << 40) ^ n)
    }

    fn team(r: &mut Rng) -> (String, String) {
        let weights: Vec<(&str, f64)> = TEAMS.iter().map(|(t, s)| (*t, f64::from(*s))).collect();
        let team = *r.weighted(&weights);
        let user = format!("{team}-{}", 1 + r.below(3));
        (team.to_string(), user)
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        kind: &'static str,
        tier: &str,
        at: Millis,
        gpus: u32,
        duration_ms: Millis,
        time_limit_secs: u64,
        profile: CheckpointProfile,
        team: (String, String),
    ) {
        let n = self.counter.entry(kind).or_default();
        *n += 1;
        let name = format!("{kind}-{n}");
        self.jobs.push(SimJob {
            name,
            submit_ms: at,
            tier: tier.to_string(),
            account: team.0,
            user: team.1,
            gpus,
            nodes: gpus.div_ceil(GPUS_PER_NODE).max(1),
            gpu_types: Vec::new(),
            cpus: 4 * gpus.max(1),
            mem_mib: 0,
            duration_ms,
            time_limit_secs: Some(time_limit_secs),
            checkpoint_interval_ms: profile.interval_ms,
            checkpoint_write_ms: profile.write_ms,
            grace_secs: profile.grace_secs,
        });
    }

    /// A training run submitted `at`, with `remaining_fraction` of its drawn duration to do.
    fn training(&mut self, at: Millis, remaining_fraction: f64, r: &mut Rng) {
        let gpus = *r.weighted(&[(4u32, 0.3), (8, 0.5), (16, 0.2)]);
        let full = clamp_ms(r.lognormal(16.0, 0.7), 2 * HOUR, 7 * DAY);
        let duration = ((full as f64 * remaining_fraction).round() as Millis).max(10 * MIN);
        let limit_h = (full as f64 * r.uniform(1.1, 2.0) / HOUR as f64).ceil() as u64;
        let profile = checkpoint_profile(r);
        let team = Gen::team(r);
        self.push(
            "train",
            "low",
            at,
            gpus,
            duration,
            limit_h * 3600,
            profile,
            team,
        );
    }

    /// Event times of a Poisson process with `per_day` events a day, within [from, to) of
    /// each day that `day_ok` accepts, drawn from stream `stream`.
    fn poisson_times(
        &self,
        stream: u64,
        days: f64,
        per_day: f64,
        hours: (f64, f64),
        day_ok: impl Fn(i64) -> bool,
    ) -> Vec<Millis> {
        let span = (hours.1 - hours.0) * HOUR as f64;
        let mean_gap = span / per_day;
        let mut out = Vec::new();
        let end = (days * DAY as f64) as Millis;
        for day in 0..(days.ceil() as i64) {
            if !day_ok(day) {
                continue;
            }
            // One stream per day: a longer scenario begins as the shorter one.
            let mut rng = self.stream(stream, day as u64);
            let base = day * DAY + (hours.0 * HOUR as f64) as Millis;
            let mut t = rng.exp(mean_gap);
            while t < span {
                let at = base + t as Millis;
                if at < end {
                    out.push(at);
                }
                t += rng.exp(mean_gap);
            }
        }
        out
    }
}

/// Monday to Friday (the simulation starts on a Monday).
fn weekday(day: i64) -> bool {
    day.rem_euclid(7) < 5
}

/// Generates the scenario.
pub fn generate(opts: &Options) -> Workload {
    let mut g = Gen {
        base: Rng::new(opts.seed).fork(0xFAC7),
        jobs: Vec::new(),
        counter: BTreeMap::new(),
    };
    let capacity = f64::from(opts.nodes * GPUS_PER_NODE);
    // Training: 70 % of the GPUs on average. Mean GPUs 8.4; mean duration of the clamped
    // log-normal, estimated once from a fixed sample so the rate does not depend on the seed.
    let mean_hours = {
        let mut r = Rng::new(0x5EED);
        let n = 20_000;
        (0..n)
            .map(|_| clamp_ms(r.lognormal(16.0, 0.7), 2 * HOUR, 7 * DAY) as f64 / HOUR as f64)
            .sum::<f64>()
            / n as f64
    };
    let per_day = 0.70 * capacity * 24.0 / (8.4 * mean_hours);
    // The backlog at the start: 70 % of the GPUs.
    let mut backlog = 0.0;
    let mut k = 0;
    while backlog < 0.7 * capacity {
        let mut r = g.stream(1, k);
        let fraction = r.unit();
        g.training(0, fraction, &mut r);
        backlog += f64::from(g.jobs[g.jobs.len() - 1].gpus);
        k += 1;
    }
    let arrivals = g.poisson_times(2, opts.days, per_day, (0.0, 24.0), |_| true);
    for (k, at) in arrivals.into_iter().enumerate() {
        let mut r = g.stream(3, k as u64);
        g.training(at, 1.0, &mut r);
    }
    // Sweeps.
    let sweeps = g.poisson_times(4, opts.days, 6.0, (9.0, 18.0), weekday);
    for (k, at) in sweeps.into_iter().enumerate() {
        let mut s = g.stream(5, k as u64);
        let n = 10 + s.below(31);
        let team = Gen::team(&mut s);
        for j in 0..n {
            let mut r = g.stream(6, ((k as u64) << 8) | j);
            let gpus = *r.weighted(&[(1u32, 0.5), (2, 0.3), (4, 0.2)]);
            let duration = clamp_ms(r.lognormal(1.0, 0.6), 5 * MIN, 210 * MIN);
            let profile = sweep_checkpoint_profile(&mut r);
            let offset = (j as i64 * 60 * SEC) / n as i64;
            g.push(
                "sweep",
                "medium",
                at + offset,
                gpus,
                duration,
                4 * 3600,
                profile,
                team.clone(),
            );
        }
    }
    // Release jobs.
    let releases = g.poisson_times(7, opts.days, 4.0, (9.0, 18.0), weekday);
    for (k, at) in releases.into_iter().enumerate() {
        let mut r = g.stream(8, k as u64);
        let gpus = *r.weighted(&[(8u32, 0.7), (16, 0.3)]);
        let duration = clamp_ms(r.lognormal(2.0, 0.5), 30 * MIN, 8 * HOUR);
        let profile = checkpoint_profile(&mut r);
        let team = Gen::team(&mut r);
        g.push(
            "release",
            "high",
            at,
            gpus,
            duration,
            12 * 3600,
            profile,
            team,
        );
    }
    // Hotfixes.
    let hotfixes = g.poisson_times(9, opts.days, 1.0 / 7.0, (0.0, 24.0), |_| true);
    for (k, at) in hotfixes.into_iter().enumerate() {
        let mut r = g.stream(10, k as u64);
        let duration = clamp_ms(r.lognormal(0.75, 0.5), 10 * MIN, 3 * HOUR);
        let profile = CheckpointProfile {
            interval_ms: 0,
            write_ms: 0,
            grace_secs: None,
        };
        let team = Gen::team(&mut r);
        g.push(
            "hotfix",
            "critical",
            at,
            8,
            duration,
            4 * 3600,
            profile,
            team,
        );
    }
    let mut w = Workload {
        name: format!("factory ({} days, seed {})", opts.days, opts.seed),
        nodes: nodes(opts.nodes),
        jobs: g.jobs,
        window_ms: 0,
        accounts: accounts(),
        notes: vec![format!(
            "generated: {} nodes x 8 GPUs; low training runs sized for 70 % of the GPUs, \
             medium sweeps, high release jobs and critical hotfixes on weekdays' working \
             hours (hotfixes any time); distributions in docs/simulation.md",
            opts.nodes
        )],
    };
    w.finish((opts.days * DAY as f64) as Millis);
    w.window_ms = (opts.days * DAY as f64) as Millis;
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_jobs_and_the_right_shape() {
        let opts = Options {
            nodes: 12,
            days: 14.0,
            seed: 3,
        };
        let a = generate(&opts);
        assert_eq!(a, generate(&opts));
        assert_ne!(
            a.jobs,
            generate(&Options {
                seed: 4,
                ..opts.clone()
            })
            .jobs
        );
        let count = |tier: &str| a.jobs.iter().filter(|j| j.tier == tier).count();
        assert!(count("low") > 50, "{}", count("low"));
        assert!(count("medium") > 200);
        assert!(count("high") > 10);
        // The offered training load is near 70 % of the GPUs.
        let gpu_ms: f64 = a
            .jobs
            .iter()
            .filter(|j| j.tier == "low" && j.submit_ms > 0)
            .map(|j| f64::from(j.gpus) * j.duration_ms as f64)
            .sum();
        let load = gpu_ms / (96.0 * a.window_ms as f64);
        assert!((0.4..1.0).contains(&load), "{load}");
        assert!(a
            .jobs
            .iter()
            .all(|j| j.time_limit_secs.unwrap() * 1000 >= j.duration_ms as u64));
        assert!(a.jobs.iter().all(|j| j.grace_secs.is_none_or(|g| g <= 300)));
    }
}
