//! The `[slurm]` table (how Slurm's `--partition` and `--qos` map to tiers) and the `[notify]`
//! table (how schedd sends the mail `--mail-type` asks for).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `[slurm]`: what Slurm's names mean here, for scripts and tools written for Slurm.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmConfig {
    /// Slurm partition name → tier (`gpu = "high"`), for `-p/--partition` (and
    /// `#SBATCH -p`). A partition that is a tier's name needs no entry. Empty: only tier
    /// names are accepted.
    pub partitions: BTreeMap<String, String>,
    /// Slurm QOS name → tier (`normal = "medium"`), for `--qos`; it wins over the partition.
    pub qos: BTreeMap<String, String>,
}

/// `[notify]`: mail to users about their jobs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// The program schedd runs as `<sendmail> -t`, the message on its standard input, for
    /// `--mail-type`. Empty: no mail is sent, and a submit with `--mail-type` is refused.
    pub sendmail: PathBuf,
    /// Mails waiting for a sendmail, all users' together; beyond it a mail is dropped.
    pub max_queued: u32,
    /// Mails of one user (the job's owner) waiting at once: their share of the queue.
    /// Beyond it that user's mails are dropped, and only theirs.
    pub max_queued_per_user: u32,
    /// Mails one user's jobs may queue per minute: a burst of this many, then as many a
    /// minute, evenly; beyond it that user's mails are dropped.
    pub max_per_user_per_minute: u32,
}

/// Default of `notify.sendmail`: where every mail transfer agent installs it.
pub const DEFAULT_SENDMAIL: &str = "/usr/sbin/sendmail";

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            sendmail: DEFAULT_SENDMAIL.into(),
            max_queued: 1000,
            max_queued_per_user: 100,
            max_per_user_per_minute: 60,
        }
    }
}

impl NotifyConfig {
    /// The sendmail program, `None` when mail is off (`notify.sendmail = ""`).
    pub fn sendmail(&self) -> Option<&std::path::Path> {
        (!self.sendmail.as_os_str().is_empty()).then_some(self.sendmail.as_path())
    }
}

/// Where a Slurm name given for a tier points: the map it came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmName {
    Partition,
    Qos,
}

impl SlurmName {
    /// `partition`, `qos`: the flag's name as messages write it.
    pub fn what(self) -> &'static str {
        match self {
            SlurmName::Partition => "partition",
            SlurmName::Qos => "qos",
        }
    }

    /// `slurm.partitions`, `slurm.qos`: the config key of the map.
    pub fn key(self) -> &'static str {
        match self {
            SlurmName::Partition => "slurm.partitions",
            SlurmName::Qos => "slurm.qos",
        }
    }
}

impl super::Config {
    /// The configured tier `name` names, in the config's spelling: tier names match in any
    /// case (`-p HIGH` is `high`).
    pub fn tier_named(&self, name: &str) -> Option<String> {
        let name = name.trim();
        self.tiers
            .keys()
            .find(|t| t.eq_ignore_ascii_case(name))
            .cloned()
    }

    /// The tier a Slurm partition or QOS name stands for: a tier of that name (any case),
    /// else the map's entry (exact name). The error names the known tiers and mapped names.
    pub fn tier_of_slurm_name(&self, kind: SlurmName, name: &str) -> Result<String, String> {
        let name = name.trim();
        if let Some(tier) = self.tier_named(name) {
            return Ok(tier);
        }
        let map = match kind {
            SlurmName::Partition => &self.slurm.partitions,
            SlurmName::Qos => &self.slurm.qos,
        };
        if let Some(tier) = map.get(name) {
            return Ok(tier.clone());
        }
        let mapped = if map.is_empty() {
            format!("none in {}", kind.key())
        } else {
            map.keys().cloned().collect::<Vec<_>>().join(", ")
        };
        Err(format!(
            "unknown {} '{}' (tiers: {}; mapped {} names: {mapped})",
            kind.what(),
            crate::text::excerpt(name, 64),
            self.tier_names().join(", "),
            kind.what(),
        ))
    }

    /// `[slurm]` and `[notify]` beyond their types: every map target a configured tier,
    /// every mapped name printable and no longer than a tier name; sendmail an absolute path;
    /// the mail queue's bounds at least 1, one user's share within the whole.
    pub(super) fn validate_slurm(&self) -> Result<(), String> {
        for (kind, map) in [
            (SlurmName::Partition, &self.slurm.partitions),
            (SlurmName::Qos, &self.slurm.qos),
        ] {
            for (name, tier) in map {
                let shown = crate::text::excerpt(name, 32);
                crate::text::check_printable(kind.what(), name)
                    .map_err(|e| format!("{}.{shown}: {e}", kind.key()))?;
                crate::limits::TIER
                    .check_len(name)
                    .map_err(|e| format!("{}.{shown}: {e}", kind.key()))?;
                if name.trim().is_empty() {
                    return Err(format!("{}: an empty name", kind.key()));
                }
                if !self.tiers.contains_key(tier) {
                    return Err(format!(
                        "{}.{shown} = {:?} is not a defined tier (tiers: {})",
                        kind.key(),
                        crate::text::excerpt(tier, 32),
                        self.tier_names().join(", ")
                    ));
                }
            }
        }
        let sendmail = &self.notify.sendmail;
        if !sendmail.as_os_str().is_empty() && !sendmail.is_absolute() {
            return Err(format!(
                "notify.sendmail = {:?} must be empty (no mail) or an absolute path",
                sendmail.display().to_string()
            ));
        }
        let notify = &self.notify;
        for (key, value) in [
            ("notify.max_queued", notify.max_queued),
            ("notify.max_queued_per_user", notify.max_queued_per_user),
            (
                "notify.max_per_user_per_minute",
                notify.max_per_user_per_minute,
            ),
        ] {
            if value == 0 {
                return Err(format!("{key} must be at least 1"));
            }
        }
        if notify.max_queued_per_user > notify.max_queued {
            return Err(format!(
                "notify.max_queued_per_user = {} must be at most notify.max_queued = {} (one \
                 user's share of the queue)",
                notify.max_queued_per_user, notify.max_queued
            ));
        }
        Ok(())
    }
}
