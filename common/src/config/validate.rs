//! What a config must satisfy beyond what its types say (ranges, references between tables,
//! bounded names), checked when it is parsed, so that a bad config fails at load with a
//! message naming the key.

use super::{Config, NO_CGROUPS, ROLE_COMPUTE, ROLE_LOGIN};
use std::path::Path;

impl Config {
    pub(super) fn validate(&self) -> Result<(), String> {
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
        let ceiling = crate::limits::MAX_ARRAY_SIZE_CEILING;
        if self.scheduler.max_array_size == 0 || self.scheduler.max_array_size > ceiling {
            return Err(format!(
                "scheduler.max_array_size = {} is out of range (1 to {ceiling})",
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
        self.check_replicas()?;
        match (self.keep_finished_ms()?, self.keep_usage_ms()?) {
            (None, Some(_)) => {
                return Err(format!(
                    "scheduler.keep_usage = {:?} is shorter than scheduler.keep_finished = \"0\" \
                     (forever): usage records must outlive the jobs they count",
                    self.scheduler.keep_usage
                ))
            }
            (Some(jobs), Some(usage)) if usage < jobs => {
                return Err(format!(
                    "scheduler.keep_usage = {:?} is shorter than scheduler.keep_finished = {:?}: \
                     usage records must outlive the jobs they count",
                    self.scheduler.keep_usage, self.scheduler.keep_finished
                ))
            }
            _ => {}
        }
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
        self.validate_slurm()
    }

    /// `scheduler.replicas` and `scheduler.replica`: none (one schedd), or 3, 5 or 7 distinct
    /// `host:port` addresses with this one's place among them (when set here rather than by
    /// `schedd --replica`).
    fn check_replicas(&self) -> Result<(), String> {
        let s = &self.scheduler;
        if s.replicas.is_empty() {
            if s.replica != 0 {
                return Err(format!(
                    "scheduler.replica = {} needs scheduler.replicas (the addresses of all \
                     replicas); without them schedd runs alone",
                    s.replica
                ));
            }
            return Ok(());
        }
        if ![3, 5, 7].contains(&s.replicas.len()) {
            return Err(format!(
                "scheduler.replicas names {} replicas: run 3, 5 or 7 (a majority of them must \
                 be up for schedd to serve), or none for a single schedd",
                s.replicas.len()
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for addr in &s.replicas {
            crate::text::check_printable("scheduler.replicas address", addr)?;
            let port = addr
                .rsplit_once(':')
                .and_then(|(host, port)| (!host.is_empty()).then_some(port)?.parse::<u16>().ok());
            if port.is_none_or(|p| p == 0) {
                return Err(format!(
                    "scheduler.replicas: {:?} is not host:port (the replica's agent port, as \
                     scheduler.listen)",
                    crate::text::excerpt(addr, 64)
                ));
            }
            if !seen.insert(addr) {
                return Err(format!(
                    "scheduler.replicas names {:?} twice",
                    crate::text::excerpt(addr, 64)
                ));
            }
        }
        if s.replica != 0 {
            self.replica_place(s.replica)?;
        }
        Ok(())
    }

    /// Checks `place` (1-based, `scheduler.replica` or `schedd --replica`) against
    /// `scheduler.replicas`: `None` when schedd runs alone, else this replica's address.
    pub fn replica_place(&self, place: u32) -> Result<Option<&str>, String> {
        let replicas = &self.scheduler.replicas;
        if replicas.is_empty() {
            return Ok(None);
        }
        if place == 0 {
            return Err(format!(
                "scheduler.replicas names {} replicas but not which one this is: start schedd \
                 with --replica N, or set scheduler.replica",
                replicas.len()
            ));
        }
        match replicas.get((place as usize).wrapping_sub(1)) {
            Some(addr) => Ok(Some(addr)),
            None => Err(format!(
                "replica {place} is not among scheduler.replicas (1 to {})",
                replicas.len()
            )),
        }
    }
}
