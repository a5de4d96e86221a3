//! Reading what the CLIs print: a process's output as text, a job's GPUs from its JSON.

use std::process::Output;

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The GPU indices a job holds, as `yq --json` / `yctl show job --json` list them (none when
/// it holds none).
pub fn job_gpus(job: &serde_json::Value) -> Vec<u64> {
    job["gpus"]
        .as_array()
        .map(|a| a.iter().map(|g| g.as_u64().unwrap()).collect())
        .unwrap_or_default()
}
