//! The client socket: requests relayed to schedd on a connection of their own with the
//! session's relay token, with the caller the kernel names; refused without a session; and
//! nothing a relayed request does ends the session.

mod support;

use nix::unistd::{getgid, getuid, Group, User};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;
use support::fake_schedd::*;
use tokio_stream::StreamExt;
use ysched_noded::agent::Agent;
use ysched_noded::launch::{Launcher, LauncherOptions};
use ysched_noded::relay::{bind_client_socket, serve, Relay, RelayConfig};
use ysched_proto as pb;

/// Waits (at most 10 s) until a request through the socket gets past the relay (anything
/// but UNAVAILABLE), or until it is refused as UNAVAILABLE when `available` is false.
async fn wait_for_relay(socket: &std::path::Path, available: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut client = unix_client(socket).await;
        let result = client
            .hold(pb::JobRef {
                job_id: 1,
                target: String::new(),
            })
            .await;
        let unavailable = matches!(&result, Err(s) if s.code() == tonic::Code::Unavailable);
        if unavailable != available {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "relay never became {}: {result:?}",
            if available {
                "available"
            } else {
                "unavailable"
            }
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_requests_reach_schedd_with_the_session_token_as_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut schedd = Schedd::start().await;
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(dir.path().join("spool"), "n1")
    })
    .unwrap();
    let agent = Agent::new(schedd.agent_config(), launcher, events).unwrap();
    let socket = dir.path().join("run/noded.sock");
    let listener = bind_client_socket(&socket).unwrap();
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o666);
    let relay = Relay::new(
        RelayConfig {
            node: "n1".into(),
            schedd: schedd.address(),
            cluster_key: Some(KEY.into()),
            jobs: None,
            max_connections_per_user: 64,
            max_client_connections: 1024,
        },
        agent.session_slot(),
    )
    .unwrap();
    let relay_task = tokio::spawn(serve(listener, relay));

    // No session yet: refused, saying why.
    let mut client = unix_client(&socket).await;
    let status = client
        .submit(pb::SubmitRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(
        status.message(),
        format!(
            "node n1 is not connected to schedd at {}; retry shortly",
            schedd.address()
        )
    );

    let agent = tokio::spawn(agent.run());
    let mut session = schedd.next_session().await;
    session.register(vec![]).await;
    wait_for_relay(&socket, true).await;
    while schedd.calls.try_recv().is_ok() {}

    // A client naming itself someone else in the metadata is not believed (nor passed on).
    let mut request = tonic::Request::new(pb::SubmitRequest::default());
    let forged = pb::RelayedCaller {
        node: "n1".into(),
        uid: 4321,
        user: "mallory".into(),
        ..Default::default()
    };
    request.metadata_mut().insert_bin(
        "ysched-caller-bin",
        tonic::metadata::MetadataValue::from_bytes(&prost::Message::encode_to_vec(&forged)),
    );
    request
        .metadata_mut()
        .insert("x-spoofed", "yes".parse().unwrap());
    let reply = client.submit(request).await.expect("relayed submit");
    assert_eq!(reply.into_inner().job_id, 4242);

    let call = schedd.next_call().await;
    assert_eq!(call.method, "submit");
    assert_eq!(call.authorization.as_deref(), Some("Bearer sekrit"));
    assert_eq!(call.caller_values, 1);
    assert_eq!(call.spoofed, None);
    assert!(call.remote.is_some());
    assert_ne!(
        call.remote, session.remote,
        "relayed on a connection of its own, not the session's"
    );
    let caller = call.caller.expect("ysched-caller-bin");
    assert_eq!(caller.relay_token, RELAY_TOKEN);
    let me = User::from_uid(getuid()).unwrap().unwrap();
    let primary = Group::from_gid(getgid()).unwrap().unwrap();
    assert_eq!(caller.node, "n1");
    assert_eq!(
        (caller.uid, caller.gid),
        (getuid().as_raw(), getgid().as_raw())
    );
    assert_eq!(caller.user, me.name);
    assert_eq!(caller.groups.first(), Some(&primary.name));
    assert_eq!(caller.home, me.dir.to_string_lossy());

    // schedd's refusals come back as they are.
    let status = client
        .get_job(pb::JobRef {
            job_id: 5,
            target: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert_eq!(status.message(), NOT_FOUND_MESSAGE);
    // A stream is relayed as one.
    let states: Vec<String> = client
        .watch_job(pb::JobRef {
            job_id: 8,
            target: String::new(),
        })
        .await
        .expect("relayed watch")
        .into_inner()
        .map(|info| info.expect("stream item").name)
        .collect()
        .await;
    assert_eq!(states, ["RUNNING", "COMPLETED"]);

    // The session ends: refused again until the next one is registered, whose token the
    // requests then carry, on a new connection.
    drop(session);
    let mut session = schedd.next_session().await;
    wait_for_relay(&socket, false).await;
    session.register(vec![]).await;
    wait_for_relay(&socket, true).await;
    while schedd.calls.try_recv().is_ok() {}
    client
        .submit(pb::SubmitRequest::default())
        .await
        .expect("relayed again");
    let call = schedd.next_call().await;
    assert_ne!(call.remote, session.remote);
    assert_eq!(call.caller.unwrap().relay_token, RELAY_TOKEN);

    agent.abort();
    relay_task.abort();
}

/// An answer that breaks HTTP/2's limits (an error message of 120,000 bytes, over four times
/// the 16 KiB a header list may have, which h2 answers by closing the whole connection) fails
/// its own connection only: the relayed request gets an error, the session carries on (same
/// session, heartbeats flowing) and the next request is relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_answer_too_large_for_http2_does_not_end_the_session() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut schedd = Schedd::start().await;
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        supervisor_program: PathBuf::from(env!("CARGO_BIN_EXE_noded")),
        ..LauncherOptions::new(dir.path().join("spool"), "n1")
    })
    .unwrap();
    let agent = Agent::new(schedd.agent_config(), launcher, events).unwrap();
    let socket = dir.path().join("noded.sock");
    let relay = Relay::new(
        RelayConfig {
            node: "n1".into(),
            schedd: schedd.address(),
            cluster_key: Some(KEY.into()),
            jobs: None,
            max_connections_per_user: 64,
            max_client_connections: 1024,
        },
        agent.session_slot(),
    )
    .unwrap();
    let relay_task = tokio::spawn(serve(bind_client_socket(&socket).unwrap(), relay));
    let agent = tokio::spawn(agent.run());
    let mut session = schedd.next_session().await;
    session.register(vec![]).await;
    wait_for_relay(&socket, true).await;

    for _ in 0..3 {
        let mut client = unix_client(&socket).await;
        let status = client
            .get_job(pb::JobRef {
                job_id: HUGE_ERROR_JOB,
                target: String::new(),
            })
            .await
            .unwrap_err();
        // Whatever the hop made of it, the client gets a short message.
        assert!(status.message().len() <= 1024, "{}", status.message().len());
        // The session is the same one, and alive: heartbeats keep coming on it.
        session.next_heartbeat().await;
        let status = client
            .get_job(pb::JobRef {
                job_id: 5,
                target: String::new(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.message(), NOT_FOUND_MESSAGE);
    }
    assert!(
        schedd.sessions.try_recv().is_err(),
        "the agent opened a new session"
    );
    agent.abort();
    relay_task.abort();
}

#[tokio::test]
async fn the_client_socket_is_not_taken_from_a_live_listener_but_replaces_a_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("noded.sock");
    // A socket file nobody listens on any more (a noded killed with -9).
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let listener = bind_client_socket(&socket).expect("a stale socket is replaced");
    let err = bind_client_socket(&socket).unwrap_err().to_string();
    assert!(err.contains("already listening"), "{err}");
    assert!(err.contains(&socket.display().to_string()), "{err}");
    drop(listener);
}
