//! Slurm's words for what ysched shows in its own: job states (`PENDING`, `PD`), node states
//! (`idle`, `mix`), times (`2026-01-05T08:00:00`), durations (`1-02:03:04`) and compressed
//! host lists (`n[1-3,7]`).

use ysched_common::time::{rfc3339, Millis};
use ysched_common::JobState;
use ysched_proto::JobInfo;

/// A job's state as Slurm names it, long (`squeue %T`, `sacct State`) and short (`%t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlurmState {
    pub long: &'static str,
    pub short: &'static str,
}

/// Slurm's state of a ysched state. A held job is PENDING (its reason says held); a job
/// being preempted is COMPLETING, as squeue shows a job in its grace; a preempted job that
/// ysched requeued is PENDING again (`--no-requeue` ones end PREEMPTED).
pub fn slurm_state(state: &str) -> SlurmState {
    let (long, short) = match JobState::parse(state) {
        Some(JobState::Pending | JobState::Held) => ("PENDING", "PD"),
        Some(JobState::Running) => ("RUNNING", "R"),
        Some(JobState::Preempting) => ("COMPLETING", "CG"),
        Some(JobState::Completed) => ("COMPLETED", "CD"),
        Some(JobState::Failed) => ("FAILED", "F"),
        Some(JobState::Cancelled) => ("CANCELLED", "CA"),
        Some(JobState::Timeout) => ("TIMEOUT", "TO"),
        Some(JobState::NodeFail) => ("NODE_FAIL", "NF"),
        Some(JobState::Preempted) => ("PREEMPTED", "PR"),
        Some(JobState::OutOfMemory) => ("OUT_OF_MEMORY", "OOM"),
        None => ("UNKNOWN", "U"),
    };
    SlurmState { long, short }
}

/// A listed job's state in Slurm's words: COMPLETING (`CG`) also while the grace of a cancel
/// runs (schedd says `cancelling`), as squeue shows such a job.
pub fn slurm_job_state(job: &JobInfo) -> SlurmState {
    if job.cancelling {
        SlurmState {
            long: "COMPLETING",
            short: "CG",
        }
    } else {
        slurm_state(&job.state)
    }
}

/// The Slurm state words a user may filter by (`squeue -t`, `sacct -s`, `scancel -t`), long
/// or short, any case, as the Slurm long names they match; `all` matches every state.
pub fn parse_slurm_states(list: &str) -> Result<Option<Vec<&'static str>>, String> {
    const KNOWN: [(&str, &str); 10] = [
        ("PENDING", "PD"),
        ("RUNNING", "R"),
        ("COMPLETING", "CG"),
        ("COMPLETED", "CD"),
        ("FAILED", "F"),
        ("CANCELLED", "CA"),
        ("TIMEOUT", "TO"),
        ("NODE_FAIL", "NF"),
        ("PREEMPTED", "PR"),
        ("OUT_OF_MEMORY", "OOM"),
    ];
    let mut states = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item.eq_ignore_ascii_case("all") {
            return Ok(None);
        }
        let upper = item.to_ascii_uppercase();
        // Slurm's own spellings of the same states.
        let upper = match upper.as_str() {
            "CANCELED" => "CANCELLED".to_string(),
            "REQUEUED" | "RQ" | "SUSPENDED" | "S" => {
                return Err(format!(
                    "state '{item}' never occurs in ysched (a requeued job is PENDING again)"
                ))
            }
            _ => upper,
        };
        let Some((long, _)) = KNOWN
            .iter()
            .find(|(long, short)| *long == upper || *short == upper)
        else {
            let names: Vec<&str> = KNOWN.iter().map(|(long, _)| *long).collect();
            return Err(format!(
                "invalid state '{item}': use one of {} (or short codes like PD, R, CD), or all",
                names.join(", ")
            ));
        };
        if !states.contains(long) {
            states.push(*long);
        }
    }
    if states.is_empty() {
        return Err(format!("invalid state list '{list}': no state given"));
    }
    Ok(Some(states))
}

/// The ysched states a request asks schedd for, to find jobs in the Slurm states `wanted`.
pub fn ysched_states_for(wanted: &[&str]) -> Vec<String> {
    JobState::ALL
        .into_iter()
        .filter(|state| wanted.contains(&slurm_state(state.as_str()).long))
        .map(|state| state.as_str().to_string())
        .collect()
}

/// Slurm's time stamp, `2026-01-05T08:00:00` (UTC here: ysched keeps no time zone), or
/// `Unknown` when unset.
pub fn slurm_time(ms: Millis) -> String {
    if ms <= 0 {
        return "Unknown".into();
    }
    rfc3339(ms).trim_end_matches('Z').to_string()
}

/// A duration as squeue prints it: `M:SS`, `H:MM:SS` or `D-HH:MM:SS`.
pub fn squeue_duration(secs: u64) -> String {
    ysched_common::time::format_elapsed(secs)
}

/// A duration as sacct prints it: `HH:MM:SS` or `D-HH:MM:SS`.
pub fn sacct_duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// A time limit: `UNLIMITED` for none, else as `format` prints durations.
pub fn time_limit(secs: u64, format: fn(u64) -> String) -> String {
    if secs == 0 {
        "UNLIMITED".into()
    } else {
        format(secs)
    }
}

/// The nodes a job holds as a compressed host list (`n[1-3],gpu07`), empty when none.
pub fn job_nodes(job: &JobInfo) -> String {
    let names: Vec<&str> = job.alloc.iter().map(|a| a.node.as_str()).collect();
    compress_hostlist(&names)
}

/// Slurm's compressed host list: names that differ only in a trailing number share a
/// prefix and a bracketed list of ranges (`n1,n2,n3,n7` → `n[1-3,7]`), numbers keeping
/// their zero padding; others are listed as they are. Order is kept by first appearance.
pub fn compress_hostlist(names: &[&str]) -> String {
    // (prefix, width, numbers) groups in order; width 0: no zero padding.
    let mut groups: Vec<(String, usize, Vec<u64>)> = Vec::new();
    let mut items: Vec<Result<usize, String>> = Vec::new();
    for name in names {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, number) = name.split_at(name.len() - digits);
        let parsed = (digits > 0 && digits <= 18)
            .then(|| number.parse::<u64>().ok())
            .flatten();
        let Some(value) = parsed else {
            items.push(Err(name.to_string()));
            continue;
        };
        let width = if number.starts_with('0') && digits > 1 {
            digits
        } else {
            0
        };
        match groups
            .iter()
            .position(|(p, w, _)| p == prefix && *w == width)
        {
            Some(index) => groups[index].2.push(value),
            None => {
                groups.push((prefix.to_string(), width, vec![value]));
                items.push(Ok(groups.len() - 1));
            }
        }
    }
    let rendered: Vec<String> = items
        .into_iter()
        .map(|item| match item {
            Err(name) => name,
            Ok(index) => {
                let (prefix, width, numbers) = &mut groups[index];
                numbers.sort_unstable();
                numbers.dedup();
                let number = |n: u64| format!("{n:0width$}", width = *width);
                if let [only] = numbers.as_slice() {
                    return format!("{prefix}{}", number(*only));
                }
                let mut ranges: Vec<String> = Vec::new();
                let mut start = numbers[0];
                let mut end = start;
                for &n in &numbers[1..] {
                    if n == end + 1 {
                        end = n;
                        continue;
                    }
                    ranges.push(range_text(start, end, &number));
                    start = n;
                    end = n;
                }
                ranges.push(range_text(start, end, &number));
                format!("{prefix}[{}]", ranges.join(","))
            }
        })
        .collect();
    rendered.join(",")
}

fn range_text(start: u64, end: u64, number: &dyn Fn(u64) -> String) -> String {
    if start == end {
        number(start)
    } else {
        format!("{}-{}", number(start), number(end))
    }
}

/// A node state as sinfo prints it, long (`%T`) and short (`%t`).
pub fn node_state(state: &str) -> SlurmState {
    let (long, short) = match state {
        "IDLE" => ("idle", "idle"),
        "MIXED" => ("mixed", "mix"),
        "ALLOCATED" => ("allocated", "alloc"),
        "DRAINING" => ("draining", "drng"),
        "DRAINED" => ("drained", "drain"),
        "DOWN" => ("down", "down"),
        _ => ("unknown", "unk"),
    };
    SlurmState { long, short }
}

/// Node states to filter by (`sinfo -t idle,mix`), long or short, as their short words.
pub fn parse_node_states(list: &str) -> Result<Vec<&'static str>, String> {
    const KNOWN: [&str; 6] = ["IDLE", "MIXED", "ALLOCATED", "DRAINING", "DRAINED", "DOWN"];
    let mut states = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let lower = item.to_ascii_lowercase();
        let found = KNOWN.iter().map(|k| node_state(k)).find(|s| {
            s.long == lower || s.short == lower || (lower == "drain" && s.short == "drng")
        });
        let Some(state) = found else {
            return Err(format!(
                "invalid node state '{item}': use idle, mix, alloc, drng, drain or down"
            ));
        };
        if !states.contains(&state.short) {
            states.push(state.short);
        }
        // `drain` means draining and drained, as in Slurm.
        if lower == "drain" && !states.contains(&"drain") {
            states.push("drain");
        }
    }
    Ok(states)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_in_slurms_words() {
        assert_eq!(slurm_state("HELD").short, "PD");
        assert_eq!(slurm_state("PREEMPTING").long, "COMPLETING");
        assert_eq!(slurm_state("OUT_OF_MEMORY").short, "OOM");
        assert_eq!(slurm_state("bogus").long, "UNKNOWN");
        assert_eq!(
            parse_slurm_states("pd,R,completed,canceled").unwrap(),
            Some(vec!["PENDING", "RUNNING", "COMPLETED", "CANCELLED"])
        );
        assert_eq!(parse_slurm_states("all").unwrap(), None);
        assert!(parse_slurm_states("nope").unwrap_err().contains("'nope'"));
        assert!(parse_slurm_states("RQ")
            .unwrap_err()
            .contains("PENDING again"));
        assert_eq!(
            ysched_states_for(&["PENDING", "COMPLETING"]),
            ["PENDING", "HELD", "PREEMPTING"]
        );
    }

    #[test]
    fn times_and_durations() {
        assert_eq!(slurm_time(0), "Unknown");
        assert_eq!(slurm_time(1_767_225_600_000), "2026-01-01T00:00:00");
        assert_eq!(squeue_duration(65), "1:05");
        assert_eq!(sacct_duration(65), "00:01:05");
        assert_eq!(sacct_duration(90_061), "1-01:01:01");
        assert_eq!(time_limit(0, sacct_duration), "UNLIMITED");
        assert_eq!(time_limit(3600, squeue_duration), "1:00:00");
    }

    #[test]
    fn host_lists_compress_as_slurms() {
        assert_eq!(compress_hostlist(&[]), "");
        assert_eq!(compress_hostlist(&["n1"]), "n1");
        assert_eq!(compress_hostlist(&["n1", "n2", "n3", "n7"]), "n[1-3,7]");
        assert_eq!(
            compress_hostlist(&["gpu07", "gpu08", "login"]),
            "gpu[07-08],login"
        );
        assert_eq!(compress_hostlist(&["b2", "a1", "b1"]), "b[1-2],a1");
    }
}
