//! The environment a job runs with: its exported one, under the variables ysched sets.

use super::job::JobParams;
use std::collections::BTreeMap;
use std::path::Path;

/// The variables that describe an array task. noded alone sets them: the same names in a job's
/// exported environment are dropped, for array tasks and plain jobs alike.
pub const ARRAY_VARIABLES: [&str; 5] = [
    "YS_ARRAY_JOB_ID",
    "YS_ARRAY_TASK_ID",
    "YS_ARRAY_TASK_COUNT",
    "YS_ARRAY_TASK_MIN",
    "YS_ARRAY_TASK_MAX",
];
/// PATH for jobs whose exported environment has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The job's environment: the submitter's exported environment with the ysched variables on
/// top (they win over exported ones of the same name). The `YS_ARRAY_*` variables are an
/// array task's only: exported ones are dropped, so a plain job never has them. `YSCHED_SOCKET` is this node's client
/// socket, where the CLIs inside the job reach schedd through the node's agent; where the
/// node serves none, an exported one (the submit host's socket, meaningless here) is removed.
pub fn job_environment(
    job: &JobParams,
    node_name: &str,
    checkpoint_dir: Option<&Path>,
    client_socket: Option<&Path>,
) -> BTreeMap<String, String> {
    let mut env = job.env.clone();
    for name in ARRAY_VARIABLES {
        env.remove(name);
    }
    match client_socket {
        Some(socket) => {
            env.insert(
                "YSCHED_SOCKET".into(),
                socket.to_string_lossy().into_owned(),
            );
        }
        None => {
            env.remove("YSCHED_SOCKET");
        }
    }
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    let join = |items: &[u32]| {
        items
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let nodelist = if job.nodelist.is_empty() {
        node_name.to_string()
    } else {
        job.nodelist.join(",")
    };
    let mut set = |key: &str, value: String| {
        env.insert(key.to_string(), value);
    };
    set("YS_JOB_ID", job.job_id.to_string());
    set("YS_JOB_NAME", job.name.clone());
    set("YS_NODE", node_name.to_string());
    set("YS_RESTART_COUNT", job.restart_count.to_string());
    set(
        "YS_CHECKPOINT_DIR",
        checkpoint_dir
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    set("CUDA_VISIBLE_DEVICES", join(&job.gpus));
    set("CUDA_DEVICE_ORDER", "PCI_BUS_ID".into());
    set("YS_NNODES", job.nnodes.max(1).to_string());
    set("YS_NODE_RANK", job.node_rank.to_string());
    set("YS_NODELIST", nodelist);
    if !job.master_addr.is_empty() {
        set("MASTER_ADDR", job.master_addr.clone());
    }
    if job.master_port != 0 {
        set("MASTER_PORT", job.master_port.to_string());
    }
    if let Some(array) = &job.array {
        let [job_id, task_id, count, min, max] = ARRAY_VARIABLES;
        set(job_id, array.array_job_id.to_string());
        set(task_id, array.task_id.to_string());
        set(count, array.task_count.to_string());
        set(min, array.task_min.to_string());
        set(max, array.task_max.to_string());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::job::ArrayTaskParams;

    #[test]
    fn array_tasks_get_array_variables_that_jobs_cannot_spoof() {
        let spoofed: BTreeMap<String, String> = ARRAY_VARIABLES
            .iter()
            .map(|name| (name.to_string(), "spoofed".to_string()))
            .chain([("HOME".to_string(), "/home/a".to_string())])
            .collect();
        let mut task = JobParams {
            job_id: 19,
            name: "sweep".into(),
            array: Some(ArrayTaskParams {
                array_job_id: 12,
                task_id: 7,
                task_count: 25,
                task_min: 0,
                task_max: 96,
            }),
            ..Default::default()
        };
        task.env = spoofed.clone();
        let env = job_environment(&task, "n1", None, None);
        assert_eq!(env["YS_JOB_ID"], "19");
        assert_eq!(env["YS_ARRAY_JOB_ID"], "12");
        assert_eq!(env["YS_ARRAY_TASK_ID"], "7");
        assert_eq!(env["YS_ARRAY_TASK_COUNT"], "25");
        assert_eq!(env["YS_ARRAY_TASK_MIN"], "0");
        assert_eq!(env["YS_ARRAY_TASK_MAX"], "96");
        assert_eq!(env["HOME"], "/home/a");

        // A plain job has none, not even ones it exported itself.
        let plain = JobParams {
            job_id: 20,
            env: spoofed,
            ..Default::default()
        };
        let env = job_environment(&plain, "n1", None, None);
        for name in ARRAY_VARIABLES {
            assert!(
                !env.contains_key(name),
                "{name} in a plain job's environment"
            );
        }
        assert_eq!(env["HOME"], "/home/a");
        let env = job_environment(&JobParams::default(), "n1", None, None);
        assert!(!env.keys().any(|k| k.starts_with("YS_ARRAY_")), "{env:?}");
    }

    #[test]
    fn environment_has_ysched_variables_on_top() {
        let job = JobParams {
            job_id: 7,
            name: "train".into(),
            env: BTreeMap::from([
                ("HOME".into(), "/home/a".into()),
                ("YS_JOB_ID".into(), "spoofed".into()),
                ("YSCHED_SOCKET".into(), "/run/elsewhere.sock".into()),
            ]),
            gpus: vec![1, 3],
            nnodes: 2,
            node_rank: 1,
            nodelist: vec!["n1".into(), "n2".into()],
            master_addr: "10.0.0.1".into(),
            master_port: 29500,
            restart_count: 2,
            ..Default::default()
        };
        let env = job_environment(
            &job,
            "n2",
            Some(Path::new("/ck/7")),
            Some(Path::new("/run/ysched/noded.sock")),
        );
        assert_eq!(env["YSCHED_SOCKET"], "/run/ysched/noded.sock");
        assert_eq!(env["YS_JOB_ID"], "7");
        assert_eq!(env["HOME"], "/home/a");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "1,3");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert_eq!(env["YS_NODELIST"], "n1,n2");
        assert_eq!(env["YS_NNODES"], "2");
        assert_eq!(env["YS_NODE_RANK"], "1");
        assert_eq!(env["YS_RESTART_COUNT"], "2");
        assert_eq!(env["YS_CHECKPOINT_DIR"], "/ck/7");
        assert_eq!(env["MASTER_ADDR"], "10.0.0.1");
        assert_eq!(env["MASTER_PORT"], "29500");
        assert!(env.contains_key("PATH"));

        // A node without a client socket gives none, not the submit host's.
        let without = job_environment(&job, "n2", None, None);
        assert!(!without.contains_key("YSCHED_SOCKET"));

        let single = job_environment(&JobParams::default(), "n1", None, None);
        assert_eq!(single["CUDA_VISIBLE_DEVICES"], "");
        assert_eq!(single["YS_NNODES"], "1");
        assert_eq!(single["YS_NODELIST"], "n1");
        assert!(!single.contains_key("MASTER_ADDR"));
    }
}
