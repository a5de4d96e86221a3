//! End-to-end tests of Slurm-style scripts and flags through the real ysub to a real cluster:
//! `#SBATCH` lines translated, `#YSUB` lines winning over them, refused options failing the
//! submit with the line and the alternative, and Slurm's flags on ysub's command line.

use serde_json::Value;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn one_node() -> TestCluster {
    TestCluster::start(vec![FakeNode::uniform("n1", 4, A100)])
}

fn env_of(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} not in output:\n{text}"))
        .to_string()
}

/// The job's full record, from `yctl show job ID --json` (`ID` as yq shows it: `12`, `12_3`).
fn shown(c: &TestCluster, id: impl ToString) -> Value {
    let out = c.run("yctl", &["show", "job", &id.to_string(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("yctl show job --json")
}

#[test]
fn an_sbatch_script_runs_with_its_gpus_time_limit_name_and_output() {
    let c = one_node();
    let script = c.script(
        "train.sh",
        "#!/bin/bash\n\
         #SBATCH --gres=gpu:2\n\
         #SBATCH -t 1:00:00 -J x\n\
         #SBATCH -o %x-%j.out\n\
         #SBATCH --mem=1GB -c 2 --export=ALL,FROM_SBATCH=yes\n\
         #SBATCH --signal=B:USR1@30 -A proj -d singleton\n\
         echo \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\n\
         echo \"FROM_SBATCH=$FROM_SBATCH\"\n",
    );
    let id = c.submit(&[script.to_str().unwrap()]);
    let job = c.wait_state(id, "COMPLETED", SECS(30));
    assert_eq!(job["name"], "x");
    assert_eq!(job["time_limit"], 3600);
    assert_eq!(job["account"], "proj");
    assert_eq!(job["gpus"].as_array().unwrap().len(), 2);
    let out = read_when_exists(&c.path(&format!("x-{id}.out")), SECS(5));
    assert_eq!(env_of(&out, "CUDA_VISIBLE_DEVICES").split(',').count(), 2);
    assert_eq!(env_of(&out, "FROM_SBATCH"), "yes");
    let detail = shown(&c, id);
    assert_eq!(detail["mem_mib"], 1024);
    assert_eq!(detail["cpus"], 2);
    assert_eq!(detail["warn_signal"], "B:USR1@30");
    assert_eq!(detail["dependency"], "singleton");
}

#[test]
fn ysub_lines_and_the_command_line_win_over_sbatch_lines() {
    let c = one_node();
    let script = c.script(
        "both.sh",
        "#!/bin/sh\n\
         #SBATCH -J from-sbatch --gpus-per-node=1 --array=0-1 -D /nonexistent\n\
         #YSUB -J from-ysub -G 3\n\
         echo \"n=$CUDA_VISIBLE_DEVICES\"\n",
    );
    let work = c.work.display().to_string();
    // --wait follows every task of the array to its end.
    let out = c.run("ysub", &["--wait", "-D", &work, script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let tasks: Vec<Value> = c
        .jobs()
        .into_iter()
        .filter(|j| !j["array_job_id"].is_null())
        .collect();
    assert_eq!(tasks.len(), 2, "#SBATCH --array made two tasks: {tasks:?}");
    for task in &tasks {
        assert_eq!(task["state"], "COMPLETED");
        assert_eq!(task["name"], "from-ysub");
        assert_eq!(task["gpus"].as_array().unwrap().len(), 3);
        let detail = shown(&c, task["display_id"].as_str().unwrap());
        assert_eq!(detail["workdir"], work.as_str());
    }
}

#[test]
fn a_refused_option_fails_the_submit_naming_the_line_and_the_alternative() {
    let c = one_node();
    let script = c.script(
        "job.sh",
        "#!/bin/bash\n#SBATCH -J fine\n\n#SBATCH --mem-per-gpu=8G\ntrue\n",
    );
    let out = c.run("ysub", &[script.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "ysub: error: job.sh: line 4: #SBATCH --mem-per-gpu is not supported: give --mem \
         (memory per node) instead\n"
    );
    let unknown = c.script("typo.sh", "#!/bin/sh\n#SBATCH --gress=gpu:1\ntrue\n");
    let out = c.run("ysub", &[unknown.to_str().unwrap()]);
    assert!(
        stderr(&out).contains("typo.sh: line 2: #SBATCH --gress is not an sbatch option"),
        "{}",
        stderr(&out)
    );
    assert!(c.jobs().is_empty(), "nothing was submitted");
}

#[test]
fn slurm_flags_on_the_command_line() {
    let c = one_node();
    // Translated: --gres and --gpus-per-node per node, --requeue cancelling --no-requeue.
    let id = c.submit(&[
        "--gres",
        "gpu:2",
        "--no-requeue",
        "--requeue",
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES",
    ]);
    let job = c.wait_state(id, "COMPLETED", SECS(30));
    assert_eq!(job["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(shown(&c, id)["no_requeue"], false);
    // Refused: the table's alternative, not clap's misleading tip.
    let out = c.run("ysub", &["--reservation=maint", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with(
            "ysub: error: --reservation is not supported: ysched has no reservations: ask your \
             administrator for a tier, or give --begin\n"
        ),
        "{err}"
    );
    assert!(!err.contains("tip:"), "{err}");
    let out = c.run("ysub", &["-n", "4", "--wrap", "true"]);
    assert!(
        stderr(&out).contains("on ysub's command line give --ntasks-per-node N"),
        "{}",
        stderr(&out)
    );
    // --nodelist is ysub's now, host list and all; a typo of it keeps clap's tip to it.
    let out = c.run("ysub", &["--nodelst", "n1", "--wrap", "true"]);
    assert!(
        stderr(&out).contains("tip: a similar argument exists: '--nodelist'"),
        "{}",
        stderr(&out)
    );
    let out = c.run("ysub", &["-w", "n[1-20000]", "--wrap", "true"]);
    assert!(
        stderr(&out).contains("more than 10000 names"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_partition_the_scheduler_refuses_reaches_the_user_cleanly() {
    // schedd refuses `-p gpu` (no tier or configured partition of that name; before it
    // carried out partitions, any partition): the refusal reaches the user as one clean line
    // that names it, and nothing is queued.
    let c = one_node();
    let script = c.script("part.sh", "#!/bin/sh\n#SBATCH -p gpu\ntrue\n");
    let out = c.run("ysub", &[script.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.starts_with("ysub: error: "), "{err}");
    assert!(err.contains("partition"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(c.jobs().is_empty(), "nothing was submitted");
}
