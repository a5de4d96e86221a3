//! What holds a pending job back before any fit: dependencies, `singleton`, an array's `%N`.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use ysched_common::array::{ArraySpec, ArrayTask};
use ysched_common::dependency::DepKind::{After, AfterAny, AfterNotOk, AfterOk};
use ysched_common::dependency::{DepClause, DepKind, DepStatus, Dependency, TargetState};
use ysched_common::{Job, JobId, JobState};

use super::backfill_tests::busy_cluster_gen;
use super::order::pending_in_order;
use super::pass::Pass;
use super::prop_tests::{check_plan, NOW};
use super::testkit::{render, Cluster, JobBuilder as J, NodeBuilder as N, A100, HOUR, T0};
use super::topo::Topologies;
use super::PendingReason;

/// One roomy node: 8 GPUs, 64 CPUs.
fn roomy() -> Cluster {
    Cluster::new().node(N::new("n1").gpus(8, A100))
}

#[test]
fn dependency_kinds_follow_slurm() {
    let cluster = roomy()
        .job(J::new(1).running_on("n1", &[]))
        .job(J::new(2).held())
        .ended(3, JobState::Completed)
        .ended(4, JobState::Failed)
        .job(J::new(10).depends(AfterOk, &[3]))
        .job(J::new(11).depends(AfterOk, &[4]))
        .job(J::new(12).depends(AfterOk, &[1]))
        .job(J::new(13).depends(AfterAny, &[4]))
        .job(J::new(14).depends(AfterNotOk, &[4]))
        .job(J::new(15).depends(AfterNotOk, &[3]))
        .job(J::new(16).depends(After, &[1]))
        .job(J::new(17).depends(After, &[2]))
        .job(
            J::new(18)
                .depends(AfterOk, &[4])
                .depends(After, &[1])
                .depends_on_any(),
        )
        .job(J::new(19).depends(AfterOk, &[99]))
        .job(J::new(20).depends(AfterAny, &[99]))
        .job(J::new(21).depends(AfterOk, &[3]).depends(AfterAny, &[1]))
        .job(J::new(22).depends(AfterOk, &[3, 4]));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 10 on n1[]\n\
         place 13 on n1[]\n\
         place 14 on n1[]\n\
         place 16 on n1[]\n\
         place 18 on n1[]\n\
         place 20 on n1[]\n\
         wait 11 DependencyNeverSatisfied\n\
         wait 12 Dependency\n\
         wait 15 DependencyNeverSatisfied\n\
         wait 17 Dependency\n\
         wait 19 DependencyNeverSatisfied\n\
         wait 21 Dependency\n\
         wait 22 DependencyNeverSatisfied"
    );
}

#[test]
fn a_requeued_target_has_started_but_not_ended() {
    // 5 ran and is back in the queue; 6 never ran.
    let cluster = roomy()
        .job(J::new(5).requeued())
        .job(J::new(6).held())
        .job(J::new(21).depends(After, &[5]))
        .job(J::new(22).depends(AfterAny, &[5]))
        .job(J::new(23).depends(AfterOk, &[5]))
        .job(J::new(24).depends(AfterNotOk, &[5]))
        .job(J::new(25).depends(After, &[6]));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 5 on n1[]\n\
         place 21 on n1[]\n\
         wait 22 Dependency\n\
         wait 23 Dependency\n\
         wait 24 Dependency\n\
         wait 25 Dependency"
    );
}

#[test]
fn a_job_placed_in_this_pass_has_not_started_yet() {
    // `after` holds until the target runs: being placed by the same pass is not running.
    let cluster = roomy()
        .job(J::new(1).gpus(1))
        .job(J::new(2).gpus(1).depends(After, &[1]).submitted(T0 + 1));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 1 on n1[0]\n\
         wait 2 Dependency"
    );
}

#[test]
fn dependency_waits_hold_up_nobody() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .job(J::new(1).gpus(4).high().depends(AfterOk, &[9]))
        .job(J::new(9).held())
        .job(J::new(2).gpus(4))
        .job(J::new(3).gpus(4));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 2 on n1[0,1,2,3]\n\
         wait 1 Dependency\n\
         wait 3 Resources"
    );
}

#[test]
fn singleton_waits_while_a_job_of_its_name_and_user_runs() {
    let cluster = roomy()
        .job(J::new(1).name("train").running_on("n1", &[0]))
        .job(J::new(2).name("train").singleton())
        .job(J::new(3).name("train").user("bob").singleton())
        .job(J::new(4).name("eval").singleton())
        // 4 is placed earlier in this pass: it counts.
        .job(J::new(5).name("eval").singleton())
        // Not a singleton itself: runs beside the others.
        .job(J::new(6).name("eval"))
        // Its other clauses must hold too.
        .job(J::new(7).name("solo").singleton().depends(AfterOk, &[1]));
    assert_eq!(
        render(&cluster.schedule(T0)),
        "place 3 on n1[]\n\
         place 4 on n1[]\n\
         place 6 on n1[]\n\
         wait 2 Dependency\n\
         wait 5 Dependency\n\
         wait 7 Dependency"
    );
}

#[test]
fn a_stopping_job_still_counts_for_singleton() {
    let cluster = roomy()
        .job(
            J::new(1)
                .name("train")
                .running_on("n1", &[0])
                .preempted_by(99),
        )
        .job(J::new(2).name("train").singleton());
    assert_eq!(render(&cluster.schedule(T0)), "wait 2 Dependency");
}

/// A 40-task array waiting on another 40-task array: one spec each, so one evaluation each,
/// with the same outcome as giving every task its own copy of the spec.
#[test]
fn a_shared_dependency_is_evaluated_once_and_means_the_same() {
    let targets: Vec<u64> = (100..140).collect();
    let base = roomy()
        .array(J::new(100).gpus(0), 40, 0)
        .array(J::new(200).depends(AfterOk, &targets), 40, 0)
        .array(J::new(300).depends(AfterAny, &targets[..3]), 40, 4);
    let mut cluster = base.clone();
    // Some targets ended well, one did not.
    for id in 100..140 {
        cluster.jobs.remove(&JobId(id));
        cluster.ended.insert(JobId(id), JobState::Completed);
    }
    let mut copied = cluster.clone();
    for job in copied.jobs.values_mut().map(std::sync::Arc::make_mut) {
        job.spec = Arc::new((*job.spec).clone());
    }
    for (cluster, evaluated) in [(&cluster, 2), (&copied, 80)] {
        let (snap, policy) = (cluster.snapshot(), cluster.policy());
        let mut pass = Pass::new(&snap, &policy, T0, &mut Topologies::default());
        for job in pending_in_order(&cluster.jobs, policy.fair_share) {
            pass.step(job);
        }
        assert_eq!(pass.dependencies_evaluated(), evaluated);
    }
    let plan = cluster.schedule(T0);
    assert_eq!(plan, copied.schedule(T0));
    assert_eq!(plan.placements.len(), 44, "40 of 200's tasks, 4 of 300's");

    // One target failed: the whole array can never run; the other array is not concerned.
    let mut failed = cluster.clone();
    failed.ended.insert(JobId(120), JobState::Failed);
    let plan = failed.schedule(T0);
    let never = plan
        .pending_reasons
        .values()
        .filter(|r| *r == "DependencyNeverSatisfied")
        .count();
    assert_eq!(never, 40);
    assert_eq!(plan, {
        let mut copied = failed.clone();
        for job in copied.jobs.values_mut().map(std::sync::Arc::make_mut) {
            job.spec = Arc::new((*job.spec).clone());
        }
        copied.schedule(T0)
    });

    // Targets still pending: every dependent waits, none is looked at twice.
    let plan = base.schedule(T0);
    let waiting = |prefix: u64| {
        plan.pending_reasons
            .iter()
            .filter(|(id, r)| id.0 / 100 == prefix && *r == "Dependency")
            .count()
    };
    assert_eq!((waiting(2), waiting(3)), (40, 40));
}

#[test]
fn an_array_runs_at_most_its_limit_of_tasks() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(8, A100))
        .node(N::new("n2").gpus(8, A100))
        .array(J::new(10).gpus(1), 10, 3)
        .job(J::new(30).gpus(1).submitted(T0 + HOUR));
    let plan = cluster.schedule(T0 + HOUR);
    let placed: Vec<u64> = plan.placements.iter().map(|p| p.job.0).collect();
    assert_eq!(
        placed,
        [10, 11, 12, 30],
        "the limit holds up nobody after it"
    );
    for id in 13..20 {
        assert_eq!(plan.pending_reasons[&JobId(id)], "JobArrayTaskLimit");
    }

    // Two tasks run already: one more may start.
    let mut cluster = cluster;
    for (id, gpu) in [(10, 0), (11, 1)] {
        let job = std::sync::Arc::make_mut(cluster.jobs.get_mut(&JobId(id)).expect("task"));
        job.state = JobState::Running;
        job.start_time = Some(T0);
        job.alloc = vec![ysched_common::NodeAlloc {
            node: "n1".into(),
            gpus: vec![gpu],
            cpus: 1,
            mem_mib: 0,
        }];
    }
    let plan = cluster.schedule(T0 + HOUR);
    let placed: Vec<u64> = plan.placements.iter().map(|p| p.job.0).collect();
    assert_eq!(placed, [12, 30]);
    assert_eq!(plan.pending_reasons.len(), 7);
    assert!(plan
        .pending_reasons
        .values()
        .all(|r| r == "JobArrayTaskLimit"));
}

#[test]
fn tasks_without_a_limit_all_run() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(8, A100))
        .array(J::new(10).gpus(1), 10, 0);
    let plan = cluster.schedule(T0);
    assert_eq!(plan.placements.len(), 8);
    assert!(plan
        .pending_reasons
        .values()
        .all(|r| r == "Resources" || r == "Priority"));
}

#[test]
fn explain_says_what_holds_a_job_back() {
    let cluster = Cluster::new()
        .node(N::new("n1").gpus(4, A100))
        .node(N::new("n2").gpus(4, A100))
        .job(J::new(1).gpus(4).running_on("n1", &[0, 1, 2, 3]))
        .job(J::new(2).gpus(2).depends(AfterOk, &[1]))
        .job(J::new(3).gpus(2).depends(AfterOk, &[77]))
        .job(J::new(4).gpus(1).name("x").singleton())
        .job(J::new(5).gpus(1).name("x").singleton().submitted(T0 + 1))
        .array(J::new(10).gpus(1).submitted(T0 + 2), 3, 1);
    let lines = |id: u64| -> Vec<String> {
        cluster
            .explain(id, T0)
            .into_iter()
            .map(|(node, why)| format!("{node}: {why}"))
            .collect()
    };
    assert_eq!(
        lines(2),
        [
            "n1: needs 2 GPUs, 0 free; the job waits for its dependency afterok:1 (Dependency)",
            "n2: fits; the job waits for its dependency afterok:1 (Dependency)",
        ]
    );
    assert_eq!(
        lines(3)[1],
        "n2: fits; the job's dependency afterok:77 can never be satisfied \
         (DependencyNeverSatisfied)"
    );
    assert_eq!(lines(4)[1], "n2: fits");
    assert_eq!(
        lines(5)[1],
        "n2: fits; the job waits until no other job named x of alice runs \
         (singleton, Dependency)"
    );
    assert_eq!(
        lines(11)[1],
        "n2: fits; array 10 already runs 1 task (its limit %1, JobArrayTaskLimit)"
    );
    assert_eq!(lines(10)[1], "n2: fits");
}

// ---------------------------------------------------------------------------------------------
// Properties

/// What a generated job is besides its shape.
#[derive(Debug, Clone)]
enum Role {
    Plain,
    /// Depends on the job at this position (or on one that never existed), this way.
    Depends(usize, DepKind),
    /// `singleton`, with one of two names.
    Singleton(bool),
    /// A task of one of two arrays.
    Task(bool),
}

fn role_gen() -> impl Strategy<Value = Role> {
    prop_oneof![
        3 => Just(Role::Plain),
        2 => (any::<usize>(), prop::sample::select(vec![After, AfterAny, AfterOk, AfterNotOk]))
            .prop_map(|(i, kind)| Role::Depends(i, kind)),
        1 => any::<bool>().prop_map(Role::Singleton),
        2 => any::<bool>().prop_map(Role::Task),
    ]
}

/// A busy cluster (see `backfill_tests`) with dependencies, singletons and two arrays with
/// `%N` limits; some dependency targets have ended. Tasks of an array share their first
/// task's spec, as schedd stores them.
fn held_cluster_gen() -> impl Strategy<Value = Cluster> {
    (
        busy_cluster_gen(),
        prop::collection::vec(role_gen(), 40),
        prop::collection::vec(
            prop::sample::select(vec![JobState::Completed, JobState::Failed]),
            3,
        ),
        1u32..4,
        any::<bool>(),
    )
        .prop_map(|(mut cluster, roles, ended, max_running, backfill)| {
            if !backfill {
                cluster.backfill = super::Backfill::OFF;
            }
            let ids: Vec<JobId> = cluster.jobs.keys().copied().collect();
            // Jobs that ended, known only by their ids.
            for (i, state) in ended.into_iter().enumerate() {
                cluster.ended.insert(JobId(900 + i as u64), state);
            }
            let mut first_task: BTreeMap<bool, Arc<ysched_common::JobSpec>> = BTreeMap::new();
            for (id, role) in ids.iter().zip(roles) {
                let job =
                    std::sync::Arc::make_mut(cluster.jobs.get_mut(id).expect("generated job"));
                let spec = Arc::make_mut(&mut job.spec);
                match role {
                    Role::Plain => {}
                    Role::Depends(i, kind) => {
                        // One of the jobs, one that ended, or one never known.
                        let target = match i % 5 {
                            0 => JobId(900 + (i / 5 % 3) as u64),
                            1 => JobId(999),
                            _ => ids[i % ids.len()],
                        };
                        spec.dependency = Some(Dependency {
                            any: false,
                            clauses: vec![DepClause {
                                kind,
                                jobs: vec![target],
                            }],
                            singleton: false,
                            text: format!("{}:{target}", kind.as_str()),
                        });
                    }
                    Role::Singleton(which) => {
                        spec.name = if which { "a" } else { "b" }.into();
                        spec.dependency = Some(Dependency {
                            singleton: true,
                            text: "singleton".into(),
                            ..Dependency::default()
                        });
                    }
                    Role::Task(which) => {
                        let array_id = JobId(if which { 800 } else { 801 });
                        spec.array = Some(ArraySpec::first_n(100, max_running));
                        job.array = Some(ArrayTask {
                            array_id,
                            task: id.0 as u32,
                        });
                        let shared = first_task
                            .entry(which)
                            .or_insert_with(|| Arc::clone(&job.spec));
                        job.spec = Arc::clone(shared);
                    }
                }
            }
            cluster
        })
}

/// How a dependency target looks, from the snapshot.
fn target_state(cluster: &Cluster, id: JobId) -> TargetState {
    match (cluster.jobs.get(&id), cluster.ended.get(&id)) {
        (Some(job), _) => TargetState::of(job.state, job.has_run()),
        (None, Some(state)) => TargetState::Ended(*state),
        (None, None) => TargetState::Gone,
    }
}

fn check_held_back(cluster: &Cluster) -> Result<(), TestCaseError> {
    check_plan(cluster)?;
    let plan = cluster.schedule(NOW);
    // The same with a spec per job: sharing is only a saving.
    let mut copied = cluster.clone();
    for job in copied.jobs.values_mut().map(std::sync::Arc::make_mut) {
        job.spec = Arc::new((*job.spec).clone());
    }
    prop_assert_eq!(&plan, &copied.schedule(NOW));

    let placed: Vec<&Job> = plan
        .placements
        .iter()
        .map(|p| &*cluster.jobs[&p.job])
        .collect();
    let preempting: Vec<&Job> = plan
        .pending_reasons
        .iter()
        .filter(|(_, r)| matches!(r, PendingReason::Preempting { .. }))
        .map(|(id, _)| &*cluster.jobs[id])
        .collect();
    // Dependencies: met for every job that gets room, and the reason names why not.
    for job in cluster
        .jobs
        .values()
        .filter(|j| j.state == JobState::Pending)
    {
        let Some(dependency) = &job.spec.dependency else {
            continue;
        };
        let status = dependency.status(|id| target_state(cluster, id));
        let reason = plan.pending_reasons.get(&job.id);
        match status {
            DepStatus::Waiting => prop_assert_eq!(reason, Some(&PendingReason::Dependency)),
            DepStatus::Never => {
                prop_assert_eq!(reason, Some(&PendingReason::DependencyNeverSatisfied))
            }
            DepStatus::Satisfied => {
                prop_assert!(!matches!(
                    reason,
                    Some(PendingReason::DependencyNeverSatisfied)
                ));
            }
        }
    }
    // Singleton: a singleton given room has no namesake of its user holding resources, nor
    // one given room before it.
    let holding: Vec<&Job> = cluster
        .jobs
        .values()
        .map(|j| &**j)
        .filter(|j| j.state.holds_resources())
        .collect();
    let mut started: Vec<&Job> = holding.clone();
    for job in placed.iter().chain(&preempting) {
        if job.spec.dependency.as_ref().is_some_and(|d| d.singleton) {
            prop_assert!(
                !started
                    .iter()
                    .any(|o| o.owner.user == job.owner.user && o.spec.name == job.spec.name),
                "singleton {} started beside a namesake",
                job.id
            );
        }
        started.push(job);
    }
    // Arrays: no more tasks hold resources than `%N` allows (beyond those already running).
    let mut tasks: BTreeMap<JobId, (u32, u32)> = BTreeMap::new();
    for job in &holding {
        if let Some(task) = job.array {
            tasks.entry(task.array_id).or_default().0 += 1;
        }
    }
    for job in placed.iter().chain(&preempting) {
        if let Some(task) = job.array {
            tasks.entry(task.array_id).or_default().1 += 1;
        }
    }
    for (array, (running, added)) in tasks {
        let max = cluster
            .jobs
            .values()
            .find(|j| j.array.is_some_and(|t| t.array_id == array))
            .and_then(|j| j.spec.array.as_ref())
            .map_or(0, |a| a.max_running);
        prop_assert!(
            added == 0 || running + added <= max,
            "array {} runs {} + {} of %{}",
            array,
            running,
            added,
            max
        );
    }
    // Nobody waits for `Priority` behind jobs that only wait for a dependency or a limit.
    let held = [
        PendingReason::Dependency,
        PendingReason::DependencyNeverSatisfied,
        PendingReason::JobArrayTaskLimit,
    ];
    let queue = pending_in_order(&cluster.jobs, &cluster.fair_share);
    let first_waiting = queue.iter().position(|j| {
        plan.pending_reasons.get(&j.id).is_some_and(|r| {
            !held.contains(r)
                && !matches!(
                    r,
                    PendingReason::Unsatisfiable(_)
                        | PendingReason::AccountLimit
                        | PendingReason::UserLimit
                )
        })
    });
    if let Some(first) = first_waiting {
        let reason = &plan.pending_reasons[&queue[first].id];
        prop_assert!(
            *reason != PendingReason::Priority,
            "the first job waiting for room says {}",
            reason
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Dependencies, singletons and array limits on busy clusters, with and without backfill:
    /// the plan's invariants hold, sharing specs changes nothing, and each job held back says
    /// why.
    #[test]
    fn held_back_jobs_keep_the_invariants(cluster in held_cluster_gen()) {
        check_held_back(&cluster)?;
    }
}

/// Guards the generator: each way of being held back shows up often.
#[test]
fn generated_clusters_hold_jobs_back() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = held_cluster_gen();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..128 {
        let cluster = strategy
            .new_tree(&mut runner)
            .expect("strategy generates")
            .current();
        let plan = cluster.schedule(NOW);
        for reason in [
            "Dependency",
            "DependencyNeverSatisfied",
            "JobArrayTaskLimit",
        ] {
            *seen.entry(reason).or_default() +=
                usize::from(plan.pending_reasons.values().any(|r| r == reason));
        }
        let task_placed = plan
            .placements
            .iter()
            .any(|p| cluster.jobs[&p.job].array.is_some());
        *seen.entry("task placed").or_default() += usize::from(task_placed);
    }
    for (what, plans) in seen {
        assert!(plans >= 16, "only {plans}/128 plans with {what}");
    }
}
