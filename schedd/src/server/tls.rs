//! TLS on the agent link: the cluster CA on disk (created at first start beside the cluster
//! key), schedd's serving certificate (issued fresh at each start), and the accept loop that
//! completes every handshake before a byte of gRPC is read, logging who failed and why.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use ysched_common::tls::ClusterCa;

/// A TLS record of type "handshake" starts every TLS connection; an HTTP/2 client without
/// TLS starts with `PRI * HTTP/2.0`.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// A peer that opens a connection and says nothing is dropped after this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the cluster CA, or creates it (certificate 0644, key 0600) when neither file exists.
/// One file without the other is an error: a new CA would lock out every agent. A key others
/// may read or write, or that belongs to another user, is refused (see
/// [`ysched_common::secret`]).
pub fn load_or_create_ca(cert_path: &Path, key_path: &Path) -> anyhow::Result<ClusterCa> {
    use std::os::unix::fs::OpenOptionsExt;
    let read = |p: &Path| match std::fs::read_to_string(p) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", p.display())),
    };
    // The key signs the certificate agents trust: refused when others may read or write it.
    let key = ysched_common::secret::read_private_file(key_path, "cluster CA key")?;
    match (read(cert_path)?, key) {
        (Some(cert), Some(key)) => ClusterCa::from_pem(&cert, &key).map_err(|e| {
            anyhow::anyhow!(
                "cluster CA {} / {}: {e}",
                cert_path.display(),
                key_path.display()
            )
        }),
        (None, None) => {
            let ca = ClusterCa::generate()?;
            if let Some(dir) = cert_path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let write = |p: &Path, mode: u32, text: &str| -> anyhow::Result<()> {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(p)
                    .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", p.display()))?;
                std::io::Write::write_all(&mut f, text.as_bytes())?;
                f.sync_all()?;
                Ok(())
            };
            write(key_path, 0o600, &ca.key_pem())?;
            write(cert_path, 0o644, &ca.cert_pem)?;
            tracing::warn!(
                "created the cluster CA {} (copy it to every node beside the cluster key)",
                cert_path.display()
            );
            Ok(ca)
        }
        (Some(_), None) => anyhow::bail!(
            "the cluster CA certificate {} exists but its key {} does not: restore the key \
             (a new CA would make every agent refuse this schedd)",
            cert_path.display(),
            key_path.display()
        ),
        (None, Some(_)) => anyhow::bail!(
            "the cluster CA key {} exists but its certificate {} does not: restore it",
            key_path.display(),
            cert_path.display()
        ),
    }
}

/// schedd's TLS server config: a fresh serving certificate signed by the cluster CA, sent
/// with the CA certificate, HTTP/2 only. Agents are authenticated inside the session by the
/// cluster key, which they send only after verifying this certificate.
pub fn server_config(ca: &ClusterCa) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut names = vec!["localhost".to_string()];
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            names.push(host.to_string());
        }
    }
    let issued = ca.issue_server(&names)?;
    let chain = vec![
        CertificateDer::from_pem_slice(issued.cert_pem.as_bytes())?,
        CertificateDer::from_pem_slice(ca.cert_pem.as_bytes())?,
    ];
    let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts TCP connections and hands on only those whose TLS handshake succeeded. A plaintext
/// peer or a failed handshake is logged with the peer's address and dropped.
pub fn accept_loop(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> (
    tokio_stream::wrappers::ReceiverStream<std::io::Result<TlsStream<TcpStream>>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    let task = tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::error!("agent listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&acceptor, stream, peer))
                    .await
                {
                    Ok(Some(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(None) => {}
                    Err(_) => tracing::warn!(
                        "agent connection from {peer} refused: no TLS handshake within {}s",
                        HANDSHAKE_TIMEOUT.as_secs()
                    ),
                }
            });
        }
    });
    (tokio_stream::wrappers::ReceiverStream::new(rx), task)
}

async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(0) => return None,
        Ok(_) if first[0] != TLS_HANDSHAKE_RECORD => {
            tracing::warn!(
                "agent connection from {peer} refused: it does not speak TLS (a plaintext \
                 client, or a noded older than the TLS agent link); agents must verify schedd \
                 with the cluster CA"
            );
            return None;
        }
        Ok(_) => {}
        Err(e) => {
            tracing::debug!("agent connection from {peer}: {e}");
            return None;
        }
    }
    match acceptor.accept(stream).await {
        Ok(tls) => Some(tls),
        Err(e) => {
            tracing::warn!(
                "agent connection from {peer} refused: TLS handshake failed: {e} (an agent \
                 that pins another cluster CA rejects this schedd's certificate)"
            );
            None
        }
    }
}
