//! The core benchmark's second cluster: the same with arrays, dependencies and time limits.

use super::cluster::*;
use super::*;

/// The generated cluster with arrays, dependencies and time limits (see `core_bench`'s doc), and
/// how the finished targets of dependencies ended.
pub(super) struct QueueCluster {
    pub(super) cluster: BenchCluster,
    pub(super) ended: BTreeMap<JobId, JobState>,
}

impl QueueCluster {
    pub(super) fn generate(n_nodes: usize, n_pending: usize) -> Self {
        let mut cluster = BenchCluster::generate(n_nodes, n_pending);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        // Most running jobs end by a limit, between 10 minutes and 12 hours from now; a few
        // are past it.
        for job in cluster.running.values_mut() {
            let started = job.start_time.unwrap_or(NOW);
            let left: Option<Millis> = rng.pick(&[
                (25, None),
                (5, Some(0)),
                (20, Some(10 * MINUTE)),
                (20, Some(HOUR)),
                (15, Some(4 * HOUR)),
                (15, Some(12 * HOUR)),
            ]);
            let jitter = rng.below(10 * MINUTE as u64) as Millis;
            spec_mut(job).time_limit_secs =
                left.map(|left| ((NOW - started + left + jitter) / 1000) as u64);
        }

        let n = cluster.pending.len();
        let (big, dependent, small) = (n / 10, n / 20, n / 20);
        let deps_alone = n / 20;
        let mut next = 0;
        // A big array; an array waiting for every task of it to complete; arrays of 50 with %4.
        let big_ids = make_array(&mut cluster.pending[next..next + big], 0, None);
        next += big;
        let after_big = Dependency {
            any: false,
            clauses: vec![DepClause {
                kind: DepKind::AfterOk,
                jobs: big_ids,
            }],
            singleton: false,
            text: format!("afterok:{}", cluster.pending[0].id),
        };
        make_array(
            &mut cluster.pending[next..next + dependent],
            0,
            Some(after_big),
        );
        next += dependent;
        for chunk in cluster.pending[next..next + small].chunks_mut(50) {
            // Small high jobs submitted long ago: near the head of the queue, where the limit
            // binds before room runs out.
            for job in chunk.iter_mut() {
                let spec = spec_mut(job);
                spec.tier = TIERS[1].0.to_string();
                (spec.gpus, spec.nodes, spec.cpus, spec.mem_mib) = (1, 1, 4, 16_000);
                spec.gpu_types.clear();
                spec.interconnect = None;
                spec.constraints.clear();
                job.tier_value = TIERS[1].1;
                job.submit_time = NOW - 72 * HOUR;
            }
            make_array(chunk, 4, None);
        }
        next += small;
        // Jobs waiting on running jobs and on pending ones (earlier in the queue), some
        // singletons among a few names.
        let running_ids: Vec<JobId> = cluster.running.keys().copied().collect();
        for i in next..next + deps_alone {
            let kind = rng.pick(&[
                (40, DepKind::AfterOk),
                (30, DepKind::AfterAny),
                (10, DepKind::AfterNotOk),
                (20, DepKind::After),
            ]);
            // A running job, one that ended (the first tenth of them end below), or a job
            // earlier in the queue.
            let n_running = running_ids.len() as u64;
            let target = match rng.below(4) {
                0 if n_running > 0 => running_ids[rng.below(n_running) as usize],
                1 if n_running >= 10 => running_ids[rng.below(n_running / 10) as usize],
                _ => cluster.pending[rng.below(i as u64) as usize].id,
            };
            let singleton = rng.below(10) == 0;
            let spec = spec_mut(&mut cluster.pending[i]);
            if singleton {
                spec.name = format!("sweep{}", i % 7);
            }
            spec.dependency = Some(Dependency {
                any: false,
                clauses: vec![DepClause {
                    kind,
                    jobs: vec![target],
                }],
                singleton,
                text: format!("{}:{target}", kind.as_str()),
            });
        }
        // Every other pending job: a limit, most of the time.
        for job in &mut cluster.pending[big + dependent + small..] {
            let limit: Option<u64> = rng.pick(&[
                (35, None),
                (10, Some(600)),
                (10, Some(1800)),
                (15, Some(3600)),
                (10, Some(2 * 3600)),
                (10, Some(4 * 3600)),
                (5, Some(12 * 3600)),
                (5, Some(24 * 3600)),
            ]);
            spec_mut(job).time_limit_secs = limit;
        }
        // Some targets have finished: of the first running jobs' ids, as if they had ended.
        let mut ended = BTreeMap::new();
        for (i, id) in running_ids.iter().take(running_ids.len() / 10).enumerate() {
            let state = if i % 3 == 0 {
                JobState::Failed
            } else {
                JobState::Completed
            };
            ended.insert(*id, state);
            cluster.running.remove(id);
        }
        cluster.jobs = shared(cluster.running.values().chain(&cluster.pending));
        QueueCluster { cluster, ended }
    }

    pub(super) fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            jobs: &self.cluster.jobs,
            nodes: &self.cluster.nodes,
            ended: &self.ended,
        }
    }
}

pub(super) fn spec_mut(job: &mut Job) -> &mut JobSpec {
    std::sync::Arc::make_mut(&mut job.spec)
}

/// Makes these consecutive pending jobs one array, sharing the first one's spec (with an hour's
/// limit and the dependency) and submit time; returns their ids.
pub(super) fn make_array(
    jobs: &mut [Job],
    max_running: u32,
    dependency: Option<Dependency>,
) -> Vec<JobId> {
    let Some(first) = jobs.first() else {
        return Vec::new();
    };
    let (array_id, submit_time) = (first.id, first.submit_time);
    let count = jobs.len() as u32;
    let mut spec = (*first.spec).clone();
    spec.array = Some(ArraySpec::first_n(count, max_running));
    spec.time_limit_secs = Some(3600);
    spec.dependency = dependency;
    let spec = std::sync::Arc::new(spec);
    for (task, job) in jobs.iter_mut().enumerate() {
        job.spec = std::sync::Arc::clone(&spec);
        job.submit_time = submit_time;
        job.array = Some(ArrayTask {
            array_id,
            task: task as u32,
        });
    }
    jobs.iter().map(|j| j.id).collect()
}
