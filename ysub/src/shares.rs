//! `yctl shares`: fair share per account, as Slurm's `sshare` shows it. Usage is in GPU-hours
//! (schedd sends GPU-seconds).

use crate::output::{Column, Table};
use serde::Serialize;
use std::borrow::Cow;
use ysched_common::text::escape_for_terminal;
use ysched_common::time::rfc3339;
use ysched_proto::{AccountShare, ShareList};

pub const SHARE_COLUMNS: &[Column; 8] = &[
    Column::left("ACCOUNT"),
    Column::left("PARENT"),
    Column::right("SHARES"),
    Column::right("NORM_SHARES"),
    Column::right("RAW_GPU_H"),
    Column::right("DECAYED_GPU_H"),
    Column::right("EFF_USAGE"),
    Column::right("FAIRSHARE"),
];

/// The `yctl shares` table, in schedd's order (parents first, each followed by its children),
/// then a line with the half-life and the time of the figures.
pub fn format_shares_table(list: &ShareList) -> String {
    let mut table = Table::with_capacity(SHARE_COLUMNS, list.accounts.len());
    for a in &list.accounts {
        table.push_row([
            // A child is indented under its parent, as sshare does.
            if a.parent.is_empty() {
                escape_for_terminal(&a.account)
            } else {
                Cow::Owned(format!(" {}", escape_for_terminal(&a.account)))
            },
            if a.parent.is_empty() {
                Cow::Borrowed("-")
            } else {
                escape_for_terminal(&a.parent)
            },
            Cow::Owned(a.shares.to_string()),
            Cow::Owned(format!("{:.4}", a.norm_shares)),
            Cow::Owned(format!("{:.1}", hours(a.raw_gpu_secs))),
            Cow::Owned(format!("{:.1}", hours(a.decayed_gpu_secs))),
            Cow::Owned(format!("{:.4}", a.effective_usage)),
            Cow::Owned(format!("{:.3}", a.fair_share)),
        ]);
    }
    let mut out = String::new();
    table.render(&mut out, true);
    out.push_str(&format!(
        "Usage decays with a half-life of {}",
        format_half_life(list.half_life_secs)
    ));
    if list.as_of_ms > 0 {
        out.push_str(&format!("; figures as of {}", rfc3339(list.as_of_ms)));
    }
    out.push_str(".\n");
    out
}

fn hours(secs: f64) -> f64 {
    secs / 3600.0
}

/// `7d`, `36h`, `90m`, `45s`: the largest unit that divides it.
pub fn format_half_life(secs: u64) -> String {
    match secs {
        0 => "0s".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// `yctl shares --json`.
#[derive(Debug, Serialize)]
pub struct SharesJson<'a> {
    pub half_life_secs: u64,
    /// When schedd computed the figures (its last scheduling pass); null: not yet.
    pub as_of: Option<String>,
    pub accounts: Vec<AccountShareJson<'a>>,
}

#[derive(Debug, Serialize)]
pub struct AccountShareJson<'a> {
    pub account: &'a str,
    /// Null at the top.
    pub parent: Option<&'a str>,
    pub shares: u32,
    /// Its share of the cluster.
    pub norm_shares: f64,
    /// GPU-hours of ended runs and running jobs so far (a parent's include its children's).
    pub raw_gpu_hours: f64,
    /// The same, decayed with the half-life.
    pub decayed_gpu_hours: f64,
    /// Its share of all decayed usage.
    pub effective_usage: f64,
    /// 2^(-effective_usage / norm_shares): 1 without usage.
    pub fair_share: f64,
}

pub fn shares_to_json(list: &ShareList) -> SharesJson<'_> {
    SharesJson {
        half_life_secs: list.half_life_secs,
        as_of: (list.as_of_ms > 0).then(|| rfc3339(list.as_of_ms)),
        accounts: list.accounts.iter().map(account_to_json).collect(),
    }
}

fn account_to_json(a: &AccountShare) -> AccountShareJson<'_> {
    AccountShareJson {
        account: &a.account,
        parent: (!a.parent.is_empty()).then_some(a.parent.as_str()),
        shares: a.shares,
        norm_shares: a.norm_shares,
        raw_gpu_hours: hours(a.raw_gpu_secs),
        decayed_gpu_hours: hours(a.decayed_gpu_secs),
        effective_usage: a.effective_usage,
        fair_share: a.fair_share,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> ShareList {
        ShareList {
            accounts: vec![
                AccountShare {
                    account: "ops".into(),
                    shares: 1,
                    norm_shares: 0.25,
                    fair_share: 1.0,
                    ..Default::default()
                },
                AccountShare {
                    account: "research".into(),
                    shares: 3,
                    norm_shares: 0.75,
                    raw_gpu_secs: 36_000.0,
                    decayed_gpu_secs: 18_000.0,
                    effective_usage: 1.0,
                    fair_share: 0.397,
                    ..Default::default()
                },
                AccountShare {
                    account: "nlp\x1b[2J".into(),
                    parent: "research".into(),
                    shares: 1,
                    norm_shares: 0.25,
                    raw_gpu_secs: 36_000.0,
                    decayed_gpu_secs: 18_000.0,
                    effective_usage: 1.0,
                    fair_share: 0.0625,
                },
            ],
            half_life_secs: 7 * 86_400,
            as_of_ms: 1_767_225_600_000,
        }
    }

    #[test]
    fn table() {
        let out = format_shares_table(&list());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        assert_eq!(
            lines[0],
            "ACCOUNT      PARENT    SHARES  NORM_SHARES  RAW_GPU_H  DECAYED_GPU_H  EFF_USAGE  FAIRSHARE"
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["ops", "-", "1", "0.2500", "0.0", "0.0", "0.0000", "1.000"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["research", "-", "3", "0.7500", "10.0", "5.0", "1.0000", "0.397"]
        );
        assert!(lines[3].starts_with(" nlp\\x1b[2J  research"), "{out}");
        assert!(lines[3].ends_with("0.062"), "{out}");
        assert_eq!(
            lines[4],
            "Usage decays with a half-life of 7d; figures as of 2026-01-01T00:00:00Z."
        );
    }

    #[test]
    fn json() {
        let list = list();
        let value = serde_json::to_value(shares_to_json(&list)).unwrap();
        assert_eq!(value["half_life_secs"], 604_800);
        assert_eq!(value["as_of"], "2026-01-01T00:00:00Z");
        assert_eq!(value["accounts"][0]["parent"], serde_json::Value::Null);
        assert_eq!(value["accounts"][1]["raw_gpu_hours"], 10.0);
        assert_eq!(value["accounts"][1]["decayed_gpu_hours"], 5.0);
        assert_eq!(value["accounts"][2]["parent"], "research");
        assert_eq!(value["accounts"][2]["fair_share"], 0.0625);
        assert_eq!(value["accounts"][2]["account"], "nlp\x1b[2J");
        let empty = ShareList::default();
        let value = serde_json::to_value(shares_to_json(&empty)).unwrap();
        assert_eq!(value["as_of"], serde_json::Value::Null);
        assert_eq!(value["accounts"], serde_json::json!([]));
    }

    #[test]
    fn half_lives() {
        assert_eq!(format_half_life(604_800), "7d");
        assert_eq!(format_half_life(36 * 3_600), "36h");
        assert_eq!(format_half_life(90 * 60), "90m");
        assert_eq!(format_half_life(61), "61s");
    }
}
