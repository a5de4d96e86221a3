//! `yctl report` and `yctl usage import`: the usage report as a table, JSON, CSV or one
//! self-contained HTML file with SVG charts (drawn by `ysched_report`: no script, font file or
//! link), the trace export, and the import of runs recorded elsewhere. Parsing and rendering
//! are plain functions of the reply, unit tested without a daemon.
//!
//! One module per seam: the window (`window`), each rendering (`json`, `text`, `csv`, `html`
//! with its `charts`, `trace`; the groups' table of the text and the page, `groups`), writing a file whole (`file`) and the import (`import`).

mod charts;
mod csv;
mod file;
mod groups;
mod html;
mod import;
mod json;
mod text;
mod trace;
mod window;

pub use self::csv::report_csv;
pub use html::report_html;
pub use import::{import, parse_usage_file};
pub use json::{report_json, ClusterJson, DayJson, GroupJson, ReportJson, WaitJson};
pub use text::format_report;
pub use trace::{trace_csv, trace_summary};
pub use window::{parse_date, parse_span, window};

use crate::client::{reply, Client};
use crate::output::{print_json, print_stdout};
use anyhow::Result;
use file::write_whole;
use std::path::PathBuf;
use ysched_common::text::escape_for_terminal;
use ysched_proto::ReportRequest;

/// `yctl report`'s options.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ReportArgs {
    /// The window: the last SPAN up to now (`7d`, `36h`, `2w`, `90m`)
    #[arg(long, value_name = "SPAN", conflicts_with_all = ["from", "to"])]
    pub since: Option<String>,
    /// Start of the window: RFC 3339 (`2026-01-05T08:00:00Z`, `...+02:00`) or `YYYY-MM-DD`
    /// (00:00 UTC) [default: seven days before --to]
    #[arg(long, value_name = "DATE")]
    pub from: Option<String>,
    /// End of the window (not included), as --from [default: now]
    #[arg(long, value_name = "DATE")]
    pub to: Option<String>,
    /// Group usage by account, user or tier
    #[arg(long, value_name = "WHAT", default_value = "account",
          value_parser = ["account", "user", "tier"])]
    pub by: String,
    /// Print JSON
    #[arg(long, conflicts_with_all = ["csv", "html"])]
    pub json: bool,
    /// Print CSV: one row per group, then one for the whole cluster
    #[arg(long, conflicts_with = "html")]
    pub csv: bool,
    /// Write one self-contained HTML file with charts to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the jobs that ended in the window as a CSV trace `ysim --trace FILE` replays
    /// (`-`: stdout): one row per job, from its runs and its spec; jobs still running or
    /// back in the queue at the window's end are left out
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "csv", "html", "by"])]
    pub export_trace: Option<PathBuf>,
}

/// `yctl usage` subcommands.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum UsageCommand {
    /// Record runs from elsewhere (a migration from another scheduler's accounting), as if
    /// they had run here: FILE is a JSON array of runs (administrators only)
    Import {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

/// `yctl report`.
pub async fn report(client: &mut Client, args: &ReportArgs) -> Result<()> {
    let (from_ms, to_ms) = window(args, ysched_common::time::now_ms())?;
    if let Some(path) = &args.export_trace {
        let r = reply(
            client
                .export_trace(ReportRequest {
                    from_ms,
                    to_ms,
                    by: String::new(),
                })
                .await,
        )?;
        let csv = trace_csv(&r);
        if path.as_os_str() == "-" {
            print_stdout(&csv)?;
            eprintln!("{}", escape_for_terminal(&trace_summary(&r, "stdout")));
        } else {
            write_whole(path, &csv)?;
            let summary = trace_summary(&r, &path.display().to_string());
            print_stdout(&format!("{}\n", escape_for_terminal(&summary)))?;
        }
        return Ok(());
    }
    let r = reply(
        client
            .report(ReportRequest {
                from_ms,
                to_ms,
                by: args.by.clone(),
            })
            .await,
    )?;
    if args.json {
        print_json(&report_json(&r))
    } else if args.csv {
        print_stdout(&report_csv(&r)?)
    } else if let Some(path) = &args.html {
        // Written whole or not at all: a timer's reader never sees half a report.
        write_whole(path, &report_html(&r)?)
    } else {
        print_stdout(&format_report(&r))
    }
}

#[cfg(test)]
mod tests;
