//! The tables of the config file (`[scheduler]`, `[node]`, `[tiers.*]`, `[accounts.*]`), each
//! with its keys' meanings and defaults.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `[accounts.NAME]`: a team that jobs are charged to (`ysub -A NAME`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AccountConfig {
    /// Its share of the cluster relative to its siblings (accounts with the same parent).
    pub shares: u32,
    /// The account above it (a department above teams); empty: at the top. Two levels at
    /// most: a parent has no parent.
    pub parent: String,
    /// Users who may charge it besides the members of the Unix group of its name.
    pub users: Vec<String>,
    /// Unix groups whose members may charge it.
    pub groups: Vec<String>,
}

impl Default for AccountConfig {
    fn default() -> Self {
        AccountConfig {
            shares: 1,
            parent: String::new(),
            users: Vec::new(),
            groups: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// TCP address node agents connect to.
    pub listen: String,
    /// Unix socket for local clients.
    pub socket: PathBuf,
    /// Live connections one uid may hold on `socket` (root: no limit); more are closed at
    /// once, with a log line.
    pub max_connections_per_user: u32,
    /// Live connections all uids together may hold on `socket` (root's not counted).
    pub max_client_connections: u32,
    pub state_dir: PathBuf,
    /// The shared cluster key, from before hosts had certificates of their own: a host that
    /// holds it may register as any node and relay any user. schedd no longer makes one.
    pub cluster_key_file: PathBuf,
    /// Agents may still authenticate with the cluster key (when `cluster_key_file` exists),
    /// with a warning at every start; `false`: only enrolled hosts' certificates are taken.
    /// For clusters that predate enrolment, until every host is enrolled.
    pub accept_cluster_key: bool,
    /// Tier used when a submit names none.
    pub default_tier: String,
    /// Where per-job checkpoint directories go: `<checkpoint_root>/<job id>`. A leading `~`
    /// is the job user's home. Must be storage every node sees.
    pub checkpoint_root: String,
    /// A node whose agent has been disconnected this long is DOWN (seconds).
    pub node_timeout_secs: u64,
    /// How often an agent sends a heartbeat (seconds).
    pub heartbeat_secs: u64,
    /// Most times one job is requeued after preemption before it is left PREEMPTED.
    pub max_requeues: u32,
    /// Largest job script a submit may carry, and separately the largest environment (all
    /// names and values together), in MiB. Message limits on every link are set above this,
    /// so nothing a submit accepts can fail to reach an agent for its size.
    pub max_script_mib: u64,
    /// A launch that did not reach its agent (or was not confirmed) this many times ends the
    /// job FAILED instead of being requeued again.
    pub max_launch_attempts: u32,
    /// The cluster CA certificate agents pin to verify schedd; empty: `cluster-ca.crt` next
    /// to `cluster_key_file`. schedd creates it (and `cluster-ca.key`, 0600) at first start.
    pub ca_file: PathBuf,
    /// Writes to the state store are refused (clear error, nothing changed) while its file
    /// system has less than this free (MiB); they resume by themselves once space is back.
    pub state_reserve_mib: u64,
    /// Audit entries older than this many days are removed (in small batches, in the
    /// background); 0: kept however old.
    pub audit_keep_days: u64,
    /// When the audit log holds more than this (MiB), its oldest entries are removed; 0: no
    /// limit.
    pub audit_max_mib: u64,
    /// Members of this Unix group are administrators wherever they run the CLIs (drain,
    /// resume, the audit log, anyone's jobs, every tier). Empty: none; root on this host
    /// always is.
    pub admin_group: String,
    /// Nodes whose agents' relayed root (uid 0) is an administrator, e.g. login nodes where
    /// only admins are root. Root relayed from any other node is an ordinary user.
    pub admin_hosts: Vec<String>,
    /// Fair share's decay: past usage counts half after this long (`7d`, `36h`; as Slurm's
    /// `PriorityDecayHalfLife`).
    pub fair_share_half_life: String,
    /// Finished jobs (their records, histories and scripts) are kept this long after their
    /// end (`30d`, `12h`), then removed in the background; `0`: kept
    /// however old. Usage records, which reports and fair share read, follow `keep_usage`.
    pub keep_finished: String,
    /// Usage records (one per run: what `yctl report` and fair share count) are kept this
    /// long after the run's end (`2y`, `400d`; at least as long as `keep_finished`); `0`:
    /// kept however old.
    pub keep_usage: String,
    /// HTTP address of the Prometheus metrics (`/metrics`), e.g. `0.0.0.0:9717`; empty: off.
    pub metrics_listen: String,
    /// The agent-port addresses (`host:port`) of all of schedd's replicas, the same list on
    /// every host: 3, 5 or 7 of them, replicated under Raft. Empty (the default): one schedd,
    /// no replication.
    pub replicas: Vec<String>,
    /// This replica's 1-based place in `replicas` (`schedd --replica N` sets it too); 0: not
    /// set.
    pub replica: u32,
    /// Every account's usage is visible to everyone; `false`: a user who is no administrator
    /// sees the usage (reports, fair share, and the GPUs, run times and history of jobs) of
    /// the accounts they may charge and of their own jobs only (see
    /// [`Config::sees_usage_of`]).
    pub reports_public: bool,
    /// Task indices of an array go from 0 to one less than this (Slurm's `MaxArraySize`).
    pub max_array_size: u32,
    /// Cancel a job whose dependency can never be met, rather than leave it waiting with
    /// `DependencyNeverSatisfied` (Slurm's `kill_invalid_depend`).
    pub kill_invalid_depend: bool,
    /// Backfill: a job with a time limit may start on resources reserved for a higher job
    /// that cannot start yet, if it ends before that job's expected start.
    pub backfill: bool,
    /// How many of each tier's first waiting jobs get a reservation (an expected start and
    /// the resources it will use) that backfill must not delay.
    pub backfill_reservations: u32,
    /// The most active jobs (queued, held, running, being stopped; each array task counts)
    /// one user may have; a submit that would go beyond it is refused whole. Administrators
    /// are not limited.
    pub max_jobs_per_user: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    pub spool_dir: PathBuf,
    /// Where this host keeps its own certificate and key (`node.crt`, `node.key` 0600)
    /// from its enrolment; empty: `identity` in `spool_dir`.
    pub identity_dir: PathBuf,
    /// An enrolment token (from `yctl node enrol NAME`) that noded trades for this host's
    /// certificate at start, if it has none yet or the token is new (`noded --enrol-token`
    /// overrides); empty: none.
    pub enrol_token_file: PathBuf,
    /// Address of schedd for agents; empty: `scheduler.listen`.
    pub schedd: String,
    /// Features this node advertises in addition to the detected ones (e.g. `ib`).
    pub features: Vec<String>,
    /// Run jobs as uid 0. Default true (as Slurm); production clusters should set false, so
    /// that no message from schedd can ever start a root process on a node.
    pub allow_root_jobs: bool,
    /// Where noded creates each job's cgroup (`<cgroup_root>/job_<id>`): a directory of a
    /// cgroup v2 hierarchy. Empty: detected (see `noded --inventory`); `"none"`: no cgroups,
    /// each job is contained by its process group only.
    pub cgroup_root: String,
    /// The most processes and threads one job may have on this node (cgroup `pids.max`);
    /// 0: no limit.
    pub job_pids_max: u64,
    /// The client socket this node's agent serves: the CLIs on this host (and jobs running
    /// here) reach schedd through it, their requests relayed over the agent's session.
    /// Empty: none.
    pub client_socket: PathBuf,
    /// Live connections one uid may hold on `client_socket` (root: no limit).
    pub max_connections_per_user: u32,
    /// Live connections all uids together may hold on `client_socket` (root's not counted).
    pub max_client_connections: u32,
    /// `compute` (registers its GPUs, runs jobs) or `login` (registers no resource and runs
    /// nothing: it only relays the CLIs of its users). `noded --no-jobs` is `login`.
    pub role: String,
    /// A node that has not heard from schedd for this long stops its jobs (SIGTERM, their
    /// grace, SIGKILL), so that schedd may requeue them elsewhere without running them twice.
    /// 0: never (schedd then ends the jobs of a silent node NODE_FAIL). Below
    /// `scheduler.node_timeout_secs` by default; must be above `scheduler.heartbeat_secs`.
    pub fence_after_secs: u64,
    /// With less than this free (MiB) on the spool's file system, or a spool that cannot be
    /// written, the node takes no job: it drains itself (`spool full: …`) and resumes once
    /// there is room again. 0: only a write is tried.
    pub spool_reserve_mib: u64,
    /// The NVML library noded loads to find and watch its GPUs: an absolute path, or a file
    /// name the dynamic loader searches for. Empty: the NVIDIA driver's `libnvidia-ml.so.1`.
    pub nvml_library: PathBuf,
    /// How often (seconds) the agent asks its GPU health monitor which GPUs fail (XID errors,
    /// uncorrectable ECC errors, pages pending retirement, a GPU the driver lost); schedd
    /// takes a failing GPU out of service. 0: GPU health is not watched.
    pub gpu_health_secs: u64,
    /// Every job run here also sees Slurm's `SLURM_*` variables, as if each had asked with
    /// `ysub --slurm-env`: for nodes whose users' tools read them (Lightning, submitit).
    pub slurm_env: bool,
}

/// Default of `node.gpu_health_secs`: a GPU fallen off the bus is out of service within
/// seconds, at the cost of a few NVML calls per GPU.
pub const DEFAULT_GPU_HEALTH_SECS: u64 = 5;

/// Default of `scheduler.max_connections_per_user` and `node.max_connections_per_user`.
pub const DEFAULT_CONNECTIONS_PER_USER: u32 = 64;
/// Default of `scheduler.max_client_connections` and `node.max_client_connections`.
pub const DEFAULT_CLIENT_CONNECTIONS: u32 = 1024;

/// `node.role` of a GPU host.
pub const ROLE_COMPUTE: &str = "compute";
/// `node.role` of a login host: relays clients, runs nothing.
pub const ROLE_LOGIN: &str = "login";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TierConfig {
    /// Higher runs first and may preempt lower.
    pub value: i64,
    /// Jobs of this tier may be evicted by a tier that may preempt.
    pub preemptible: bool,
    /// Jobs of this tier may evict preemptible jobs of strictly lower value.
    pub may_preempt: bool,
    /// Seconds between SIGTERM and SIGKILL when a job does not ask for its own.
    pub default_grace: u32,
    /// Largest `--grace` a submit may ask for; larger is refused.
    pub max_grace: u32,
    /// Seconds a job must have run before it may be evicted (protects the first checkpoint).
    pub min_runtime: u64,
    /// Users allowed to submit to this tier; with `allow_groups`, empty means everyone.
    pub allow_users: Vec<String>,
    pub allow_groups: Vec<String>,
    /// The most GPUs one account's jobs of this tier may hold at once; 0: no limit. A job
    /// beyond it waits (`AccountLimit`); a job larger than it is refused at submit.
    pub max_gpus_per_account: u32,
    /// The same per user (`UserLimit`).
    pub max_gpus_per_user: u32,
    /// The most active jobs one user may have in this tier (as
    /// `scheduler.max_jobs_per_user`, which holds as well); 0: only the scheduler's limit.
    pub max_jobs_per_user: u32,
}

impl Default for TierConfig {
    fn default() -> Self {
        TierConfig {
            value: 0,
            preemptible: true,
            may_preempt: false,
            default_grace: 30,
            max_grace: 300,
            min_runtime: 0,
            allow_users: Vec::new(),
            allow_groups: Vec::new(),
            max_gpus_per_account: 0,
            max_gpus_per_user: 0,
            max_jobs_per_user: 0,
        }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            listen: "127.0.0.1:7117".into(),
            socket: "/run/ysched/schedd.sock".into(),
            max_connections_per_user: DEFAULT_CONNECTIONS_PER_USER,
            max_client_connections: DEFAULT_CLIENT_CONNECTIONS,
            state_dir: "/var/lib/ysched".into(),
            cluster_key_file: "/etc/ysched/cluster.key".into(),
            accept_cluster_key: true,
            default_tier: "medium".into(),
            checkpoint_root: "~/.ysched/checkpoints".into(),
            node_timeout_secs: 60,
            heartbeat_secs: 10,
            max_requeues: 20,
            max_script_mib: 4,
            max_launch_attempts: 3,
            ca_file: PathBuf::new(),
            state_reserve_mib: 64,
            audit_keep_days: 365,
            audit_max_mib: 128,
            admin_group: String::new(),
            admin_hosts: Vec::new(),
            fair_share_half_life: "7d".into(),
            keep_finished: "30d".into(),
            keep_usage: "2y".into(),
            metrics_listen: String::new(),
            replicas: Vec::new(),
            replica: 0,
            reports_public: true,
            max_array_size: crate::array::DEFAULT_MAX_ARRAY_SIZE,
            kill_invalid_depend: false,
            backfill: true,
            backfill_reservations: 1,
            max_jobs_per_user: crate::limits::DEFAULT_MAX_JOBS_PER_USER,
        }
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            spool_dir: "/var/spool/ysched".into(),
            identity_dir: PathBuf::new(),
            enrol_token_file: PathBuf::new(),
            schedd: String::new(),
            features: Vec::new(),
            allow_root_jobs: true,
            cgroup_root: String::new(),
            job_pids_max: 0,
            client_socket: "/run/ysched/noded.sock".into(),
            max_connections_per_user: DEFAULT_CONNECTIONS_PER_USER,
            max_client_connections: DEFAULT_CLIENT_CONNECTIONS,
            role: ROLE_COMPUTE.into(),
            fence_after_secs: 50,
            spool_reserve_mib: 16,
            nvml_library: PathBuf::new(),
            gpu_health_secs: DEFAULT_GPU_HEALTH_SECS,
            slurm_env: false,
        }
    }
}

/// The default tiers: `critical` > `high` > `medium` > `low`.
pub fn default_tiers() -> BTreeMap<String, TierConfig> {
    let tier = |value, preemptible, may_preempt| TierConfig {
        value,
        preemptible,
        may_preempt,
        ..TierConfig::default()
    };
    let mut critical = tier(1_000_000, false, true);
    critical.allow_users = vec!["root".into()];
    BTreeMap::from([
        ("critical".to_string(), critical),
        ("high".to_string(), tier(10_000, true, true)),
        ("medium".to_string(), tier(1_000, true, false)),
        ("low".to_string(), tier(100, true, false)),
    ])
}
