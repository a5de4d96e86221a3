//! Enrolment: how a host gets its own certificate. An administrator asks schedd for a token
//! (`yctl node enrol NAME`), which names the host, its role, the enrolment generation it is
//! for and when it expires, signed with a key derived from the cluster CA's private key (only
//! replicas hold it, so any replica checks a token and none stores it). The host makes its own
//! key, which never leaves it, and sends the token with a certificate request; schedd checks
//! the token, records the generation (a token is good for one enrolment: the next one needs
//! the next generation) and signs a certificate for the token's identity, whatever the
//! request asked for.

use super::identity::{HostIdentity, HostRole};
use super::TlsError;

/// What every token starts with (and its format's version).
const PREFIX: &str = "ysched-enrol-1";

/// The longest token text accepted (a node name is at most 255 bytes, twice that in hex).
pub const MAX_TOKEN_BYTES: usize = 1024;
/// The largest certificate request accepted (a P-256 request is about 250 bytes).
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// An enrolment token's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrolToken {
    pub name: String,
    pub role: HostRole,
    /// The generation the enrolment records: one more than the host's current one when the
    /// token was made.
    pub generation: u64,
    /// Milliseconds since the epoch after which it is refused.
    pub expires_ms: i64,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("this is not an enrolment token (it must start with '{PREFIX}.'; make one with `yctl node enrol NAME`)")]
    NotAToken,
    #[error("the enrolment token is damaged (a character changed or missing: copy it whole)")]
    Malformed,
    #[error("the enrolment token was not made by this cluster (or was altered): make a new one with `yctl node enrol NAME` on a scheduler host")]
    BadSignature,
    #[error("the enrolment token for '{name}' expired at {expired}: make a new one with `yctl node enrol {name}`")]
    Expired { name: String, expired: String },
}

/// The key that signs tokens: derived from the cluster CA's private key, so that it changes
/// with the CA and is held exactly where the CA key is.
#[derive(Clone)]
pub struct TokenKey(ring::hmac::Key);

impl TokenKey {
    pub fn from_ca_key(ca_key_pem: &str) -> TokenKey {
        let root = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, ca_key_pem.as_bytes());
        let derived = ring::hmac::sign(&root, b"ysched: enrolment tokens, v1");
        TokenKey(ring::hmac::Key::new(
            ring::hmac::HMAC_SHA256,
            derived.as_ref(),
        ))
    }
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl EnrolToken {
    /// The token as text: `ysched-enrol-1.<name in hex>.<role>.<generation>.<expiry ms>.<tag>`.
    pub fn encode(&self, key: &TokenKey) -> String {
        let body = format!(
            "{PREFIX}.{}.{}.{}.{}",
            hex(self.name.as_bytes()),
            self.role.as_str(),
            self.generation,
            self.expires_ms
        );
        let tag = ring::hmac::sign(&key.0, body.as_bytes());
        format!("{body}.{}", hex(tag.as_ref()))
    }

    /// The token `text` says, if `key` signed it and it has not expired at `now_ms`.
    pub fn verify(text: &str, key: &TokenKey, now_ms: i64) -> Result<EnrolToken, TokenError> {
        let text = text.trim();
        if text.len() > MAX_TOKEN_BYTES || !text.starts_with(&format!("{PREFIX}.")) {
            return Err(TokenError::NotAToken);
        }
        let (body, tag) = text.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let tag = unhex(tag).ok_or(TokenError::Malformed)?;
        ring::hmac::verify(&key.0, body.as_bytes(), &tag).map_err(|_| TokenError::BadSignature)?;
        // Signed by this cluster: what follows was written by `encode`.
        let fields: Vec<&str> = body.split('.').collect();
        let [_, name, role, generation, expires] = fields[..] else {
            return Err(TokenError::Malformed);
        };
        let token = EnrolToken {
            name: unhex(name)
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or(TokenError::Malformed)?,
            role: HostRole::parse(role).ok_or(TokenError::Malformed)?,
            generation: generation.parse().map_err(|_| TokenError::Malformed)?,
            expires_ms: expires.parse().map_err(|_| TokenError::Malformed)?,
        };
        if now_ms > token.expires_ms {
            return Err(TokenError::Expired {
                name: token.name,
                expired: crate::time::rfc3339(token.expires_ms),
            });
        }
        Ok(token)
    }

    /// The host and role `text` says it enrols, unverified (only schedd can verify a
    /// token): for a host to check, before it uses a token, that the token is for it.
    pub fn unverified_host(text: &str) -> Option<(String, HostRole)> {
        let body = text.trim().strip_prefix(&format!("{PREFIX}."))?;
        let mut fields = body.split('.');
        let name = String::from_utf8(unhex(fields.next()?)?).ok()?;
        let role = HostRole::parse(fields.next()?)?;
        Some((name, role))
    }

    /// The identity an enrolment with this token gets.
    pub fn identity(&self) -> HostIdentity {
        HostIdentity {
            role: self.role,
            name: self.name.clone(),
            generation: self.generation,
        }
    }
}

/// A host's new key (PEM, to keep) and its certificate request (DER, to send with the
/// token). The request's subject is only a hint: the certificate says the token's identity.
pub fn new_request(name: &str) -> Result<(String, Vec<u8>), TlsError> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, name);
    params.distinguished_name = dn;
    let request = params.serialize_request(&key)?;
    Ok((key.serialize_pem(), request.der().to_vec()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}
