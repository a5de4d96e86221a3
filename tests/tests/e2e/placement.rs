//! End-to-end placement: multi-node gangs, their environment, and failure of one part.

use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn env_map(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_multi_node_job_runs_once_per_node_with_the_torchrun_environment() {
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 4, A100),
        FakeNode::uniform("n2", 4, A100),
    ]);
    let id = c.submit(&[
        "-N",
        "2",
        "-G",
        "8",
        "--wrap",
        "env > \"$PWD/env-$YS_JOB_ID-$YS_NODE_RANK.txt\"",
    ]);
    let j = c.wait_state(id, "COMPLETED", SECS(30));
    assert_eq!(j["node"], "n1,n2");
    assert_eq!(j["gpus"].as_array().unwrap().len(), 8);
    let envs: Vec<_> = (0..2)
        .map(|rank| {
            env_map(&read_when_exists(
                &c.path(&format!("env-{id}-{rank}.txt")),
                SECS(5),
            ))
        })
        .collect();
    for (rank, e) in envs.iter().enumerate() {
        assert_eq!(e["YS_NODE_RANK"], rank.to_string());
        assert_eq!(e["YS_NNODES"], "2");
        assert_eq!(e["YS_NODELIST"], "n1,n2");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"].split(',').count(), 4);
        assert_eq!(e["YS_NODE"], ["n1", "n2"][rank]);
    }
    assert_eq!(envs[0]["MASTER_ADDR"], envs[1]["MASTER_ADDR"]);
    assert_eq!(envs[0]["MASTER_PORT"], envs[1]["MASTER_PORT"]);
    assert!(envs[0]["MASTER_PORT"].parse::<u16>().unwrap() > 1024);
}

#[test]
fn when_one_part_fails_the_others_are_stopped_and_the_job_fails() {
    let c = TestCluster::start(vec![
        FakeNode::uniform("n1", 2, A100),
        FakeNode::uniform("n2", 2, A100),
    ]);
    let id = c.submit(&[
        "-N",
        "2",
        "-G",
        "4",
        "--grace",
        "1",
        "--wrap",
        "if [ \"$YS_NODE_RANK\" = 1 ]; then exit 3; fi; sleep 300",
    ]);
    let j = c.wait_state(id, "FAILED", SECS(30));
    assert_eq!(j["exit_code"], 3, "{j}");
    // Every GPU is free again: the surviving part was stopped, not left running.
    for n in c.nodes() {
        assert!(
            n["gpus"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| g["job"].is_null()),
            "{n}"
        );
    }
    // A gang that cannot be placed whole waits; it never starts on one node.
    let busy = c.submit(&["-G", "2", "--wrap", "sleep 30"]);
    c.wait_state(busy, "RUNNING", SECS(10));
    let gang = c.submit(&["-N", "2", "-G", "4", "--wrap", "true"]);
    c.wait_waiting(gang, SECS(15));
    c.run("ycancel", &[&busy.to_string()]);
    c.wait_state(gang, "COMPLETED", SECS(30));
}

#[test]
fn topology_and_model_aware_placement_seen_from_inside_the_jobs() {
    let c = TestCluster::start(vec![
        FakeNode::islands("isl", 8, 4, A100),
        FakeNode::islands("a10", 4, 1, "NVIDIA A10"),
    ]);
    // The matrix as nvidia-smi prints it, from what the agent reported.
    let out = c.run("yctl", &["nodes", "--topology", "isl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = stdout(&out);
    let row0 = m.lines().find(|l| l.starts_with("GPU0")).expect("row GPU0");
    assert!(row0.contains("NV1") && row0.contains("SYS"), "{m}");
    // A 1-GPU job, then a 4-GPU job: the big one gets a whole NVLink island.
    let small = c.submit(&[
        "-G",
        "1",
        "--gpu-type",
        "A100",
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES; sleep 30",
    ]);
    c.wait_state(small, "RUNNING", SECS(10));
    let big = c.submit(&[
        "-G",
        "4",
        "--interconnect",
        "nvlink",
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES",
    ]);
    let j = c.wait_state(big, "COMPLETED", SECS(20));
    assert_eq!(j["node"], "isl");
    let seen = read_when_exists(&c.path(&format!("ysched-{big}.out")), SECS(5));
    let gpus: Vec<u32> = seen.trim().split(',').map(|g| g.parse().unwrap()).collect();
    assert_eq!(gpus.len(), 4);
    assert!(
        gpus.iter().all(|g| g / 4 == gpus[0] / 4),
        "one island, got {gpus:?}"
    );
    // Model matching: A10 is not an A100; an NVLink requirement no A10 box can meet is refused.
    let a10 = c.submit(&["-G", "2", "--gpu-type", "a10", "--wrap", "true"]);
    assert_eq!(c.wait_state(a10, "COMPLETED", SECS(20))["node"], "a10");
    let out = c.run(
        "ysub",
        &[
            "-G",
            "2",
            "--gpu-type",
            "A10",
            "--interconnect",
            "nvlink",
            "--wrap",
            "true",
        ],
    );
    assert!(
        !out.status.success(),
        "an impossible NVLink request was accepted"
    );
    assert!(
        stderr(&out).to_lowercase().contains("nvlink"),
        "{}",
        stderr(&out)
    );
}
