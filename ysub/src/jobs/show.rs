//! `yctl show job`: `Key=Value` lines like `scontrol show job`, then the job's events.

use super::json::EMPTY_SPEC;
use super::{elapsed_secs, gpus_requested, node_list, time_or_none};
use crate::output::{format_mib, Column, Table};
use std::borrow::Cow;
use std::fmt::Write as _;
use ysched_common::text::escape_for_terminal;
use ysched_common::time::{format_elapsed, rfc3339, Millis};
use ysched_proto::{JobDetail, JobInfo, JobSpec};

/// The job's `--signal` in the form it takes (`USR1@60`), if it asked for one.
pub fn warn_signal(spec: &JobSpec) -> Option<String> {
    spec.warn_signal.as_ref().map(|w| {
        ysched_common::WarnSignal {
            signal: w.signal,
            secs: w.secs,
            batch_only: w.batch_only,
        }
        .to_string()
    })
}

/// `yctl show job`: `Key=Value` lines like `scontrol show job`, then the job's events.
pub fn format_job_detail(detail: &JobDetail, now_ms: Millis) -> String {
    let Some(job) = &detail.job else {
        return String::from("(no job in reply)\n");
    };
    let spec = job.spec.as_deref().unwrap_or(&EMPTY_SPEC);
    let or = |value: &str, default: &'static str| -> String {
        if value.is_empty() {
            default.to_string()
        } else {
            value.to_string()
        }
    };
    let time = |ms: Millis| time_or_none(ms).unwrap_or_else(|| "None".into());
    // What the job used, when it is not the caller's to see (`scheduler.reports_public`).
    let usage = |value: String| -> String {
        if job.usage_private {
            "private".into()
        } else {
            value
        }
    };
    let limit = match spec.time_limit_secs {
        0 => "UNLIMITED".to_string(),
        secs => format_elapsed(secs),
    };
    let exit = format!(
        "{}:{}",
        job.exit_code.map_or("-".into(), |c| c.to_string()),
        job.signal.unwrap_or(0)
    );
    let gpu_indices = job
        .alloc
        .iter()
        .map(|a| {
            let gpus: Vec<String> = a.gpus.iter().map(u32::to_string).collect();
            format!("{}:{}", a.node, gpus.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let stdout = expand_output_path(job, &spec.stdout_path);
    let stderr = if spec.stderr_path.is_empty() {
        stdout.clone()
    } else {
        expand_output_path(job, &spec.stderr_path)
    };
    let args = spec
        .args
        .iter()
        .map(|a| quote_if_needed(a))
        .collect::<Vec<_>>()
        .join(" ");

    let mut first = vec![("JobId", job.id.to_string())];
    if let (Some(array), Some(task)) = (job.array_job_id, job.array_task_id) {
        first.push(("ArrayJobId", array.to_string()));
        first.push(("ArrayTaskId", task.to_string()));
        if job.array_max_running > 0 {
            first.push(("ArrayTaskThrottle", job.array_max_running.to_string()));
        }
    }
    first.push(("JobName", job.name.clone()));
    // Where and when the last pass expects a pending job to start, if it could tell.
    let expected_start = (job.expected_start_ms > 0).then(|| {
        let mut when = rfc3339(job.expected_start_ms);
        if !job.expected_nodes.is_empty() {
            let _ = write!(when, " on {}", job.expected_nodes.join(","));
        }
        [("ExpectedStart", when)]
    });

    // Who holds a held job: `admin` (only an administrator may release it) or `user`.
    let held_by = (!job.hold.is_empty()).then(|| [("HeldBy", job.hold.clone())]);

    let lines: [&[(&str, String)]; 16] = [
        &first,
        &[
            ("UserId", format!("{}({})", job.user, job.uid)),
            ("GroupId", job.gid.to_string()),
            ("Account", job.account.clone()),
        ],
        &[
            ("Tier", job.tier.clone()),
            ("TierValue", job.tier_value.to_string()),
            ("JobState", job.state.clone()),
            ("Reason", or(&job.reason, "None")),
        ],
        held_by.as_ref().map_or(&[], |line| line.as_slice()),
        &[("Dependency", or(&spec.dependency, "None"))],
        &[
            ("Restarts", usage(job.restart_count.to_string())),
            ("Requeue", u8::from(!spec.no_requeue).to_string()),
            ("ExitCode", exit),
        ],
        &[
            ("RunTime", usage(format_elapsed(elapsed_secs(job, now_ms)))),
            ("TimeLimit", limit),
            ("Grace", job.grace_secs.to_string()),
            ("Signal", warn_signal(spec).unwrap_or_else(|| "None".into())),
        ],
        &[
            ("SubmitTime", time(job.submit_time_ms)),
            // `--begin`: not started before then (Slurm's BeginTime).
            (
                "BeginTime",
                time((spec.begin_unix_secs as i64).saturating_mul(1000)),
            ),
            ("StartTime", usage(time(job.start_time_ms))),
            ("EndTime", usage(time(job.end_time_ms))),
        ],
        expected_start.as_ref().map_or(&[], |line| line.as_slice()),
        &[
            ("NumNodes", spec.nodes.max(1).to_string()),
            ("GPUs", gpus_requested(job).to_string()),
            ("GpuType", or(&spec.gpu_type, "any")),
            ("CPUs", spec.cpus.max(1).to_string()),
            (
                "Mem",
                if spec.mem_mib == 0 {
                    "None".into()
                } else {
                    format_mib(spec.mem_mib)
                },
            ),
        ],
        &[
            (
                "NodeList",
                usage(node_list(job).unwrap_or_else(|| "None".into())),
            ),
            ("GpuIndices", usage(or(&gpu_indices, "None"))),
        ],
        &[
            ("Interconnect", or(&spec.interconnect, "any")),
            ("Constraints", or(&spec.constraints.join(","), "None")),
        ],
        &[
            ("ReqNodeList", or(&spec.nodelist.join(","), "None")),
            ("ExcNodeList", or(&spec.exclude.join(","), "None")),
            ("Exclusive", u8::from(spec.exclusive).to_string()),
        ],
        &[
            ("CheckpointDir", or(&job.checkpoint_dir, "None")),
            ("LastCheckpoint", usage(time(job.last_checkpoint_ms))),
        ],
        &[
            ("WorkDir", spec.workdir.clone()),
            ("StdOut", stdout),
            ("StdErr", stderr),
        ],
        &[("Args", or(&args, "None"))],
    ];

    let mut out = String::new();
    for (i, line) in lines.iter().filter(|l| !l.is_empty()).enumerate() {
        out.push_str(if i == 0 { "" } else { "   " });
        for (j, (key, value)) in line.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            // Every value may hold what a user typed (names, paths, reasons, arguments).
            let _ = write!(out, "{key}={}", escape_for_terminal(value));
        }
        out.push('\n');
    }
    out.push_str("Events:\n");
    if job.usage_private {
        out.push_str("   (private: reports are not public here)\n");
    } else if detail.events.is_empty() {
        out.push_str("   (none)\n");
    }
    let mut table = Table::with_capacity(EVENT_COLUMNS, detail.events.len());
    for event in &detail.events {
        table.push_row([
            Cow::Owned(time(event.time_ms)),
            escape_for_terminal(&event.kind),
            escape_for_terminal(&event.detail),
        ]);
    }
    let mut events = String::new();
    table.render(&mut events, false);
    for line in events.lines() {
        let _ = writeln!(out, "   {line}");
    }
    out
}

/// An output path of the job as scontrol shows it: its patterns filled in (`%N` stays: it
/// differs per node); empty: the default, `ysched-%j.out`, or `ysched-%A_%a.out` for an array
/// task. `%A` is the array's id (a plain job: its own id), `%a` the task index (a plain job: 0),
/// as noded expands them.
pub fn expand_output_path(job: &JobInfo, pattern: &str) -> String {
    let array_task = job.array_job_id.zip(job.array_task_id);
    let pattern = match (pattern.is_empty(), array_task) {
        (false, _) => pattern,
        (true, Some(_)) => "ysched-%A_%a.out",
        (true, None) => "ysched-%j.out",
    };
    ysched_common::text::expand_output_pattern(
        pattern,
        &ysched_common::text::PatternVars {
            job_id: job.id,
            job_name: &job.name,
            user: &job.user,
            node: None,
            array: array_task,
        },
    )
}

const EVENT_COLUMNS: &[Column; 3] = &[
    Column::left("TIME"),
    Column::left("KIND"),
    Column::left("DETAIL"),
];

/// Single-quotes an argument containing blanks or quotes, so the `Args=` line reads unambiguously.
fn quote_if_needed(arg: &str) -> Cow<'_, str> {
    if !arg.is_empty()
        && !arg.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"' || c == '\\')
    {
        Cow::Borrowed(arg)
    } else {
        Cow::Owned(format!("'{}'", arg.replace('\'', r"'\''")))
    }
}
