//! A store that refuses writes: every converted event is refused with a clear error and
//! changes nothing, in memory or in what agents are told; once writes work again, the same
//! requests succeed. The real `Cluster`, a real sled store on disk, no network.

use std::time::Duration;
use ysched_common::{Caller, Config, Owner};
use ysched_proto as pb;
use ysched_schedd::error::ApiError;
use ysched_schedd::shell::{Cluster, JobFilter};
use ysched_schedd::state::agent_events::Registration;
use ysched_schedd::store::Store;
use ysched_schedd::submit::ValidSubmit;

fn alice() -> Caller {
    Caller::local(Owner {
        uid: 1000,
        gid: 1000,
        user: "alice".into(),
        groups: vec!["alice".into()],
    })
}

fn root() -> Caller {
    Caller::local(Owner {
        uid: 0,
        gid: 0,
        user: "root".into(),
        groups: vec![],
    })
}

fn states(c: &Cluster) -> Vec<(u64, String)> {
    let filter = JobFilter {
        all: true,
        ..Default::default()
    };
    c.list_jobs(&filter, |j| (j.id.0, j.state.to_string()))
        .unwrap()
}

/// A submit as the client API checks it first.
fn checked(spec: pb::JobSpec) -> ValidSubmit {
    ysched_schedd::submit::validate(spec.into(), &alice(), &Config::default()).unwrap()
}

fn refused<T: std::fmt::Debug>(result: Result<T, ApiError>) {
    match result {
        Err(ApiError::Unavailable(m)) => assert!(m.contains("state store unwritable"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_changes_nothing_and_the_next_one_works() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let cluster = Cluster::start(Config::default(), store).unwrap();
    let (tx, mut agent) = tokio::sync::mpsc::unbounded_channel();
    let register = Registration {
        name: "n1".into(),
        cpus: 4,
        mem_mib: 1024,
        ..Default::default()
    };
    cluster
        .register_node(register, "test", tx, None)
        .await
        .unwrap();
    let held_spec = pb::JobSpec {
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: "/tmp".into(),
        cpus: 1,
        hold: true,
        ..Default::default()
    };
    let held = cluster
        .submit(alice(), None, checked(held_spec.clone()))
        .await
        .unwrap();
    let other = cluster
        .submit(alice(), None, checked(held_spec))
        .await
        .unwrap();
    let before = states(&cluster);
    assert_eq!(before.len(), 2);
    while agent.try_recv().is_ok() {}

    cluster.store().fail_writes(true);
    refused(cluster.cancel(&alice(), &[held.0], "").await);
    refused(cluster.hold(&alice(), held, false).await);
    refused(
        cluster
            .drain(&root(), "n1", Some("maintenance".into()))
            .await,
    );
    let spec = pb::JobSpec {
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: "/tmp".into(),
        cpus: 1,
        ..Default::default()
    };
    refused(cluster.submit(alice(), None, checked(spec.clone())).await);

    // Bad input is still refused for what it is, not for the store.
    assert!(matches!(
        cluster.cancel(&alice(), &[999], "").await,
        Err(ApiError::NotFound(_))
    ));
    tokio::time::sleep(Duration::from_millis(1200)).await; // a scheduling pass or two
    assert_eq!(states(&cluster), before, "a refused write changed memory");
    assert_eq!(cluster.list_nodes(&root())[0].node.drain_reason, None);
    assert!(
        agent.try_recv().is_err(),
        "an agent was told about a refused change"
    );

    cluster.store().fail_writes(false);
    assert_eq!(
        cluster.cancel(&alice(), &[held.0], "").await.unwrap(),
        [held]
    );
    cluster.hold(&alice(), other, false).await.unwrap();
    cluster
        .drain(&root(), "n1", Some("maintenance".into()))
        .await
        .unwrap();
    // The refused submit used up no id.
    let next = cluster.submit(alice(), None, checked(spec)).await.unwrap();
    assert_eq!(next.0, other.0 + 1);
    let after = states(&cluster);
    assert_eq!(after[0], (held.0, "CANCELLED".to_string()));
    assert_ne!(after[1].1, "HELD");
    assert_eq!(
        cluster.list_nodes(&root())[0].node.drain_reason.as_deref(),
        Some("maintenance")
    );
}
