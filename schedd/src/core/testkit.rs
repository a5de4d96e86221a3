//! Test fixtures shared by every crate's tests: builders of nodes, jobs, run records and
//! callers, and a small in-memory cluster that drives the core the way the server does:
//! snapshot → plan → apply.
//!
//! Compiled for schedd's own tests and, through the `testkit` feature, for the tests of other
//! crates (`ysched-tests`); never part of a daemon's behaviour.

use std::collections::BTreeMap;
use std::sync::Arc;

use ysched_common::array::{ArraySpec, ArrayTask};
use ysched_common::config::default_tiers;
use ysched_common::dependency::{DepClause, DepKind, Dependency};
use ysched_common::time::Millis;
use ysched_common::{
    Caller, Gpu, GpuLink, Job, JobId, JobSpec, JobState, Node, NodeAlloc, Owner, PcieRelation,
    RunRecord, StopReason, StopRequest, TierConfig,
};

use super::{explain, schedule, Backfill, FairShare, JobMap, Plan, Policy, Snapshot};

pub const A100: &str = "NVIDIA A100-SXM4-80GB";
pub const H100: &str = "NVIDIA H100 80GB HBM3";
pub const A10: &str = "NVIDIA A10";
pub const H800: &str = "NVIDIA H800 80GB HBM3";

/// Some fixed point in time; tests count from here.
pub const T0: Millis = 1_700_000_000_000;
pub const MINUTE: Millis = 60_000;
pub const HOUR: Millis = 60 * MINUTE;

pub struct NodeBuilder(Node);

impl NodeBuilder {
    /// A connected, undrained node with 64 CPUs, 512000 MiB and no GPUs.
    pub fn new(name: &str) -> Self {
        NodeBuilder(Node {
            name: name.to_string(),
            address: format!("{name}:7118"),
            cpus: 64,
            mem_mib: 512_000,
            gpus: Default::default(),
            features: Vec::new(),
            drain_reason: None,
            drained_by_node: false,
            connected: true,
            last_seen: T0,
            registered_at: 0,
            killing: Default::default(),
            fence_after_secs: 0,
            gpus_out_of_service: Default::default(),
            gpus_forgetting: Default::default(),
        })
    }

    /// Adds `n` GPUs of `model`, numbered after the ones already there.
    pub fn gpus(mut self, n: u32, model: &str) -> Self {
        let first = self.0.gpus.len() as u32;
        for index in first..first + n {
            Arc::make_mut(&mut self.0.gpus).push(Gpu {
                index,
                uuid: format!("GPU-{}-{index}", self.0.name),
                model: model.to_string(),
                memory_mib: 81_920,
                ..Gpu::default()
            });
        }
        self
    }

    /// An NVSwitch box: `n` GPUs of `model`, every pair NVLinked; PCIe `PXB` within each half,
    /// `SYS` across the halves.
    pub fn dgx(name: &str, n: u32, model: &str) -> Self {
        NodeBuilder::new(name)
            .gpus(n, model)
            .wired(|_, _| true, |a, b| same_half(n, a, b, PcieRelation::Pxb))
    }

    /// Two NVLink islands: GPUs `0..n/2` and `n/2..n` fully NVLinked inside; PCIe `PXB` within
    /// an island, `SYS` across.
    pub fn two_islands(name: &str, n: u32, model: &str) -> Self {
        NodeBuilder::new(name).gpus(n, model).wired(
            move |a, b| (a < n / 2) == (b < n / 2),
            |a, b| same_half(n, a, b, PcieRelation::Pxb),
        )
    }

    /// NVLink bridges between pairs (0-1, 2-3, ...); PCIe `PIX` within a pair, `NODE` within a
    /// half (a CPU socket), `SYS` across.
    pub fn nvlink_pairs(name: &str, n: u32, model: &str) -> Self {
        NodeBuilder::new(name)
            .gpus(n, model)
            .wired(|a, b| a / 2 == b / 2, |a, b| pcie_tree(n, a, b))
    }

    /// PCIe only (A10 boxes): `PIX` within pairs, `NODE` within a half (a CPU socket), `SYS`
    /// across.
    pub fn no_nvlink(name: &str, n: u32, model: &str) -> Self {
        NodeBuilder::new(name)
            .gpus(n, model)
            .wired(|_, _| false, |a, b| pcie_tree(n, a, b))
    }

    /// Links every pair of the node's GPUs (by index): NVLink where `nvlinked`, and the PCIe
    /// relation `pcie`.
    pub fn wired(
        mut self,
        nvlinked: impl Fn(u32, u32) -> bool,
        pcie: impl Fn(u32, u32) -> PcieRelation,
    ) -> Self {
        let indices: Vec<u32> = self.0.gpus.iter().map(|g| g.index).collect();
        for gpu in Arc::make_mut(&mut self.0.gpus) {
            let a = gpu.index;
            let peers = indices.iter().copied().filter(|&b| b != a);
            gpu.nvlink = peers.clone().filter(|&b| nvlinked(a, b)).collect();
            gpu.links = peers
                .map(|b| GpuLink {
                    peer: b,
                    pcie: pcie(a, b),
                    nvlinks: if nvlinked(a, b) { 12 } else { 0 },
                })
                .collect();
        }
        self
    }

    pub fn cpus(mut self, n: u32) -> Self {
        self.0.cpus = n;
        self
    }

    pub fn mem(mut self, mib: u64) -> Self {
        self.0.mem_mib = mib;
        self
    }

    pub fn feature(mut self, feature: &str) -> Self {
        self.0.features.push(feature.to_string());
        self
    }

    pub fn drained(mut self, reason: &str) -> Self {
        self.0.drain_reason = Some(reason.to_string());
        self
    }

    pub fn disconnected(mut self) -> Self {
        self.0.connected = false;
        self
    }

    /// GPU `index` was returned to service, but its node has not confirmed it healthy yet.
    pub fn gpu_unconfirmed(mut self, index: u32) -> Self {
        self.0.gpus_forgetting.insert(index);
        self
    }

    /// GPU `index` is out of service: its node's health monitor found it failing.
    pub fn gpu_out_of_service(mut self, index: u32, fault: &str) -> Self {
        self.0.gpus_out_of_service.insert(
            index,
            ysched_common::GpuOutage {
                reason: fault.to_string(),
                since: T0,
                by: ysched_common::GPU_HEALTH_BY.to_string(),
            },
        );
        self
    }

    pub fn build(self) -> Node {
        self.0
    }
}

/// `within` inside one half of `0..n`, `SYS` across the halves.
fn same_half(n: u32, a: u32, b: u32, within: PcieRelation) -> PcieRelation {
    if (a < n / 2) == (b < n / 2) {
        within
    } else {
        PcieRelation::Sys
    }
}

/// `PIX` within a pair, `NODE` within a half, `SYS` across.
fn pcie_tree(n: u32, a: u32, b: u32) -> PcieRelation {
    if a / 2 == b / 2 {
        PcieRelation::Pix
    } else {
        same_half(n, a, b, PcieRelation::Node)
    }
}

pub struct JobBuilder {
    job: Job,
    /// Resolved at `build`, when cpus and memory are known whatever the call order.
    running_on: Vec<(String, Vec<u32>)>,
}

impl JobBuilder {
    /// A PENDING 1-CPU job in tier low (value 100), submitted at `T0`.
    pub fn new(id: u64) -> Self {
        let job = Job {
            id: JobId(id),
            spec: Arc::new(JobSpec {
                name: format!("job{id}"),
                tier: "low".into(),
                account: "research".into(),
                workdir: "/home/alice".into(),
                script: "train.sh".into(),
                ..JobSpec::default()
            }),
            owner: Arc::new(Owner {
                uid: 1000,
                gid: 1000,
                user: "alice".into(),
                groups: vec!["alice".into()],
            }),
            tier_value: 100,
            state: JobState::Pending,
            reason: String::new(),
            held_by: Default::default(),
            alloc: Vec::new(),
            restart_count: 0,
            exit_code: None,
            signal: None,
            submit_time: T0,
            start_time: None,
            end_time: None,
            launched: false,
            grace_secs: 30,
            checkpoint_dir: format!("/ckpt/{id}"),
            stop: None,
            last_checkpoint: None,
            parts: Default::default(),
            launch_attempts: 0,
            queued_at: None,
            run_ms_before: 0,
            array: None,
        };
        JobBuilder {
            job,
            running_on: Vec::new(),
        }
    }

    /// The spec, to change while building.
    fn spec(&mut self) -> &mut JobSpec {
        Arc::make_mut(&mut self.job.spec)
    }

    /// What `request` asks for (GPUs, CPUs, memory, nodes, types, ...), keeping the job's
    /// name, tier, account, working directory and script.
    pub fn request(mut self, request: JobSpec) -> Self {
        let spec = self.spec();
        *spec = JobSpec {
            name: std::mem::take(&mut spec.name),
            tier: std::mem::take(&mut spec.tier),
            account: std::mem::take(&mut spec.account),
            workdir: std::mem::take(&mut spec.workdir),
            script: std::mem::take(&mut spec.script),
            ..request
        };
        self
    }

    pub fn tier(mut self, name: &str, value: i64) -> Self {
        self.spec().tier = name.to_string();
        self.job.tier_value = value;
        self
    }

    /// Tiers with their default values.
    pub fn low(self) -> Self {
        self.tier("low", 100)
    }
    pub fn medium(self) -> Self {
        self.tier("medium", 1_000)
    }
    pub fn high(self) -> Self {
        self.tier("high", 10_000)
    }
    pub fn critical(self) -> Self {
        self.tier("critical", 1_000_000)
    }

    pub fn gpus(mut self, n: u32) -> Self {
        self.spec().gpus = n;
        self
    }

    pub fn gpu_type(mut self, wanted: &str) -> Self {
        self.spec().gpu_types.push(wanted.to_string());
        self
    }

    pub fn cpus(mut self, n: u32) -> Self {
        self.spec().cpus = n;
        self
    }

    pub fn mem(mut self, mib: u64) -> Self {
        self.spec().mem_mib = mib;
        self
    }

    pub fn nodes(mut self, n: u32) -> Self {
        self.spec().nodes = n;
        self
    }

    /// `--interconnect nvlink`
    pub fn nvlink(mut self) -> Self {
        self.spec().interconnect = Some("nvlink".into());
        self
    }

    pub fn constraint(mut self, feature: &str) -> Self {
        self.spec().constraints.push(feature.to_string());
        self
    }

    /// `-w`: exactly these nodes (as many as listed; sorted, as submit stores them).
    pub fn nodelist(mut self, nodes: &[&str]) -> Self {
        let mut list: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        list.sort();
        let spec = self.spec();
        spec.nodes = list.len() as u32;
        spec.nodelist = list;
        self
    }

    /// `-x`: never these nodes (sorted, as submit stores them).
    pub fn exclude(mut self, nodes: &[&str]) -> Self {
        let mut list: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        list.sort();
        self.spec().exclude = list;
        self
    }

    /// `--exclusive`: whole nodes.
    pub fn exclusive(mut self) -> Self {
        self.spec().exclusive = true;
        self
    }

    /// `--begin`: not before `at` (rounded down to the second, as the wire carries it).
    pub fn begin(mut self, at: Millis) -> Self {
        self.spec().begin_unix_secs = Some((at / 1000) as u64);
        self
    }

    /// Charged to `account` (default `research`).
    pub fn account(mut self, account: &str) -> Self {
        self.spec().account = account.to_string();
        self
    }

    /// Submitted by `user` (default `alice`).
    pub fn user(mut self, user: &str) -> Self {
        let owner = Arc::make_mut(&mut self.job.owner);
        owner.user = user.to_string();
        owner.groups = vec![user.to_string()];
        self
    }

    pub fn submitted(mut self, at: Millis) -> Self {
        self.job.submit_time = at;
        self
    }

    pub fn held(mut self) -> Self {
        self.job.state = JobState::Held;
        self
    }

    /// HELD by an administrator (`held`: by its user).
    pub fn held_by_admin(mut self) -> Self {
        self.job.state = JobState::Held;
        self.job.held_by = ysched_common::HeldBy::Admin;
        self
    }

    pub fn grace(mut self, secs: u32) -> Self {
        self.job.grace_secs = secs;
        self
    }

    /// `--time`: the job's time limit, in seconds.
    pub fn time_limit(mut self, secs: u64) -> Self {
        self.spec().time_limit_secs = Some(secs);
        self
    }

    /// `--job-name` (default `job<id>`).
    pub fn name(mut self, name: &str) -> Self {
        self.spec().name = name.to_string();
        self
    }

    /// Task `task` of the array `array_id`, with `%max_running` (0: no limit). Each task
    /// built this way has its own spec; [`Cluster::array`] builds tasks sharing one.
    pub fn array(mut self, array_id: u64, task: u32, max_running: u32) -> Self {
        self.spec().array = Some(ArraySpec::first_n(task + 1, max_running));
        self.job.array = Some(ArrayTask {
            array_id: JobId(array_id),
            task,
        });
        self
    }

    /// Adds the clause `kind:jobs` to the job's dependency (all clauses must hold).
    pub fn depends(mut self, kind: DepKind, jobs: &[u64]) -> Self {
        let dependency = self
            .spec()
            .dependency
            .get_or_insert_with(Dependency::default);
        dependency.clauses.push(DepClause {
            kind,
            jobs: jobs.iter().map(|id| JobId(*id)).collect(),
        });
        dependency.text = describe_dependency(dependency);
        self
    }

    /// Clauses joined by `?`: any one must hold.
    pub fn depends_on_any(mut self) -> Self {
        let dependency = self
            .spec()
            .dependency
            .get_or_insert_with(Dependency::default);
        dependency.any = true;
        dependency.text = describe_dependency(dependency);
        self
    }

    /// `--dependency singleton`
    pub fn singleton(mut self) -> Self {
        let dependency = self
            .spec()
            .dependency
            .get_or_insert_with(Dependency::default);
        dependency.singleton = true;
        dependency.text = describe_dependency(dependency);
        self
    }

    /// Ran before and was requeued: pending again, with a restart.
    pub fn requeued(mut self) -> Self {
        self.job.restart_count += 1;
        self
    }

    /// RUNNING with these GPUs on `node` (call again for each node of a gang); started at `T0`
    /// unless `started` says otherwise.
    pub fn running_on(mut self, node: &str, gpus: &[u32]) -> Self {
        self.job.state = JobState::Running;
        self.job.launched = true;
        self.job.start_time.get_or_insert(T0);
        self.running_on.push((node.to_string(), gpus.to_vec()));
        self
    }

    pub fn started(mut self, at: Millis) -> Self {
        self.job.start_time = Some(at);
        self
    }

    pub fn checkpointed(mut self, at: Millis) -> Self {
        self.job.last_checkpoint = Some(at);
        self
    }

    /// PREEMPTING: already asked to stop for `preemptor` (use with `running_on`).
    pub fn preempted_by(mut self, preemptor: u64) -> Self {
        self.job.state = JobState::Preempting;
        self.job.stop = Some(Box::new(StopRequest {
            reason: StopReason::Preempt {
                by: JobId(preemptor),
            },
            at: T0,
            grace_secs: self.job.grace_secs,
        }));
        self
    }

    pub fn build(mut self) -> Job {
        let (cpus, mem_mib) = (self.spec().cpus.max(1), self.spec().mem_mib);
        self.job.alloc = self
            .running_on
            .into_iter()
            .map(|(node, gpus)| NodeAlloc {
                node,
                gpus,
                cpus,
                mem_mib,
            })
            .collect();
        self.job
    }
}

/// `afterok:1:2,singleton`, as a user would write the dependency.
fn describe_dependency(dependency: &Dependency) -> String {
    let mut clauses: Vec<String> = dependency
        .clauses
        .iter()
        .map(|clause| {
            let ids: Vec<String> = clause.jobs.iter().map(JobId::to_string).collect();
            format!("{}:{}", clause.kind.as_str(), ids.join(":"))
        })
        .collect();
    if dependency.singleton {
        clauses.push("singleton".into());
    }
    clauses.join(if dependency.any { "?" } else { "," })
}

/// One run of a job, as recorded when it ends.
pub struct RunBuilder(RunRecord);

impl RunBuilder {
    /// The first run of job `job`, from `start` to `end`, COMPLETED: alice's (uid 1000) in
    /// account `research` and tier `low` (as [`JobBuilder`]'s jobs), one GPU and one CPU,
    /// queued when it started.
    pub fn new(job: u64, start: Millis, end: Millis) -> Self {
        RunBuilder(RunRecord {
            job_id: JobId(job),
            restart_count: 0,
            account: "research".into(),
            user: "alice".into(),
            uid: 1000,
            tier: "low".into(),
            gpus: 1,
            cpus: 1,
            queued_at: start,
            start,
            end,
            outcome: JobState::Completed.as_str().into(),
            preempted_by: None,
            preemptor_account: None,
            checkpoint_saved: false,
            lost_gpu_secs: 0,
        })
    }

    /// The job's run after `n` restarts.
    pub fn restart(mut self, n: u32) -> Self {
        self.0.restart_count = n;
        self
    }

    pub fn account(mut self, account: &str) -> Self {
        self.0.account = account.to_string();
        self
    }

    pub fn user(mut self, user: &str, uid: u32) -> Self {
        self.0.user = user.to_string();
        self.0.uid = uid;
        self
    }

    pub fn tier(mut self, tier: &str) -> Self {
        self.0.tier = tier.to_string();
        self
    }

    pub fn gpus(mut self, n: u32) -> Self {
        self.0.gpus = n;
        self
    }

    pub fn cpus(mut self, n: u32) -> Self {
        self.0.cpus = n;
        self
    }

    /// Its wait began at `at`.
    pub fn queued(mut self, at: Millis) -> Self {
        self.0.queued_at = at;
        self
    }

    /// How it ended: a final state's name, or `REQUEUED`.
    pub fn outcome(mut self, outcome: &str) -> Self {
        self.0.outcome = outcome.to_string();
        self
    }

    pub fn build(self) -> RunRecord {
        self.0
    }
}

/// A local caller: `user`, uid and gid `uid`, in the groups `groups`.
pub fn caller(user: &str, uid: u32, groups: &[&str]) -> Caller {
    Caller::local(Owner {
        uid,
        gid: uid,
        user: user.to_string(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    })
}

/// alice (uid 1000, group `alice`): the owner of [`JobBuilder`]'s jobs.
pub fn alice() -> Caller {
    caller("alice", 1000, &["alice"])
}

/// bob (uid 1001, no group).
pub fn bob() -> Caller {
    caller("bob", 1001, &[])
}

/// root (uid 0, no group).
pub fn root() -> Caller {
    caller("root", 0, &[])
}

/// Nodes, jobs and tiers, as the store would hand them to the core.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub nodes: BTreeMap<String, Node>,
    pub jobs: JobMap,
    pub tiers: BTreeMap<String, TierConfig>,
    pub fair_share: FairShare,
    /// How finished dependency targets ended.
    pub ended: BTreeMap<JobId, JobState>,
    pub backfill: Backfill,
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}

impl Cluster {
    /// No nodes, no jobs, the default tiers.
    pub fn new() -> Self {
        Cluster {
            nodes: BTreeMap::new(),
            jobs: BTreeMap::new(),
            tiers: default_tiers(),
            fair_share: FairShare::default(),
            ended: BTreeMap::new(),
            backfill: Backfill::OFF,
        }
    }

    /// Backfill on, with this many reservations per tier.
    pub fn backfill(mut self, reservations: u32) -> Self {
        self.backfill = Backfill {
            enabled: true,
            reservations,
        };
        self
    }

    /// Job `id` has finished in `state` (and left the jobs).
    pub fn ended(mut self, id: u64, state: JobState) -> Self {
        self.ended.insert(JobId(id), state);
        self
    }

    /// An array of `n` tasks sharing one spec (the first task's, as `template` builds it):
    /// job ids `first`, `first + 1`, ..., tasks 0, 1, ... with `%max_running`.
    pub fn array(mut self, template: JobBuilder, n: u32, max_running: u32) -> Self {
        let first = template.job.id.0;
        let template = template.array(first, 0, max_running);
        let mut job = template.build();
        Arc::make_mut(&mut job.spec)
            .array
            .as_mut()
            .expect("an array task")
            .max = n.saturating_sub(1);
        for task in 0..n {
            let id = JobId(first + u64::from(task));
            let mut task_job = job.clone();
            task_job.id = id;
            task_job.checkpoint_dir = format!("/ckpt/{id}");
            task_job.array = Some(ArrayTask {
                array_id: JobId(first),
                task,
            });
            self.jobs.insert(id, Arc::new(task_job));
        }
        self
    }

    /// Fair-share factors by account (unlisted accounts: 1).
    pub fn fair_share(mut self, factors: &[(&str, f64)]) -> Self {
        self.fair_share = FairShare::new(factors.iter().map(|(a, f)| (a.to_string(), *f)));
        self
    }

    pub fn node(mut self, node: NodeBuilder) -> Self {
        let node = node.build();
        self.nodes.insert(node.name.clone(), node);
        self
    }

    pub fn job(mut self, job: JobBuilder) -> Self {
        let job = job.build();
        self.jobs.insert(job.id, Arc::new(job));
        self
    }

    pub fn tier(mut self, name: &str, tier: TierConfig) -> Self {
        self.tiers.insert(name.to_string(), tier);
        self
    }

    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            jobs: &self.jobs,
            nodes: &self.nodes,
            ended: &self.ended,
        }
    }

    pub fn policy(&self) -> Policy<'_> {
        Policy {
            tiers: &self.tiers,
            fair_share: &self.fair_share,
            backfill: self.backfill,
        }
    }

    pub fn schedule(&self, now: Millis) -> Plan {
        schedule(&self.snapshot(), &self.policy(), now)
    }

    pub fn explain(&self, id: u64, now: Millis) -> Vec<(String, String)> {
        explain(
            &self.jobs[&JobId(id)],
            &self.snapshot(),
            &self.policy(),
            now,
        )
    }

    /// Applies a plan with the server's own applier (`state::plan`): placed jobs start,
    /// victims are asked to stop, and every other pending job takes its reason.
    pub fn apply(&mut self, plan: &Plan, now: Millis) {
        let jobs = std::mem::take(&mut self.jobs)
            .into_iter()
            .map(|(id, job)| (id, Arc::unwrap_or_clone(job)))
            .collect();
        let mut records =
            crate::state::Records::new(jobs, self.nodes.clone(), 0, Default::default());
        let payload = |_: JobId| Some(std::sync::Arc::new(crate::store::Payload::default()));
        let effects = records.apply_plan(plan, &payload, now);
        records.commit(effects);
        self.jobs = records.into_jobs();
    }

    /// The agent reports the job's process gone: it leaves the snapshot (terminal, or
    /// requeued as a new pending job, which the tests add themselves when they need it).
    pub fn exit(&mut self, id: u64) {
        self.jobs.remove(&JobId(id));
    }
}

/// A plan as stable text, one decision a line, for readable comparisons:
///
/// ```text
/// place 3 on n1[0,1]+n2[0,1]
/// evict 17 for 5 on n1 grace 30
/// wait 4 Priority
/// expect 4 at T0+90m on n2
/// ```
pub fn render(plan: &Plan) -> String {
    let mut lines = Vec::new();
    for placement in &plan.placements {
        let nodes: Vec<String> = placement
            .alloc
            .iter()
            .map(|a| format!("{}{:?}", a.node, a.gpus).replace(' ', ""))
            .collect();
        lines.push(format!("place {} on {}", placement.job, nodes.join("+")));
    }
    for eviction in &plan.evictions {
        lines.push(format!(
            "evict {} for {} on {} grace {}",
            eviction.victim, eviction.preemptor, eviction.node, eviction.grace_secs
        ));
    }
    for (id, reason) in &plan.pending_reasons {
        lines.push(format!("wait {id} {reason}"));
    }
    for (id, start) in &plan.expected_starts {
        let minutes = (start.at - T0) / MINUTE;
        lines.push(format!(
            "expect {id} at T0+{minutes}m on {}",
            start.nodes.join("+")
        ));
    }
    lines.join("\n")
}
