//! End-to-end tests for the hostile-test findings on the scheduler side: the agent link's
//! TLS, launches that cannot reach a node, lost cancels, duplicate node names, a full state
//! disk, consistent listings, and GPUs reused only after their old processes are gone.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_rustls::rustls;
use ysched_tests::{wait_until, FakeNode, TestCluster};

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
                    s.set_read_timeout(Some(Duration::from_millis(500)))
                        .unwrap();
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
    // An upgraded cluster's agent: it holds the shared cluster key beside its certificate.
    let mut c = TestCluster::start_with_cluster_key(vec![FakeNode::uniform("n1", 2, "A100")]);
    let key = cluster_key(&c);
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);

    // 1. A plaintext gRPC server on the port: the agent's TLS handshake fails at once.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = plaintext_squatter(squat(c.port), stop.clone());
    wait_log(&c, "noded-n1", "it does not speak TLS");
    // The real schedd cannot start meanwhile, and says why and what to do.
    let out = std::process::Command::new(ysched_tests::bin_dir().join("schedd"))
        .env("YSCHED_CONF", &c.conf)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another process holds the agent port"),
        "{err}"
    );
    stop.store(true, Ordering::SeqCst);
    let bytes = seen.lock().unwrap().clone();
    assert!(!bytes.is_empty(), "the agent never tried the squatter");
    assert_eq!(
        bytes[0], 0x16,
        "the agent's first byte is not a TLS handshake"
    );
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        !text.contains(&key),
        "the cluster key reached the plaintext squatter"
    );
    assert!(
        !text.contains("authorization"),
        "a gRPC request reached the squatter"
    );
    assert!(log(&c, "noded-n1").contains("nothing was sent to it"));
    std::thread::sleep(Duration::from_millis(700)); // the squatter thread lets go of the port

    // 2. A TLS server whose certificate comes from another CA.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = wrong_ca_squatter(squat(c.port), stop.clone());
    wait_log(&c, "noded-n1", "not signed by the cluster CA");
    stop.store(true, Ordering::SeqCst);
    let (handshakes, bytes) = seen.lock().unwrap().clone();
    assert_eq!(
        handshakes, 0,
        "the agent completed a handshake with another CA's server"
    );
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
    assert_eq!(
        s.read(&mut buf).unwrap_or(0),
        0,
        "schedd answered a plaintext client"
    );
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
            .add(
                rustls_pki_types::CertificateDer::from_pem_slice(other_ca.cert_pem.as_bytes())
                    .unwrap(),
            )
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let name =
            rustls_pki_types::ServerName::try_from(ysched_common::tls::SCHEDD_TLS_NAME).unwrap();
        connector.connect(name, tcp).await.map(|_| ())
    });
    let err = result.expect_err("a client pinning another CA accepted schedd");
    assert!(
        err.to_string().contains("invalid peer certificate"),
        "{err}"
    );
    wait_log(&c, "schedd", "TLS handshake failed");
    // The real agent is unaffected.
    assert_eq!(c.nodes()[0]["state"], "IDLE");
}

const SECS: fn(u64) -> Duration = Duration::from_secs;

fn state(c: &TestCluster, id: u64) -> String {
    c.job(id)["state"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_script_just_under_the_limit_runs_and_one_over_is_refused_with_the_limit() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 1, "A100")]);
    // 4 MiB is the default limit: a script just under it must reach the node and run (the
    // message limits on every link are above it), with an environment of 1 MiB besides.
    let filler = "# ".to_string() + &"x".repeat(1021) + "\n";
    let body = format!(
        "#!/bin/sh\n{}echo ran > {}\n",
        filler.repeat(4 * 1024 - 2),
        c.path("big.out").display()
    );
    assert!(body.len() < 4 << 20 && body.len() > (4 << 20) - 4096);
    let script = c.script("big.sh", &body);
    let out = std::process::Command::new(ysched_tests::bin_dir().join("ysub"))
        .env("YSCHED_CONF", &c.conf)
        .env("BIG_ENV", "y".repeat(100_000))
        .args(["--parsable", "--export=ALL"])
        .arg(&script)
        .current_dir(&c.work)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    c.wait_state(id, "COMPLETED", SECS(30));
    assert_eq!(std::fs::read_to_string(c.path("big.out")).unwrap(), "ran\n");

    let over = c.script(
        "over.sh",
        &format!("#!/bin/sh\n{}", filler.repeat(4 * 1024 + 1)),
    );
    let out = c.run("ysub", &[over.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = ysched_tests::stderr(&out);
    assert!(
        err.contains("script is 4.1 MiB; the limit is 4 MiB"),
        "{err}"
    );
    assert_eq!(c.jobs().len(), 1, "the refused script was queued");
}

/// The launch is sent to an agent that is frozen (it never reads it), then the job is
/// cancelled, then the agent is killed and comes back without the job.
#[test]
fn a_cancel_is_never_lost_whatever_became_of_the_launch() {
    use nix::sys::signal::Signal::{SIGKILL, SIGSTOP};
    let mut c = TestCluster::start(vec![FakeNode::uniform("n1", 1, "A100")]);
    c.signal_agent("n1", SIGSTOP);
    let marker = c.path("ran");
    let id = c.submit(&[
        "-G",
        "1",
        "--wrap",
        &format!("touch {}; sleep 30", marker.display()),
    ]);
    c.wait_state(id, "RUNNING", SECS(10));
    let out = c.run("ycancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", ysched_tests::stderr(&out));
    c.stop_agent("n1", SIGKILL);
    c.start_agent("n1");
    let job = c.wait_state(id, "CANCELLED", SECS(20));
    assert!(
        job["reason"].as_str().unwrap().contains("cancelled by"),
        "{job}"
    );
    // It stays cancelled once the restarted agent has registered and said what it runs:
    // never requeued, never started.
    c.wait_nodes_up(1);
    assert_eq!(state(&c, id), "CANCELLED");
    assert!(!marker.exists(), "the cancelled job ran");
}

#[test]
fn a_launch_that_never_reaches_its_agent_ends_failed_instead_of_cycling() {
    use nix::sys::signal::Signal::{SIGKILL, SIGSTOP};
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, "A100")],
        "max_launch_attempts = 1",
        "",
    );
    c.signal_agent("n1", SIGSTOP);
    let id = c.submit(&["-G", "1", "--wrap", "sleep 30"]);
    c.wait_state(id, "RUNNING", SECS(10));
    c.stop_agent("n1", SIGKILL);
    c.start_agent("n1");
    let job = c.wait_state(id, "FAILED", SECS(20));
    let reason = job["reason"].as_str().unwrap();
    assert!(
        reason.contains("was not confirmed by its agent (1 of 1 attempts"),
        "{reason}"
    );
}

#[test]
fn a_second_agent_with_a_taken_name_is_refused_and_the_first_keeps_its_jobs() {
    // The impostor holds the cluster key (a cluster that still takes it), no certificate.
    let c = TestCluster::start_with_cluster_key(vec![FakeNode::uniform("n1", 1, "A100")]);
    let id = c.submit(&["-G", "1", "--wrap", "sleep 30"]);
    c.wait_state(id, "RUNNING", SECS(10));
    let mut impostor = c.spawn_impostor_agent("n1");
    wait_log(&c, "schedd", "node name 'n1' is already in use");
    wait_log(&c, "noded-n1-dup", "refused this agent");
    std::thread::sleep(SECS(3));
    let _ = impostor.kill();
    let _ = impostor.wait();
    assert_eq!(state(&c, id), "RUNNING", "{}", c.logs());
    assert!(!log(&c, "schedd").contains("node_fail"));
    let nodes = c.nodes();
    assert_eq!(nodes[0]["state"], "ALLOCATED", "{nodes:?}");
    // The first agent still runs the node: a new job there still starts and ends.
    let out = c.run("ycancel", &[&id.to_string()]);
    assert!(out.status.success());
    c.wait_state(id, "CANCELLED", SECS(10));
    let id2 = c.submit(&["-G", "1", "--wrap", "true"]);
    c.wait_state(id2, "COMPLETED", SECS(10));
}

/// The supervisor of this cluster's node `node` (which supervises its jobs), found by its
/// command line (`noded __supervisor <spool>`; other tests' clusters have their own).
pub(crate) fn supervisor_pid(c: &TestCluster, node: &str) -> Option<i32> {
    let spool = c.dir.path().join("spool").join(node).canonicalize().ok()?;
    let spool = spool.to_string_lossy().into_owned();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.get(1).is_some_and(|a| a == "__supervisor") && args.get(2) == Some(&spool) {
            return Some(pid);
        }
    }
    None
}

#[test]
fn gpus_of_killed_leftovers_are_reused_only_once_the_processes_are_gone() {
    use nix::sys::signal::Signal::{SIGCONT, SIGKILL, SIGSTOP};
    // Without fencing: the job is failed, not requeued, and goes on as a leftover.
    let mut c = TestCluster::start_with_config(
        vec![FakeNode::uniform("n1", 1, "A100")],
        "fence_after_secs = 0",
    )
    .with_node_timeout(2);
    let a = c.submit(&["-G", "1", "--wrap", "sleep 60"]);
    c.wait_state(a, "RUNNING", SECS(10));
    wait_until(SECS(10), "job started", || c.job(a)["reason"] == "");
    std::thread::sleep(Duration::from_millis(500));
    // The agent dies; its job goes on under the node's supervisor; schedd fails it after the
    // timeout.
    c.stop_agent("n1", SIGKILL);
    c.wait_state(a, "NODE_FAIL", SECS(20));
    let b = c.submit(&["-G", "1", "--wrap", "true"]);
    // The supervisor is frozen, so the leftover's end cannot be reported when it is killed.
    let supervisor = supervisor_pid(&c, "n1").expect("supervisor of the leftover job");
    let supervisor = nix::unistd::Pid::from_raw(supervisor);
    nix::sys::signal::kill(supervisor, SIGSTOP).unwrap();
    c.start_agent("n1");
    wait_log(&c, "schedd", "agent still runs jobs");
    // A pass after the agent's return leaves b waiting for the leftover's processes.
    wait_until(SECS(15), "b waiting for the leftover's processes", || {
        assert_eq!(
            state(&c, b),
            "PENDING",
            "a job started on GPUs whose previous processes were not confirmed gone\n{}",
            c.logs()
        );
        let detail = c.run("yctl", &["show", "job", &b.to_string()]);
        ysched_tests::stdout(&detail).contains("killing leftover processes")
    });
    nix::sys::signal::kill(supervisor, SIGCONT).unwrap();
    c.wait_state(b, "COMPLETED", SECS(20));
    let out = c.run("yctl", &["show", "job", &a.to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "leftover_gone"),
        "{v}"
    );
}

#[test]
fn every_listing_shows_every_job_exactly_once_while_jobs_end() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 0, "A100")]);
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(c.submit(&["-c", "1", "--wrap", "sleep 60"]));
    }
    for _ in 0..150 {
        ids.push(c.submit(&["-c", "1", "--hold", "--wrap", "true"]));
    }
    for id in &ids[..40] {
        c.wait_state(*id, "RUNNING", SECS(20));
    }
    let running: Vec<u64> = ids[..40].to_vec();
    let conf = c.conf.clone();
    let canceller = std::thread::spawn(move || {
        for id in running {
            let out = std::process::Command::new(ysched_tests::bin_dir().join("ycancel"))
                .env("YSCHED_CONF", &conf)
                .arg(id.to_string())
                .output()
                .unwrap();
            assert!(out.status.success());
            std::thread::sleep(Duration::from_millis(30));
        }
    });
    let mut listings = 0;
    while !canceller.is_finished() || listings < 20 {
        let mut seen: Vec<u64> = c.jobs().iter().map(|j| j["id"].as_u64().unwrap()).collect();
        seen.sort();
        assert_eq!(seen, ids, "a listing lost or repeated a job");
        listings += 1;
    }
    canceller.join().unwrap();
    assert!(listings >= 20);
    // `yq -j` finds active and finished jobs by id, and says nothing of unknown ones.
    let out = c.run("yq", &["--json", "-j", &format!("{},{}", ids[0], ids[100])]);
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let states: Vec<&str> = v.iter().map(|j| j["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["CANCELLED", "HELD"]);
}

#[test]
fn a_full_state_disk_refuses_requests_cleanly_and_recovers_when_space_is_back() {
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 1, "A100")],
        "state_reserve_mib = 16",
        "",
    );
    // Move the state onto a small file system of its own.
    let _mounted = c.move_state_to_tmpfs("64m");
    let state_dir = c.dir.path().join("state");
    let pid = c.schedd_pid();

    let running = c.submit(&["-G", "1", "--wrap", "sleep 4"]);
    let held = c.submit(&["--hold", "--wrap", "true"]);
    c.wait_state(running, "RUNNING", SECS(10));
    std::thread::sleep(SECS(1));
    let filler = ysched_tests::fill(&state_dir);

    let out = c.run("ysub", &["--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = ysched_tests::stderr(&out);
    assert!(err.contains("state store full"), "{err}");
    assert!(!err.contains("Os {"), "{err}");
    let out = c.run("ycancel", &[&held.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(ysched_tests::stderr(&out).contains("state store full"));
    assert_eq!(state(&c, held), "HELD", "a refused cancel changed the job");
    // The running job ends while its end cannot be written: it must not vanish.
    std::thread::sleep(SECS(5));
    let ids: Vec<u64> = c.jobs().iter().map(|j| j["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [running, held]);

    // Space is back: everything resumes without a restart.
    std::fs::remove_file(filler).unwrap();
    c.wait_state(running, "COMPLETED", SECS(30));
    let out = c.run("ycancel", &[&held.to_string()]);
    assert!(out.status.success(), "{}", ysched_tests::stderr(&out));
    c.wait_state(held, "CANCELLED", SECS(10));
    let id = c.submit(&["--wrap", "true"]);
    c.wait_state(id, "COMPLETED", SECS(20));
    assert_eq!(c.schedd_pid(), pid);
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid.unwrap() as i32), None).is_ok(),
        "schedd restarted"
    );
    assert_eq!(id, held + 1, "a refused submit used up a job id");
}
