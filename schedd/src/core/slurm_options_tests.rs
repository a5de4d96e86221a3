//! Unit tests of Slurm's placement options in the core: `-w/--nodelist`, `-x/--exclude`,
//! `--exclusive` and `--begin`, in placement, preemption, backfill and `explain`.

use super::check_satisfiable;
use super::testkit::{render, Cluster, JobBuilder as J, NodeBuilder as N, A100, MINUTE, T0};

fn node8(name: &str) -> N {
    N::new(name).gpus(8, A100).cpus(64).mem(512_000)
}

fn three_nodes() -> Cluster {
    Cluster::new()
        .node(node8("n1"))
        .node(node8("n2"))
        .node(node8("n3"))
}

#[test]
fn a_nodelist_places_the_job_on_exactly_those_nodes() {
    let cluster = three_nodes()
        .job(J::new(1).gpus(2).nodelist(&["n3"]))
        .job(J::new(2).gpus(4).nodelist(&["n1", "n3"]));
    assert_eq!(
        render(&cluster.schedule(T0)),
        // Best fit first: n3, where job 1 left fewer free GPUs.
        "place 1 on n3[0,1]\nplace 2 on n3[2,3]+n1[0,1]"
    );
}

#[test]
fn an_excluded_node_is_never_used() {
    let cluster = three_nodes()
        .job(J::new(1).gpus(8).exclude(&["n1", "n2"]))
        .job(J::new(2).gpus(8).exclude(&["n1", "n2"]));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n3[0,1,2,3,4,5,6,7]\nwait 2 Resources"
    );
    let everything = three_nodes().job(J::new(1).exclude(&["n1", "n2", "n3"]));
    assert_eq!(
        render(&everything.schedule(T0)),
        "wait 1 Unsatisfiable: the job needs 1 nodes, only 0 are registered outside its --exclude"
    );
}

#[test]
fn listed_nodes_that_are_busy_wait_for_resources_and_drained_ones_for_the_node() {
    let busy = three_nodes()
        .job(
            J::new(1)
                .gpus(8)
                .running_on("n2", &[0, 1, 2, 3, 4, 5, 6, 7]),
        )
        .job(J::new(2).gpus(1).nodelist(&["n2"]))
        .job(J::new(3).gpus(1));
    assert_eq!(
        render(&busy.schedule(T0)),
        "place 3 on n1[0]\nwait 2 Resources"
    );
    // A drained node: the job waits for it, and holds up nobody after it (Resources, not
    // Priority, for the next job that finds no room).
    let drained = Cluster::new()
        .node(node8("n1"))
        .node(node8("n2").drained("maintenance"))
        .job(
            J::new(1)
                .gpus(8)
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6, 7]),
        )
        .job(J::new(2).gpus(1).nodelist(&["n1", "n2"]))
        .job(J::new(3).gpus(1));
    assert_eq!(
        render(&drained.schedule(T0)),
        "wait 2 ReqNodeNotAvail\nwait 3 Resources"
    );
    let why = drained.explain(2, T0);
    assert_eq!(why[1], ("n2".into(), "drained: maintenance".into()));
}

#[test]
fn explain_names_the_nodes_a_list_rules_out() {
    let cluster = three_nodes().job(J::new(1).gpus(1).nodelist(&["n2"]).exclude(&["n3"]));
    let why = cluster.explain(1, T0);
    assert_eq!(
        why,
        vec![
            ("n1".to_string(), "not in the job's --nodelist".to_string()),
            ("n2".to_string(), "fits".to_string()),
            ("n3".to_string(), "not in the job's --nodelist".to_string()),
        ]
    );
    let cluster = three_nodes().job(J::new(1).gpus(1).exclude(&["n3"]));
    assert_eq!(
        cluster.explain(1, T0)[2].1,
        "excluded by the job's --exclude"
    );
}

#[test]
fn an_exclusive_job_takes_a_whole_empty_node() {
    let cluster = three_nodes()
        .job(J::new(1).gpus(1).running_on("n1", &[0]))
        .job(J::new(2).gpus(2).exclusive())
        .job(J::new(3).gpus(1));
    let plan = cluster.schedule(T0);
    // Not n1 (a job runs there); the whole of n2: every GPU, CPU and MiB.
    assert_eq!(
        render(&plan),
        "place 2 on n2[0,1,2,3,4,5,6,7]\nplace 3 on n1[1]"
    );
    let alloc = &plan.placements[0].alloc[0];
    assert_eq!((alloc.cpus, alloc.mem_mib), (64, 512_000));
}

#[test]
fn nothing_is_placed_beside_a_running_exclusive_job() {
    // Its allocation leaves room (a GPU returned to service, say): still nobody beside it.
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(
            J::new(1)
                .exclusive()
                .running_on("n1", &[0, 1, 2, 3, 4, 5, 6]),
        )
        .job(J::new(2).gpus(1));
    assert_eq!(render(&cluster.schedule(T0)), "wait 2 Resources");
    assert_eq!(
        cluster.explain(2, T0)[0].1,
        "job 1 holds this node whole (--exclusive)"
    );
    let waiting = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(1).running_on("n1", &[0]))
        .job(J::new(2).exclusive());
    assert_eq!(render(&waiting.schedule(T0)), "wait 2 Resources");
    assert_eq!(
        waiting.explain(2, T0)[0].1,
        "the job takes whole nodes (--exclusive), and 1 other job hold part of this one"
    );
}

#[test]
fn exclusive_gpus_are_bounded_by_the_node_not_by_what_is_free() {
    let cluster = Cluster::new().node(node8("n1"));
    let spec = J::new(1).gpus(9).exclusive().build();
    assert_eq!(
        check_satisfiable(&spec.spec, &cluster.nodes).unwrap_err(),
        "no node has 9 GPUs (largest has 8)"
    );
    let spec = J::new(1).gpus(8).exclusive().build();
    assert_eq!(check_satisfiable(&spec.spec, &cluster.nodes), Ok(()));
}

#[test]
fn unknown_node_names_are_refused_at_submit() {
    let cluster = three_nodes();
    let job = J::new(1).nodelist(&["n1", "gpu9"]).build();
    assert_eq!(
        check_satisfiable(&job.spec, &cluster.nodes).unwrap_err(),
        "no node named 'gpu9' (nodes: n1, n2, n3)"
    );
    let job = J::new(1).exclude(&["n4"]).build();
    assert_eq!(
        check_satisfiable(&job.spec, &cluster.nodes).unwrap_err(),
        "no node named 'n4' (nodes: n1, n2, n3)"
    );
    let job = J::new(1).gpus(8).nodelist(&["n1", "n2"]).build();
    assert_eq!(check_satisfiable(&job.spec, &cluster.nodes), Ok(()));
}

#[test]
fn a_job_waits_for_its_begin_time_without_holding_up_others() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).high().gpus(8).begin(T0 + 10 * MINUTE))
        .job(J::new(2).gpus(4));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 2 on n1[0,1,2,3]\nwait 1 BeginTime\nexpect 1 at T0+10m on "
    );
    assert_eq!(
        cluster.explain(1, T0)[0].1,
        "fits; the job may not start before 2023-11-14T22:23:20Z (--begin, BeginTime)"
    );
    // Its time has come: an ordinary job.
    assert_eq!(
        render(&cluster.schedule(T0 + 10 * MINUTE)),
        "place 1 on n1[0,1,2,3,4,5,6,7]\nwait 2 Resources"
    );
}

#[test]
fn preemption_evicts_only_on_the_nodes_a_job_may_use() {
    let full = |c: Cluster, id: u64, node: &str| {
        c.job(
            J::new(id)
                .gpus(8)
                .running_on(node, &[0, 1, 2, 3, 4, 5, 6, 7]),
        )
    };
    let cluster = full(
        full(Cluster::new().node(node8("n1")).node(node8("n2")), 1, "n1"),
        2,
        "n2",
    );
    let listed = cluster
        .clone()
        .job(J::new(3).high().gpus(8).nodelist(&["n2"]));
    assert_eq!(
        render(&listed.schedule(T0)),
        "evict 2 for 3 on n2 grace 30\nwait 3 Preempting 2 on n2"
    );
    let excluded = cluster.job(J::new(3).high().gpus(8).exclude(&["n1"]));
    assert_eq!(
        render(&excluded.schedule(T0)),
        "evict 2 for 3 on n2 grace 30\nwait 3 Preempting 2 on n2"
    );
}

#[test]
fn an_exclusive_preemptor_evicts_everything_lower_on_its_node() {
    let cluster = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(2).running_on("n1", &[0, 1]))
        .job(J::new(2).gpus(2).running_on("n1", &[2, 3]))
        .job(J::new(3).high().gpus(1).exclusive());
    assert_eq!(
        render(&cluster.schedule(T0)),
        "evict 1 for 3 on n1 grace 30\nevict 2 for 3 on n1 grace 30\nwait 3 Preempting 1,2 on n1"
    );
    // A job it may not evict (same tier) keeps the node from being whole.
    let protected = Cluster::new()
        .node(node8("n1"))
        .job(J::new(1).gpus(2).running_on("n1", &[0, 1]))
        .job(J::new(2).high().gpus(2).running_on("n1", &[2, 3]))
        .job(J::new(3).high().gpus(1).exclusive());
    assert_eq!(render(&protected.schedule(T0)), "wait 3 Resources");
}

#[test]
fn backfill_expects_an_exclusive_job_once_its_node_is_empty() {
    let cluster = Cluster::new()
        .backfill(1)
        .node(node8("n1"))
        .job(J::new(1).gpus(1).time_limit(3600).running_on("n1", &[0]))
        .job(J::new(2).gpus(1).exclusive())
        .job(J::new(3).gpus(1).time_limit(7200))
        .job(J::new(4).gpus(1).time_limit(600));
    // Job 3 would still run when job 2 may start: it waits; job 4 ends before then.
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 4 on n1[1]\nwait 2 Resources\nwait 3 Priority\nexpect 2 at T0+60m on n1"
    );
}
