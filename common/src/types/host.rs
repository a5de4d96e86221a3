//! A host's enrolment: which generation of certificate schedd takes from it, and for which
//! role. Kept by schedd (durable, replicated) for every host that was ever enrolled.

use crate::time::Millis;
use crate::tls::HostRole;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEnrolment {
    pub name: String,
    pub role: HostRole,
    /// The generation of the one certificate taken from this host: the one its last
    /// enrolment issued. Every enrolment token is made for the generation after it, so a
    /// token enrols once, and the enrolment retires every certificate of earlier ones.
    pub generation: u64,
    /// When the host last enrolled, or was revoked.
    pub time: Millis,
    /// Revoked by an administrator (`yctl node revoke`): no certificate of this host is
    /// taken until it enrols again with a new token.
    #[serde(default)]
    pub revoked: bool,
}

impl HostEnrolment {
    /// Whether a certificate of `generation` for `role` is this host's current one.
    pub fn takes(&self, role: HostRole, generation: u64) -> bool {
        !self.revoked && self.role == role && self.generation == generation
    }
}
