//! A connection to schedd's agent port as a host of the cluster would open it, for tests
//! that act as an attacker holding that host's credentials: the pinned cluster CA, and the
//! certificate and key in a host's identity directory (what root on that host can read), or
//! none.

use std::path::Path;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A channel to `addr` (`host:port`), verifying schedd with the CA certificate in
/// `ca_file`, presenting the certificate of `identity_dir` (`node.crt`, `node.key`) if given.
pub async fn host_channel(addr: &str, ca_file: &Path, identity_dir: Option<&Path>) -> Channel {
    let ca = std::fs::read_to_string(ca_file).expect("the cluster CA certificate");
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(ysched_common::tls::SCHEDD_TLS_NAME);
    if let Some(dir) = identity_dir {
        let cert = std::fs::read_to_string(dir.join("node.crt")).expect("a host certificate");
        let key = std::fs::read_to_string(dir.join("node.key")).expect("a host key");
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("connect to the agent port")
}

/// A channel presenting a certificate the test makes with the CA key in `ca_key_file` (what
/// only a scheduler host holds) for `identity`, e.g. to stand for a replica.
pub async fn channel_with_issued(
    addr: &str,
    ca_file: &Path,
    ca_key_file: &Path,
    identity: &ysched_common::tls::HostIdentity,
) -> Channel {
    let ca_pem = std::fs::read_to_string(ca_file).unwrap();
    let ca = ysched_common::tls::ClusterCa::from_pem(
        &ca_pem,
        &std::fs::read_to_string(ca_key_file).unwrap(),
    )
    .unwrap();
    let (key, request) = ysched_common::tls::enrol::new_request(&identity.name).unwrap();
    let now = ysched_common::time::now_ms() / 1000;
    let cert = ca.sign_request(&request, identity, now).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name(ysched_common::tls::SCHEDD_TLS_NAME)
        .identity(Identity::from_pem(cert, key));
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("connect to the agent port")
}
