//! The cluster config, one TOML file shared by every daemon and tool. Found through
//! `YSCHED_CONF` (default `/etc/ysched/ysched.toml`); without a file, built-in single-machine
//! defaults apply. Unknown keys are an error, so a typo never silently falls back to a default.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const DEFAULT_CONF_PATH: &str = "/etc/ysched/ysched.toml";
pub const CONF_ENV: &str = "YSCHED_CONF";

/// Where jobs of users without a usable home keep their checkpoints when
/// `scheduler.checkpoint_root` starts with `~`: `<this>/<job id>`, chosen by schedd at submit
/// and created by noded on the node. Local to each node: a job requeued onto another node
/// starts without its checkpoint.
pub const FALLBACK_CHECKPOINT_ROOT: &str = "/var/tmp/ysched-checkpoints";

/// `node.cgroup_root` value that turns cgroups off: jobs are contained by process groups.
pub const NO_CGROUPS: &str = "none";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub scheduler: SchedulerConfig,
    pub node: NodeConfig,
    /// Priority tiers by name. Replaces the defaults as a whole when given.
    pub tiers: BTreeMap<String, TierConfig>,
    /// Accounts (teams) jobs are charged to, by name. An account that is not listed still
    /// exists (shares 1, no parent); listing one gives it shares, a parent and members.
    pub accounts: BTreeMap<String, AccountConfig>,
}

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
    pub cluster_key_file: PathBuf,
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
    /// HTTP address of the Prometheus metrics (`/metrics`), e.g. `0.0.0.0:9717`; empty: off.
    pub metrics_listen: String,
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
            metrics_listen: String::new(),
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

impl Default for Config {
    fn default() -> Self {
        Config {
            scheduler: SchedulerConfig::default(),
            node: NodeConfig::default(),
            tiers: default_tiers(),
            accounts: BTreeMap::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // Not a `source`: the message already says it, and error chains would print it twice.
    #[error("cannot read config {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl Config {
    /// The path named by `YSCHED_CONF`, else the default path.
    pub fn path_from_env() -> PathBuf {
        std::env::var_os(CONF_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| DEFAULT_CONF_PATH.into())
    }

    /// Loads the config from `YSCHED_CONF`. A missing file gives the built-in defaults.
    pub fn load() -> Result<Config, ConfigError> {
        Self::load_from(&Self::path_from_env())
    }

    pub fn load_from(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map_err(|message| ConfigError::Invalid {
                path: path.to_owned(),
                message,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(error) => Err(ConfigError::Read {
                path: path.to_owned(),
                error,
            }),
        }
    }

    pub fn parse(text: &str) -> Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), String> {
        if self.tiers.is_empty() {
            return Err("no tiers defined".into());
        }
        if !self.tiers.contains_key(&self.scheduler.default_tier) {
            return Err(format!(
                "scheduler.default_tier '{}' is not a defined tier",
                self.scheduler.default_tier
            ));
        }
        if self.scheduler.max_script_mib == 0 || self.scheduler.max_script_mib > 1024 {
            return Err(format!(
                "scheduler.max_script_mib = {} is out of range (1 to 1024)",
                self.scheduler.max_script_mib
            ));
        }
        let (heartbeat, timeout) = (
            self.scheduler.heartbeat_secs,
            self.scheduler.node_timeout_secs,
        );
        if heartbeat == 0 || heartbeat > 3600 {
            return Err(format!(
                "scheduler.heartbeat_secs = {heartbeat} is out of range (1 to 3600)"
            ));
        }
        if timeout < heartbeat || timeout > 86_400 {
            return Err(format!(
                "scheduler.node_timeout_secs = {timeout} must be at least \
                 scheduler.heartbeat_secs = {heartbeat} (a node is silent only after missing \
                 heartbeats) and at most 86400"
            ));
        }
        if self.scheduler.max_jobs_per_user == 0 {
            return Err("scheduler.max_jobs_per_user must be at least 1".into());
        }
        if self.scheduler.max_launch_attempts == 0 {
            return Err("scheduler.max_launch_attempts must be at least 1".into());
        }
        if self.scheduler.max_array_size == 0 || self.scheduler.max_array_size > 4_000_001 {
            return Err(format!(
                "scheduler.max_array_size = {} is out of range (1 to 4000001)",
                self.scheduler.max_array_size
            ));
        }
        for (key, value) in [
            (
                "scheduler.max_connections_per_user",
                self.scheduler.max_connections_per_user,
            ),
            (
                "scheduler.max_client_connections",
                self.scheduler.max_client_connections,
            ),
            (
                "node.max_connections_per_user",
                self.node.max_connections_per_user,
            ),
            (
                "node.max_client_connections",
                self.node.max_client_connections,
            ),
        ] {
            if value == 0 {
                return Err(format!("{key} must be at least 1"));
            }
        }
        let cgroup_root = &self.node.cgroup_root;
        if !cgroup_root.is_empty()
            && cgroup_root != NO_CGROUPS
            && !Path::new(cgroup_root).is_absolute()
        {
            return Err(format!(
                "node.cgroup_root = {cgroup_root:?} must be empty (detect), \"{NO_CGROUPS}\" or \
                 an absolute path"
            ));
        }
        if self.node.role != ROLE_COMPUTE && self.node.role != ROLE_LOGIN {
            return Err(format!(
                "node.role = {:?} must be \"{ROLE_COMPUTE}\" or \"{ROLE_LOGIN}\"",
                self.node.role
            ));
        }
        let nvml_library = &self.node.nvml_library;
        if !nvml_library.as_os_str().is_empty()
            && !nvml_library.is_absolute()
            && nvml_library.components().count() > 1
        {
            // A relative path would depend on the directory noded happens to start in.
            return Err(format!(
                "node.nvml_library = {:?} must be empty (the driver's libnvidia-ml.so.1), a \
                 file name the loader searches for, or an absolute path",
                nvml_library.display().to_string()
            ));
        }
        let fence = self.node.fence_after_secs;
        if fence != 0 && fence <= self.scheduler.heartbeat_secs {
            return Err(format!(
                "node.fence_after_secs = {fence} must be 0 (no fencing) or more than \
                 scheduler.heartbeat_secs = {} (the lease is renewed by heartbeats)",
                self.scheduler.heartbeat_secs
            ));
        }
        if self.node.gpu_health_secs > 86_400 {
            return Err(format!(
                "node.gpu_health_secs = {} must be at most 86400 (a day); 0 turns GPU health \
                 watching off",
                self.node.gpu_health_secs
            ));
        }
        self.fair_share_half_life_ms()?;
        for (name, a) in &self.accounts {
            crate::text::check_printable("account name", name)?;
            crate::limits::ACCOUNT
                .check_len(name)
                .map_err(|e| format!("[accounts.{}]: {e}", crate::text::excerpt(name, 32)))?;
            if a.shares == 0 {
                return Err(format!("account '{name}': shares must be at least 1"));
            }
            if a.parent.is_empty() {
                continue;
            }
            match self.accounts.get(&a.parent) {
                None => {
                    return Err(format!(
                        "account '{name}': parent '{}' is not an [accounts.*] entry",
                        a.parent
                    ))
                }
                Some(p) if !p.parent.is_empty() => {
                    return Err(format!(
                        "account '{name}': its parent '{}' has a parent itself (two levels \
                         at most: department, then team)",
                        a.parent
                    ))
                }
                Some(_) => {}
            }
        }
        for (name, t) in &self.tiers {
            crate::limits::TIER
                .check_len(name)
                .map_err(|e| format!("[tiers.{}]: {e}", crate::text::excerpt(name, 32)))?;
            if t.default_grace > t.max_grace {
                return Err(format!("tier '{name}': default_grace exceeds max_grace"));
            }
        }
        Ok(())
    }

    /// The cluster CA certificate: `scheduler.ca_file`, else `cluster-ca.crt` beside the
    /// cluster key.
    pub fn ca_cert_path(&self) -> PathBuf {
        if !self.scheduler.ca_file.as_os_str().is_empty() {
            return self.scheduler.ca_file.clone();
        }
        self.scheduler
            .cluster_key_file
            .with_file_name("cluster-ca.crt")
    }

    /// The CA's private key, only on the schedd host: beside the CA certificate.
    pub fn ca_key_path(&self) -> PathBuf {
        self.ca_cert_path().with_extension("key")
    }

    /// The script/environment size limit in bytes.
    pub fn max_script_bytes(&self) -> u64 {
        self.scheduler.max_script_mib.saturating_mul(1024 * 1024)
    }

    /// The size limit for what a job carries to its node: the script, and the environment
    /// (names and values, plus two bytes each), each at most `scheduler.max_script_mib`.
    /// `ysub` checks it before sending, and `schedd` again at submit, with this message. The
    /// launch as a whole is bounded by [`crate::limits::check_launch_size`].
    pub fn check_payload_size<'a>(
        &self,
        script: &str,
        env: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<(), String> {
        let limit = self.max_script_bytes();
        let (env, _) = crate::limits::env_bytes(env);
        for (what, size) in [("script", script.len() as u64), ("environment", env)] {
            if size > limit {
                return Err(format!(
                    "{what} is {}; the limit is {} MiB (scheduler.max_script_mib)",
                    crate::parse::format_size(size),
                    self.scheduler.max_script_mib
                ));
            }
        }
        Ok(())
    }

    /// The most a job's part of its launch message may weigh (script, environment,
    /// arguments, name, paths: [`crate::limits::launch_size`]): a script and an environment at
    /// their limits and 2 MiB for the rest.
    pub fn max_launch_bytes(&self) -> u64 {
        self.max_script_bytes()
            .saturating_mul(2)
            .saturating_add(2 << 20)
    }

    /// The largest gRPC message any ysched link accepts: room for a launch at its limit
    /// ([`Config::max_launch_bytes`]) plus everything else in it (the node list of the largest
    /// job included).
    pub fn max_message_bytes(&self) -> usize {
        let b = self
            .max_script_bytes()
            .saturating_mul(2)
            .saturating_add(8 << 20);
        usize::try_from(b).unwrap_or(usize::MAX)
    }

    /// Address agents dial: `node.schedd` if set, else `scheduler.listen`.
    pub fn schedd_addr(&self) -> &str {
        if self.node.schedd.is_empty() {
            &self.scheduler.listen
        } else {
            &self.node.schedd
        }
    }

    /// Whether `owner`, whose request came from `host` (`None`: schedd's own socket), is an
    /// administrator: root on the schedd host or on an `admin_hosts` node, or a member of
    /// `admin_group`.
    pub fn is_admin(&self, owner: &crate::Owner, host: Option<&str>) -> bool {
        let root_here = owner.uid == 0 && self.trusts_root_of(host);
        let group = &self.scheduler.admin_group;
        root_here || (!group.is_empty() && owner.groups.iter().any(|g| g == group))
    }

    /// Whether root on `host` (`None`: the schedd host, on schedd's own socket) is the
    /// cluster's root: the schedd host and the nodes of `scheduler.admin_hosts`. Root relayed
    /// from any other node is an ordinary user named root, whose jobs may not run as uid 0.
    pub fn trusts_root_of(&self, host: Option<&str>) -> bool {
        host.is_none_or(|h| self.scheduler.admin_hosts.iter().any(|a| a == h))
    }

    /// `scheduler.fair_share_half_life` in milliseconds (at least one minute).
    pub fn fair_share_half_life_ms(&self) -> Result<i64, String> {
        let text = &self.scheduler.fair_share_half_life;
        let ms = crate::time::parse_humantime_ms(text).map_err(|e| {
            format!("scheduler.fair_share_half_life = {text:?}: {e} (e.g. \"7d\", \"36h\")")
        })?;
        if ms < crate::time::MINUTE_MS {
            return Err(format!(
                "scheduler.fair_share_half_life = {text:?} is under a minute"
            ));
        }
        Ok(ms)
    }

    /// The account `name`'s settings: its `[accounts.NAME]` entry, else the defaults.
    pub fn account(&self, name: &str) -> AccountConfig {
        self.accounts.get(name).cloned().unwrap_or_default()
    }

    /// Whether `caller` sees every account's usage: `scheduler.reports_public`, or an
    /// administrator.
    pub fn sees_all_usage(&self, caller: &crate::Caller) -> bool {
        self.scheduler.reports_public || caller.is_admin()
    }

    /// Whether `caller` sees the usage of account `account`: reports' and fair share's
    /// figures, and of its jobs the GPUs and nodes they hold, their run times, restarts,
    /// checkpoints and history (Slurm's `PrivateData=usage`). Everyone when reports are
    /// public; otherwise administrators, and users for the accounts they may charge.
    pub fn sees_usage_of(&self, caller: &crate::Caller, account: &str) -> bool {
        self.sees_all_usage(caller) || self.may_charge(&caller.owner, account)
    }

    /// Whether `caller` sees the usage of a job of `account` owned by `uid`: as
    /// [`Config::sees_usage_of`] says, and always of their own jobs.
    pub fn sees_job_usage(&self, caller: &crate::Caller, account: &str, uid: u32) -> bool {
        caller.owner.uid == uid || self.sees_usage_of(caller, account)
    }

    /// Whether `owner` may charge jobs to account `name`: a member of the Unix group of that
    /// name, or listed in the account's `users`, or a member of one of its `groups`.
    pub fn may_charge(&self, owner: &crate::Owner, name: &str) -> bool {
        if owner.groups.iter().any(|g| g == name) {
            return true;
        }
        self.accounts.get(name).is_some_and(|a| {
            a.users.contains(&owner.user) || a.groups.iter().any(|g| owner.groups.contains(g))
        })
    }

    pub fn tier(&self, name: &str) -> Option<&TierConfig> {
        self.tiers.get(name)
    }

    /// Tier names from the highest value down, for messages and help text.
    pub fn tier_names(&self) -> Vec<&str> {
        let mut v: Vec<_> = self.tiers.iter().collect();
        v.sort_by_key(|(n, t)| (std::cmp::Reverse(t.value), n.as_str()));
        v.into_iter().map(|(n, _)| n.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = Config::parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.tier_names(), ["critical", "high", "medium", "low"]);
        let c = Config::parse(
            "[scheduler]\nlisten = \"127.0.0.1:9\"\n[node]\nspool_dir = \"/tmp/s\"\n",
        )
        .unwrap();
        assert_eq!(c.scheduler.listen, "127.0.0.1:9");
        assert_eq!(c.node.spool_dir, PathBuf::from("/tmp/s"));
        assert_eq!(c.tiers.len(), 4);
    }

    #[test]
    fn the_shipped_example_is_the_defaults() {
        let example = include_str!("../../docs/ysched.toml.example");
        assert_eq!(Config::parse(example).unwrap(), Config::default());
    }

    #[test]
    fn ca_paths_sit_beside_the_cluster_key_unless_given() {
        let c = Config::default();
        assert_eq!(
            c.ca_cert_path(),
            PathBuf::from("/etc/ysched/cluster-ca.crt")
        );
        assert_eq!(c.ca_key_path(), PathBuf::from("/etc/ysched/cluster-ca.key"));
        let c = Config::parse("[scheduler]\nca_file = \"/x/ca.pem\"\n").unwrap();
        assert_eq!(c.ca_key_path(), PathBuf::from("/x/ca.key"));
        assert!(Config::parse("[scheduler]\nmax_script_mib = 0\n").is_err());
        assert!(Config::parse("[scheduler]\nmax_launch_attempts = 0\n").is_err());
    }

    #[test]
    fn cgroup_root_is_detect_none_or_an_absolute_path() {
        for ok in ["", "none", "/sys/fs/cgroup/ysched"] {
            let c = Config::parse(&format!("[node]\ncgroup_root = {ok:?}\n")).unwrap();
            assert_eq!(c.node.cgroup_root, ok);
        }
        let err = Config::parse("[node]\ncgroup_root = \"ysched\"\n").unwrap_err();
        assert!(err.contains("absolute path"), "{err}");
    }

    #[test]
    fn administrators_are_local_root_the_admin_group_and_root_of_admin_hosts() {
        let c =
            Config::parse("[scheduler]\nadmin_group = \"hpcadmin\"\nadmin_hosts = [\"login1\"]\n")
                .unwrap();
        let who = |uid, groups: &[&str]| crate::Owner {
            uid,
            gid: uid,
            user: if uid == 0 {
                "root".into()
            } else {
                "alice".into()
            },
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        assert!(c.is_admin(&who(0, &["root"]), None));
        assert!(c.is_admin(&who(0, &["root"]), Some("login1")));
        assert!(!c.is_admin(&who(0, &["root"]), Some("n7")));
        assert!(!c.is_admin(&who(1000, &["alice"]), None));
        assert!(c.is_admin(&who(1000, &["alice", "hpcadmin"]), Some("n7")));
        assert!(c.is_admin(&who(1000, &["hpcadmin"]), None));
        // Without an admin group, no group makes an administrator.
        let plain = Config::default();
        assert!(!plain.is_admin(&who(1000, &[""]), None));
        assert!(!plain.is_admin(&who(0, &["root"]), Some("login1")));
    }

    #[test]
    fn node_role_fence_and_nvml_library_are_checked() {
        assert!(Config::parse("[node]\nrole = \"login\"\n").is_ok());
        let err = Config::parse("[node]\nrole = \"gpu\"\n").unwrap_err();
        assert!(err.contains("node.role"), "{err}");
        assert!(Config::parse("[node]\nfence_after_secs = 0\n").is_ok());
        for ok in ["", "libnvidia-ml.so.1", "/opt/nvidia/lib/libnvidia-ml.so.1"] {
            let c = Config::parse(&format!("[node]\nnvml_library = {ok:?}\n")).unwrap();
            assert_eq!(c.node.nvml_library, PathBuf::from(ok));
        }
        let err = Config::parse("[node]\nnvml_library = \"lib/libnvidia-ml.so.1\"\n").unwrap_err();
        assert!(err.contains("node.nvml_library"), "{err}");
        let err = Config::parse("[node]\nfence_after_secs = 10\n").unwrap_err();
        assert!(err.contains("heartbeat_secs"), "{err}");
    }

    #[test]
    fn gpu_health_interval_defaults_and_is_bounded() {
        assert_eq!(
            Config::default().node.gpu_health_secs,
            DEFAULT_GPU_HEALTH_SECS
        );
        let off = Config::parse("[node]\ngpu_health_secs = 0\n").unwrap();
        assert_eq!(off.node.gpu_health_secs, 0);
        let err = Config::parse("[node]\ngpu_health_secs = 86401\n").unwrap_err();
        assert!(err.contains("node.gpu_health_secs = 86401"), "{err}");
    }

    #[test]
    fn connection_limits_are_at_least_one() {
        let c = Config::default();
        assert_eq!(c.scheduler.max_connections_per_user, 64);
        assert_eq!(c.node.max_client_connections, 1024);
        let err = Config::parse("[scheduler]\nmax_connections_per_user = 0\n").unwrap_err();
        assert!(err.contains("scheduler.max_connections_per_user"), "{err}");
        let err = Config::parse("[node]\nmax_client_connections = 0\n").unwrap_err();
        assert!(err.contains("node.max_client_connections"), "{err}");
    }

    #[test]
    fn heartbeats_and_timeouts_must_make_sense() {
        for (toml, wanted) in [
            (
                "heartbeat_secs = 0",
                "scheduler.heartbeat_secs = 0 is out of range",
            ),
            (
                "node_timeout_secs = 0",
                "scheduler.node_timeout_secs = 0 must be at least",
            ),
            (
                "heartbeat_secs = 20\nnode_timeout_secs = 10",
                "scheduler.node_timeout_secs = 10 must be at least scheduler.heartbeat_secs = 20",
            ),
            (
                "max_jobs_per_user = 0",
                "max_jobs_per_user must be at least 1",
            ),
        ] {
            let err = Config::parse(&format!(
                "[scheduler]\n{toml}\n[node]\nfence_after_secs = 0\n"
            ))
            .unwrap_err();
            assert!(err.contains(wanted), "{toml}: {err}");
        }
        assert!(Config::parse("[scheduler]\nheartbeat_secs = 2\nnode_timeout_secs = 2\n").is_ok());
    }

    #[test]
    fn names_in_the_config_are_bounded_like_names_in_requests() {
        let long = "a".repeat(200);
        let err = Config::parse(&format!("[accounts.{long}]\n")).unwrap_err();
        assert!(
            err.contains("account is 200 bytes; the limit is 128 (fixed)"),
            "{err}"
        );
        assert!(err.len() < 200, "{err}");
    }

    #[test]
    fn rejects_typos_and_bad_tiers() {
        assert!(Config::parse("[scheduler]\nlisten_addr = \"x\"\n").is_err());
        assert!(Config::parse("[tiers.a]\nvalue = 1\n").is_err()); // default tier missing
        assert!(Config::parse(
            "[scheduler]\ndefault_tier = \"a\"\n[tiers.a]\nvalue = 1\ndefault_grace = 400\n"
        )
        .is_err());
    }
}
