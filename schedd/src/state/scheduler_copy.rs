//! The scheduler's own copy of the jobs it looks at, brought up to date from the records by
//! taking again only the jobs touched since, and the rebuilding of maps of jobs as they grow.

use super::Records;
use crate::core::JobMap;
use std::collections::BTreeMap;
use std::sync::Arc;
use ysched_common::{Job, JobId};

/// The scheduler's own copy of the jobs it looks at, kept up to date by
/// [`Records::refresh_copy`] and read by passes without the lock.
#[derive(Debug, Default)]
pub struct SchedulerCopy {
    pub jobs: JobMap,
    /// Filled once; afterwards only touched jobs are copied again.
    filled: bool,
    /// Jobs that came into `jobs` since it was last rebuilt (see [`note_added`]).
    added: usize,
}

impl Records {
    /// Brings `copy` (the jobs the scheduler looks at, as of its last refresh: every job not
    /// finished, as the core's `Snapshot::jobs` wants them; a held job is no candidate, but
    /// dependencies on it must see that it has not started) up to date with the records,
    /// taking again only the jobs touched since (a reason changed by a plan touches its job
    /// too). A fresh (empty) copy is filled in full. The copy shares each job with the
    /// records (an `Arc` each): a record changed later is the records' own new job, and the
    /// copy keeps the one it took until its next refresh.
    pub fn refresh_copy(&mut self, copy: &mut SchedulerCopy) {
        let wanted = |j: &Job| !j.state.is_terminal();
        if !copy.filled {
            copy.jobs = self
                .jobs
                .iter()
                .filter(|(_, j)| wanted(j))
                .map(|(id, j)| (*id, Arc::clone(j)))
                .collect();
            copy.filled = true;
            copy.added = 0;
            self.touched.clear();
            return;
        }
        for id in std::mem::take(&mut self.touched) {
            match self.jobs.get(&id).filter(|j| wanted(j)) {
                Some(job) => {
                    if copy.jobs.insert(id, Arc::clone(job)).is_none() {
                        note_added(&mut copy.jobs, &mut copy.added);
                    }
                }
                None => {
                    copy.jobs.remove(&id);
                }
            }
        }
    }
}

/// Notes that a job came into `map` (`added` counts them since its last rebuild), and
/// rebuilds it once a quarter of it came since, and at least [`REBUILD_AFTER`] jobs.
///
/// Why: jobs come in id order (ids only increase), and a B-tree filled at its end keeps its
/// nodes little more than half full (a full node splits in two, and its left half never
/// fills again): with 10,000 queued jobs the records and the scheduler's copy each held
/// about 600 bytes of node per job for a 328-byte entry (330 rebuilt). `append` into a map of one builds a
/// tree of full nodes from the two sorted runs, moving each job once, with no other copy
/// of the map; rebuilt when a quarter came in since, that is a few moves per job in all.
pub(super) fn note_added<V>(map: &mut BTreeMap<JobId, V>, added: &mut usize) {
    *added += 1;
    if *added < REBUILD_AFTER || *added * 4 < map.len() {
        return;
    }
    *added = 0;
    let mut rest = std::mem::take(map);
    if let Some((id, first)) = rest.pop_first() {
        *map = BTreeMap::from([(id, first)]);
        map.append(&mut rest);
    }
}

/// The fewest jobs come in before a map of jobs is rebuilt (see [`note_added`]).
const REBUILD_AFTER: usize = 1024;

#[cfg(test)]
mod tests {
    use super::SchedulerCopy;
    use crate::core::testkit::JobBuilder;
    use crate::core::PendingReason;
    use crate::state::{Effects, Records};
    use std::sync::Arc;
    use ysched_common::{Job, JobId};

    #[test]
    fn records_and_the_scheduler_s_copy_rebuilt_as_they_grow_keep_every_job() {
        let mut rec = Records::with_jobs(Vec::new());
        let mut copy = SchedulerCopy::default();
        rec.refresh_copy(&mut copy);
        let mut next = 1;
        for batch in [1, 700, 1500, 2500] {
            let jobs: Vec<Job> = (next..next + batch)
                .map(|id| JobBuilder::new(id).build())
                .collect();
            next += batch;
            rec.reserve_active(&jobs);
            rec.insert_reserved_jobs(jobs);
            rec.refresh_copy(&mut copy);
        }
        let ids: Vec<u64> = (1..next).collect();
        assert_eq!(rec.jobs().keys().map(|id| id.0).collect::<Vec<_>>(), ids);
        assert_eq!(copy.jobs.keys().map(|id| id.0).collect::<Vec<_>>(), ids);
        assert!(rec.added < rec.jobs().len() / 4 && copy.added < copy.jobs.len() / 4);
        assert_eq!(rec.recount_active(), *rec.kept_active_counts());
    }

    /// The copy shares the records' jobs, and a change to the records (a new reason, a new
    /// version of a job) is never seen through the copy until its next refresh: a pass
    /// decides on the jobs as they were when it began.
    #[test]
    fn the_scheduler_s_copy_shares_jobs_and_sees_no_change_until_refreshed() {
        let mut rec =
            Records::with_jobs(vec![JobBuilder::new(1).build(), JobBuilder::new(2).build()]);
        let mut copy = SchedulerCopy::default();
        rec.refresh_copy(&mut copy);
        let shared = |rec: &Records, copy: &SchedulerCopy, id: u64| {
            Arc::ptr_eq(&rec.jobs()[&JobId(id)], &copy.jobs[&JobId(id)])
        };
        assert!(shared(&rec, &copy, 1) && shared(&rec, &copy, 2));
        // What a pass that began now looks at (the map cloned: its jobs shared).
        let in_pass = copy.jobs.clone();
        let mut fx = Effects::default();
        fx.reasons.push((JobId(1), PendingReason::Resources));
        let mut held = Job::clone(&rec.jobs()[&JobId(2)]);
        held.state = ysched_common::JobState::Held;
        fx.put_job(held);
        rec.commit(fx);
        assert_eq!(rec.jobs()[&JobId(1)].reason, "Resources");
        assert_eq!(rec.jobs()[&JobId(2)].state, ysched_common::JobState::Held);
        for jobs in [&copy.jobs, &in_pass] {
            assert_eq!(jobs[&JobId(1)].reason, "");
            assert_eq!(jobs[&JobId(2)].state, ysched_common::JobState::Pending);
        }
        assert!(!shared(&rec, &copy, 1) && !shared(&rec, &copy, 2));
        // Refreshed, the copy shares the records' new jobs again (the reason's too).
        rec.refresh_copy(&mut copy);
        assert!(shared(&rec, &copy, 1) && shared(&rec, &copy, 2));
        assert_eq!(copy.jobs[&JobId(1)].reason, "Resources");
        assert_eq!(in_pass[&JobId(1)].reason, "");
    }
}
