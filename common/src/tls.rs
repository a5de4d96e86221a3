//! The cluster's private certificate authority, as data: making the CA, rebuilding it from its
//! PEM files, and issuing schedd's serving certificate. Agents pin the CA certificate, so only
//! a holder of the CA key (schedd's host) can pass for schedd. Reading and writing the files
//! is the caller's business.

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
}

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

/// The subject name of every cluster CA (what a certificate names as its issuer).
pub const CA_COMMON_NAME: &str = "ysched cluster CA";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_from_a_reloaded_ca() {
        let ca = ClusterCa::generate().unwrap();
        assert!(ca.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let again = ClusterCa::from_pem(&ca.cert_pem, &ca.key_pem()).unwrap();
        let issued = again
            .issue_server(&["127.0.0.1".into(), "head1".into()])
            .unwrap();
        assert!(issued.cert_pem.contains("BEGIN CERTIFICATE"));
        assert!(issued.key_pem.contains("PRIVATE KEY"));
        assert!(ClusterCa::from_pem(&ca.cert_pem, "not a key").is_err());
    }
}
