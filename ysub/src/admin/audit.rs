//! `yctl audit`: the audit log as a table and as JSON.

use crate::output::{Column, Table};
use serde::Serialize;
use std::borrow::Cow;
use ysched_common::text::escape_for_terminal;
use ysched_common::time::rfc3339;
use ysched_proto::AuditEntry;

const AUDIT_COLUMNS: &[Column; 5] = &[
    Column::left("TIME"),
    Column::left("USER"),
    Column::left("ACTION"),
    Column::right("JOB"),
    Column::left("DETAIL"),
];

/// The `yctl audit` table; JOB is `-` for entries about no job (drains, resumes).
pub fn format_audit_table(entries: &[AuditEntry]) -> String {
    let mut table = Table::with_capacity(AUDIT_COLUMNS, entries.len());
    for entry in entries {
        table.push_row([
            Cow::Owned(rfc3339(entry.time_ms)),
            // A request relayed from another host says where from: `alice@login1`.
            if entry.host.is_empty() {
                escape_for_terminal(&entry.user)
            } else {
                Cow::Owned(format!(
                    "{}@{}",
                    escape_for_terminal(&entry.user),
                    escape_for_terminal(&entry.host)
                ))
            },
            escape_for_terminal(&entry.action),
            if entry.job_id == 0 {
                Cow::Borrowed("-")
            } else {
                Cow::Owned(entry.job_id.to_string())
            },
            escape_for_terminal(&entry.detail),
        ]);
    }
    let mut out = String::new();
    table.render(&mut out, true);
    out
}

#[derive(Debug, Serialize)]
pub struct AuditJson<'a> {
    pub time: String,
    pub user: &'a str,
    pub uid: u32,
    pub action: &'a str,
    /// Null for entries about no job.
    pub job_id: Option<u64>,
    pub detail: &'a str,
    /// The node whose agent relayed the request; null: schedd's own host (or schedd itself).
    pub host: Option<&'a str>,
}

pub fn audit_to_json(entry: &AuditEntry) -> AuditJson<'_> {
    AuditJson {
        time: rfc3339(entry.time_ms),
        user: &entry.user,
        uid: entry.uid,
        action: &entry.action,
        job_id: (entry.job_id != 0).then_some(entry.job_id),
        detail: &entry.detail,
        host: (!entry.host.is_empty()).then_some(entry.host.as_str()),
    }
}
