//! Read-only requests: listings (one consistent view), a job in detail, nodes.

use super::*;

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

    pub fn job_info(&self, id: JobId) -> ApiResult<pb::JobInfo> {
        Ok((&self.find_job(id)?).into())
    }

    pub fn job_detail(&self, id: JobId) -> ApiResult<pb::JobDetail> {
        let job = self.find_job(id)?;
        let mut info = pb::JobInfo::from(&job);
        if job.state == JobState::Pending {
            // Replaying the queue ahead of the job takes as long as a pass: not under the lock.
            let (jobs, nodes) = self.core_view();
            let snap = Snapshot {
                jobs: &jobs,
                nodes: &nodes,
            };
            let why = core::explain(&job, &snap, &self.policy(), now_ms());
            let lines: Vec<String> = why.into_iter().map(|(n, w)| format!("{n}: {w}")).collect();
            if !lines.is_empty() {
                info.reason = format!("{} [{}]", info.reason, lines.join("; "));
            }
        }
        Ok(pb::JobDetail {
            job: Some(info),
            events: self.store.events(id)?.iter().map(Into::into).collect(),
        })
    }

    pub fn list_nodes(&self) -> Vec<pb::NodeInfo> {
        let st = lock(&self.state);
        st.rec
            .nodes
            .values()
            .map(|n| node_info(n, &st.rec.jobs))
            .collect()
    }
}

/// What `yctl nodes` shows: derived state and the job holding each GPU.
fn node_info(n: &Node, jobs: &BTreeMap<JobId, Job>) -> pb::NodeInfo {
    let mut holders = vec![0u64; n.gpus.len()];
    let (mut cpus_alloc, mut mem_alloc, mut n_jobs) = (0u32, 0u64, 0);
    for j in jobs.values().filter(|j| j.state.holds_resources()) {
        for a in j.alloc.iter().filter(|a| a.node == n.name) {
            n_jobs += 1;
            cpus_alloc += a.cpus;
            mem_alloc += a.mem_mib;
            for g in &a.gpus {
                if let Some(pos) = n.gpus.iter().position(|x| x.index == *g) {
                    holders[pos] = j.id.0;
                }
            }
        }
    }
    let busy_gpus = holders.iter().filter(|h| **h != 0).count();
    let state = if !n.connected {
        "DOWN"
    } else if n.drain_reason.is_some() {
        if n_jobs > 0 {
            "DRAINING"
        } else {
            "DRAINED"
        }
    } else if n_jobs == 0 {
        "IDLE"
    } else if (n.gpus.is_empty() && cpus_alloc >= n.cpus)
        || (!n.gpus.is_empty() && busy_gpus == n.gpus.len())
    {
        "ALLOCATED"
    } else {
        "MIXED"
    };
    pb::NodeInfo {
        name: n.name.clone(),
        state: state.into(),
        address: n.address.clone(),
        cpus: n.cpus,
        mem_mib: n.mem_mib,
        gpus: n.gpus.iter().map(Into::into).collect(),
        gpu_holders: holders,
        reason: n.drain_reason.clone().unwrap_or_default(),
        cpus_alloc,
        mem_alloc_mib: mem_alloc,
        features: n.features.clone(),
        last_seen_ms: n.last_seen,
    }
}
