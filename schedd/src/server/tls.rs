//! TLS on the agent link: the cluster CA on disk (created at first start beside the cluster
//! key), schedd's serving certificate (issued fresh at each start), and the accept loop that
//! completes every handshake before a byte of gRPC is read, logging who failed and why.
//!
//! A peer may present its own certificate (a host's, from its enrolment; a replica's, issued
//! by itself with the CA key): rustls verifies its chain to the cluster CA during the
//! handshake, and the host identity it names is kept with the connection
//! ([`AgentConnInfo::identity`]) for the services to check (see `auth`). A peer without one
//! may still authenticate with the shared cluster key where schedd accepts it.
//!
//! Until a connection has carried an authenticated request it holds nothing of schedd's
//! but its socket and buffers, and even that is bounded: at most
//! [`UNAUTHENTICATED_PER_IP`] such connections per source address and
//! [`UNAUTHENTICATED_TOTAL`] in all (more are closed at accept), and each is closed
//! [`AUTH_TIMEOUT`] after it was accepted unless it has authenticated by then (see
//! [`AgentConn`]). Refusals are logged, rate-limited per address.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use ysched_common::edge::peer_log;
use ysched_common::tls::{ClusterCa, HostIdentity};

/// A TLS record of type "handshake" starts every TLS connection; an HTTP/2 client without
/// TLS starts with `PRI * HTTP/2.0`.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// A connection that has not sent an authenticated request this long after it was
/// accepted (TLS handshake included) is closed. Agents send their first request (the session,
/// or a relayed client request) right after connecting.
pub(super) const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections from one address that have not authenticated yet (handshaking, or waiting
/// for their first request).
pub(super) const UNAUTHENTICATED_PER_IP: usize = 64;
/// Connections from all addresses that have not authenticated yet.
pub(super) const UNAUTHENTICATED_TOTAL: usize = 1024;

/// Reads the cluster CA, or creates it (certificate 0644, key 0600, exactly: schedd's umask
/// is 077) when neither file exists.
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
                // The certificate is for copying to every node: others may reach it.
                ysched_common::durable::create_dir_all_with_mode(dir, 0o755)?;
            }
            let write = |p: &Path, mode: u32, text: &str| -> anyhow::Result<()> {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(p)
                    .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", p.display()))?;
                // The mode given to open is filtered by the umask.
                f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
                std::io::Write::write_all(&mut f, text.as_bytes())?;
                f.sync_all()?;
                // Its name too: a CA lost to a power loss would be replaced, and refused by
                // every agent that pinned this one.
                ysched_common::durable::sync_parent(p)?;
                Ok(())
            };
            write(key_path, 0o600, &ca.key_pem())?;
            write(cert_path, 0o644, &ca.cert_pem)?;
            tracing::warn!(
                "created the cluster CA {} (copy it to every node; every replica needs its key too)",
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
/// with the CA certificate, HTTP/2 only. A client certificate is asked for and, when given,
/// must chain to the cluster CA (else the handshake fails); a client without one is let in,
/// to enrol or to authenticate with the cluster key where that is still accepted.
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
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes())?)?;
    let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .allow_unauthenticated()
    .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(clients)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Connections not yet authenticated, per source address and in all.
#[derive(Debug, Default)]
struct Unauthenticated {
    per_ip: HashMap<IpAddr, usize>,
    total: usize,
}

type SharedCounts = Arc<Mutex<Unauthenticated>>;

/// A connection's place among the unauthenticated ones, given back when it authenticates or
/// closes.
#[derive(Debug)]
struct UnauthenticatedSlot {
    counts: SharedCounts,
    ip: IpAddr,
}

impl UnauthenticatedSlot {
    /// A place for a connection from `ip`, or why there is none.
    fn take(counts: &SharedCounts, ip: IpAddr) -> Result<UnauthenticatedSlot, String> {
        let mut c = counts.lock().unwrap_or_else(PoisonError::into_inner);
        let from_ip = c.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= UNAUTHENTICATED_PER_IP {
            return Err(format!(
                "{from_ip} connections from {ip} have not authenticated yet (the limit per \
                 address is {UNAUTHENTICATED_PER_IP})"
            ));
        }
        if c.total >= UNAUTHENTICATED_TOTAL {
            return Err(format!(
                "{} connections have not authenticated yet (the limit is \
                 {UNAUTHENTICATED_TOTAL})",
                c.total
            ));
        }
        *c.per_ip.entry(ip).or_default() += 1;
        c.total += 1;
        Ok(UnauthenticatedSlot {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for UnauthenticatedSlot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
    }
}

/// What the gRPC services know of the connection a request came on (in the request's
/// extensions): the peer's address, the host its verified certificate names, and whether the
/// connection has authenticated.
#[derive(Debug, Clone)]
pub struct AgentConnInfo {
    pub remote: SocketAddr,
    /// The identity in the peer's certificate, verified against the cluster CA in the
    /// handshake; `None`: it presented none (or one that names no host).
    pub identity: Option<Arc<HostIdentity>>,
    authenticated: Arc<AtomicBool>,
}

impl AgentConnInfo {
    /// The connection carried an authenticated request: it stays open.
    pub fn mark_authenticated(&self) {
        self.authenticated.store(true, Ordering::Release);
    }
}

/// The connection info of a request that came on the agent port.
pub fn conn_info<T>(request: &tonic::Request<T>) -> Option<&AgentConnInfo> {
    request.extensions().get::<AgentConnInfo>()
}

/// A TLS connection on the agent port. Until its connection info is marked authenticated
/// (by the cluster-key check, on the first request that carries the key) it counts among the
/// unauthenticated connections, and once [`AUTH_TIMEOUT`] from its accept has passed it
/// fails every read and write, which makes the HTTP/2 server close it.
pub struct AgentConn {
    tls: TlsStream<TcpStream>,
    info: AgentConnInfo,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    slot: Option<UnauthenticatedSlot>,
    expired: bool,
}

impl AgentConn {
    fn new(
        tls: TlsStream<TcpStream>,
        remote: SocketAddr,
        deadline: tokio::time::Instant,
        slot: UnauthenticatedSlot,
    ) -> AgentConn {
        // Verified by rustls in the handshake (see `server_config`): its chain ends at the
        // cluster CA.
        let identity = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|cert| HostIdentity::from_cert_der(cert))
            .map(Arc::new);
        AgentConn {
            tls,
            info: AgentConnInfo {
                remote,
                identity,
                authenticated: Arc::default(),
            },
            deadline: Some(Box::pin(tokio::time::sleep_until(deadline))),
            slot: Some(slot),
            expired: false,
        }
    }

    /// `Err` once the connection is past its deadline without having authenticated; the
    /// deadline's timer is registered with `cx`, so that an idle connection is woken to be
    /// closed.
    fn check_authenticated(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        if self.expired {
            return Err(not_authenticated());
        }
        let Some(deadline) = self.deadline.as_mut() else {
            return Ok(());
        };
        if self.info.authenticated.load(Ordering::Acquire) {
            self.deadline = None;
            self.slot = None;
            return Ok(());
        }
        if deadline.as_mut().poll(cx).is_pending() {
            return Ok(());
        }
        self.expired = true;
        self.deadline = None;
        let peer = self.info.remote;
        peer_log::warn(
            "unauthenticated connection",
            &peer.ip().to_string(),
            format_args!(
                "agent connection from {peer} closed: no authenticated request within {} s",
                AUTH_TIMEOUT.as_secs()
            ),
        );
        Err(not_authenticated())
    }
}

fn not_authenticated() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no authenticated request in time",
    )
}

impl tonic::transport::server::Connected for AgentConn {
    type ConnectInfo = AgentConnInfo;

    fn connect_info(&self) -> AgentConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for AgentConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.check_authenticated(cx)?;
        Pin::new(&mut this.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for AgentConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check_authenticated(cx)?;
        Pin::new(&mut this.tls).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check_authenticated(cx)?;
        Pin::new(&mut this.tls).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_shutdown(cx)
    }
}

/// Accepts TCP connections and hands on only those whose TLS handshake succeeded within
/// [`AUTH_TIMEOUT`], while there is room among the unauthenticated connections. A plaintext
/// peer, a failed or slow handshake, or a connection over a limit is logged (rate-limited per
/// address) and dropped.
pub fn accept_loop(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> (
    tokio_stream::wrappers::ReceiverStream<std::io::Result<AgentConn>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    let counts = SharedCounts::default();
    let task = tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    peer_log::warn(
                        "accept failed",
                        "the agent port",
                        format_args!("agent listener: accept failed: {e}"),
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let deadline = tokio::time::Instant::now() + AUTH_TIMEOUT;
            let slot = match UnauthenticatedSlot::take(&counts, peer.ip()) {
                Ok(slot) => slot,
                Err(why) => {
                    peer_log::warn(
                        "refused connection",
                        &peer.ip().to_string(),
                        format_args!("agent connection from {peer} refused: {why}"),
                    );
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout_at(deadline, handshake(&acceptor, stream, peer)).await {
                    Ok(Some(tls)) => {
                        let _ = tx.send(Ok(AgentConn::new(tls, peer, deadline, slot))).await;
                    }
                    Ok(None) => {}
                    Err(_) => peer_log::warn(
                        "no TLS handshake",
                        &peer.ip().to_string(),
                        format_args!(
                            "agent connection from {peer} refused: no TLS handshake within {} s",
                            AUTH_TIMEOUT.as_secs()
                        ),
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
            peer_log::warn(
                "no TLS",
                &peer.ip().to_string(),
                format_args!(
                    "agent connection from {peer} refused: it does not speak TLS (a plaintext \
                     client, or a noded older than the TLS agent link); agents must verify \
                     schedd with the cluster CA"
                ),
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
            peer_log::warn(
                "TLS handshake failed",
                &peer.ip().to_string(),
                format_args!(
                    "agent connection from {peer} refused: TLS handshake failed: {e} (an agent \
                     that pins another cluster CA rejects this schedd's certificate)"
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_connections_are_limited_per_address_and_in_all() {
        let counts = SharedCounts::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut held: Vec<_> = (0..UNAUTHENTICATED_PER_IP)
            .map(|_| UnauthenticatedSlot::take(&counts, a).unwrap())
            .collect();
        let err = UnauthenticatedSlot::take(&counts, a).unwrap_err();
        assert!(err.contains("limit per address is 64"), "{err}");
        // Another address still gets in; one of a's closing makes room for a.
        held.push(UnauthenticatedSlot::take(&counts, b).unwrap());
        held.remove(0);
        held.push(UnauthenticatedSlot::take(&counts, a).unwrap());
        // The total.
        let mut n = 3u32;
        while held.len() < UNAUTHENTICATED_TOTAL {
            let ip = IpAddr::from([10, 1, (n >> 8) as u8, n as u8]);
            held.push(UnauthenticatedSlot::take(&counts, ip).unwrap());
            n += 1;
        }
        let err = UnauthenticatedSlot::take(&counts, "10.9.9.9".parse().unwrap()).unwrap_err();
        assert!(err.contains("the limit is 1024"), "{err}");
        held.clear();
        let c = counts.lock().unwrap();
        assert_eq!((c.total, c.per_ip.len()), (0, 0));
    }
}
