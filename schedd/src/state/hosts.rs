//! Hosts' enrolments (see `ysched_common::tls`): the tokens administrators make, a host's
//! enrolment with one (it records the token's generation, so a token enrols once and retires
//! every earlier certificate of the name), revocation, and whether a certificate is taken.
//!
//! A generation is the time of the enrolment (or revocation) that makes it, in milliseconds,
//! and always more than the host's last one: a store that lost the records still makes
//! generations above those of the certificates it forgot (clocks go forward), so that an old
//! certificate found again never outranks a new enrolment.
//!
//! Only this cluster's CA signs certificates, and it signs one only at an enrolment, which is
//! durable before the certificate is given. So a certificate for a host the records do not
//! know, or of a later enrolment than they know, means the store lost that enrolment
//! (restored from a backup, or rebuilt): such a certificate is taken and its enrolment
//! recorded again (adopted, and audited). What the store lost cannot be known: a revocation
//! made after a restored backup must be made again.

use super::client_events::audit_record;
use super::{Effects, Records};
use crate::error::{ApiError, ApiResult};
use std::collections::BTreeMap;
use ysched_common::time::Millis;
use ysched_common::tls::{EnrolToken, HostIdentity, HostRole};
use ysched_common::{AuditRecord, Caller, HostEnrolment};

/// When the enrolment of `generation` was made (generations are enrolment times).
pub fn enrolment_time(generation: u64) -> String {
    ysched_common::time::rfc3339_millis(i64::try_from(generation).unwrap_or(i64::MAX))
}

/// Who schedd's own records name as acting for an enrolment (the host has no user).
const ENROLMENT_ACTOR: &str = "schedd";

/// The effects of host `name` enrolling as `role` in enrolment `generation`: recorded, and
/// audited with `detail`.
fn enrolled(name: &str, role: HostRole, generation: u64, now: Millis, detail: String) -> Effects {
    let mut fx = Effects::default();
    fx.hosts.push(HostEnrolment {
        name: name.to_string(),
        role,
        generation,
        time: now,
        revoked: false,
    });
    fx.audit(AuditRecord {
        time: now,
        user: ENROLMENT_ACTOR.into(),
        uid: 0,
        action: "enrol".into(),
        job_id: None,
        detail,
        host: Some(name.to_string()),
    });
    fx
}

fn admins_only(caller: &Caller, what: &str) -> ApiResult<()> {
    if caller.is_admin() {
        return Ok(());
    }
    Err(ApiError::Denied(format!(
        "only administrators may {what} ({} is not one: root on a scheduler host, \
         scheduler.admin_group, root on scheduler.admin_hosts)",
        caller.describe()
    )))
}

impl Records {
    /// Every host ever enrolled, by name.
    pub fn hosts(&self) -> &BTreeMap<String, HostEnrolment> {
        &self.hosts
    }

    /// The generation a new enrolment of `name` made at `now` records: a token is made for
    /// it (see the module docs).
    pub fn next_generation(&self, name: &str, now: Millis) -> u64 {
        let current = self.hosts.get(name).map_or(0, |h| h.generation);
        (now.max(0) as u64).max(current + 1)
    }

    /// Whether a certificate saying `identity` is taken now; why not, for the log and the
    /// host. Replicas' certificates are not enrolments: always taken (only a holder of the
    /// CA key can make one). One the records do not know yet is taken too (see the module
    /// docs, and [`Records::adopt_host`]).
    pub fn check_certificate(&self, identity: &HostIdentity) -> Result<(), String> {
        if identity.role == HostRole::Replica {
            return Ok(());
        }
        match self.hosts.get(&identity.name) {
            None => Ok(()),
            Some(h) if h.generation < identity.generation => Ok(()),
            Some(h) if h.takes(identity.role, identity.generation) => Ok(()),
            Some(h) if h.revoked => Err(format!(
                "host '{}' was revoked: it is taken again only once enrolled anew (`yctl node \
                 enrol {}`)",
                identity.name, identity.name
            )),
            Some(h) if h.role != identity.role => Err(format!(
                "host '{}' is enrolled as a {} host, and this certificate says {}: enrol it \
                 again with the role it has",
                identity.name, h.role, identity.role
            )),
            Some(h) => Err(format!(
                "this certificate of host '{}' is from its enrolment of {}, and the host has \
                 enrolled again (or was revoked) since, at {}: only the newest certificate is \
                 taken",
                identity.name,
                enrolment_time(identity.generation),
                enrolment_time(h.generation)
            )),
        }
    }

    /// A host registers with a certificate of an enrolment the records do not know (see the
    /// module docs): that enrolment recorded again, and audited; `None` when it is known.
    pub fn adopt_host(&self, identity: &HostIdentity, peer: &str, now: Millis) -> Option<Effects> {
        if identity.role == HostRole::Replica
            || self
                .hosts
                .get(&identity.name)
                .is_some_and(|h| h.generation >= identity.generation)
        {
            return None;
        }
        let detail = format!(
            "{} host '{}' came from {peer} with a certificate of this cluster's CA for an \
             enrolment the store did not know (of {}): recorded again (a store restored or \
             rebuilt loses the enrolments and revocations made after it)",
            identity.role,
            identity.name,
            enrolment_time(identity.generation)
        );
        Some(enrolled(
            &identity.name,
            identity.role,
            identity.generation,
            now,
            detail,
        ))
    }

    /// An administrator made an enrolment token `token`: audited (the token itself is not
    /// kept anywhere). A login token is refused for a compute node's name, and tokens are
    /// made for compute and login hosts only (a replica issues its own certificate).
    pub fn token_made(
        &self,
        caller: &Caller,
        token: &EnrolToken,
        now: Millis,
    ) -> ApiResult<Effects> {
        admins_only(caller, "enrol hosts")?;
        if token.role == HostRole::Replica {
            return Err(ApiError::Invalid(
                "replicas are not enrolled: each issues its own certificate with the cluster \
                 CA's key"
                    .into(),
            ));
        }
        if token.role == HostRole::Login && self.nodes.contains_key(&token.name) {
            return Err(ApiError::Conflict(format!(
                "'{}' is the name of a compute node: a login host needs another name",
                token.name
            )));
        }
        let mut fx = Effects::default();
        fx.audit(audit_record(
            caller,
            "enrol_token",
            None,
            format!(
                "a token enrolling {} host '{}', valid until {}",
                token.role,
                token.name,
                ysched_common::time::rfc3339(token.expires_ms)
            ),
            now,
        ));
        Ok(fx)
    }

    /// Host `token.name` enrols with `token` (already verified: signed by this cluster and
    /// not expired) from `peer`: recorded, unless the host has enrolled (or been revoked)
    /// since the token was made.
    pub fn enrol(&self, token: &EnrolToken, peer: &str, now: Millis) -> ApiResult<Effects> {
        let current = self.hosts.get(&token.name).map_or(0, |h| h.generation);
        if token.generation <= current {
            return Err(ApiError::Denied(format!(
                "this enrolment token of '{}' was used already, or the host was enrolled or \
                 revoked after it was made: make a new one with `yctl node enrol {}`",
                token.name, token.name
            )));
        }
        let detail = format!(
            "{} host '{}' enrolled from {peer}: earlier certificates of the name are no longer \
             taken",
            token.role, token.name
        );
        Ok(enrolled(
            &token.name,
            token.role,
            token.generation,
            now,
            detail,
        ))
    }

    /// An administrator revokes host `name`: no certificate of it is taken from now on, and
    /// no token made before (the generation moves on).
    pub fn revoke_host(&self, caller: &Caller, name: &str, now: Millis) -> ApiResult<Effects> {
        admins_only(caller, "revoke hosts")?;
        let Some(host) = self.hosts.get(name) else {
            return Err(ApiError::NotFound(format!(
                "no host '{}' was ever enrolled",
                ysched_common::text::excerpt(name, 64)
            )));
        };
        let mut fx = Effects::default();
        fx.hosts.push(HostEnrolment {
            generation: self.next_generation(name, now),
            time: now,
            revoked: true,
            ..host.clone()
        });
        fx.audit(audit_record(
            caller,
            "revoke",
            None,
            format!("{} host '{name}' revoked", host.role),
            now,
        ));
        Ok(fx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin() -> Caller {
        Caller {
            owner: ysched_common::Owner {
                uid: 0,
                gid: 0,
                user: "root".into(),
                groups: vec!["root".into()],
            },
            host: None,
            admin: true,
        }
    }

    /// A token made at time 0 (its generation follows the host's last one).
    fn token(rec: &Records, name: &str, role: HostRole) -> EnrolToken {
        EnrolToken {
            name: name.into(),
            role,
            generation: rec.next_generation(name, 0),
            expires_ms: 10_000,
        }
    }

    fn identity(name: &str, role: HostRole, generation: u64) -> HostIdentity {
        HostIdentity {
            role,
            name: name.into(),
            generation,
        }
    }

    #[test]
    fn a_token_enrols_once_and_a_new_enrolment_retires_the_old_certificate() {
        let mut rec = Records::default();
        let first = token(&rec, "n1", HostRole::Compute);
        assert_eq!(first.generation, 1);
        rec.commit(rec.enrol(&first, "10.0.0.5:4000", 1).unwrap());
        rec.check_certificate(&identity("n1", HostRole::Compute, 1))
            .unwrap();
        // The same token again: refused, nothing written.
        assert!(matches!(
            rec.enrol(&first, "10.0.0.6:4000", 2),
            Err(ApiError::Denied(m)) if m.contains("used already")
        ));
        // Another role, another name: not this host's certificate.
        assert!(rec
            .check_certificate(&identity("n1", HostRole::Login, 1))
            .unwrap_err()
            .contains("enrolled as a compute host"));
        // Enrolled again: only the new certificate is taken.
        let second = token(&rec, "n1", HostRole::Compute);
        rec.commit(rec.enrol(&second, "10.0.0.5:4001", 3).unwrap());
        assert!(rec
            .check_certificate(&identity("n1", HostRole::Compute, 1))
            .unwrap_err()
            .contains("enrolled again (or was revoked) since"));
        rec.check_certificate(&identity("n1", HostRole::Compute, 2))
            .unwrap();
        // Replicas need no enrolment.
        rec.check_certificate(&HostIdentity::replica(3)).unwrap();
    }

    #[test]
    fn revoking_refuses_the_certificate_and_every_token_made_before() {
        let mut rec = Records::default();
        let first = token(&rec, "n1", HostRole::Login);
        rec.commit(rec.enrol(&first, "p", 1).unwrap());
        let pending = token(&rec, "n1", HostRole::Login);
        let user = Caller {
            admin: false,
            ..admin()
        };
        assert!(matches!(
            rec.revoke_host(&user, "n1", 2),
            Err(ApiError::Denied(_))
        ));
        rec.commit(rec.revoke_host(&admin(), "n1", 2).unwrap());
        assert!(rec
            .check_certificate(&identity("n1", HostRole::Login, 1))
            .unwrap_err()
            .contains("was revoked"));
        assert!(rec.enrol(&pending, "p", 3).is_err());
        let again = token(&rec, "n1", HostRole::Login);
        rec.commit(rec.enrol(&again, "p", 4).unwrap());
        rec.check_certificate(&identity("n1", HostRole::Login, again.generation))
            .unwrap();
        assert!(matches!(
            rec.revoke_host(&admin(), "nowhere", 5),
            Err(ApiError::NotFound(_))
        ));
    }

    #[test]
    fn a_certificate_of_an_enrolment_the_store_lost_is_adopted_once() {
        let mut rec = Records::default();
        let t = token(&rec, "n1", HostRole::Compute);
        rec.commit(rec.enrol(&t, "p", 1).unwrap());
        let t = token(&rec, "n1", HostRole::Compute);
        rec.commit(rec.enrol(&t, "p", 2).unwrap());
        // A store restored from before both enrolments knows no n1; one from between them
        // knows its first. Either takes the certificate of enrolment 2 and records it.
        for restored in [Records::default(), {
            let mut r = Records::default();
            let t = token(&r, "n1", HostRole::Compute);
            r.commit(r.enrol(&t, "p", 1).unwrap());
            r
        }] {
            let mut restored = restored;
            let cert = identity("n1", HostRole::Compute, 2);
            restored.check_certificate(&cert).unwrap();
            let fx = restored.adopt_host(&cert, "10.0.0.5:4000", 3).unwrap();
            assert_eq!(fx.audit.len(), 1);
            assert!(
                fx.audit[0].detail.contains("did not know"),
                "{:?}",
                fx.audit
            );
            restored.commit(fx);
            assert_eq!(restored.hosts()["n1"].generation, 2);
            assert!(restored.adopt_host(&cert, "p", 4).is_none());
            // The first certificate is no longer taken.
            assert!(restored
                .check_certificate(&identity("n1", HostRole::Compute, 1))
                .is_err());
        }
        // A revoked host's old certificate is not adopted: its generation is not newer.
        let mut rec = Records::default();
        let t = token(&rec, "n2", HostRole::Compute);
        rec.commit(rec.enrol(&t, "p", 1).unwrap());
        rec.commit(rec.revoke_host(&admin(), "n2", 2).unwrap());
        let old = identity("n2", HostRole::Compute, 1);
        assert!(rec.check_certificate(&old).is_err());
        assert!(rec.adopt_host(&old, "p", 3).is_none());
        assert!(rec.adopt_host(&HostIdentity::replica(1), "p", 3).is_none());
    }

    #[test]
    fn generations_are_enrolment_times_above_the_last_one() {
        let mut rec = Records::default();
        assert_eq!(rec.next_generation("n1", 5_000), 5_000);
        let t = EnrolToken {
            name: "n1".into(),
            role: HostRole::Compute,
            generation: rec.next_generation("n1", 5_000),
            expires_ms: 10_000,
        };
        rec.commit(rec.enrol(&t, "p", 5_000).unwrap());
        // A clock that went back still makes a later generation.
        assert_eq!(rec.next_generation("n1", 4_000), 5_001);
        assert_eq!(rec.next_generation("n1", 9_000), 9_000);
        // Two tokens made before either is used: the later one still enrols after the
        // earlier, not the other way round.
        let early = EnrolToken {
            generation: rec.next_generation("n1", 6_000),
            ..t.clone()
        };
        let late = EnrolToken {
            generation: rec.next_generation("n1", 7_000),
            ..t.clone()
        };
        rec.commit(rec.enrol(&late, "p", 7_000).unwrap());
        assert!(rec.enrol(&early, "p", 7_500).is_err());
    }

    #[test]
    fn tokens_are_for_administrators_and_hosts_that_are_not_replicas() {
        let rec = Records::default();
        let user = Caller {
            admin: false,
            ..admin()
        };
        let t = token(&rec, "n1", HostRole::Compute);
        assert!(matches!(
            rec.token_made(&user, &t, 1),
            Err(ApiError::Denied(_))
        ));
        let fx = rec.token_made(&admin(), &t, 1).unwrap();
        assert_eq!(fx.audit.len(), 1);
        assert!(fx.hosts.is_empty());
        let r = token(&rec, "1", HostRole::Replica);
        assert!(matches!(
            rec.token_made(&admin(), &r, 1),
            Err(ApiError::Invalid(_))
        ));
    }
}
