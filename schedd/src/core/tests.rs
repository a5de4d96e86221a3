//! Unit tests of the scheduling core, driven through [`Cluster`]: arrange nodes and jobs,
//! schedule, compare the rendered plan.

use ysched_common::{JobId, TierConfig};

use super::check_satisfiable;
use super::order::pending_in_order;
use super::testkit::{
    render, Cluster, JobBuilder as J, NodeBuilder as N, A10, A100, H100, H800, HOUR, MINUTE, T0,
};

fn node8(name: &str) -> N {
    N::new(name).gpus(8, A100)
}

// ---------------------------------------------------------------------------------------------
// Queue order and placement

#[test]
fn queue_order_is_tier_then_submit_time_then_id() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .job(J::new(1).low().gpus(4))
        .job(J::new(2).high().gpus(4).submitted(T0 + 10 * MINUTE))
        .job(J::new(3).high().gpus(4).submitted(T0 + 5 * MINUTE))
        .job(J::new(4).high().gpus(4).submitted(T0 + 5 * MINUTE))
        .job(J::new(5).critical().gpus(4).held());
    let order: Vec<u64> = pending_in_order(&cluster.jobs, &cluster.fair_share)
        .iter()
        .map(|j| j.id.0)
        .collect();
    assert_eq!(order, [3, 4, 2, 1]);
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "place 3 on n1[0,1,2,3]\n\
         wait 1 Priority\n\
         wait 2 Priority\n\
         wait 4 Resources"
    );
}

#[test]
fn gpus_of_running_jobs_are_not_given_again() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(4).running_on("n1", &[0, 2, 4, 6]))
        .job(J::new(2).gpus(4));
    assert_eq!(render(&cluster.schedule(T0)), "place 2 on n1[1,3,5,7]");
}

#[test]
fn preempting_jobs_still_hold_their_gpus() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(
            J::new(1)
                .gpus(8)
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6, 7])
                .preempted_by(99),
        )
        .job(J::new(2).gpus(1));
    assert_eq!(render(&cluster.schedule(T0)), "wait 2 Resources");
}

#[test]
fn no_gpu_is_given_twice_in_one_plan() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(3))
        .job(J::new(2).gpus(3))
        .job(J::new(3).gpus(3))
        .job(J::new(4).gpus(2));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n1[0,1,2]\n\
         place 2 on n1[3,4,5]\n\
         place 4 on n1[6,7]\n\
         wait 3 Resources"
    );
}

#[test]
fn cpus_and_memory_limit_placement() {
    let cluster = Cluster::new()
        .node(node8("n1").cpus(16).mem(100_000))
        .job(J::new(1).gpus(1).cpus(12))
        .job(J::new(2).gpus(1).cpus(8))
        .job(J::new(3).gpus(1).cpus(4).mem(200_000))
        .job(J::new(4).gpus(1).cpus(2).mem(60_000))
        .job(J::new(5).gpus(1).cpus(1).mem(60_000))
        .job(J::new(6).gpus(1).cpus(0));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n1[0]\n\
         place 4 on n1[1]\n\
         place 6 on n1[2]\n\
         wait 2 Resources\n\
         wait 3 Unsatisfiable: no node has 200000 MiB of memory (largest has 100000 MiB)\n\
         wait 5 Priority"
    );
    let plan = cluster.schedule(T0);
    let cpus_of_6 = plan.placements[2].alloc[0].cpus;
    assert_eq!(cpus_of_6, 1, "0 CPUs means 1");
}

#[test]
fn gpu_type_must_match() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(8, A100))
        .node(N::new("n2").gpus(8, A10))
        .node(N::new("n3").gpus(2, H100))
        .job(J::new(1).gpus(2).gpu_type("A10"))
        .job(J::new(2).gpus(2).gpu_type("A100"))
        .job(J::new(3).gpus(2).gpu_type("V100"))
        .job(J::new(4).gpus(5).gpu_type("H100").gpu_type("A100"))
        .job(J::new(5).gpus(2).gpu_type("H100").gpu_type("A100"));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n2[0,1]\n\
         place 2 on n1[0,1]\n\
         place 4 on n1[2,3,4,5,6]\n\
         place 5 on n3[0,1]\n\
         wait 3 Unsatisfiable: no node has GPU type V100 \
         (models: NVIDIA A10, NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3)"
    );
}

#[test]
fn drained_and_disconnected_nodes_get_nothing() {
    let cluster = Cluster::new()
        .node(node8("n1").drained("bad fan"))
        .node(node8("n2").disconnected())
        .node(N::new("n3").gpus(2, A100))
        .job(J::new(1).gpus(4))
        .job(J::new(2).gpus(2));
    // Job 1 could run on n1 or n2 some day: it waits, it is not unsatisfiable.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 2 on n3[0,1]\nwait 1 Resources"
    );
}

#[test]
fn waiting_reasons_are_resources_priority_or_unsatisfiable() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(6))
        .job(J::new(2).gpus(4))
        .job(J::new(3).gpus(16))
        .job(J::new(4).gpus(4).submitted(T0 + 1))
        .job(J::new(5).gpus(2).submitted(T0 + 2))
        .job(J::new(6).gpus(1).submitted(T0 + 3));
    // 3 can never run, so it blocks nobody: 2 is the first job that waits for room. 5 still
    // fits behind it (no reservations for big jobs yet), 6 then waits behind 2 and 4.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n1[0,1,2,3,4,5]\n\
         place 5 on n1[6,7]\n\
         wait 2 Resources\n\
         wait 3 Unsatisfiable: no node has 16 GPUs (largest has 8)\n\
         wait 4 Priority\n\
         wait 6 Priority"
    );
}

#[test]
fn held_jobs_get_neither_placement_nor_reason() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(1).held());
    assert_eq!(cluster.schedule(T0), Default::default());
}

#[test]
fn best_fit_prefers_the_fullest_node_that_fits() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .node(node8("n3"))
        .node(node8("n4"))
        .job(J::new(1).gpus(4).running_on("n2", &[0, 1, 2, 3]))
        .job(J::new(2).gpus(7).running_on("n3", &[0, 1, 2, 3, 4, 5, 6]))
        .job(J::new(10).gpus(2))
        .job(J::new(11).gpus(8))
        .job(J::new(12).gpus(8));
    // 10: n3 has 1 free (too few), n2 has 4: n2. 11 and 12: n1 and n4 tie, by name.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 10 on n2[4,5]\n\
         place 11 on n1[0,1,2,3,4,5,6,7]\n\
         place 12 on n4[0,1,2,3,4,5,6,7]"
    );
}

#[test]
fn cpu_only_jobs_prefer_nodes_without_free_gpus() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(N::new("n2"))
        .job(J::new(1).cpus(4));
    assert_eq!(render(&cluster.schedule(T0)), "place 1 on n2[]");
}

#[test]
fn constraints_need_every_feature() {
    let cluster = Cluster::new()
        .node(node8("n1").feature("ib"))
        .node(node8("n2").feature("ib").feature("nvme"))
        .job(J::new(1).gpus(1).constraint("ib").constraint("nvme"))
        .job(J::new(2).gpus(1).constraint("roce"));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n2[0]\nwait 2 Unsatisfiable: no node has feature roce"
    );
}

#[test]
fn gang_takes_all_its_nodes_in_one_plan_or_none() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .node(node8("n3"))
        .job(J::new(1).gpus(6).running_on("n1", &[0, 1, 2, 3, 4, 5]))
        .job(J::new(2).gpus(8).nodes(2).cpus(4))
        .job(J::new(3).gpus(8).nodes(2))
        .job(J::new(4).gpus(6).nodes(3))
        .job(J::new(5).gpus(2))
        .job(J::new(6).gpus(4).nodes(4));
    // 4 fits only on n1 (2 free) of three nodes, so it takes nothing and 5 gets n1.
    let plan = cluster.schedule(T0);
    assert_eq!(
        render(&plan),
        "place 2 on n2[0,1,2,3]+n3[0,1,2,3]\n\
         place 3 on n2[4,5,6,7]+n3[4,5,6,7]\n\
         place 5 on n1[6,7]\n\
         wait 4 Resources\n\
         wait 6 Unsatisfiable: the job needs 4 nodes, only 3 are registered"
    );
    assert_eq!(plan.placements[0].alloc[1].cpus, 4, "cpus are per node");
}

#[test]
fn gang_runs_on_one_gpu_model() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .node(N::new("n2").gpus(4, H100))
        .node(N::new("n3").gpus(4, H100))
        .job(J::new(1).gpus(8).nodes(2));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n2[0,1,2,3]+n3[0,1,2,3]"
    );

    let mixed = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .node(N::new("n2").gpus(4, H100))
        .job(J::new(1).gpus(8).nodes(2));
    assert_eq!(
        render(&mixed.schedule(T0)),
        "wait 1 Unsatisfiable: fewer than 2 nodes with one GPU model each have 4 GPUs, 1 CPU"
    );
}

#[test]
fn same_input_same_plan() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .job(J::new(1).gpus(4).running_on("n1", &[0, 1, 2, 3]))
        .job(J::new(2).critical().gpus(8))
        .job(J::new(3).gpus(3))
        .job(J::new(4).gpus(8).nodes(2));
    assert_eq!(cluster.schedule(T0 + HOUR), cluster.schedule(T0 + HOUR));
}

// ---------------------------------------------------------------------------------------------
// Satisfiability and explain

#[test]
fn satisfiability_names_the_problem() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(8, A100).cpus(16).mem(64_000))
        .node(N::new("n2").gpus(2, A10).cpus(64).feature("ib"))
        .node(node8("n3").cpus(8).drained("maintenance").disconnected());
    let check = |job: J| check_satisfiable(&job.build().spec, &cluster.nodes);
    assert_eq!(
        check(J::new(1).gpus(8)),
        Ok(()),
        "drain and connection do not matter"
    );
    assert_eq!(
        check(J::new(1).gpus(16)),
        Err("no node has 16 GPUs (largest has 8)".into())
    );
    assert_eq!(
        check(J::new(1).gpus(4).gpu_type("A10")),
        Err("no node has 4 GPUs of type A10 (largest has 2)".into())
    );
    assert_eq!(
        check(J::new(1).gpus(1).gpu_type("H100")),
        Err("no node has GPU type H100 (models: NVIDIA A10, NVIDIA A100-SXM4-80GB)".into())
    );
    assert_eq!(
        check(J::new(1).cpus(128)),
        Err("no node has 128 CPUs (largest has 64)".into())
    );
    assert_eq!(
        check(J::new(1).mem(1_000_000)),
        Err("no node has 1000000 MiB of memory (largest has 512000 MiB)".into())
    );
    assert_eq!(
        check(J::new(1).gpus(4).cpus(32)),
        Err("no node has 4 GPUs, 32 CPUs together".into())
    );
    assert_eq!(
        check(J::new(1).gpus(4).constraint("ib")),
        Err("no node has 4 GPUs, 1 CPU, feature ib together".into())
    );
    assert_eq!(
        check(J::new(1).gpus(16).nodes(2).gpu_type("A10")),
        Err("no node has 8 GPUs of type A10 (largest has 2), \
             and the job needs that on each of 2 nodes"
            .into())
    );
    assert_eq!(
        check_satisfiable(&J::new(1).build().spec, &Default::default()),
        Err("no nodes are registered".into())
    );
}

#[test]
fn explain_gives_a_reason_per_node() {
    let cluster = Cluster::new()
        .node(node8("n1").feature("ib").drained("bad fan"))
        .node(node8("n2").feature("ib").disconnected())
        .node(N::new("n3").gpus(8, A10).feature("ib"))
        .node(node8("n4").feature("ib"))
        .node(node8("n5"))
        .node(node8("n6").feature("ib").cpus(8))
        .node(node8("n7").feature("ib"))
        .job(J::new(1).gpus(6).running_on("n4", &[0, 1, 2, 3, 4, 5]))
        .job(
            J::new(2)
                .high()
                .gpus(6)
                .gpu_type("A100")
                .cpus(16)
                .constraint("ib"),
        )
        .job(J::new(3).gpus(4).gpu_type("A100").cpus(16).constraint("ib"));
    // Job 2 is ahead of 3 in the queue and takes n7 (best fit) in the replayed pass.
    assert_eq!(
        cluster.explain(3, T0),
        [
            ("n1", "drained: bad fan"),
            ("n2", "agent not connected"),
            ("n3", "needs 4 GPUs of type A100, node has 0"),
            ("n4", "needs 4 GPUs of type A100, 2 free"),
            ("n5", "missing feature ib"),
            ("n6", "needs 16 CPUs, node has 8"),
            (
                "n7",
                "needs 4 GPUs of type A100, 2 free (taken by jobs ahead: 2)"
            ),
        ]
        .map(|(n, why)| (n.to_string(), why.to_string()))
    );
    let cluster = cluster.node(node8("n8").feature("ib"));
    assert_eq!(cluster.explain(3, T0)[7], ("n8".into(), "fits".into()));
}

// ---------------------------------------------------------------------------------------------
// GPUs out of service

const XID79: &str = "XID 79: GPU has fallen off the bus";

#[test]
fn gpus_out_of_service_are_never_given() {
    let cluster = Cluster::new()
        .node(node8("n1").gpu_out_of_service(3, XID79))
        .job(J::new(1).gpus(7))
        .job(J::new(2).gpus(1));
    // The other seven take jobs; GPU 3 takes none, even with a job waiting for one GPU.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n1[0,1,2,4,5,6,7]\n\
         wait 2 Resources"
    );
    let one = Cluster::new()
        .node(node8("n1").gpu_out_of_service(0, XID79))
        .job(J::new(1).gpus(1));
    assert_eq!(render(&one.schedule(T0)), "place 1 on n1[1]");
    // Returned to service, but not yet confirmed healthy by its node: not given either.
    let unconfirmed = Cluster::new()
        .node(node8("n1").gpu_unconfirmed(0).gpu_out_of_service(1, XID79))
        .job(J::new(1).gpus(1));
    assert_eq!(render(&unconfirmed.schedule(T0)), "place 1 on n1[2]");
}

#[test]
fn a_job_needing_the_gpu_out_of_service_waits_but_is_accepted() {
    let cluster = Cluster::new()
        .node(node8("n1").gpu_out_of_service(5, XID79))
        .job(J::new(1).gpus(8));
    assert_eq!(render(&cluster.schedule(T0)), "wait 1 Resources");
    // It may run once an administrator returns the GPU: the submit is not refused.
    assert_eq!(
        check_satisfiable(&J::new(2).gpus(8).build().spec, &cluster.nodes),
        Ok(())
    );
    assert_eq!(
        cluster.explain(1, T0),
        [(
            "n1".to_string(),
            "needs 8 GPUs, 7 free (GPU 5 out of service)".to_string()
        )]
    );
}

#[test]
fn a_node_whose_every_gpu_is_out_of_service_takes_no_job() {
    let mut node = node8("n1");
    for index in 0..8 {
        node = node.gpu_out_of_service(index, XID79);
    }
    let cluster = Cluster::new()
        .node(node)
        .node(N::new("cpu1").cpus(4))
        .job(J::new(1).cpus(8))
        .job(J::new(2).gpus(1));
    // Not even a CPU-only job: such a node needs someone's attention.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "wait 1 Resources\n\
         wait 2 Priority"
    );
    assert_eq!(cluster.explain(1, T0)[1].1, "8 GPUs out of service");
}

#[test]
fn preemption_never_frees_a_gpu_out_of_service() {
    // A low job holds GPUs 0-6 (it started before GPU 7 failed, or runs on in its grace).
    let cluster = Cluster::new()
        .node(node8("n1").gpu_out_of_service(7, XID79))
        .job(
            J::new(1)
                .low()
                .gpus(7)
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6]),
        )
        .job(J::new(2).high().gpus(8));
    assert_eq!(render(&cluster.schedule(T0)), "wait 2 Resources");
    let seven = Cluster::new()
        .node(node8("n1").gpu_out_of_service(7, XID79))
        .job(
            J::new(1)
                .low()
                .gpus(7)
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6]),
        )
        .job(J::new(2).high().gpus(7));
    let plan = seven.schedule(T0);
    assert_eq!(plan.evictions.len(), 1, "{}", render(&plan));
    assert_eq!(plan.evictions[0].victim.0, 1);
    // Once the victim is gone, the preemptor gets the seven in service.
    let after = Cluster::new()
        .node(node8("n1").gpu_out_of_service(7, XID79))
        .job(J::new(2).high().gpus(7));
    assert_eq!(render(&after.schedule(T0)), "place 2 on n1[0,1,2,3,4,5,6]");
}

#[test]
fn a_job_still_on_a_failed_gpu_holds_it_until_it_is_gone() {
    // Job 1 runs on GPU 3, which failed; it is being stopped. When it is gone, GPU 3 is still
    // given to nobody.
    let cluster = Cluster::new()
        .node(node8("n1").gpu_out_of_service(3, XID79))
        .job(J::new(1).gpus(2).running_on("n1", &[2, 3]))
        .job(J::new(2).gpus(7));
    assert_eq!(render(&cluster.schedule(T0)), "wait 2 Resources");
    let gone = Cluster::new()
        .node(node8("n1").gpu_out_of_service(3, XID79))
        .job(J::new(2).gpus(7));
    assert_eq!(render(&gone.schedule(T0)), "place 2 on n1[0,1,2,4,5,6,7]");
}

// ---------------------------------------------------------------------------------------------
// Preemption

/// Two 8-GPU nodes, each full with two 4-GPU low jobs (1, 2 on n1; 3, 4 on n2) started at T0.
fn full_of_low_jobs() -> Cluster {
    Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .job(J::new(1).gpus(4).running_on("n1", &[0, 1, 2, 3]))
        .job(J::new(2).gpus(4).running_on("n1", &[4, 5, 6, 7]).grace(60))
        .job(J::new(3).gpus(4).running_on("n2", &[0, 1, 2, 3]))
        .job(J::new(4).gpus(4).running_on("n2", &[4, 5, 6, 7]))
}

#[test]
fn critical_job_on_a_full_cluster_evicts_exactly_one() {
    let cluster = full_of_low_jobs().job(J::new(5).critical().gpus(4));
    // All four cost the same; n1 by name, and on n1 job 1 (the lower id) is reprieved first.
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "evict 2 for 5 on n1 grace 60\n\
         wait 5 Preempting 2 on n1"
    );
}

#[test]
fn preemptor_runs_once_its_victims_exit() {
    let mut cluster = full_of_low_jobs()
        .job(J::new(5).critical().gpus(4))
        .job(J::new(6).low().gpus(4));
    let now = T0 + HOUR;
    let plan = cluster.schedule(now);
    assert_eq!(
        render(&plan),
        "evict 2 for 5 on n1 grace 60\n\
         wait 5 Preempting 2 on n1\n\
         wait 6 Priority"
    );
    cluster.apply(&plan, now);
    // Grace running: no second eviction, and the reason stays.
    assert_eq!(
        render(&cluster.schedule(now + 1000)),
        render(&plan).replace("evict 2 for 5 on n1 grace 60\n", "")
    );
    cluster.exit(2);
    assert_eq!(
        render(&cluster.schedule(now + 2000)),
        "place 5 on n1[4,5,6,7]\nwait 6 Resources"
    );
}

#[test]
fn never_evicts_critical_non_preemptible_or_equal_tier_jobs() {
    let protected = TierConfig {
        value: 50,
        preemptible: false,
        ..TierConfig::default()
    };
    let cluster = Cluster::new()
        .tier("protected", protected)
        .node(node8("n1"))
        .node(node8("n2"))
        .node(node8("n3"))
        .job(
            J::new(1)
                .critical()
                .gpus(8)
                .running_on("n1", &(0..8).collect::<Vec<_>>()),
        )
        .job(
            J::new(2)
                .high()
                .gpus(8)
                .running_on("n2", &(0..8).collect::<Vec<_>>()),
        )
        .job(
            J::new(3)
                .tier("protected", 50)
                .gpus(8)
                .running_on("n3", &(0..8).collect::<Vec<_>>()),
        )
        .job(J::new(4).critical().gpus(1))
        .job(J::new(5).high().gpus(1));
    // 4 could evict 2 (high < critical): it does. 5 may evict neither 1 (critical, higher),
    // 2 (same tier) nor 3 (not preemptible).
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "evict 2 for 4 on n2 grace 30\n\
         wait 4 Preempting 2 on n2\n\
         wait 5 Priority"
    );
    let mut high_alone = cluster;
    high_alone.jobs.remove(&JobId(4));
    assert_eq!(render(&high_alone.schedule(T0 + HOUR)), "wait 5 Resources");
}

#[test]
fn min_runtime_protects_young_jobs() {
    let low = TierConfig {
        value: 100,
        min_runtime: 600,
        ..TierConfig::default()
    };
    let cluster = Cluster::new()
        .tier("low", low)
        .node(node8("n1"))
        .job(
            J::new(1)
                .gpus(8)
                .running_on("n1", &(0..8).collect::<Vec<_>>()),
        )
        .job(J::new(2).critical().gpus(8));
    assert_eq!(
        render(&cluster.schedule(T0 + 5 * MINUTE)),
        "wait 2 Resources"
    );
    assert_eq!(
        render(&cluster.schedule(T0 + 10 * MINUTE)),
        "evict 1 for 2 on n1 grace 30\nwait 2 Preempting 1 on n1"
    );
}

#[test]
fn reprieve_keeps_the_victim_set_minimal() {
    let now = T0 + HOUR;
    // Work lost (2 GPUs each): job 1 3000 s, 2 300 s, 3 2400 s, 4 600 s since checkpoint.
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(
            J::new(1)
                .gpus(2)
                .running_on("n1", &[0, 1])
                .checkpointed(now - 50 * MINUTE),
        )
        .job(
            J::new(2)
                .gpus(2)
                .running_on("n1", &[2, 3])
                .checkpointed(now - 5 * MINUTE),
        )
        .job(
            J::new(3)
                .gpus(2)
                .running_on("n1", &[4, 5])
                .checkpointed(now - 40 * MINUTE),
        )
        .job(
            J::new(4)
                .gpus(2)
                .running_on("n1", &[6, 7])
                .checkpointed(now - 10 * MINUTE),
        )
        .job(J::new(5).critical().gpus(4));
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 2 for 5 on n1 grace 30\n\
         evict 4 for 5 on n1 grace 30\n\
         wait 5 Preempting 2,4 on n1"
    );
}

#[test]
fn reprieve_spares_higher_tiers_first() {
    let now = T0 + HOUR;
    let cluster = Cluster::new()
        .node(node8("n1"))
        // The medium job has little work to lose, the low one much: tier still comes first.
        .job(
            J::new(1)
                .medium()
                .gpus(4)
                .running_on("n1", &[0, 1, 2, 3])
                .checkpointed(now),
        )
        .job(J::new(2).low().gpus(4).running_on("n1", &[4, 5, 6, 7]))
        .job(J::new(3).high().gpus(4));
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 2 for 3 on n1 grace 30\nwait 3 Preempting 2 on n1"
    );
}

#[test]
fn cost_prefers_the_node_losing_least_work() {
    let now = T0 + 2 * HOUR;
    let all: Vec<u32> = (0..8).collect();
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .job(J::new(1).gpus(8).running_on("n1", &all))
        .job(
            J::new(2)
                .gpus(8)
                .running_on("n2", &all)
                .checkpointed(now - MINUTE),
        )
        .job(J::new(3).critical().gpus(8));
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 2 for 3 on n2 grace 30\nwait 3 Preempting 2 on n2"
    );
}

#[test]
fn of_two_equal_victims_the_one_with_a_fresh_checkpoint_is_evicted() {
    let now = T0 + 6 * HOUR;
    // Same tier, GPUs and start; one saved a checkpoint a minute ago, the other never did:
    // evicting it loses a minute of work, evicting the other six hours. Both ways round, so
    // that the id cannot decide.
    for (fresh, other) in [(1, 2), (2, 1)] {
        let cluster = Cluster::new()
            .node(node8("n1"))
            .job(
                J::new(fresh)
                    .gpus(4)
                    .running_on("n1", &[0, 1, 2, 3])
                    .checkpointed(now - MINUTE),
            )
            .job(J::new(other).gpus(4).running_on("n1", &[4, 5, 6, 7]))
            .job(J::new(9).critical().gpus(4));
        assert_eq!(
            render(&cluster.schedule(now)),
            format!("evict {fresh} for 9 on n1 grace 30\nwait 9 Preempting {fresh} on n1")
        );
    }
}

#[test]
fn a_checkpoint_from_before_the_current_run_does_not_count() {
    let now = T0 + 6 * HOUR;
    // Job 1 was requeued an hour ago; its last checkpoint is from its first run, five hours
    // ago, and its current run has lost an hour since its start, less than job 2's two.
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(
            J::new(1)
                .gpus(4)
                .running_on("n1", &[0, 1, 2, 3])
                .started(now - HOUR)
                .checkpointed(now - 5 * HOUR),
        )
        .job(
            J::new(2)
                .gpus(4)
                .running_on("n1", &[4, 5, 6, 7])
                .started(now - 2 * HOUR),
        )
        .job(J::new(9).critical().gpus(4));
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 1 for 9 on n1 grace 30\nwait 9 Preempting 1 on n1"
    );
}

#[test]
fn cost_ranks_victim_tier_before_count_before_work() {
    let now = T0 + 2 * HOUR;
    let all: Vec<u32> = (0..8).collect();
    // n1: one medium job. n2: two low jobs. n3: one low job with two hours of work.
    let tier_first = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .job(
            J::new(1)
                .medium()
                .gpus(8)
                .running_on("n1", &all)
                .checkpointed(now),
        )
        .job(
            J::new(2)
                .gpus(4)
                .running_on("n2", &[0, 1, 2, 3])
                .checkpointed(now),
        )
        .job(
            J::new(3)
                .gpus(4)
                .running_on("n2", &[4, 5, 6, 7])
                .checkpointed(now),
        )
        .job(J::new(9).high().gpus(8));
    assert_eq!(
        render(&tier_first.schedule(now)),
        "evict 2 for 9 on n2 grace 30\n\
         evict 3 for 9 on n2 grace 30\n\
         wait 9 Preempting 2,3 on n2"
    );
    let count_before_work = tier_first
        .node(node8("n3"))
        .job(J::new(4).gpus(8).running_on("n3", &all));
    assert_eq!(
        render(&count_before_work.schedule(now)),
        "evict 4 for 9 on n3 grace 30\nwait 9 Preempting 4 on n3"
    );
}

#[test]
fn cost_prefers_evicting_the_most_recently_started() {
    let now = T0 + 2 * HOUR;
    let all: Vec<u32> = (0..8).collect();
    // Same tier, count and work lost (both checkpointed a minute ago); job 2 started later.
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .job(
            J::new(1)
                .gpus(8)
                .running_on("n1", &all)
                .checkpointed(now - MINUTE),
        )
        .job(
            J::new(2)
                .gpus(8)
                .running_on("n2", &all)
                .started(T0 + HOUR)
                .checkpointed(now - MINUTE),
        )
        .job(J::new(3).critical().gpus(8));
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 2 for 3 on n2 grace 30\nwait 3 Preempting 2 on n2"
    );
}

#[test]
fn in_flight_eviction_keeps_its_reservation_and_plans_no_second() {
    let now = T0 + HOUR;
    let mut cluster = Cluster::new()
        .node(node8("n1"))
        .job(
            J::new(2)
                .gpus(4)
                .running_on("n1", &[0, 1, 2, 3])
                .preempted_by(5),
        )
        .job(J::new(3).gpus(2).running_on("n1", &[4, 5]))
        .job(J::new(5).critical().gpus(6))
        .job(J::new(6).gpus(2));
    // 6 would fit on GPUs 6 and 7, but they are 5's. Job 3 is a candidate, yet not evicted.
    assert_eq!(
        render(&cluster.schedule(now)),
        "wait 5 Preempting 2 on n1\nwait 6 Priority"
    );
    cluster.exit(2);
    assert_eq!(
        render(&cluster.schedule(now)),
        "place 5 on n1[0,1,2,3,6,7]\nwait 6 Resources"
    );
}

#[test]
fn higher_job_may_take_an_in_flight_reservation() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(
            J::new(2)
                .gpus(4)
                .running_on("n1", &[0, 1, 2, 3])
                .preempted_by(5),
        )
        .job(J::new(3).gpus(2).running_on("n1", &[4, 5]))
        .job(J::new(5).high().gpus(6))
        .job(J::new(7).critical().gpus(2));
    // 7 is ahead of 5 in the queue and takes GPUs 6 and 7; 5 must wait, and still does not
    // evict job 3 while its first eviction is in flight.
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "place 7 on n1[6,7]\nwait 5 Resources"
    );
}

#[test]
fn reservation_holds_against_lower_jobs_in_the_same_plan() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(2).running_on("n1", &[0, 1]))
        .job(J::new(2).gpus(2).running_on("n1", &[2, 3]))
        .job(J::new(3).gpus(2).running_on("n1", &[4, 5]))
        .job(J::new(5).critical().gpus(4))
        .job(J::new(6).gpus(2));
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "evict 3 for 5 on n1 grace 30\n\
         wait 5 Preempting 3 on n1\n\
         wait 6 Priority"
    );
}

#[test]
fn two_preemptors_never_share_a_victim() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(4).running_on("n1", &[0, 1, 2, 3]))
        .job(J::new(2).gpus(4).running_on("n1", &[4, 5, 6, 7]))
        .job(J::new(5).critical().gpus(4))
        .job(J::new(6).high().gpus(4))
        .job(J::new(7).high().gpus(4));
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "evict 2 for 5 on n1 grace 30\n\
         evict 1 for 6 on n1 grace 30\n\
         wait 5 Preempting 2 on n1\n\
         wait 6 Preempting 1 on n1\n\
         wait 7 Priority"
    );
}

#[test]
fn medium_jobs_never_preempt() {
    let cluster = full_of_low_jobs().job(J::new(5).medium().gpus(4));
    assert_eq!(render(&cluster.schedule(T0 + HOUR)), "wait 5 Resources");
}

#[test]
fn multi_node_preemptor_evicts_on_each_of_its_nodes() {
    let mut cluster = full_of_low_jobs().job(J::new(5).critical().gpus(8).nodes(2));
    let now = T0 + HOUR;
    let plan = cluster.schedule(now);
    // One victim per node, each minimal there (job 1, then 3, reprieved first by id).
    assert_eq!(
        render(&plan),
        "evict 2 for 5 on n1 grace 60\n\
         evict 4 for 5 on n2 grace 30\n\
         wait 5 Preempting 2,4 on n1,n2"
    );
    cluster.apply(&plan, now);
    assert_eq!(
        render(&cluster.schedule(now + 1000)),
        "wait 5 Preempting 2,4 on n1,n2",
        "no second eviction while the first is in flight"
    );
    cluster.exit(2);
    assert_eq!(
        render(&cluster.schedule(now + 2000)),
        "wait 5 Preempting 4 on n2",
        "still waiting for the other node"
    );
    cluster.exit(4);
    assert_eq!(
        render(&cluster.schedule(now + 3000)),
        "place 5 on n1[4,5,6,7]+n2[4,5,6,7]"
    );
}

#[test]
fn multi_node_victim_frees_its_share_of_the_node() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .job(
            J::new(1)
                .gpus(8)
                .nodes(2)
                .running_on("n1", &[0, 1, 2, 3])
                .running_on("n2", &[0, 1, 2, 3]),
        )
        .job(J::new(2).gpus(4).running_on("n1", &[4, 5, 6, 7]))
        .job(J::new(3).critical().gpus(8));
    // On n2 the gang alone is enough; on n1 both jobs would have to go.
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "evict 1 for 3 on n2 grace 30\nwait 3 Preempting 1 on n2"
    );
}

#[test]
fn wrong_gpu_model_is_no_reason_to_evict() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(8, A10))
        .node(node8("n2"))
        .job(
            J::new(1)
                .gpus(8)
                .running_on("n1", &(0..8).collect::<Vec<_>>()),
        )
        .job(J::new(2).gpus(4).running_on("n2", &[0, 1, 2, 3]))
        .job(
            J::new(3)
                .gpus(4)
                .running_on("n2", &[4, 5, 6, 7])
                .checkpointed(T0 + HOUR),
        )
        .job(J::new(4).critical().gpus(4).gpu_type("A100"));
    // Evicting job 1 would free only A10s, no use to a job that wants A100s.
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "evict 3 for 4 on n2 grace 30\nwait 4 Preempting 3 on n2"
    );
}

// ---------------------------------------------------------------------------------------------
// GPU topology inside a node

#[test]
fn four_gpu_job_takes_one_whole_island() {
    let cluster = Cluster::new()
        .node(N::two_islands("n1", 8, A100))
        .job(J::new(1).gpus(1).running_on("n1", &[0]))
        .job(J::new(2).gpus(4));
    // Lowest indices would give 1,2,3,4, straddling the islands.
    assert_eq!(render(&cluster.schedule(T0)), "place 2 on n1[4,5,6,7]");
}

#[test]
fn two_gpu_job_takes_an_nvlink_pair() {
    let cluster = Cluster::new()
        .node(N::nvlink_pairs("n1", 8, A100))
        .job(J::new(1).gpus(1).running_on("n1", &[0]))
        .job(J::new(2).gpus(1).running_on("n1", &[3]))
        .job(J::new(3).gpus(2));
    // 1,2 are free too, but not bridged.
    assert_eq!(render(&cluster.schedule(T0)), "place 3 on n1[4,5]");
}

#[test]
fn pcie_only_boxes_pair_behind_one_switch() {
    let cluster = Cluster::new()
        .node(N::no_nvlink("n1", 8, A10))
        .job(J::new(1).gpus(1).running_on("n1", &[1]))
        .job(J::new(2).gpus(1).running_on("n1", &[2]))
        .job(J::new(3).gpus(2))
        .job(J::new(4).gpus(4));
    // 3: the PIX pair 4,5 is better than 0,3 (NODE); then 4 takes what is left, best worst
    // relation first: 0,3 and 6,7 straddle the sockets either way.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n1[4,5]\nplace 4 on n1[0,3,6,7]"
    );
}

#[test]
fn one_gpu_jobs_are_packed_into_one_island() {
    let cluster = Cluster::new()
        .node(N::two_islands("n1", 8, A100))
        .job(J::new(1).gpus(1).running_on("n1", &[5]))
        .job(J::new(2).gpus(1))
        .job(J::new(3).gpus(1))
        .job(J::new(4).gpus(1))
        .job(J::new(5).gpus(4).nvlink());
    // Island 4-7 already has a job: the small ones fill it, and island 0-3 stays whole.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 2 on n1[4]\n\
         place 3 on n1[6]\n\
         place 4 on n1[7]\n\
         place 5 on n1[0,1,2,3]"
    );
}

#[test]
fn one_gpu_jobs_complete_pairs_before_breaking_new_ones() {
    let cluster = Cluster::new()
        .node(N::nvlink_pairs("n1", 8, A100))
        .job(J::new(1).gpus(1).running_on("n1", &[0]))
        .job(J::new(2).gpus(1).running_on("n1", &[6]))
        .job(J::new(3).gpus(1))
        .job(J::new(4).gpus(1))
        .job(J::new(5).gpus(2).nvlink())
        .job(J::new(6).gpus(2).nvlink());
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n1[1]\n\
         place 4 on n1[7]\n\
         place 5 on n1[2,3]\n\
         place 6 on n1[4,5]"
    );
}

#[test]
fn after_churn_a_later_four_gpu_job_still_finds_an_island() {
    let mut cluster = Cluster::new().node(N::two_islands("n1", 8, A100));
    for id in 1..=4 {
        cluster = cluster.job(J::new(id).gpus(1).submitted(T0 + id as i64));
    }
    let plan = cluster.schedule(T0);
    assert_eq!(
        render(&plan),
        "place 1 on n1[0]\nplace 2 on n1[1]\nplace 3 on n1[2]\nplace 4 on n1[3]"
    );
    cluster.apply(&plan, T0);
    cluster.exit(2);
    let cluster = cluster
        .job(J::new(5).gpus(1).submitted(T0 + MINUTE))
        .job(J::new(6).gpus(4).nvlink().submitted(T0 + MINUTE));
    // 5 goes back into the hole of island 0-3, not into the empty island.
    assert_eq!(
        render(&cluster.schedule(T0 + MINUTE)),
        "place 5 on n1[1]\nplace 6 on n1[4,5,6,7]"
    );
}

#[test]
fn nvlink_job_waits_rather_than_straddling_islands() {
    let cluster = Cluster::new()
        .node(N::two_islands("n1", 8, A100))
        .job(J::new(1).gpus(1).running_on("n1", &[0]))
        .job(J::new(2).gpus(1).running_on("n1", &[4]))
        .job(J::new(3).medium().gpus(4).nvlink())
        .job(J::new(4).gpus(4));
    // 6 GPUs are free, 3 on each island. Job 4 does not insist: it straddles (3+1 keeps more
    // pairs NVLinked than 2+2).
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 4 on n1[1,2,3,5]\nwait 3 Resources"
    );
    assert_eq!(
        cluster.explain(3, T0),
        [(
            "n1".to_string(),
            "needs 4 GPUs linked by NVLink, at most 3 free are".to_string()
        )]
    );
}

#[test]
fn nvlink_is_unsatisfiable_where_no_node_has_enough_linked_gpus() {
    let cluster = Cluster::new()
        .node(N::no_nvlink("n1", 8, A10))
        .node(N::two_islands("n2", 8, A100))
        .node(N::nvlink_pairs("n3", 4, H100));
    let check = |job: J| check_satisfiable(&job.build().spec, &cluster.nodes);
    assert_eq!(
        check(J::new(1).gpus(2).gpu_type("A10").nvlink()),
        Err("no node has 2 GPUs of type A10 linked by NVLink (the most on one node is 1)".into())
    );
    assert_eq!(check(J::new(1).gpus(1).gpu_type("A10").nvlink()), Ok(()));
    assert_eq!(check(J::new(1).gpus(2).gpu_type("A10")), Ok(()));
    assert_eq!(check(J::new(1).gpus(4).nvlink()), Ok(()));
    assert_eq!(
        check(J::new(1).gpus(8).nvlink()),
        Err("no node has 8 GPUs linked by NVLink (the most on one node is 4)".into())
    );
    assert_eq!(
        check(J::new(1).gpus(4).gpu_type("H100").nvlink()),
        Err("no node has 4 GPUs of type H100 linked by NVLink (the most on one node is 2)".into())
    );
    // One node (n2) has an NVLinked set of 4 A100s; the gang needs two.
    assert_eq!(
        check(J::new(1).gpus(8).nodes(2).gpu_type("A100").nvlink()),
        Err("fewer than 2 nodes with one GPU model each have \
             4 GPUs of type A100 linked by NVLink, 1 CPU"
            .into())
    );
    let pcie_only = Cluster::new()
        .node(N::no_nvlink("n1", 8, A10))
        .job(J::new(1).gpus(2).nvlink());
    assert_eq!(
        render(&pcie_only.schedule(T0)),
        "wait 1 Unsatisfiable: no node has 2 GPUs linked by NVLink (the most on one node is 1)"
    );
}

#[test]
fn gpu_types_match_models_on_mixed_and_wired_nodes() {
    let cluster = Cluster::new()
        .node(N::no_nvlink("a10", 8, A10))
        .node(N::dgx("a100", 8, A100))
        .node(N::new("mixed").gpus(4, A100).gpus(4, H100))
        .job(J::new(1).gpus(2).gpu_type("A10"))
        .job(J::new(2).gpus(4).gpu_type("H100"))
        .job(J::new(3).gpus(2).gpu_type("A100").gpu_type("H100"))
        .job(J::new(4).gpus(8).gpu_type("A100"));
    // 3 accepts both models: the NVLinked A100s of the DGX beat the mixed node's A100s, which
    // are not NVLinked. 4 then finds no 8 A100s free together and waits.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on a10[0,1]\n\
         place 2 on mixed[4,5,6,7]\n\
         place 3 on a100[0,1]\n\
         wait 4 Resources"
    );
}

#[test]
fn node_with_an_nvlinked_set_beats_a_better_fit() {
    let cluster = Cluster::new()
        .node(N::no_nvlink("n1", 8, A100))
        .node(N::dgx("n2", 8, A100))
        .node(N::dgx("n3", 8, A100))
        .job(J::new(1).gpus(6).running_on("n1", &[0, 1, 2, 3, 4, 5]))
        .job(J::new(2).gpus(4).running_on("n3", &[0, 1, 2, 3]))
        .job(J::new(3).gpus(2))
        .job(J::new(4).gpus(1));
    // 3: n1 has the fewest free (2) but only over PCIe; n2 and n3 offer NVLinked pairs, and n3
    // fits best among them. 4: one GPU is connected anywhere: plain best fit, n1.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n3[4,5]\nplace 4 on n1[6]"
    );
}

// ---------------------------------------------------------------------------------------------
// Jobs spanning nodes

#[test]
fn gang_prefers_infiniband_nodes_of_one_model() {
    let cluster = Cluster::new()
        .node(N::dgx("a1", 8, A100))
        .node(N::dgx("a2", 8, A100).feature("ib"))
        .node(N::dgx("a3", 8, A100).feature("ib"))
        .node(N::dgx("h1", 8, H800).feature("ib"))
        .job(J::new(1).gpus(16).nodes(2))
        .job(J::new(2).gpus(8).nodes(2).gpu_type("A100").gpu_type("H800"));
    // 1: the two A100 nodes with ib, not a1. 2 accepts A100 and H800, but runs on one model:
    // only a1 is left of the A100s and there is one H800 node, so it waits rather than mix.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on a2[0,1,2,3,4,5,6,7]+a3[0,1,2,3,4,5,6,7]\nwait 2 Resources"
    );
    let with_constraint = Cluster::new()
        .node(N::dgx("a1", 8, A100))
        .node(N::dgx("a2", 8, A100).feature("ib"))
        .node(N::dgx("a3", 8, A100))
        .job(J::new(1).gpus(8).nodes(2))
        .job(J::new(2).gpus(8).nodes(2).constraint("ib"));
    // Soft: 1 takes a2 (ib) and a1 (name). Hard: 2 would need two ib nodes, there is one.
    assert_eq!(
        render(&with_constraint.schedule(T0)),
        "place 1 on a2[0,1,2,3]+a1[0,1,2,3]\n\
         wait 2 Unsatisfiable: fewer than 2 nodes with one GPU model each have \
         4 GPUs, 1 CPU, feature ib"
    );
}

#[test]
fn gang_with_several_types_runs_on_one_model() {
    let cluster = Cluster::new()
        .node(N::dgx("a1", 8, A100).feature("ib"))
        .node(N::dgx("h1", 8, H800).feature("ib"))
        .node(N::dgx("h2", 8, H800).feature("ib"))
        .job(J::new(1).gpus(8).nodes(2).gpu_type("A100").gpu_type("H800"));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on h1[0,1,2,3]+h2[0,1,2,3]"
    );
}

#[test]
fn gang_with_nvlink_needs_an_nvlinked_set_on_every_node() {
    let cluster = Cluster::new()
        .node(N::two_islands("n1", 8, A100))
        .node(N::two_islands("n2", 8, A100))
        .job(J::new(1).gpus(1).running_on("n1", &[0]))
        .job(J::new(2).gpus(1).running_on("n1", &[4]))
        .job(J::new(3).gpus(8).nodes(2).nvlink());
    assert_eq!(render(&cluster.schedule(T0)), "wait 3 Resources");
    let cluster = cluster.job(J::new(2).gpus(1).running_on("n1", &[1]));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n1[4,5,6,7]+n2[0,1,2,3]"
    );
}

// ---------------------------------------------------------------------------------------------
// Preemption and topology

#[test]
fn nvlink_preemptor_frees_a_whole_island() {
    let now = T0 + HOUR;
    let cluster = Cluster::new()
        .node(N::two_islands("n1", 8, A100))
        .job(J::new(1).gpus(3).running_on("n1", &[0, 1, 2]))
        .job(J::new(2).gpus(1).running_on("n1", &[4]))
        .job(
            J::new(3)
                .gpus(2)
                .running_on("n1", &[5, 6])
                .checkpointed(now - MINUTE),
        )
        .job(J::new(9).critical().gpus(4).nvlink());
    // Evicting 3 alone would free 4 GPUs, but 3, 5, 6 and 7 straddle the islands: it does
    // not count. Job 1 loses the most work and is spared; 2 and 3 free island 4-7.
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 2 for 9 on n1 grace 30\n\
         evict 3 for 9 on n1 grace 30\n\
         wait 9 Preempting 2,3 on n1"
    );
    // Without --interconnect the eviction still frees a well-connected set.
    let mut soft = cluster.clone();
    let nine = std::sync::Arc::make_mut(soft.jobs.get_mut(&JobId(9)).expect("job 9"));
    std::sync::Arc::make_mut(&mut nine.spec).interconnect = None;
    assert_eq!(render(&soft.schedule(now)), render(&cluster.schedule(now)));
}

#[test]
fn gang_victims_are_reprieved_across_nodes() {
    let now = T0 + HOUR;
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        // A critical job nobody may evict fills half of n1.
        .job(J::new(1).critical().gpus(4).running_on("n1", &[4, 5, 6, 7]))
        // Job 2 spans both nodes and has much work to lose; job 3 little.
        .job(
            J::new(2)
                .gpus(8)
                .nodes(2)
                .running_on("n1", &[0, 1, 2, 3])
                .running_on("n2", &[0, 1, 2, 3]),
        )
        .job(
            J::new(3)
                .gpus(4)
                .running_on("n2", &[4, 5, 6, 7])
                .checkpointed(now - MINUTE),
        )
        .job(J::new(9).critical().gpus(8).nodes(2));
    // Alone, n2 would spare 2 and evict 3; but n1 needs 2 gone, and with it n2 has room: 3
    // stays. Job 2 is evicted once, for both nodes.
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 2 for 9 on n1 grace 30\nwait 9 Preempting 2 on n1,n2"
    );
}

#[test]
fn gang_preemption_is_minimal_on_each_node() {
    let now = T0 + HOUR;
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .node(node8("n3"))
        .job(J::new(1).gpus(2).running_on("n1", &[0, 1]))
        .job(J::new(2).gpus(2).running_on("n1", &[2, 3]))
        .job(J::new(3).gpus(4).running_on("n1", &[4, 5, 6, 7]))
        .job(J::new(4).gpus(6).running_on("n2", &[0, 1, 2, 3, 4, 5]))
        .job(
            J::new(5)
                .high()
                .gpus(8)
                .running_on("n3", &(0..8).collect::<Vec<_>>()),
        )
        .job(J::new(9).high().gpus(8).nodes(2));
    // n3's job is of the preemptor's own tier: untouchable. n1: job 3 has the most work to
    // lose, so it is offered a reprieve first and keeps it; 1 and 2 go (sparing either would
    // leave 2 GPUs). n2: 4 GPUs needed, 2 free: job 4 must go.
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 1 for 9 on n1 grace 30\n\
         evict 2 for 9 on n1 grace 30\n\
         evict 4 for 9 on n2 grace 30\n\
         wait 9 Preempting 1,2,4 on n1,n2"
    );
}

#[test]
fn gang_takes_free_nodes_and_evicts_only_for_the_rest() {
    let now = T0 + HOUR;
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .node(node8("n3"))
        .job(
            J::new(1)
                .gpus(8)
                .running_on("n1", &(0..8).collect::<Vec<_>>()),
        )
        .job(
            J::new(2)
                .gpus(8)
                .running_on("n2", &(0..8).collect::<Vec<_>>()),
        )
        .job(J::new(9).critical().gpus(16).nodes(2))
        .job(J::new(10).gpus(1));
    // n3 is free: reserved for 9, so job 10 may not take it; one eviction gives the second node.
    assert_eq!(
        render(&cluster.schedule(now)),
        "evict 1 for 9 on n1 grace 30\n\
         wait 9 Preempting 1 on n1\n\
         wait 10 Priority"
    );
}

// ---------------------------------------------------------------------------------------------
// Fair share and tier quotas

#[test]
fn fair_share_orders_a_tier_by_factor_then_submit_time() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .job(J::new(1).account("heavy").gpus(4))
        .job(
            J::new(2)
                .account("light")
                .gpus(4)
                .submitted(T0 + 10 * MINUTE),
        )
        .job(
            J::new(3)
                .account("light")
                .gpus(4)
                .submitted(T0 + 5 * MINUTE),
        )
        .job(J::new(4).account("new").gpus(4).submitted(T0 + 20 * MINUTE))
        .job(J::new(5).account("heavy").gpus(4).submitted(T0 - MINUTE))
        .fair_share(&[("heavy", 0.1), ("light", 0.6)]);
    let order: Vec<u64> = pending_in_order(&cluster.jobs, &cluster.fair_share)
        .iter()
        .map(|j| j.id.0)
        .collect();
    // `new` has no usage (factor 1), then `light`, then `heavy`; each by submit time.
    assert_eq!(order, [4, 3, 2, 5, 1]);
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "place 4 on n1[0,1,2,3]\n\
         wait 1 Priority\n\
         wait 2 Priority\n\
         wait 3 Resources\n\
         wait 5 Priority"
    );
    // Same snapshot, same factors: same plan; no factors: submit time alone.
    assert_eq!(cluster.schedule(T0 + HOUR), cluster.schedule(T0 + HOUR));
    let fifo = cluster.clone().fair_share(&[]);
    assert_eq!(
        pending_in_order(&fifo.jobs, &fifo.fair_share)
            .iter()
            .map(|j| j.id.0)
            .collect::<Vec<_>>(),
        [5, 1, 3, 2, 4]
    );
}

#[test]
fn fair_share_finds_every_account_whatever_its_name() {
    let accounts = [
        ("a", 0.2),
        ("exactly-sixteen!", 0.3),
        ("longer-than-sixteen-bytes", 0.4),
        ("x", f64::NAN),
        ("y", -0.0),
        ("z", 7.0),
    ];
    let mut cluster = Cluster::new().fair_share(&accounts);
    for (id, account) in (1..).zip(["y", "a", "longer-than-sixteen-bytes", "unlisted", "x"]) {
        cluster = cluster.job(J::new(id).account(account));
    }
    cluster = cluster
        .job(J::new(6).account("exactly-sixteen!"))
        .job(J::new(7).account("z"));
    let order: Vec<u64> = pending_in_order(&cluster.jobs, &cluster.fair_share)
        .iter()
        .map(|j| j.id.0)
        .collect();
    // 1 (unlisted, and `z` clamped), 0.4, 0.3, 0.2, then 0 (a NaN and -0.0 count as 0).
    assert_eq!(order, [4, 7, 3, 6, 2, 1, 5]);
    assert_eq!(cluster.fair_share.factor("z"), 1.0);
    assert_eq!(cluster.fair_share.factor("unlisted"), 1.0);
    assert_eq!(cluster.fair_share.factor("x"), 0.0);
}

#[test]
fn fair_share_never_passes_a_higher_tier_nor_preempts_inside_one() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .node(N::new("n2").gpus(4, A100))
        // A heavy account's high job runs; a fresh account's high job does not evict it.
        .job(
            J::new(1)
                .high()
                .account("heavy")
                .gpus(4)
                .running_on("n1", &[0, 1, 2, 3]),
        )
        .job(
            J::new(2)
                .high()
                .account("fresh")
                .gpus(4)
                .submitted(T0 + MINUTE),
        )
        // The heavy account's medium job goes before the fresh account's low one.
        .job(
            J::new(3)
                .medium()
                .account("heavy")
                .gpus(4)
                .submitted(T0 + 2 * MINUTE),
        )
        .job(J::new(4).low().account("fresh").gpus(4))
        .fair_share(&[("heavy", 0.01), ("fresh", 1.0)]);
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "place 2 on n2[0,1,2,3]\n\
         wait 3 Resources\n\
         wait 4 Priority"
    );
}

/// `high` limited to 16 GPUs per account.
fn high_quota(per_account: u32, per_user: u32) -> TierConfig {
    TierConfig {
        max_gpus_per_account: per_account,
        max_gpus_per_user: per_user,
        ..ysched_common::config::default_tiers()["high"].clone()
    }
}

#[test]
fn the_17th_gpu_of_a_team_at_high_waits_while_another_team_starts() {
    let cluster = Cluster::new()
        .tier("high", high_quota(16, 0))
        .node(node8("n1"))
        .node(node8("n2"))
        .node(node8("n3"))
        .node(node8("n4"))
        .job(
            J::new(1)
                .high()
                .account("ml")
                .gpus(8)
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6, 7]),
        )
        .job(
            J::new(2)
                .high()
                .account("ml")
                .gpus(4)
                .running_on("n2", &[0, 1, 2, 3]),
        )
        // `ml` holds 12 at high: 4 more fit the quota, the 17th does not.
        .job(
            J::new(3)
                .high()
                .account("ml")
                .gpus(4)
                .submitted(T0 + MINUTE),
        )
        .job(
            J::new(4)
                .high()
                .account("ml")
                .gpus(1)
                .submitted(T0 + 2 * MINUTE),
        )
        // Another team's job starts, and `ml` may still use other tiers.
        .job(
            J::new(5)
                .high()
                .account("vision")
                .gpus(8)
                .submitted(T0 + 3 * MINUTE),
        )
        .job(
            J::new(6)
                .low()
                .account("ml")
                .gpus(4)
                .submitted(T0 + 4 * MINUTE),
        );
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "place 3 on n2[4,5,6,7]\n\
         place 5 on n3[0,1,2,3,4,5,6,7]\n\
         place 6 on n4[0,1,2,3]\n\
         wait 4 AccountLimit"
    );
}

#[test]
fn a_job_over_its_quota_preempts_nobody_and_holds_up_nobody() {
    let cluster = Cluster::new()
        .tier("high", high_quota(8, 0))
        .node(node8("n1"))
        .node(node8("n2"))
        .job(
            J::new(1)
                .high()
                .account("ml")
                .gpus(8)
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6, 7]),
        )
        .job(
            J::new(2)
                .low()
                .account("ops")
                .gpus(8)
                .running_on("n2", &[0, 1, 2, 3, 4, 5, 6, 7]),
        )
        .job(
            J::new(3)
                .high()
                .account("ml")
                .gpus(8)
                .submitted(T0 + MINUTE),
        )
        .job(
            J::new(4)
                .medium()
                .account("ops")
                .gpus(2)
                .submitted(T0 + MINUTE),
        );
    // Job 3 would preempt the low job but is over its account's quota; job 4, after it,
    // waits for resources, not for job 3 (`Priority`).
    assert_eq!(
        render(&cluster.schedule(T0 + HOUR)),
        "wait 3 AccountLimit\n\
         wait 4 Resources"
    );
}

#[test]
fn jobs_placed_in_the_same_pass_count_against_the_quota() {
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 8))
        .node(node8("n1"))
        .node(node8("n2"))
        .job(J::new(1).high().user("bob").gpus(4))
        .job(J::new(2).high().user("bob").gpus(4))
        .job(J::new(3).high().user("bob").gpus(1))
        .job(J::new(4).high().user("carol").gpus(4))
        .job(J::new(5).medium().user("bob").gpus(4));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n1[0,1,2,3]\n\
         place 2 on n1[4,5,6,7]\n\
         place 4 on n2[0,1,2,3]\n\
         place 5 on n2[4,5,6,7]\n\
         wait 3 UserLimit"
    );
    // A stopping job still counts: its GPUs are held until it is gone.
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 8))
        .node(node8("n1"))
        .job(
            J::new(1)
                .high()
                .user("bob")
                .gpus(8)
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6, 7])
                .preempted_by(99),
        )
        .job(J::new(2).high().user("bob").gpus(1));
    assert_eq!(render(&cluster.schedule(T0)), "wait 2 UserLimit");
}

// ---------------------------------------------------------------------------------------------
// Architecture

/// The pure modules stay pure: every production file of `core/`, `state/`, `fair_share` and
/// `report/` (found by listing the directories, so that a new file is checked too) names no
/// async runtime, RPC, storage, clock, randomness or file and network I/O. `core/` and
/// `fair_share` also use ordered maps only: the same input gives the same plan and factors.
/// Only code counts, not comments. Test files are exempt: `*_tests.rs`, `tests.rs`, and
/// `testkit.rs` (the fixtures of tests).
#[test]
fn pure_modules_stay_pure() {
    const IMPURE: &[&str] = &[
        "tokio",
        "tonic",
        "prost",
        "ysched_proto",
        "sled",
        "SystemTime",
        "Instant",
        "now_ms",
        "rand::",
        "std::fs",
        "std::net",
        "std::process",
        "std::thread",
    ];
    const UNORDERED: &[&str] = &["HashMap", "HashSet"];
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // `report/` may keep hash maps: they serve lookups only (a memo, an index, runs by job
    // id with a fixed hasher), and what a report shows is sorted.
    let modules: [(&str, &[&[&str]]); 7] = [
        ("core", &[IMPURE, UNORDERED]),
        ("core/pass", &[IMPURE, UNORDERED]),
        ("fair_share", &[IMPURE, UNORDERED]),
        ("state", &[IMPURE]),
        ("state/agent_events", &[IMPURE]),
        ("state/lifecycle", &[IMPURE]),
        ("report", &[IMPURE]),
    ];
    let mut checked = Vec::new();
    let mut violations = Vec::new();
    for (module, rules) in modules {
        let path = src.join(module);
        let in_dir = path.is_dir();
        let files: Vec<std::path::PathBuf> = if in_dir {
            let mut files: Vec<_> = std::fs::read_dir(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .map(|entry| entry.expect("directory entry").path())
                .collect();
            files.sort();
            files
        } else {
            vec![path]
        };
        for file in files {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            // A subdirectory listed above is checked as a module of its own.
            if modules.iter().any(|(listed, _)| src.join(listed) == file) {
                continue;
            }
            assert!(
                !file.is_dir(),
                "{}: a directory in a pure module: check it here too",
                file.display()
            );
            if !name.ends_with(".rs")
                || name.ends_with("_tests.rs")
                || name == "tests.rs"
                || name == "testkit.rs"
            {
                continue;
            }
            let label = if in_dir {
                format!("{module}/{name}")
            } else {
                name
            };
            let text = std::fs::read_to_string(&file).unwrap();
            let code: String = text
                .lines()
                .map(|line| line.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            for word in rules.iter().flat_map(|words| words.iter()) {
                if code.contains(word) {
                    violations.push(format!("{label} mentions {word}"));
                }
            }
            checked.push(label);
        }
    }
    assert!(
        checked.iter().any(|f| f == "core/backfill.rs") && checked.len() > 20,
        "the listing missed files: {checked:?}"
    );
    assert!(violations.is_empty(), "{violations:#?}");
}
