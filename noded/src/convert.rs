//! The wire edge of the launcher: protobuf to and from the launcher's domain types.
//!
//! schedd's `LaunchJob` becomes [`JobParams`]; the launcher's events ([`JobStarted`],
//! [`FinishedRecord`]) become the messages the agent sends. Nothing under [`crate::launch`]
//! knows the protobuf types.

use crate::launch::{ArrayTaskParams, FinishedRecord, JobParams, JobStarted};
use ysched_proto as pb;

impl From<&pb::LaunchJob> for JobParams {
    fn from(j: &pb::LaunchJob) -> Self {
        JobParams {
            job_id: j.job_id,
            name: j.name.clone(),
            user: j.user.clone(),
            uid: j.uid,
            gid: j.gid,
            workdir: j.workdir.clone(),
            script: j.script.clone(),
            args: j.args.clone(),
            env: j.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            stdout_path: j.stdout_path.clone(),
            stderr_path: j.stderr_path.clone(),
            gpus: j.gpus.clone(),
            restart_count: j.restart_count,
            checkpoint_dir: j.checkpoint_dir.clone(),
            time_limit_secs: j.time_limit_secs,
            grace_secs: j.grace_secs,
            node_rank: j.node_rank,
            nnodes: j.nnodes,
            nodelist: j.nodelist.clone(),
            master_addr: j.master_addr.clone(),
            master_port: j.master_port,
            mem_bytes: j.mem_bytes,
            cpus: j.cpus,
            warn_signal: j.warn_signal,
            warn_secs: j.warn_secs,
            warn_batch_only: j.warn_batch_only,
            array: j.is_array_task.then_some(ArrayTaskParams {
                array_job_id: j.array_job_id,
                task_id: j.array_task_id,
                task_count: j.array_task_count,
                task_min: j.array_task_min,
                task_max: j.array_task_max,
            }),
            slurm_env: j.slurm_env,
            open_append: j.open_append,
            ntasks_per_node: j.ntasks_per_node,
            partition: j.partition.clone(),
            account: j.account.clone(),
        }
    }
}

impl From<&JobStarted> for pb::JobStarted {
    fn from(s: &JobStarted) -> Self {
        pb::JobStarted {
            job_id: s.job_id,
            pid: s.pid,
            time_ms: s.time_ms,
        }
    }
}

impl From<&FinishedRecord> for pb::JobFinished {
    fn from(f: &FinishedRecord) -> Self {
        pb::JobFinished {
            job_id: f.job_id,
            exit_code: f.exit_code,
            signal: f.signal,
            end_time_ms: f.end_time_ms,
            timed_out: f.timed_out,
            stop_requested: f.stop_requested,
            term_time_ms: f.term_time_ms,
            killed: f.killed,
            error: f.error.clone(),
            checkpoint_saved: f.checkpoint_saved,
            restart_count: f.restart_count,
            out_of_memory: f.out_of_memory,
            fenced: f.fenced,
            node_fault: f.node_fault,
            started: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launch of task 7 of array 12 (job 19), as schedd sends it.
    fn array_launch() -> pb::LaunchJob {
        pb::LaunchJob {
            job_id: 19,
            name: "sweep".into(),
            is_array_task: true,
            array_job_id: 12,
            array_task_id: 7,
            array_task_count: 25,
            array_task_min: 0,
            array_task_max: 96,
            ..Default::default()
        }
    }

    #[test]
    fn array_fields_come_from_the_launch() {
        let params = JobParams::from(&array_launch());
        assert_eq!(
            params.array,
            Some(ArrayTaskParams {
                array_job_id: 12,
                task_id: 7,
                task_count: 25,
                task_min: 0,
                task_max: 96,
            })
        );
        // Without is_array_task the fields mean nothing.
        let plain = pb::LaunchJob {
            is_array_task: false,
            ..array_launch()
        };
        assert_eq!(JobParams::from(&plain).array, None);
    }

    #[test]
    fn every_field_of_an_end_reaches_the_wire() {
        let end = FinishedRecord {
            job_id: 3,
            exit_code: Some(1),
            signal: Some(9),
            end_time_ms: 10,
            timed_out: true,
            stop_requested: true,
            term_time_ms: 8,
            killed: true,
            error: "lost".into(),
            checkpoint_saved: true,
            restart_count: 2,
            out_of_memory: true,
            fenced: true,
            node_fault: true,
        };
        let wire = pb::JobFinished::from(&end);
        assert_eq!(
            wire,
            pb::JobFinished {
                job_id: 3,
                exit_code: Some(1),
                signal: Some(9),
                end_time_ms: 10,
                timed_out: true,
                stop_requested: true,
                term_time_ms: 8,
                killed: true,
                error: "lost".into(),
                checkpoint_saved: true,
                restart_count: 2,
                out_of_memory: true,
                fenced: true,
                node_fault: true,
                started: None,
            }
        );
        let started = JobStarted {
            job_id: 3,
            pid: 77,
            time_ms: 5,
        };
        assert_eq!(
            pb::JobStarted::from(&started),
            pb::JobStarted {
                job_id: 3,
                pid: 77,
                time_ms: 5
            }
        );
    }
}
