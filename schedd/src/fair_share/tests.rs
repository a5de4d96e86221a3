//! The usage book and the share table: decay, the integral, parents, accounts without usage.

use std::collections::BTreeMap;

use ysched_common::config::AccountConfig;
use ysched_common::time::Millis;
use ysched_common::{Job, JobId, RunRecord};

use super::*;
use crate::core::testkit::{JobBuilder, RunBuilder, HOUR, MINUTE, T0};

const DAY: Millis = 24 * HOUR;

fn run(account: &str, gpus: u32, start: Millis, end: Millis) -> RunRecord {
    RunBuilder::new(1, start, end)
        .account(account)
        .gpus(gpus)
        .build()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-12)
}

fn accounts(list: &[(&str, u32, &str)]) -> BTreeMap<String, AccountConfig> {
    list.iter()
        .map(|(name, shares, parent)| {
            let config = AccountConfig {
                shares: *shares,
                parent: parent.to_string(),
                ..AccountConfig::default()
            };
            (name.to_string(), config)
        })
        .collect()
}

fn row<'t>(table: &'t ShareTable, account: &str) -> &'t AccountShare {
    table
        .accounts
        .iter()
        .find(|a| a.account == account)
        .unwrap_or_else(|| panic!("no line for {account}: {table:?}"))
}

#[test]
fn usage_halves_every_half_life() {
    let mut book = UsageBook::new(DAY, T0);
    // 8 GPUs for one minute just before T0: short enough to be almost undecayed.
    book.add_run(&run("ml", 8, T0 - MINUTE, T0));
    let (raw, now) = book.usage("ml", T0);
    assert_eq!(raw, 8.0 * 60.0);
    assert!(close(now, 480.0, 1e-3), "{now}");
    let (_, later) = book.usage("ml", T0 + DAY);
    assert!(close(later, now / 2.0, 1e-12), "{later}");
    let (_, much_later) = book.usage("ml", T0 + 3 * DAY);
    assert!(close(much_later, now / 8.0, 1e-12), "{much_later}");
    // Moving the book on changes nothing it reports.
    let mut moved = book.clone();
    moved.advance(T0 + DAY);
    assert!(close(moved.usage("ml", T0 + 3 * DAY).1, much_later, 1e-12));
    // Asking about the past gives the book's time (time never runs back).
    assert_eq!(moved.usage("ml", T0).1, moved.usage("ml", T0 + DAY).1);
    assert_eq!(book.usage("nobody", T0), (0.0, 0.0));
}

#[test]
fn a_run_counts_the_exact_integral_of_its_decay() {
    let h = 6 * HOUR;
    let (start, end, at) = (T0, T0 + 10 * HOUR, T0 + 13 * HOUR);
    let mut book = UsageBook::new(h, at);
    book.add_run(&run("ml", 4, start, end));
    // A fine Riemann sum (midpoints, one per second) of 4 · 2^(-(at - t)/h).
    let mut sum = 0.0;
    let mut t = start as f64 + 500.0;
    while t < end as f64 {
        sum += 4.0 * (-(at as f64 - t) / h as f64).exp2();
        t += 1000.0;
    }
    let (raw, decayed) = book.usage("ml", at);
    assert_eq!(raw, 4.0 * 36_000.0);
    assert!(close(decayed, sum, 1e-9), "{decayed} vs {sum}");
    // Split in two runs, or added before the book's time moves on: the same.
    let mut split = UsageBook::new(h, start);
    split.add_run(&run("ml", 4, start, start + 4 * HOUR));
    split.add_run(&run("ml", 4, start + 4 * HOUR, end));
    assert!(close(split.usage("ml", at).1, decayed, 1e-12));
    // A very short run far from its decay keeps its precision.
    let mut short = UsageBook::new(7 * DAY, T0);
    short.add_run(&run("ml", 1, T0 - 1, T0));
    assert!(close(short.usage("ml", T0).1, 0.001, 1e-6));
    // Empty or backwards runs count nothing.
    short.add_run(&run("x", 8, T0, T0 - 5));
    assert_eq!(short.usage("x", T0), (0.0, 0.0));
}

#[test]
fn no_usage_means_factor_one_and_shares_are_normalised() {
    let book = UsageBook::new(DAY, T0);
    let config = accounts(&[("ml", 3, ""), ("vision", 1, "")]);
    let table = share_table(&book, &config, &BTreeMap::new(), T0);
    assert_eq!(table.as_of, T0);
    assert_eq!(table.half_life_ms, DAY);
    let names: Vec<&str> = table.accounts.iter().map(|a| a.account.as_str()).collect();
    assert_eq!(names, ["ml", "vision"]);
    assert!(close(row(&table, "ml").norm_shares, 0.75, 1e-12));
    assert!(close(row(&table, "vision").norm_shares, 0.25, 1e-12));
    for a in &table.accounts {
        assert_eq!(
            (a.factor, a.effective_usage, a.raw_gpu_secs),
            (1.0, 0.0, 0.0)
        );
    }
    assert_eq!(table.factors().factor("ml"), 1.0);
}

#[test]
fn factor_is_two_to_the_minus_usage_over_shares() {
    let mut book = UsageBook::new(DAY, T0);
    book.add_run(&run("ml", 3, T0 - HOUR, T0));
    book.add_run(&run("vision", 1, T0 - HOUR, T0));
    let config = accounts(&[("ml", 1, ""), ("vision", 1, "")]);
    let table = share_table(&book, &config, &BTreeMap::new(), T0);
    let (ml, vision) = (row(&table, "ml"), row(&table, "vision"));
    assert!(close(ml.effective_usage, 0.75, 1e-12));
    assert!(close(ml.factor, 2f64.powf(-1.5), 1e-12), "{}", ml.factor);
    assert!(close(vision.factor, 2f64.powf(-0.5), 1e-12));
    // Used exactly its share: one half.
    assert!(close(factor(0.5, 0.5), 0.5, 1e-12));
    assert_eq!(factor(0.0, 0.0), 1.0);
    assert_eq!(factor(0.3, 0.0), 0.0);
    // An account only seen in the usage counts with one share, at the top.
    let table = share_table(&book, &BTreeMap::new(), &BTreeMap::new(), T0);
    assert!(close(row(&table, "ml").norm_shares, 0.5, 1e-12));
}

#[test]
fn parents_split_their_share_among_their_children() {
    // research (3) above nlp (1) and vision (2); ops (1) at the top.
    let config = accounts(&[
        ("research", 3, ""),
        ("nlp", 1, "research"),
        ("vision", 2, "research"),
        ("ops", 1, ""),
    ]);
    let mut book = UsageBook::new(DAY, T0);
    book.add_run(&run("nlp", 2, T0 - HOUR, T0));
    book.add_run(&run("vision", 1, T0 - HOUR, T0));
    book.add_run(&run("ops", 1, T0 - HOUR, T0));
    let table = share_table(&book, &config, &BTreeMap::new(), T0);
    let names: Vec<(&str, &str)> = table
        .accounts
        .iter()
        .map(|a| (a.account.as_str(), a.parent.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("ops", ""),
            ("research", ""),
            ("nlp", "research"),
            ("vision", "research")
        ]
    );
    assert!(close(row(&table, "research").norm_shares, 0.75, 1e-12));
    assert!(close(row(&table, "nlp").norm_shares, 0.25, 1e-12));
    assert!(close(row(&table, "vision").norm_shares, 0.5, 1e-12));
    assert!(close(row(&table, "ops").norm_shares, 0.25, 1e-12));
    // The parent's usage is its children's.
    let research = row(&table, "research");
    assert!(close(research.raw_gpu_secs, 3.0 * 3600.0, 1e-12));
    assert!(close(research.effective_usage, 0.75, 1e-12));
    let nlp = row(&table, "nlp");
    assert!(close(nlp.effective_usage, 0.5, 1e-12));
    assert!(close(nlp.factor, 2f64.powf(-0.5 / 0.25), 1e-12));
    let vision = row(&table, "vision");
    assert!(close(vision.factor, 2f64.powf(-0.25 / 0.5), 1e-12));
}

fn running(id: u64, account: &str, gpus: &[u32], started: Millis) -> Job {
    JobBuilder::new(id)
        .account(account)
        .gpus(gpus.len() as u32)
        .running_on("n1", gpus)
        .started(started)
        .build()
}

#[test]
fn running_jobs_are_charged_as_they_run() {
    let book = UsageBook::new(DAY, T0);
    let mut jobs = BTreeMap::new();
    let job = running(1, "ml", &[0, 1], T0 - HOUR);
    jobs.insert(job.id, std::sync::Arc::new(job));
    // An account with only a pending job is left out (its factor is 1).
    let pending = JobBuilder::new(2).account("vision").build();
    jobs.insert(pending.id, std::sync::Arc::new(pending));
    let table = share_table(&book, &BTreeMap::new(), &jobs, T0);
    let ml = row(&table, "ml");
    assert_eq!(ml.raw_gpu_secs, 7200.0);
    // The same as the run ending now.
    let mut ended = UsageBook::new(DAY, T0);
    ended.add_run(&run("ml", 2, T0 - HOUR, T0));
    assert!(close(ml.decayed_gpu_secs, ended.usage("ml", T0).1, 1e-12));
    assert_eq!(ml.effective_usage, 1.0);
    assert!(table.accounts.iter().all(|a| a.account != "vision"));
    assert_eq!(table.factors().factor("vision"), 1.0);
    // An hour later it has run two hours.
    let table = share_table(&book, &BTreeMap::new(), &jobs, T0 + HOUR);
    assert_eq!(row(&table, "ml").raw_gpu_secs, 14_400.0);
}

#[test]
fn the_table_is_deterministic_whatever_the_order_runs_came_in() {
    let runs = [
        run("a", 2, T0 - 5 * HOUR, T0 - 2 * HOUR),
        run("b", 1, T0 - 3 * HOUR, T0 - HOUR),
        run("a", 4, T0 - HOUR, T0),
    ];
    let mut at_start = UsageBook::new(DAY, T0);
    at_start.add_runs(&runs);
    // As events: the book moves on with each run's end.
    let mut as_events = UsageBook::new(DAY, T0 - 10 * HOUR);
    as_events.add_runs(&runs);
    let none = BTreeMap::new();
    let (x, y) = (
        share_table(&at_start, &none, &none_jobs(), T0 + HOUR),
        share_table(&as_events, &none, &none_jobs(), T0 + HOUR),
    );
    for (p, q) in x.accounts.iter().zip(&y.accounts) {
        assert!(close(p.decayed_gpu_secs, q.decayed_gpu_secs, 1e-12));
        assert!(close(p.factor, q.factor, 1e-12));
    }
    assert_eq!(x, share_table(&at_start, &none, &none_jobs(), T0 + HOUR));
}

fn none_jobs() -> crate::core::JobMap {
    BTreeMap::new()
}

#[test]
fn queue_view_places_jobs_within_their_tier() {
    let queue = [5, 3, 9, 1]
        .iter()
        .zip([10_000, 10_000, 100, 100])
        .map(|(id, tier)| (JobId(*id), tier))
        .collect();
    let view = QueueView::new(ShareTable::default(), FairShare::default(), queue);
    let places: Vec<Option<u32>> = [5, 3, 9, 1, 7]
        .iter()
        .map(|id| view.place(JobId(*id)))
        .collect();
    assert_eq!(places, [Some(1), Some(2), Some(1), Some(2), None]);
}
