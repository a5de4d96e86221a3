//! This host's credential towards schedd: its own certificate and key from the cluster CA
//! (kept in `node.identity_dir`, 0700, its files 0600; the key made on this host and never
//! sent anywhere),
//! got once by enrolling with a token an administrator made (`yctl node enrol NAME`, then
//! `noded --enrol-token FILE`); or, on a cluster that predates enrolment, the shared cluster
//! key.
//!
//! Enrolment: a new key and a certificate request go with the token to schedd's `Enrolment`
//! service, over TLS that verifies schedd with the pinned cluster CA, to the leader (a replica
//! that does not lead names it). The token's digest is kept beside the certificate, so that a
//! token left in the config is not tried again at every start, while a new one (the host was
//! enrolled anew, or revoked and enrolled again) replaces the identity.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use ysched_common::tls::{HostIdentity, HostRole};
use ysched_proto as pb;

/// The certificate's file in the identity directory.
const CERT_FILE: &str = "node.crt";
/// The key's file (mode 0600).
const KEY_FILE: &str = "node.key";
/// The digest of the token the certificate was got with.
const TOKEN_FILE: &str = "enrolled-with";

/// How long enrolment keeps trying (schedd starting, an election under way).
const ENROL_PATIENCE: Duration = Duration::from_secs(60);

/// This host's own certificate and key, and the identity the certificate says.
#[derive(Clone)]
pub struct OwnCertificate {
    pub cert_pem: String,
    pub key_pem: String,
    pub identity: HostIdentity,
}

impl OwnCertificate {
    /// As tonic presents it.
    pub fn tls_identity(&self) -> Identity {
        Identity::from_pem(&self.cert_pem, &self.key_pem)
    }
}

impl std::fmt::Debug for OwnCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnCertificate({})", self.identity)
    }
}

/// How this agent proves itself to schedd.
#[derive(Debug, Clone, Default)]
pub struct HostCredential {
    /// Its own certificate; `None` on a host not enrolled yet (cluster key only).
    pub own: Option<OwnCertificate>,
    /// The shared cluster key, sent where it exists (schedds that still accept it, or that
    /// predate certificates); `None`: none on this host.
    pub cluster_key: Option<String>,
}

impl HostCredential {
    /// The TLS settings towards schedd: the pinned CA, and this host's certificate if any.
    pub fn tls(&self, ca_pem: &str) -> ClientTlsConfig {
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca_pem))
            .domain_name(ysched_common::tls::SCHEDD_TLS_NAME);
        match &self.own {
            Some(own) => tls.identity(own.tls_identity()),
            None => tls,
        }
    }
}

/// The identity directory: `node.identity_dir`, else `identity` in the spool.
pub fn identity_dir(configured: &Path, spool_dir: &Path) -> PathBuf {
    if configured.as_os_str().is_empty() {
        spool_dir.join("identity")
    } else {
        configured.to_path_buf()
    }
}

/// The certificate kept in `dir`, if there is one. Its key must be private (see
/// [`ysched_common::secret`]).
pub fn load(dir: &Path) -> anyhow::Result<Option<OwnCertificate>> {
    let key_path = dir.join(KEY_FILE);
    let Some(key_pem) = ysched_common::secret::read_private_file(&key_path, "host key")? else {
        return Ok(None);
    };
    let cert_path = dir.join(CERT_FILE);
    let cert_pem = std::fs::read_to_string(&cert_path)
        .with_context(|| format!("the host key {} has no certificate", key_path.display()))?;
    let identity = identity_of(&cert_pem)
        .with_context(|| format!("{} is not a host certificate", cert_path.display()))?;
    Ok(Some(OwnCertificate {
        cert_pem,
        key_pem,
        identity,
    }))
}

fn identity_of(cert_pem: &str) -> anyhow::Result<HostIdentity> {
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .context("no certificate in it")?;
    HostIdentity::from_cert_der(&der).context("it names no host")
}

/// Refuses to run as another host than the certificate says: the name noded registers and
/// its role (a login host or not) must be the certificate's.
pub fn check_matches(
    own: &OwnCertificate,
    name: &str,
    login: bool,
    dir: &Path,
) -> anyhow::Result<()> {
    let role = if login {
        HostRole::Login
    } else {
        HostRole::Compute
    };
    if own.identity.name != name || own.identity.role != role {
        bail!(
            "this host's certificate ({}) is {}'s, but noded runs as {role} host '{name}': \
             start it as that host (--name, --no-jobs / node.role), or enrol it as '{name}' \
             (`yctl node enrol {name}{}` on a scheduler host, then noded --enrol-token FILE)",
            dir.join(CERT_FILE).display(),
            own.identity,
            if login { " --login" } else { "" }
        );
    }
    Ok(())
}

/// The token in `path` (`-`: standard input), trimmed.
pub fn read_token(path: &Path) -> anyhow::Result<String> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("cannot read the token from stdin")?
    } else {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the enrolment token {}", path.display()))?
    };
    let token = text.trim().to_string();
    if token.is_empty() {
        bail!("the enrolment token file {} is empty", path.display());
    }
    Ok(token)
}

/// Refuses a token made for another host or role than this one's (`name`, a login host with
/// `login`): using it would enrol that host, and retire its certificate, for nothing.
pub fn check_token_is_for(token: &str, name: &str, login: bool) -> anyhow::Result<()> {
    let role = if login {
        HostRole::Login
    } else {
        HostRole::Compute
    };
    match ysched_common::tls::EnrolToken::unverified_host(token) {
        None => bail!("the enrolment token is not one (it must start with ysched-enrol-1.)"),
        Some((for_name, for_role)) if for_name != name || for_role != role => bail!(
            "the enrolment token is for {for_role} host '{}', but noded runs as {role} host \
             '{name}': use that host's token, or start noded as that host",
            ysched_common::text::excerpt(&for_name, 64)
        ),
        Some(_) => Ok(()),
    }
}

/// Whether the certificate in `dir` was got with `token` already.
pub fn enrolled_with(dir: &Path, token: &str) -> bool {
    std::fs::read_to_string(dir.join(TOKEN_FILE)).is_ok_and(|d| d.trim() == digest(token))
}

fn digest(token: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Enrols this host as `name` with `token` at schedd (`endpoints`: its replicas' addresses,
/// or the one schedd), verified with the CA in `ca_pem`; keeps the certificate and key in
/// `dir` and returns them.
pub async fn enrol(
    token: &str,
    name: &str,
    endpoints: &[String],
    ca_pem: &str,
    dir: &Path,
) -> anyhow::Result<OwnCertificate> {
    let (key_pem, request) = ysched_common::tls::enrol::new_request(name)?;
    let tls = HostCredential::default().tls(ca_pem);
    let deadline = tokio::time::Instant::now() + ENROL_PATIENCE;
    let mut targets: std::collections::VecDeque<String> = endpoints.iter().cloned().collect();
    let mut last_error = String::from("no schedd address");
    while tokio::time::Instant::now() < deadline {
        let Some(addr) = targets.pop_front() else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            targets.extend(endpoints.iter().cloned());
            continue;
        };
        match enrol_at(&addr, tls.clone(), token, &request).await {
            Ok(cert_pem) => {
                let identity = identity_of(&cert_pem).context("schedd's answer")?;
                keep(dir, &cert_pem, &key_pem, token)?;
                return Ok(OwnCertificate {
                    cert_pem,
                    key_pem,
                    identity,
                });
            }
            // The token was refused: asking again changes nothing.
            Err(Refused::Final(status)) => bail!(
                "schedd at {addr} refused the enrolment: {}",
                status.message()
            ),
            Err(Refused::Elsewhere(leader)) => targets.push_front(leader),
            Err(Refused::Retry(why)) => last_error = format!("{addr}: {why}"),
        }
    }
    bail!(
        "cannot enrol with schedd within {} s: {last_error}",
        ENROL_PATIENCE.as_secs()
    )
}

enum Refused {
    Final(tonic::Status),
    /// Not the leader, which is at this address.
    Elsewhere(String),
    Retry(String),
}

async fn enrol_at(
    addr: &str,
    tls: ClientTlsConfig,
    token: &str,
    request: &[u8],
) -> Result<String, Refused> {
    let endpoint = Endpoint::from_shared(format!("https://{addr}"))
        .and_then(|e| e.tls_config(tls))
        .map_err(|e| Refused::Final(tonic::Status::invalid_argument(e.to_string())))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(15));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| Refused::Retry(format!("cannot connect: {e}")))?;
    let mut client = pb::enrolment_client::EnrolmentClient::new(channel);
    let answer = client
        .enrol(pb::EnrolRequest {
            token: token.to_string(),
            request: request.to_vec(),
        })
        .await;
    match answer {
        Ok(reply) => Ok(reply.into_inner().certificate),
        Err(status) if status.code() == tonic::Code::Unavailable => {
            match crate::agent::leader_named(status.message()) {
                Some(leader) => Err(Refused::Elsewhere(leader.to_string())),
                None => Err(Refused::Retry(status.message().to_string())),
            }
        }
        Err(status) => Err(Refused::Final(status)),
    }
}

/// Writes the certificate, the key (0600) and the token's digest into `dir` (0700), each
/// through a new file renamed over the old one, synced: a power loss leaves the old identity
/// or the new one, never half of each.
fn keep(dir: &Path, cert_pem: &str, key_pem: &str, token: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    // Its parent (the spool, by default) as any directory noded makes; itself private.
    if let Some(parent) = dir.parent() {
        ysched_common::durable::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(e)
                .with_context(|| format!("cannot create the identity directory {}", dir.display()))
        }
        _ => {}
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    // The key first: a certificate without its key is refused at the next start.
    write_new(dir, KEY_FILE, key_pem, 0o600)?;
    write_new(dir, CERT_FILE, cert_pem, 0o600)?;
    write_new(dir, TOKEN_FILE, &format!("{}\n", digest(token)), 0o600)?;
    ysched_common::durable::sync_dir(dir)?;
    Ok(())
}

fn write_new(dir: &Path, name: &str, text: &str, mode: u32) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{name}.new"));
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))
        .with_context(|| format!("cannot put {} in place", dir.join(name).display()))?;
    Ok(())
}
