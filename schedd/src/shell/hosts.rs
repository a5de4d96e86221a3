//! Hosts' enrolments through the shell: tokens made (audited), enrolments and revocations
//! recorded (durable before they are answered), the certificate check every connection of a
//! host goes through, and the listing (`yctl node hosts`).

use super::{lock, Cluster};
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::state::Effects;
use ysched_common::time::now_ms;
use ysched_common::tls::{EnrolToken, HostIdentity};
use ysched_common::Caller;
use ysched_common::HostEnrolment;

impl Cluster {
    /// The generation the next enrolment of `name` records (what a new token is made for).
    pub fn next_generation(&self, name: &str) -> u64 {
        lock(&self.state).rec.next_generation(name, now_ms())
    }

    /// An administrator made `token`: audited, durably, before the token is shown.
    pub async fn token_made(&self, caller: &Caller, token: &EnrolToken) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec, now| Ok((rec.token_made(caller, token, now)?, ())))?;
        self.settle(changed, wake).await
    }

    /// Host `token.name` enrols (its token verified) from `peer`: recorded durably before
    /// its certificate is given.
    pub async fn enrol_host(&self, token: &EnrolToken, peer: &str) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec, now| Ok((rec.enrol(token, peer, now)?, ())))?;
        self.settle(changed, wake).await?;
        tracing::warn!("{} host '{}' enrolled from {peer}", token.role, token.name);
        Ok(())
    }

    /// An administrator revokes host `name`: durable first, then its agent's session (if
    /// any) ends, and its certificate is refused from then on.
    pub async fn revoke_host(&self, caller: &Caller, name: &str) -> ApiResult<()> {
        let (changed, wake, ()) =
            self.run_event(|rec, now| Ok((rec.revoke_host(caller, name, now)?, ())))?;
        self.settle(changed, wake).await?;
        let session = lock(&self.state).sessions.id_of(name);
        if let Some(id) = session {
            // Its sender dropped: the session's stream to the agent ends.
            self.node_disconnected(name, id);
        }
        tracing::warn!("host '{name}' revoked by {}", caller.describe());
        Ok(())
    }

    /// A host came with a certificate of an enrolment the records do not know: recorded
    /// again, durably, before it registers (see [`Records::adopt_host`]).
    pub async fn adopt_host(&self, identity: &HostIdentity, peer: &str) -> ApiResult<()> {
        let (changed, wake, adopted) = self.run_event(|rec, now| {
            Ok(match rec.adopt_host(identity, peer, now) {
                Some(fx) => (fx, true),
                None => (Effects::default(), false),
            })
        })?;
        if adopted {
            self.settle(changed, wake).await?;
            tracing::warn!(
                "{identity} came from {peer} with a certificate of an enrolment the store did \
                 not know (of {}): recorded again",
                crate::state::hosts::enrolment_time(identity.generation)
            );
        }
        Ok(())
    }

    /// An administrator changes who the replicas are (see
    /// [`crate::replica::Replica::change_membership`]); what was done. Not audited in the
    /// store: the change is itself an entry of the replicated log, and logged.
    pub async fn change_membership(
        &self,
        caller: &Caller,
        change: &crate::replica::MembershipChange,
    ) -> ApiResult<String> {
        if !caller.is_admin() {
            return Err(ApiError::Denied(
                "only administrators may change the replicas".into(),
            ));
        }
        let Some(replica) = self.durability.replica() else {
            return Err(ApiError::Conflict(
                "this schedd runs alone (no scheduler.replicas): there is no membership to \
                 change"
                    .into(),
            ));
        };
        let done = replica
            .change_membership(change)
            .await
            .map_err(|e| match e {
                crate::replica::ReplicaError::Settings(why) => ApiError::Conflict(why),
                e => ApiError::Unavailable(e.to_string()),
            })?;
        tracing::warn!("{} changed the replicas: {done}", caller.describe());
        Ok(done)
    }

    /// The place a replica added at `addr` takes when none is given: its place in
    /// `scheduler.replicas`, else one after every member's.
    pub fn place_for(&self, addr: &str) -> u64 {
        let configured = self
            .config()
            .scheduler
            .replicas
            .iter()
            .position(|a| a == addr);
        match (configured, self.durability.replica()) {
            (Some(i), _) => i as u64 + 1,
            (None, Some(replica)) => {
                let members = replica.members();
                let last = members.keys().max().copied().unwrap_or(0);
                last.max(self.config().scheduler.replicas.len() as u64) + 1
            }
            (None, None) => 1,
        }
    }

    /// Whether a certificate for `identity` is taken (see [`Records::check_certificate`]).
    pub fn check_certificate(&self, identity: &HostIdentity) -> Result<(), String> {
        lock(&self.state).rec.check_certificate(identity)
    }

    /// Every host ever enrolled, and whether its agent has a session now.
    pub fn hosts(&self, caller: &Caller) -> ApiResult<Vec<(HostEnrolment, bool)>> {
        if !caller.is_admin() {
            return Err(ApiError::Denied(
                "only administrators may list enrolled hosts".into(),
            ));
        }
        let st = lock(&self.state);
        Ok(st
            .rec
            .hosts()
            .values()
            .map(|h| {
                let connected = st.sessions.connected(&h.name);
                (h.clone(), connected)
            })
            .collect())
    }
}
