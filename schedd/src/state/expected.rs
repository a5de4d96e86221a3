//! When the pass expects pending preemptors to start, beside the core's reservations (for
//! `yq --start`): once their victims are gone.

use crate::core::{ExpectedStart, Plan};
use std::collections::{BTreeMap, BTreeSet};
use ysched_common::{JobId, JobState, StopReason, StopRequest};

/// A preemptor starts once its victims are gone, at the latest when the last one's grace runs
/// out: from its stop for victims already stopping, from now for those this plan stops. Added
/// to the core's expected starts (its reservations) for `yq --start`.
pub fn expect_preemptors(
    expected: &mut BTreeMap<JobId, ExpectedStart>,
    jobs: &crate::core::JobMap,
    plan: &Plan,
    now: i64,
) {
    let mut gone: BTreeMap<JobId, (i64, BTreeSet<String>)> = BTreeMap::new();
    let mut add = |preemptor: JobId, at: i64, nodes: &mut dyn Iterator<Item = &String>| {
        let entry = gone.entry(preemptor).or_insert((now, BTreeSet::new()));
        entry.0 = entry.0.max(at);
        entry.1.extend(nodes.cloned());
    };
    for victim in jobs.values() {
        if let (
            JobState::Preempting,
            Some(StopRequest {
                reason: StopReason::Preempt { by },
                at,
                grace_secs,
            }),
        ) = (victim.state, victim.stop.as_deref())
        {
            let until = at.saturating_add(i64::from(*grace_secs) * 1000);
            add(*by, until, &mut victim.alloc.iter().map(|a| &a.node));
        }
    }
    for eviction in &plan.evictions {
        let until = now.saturating_add(i64::from(eviction.grace_secs) * 1000);
        add(
            eviction.preemptor,
            until,
            &mut std::iter::once(&eviction.node),
        );
    }
    for (job, (at, nodes)) in gone {
        let pending = jobs.get(&job).is_some_and(|j| j.state == JobState::Pending);
        if pending {
            expected.entry(job).or_insert(ExpectedStart {
                at,
                nodes: nodes.into_iter().collect(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core;
    use crate::core::testkit::{JobBuilder as J, T0};

    #[test]
    fn a_preemptor_is_expected_when_its_last_victim_s_grace_runs_out() {
        let jobs: core::JobMap = [
            J::new(1)
                .gpus(4)
                .grace(30)
                .running_on("n1", &[0, 1, 2, 3])
                .preempted_by(3)
                .build(),
            J::new(2)
                .gpus(4)
                .grace(60)
                .running_on("n2", &[0, 1, 2, 3])
                .build(),
            J::new(3).gpus(8).build(),
            J::new(4).gpus(8).build(),
        ]
        .into_iter()
        .map(|j| (j.id, std::sync::Arc::new(j)))
        .collect();
        let stop = jobs[&JobId(1)].stop.clone().expect("stopping");
        let plan = core::Plan {
            evictions: vec![core::Eviction {
                victim: JobId(2),
                preemptor: JobId(4),
                node: "n2".into(),
                grace_secs: 60,
            }],
            ..core::Plan::default()
        };
        let mut expected = BTreeMap::new();
        expect_preemptors(&mut expected, &jobs, &plan, T0);
        assert_eq!(
            expected[&JobId(3)],
            core::ExpectedStart {
                at: (stop.at + i64::from(stop.grace_secs) * 1000).max(T0),
                nodes: vec!["n1".into()],
            }
        );
        assert_eq!(
            expected[&JobId(4)],
            core::ExpectedStart {
                at: T0 + 60_000,
                nodes: vec!["n2".into()],
            }
        );
        // A reservation the core made stays as it is.
        let mut expected = BTreeMap::from([(
            JobId(4),
            core::ExpectedStart {
                at: T0 + 5,
                nodes: vec!["n9".into()],
            },
        )]);
        expect_preemptors(&mut expected, &jobs, &plan, T0);
        assert_eq!(expected[&JobId(4)].nodes, vec!["n9".to_string()]);
    }
}
