//! The cluster config, one TOML file shared by every daemon and tool. Found through
//! `YSCHED_CONF` (default `/etc/ysched/ysched.toml`); without a file, built-in single-machine
//! defaults apply. Unknown keys are an error, so a typo never silently falls back to a default.
//!
//! - [`sections`]: the `[scheduler]`, `[node]`, `[tiers.*]` and `[accounts.*]` tables and
//!   their defaults.
//! - `validate`: what a config must satisfy beyond its types, checked when it is parsed.
//! - [`slurm`]: the `[slurm]` table (partition and QOS names → tiers) and `[notify]` (mail).
//! - `access`: who is an administrator and whose usage a caller sees.

mod access;
mod sections;
pub mod slurm;
mod validate;

pub use sections::{
    default_tiers, AccountConfig, NodeConfig, SchedulerConfig, TierConfig,
    DEFAULT_CLIENT_CONNECTIONS, DEFAULT_CONNECTIONS_PER_USER, DEFAULT_GPU_HEALTH_SECS,
    ROLE_COMPUTE, ROLE_LOGIN,
};
pub use slurm::{NotifyConfig, SlurmConfig, SlurmName, DEFAULT_SENDMAIL};

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
    /// Slurm's partition and QOS names as tiers (`[slurm]`).
    pub slurm: SlurmConfig,
    /// Mail about jobs (`[notify]`).
    pub notify: NotifyConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            scheduler: SchedulerConfig::default(),
            node: NodeConfig::default(),
            tiers: default_tiers(),
            accounts: BTreeMap::new(),
            slurm: SlurmConfig::default(),
            notify: NotifyConfig::default(),
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

    /// `scheduler.keep_finished` in milliseconds; `None`: kept however old.
    pub fn keep_finished_ms(&self) -> Result<Option<i64>, String> {
        retention_ms("keep_finished", &self.scheduler.keep_finished)
    }

    /// `scheduler.keep_usage` in milliseconds; `None`: kept however old.
    pub fn keep_usage_ms(&self) -> Result<Option<i64>, String> {
        retention_ms("keep_usage", &self.scheduler.keep_usage)
    }

    /// The account `name`'s settings: its `[accounts.NAME]` entry, else the defaults.
    pub fn account(&self, name: &str) -> AccountConfig {
        self.accounts.get(name).cloned().unwrap_or_default()
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
mod tests;

/// A retention setting (`scheduler.NAME = TEXT`) in milliseconds: `0` keeps forever (`None`).
fn retention_ms(name: &str, text: &str) -> Result<Option<i64>, String> {
    if text.trim() == "0" {
        return Ok(None);
    }
    let ms = crate::time::parse_humantime_ms(text.trim()).map_err(|e| {
        format!("scheduler.{name} = {text:?}: {e} (e.g. \"30d\", \"2y\"; \"0\": keep forever)")
    })?;
    if ms < crate::time::SECOND_MS {
        return Err(format!(
            "scheduler.{name} = {text:?} is under a second (\"0\" keeps forever)"
        ));
    }
    Ok(Some(ms))
}
