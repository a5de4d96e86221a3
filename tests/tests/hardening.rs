//! End-to-end tests for the hostile-test findings on the scheduler side: the agent link's
//! TLS, launches that cannot reach a node, lost cancels, duplicate node names, a full state
//! disk, consistent listings, and GPUs reused only after their old processes are gone.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_rustls::rustls;
use ysched_tests::{FakeNode, TestCluster};

fn log(c: &TestCluster, name: &str) -> String {
    std::fs::read_to_string(c.dir.path().join(format!("{name}.log"))).unwrap_or_default()
}

fn wait_log(c: &TestCluster, name: &str, needle: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !log(c, name).contains(needle) {
        if std::time::Instant::now() > deadline {
            panic!("{name}.log never said {needle:?}:\n{}", c.logs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn cluster_key(c: &TestCluster) -> String {
    std::fs::read_to_string(c.dir.path().join("cluster.key"))
        .unwrap()
        .trim()
        .to_string()
}

/// Binds the agent port the moment schedd is gone (as a squatting local user would).
fn squat(port: u16) -> TcpListener {
    let mut last = None;
    for _ in 0..200 {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => return l,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("cannot bind the agent port {port}: {last:?}");
}

/// A squatter that answers like a plaintext HTTP/2 (gRPC) server and records every byte the
/// agents send it.
fn plaintext_squatter(listener: TcpListener, stop: Arc<AtomicBool>) -> Arc<Mutex<Vec<u8>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
                    // The server preface of HTTP/2: an empty SETTINGS frame.
                    let _ = s.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        seen2.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    seen
}

/// A squatter with a TLS certificate from another CA: counts completed handshakes and the
/// plaintext bytes it would have read after them.
fn wrong_ca_squatter(listener: TcpListener, stop: Arc<AtomicBool>) -> Arc<Mutex<(u32, Vec<u8>)>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let other_ca = ysched_common::tls::ClusterCa::generate().unwrap();
    let issued = other_ca.issue_server(&[]).unwrap();
    let chain = vec![
        CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap(),
        CertificateDer::from_pem_slice(other_ca.cert_pem.as_bytes()).unwrap(),
    ];
    let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let seen = Arc::new(Mutex::new((0u32, Vec::new())));
    let seen2 = seen.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            use tokio::io::AsyncReadExt;
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let Ok(Ok((tcp, _))) =
                    tokio::time::timeout(Duration::from_millis(100), listener.accept()).await
                else {
                    continue;
                };
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    seen2.lock().unwrap().0 += 1;
                    let mut buf = vec![0u8; 4096];
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(500), tls.read(&mut buf)).await
                    {
                        seen2.lock().unwrap().1.extend_from_slice(&buf[..n]);
                    }
                }
            }
        });
    });
    seen
}

#[test]
fn agents_refuse_a_squatter_on_the_agent_port_and_never_send_it_the_key() {
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 2, "A100")]);
    let key = cluster_key(&c);
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);

    // 1. A plaintext gRPC server on the port: the agent's TLS handshake fails at once.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = plaintext_squatter(squat(c.port), stop.clone());
    wait_log(&c, "noded-n1", "it does not speak TLS");
    stop.store(true, Ordering::SeqCst);
    let bytes = seen.lock().unwrap().clone();
    assert!(!bytes.is_empty(), "the agent never tried the squatter");
    assert_eq!(bytes[0], 0x16, "the agent's first byte is not a TLS handshake");
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains(&key), "the cluster key reached the plaintext squatter");
    assert!(!text.contains("authorization"), "a gRPC request reached the squatter");
    assert!(log(&c, "noded-n1").contains("the cluster key was not sent"));
    std::thread::sleep(Duration::from_millis(700)); // the squatter thread lets go of the port

    // 2. A TLS server whose certificate comes from another CA.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = wrong_ca_squatter(squat(c.port), stop.clone());
    wait_log(&c, "noded-n1", "not signed by the cluster CA");
    stop.store(true, Ordering::SeqCst);
    let (handshakes, bytes) = seen.lock().unwrap().clone();
    assert_eq!(handshakes, 0, "the agent completed a handshake with another CA's server");
    assert!(bytes.is_empty());
    std::thread::sleep(Duration::from_millis(300));

    // 3. The real schedd comes back: the agent reconnects and jobs run.
    c.start_schedd();
    c.wait_nodes_up(1);
    let id = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id, "COMPLETED", Duration::from_secs(20));
}

#[test]
fn schedd_refuses_plaintext_and_wrong_ca_agents_with_a_log_line() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, "A100")]);
    // A plaintext gRPC client: HTTP/2 preface in the clear.
    let mut s = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "schedd answered a plaintext client");
    wait_log(&c, "schedd", "it does not speak TLS");

    // A TLS client that pins another CA refuses schedd's certificate; schedd logs it.
    let other_ca = ysched_common::tls::ClusterCa::generate().unwrap();
    let port = c.port;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async move {
        use rustls_pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls_pki_types::CertificateDer::from_pem_slice(other_ca.cert_pem.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from(ysched_common::tls::SCHEDD_TLS_NAME).unwrap();
        connector.connect(name, tcp).await.map(|_| ())
    });
    let err = result.expect_err("a client pinning another CA accepted schedd");
    assert!(err.to_string().contains("invalid peer certificate"), "{err}");
    wait_log(&c, "schedd", "TLS handshake failed");
    // The real agent is unaffected.
    assert_eq!(c.nodes()[0]["state"], "IDLE");
}
