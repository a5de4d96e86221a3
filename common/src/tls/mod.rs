//! The cluster's private certificate authority, as data: making the CA, rebuilding it from its
//! PEM files, issuing schedd's serving certificate and each host's own certificate (see
//! [`identity`] and [`enrol`]). Agents pin the CA certificate, so only a holder of the CA key
//! (a scheduler host) can pass for schedd or a replica. Reading and writing the files is the
//! caller's business.

pub mod enrol;
pub mod identity;

pub use enrol::{EnrolToken, TokenError, TokenKey};
pub use identity::{HostIdentity, HostRole};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// The name schedd's certificate is issued for and the name agents check, whatever address
/// they dial: the CA is private to the cluster, so a fixed name loses nothing and survives
/// address changes.
pub const SCHEDD_TLS_NAME: &str = "schedd.ysched.internal";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the certificate request is unreadable or its signature is wrong: {0}")]
    BadRequest(rcgen::Error),
}

/// How long a host's certificate is valid. Long: what ends a host's trust is its revocation
/// (`yctl node revoke`) or a new enrolment, both of which schedd checks on every connection
/// (the generation), not an expiry that would stop a forgotten node one day.
const HOST_CERT_DAYS: i64 = 3650;
/// How far before now a new certificate is valid from: a host whose clock is behind the
/// scheduler's still takes it.
const CLOCK_SKEW_DAYS: i64 = 1;

/// A cluster CA: its certificate (public, copied to every node) and its key (schedd only).
pub struct ClusterCa {
    pub cert_pem: String,
    key: KeyPair,
}

/// A certificate and its private key, in PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "ysched");
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

impl ClusterCa {
    /// A new CA with a fresh key.
    pub fn generate() -> Result<ClusterCa, TlsError> {
        let key = KeyPair::generate()?;
        let cert = ca_params()?.self_signed(&key)?;
        Ok(ClusterCa {
            cert_pem: cert.pem(),
            key,
        })
    }

    /// The CA from its files' contents. The certificate is kept as given (agents pin exactly
    /// it); issuing needs only the key and the CA's name, which is always [`CA_COMMON_NAME`].
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<ClusterCa, TlsError> {
        Ok(ClusterCa {
            cert_pem: cert_pem.to_string(),
            key: KeyPair::from_pem(key_pem)?,
        })
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A serving certificate for schedd signed by this CA, valid for [`SCHEDD_TLS_NAME`] and
    /// `extra_names` (host names or IP addresses), with a fresh key.
    pub fn issue_server(&self, extra_names: &[String]) -> Result<Issued, TlsError> {
        let issuer = Issuer::new(ca_params()?, &self.key);
        let mut names = vec![SCHEDD_TLS_NAME.to_string()];
        names.extend(extra_names.iter().cloned());
        let mut params = CertificateParams::new(names)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "ysched");
        dn.push(DnType::CommonName, SCHEDD_TLS_NAME);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl ClusterCa {
    /// A client certificate for `identity`, for the holder of `public_key`, signed by this CA.
    fn issue_host(
        &self,
        identity: &HostIdentity,
        public_key: &impl rcgen::PublicKeyData,
        now_secs: i64,
    ) -> Result<String, TlsError> {
        let issuer = Issuer::new(ca_params()?, &self.key);
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = identity.distinguished_name();
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let day = 24 * 3600;
        let at = |secs: i64| {
            time::OffsetDateTime::from_unix_timestamp(secs)
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        };
        params.not_before = at(now_secs - CLOCK_SKEW_DAYS * day);
        params.not_after = at(now_secs + HOST_CERT_DAYS * day);
        Ok(params.signed_by(public_key, &issuer)?.pem())
    }

    /// The certificate for `identity` answering a host's certificate request (DER): only the
    /// request's key is taken (its signature proves the host holds it); whatever subject it
    /// asked for, the certificate says `identity`.
    pub fn sign_request(
        &self,
        request_der: &[u8],
        identity: &HostIdentity,
        now_secs: i64,
    ) -> Result<String, TlsError> {
        let der = rustls_pki_types::CertificateSigningRequestDer::from(request_der);
        let request =
            rcgen::CertificateSigningRequestParams::from_der(&der).map_err(TlsError::BadRequest)?;
        self.issue_host(identity, &request.public_key, now_secs)
    }

    /// A replica's own certificate, with a fresh key: every replica issues its own at start
    /// (it holds the CA key), so none is ever copied between hosts.
    pub fn issue_replica(&self, place: u64, now_secs: i64) -> Result<Issued, TlsError> {
        let key = KeyPair::generate()?;
        let cert_pem = self.issue_host(&HostIdentity::replica(place), &key, now_secs)?;
        Ok(Issued {
            cert_pem,
            key_pem: key.serialize_pem(),
        })
    }

    /// The key that signs this cluster's enrolment tokens.
    pub fn token_key(&self) -> TokenKey {
        TokenKey::from_ca_key(&self.key_pem())
    }
}

/// The subject name of every cluster CA (what a certificate names as its issuer).
pub const CA_COMMON_NAME: &str = "ysched cluster CA";

#[cfg(test)]
mod tests;
