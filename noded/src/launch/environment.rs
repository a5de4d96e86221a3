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
/// The variables `--ntasks-per-node` sets: noded's alone, like the array ones.
pub const TASK_VARIABLES: [&str; 2] = ["YS_NTASKS_PER_NODE", "YS_NTASKS"];
/// `SLURM_CLUSTER_NAME` of every ysched job.
const SLURM_CLUSTER_NAME: &str = "ysched";
/// PATH for jobs whose exported environment has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The job's environment: the submitter's exported environment with the ysched variables on
/// top (they win over exported ones of the same name). The `YS_ARRAY_*` variables are an
/// array task's only: exported ones are dropped, so a plain job never has them; so are
/// `YS_NTASKS*` (`--ntasks-per-node` only), and with `slurm_env` the `SLURM_*` ones (see
/// [`slurm_variables`]). `YSCHED_SOCKET` is this node's client
/// socket, where the CLIs inside the job reach schedd through the node's agent; where the
/// node serves none, an exported one (the submit host's socket, meaningless here) is removed.
pub fn job_environment(
    job: &JobParams,
    node_name: &str,
    checkpoint_dir: Option<&Path>,
    client_socket: Option<&Path>,
) -> BTreeMap<String, String> {
    let mut env = job.env.clone();
    for name in ARRAY_VARIABLES.iter().chain(&TASK_VARIABLES) {
        env.remove(*name);
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
    if job.ntasks_per_node > 0 {
        let [per_node, total] = TASK_VARIABLES;
        set(per_node, job.ntasks_per_node.to_string());
        set(total, ntasks(job).to_string());
    }
    if job.slurm_env {
        slurm_variables(&mut env, job, node_name);
    }
    env
}

/// The tasks of the whole job: `--ntasks-per-node` (1 when not given: the batch script is
/// the node's one task) on each node.
fn ntasks(job: &JobParams) -> u64 {
    u64::from(job.ntasks_per_node.max(1)) * u64::from(job.nnodes.max(1))
}

/// Slurm's variables of a batch job (`--slurm-env`), for the tools that read them (submitit,
/// Lightning, DeepSpeed, torchrun wrappers): what sbatch's batch step would see, as far as
/// ysched has it. Every `SLURM_*` name the submitter exported is dropped first: one carried
/// over from a job that submitted this one (its id, its array task) would lie here.
fn slurm_variables(env: &mut BTreeMap<String, String>, job: &JobParams, node_name: &str) {
    env.retain(|name, _| !name.starts_with("SLURM_") || SUBMIT_SIDE.contains(&name.as_str()));
    let nnodes = job.nnodes.max(1);
    let nodelist = if job.nodelist.is_empty() {
        node_name.to_string()
    } else {
        job.nodelist.join(",")
    };
    let tasks_per_node = job.ntasks_per_node.max(1);
    let cpus = job.cpus.max(1);
    // Slurm's compact per-node counts: `4` on one node, `4(x2)` on two.
    let per_node = |count: u32| {
        if nnodes == 1 {
            count.to_string()
        } else {
            format!("{count}(x{nnodes})")
        }
    };
    let mut set = |key: &str, value: String| {
        env.insert(key.to_string(), value);
    };
    let id = job.job_id.to_string();
    set("SLURM_JOB_ID", id.clone());
    set("SLURM_JOBID", id);
    set("SLURM_JOB_NAME", job.name.clone());
    set("SLURM_JOB_USER", job.user.clone());
    set("SLURM_JOB_ACCOUNT", job.account.clone());
    set("SLURM_JOB_PARTITION", job.partition.clone());
    set("SLURM_JOB_NUM_NODES", nnodes.to_string());
    set("SLURM_NNODES", nnodes.to_string());
    set("SLURM_JOB_NODELIST", nodelist.clone());
    set("SLURM_NODELIST", nodelist);
    set("SLURMD_NODENAME", node_name.to_string());
    set("SLURM_NODEID", job.node_rank.to_string());
    // The batch step is the first task of its node.
    set(
        "SLURM_PROCID",
        (u64::from(job.node_rank) * u64::from(tasks_per_node)).to_string(),
    );
    set("SLURM_LOCALID", "0".into());
    set("SLURM_NTASKS", ntasks(job).to_string());
    set("SLURM_NPROCS", ntasks(job).to_string());
    if job.ntasks_per_node > 0 {
        set("SLURM_NTASKS_PER_NODE", job.ntasks_per_node.to_string());
    }
    set("SLURM_TASKS_PER_NODE", per_node(tasks_per_node));
    set("SLURM_CPUS_PER_TASK", cpus.to_string());
    set("SLURM_CPUS_ON_NODE", cpus.to_string());
    set("SLURM_JOB_CPUS_PER_NODE", per_node(cpus));
    if job.mem_bytes > 0 {
        set(
            "SLURM_MEM_PER_NODE",
            (job.mem_bytes / (1024 * 1024)).to_string(),
        );
    }
    if !job.gpus.is_empty() {
        let indices: Vec<String> = job.gpus.iter().map(u32::to_string).collect();
        set("SLURM_GPUS_ON_NODE", job.gpus.len().to_string());
        set("SLURM_JOB_GPUS", indices.join(","));
    }
    set("SLURM_SUBMIT_DIR", job.workdir.clone());
    // sbatch's own word for `--open-mode=append`, which `srun` inside the job follows.
    if job.open_append {
        set("SLURM_OPEN_MODE", "a".into());
    }
    set("SLURM_CLUSTER_NAME", SLURM_CLUSTER_NAME.into());
    set("SLURM_RESTART_COUNT", job.restart_count.to_string());
    if let Some(array) = &job.array {
        set("SLURM_ARRAY_JOB_ID", array.array_job_id.to_string());
        set("SLURM_ARRAY_TASK_ID", array.task_id.to_string());
        set("SLURM_ARRAY_TASK_COUNT", array.task_count.to_string());
        set("SLURM_ARRAY_TASK_MIN", array.task_min.to_string());
        set("SLURM_ARRAY_TASK_MAX", array.task_max.to_string());
    }
}

/// `SLURM_*` variables that describe the submit side, which sbatch itself exports and noded
/// does not know: kept from the submitter's environment (`yslurm sbatch` sets them).
const SUBMIT_SIDE: [&str; 1] = ["SLURM_SUBMIT_HOST"];

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

    /// Part 1 (rank 1) of a two-node array task asking for Slurm's variables.
    fn slurm_job() -> JobParams {
        JobParams {
            job_id: 19,
            name: "sweep".into(),
            user: "alice".into(),
            account: "vision".into(),
            partition: "gpu".into(),
            workdir: "/home/alice/run".into(),
            env: BTreeMap::from([
                ("SLURM_JOB_ID".into(), "4242".into()),
                ("SLURM_ARRAY_TASK_ID".into(), "3".into()),
                ("SLURM_SOMETHING_ELSE".into(), "stale".into()),
                ("SLURM_SUBMIT_HOST".into(), "login1".into()),
                ("YS_NTASKS".into(), "spoofed".into()),
            ]),
            gpus: vec![2, 3],
            cpus: 16,
            mem_bytes: 64 * 1024 * 1024 * 1024,
            nnodes: 2,
            node_rank: 1,
            nodelist: vec!["n1".into(), "n2".into()],
            restart_count: 1,
            ntasks_per_node: 4,
            slurm_env: true,
            array: Some(ArrayTaskParams {
                array_job_id: 12,
                task_id: 7,
                task_count: 25,
                task_min: 0,
                task_max: 96,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn slurm_env_gives_slurms_variables_and_drops_exported_ones() {
        let env = job_environment(&slurm_job(), "n2", None, None);
        let expected = [
            ("SLURM_JOB_ID", "19"),
            ("SLURM_JOBID", "19"),
            ("SLURM_JOB_NAME", "sweep"),
            ("SLURM_JOB_USER", "alice"),
            ("SLURM_JOB_ACCOUNT", "vision"),
            ("SLURM_JOB_PARTITION", "gpu"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_NNODES", "2"),
            ("SLURM_JOB_NODELIST", "n1,n2"),
            ("SLURM_NODELIST", "n1,n2"),
            ("SLURMD_NODENAME", "n2"),
            ("SLURM_NODEID", "1"),
            ("SLURM_PROCID", "4"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_NPROCS", "8"),
            ("SLURM_NTASKS_PER_NODE", "4"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
            ("SLURM_CPUS_PER_TASK", "16"),
            ("SLURM_CPUS_ON_NODE", "16"),
            ("SLURM_JOB_CPUS_PER_NODE", "16(x2)"),
            ("SLURM_MEM_PER_NODE", "65536"),
            ("SLURM_GPUS_ON_NODE", "2"),
            ("SLURM_JOB_GPUS", "2,3"),
            ("SLURM_SUBMIT_DIR", "/home/alice/run"),
            ("SLURM_SUBMIT_HOST", "login1"),
            ("SLURM_CLUSTER_NAME", "ysched"),
            ("SLURM_RESTART_COUNT", "1"),
            ("SLURM_ARRAY_JOB_ID", "12"),
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_ARRAY_TASK_COUNT", "25"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "96"),
            ("YS_NTASKS_PER_NODE", "4"),
            ("YS_NTASKS", "8"),
        ];
        for (name, value) in expected {
            assert_eq!(env.get(name).map(String::as_str), Some(value), "{name}");
        }
        let slurm_names = env.keys().filter(|k| k.starts_with("SLURM")).count();
        assert_eq!(slurm_names, expected.len() - 2, "{env:?}");
    }

    #[test]
    fn slurm_variables_only_when_asked_and_task_counts_only_when_given() {
        // Without slurm_env the exported environment is left as it was.
        let plain = JobParams {
            slurm_env: false,
            ..slurm_job()
        };
        let env = job_environment(&plain, "n2", None, None);
        assert_eq!(env["SLURM_JOB_ID"], "4242");
        assert_eq!(env["SLURM_SOMETHING_ELSE"], "stale");
        assert!(!env.contains_key("SLURM_NODEID"));
        assert_eq!(env["YS_NTASKS"], "8");

        // No --ntasks-per-node: one task per node, and neither YS_NTASKS* nor
        // SLURM_NTASKS_PER_NODE; a single node's counts have no `(xN)`.
        let single = JobParams {
            open_append: true,
            ntasks_per_node: 0,
            nnodes: 1,
            node_rank: 0,
            nodelist: Vec::new(),
            gpus: Vec::new(),
            cpus: 0,
            mem_bytes: 0,
            array: None,
            ..slurm_job()
        };
        let env = job_environment(&single, "n1", None, None);
        assert!(!env.contains_key("YS_NTASKS") && !env.contains_key("YS_NTASKS_PER_NODE"));
        assert!(!env.contains_key("SLURM_NTASKS_PER_NODE"));
        assert_eq!(env["SLURM_NTASKS"], "1");
        assert_eq!(env["SLURM_PROCID"], "0");
        assert_eq!(env["SLURM_TASKS_PER_NODE"], "1");
        assert_eq!(env["SLURM_CPUS_ON_NODE"], "1");
        assert_eq!(env["SLURM_JOB_NODELIST"], "n1");
        assert_eq!(env["SLURM_OPEN_MODE"], "a");
        for absent in [
            "SLURM_GPUS_ON_NODE",
            "SLURM_JOB_GPUS",
            "SLURM_MEM_PER_NODE",
            "SLURM_ARRAY_JOB_ID",
            "SLURM_ARRAY_TASK_ID",
            "SLURM_SOMETHING_ELSE",
        ] {
            assert!(!env.contains_key(absent), "{absent}");
        }
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
