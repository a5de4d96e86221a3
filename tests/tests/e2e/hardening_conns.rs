//! End-to-end: no connection or request of one peer starves the others. Real daemons on
//! loopback, floods by the real unprivileged user `nobody`, each bounded in count and time:
//! connections held on the client sockets (schedd's and a node's), unauthenticated
//! connections and wrong-key requests on the agent port, slow clients of the metrics
//! endpoint, and a relayed request whose refusal once broke the session that carried it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_rustls::rustls;
use ysched_proto as pb;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;
const NOBODY: u32 = 65534;
/// A uid without a passwd entry, to hold connections with.
const NAMELESS: u32 = 4243;

/// A user other than root and nobody who floods nothing (`yq --me` needs a user name): the
/// first in the passwd database (`daemon` on most systems).
fn other_user() -> u32 {
    (1..65534)
        .find(|uid| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(*uid))
                .ok()
                .flatten()
                .is_some()
        })
        .expect("a user besides root and nobody")
}
/// "Not starved": an answer within 1 s is the aim; twice that leaves room for a
/// loaded 2-core machine, while a starved client waited out its 10 s connect timeout.
const PROMPT: Duration = Duration::from_secs(2);

fn log(c: &TestCluster, name: &str) -> String {
    std::fs::read_to_string(c.dir.path().join(format!("{name}.log"))).unwrap_or_default()
}

/// Lines of `text` that contain every one of `needles`.
fn lines_with(text: &str, needles: &[&str]) -> usize {
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .count()
}

/// `yq --me` as `uid` (on host `agent`, or schedd's own socket) answers, and promptly.
fn answers_promptly(c: &TestCluster, agent: Option<&str>, uid: u32) {
    let start = Instant::now();
    let out = c.run_on(agent, uid, uid, "yq", &["--me"]);
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "yq --me as uid {uid} failed: {}",
        stderr(&out)
    );
    assert!(took < PROMPT, "yq --me as uid {uid} took {took:?}");
}

/// The session of node `n1` never dropped: one registration, never disconnected, and its
/// running `job` untouched.
fn session_never_dropped(c: &TestCluster, job: u64) {
    let registrations = lines_with(&log(c, "noded-n1"), &["registered with schedd at"]);
    assert_eq!(registrations, 1, "{}", c.logs());
    assert!(
        !log(c, "schedd").contains("agent disconnected"),
        "{}",
        c.logs()
    );
    let node = c
        .nodes()
        .into_iter()
        .find(|n| n["name"] == "n1")
        .expect("n1 listed");
    assert_ne!(node["state"], "DOWN", "{node}");
    let j = c.job(job);
    assert_eq!(j["state"], "RUNNING", "{j}");
    assert_eq!(j["restart_count"], 0, "{j}");
}

#[test]
fn a_user_holding_many_connections_locks_out_only_themselves() {
    // The test holds hundreds of sockets.
    ysched_common::edge::raise_open_files_limit().unwrap();
    let c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, A100)],
        "max_client_connections = 100",
        "",
    );
    let other = other_user();

    // 1. schedd's socket. nobody opens 200 connections and holds them: the first 64 (the
    // default scheduler.max_connections_per_user) stay open, the others are closed at once.
    let mut held = connect_as(&c.socket(), NOBODY, NOBODY, 200);
    wait_until(SECS(10), "136 of nobody's connections closed", || {
        count_closed(&mut held) >= 136
    });
    assert_eq!(count_closed(&mut held), 136, "more than the limit closed");
    // nobody's next connections are refused, with a message that says what to look at.
    for _ in 0..5 {
        let out = c.run_as(NOBODY, NOBODY, "yq", &["--me"]);
        assert!(!out.status.success(), "nobody got past its limit");
        let err = stderr(&out);
        assert!(
            err.contains("closed the connection")
                && err.contains("scheduler.max_connections_per_user"),
            "{err}"
        );
    }
    // Another user is not held up.
    for _ in 0..3 {
        answers_promptly(&c, None, other);
    }
    // The log says what was refused, a few times rather than 137.
    let refused = lines_with(
        &log(&c, "schedd"),
        &[
            "refused a connection of uid 65534: it has 64 open, the limit per user is 64 \
             (scheduler.max_connections_per_user)",
        ],
    );
    assert!((1..=5).contains(&refused), "{refused} lines");

    // The total (100 here): another user takes the 36 left, a third user is refused; root is
    // not counted and gets in.
    let mut second = connect_as(&c.socket(), NAMELESS, NAMELESS, 50);
    wait_until(SECS(10), "14 of the second user's closed", || {
        count_closed(&mut second) >= 14
    });
    assert_eq!(count_closed(&mut second), 14);
    let out = c.run_as(other, other, "yq", &["--me"]);
    assert!(!out.status.success(), "the total limit let a connection in");
    assert!(
        stderr(&out).contains("closed the connection"),
        "{}",
        stderr(&out)
    );
    assert!(log(&c, "schedd").contains(&format!(
        "refused a connection of uid {other}: 100 connections are open, the limit is 100 \
         (scheduler.max_client_connections)"
    )));
    answers_promptly(&c, None, 0);
    // Connections that close give their places back.
    drop(held);
    drop(second);
    wait_until(SECS(10), "nobody served again", || {
        c.run_as(NOBODY, NOBODY, "yq", &["--me"]).status.success()
    });
    answers_promptly(&c, None, other);

    // 2. The node's client socket: the same, with node.max_connections_per_user (64). The
    // other user has a job there (a compute node relays only such users).
    let out = c.run_as(
        other,
        other,
        "ysub",
        &["--parsable", "-G", "1", "--wrap", "sleep 300"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let job: u64 = stdout(&out).trim().parse().unwrap();
    c.wait_state(job, "RUNNING", SECS(10));
    let mut held = connect_as(&c.agent_socket("n1"), NOBODY, NOBODY, 200);
    wait_until(SECS(10), "136 closed on the node's socket", || {
        count_closed(&mut held) >= 136
    });
    assert_eq!(count_closed(&mut held), 136);
    for _ in 0..3 {
        answers_promptly(&c, Some("n1"), other);
    }
    let refused = lines_with(
        &log(&c, "noded-n1"),
        &[
            "refused a connection of uid 65534: it has 64 open, the limit per user is 64 \
             (node.max_connections_per_user)",
        ],
    );
    assert!((1..=5).contains(&refused), "{refused} lines");
    assert_eq!(c.nodes()[0]["state"], "ALLOCATED");
}

/// A TCP connection to `127.0.0.1:port` from the address `source` (any 127.x address is
/// loopback): another host, as far as schedd can tell.
fn tcp_from(source: &str, port: u16) -> TcpStream {
    connect_from(source, port).unwrap_or_else(|e| panic!("connect from {source}: {e}"))
}

/// Connects from `source:0` to `127.0.0.1:port` (std cannot bind before connecting).
fn connect_from(source: &str, port: u16) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let source: std::net::Ipv4Addr = source.parse().unwrap();
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, bound and connected with well-formed addresses; on success its
    // descriptor is handed to the TcpStream, which owns it from then on.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let local = sockaddr(source, 0);
        if libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sockaddr(std::net::Ipv4Addr::LOCALHOST, port);
        if libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// A TLS client that trusts the cluster's CA, as an agent does.
fn tls_client(c: &TestCluster) -> Arc<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    let ca = std::fs::read_to_string(c.dir.path().join("cluster-ca.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// A TLS connection that has said HTTP/2's preface and nothing more.
struct QuietTls(rustls::StreamOwned<rustls::ClientConnection, TcpStream>);

impl QuietTls {
    fn open(config: &Arc<rustls::ClientConfig>, source: &str, port: u16) -> QuietTls {
        let name =
            rustls_pki_types::ServerName::try_from(ysched_common::tls::SCHEDD_TLS_NAME).unwrap();
        let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
        let mut stream = rustls::StreamOwned::new(conn, tcp_from(source, port));
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .expect("TLS handshake and HTTP/2 preface");
        stream.flush().unwrap();
        QuietTls(stream)
    }
}

impl Read for QuietTls {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl NonBlocking for QuietTls {
    fn make_nonblocking(&self) {
        self.0.sock.set_nonblocking(true).unwrap();
    }
}

#[test]
fn unauthenticated_agent_connections_are_closed_and_agents_are_unaffected() {
    ysched_common::edge::raise_open_files_limit().unwrap();
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    let job = c.submit(&["-G", "1", "--wrap", "sleep 300"]);
    c.wait_state(job, "RUNNING", SECS(10));

    // 1. From 127.0.0.2, 80 TCP connections that say nothing: 64 (the limit per address of
    // unauthenticated connections) wait for their handshake, 16 are closed at once.
    let mut silent: Vec<TcpStream> = (0..80).map(|_| tcp_from("127.0.0.2", c.port)).collect();
    wait_until(SECS(3), "16 refused at once", || {
        count_closed(&mut silent) >= 16
    });
    assert_eq!(count_closed(&mut silent), 16);
    // 2. From 127.0.0.3, 20 TLS connections with the HTTP/2 preface, and no request.
    let config = tls_client(&c);
    let mut quiet: Vec<QuietTls> = (0..20)
        .map(|_| QuietTls::open(&config, "127.0.0.3", c.port))
        .collect();
    // Meanwhile an agent from another address registers.
    c.start_login_agent("login1");
    wait_until(SECS(10), "the login agent registered", || {
        log(&c, "noded-login1").contains("registered with schedd at")
    });
    // None of them outlives the 5 s schedd gives a connection to authenticate.
    let start = Instant::now();
    wait_until(SECS(15), "every unauthenticated connection closed", || {
        count_closed(&mut silent) == 80 && count_closed(&mut quiet) == 20
    });
    assert!(start.elapsed() < SECS(10), "{:?}", start.elapsed());

    // 3. 2,000 requests with a (wrong) cluster key and no certificate, from 127.0.0.1: all
    // refused.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ca = std::fs::read_to_string(c.dir.path().join("cluster-ca.crt")).unwrap();
    let port = c.port;
    let refused = rt.block_on(async move {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca))
            .domain_name(ysched_common::tls::SCHEDD_TLS_NAME);
        let channel = tonic::transport::Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect_lazy();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let channel = channel.clone();
                tokio::spawn(async move {
                    let mut client = pb::ysched_client::YschedClient::new(channel);
                    let mut refused = 0;
                    for _ in 0..250 {
                        let mut request = tonic::Request::new(pb::ListJobsRequest::default());
                        request
                            .metadata_mut()
                            .insert("authorization", "Bearer wrong".parse().unwrap());
                        match client.list_jobs(request).await {
                            Err(s) if s.code() == tonic::Code::Unauthenticated => refused += 1,
                            // The connection was closed for never authenticating: the
                            // channel opens another. A request caught writing as it closes
                            // fails as a transport error (a broken pipe) instead.
                            Err(s) if s.code() == tonic::Code::Unavailable => {}
                            Err(s)
                                if s.code() == tonic::Code::Unknown
                                    && s.message() == "transport error" => {}
                            other => panic!("a request with a wrong key got {other:?}"),
                        }
                    }
                    refused
                })
            })
            .collect();
        let mut refused = 0;
        for task in tasks {
            refused += task.await.unwrap();
        }
        refused
    });
    assert!(refused >= 1000, "only {refused} refused");

    // A handful of log lines said it all.
    let schedd = log(&c, "schedd");
    for (needles, what) in [
        (
            &[
                "127.0.0.2",
                "have not authenticated yet (the limit per address is 64)",
            ][..],
            "refused over the limit",
        ),
        (
            &["127.0.0.2", "no TLS handshake within 5 s"][..],
            "no handshake",
        ),
        (
            &["127.0.0.3", "no authenticated request within 5 s"][..],
            "no request",
        ),
        (
            &["refused a request from 127.0.0.1", "no host certificate"][..],
            "no certificate",
        ),
    ] {
        let n = lines_with(&schedd, needles);
        assert!((1..=5).contains(&n), "{what}: {n} lines\n{schedd}");
    }
    assert!(
        schedd.contains("further 'no certificate' lines about 127.0.0.1 are suppressed"),
        "{schedd}"
    );
    // The registered agent never noticed.
    session_never_dropped(&c, job);
}

/// Sends `request` as is and returns the whole answer (the server closes the connection).
fn http(port: u16, request: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    s.set_read_timeout(Some(SECS(10))).unwrap();
    s.write_all(request).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("an answer");
    String::from_utf8_lossy(&answer).into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn slow_metrics_clients_do_not_keep_scrapes_out() {
    let port = free_port();
    let _cluster = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, A100)],
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
        "",
    );
    // 40 slowloris clients (more than the 32 places): each sends a request head one header
    // line at a time and never finishes it; one that is closed comes back at once.
    let stop = Arc::new(AtomicBool::new(false));
    let reopened = Arc::new(AtomicUsize::new(0));
    let attackers = {
        let (stop, reopened) = (stop.clone(), reopened.clone());
        std::thread::spawn(move || {
            let open = || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .unwrap();
                s
            };
            let mut slow: Vec<TcpStream> = (0..40).map(|_| open()).collect();
            let deadline = Instant::now() + SECS(60);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                for s in slow.iter_mut() {
                    let alive = count_closed(std::slice::from_mut(s)) == 0
                        && s.write_all(b"X-Slow: 1\r\n").is_ok();
                    if !alive {
                        *s = open();
                        reopened.fetch_add(1, Ordering::SeqCst);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // They fill every place and take them from each other.
    wait_until(SECS(10), "the slow clients hold every place", || {
        reopened.load(Ordering::SeqCst) >= 8
    });
    let before = reopened.load(Ordering::SeqCst);
    // Every scrape is answered, in full, all along.
    for i in 0..30 {
        std::thread::sleep(Duration::from_millis(50));
        let answer = http(
            port,
            b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n",
        );
        assert!(
            answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.contains("\nysched_node_up{"),
            "scrape {i}: {answer:?}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    attackers.join().unwrap();
    // The scrapes took their places from slow clients.
    assert!(reopened.load(Ordering::SeqCst) > before);
}

#[test]
fn a_refusal_echoing_a_huge_input_through_a_node_does_not_end_its_session() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, A100)]);
    // nobody's job on n1: what lets n1 relay nobody's requests.
    let out = c.run_as(
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "-G", "1", "--wrap", "sleep 300"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let job: u64 = stdout(&out).trim().parse().unwrap();
    c.wait_state(job, "RUNNING", SECS(10));
    let account = "z".repeat(60_000);

    // nobody on node n1 submits with a 60,000-character account, over and over.
    for _ in 0..5 {
        let out = c.run_on(
            Some("n1"),
            NOBODY,
            NOBODY,
            "ysub",
            &["-A", &account, "--wrap", "true"],
        );
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(
            err.len() < 1200 && err.contains("account") && !err.contains("protocol error"),
            "{} bytes: {}",
            err.len(),
            &err[..err.len().min(400)]
        );
    }
    // A client without ysub's checks: the request reaches schedd, through the node, and the
    // refusal that comes back is short and says what is wrong.
    // As nobody: root relayed from a compute node may not submit at all.
    let work = c.work.display().to_string();
    let huge = account.clone();
    call_as(
        &c.agent_socket("n1"),
        NOBODY,
        NOBODY,
        |mut client| async move {
            let account = huge;
            for _ in 0..20 {
                let spec = pb::JobSpec {
                    name: "huge-account".into(),
                    account: account.clone(),
                    script: "#!/bin/sh\ntrue\n".into(),
                    workdir: work.clone(),
                    ..Default::default()
                };
                let status = client
                    .submit(pb::SubmitRequest { spec: Some(spec) })
                    .await
                    .unwrap_err();
                assert!(
                    matches!(
                        status.code(),
                        tonic::Code::PermissionDenied | tonic::Code::InvalidArgument
                    ),
                    "{:?}: {}",
                    status.code(),
                    &status.message()[..status.message().len().min(400)]
                );
                assert!(status.message().len() <= 1024, "{}", status.message().len());
                assert!(status.message().contains("account"), "{}", status.message());
            }
        },
    );
    // A large request (a 3 MiB script) relayed meanwhile goes through too.
    let body = format!("#!/bin/sh\n# {}\ntrue\n", "x".repeat(3 << 20));
    let big = c.script("big.sh", &body);
    let out = c.run_on(
        Some("n1"),
        NOBODY,
        NOBODY,
        "ysub",
        &["--parsable", "--hold", big.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let held: u64 = stdout(&out).trim().parse().unwrap();
    assert_eq!(c.job(held)["state"], "HELD");

    session_never_dropped(&c, job);
}

/// A client request on the agent port (`yctl shares`, which looks at who asks) that names
/// `node`'s caller (root, as its agent would name it) with `token`, and the cluster key.
fn relayed_shares(key: &str, node: &str, token: &[u8]) -> tonic::Request<pb::SharesRequest> {
    use prost::Message as _;
    let caller = pb::RelayedCaller {
        node: node.into(),
        uid: 0,
        gid: 0,
        user: "root".into(),
        groups: vec!["root".into()],
        home: "/root".into(),
        relay_token: token.to_vec(),
        forwarded_by_replica: 0,
        job_id: 0,
    };
    let mut request = tonic::Request::new(pb::SharesRequest::default());
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    request.metadata_mut().insert_bin(
        ysched_common::identity::RELAYED_CALLER_METADATA,
        tonic::metadata::MetadataValue::from_bytes(&caller.encode_to_vec()),
    );
    request
}

/// Relayed requests travel on connections of their own, so schedd believes a relayed caller
/// only with the relay token of the named node's live session: a holder of the cluster key
/// (here a login agent of the test's own) speaks for its own node, never for another, and not
/// with a guessed token or once its session is over.
#[test]
fn a_relayed_caller_is_believed_only_with_its_own_sessions_token() {
    use tokio_stream::StreamExt as _;
    let c = TestCluster::start_with_cluster_key(vec![FakeNode::uniform("n1", 1, A100)]);
    let key = std::fs::read_to_string(c.dir.path().join("cluster.key"))
        .unwrap()
        .trim()
        .to_string();
    let ca = std::fs::read_to_string(c.dir.path().join("cluster-ca.crt")).unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("https://127.0.0.1:{}", c.port))
        .unwrap()
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca))
                .domain_name(ysched_common::tls::SCHEDD_TLS_NAME),
        )
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // A login agent's session, "spy": its Registered carries its token.
        let (out, outgoing) = tokio::sync::mpsc::channel(4);
        out.send(pb::AgentMessage {
            msg: Some(pb::agent_message::Msg::Register(pb::Register {
                name: "spy".into(),
                role: ysched_common::config::ROLE_LOGIN.into(),
                version: "test".into(),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
        let mut request =
            tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(outgoing));
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        let session_channel = endpoint.connect().await.unwrap();
        let mut inbound = pb::node_agent_client::NodeAgentClient::new(session_channel)
            .session(request)
            .await
            .expect("session")
            .into_inner();
        let token = match inbound.next().await.unwrap().unwrap().msg {
            Some(pb::scheduler_message::Msg::Registered(r)) => r.relay_token,
            other => panic!("expected Registered, got {other:?}"),
        };
        assert_eq!(token.len(), 32, "a 32-byte random token");

        // On a connection of its own: its own node with its token is believed...
        let mut relay = pb::ysched_client::YschedClient::new(endpoint.connect().await.unwrap());
        relay
            .shares(relayed_shares(&key, "spy", &token))
            .await
            .expect("spy's own relayed request");
        // ...another node's name is not, with spy's token, none, or a guessed one.
        for (node, token) in [
            ("n1", token.clone()),
            ("n1", Vec::new()),
            ("n1", vec![0u8; 32]),
            ("spy", vec![7u8; 32]),
        ] {
            let status = relay
                .shares(relayed_shares(&key, node, &token))
                .await
                .unwrap_err();
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
            assert!(
                status.message().contains("relay token"),
                "{}",
                status.message()
            );
        }
        // The session ends: its token is worth nothing any more.
        drop(out);
        drop(inbound);
        let deadline = Instant::now() + SECS(10);
        loop {
            match relay.shares(relayed_shares(&key, "spy", &token)).await {
                Err(s) if s.code() == tonic::Code::PermissionDenied => break,
                other => assert!(
                    Instant::now() < deadline,
                    "the ended session's token still works: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let refused = lines_with(
        &log(&c, "schedd"),
        &["refused a client request relayed from 127.0.0.1"],
    );
    assert!((1..=5).contains(&refused), "{refused} lines");
}
