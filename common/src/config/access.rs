//! Who may do what under a config: who is an administrator, whose root is trusted, and whose
//! usage a caller sees.

use super::Config;

impl Config {
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
}
