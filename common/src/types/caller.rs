//! Who acts: the owner of a job, the caller of a request, and the audit log's record of what
//! they did.

use super::JobId;
use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// Who submitted a job, as the kernel reported it on the socket (never as the client claimed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    /// Names of the primary and supplementary groups.
    pub groups: Vec<String>,
}

impl Owner {
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// Who sent a client request, as schedd established it: the identity (from the kernel on its
/// own socket, or relayed by an authenticated agent), where it came from, and whether it is an
/// administrator (see `Config::is_admin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub owner: Owner,
    /// The node whose agent relayed the request; `None`: schedd's own socket.
    pub host: Option<String>,
    /// May drain and resume, read the audit log, act on anyone's jobs and use every tier.
    pub admin: bool,
}

impl Caller {
    /// A caller on schedd's own socket, administrator as root (tests, and the local socket
    /// without an admin group).
    pub fn local(owner: Owner) -> Caller {
        let admin = owner.is_root();
        Caller {
            owner,
            host: None,
            admin,
        }
    }

    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// `alice`, or `alice@login1` for a relayed request.
    pub fn describe(&self) -> String {
        match &self.host {
            Some(host) => format!("{}@{host}", self.owner.user),
            None => self.owner.user.clone(),
        }
    }
}

/// An entry of the audit log: who did what, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub time: Millis,
    /// Who acted, from peer credentials; `schedd` for the scheduler's own decisions.
    pub user: String,
    pub uid: u32,
    /// `submit_refused`, `preempt`, `cancel`, `hold`, `release`, `hold_refused`,
    /// `release_refused`, `requeue`, `requeue_refused`, `drain`, `resume`.
    pub action: String,
    pub job_id: Option<JobId>,
    pub detail: String,
    /// The node whose agent relayed the request; `None`: schedd's own socket or schedd itself.
    #[serde(default)]
    pub host: Option<String>,
}
