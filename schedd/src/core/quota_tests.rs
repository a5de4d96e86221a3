//! Unit tests of the tiers' GPU quotas: a job counts what it holds, so an `--exclusive` job
//! counts every GPU of its nodes, at submit, in a pass and while it runs.

use ysched_common::TierConfig;

use super::testkit::{render, Cluster, JobBuilder as J, NodeBuilder as N, A10, A100, T0};
use super::{check_quota_reachable, TierQuota, Topologies};

fn node8(name: &str) -> N {
    N::new(name).gpus(8, A100)
}

/// `high` with these quotas (0: none).
fn high_quota(per_account: u32, per_user: u32) -> TierConfig {
    TierConfig {
        max_gpus_per_account: per_account,
        max_gpus_per_user: per_user,
        ..ysched_common::config::default_tiers()["high"].clone()
    }
}

#[test]
fn an_exclusive_job_asking_for_no_gpu_counts_every_gpu_of_the_node_it_would_take() {
    // The attack: `--exclusive -G 0` twice, with a quota of 2, held both 8-GPU nodes.
    let cluster = Cluster::new()
        .tier("high", high_quota(2, 2))
        .node(node8("n1"))
        .node(node8("n2"))
        .job(J::new(1).high().user("eve").exclusive())
        .job(J::new(2).high().user("eve").exclusive())
        .job(J::new(3).high().user("eve").gpus(2));
    // Job 1 would hold 8 GPUs: over the quota, it waits, holds up nobody, and the user's
    // 2-GPU job runs within it.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n1[0,1]\n\
         wait 1 AccountLimit\n\
         wait 2 AccountLimit"
    );
    // With the user's quota alone, the reason names it.
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 2))
        .node(node8("n1"))
        .job(J::new(1).high().user("eve").exclusive());
    assert_eq!(render(&cluster.schedule(T0)), "wait 1 UserLimit");
}

#[test]
fn a_placed_exclusive_job_counts_its_whole_node_against_later_jobs_of_the_pass() {
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 10))
        .node(node8("n1"))
        .node(node8("n2"))
        .job(J::new(1).high().user("eve").gpus(1).exclusive())
        .job(J::new(2).high().user("eve").gpus(4))
        .job(J::new(3).high().user("eve").gpus(2))
        .job(J::new(4).high().user("bob").gpus(4));
    // Job 1 holds n1 whole: 8 of eve's 10. Her 4-GPU job would make 12; her 2-GPU one fits.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n1[0,1,2,3,4,5,6,7]\n\
         place 3 on n2[0,1]\n\
         place 4 on n2[2,3,4,5]\n\
         wait 2 UserLimit"
    );
}

#[test]
fn a_running_exclusive_job_counts_every_gpu_of_its_node_out_of_service_ones_too() {
    // GPU 7 was out of service when the job took n1: its allocation names 7 GPUs, yet no
    // other job may use the eighth while it runs.
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 9))
        .node(node8("n1").gpu_out_of_service(7, "XID 79"))
        .node(node8("n2"))
        .job(
            J::new(1)
                .high()
                .user("eve")
                .exclusive()
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6]),
        )
        .job(J::new(2).high().user("eve").gpus(2))
        .job(J::new(3).high().user("eve").gpus(1));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n2[0]\n\
         wait 2 UserLimit"
    );
}

#[test]
fn an_exclusive_job_under_a_quota_takes_a_node_within_it_over_a_better_connected_one() {
    // n1's NVLink would rank first for two GPUs, but taking it whole would hold 8.
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 4))
        .node(N::dgx("n1", 8, A100))
        .node(N::no_nvlink("n2", 4, A10))
        .job(J::new(1).high().user("eve").gpus(2).exclusive());
    assert_eq!(render(&cluster.schedule(T0)), "place 1 on n2[0,1,2,3]");
    // Without a quota, it goes where its GPUs are best connected.
    let mut unlimited = cluster.clone();
    unlimited.tiers.insert("high".into(), high_quota(0, 0));
    assert_eq!(
        render(&unlimited.schedule(T0)),
        "place 1 on n1[0,1,2,3,4,5,6,7]"
    );
    // Once the small node is taken, the large one would go over: the job waits for its
    // quota, not for room (and holds up nobody).
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 4))
        .node(N::dgx("n1", 8, A100))
        .node(N::no_nvlink("n2", 4, A10))
        .job(
            J::new(1)
                .high()
                .user("bob")
                .gpus(4)
                .running_on("n2", &[0, 1, 2, 3]),
        )
        .job(J::new(2).high().user("eve").gpus(2).exclusive())
        .job(J::new(3).high().user("carol").gpus(1));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n1[0]\n\
         wait 2 UserLimit"
    );
}

#[test]
fn an_exclusive_preemptor_over_its_quota_evicts_nobody() {
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 4))
        .node(node8("n1"))
        .job(
            J::new(1)
                .low()
                .user("bob")
                .gpus(2)
                .running_on("n1", &[0, 1]),
        )
        .job(J::new(2).high().user("eve").exclusive());
    assert_eq!(
        render(&cluster.schedule(T0 + 3_600_000)),
        "wait 2 UserLimit"
    );
    // Within the quota, the same preemptor evicts.
    let cluster = Cluster::new()
        .tier("high", high_quota(0, 8))
        .node(node8("n1"))
        .job(
            J::new(1)
                .low()
                .user("bob")
                .gpus(2)
                .running_on("n1", &[0, 1]),
        )
        .job(J::new(2).high().user("eve").exclusive());
    assert_eq!(
        render(&cluster.schedule(T0 + 3_600_000)),
        "evict 1 for 2 on n1 grace 30\n\
         wait 2 Preempting 1 on n1"
    );
}

#[test]
fn a_job_that_could_only_ever_hold_more_than_its_quota_is_refused_at_submit() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .node(N::new("cpu1"));
    let quota = TierQuota {
        tier: "high",
        per_account: 0,
        per_user: 2,
    };
    let check = |job: J| {
        let job = job.build();
        check_quota_reachable(
            &job.spec,
            &quota,
            &cluster.nodes,
            &mut Topologies::default(),
        )
    };
    // Every node that could take a GPU job has 8 GPUs.
    let err = check(J::new(1).high().gpus(1).exclusive()).unwrap_err();
    assert_eq!(
        err,
        "the job takes whole nodes (--exclusive) and would hold at least 8 GPUs (every GPU \
         of a node that could take it), more than tier 'high' lets one user hold (2, \
         tiers.high.max_gpus_per_user)"
    );
    // `-G 0` could take the CPU node, which holds no GPU.
    assert_eq!(check(J::new(2).high().exclusive()), Ok(()));
    // Two nodes: the two smallest that could take it.
    let err = check(J::new(3).high().exclusive().nodes(2)).unwrap_err();
    assert!(
        err.contains("at least 8 GPUs (every GPU of 2 nodes"),
        "{err}"
    );
    // Not exclusive: what it asks for is checked without the nodes (`submit::validate`).
    assert_eq!(check(J::new(4).high().gpus(2)), Ok(()));
    // No quota, no refusal.
    let none = TierQuota {
        per_user: 0,
        ..quota
    };
    let job = J::new(5).high().gpus(1).exclusive().build();
    assert_eq!(
        check_quota_reachable(&job.spec, &none, &cluster.nodes, &mut Topologies::default()),
        Ok(())
    );
    // The account's quota is named when it is the one broken.
    let account = TierQuota {
        per_account: 4,
        per_user: 0,
        ..quota
    };
    let err = check_quota_reachable(
        &job.spec,
        &account,
        &cluster.nodes,
        &mut Topologies::default(),
    )
    .unwrap_err();
    assert!(
        err.ends_with("lets one account hold (4, tiers.high.max_gpus_per_account)"),
        "{err}"
    );
}
