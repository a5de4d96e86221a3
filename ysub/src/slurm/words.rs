//! Slurm's words for what ysched shows in its own: job states (`PENDING`, `PD`) and node
//! states (`idle`, `mix`), each in one table, times (`2026-01-05T08:00:00`), durations
//! (`1-02:03:04`) and a job's nodes as a compressed host list (`n[1-3,7]`).

use ysched_common::time::{rfc3339, Millis};
use ysched_common::JobState;
use ysched_proto::JobInfo;

/// A state as Slurm names it, long (`squeue %T`, `sacct State`, `sinfo %T`) and short (`%t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlurmState {
    pub long: &'static str,
    pub short: &'static str,
}

const fn state(long: &'static str, short: &'static str) -> SlurmState {
    SlurmState { long, short }
}

const PENDING: SlurmState = state("PENDING", "PD");
const RUNNING: SlurmState = state("RUNNING", "R");
const COMPLETING: SlurmState = state("COMPLETING", "CG");
const COMPLETED: SlurmState = state("COMPLETED", "CD");
const FAILED: SlurmState = state("FAILED", "F");
const CANCELLED: SlurmState = state("CANCELLED", "CA");
const TIMEOUT: SlurmState = state("TIMEOUT", "TO");
const NODE_FAIL: SlurmState = state("NODE_FAIL", "NF");
const PREEMPTED: SlurmState = state("PREEMPTED", "PR");
const OUT_OF_MEMORY: SlurmState = state("OUT_OF_MEMORY", "OOM");

/// Every Slurm job state a ysched job can be in, as messages list them.
pub const JOB_STATES: [SlurmState; 10] = [
    PENDING,
    RUNNING,
    COMPLETING,
    COMPLETED,
    FAILED,
    CANCELLED,
    TIMEOUT,
    NODE_FAIL,
    PREEMPTED,
    OUT_OF_MEMORY,
];

/// Slurm's state of a ysched state. A held job is PENDING (its reason says held); a job
/// being preempted is COMPLETING, as squeue shows a job in its grace; a preempted job that
/// ysched requeued is PENDING again (`--no-requeue` ones end PREEMPTED).
pub fn slurm_state(name: &str) -> SlurmState {
    match JobState::parse(name) {
        Some(JobState::Pending | JobState::Held) => PENDING,
        Some(JobState::Running) => RUNNING,
        Some(JobState::Preempting) => COMPLETING,
        Some(JobState::Completed) => COMPLETED,
        Some(JobState::Failed) => FAILED,
        Some(JobState::Cancelled) => CANCELLED,
        Some(JobState::Timeout) => TIMEOUT,
        Some(JobState::NodeFail) => NODE_FAIL,
        Some(JobState::Preempted) => PREEMPTED,
        Some(JobState::OutOfMemory) => OUT_OF_MEMORY,
        None => state("UNKNOWN", "U"),
    }
}

/// A listed job's state in Slurm's words: COMPLETING (`CG`) also while the grace of a cancel
/// runs (schedd says `cancelling`), as squeue shows such a job.
pub fn slurm_job_state(job: &JobInfo) -> SlurmState {
    if job.cancelling {
        COMPLETING
    } else {
        slurm_state(&job.state)
    }
}

/// The Slurm state words a user may filter by (`squeue -t`, `sacct -s`, `scancel -t`), long
/// or short, any case, as the Slurm long names they match; `all` matches every state.
pub fn parse_slurm_states(list: &str) -> Result<Option<Vec<&'static str>>, String> {
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
        let Some(found) = JOB_STATES
            .iter()
            .find(|s| s.long == upper || s.short == upper)
        else {
            let names: Vec<&str> = JOB_STATES.iter().map(|s| s.long).collect();
            return Err(format!(
                "invalid state '{item}': use one of {} (or short codes like PD, R, CD), or all",
                names.join(", ")
            ));
        };
        if !states.contains(&found.long) {
            states.push(found.long);
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
    super::compress_hostlist(&names)
}

/// ysched's node states with sinfo's words for them.
const NODE_STATES: [(&str, SlurmState); 6] = [
    ("IDLE", state("idle", "idle")),
    ("MIXED", state("mixed", "mix")),
    ("ALLOCATED", state("allocated", "alloc")),
    ("DRAINING", state("draining", "drng")),
    ("DRAINED", state("drained", "drain")),
    ("DOWN", state("down", "down")),
];

/// A node state as sinfo prints it, long (`%T`) and short (`%t`).
pub fn node_state(name: &str) -> SlurmState {
    NODE_STATES
        .iter()
        .find(|(ysched, _)| *ysched == name)
        .map_or(state("unknown", "unk"), |(_, slurm)| *slurm)
}

/// Node states to filter by (`sinfo -t idle,mix`), long or short, as their short words.
pub fn parse_node_states(list: &str) -> Result<Vec<&'static str>, String> {
    let mut states = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let lower = item.to_ascii_lowercase();
        let found = NODE_STATES.iter().map(|(_, s)| s).find(|s| {
            s.long == lower || s.short == lower || (lower == "drain" && s.short == "drng")
        });
        let Some(state) = found else {
            let shorts: Vec<&str> = NODE_STATES.iter().map(|(_, s)| s.short).collect();
            let (last, rest) = shorts.split_last().expect("node states");
            return Err(format!(
                "invalid node state '{item}': use {} or {last}",
                rest.join(", ")
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
        // Every state ysched has comes to one of the table's.
        for state in JobState::ALL {
            assert!(
                JOB_STATES.contains(&slurm_state(state.as_str())),
                "{state:?}"
            );
        }
    }

    #[test]
    fn node_states_in_sinfos_words() {
        assert_eq!(node_state("MIXED").short, "mix");
        assert_eq!(node_state("bogus").long, "unknown");
        assert_eq!(
            parse_node_states("idle,drain").unwrap(),
            ["idle", "drng", "drain"]
        );
        assert_eq!(
            parse_node_states("busy").unwrap_err(),
            "invalid node state 'busy': use idle, mix, alloc, drng, drain or down"
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
}
