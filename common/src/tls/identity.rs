//! Who a host is, as its certificate from the cluster CA says: a compute node, a login host or
//! a replica, by name, and the enrolment generation the certificate was issued for.
//!
//! The identity is written into the certificate's subject (organizational unit: the role;
//! common name: the name; the X.520 `serialNumber` attribute: the generation) and read back
//! only from a certificate whose chain to the cluster CA the TLS layer has already verified:
//! no one without the CA's key can make one that says anything.

use x509_parser::prelude::FromDer;

/// What a host may do in the cluster.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum HostRole {
    /// A node agent that runs jobs: it registers, heartbeats and reports only as itself, and
    /// relays only the users with a job running on it.
    Compute,
    /// A login host's agent: it runs nothing and relays every user of its host.
    Login,
    /// One of schedd's replicas: the only role the replication link and the forwarding of
    /// clients' requests accept.
    Replica,
}

impl HostRole {
    pub fn as_str(self) -> &'static str {
        match self {
            HostRole::Compute => "compute",
            HostRole::Login => "login",
            HostRole::Replica => "replica",
        }
    }

    pub fn parse(word: &str) -> Option<HostRole> {
        match word {
            "compute" => Some(HostRole::Compute),
            "login" => Some(HostRole::Login),
            "replica" => Some(HostRole::Replica),
            _ => None,
        }
    }
}

impl std::fmt::Display for HostRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A host's identity in its certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    pub role: HostRole,
    /// The node's name (as it registers), or a replica's place in `scheduler.replicas`.
    pub name: String,
    /// Which enrolment of the name issued it: schedd takes a node's certificate only while
    /// the generation is the node's current one, so that enrolling a host again, or revoking
    /// it, retires every earlier certificate. Replicas' certificates carry 0.
    pub generation: u64,
}

impl HostIdentity {
    /// The identity of replica `place`.
    pub fn replica(place: u64) -> HostIdentity {
        HostIdentity {
            role: HostRole::Replica,
            name: place.to_string(),
            generation: 0,
        }
    }

    /// The replica's place, for a replica's identity.
    pub fn replica_place(&self) -> Option<u64> {
        match self.role {
            HostRole::Replica => self.name.parse().ok(),
            _ => None,
        }
    }

    /// The identity a certificate (DER) names, if it names one: its subject's organization is
    /// `ysched` and it has a role, a name and a generation. Only meaningful for a
    /// certificate whose chain was verified.
    pub fn from_cert_der(der: &[u8]) -> Option<HostIdentity> {
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).ok()?;
        let subject = cert.subject();
        let single = |mut values: Box<dyn Iterator<Item = _> + '_>| -> Option<String> {
            let first: &x509_parser::x509::AttributeTypeAndValue<'_> = values.next()?;
            if values.next().is_some() {
                return None;
            }
            first.as_str().ok().map(str::to_string)
        };
        let organization = single(Box::new(subject.iter_organization()))?;
        if organization != ORGANIZATION {
            return None;
        }
        let role = HostRole::parse(&single(Box::new(subject.iter_organizational_unit()))?)?;
        let name = single(Box::new(subject.iter_common_name()))?;
        let generation = single(Box::new(
            subject.iter_by_oid(&x509_parser::oid_registry::OID_X509_SERIALNUMBER),
        ))?
        .parse()
        .ok()?;
        if name.is_empty() {
            return None;
        }
        Some(HostIdentity {
            role,
            name,
            generation,
        })
    }

    /// The subject that says this identity (see [`HostIdentity::from_cert_der`]).
    pub(super) fn distinguished_name(&self) -> rcgen::DistinguishedName {
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::OrganizationName, ORGANIZATION);
        dn.push(rcgen::DnType::OrganizationalUnitName, self.role.as_str());
        dn.push(rcgen::DnType::CommonName, self.name.as_str());
        dn.push(
            rcgen::DnType::CustomDnType(GENERATION_OID.to_vec()),
            self.generation.to_string(),
        );
        dn
    }
}

impl std::fmt::Display for HostIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.role {
            HostRole::Replica => write!(f, "replica {}", self.name),
            role => write!(f, "{role} host '{}'", self.name),
        }
    }
}

/// The organization every certificate of a cluster CA names.
pub(super) const ORGANIZATION: &str = "ysched";

/// X.520 `serialNumber` (2.5.4.5), which carries the enrolment generation.
const GENERATION_OID: [u64; 4] = [2, 5, 4, 5];
