//! Read-only requests: listings (one consistent view), a job in detail, nodes.

use super::*;
use crate::state::views::{node_view, NodeView};

impl Cluster {
    pub fn list_jobs(&self, req: &pb::ListJobsRequest) -> ApiResult<Vec<pb::JobInfo>> {
        let states: Vec<JobState> = req
            .states
            .iter()
            .map(|s| {
                JobState::parse(s)
                    .ok_or_else(|| ApiError::Invalid(format!("unknown job state '{s}'")))
            })
            .collect::<ApiResult<_>>()?;
        let ids: BTreeSet<u64> = req.job_ids.iter().copied().collect();
        let want = |j: &Job| {
            (req.user.is_empty() || j.owner.user == req.user || j.owner.uid.to_string() == req.user)
                && (ids.is_empty() || ids.contains(&j.id.0))
                && (states.is_empty() || states.contains(&j.state))
        };
        // One consistent view: the active jobs are copied under the lock first, then the
        // finished ones are read from the store. A job ends by being written to the store
        // (finished) before it leaves memory, both under the lock, so a job missing from the
        // copy is already in the store; one that ends in between is in both, and the store's
        // (newer) record wins. Every job appears exactly once.
        let listing = ysched_common::convert::job_listing;
        let active: Vec<pb::JobInfo> = {
            let st = lock(&self.state);
            if ids.is_empty() {
                st.rec
                    .jobs
                    .values()
                    .filter(|j| want(j))
                    .map(listing)
                    .collect()
            } else {
                ids.iter()
                    .filter_map(|id| st.rec.jobs.get(&JobId(*id)))
                    .filter(|j| want(j))
                    .map(listing)
                    .collect()
            }
        };
        let finished: Vec<pb::JobInfo> = if !ids.is_empty() {
            // Asked by id: look each one up, never scan the history.
            let mut found = Vec::new();
            for id in &ids {
                if let Some(j) = self.store.job(JobId(*id))? {
                    if j.state.is_terminal() && want(&j) {
                        found.push(listing(&j));
                    }
                }
            }
            found
        } else if req.all || states.iter().any(|s| s.is_terminal()) {
            self.store
                .finished_jobs()?
                .iter()
                .filter(|j| want(j))
                .map(listing)
                .collect()
        } else {
            Vec::new()
        };
        if finished.is_empty() {
            return Ok(active);
        }
        // Both lists are in id order; a job that ended between the two reads is in both, and
        // its finished record (the newer one) is kept.
        let ended: BTreeSet<u64> = finished.iter().map(|j| j.id).collect();
        let mut merged = Vec::with_capacity(active.len() + finished.len());
        let mut active = active
            .into_iter()
            .filter(|j| !ended.contains(&j.id))
            .peekable();
        for done in finished {
            while let Some(j) = active.next_if(|j| j.id < done.id) {
                merged.push(j);
            }
            merged.push(done);
        }
        merged.extend(active);
        Ok(merged)
    }

    fn find_job(&self, id: JobId) -> ApiResult<Job> {
        if let Some(j) = lock(&self.state).rec.jobs.get(&id) {
            return Ok(j.clone());
        }
        self.store
            .job(id)?
            .ok_or_else(|| ApiError::NotFound(format!("invalid job id {id}: no such job")))
    }

    /// A job, active or finished.
    pub fn job(&self, id: JobId) -> ApiResult<Job> {
        self.find_job(id)
    }

    /// A job with why it waits on each node (when pending) and its history.
    pub fn job_detail(&self, id: JobId) -> ApiResult<JobDetail> {
        let job = self.find_job(id)?;
        let mut waits = Vec::new();
        if job.state == JobState::Pending {
            // Replaying the queue ahead of the job takes as long as a pass: not under the lock.
            let (jobs, nodes) = self.core_view();
            let snap = Snapshot {
                jobs: &jobs,
                nodes: &nodes,
            };
            waits = core::explain(&job, &snap, &self.policy(), now_ms());
        }
        Ok(JobDetail {
            events: self.store.events(id)?,
            job,
            waits,
        })
    }

    pub fn list_nodes(&self) -> Vec<NodeView> {
        let st = lock(&self.state);
        st.rec
            .nodes
            .values()
            .map(|n| node_view(n, &st.rec.jobs))
            .collect()
    }
}

/// A job in full: its record, why it waits on each node (node, reason), and its history.
pub struct JobDetail {
    pub job: Job,
    pub waits: Vec<(String, String)>,
    pub events: Vec<ysched_common::JobEvent>,
}
