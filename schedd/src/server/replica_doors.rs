//! What only a replica of `scheduler.replicas` serves, and how it follows its Raft role:
//! its replication service and `ClusterStatus` always; the leader's services once it leads
//! (a follower forwards its client socket's requests and tells agents where the leader is);
//! a replica whose store was empty finds out first whether it may vote (`empty_start`); and
//! the first replica forms a new cluster.

use super::{
    cluster_status, empty_start, forward, leading, metrics_http, replication, serve_listeners,
    Doors, Leader, ReplicaDoors,
};
use crate::shell::Cluster;
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use ysched_proto as pb;

/// Serves as replica `place` of `scheduler.replicas` over `store`: always the replication
/// service and `ClusterStatus`; clients and agents only while this replica leads (otherwise
/// its client socket's requests are forwarded to the leader, and agents and relayed requests
/// are told where the leader is). A replica that becomes the leader loads the state from its
/// store (every committed change is in it) and starts scheduling; one that loses the lead
/// steps down and follows (see [`lead_when_elected`]).
pub async fn serve_replica(
    config: ysched_common::Config,
    store: crate::store::Store,
    place: u64,
    mut doors: Doors,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use crate::replica::{Replica, Timing};
    let members: std::collections::BTreeMap<u64, String> = config
        .scheduler
        .replicas
        .iter()
        .enumerate()
        .map(|(i, addr)| (i as u64 + 1, addr.clone()))
        .collect();
    let ca = Arc::clone(&doors.ca);
    let ca_pem = &ca.cert_pem;
    // Its own certificate, issued now with the CA key: the other replicas take Raft's
    // messages only from a replica's.
    let own = ca.issue_replica(place, ysched_common::time::now_ms() / 1000)?;
    let key = doors.key.as_deref();
    let link = Arc::new(replication::GrpcLink::new(
        place,
        key,
        ca_pem,
        &own,
        config.max_message_bytes(),
    )?);
    let raft_link: Arc<dyn crate::replica::network::Link> = link.clone();
    // As a follower it keeps warm what leading needs, so that once elected it serves at once.
    let replica = Replica::start_keeping_warm(
        place,
        store.clone(),
        raft_link,
        Timing::default(),
        crate::shell::usage_half_life_ms(&config),
    )
    .await?;
    let forward_token = forward::ForwardToken::from_ca_key(&ca.key_pem());
    let forwarder = forward::Forwarder::new(place, forward_token.clone(), key, ca_pem, &own)?;
    // A replica whose store is empty finds out whether it may vote; the cluster is formed
    // once, by the first replica, when none has a membership yet.
    let forming = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if replica.voting.state() == crate::replica::Voting::Undecided {
        tokio::spawn(start_empty(
            replica.clone(),
            Arc::clone(&link),
            members.clone(),
            Arc::clone(&forming),
        ));
    }
    let replication_service = pb::replication_server::ReplicationServer::new(
        replication::ReplicationApi::new(replica.clone()),
    )
    .max_decoding_message_size(config.max_message_bytes())
    .max_encoding_message_size(config.max_message_bytes());
    let (leader_tx, serving) = tokio::sync::watch::channel(leading::Serving::Elsewhere(
        where_the_leader_is(place, None, &members),
    ));
    let view = Arc::new(cluster_status::ClusterView {
        replica: replica.clone(),
        link,
        members: members.clone(),
    });
    let stop = CancellationToken::new();
    // The metrics endpoint answers from the start, with the leading cluster's metrics while
    // this replica leads.
    let (leading_tx, leading_rx) = tokio::sync::watch::channel(None);
    if let Some(listener) = doors.metrics.take() {
        let metrics_of: metrics_http::MetricsOf = Arc::new(move || leading_rx.borrow().clone());
        tokio::spawn(metrics_http::serve(
            listener,
            metrics_of,
            stop.clone().cancelled_owned(),
        ));
    }
    let leading = tokio::spawn(lead_when_elected(
        Electable {
            config: config.clone(),
            store,
            replica: replica.clone(),
            members,
            forwarded: forward_token,
            ca: Arc::clone(&ca),
            forming,
        },
        leader_tx,
        leading_tx,
    ));
    let replica_doors = ReplicaDoors {
        replication: replication_service,
        view,
        forwarder: Arc::new(forwarder),
    };
    let served =
        serve_listeners(&config, serving, Some(replica_doors), doors, stop, shutdown).await;
    leading.abort();
    replica.shutdown().await;
    served
}

/// Whether a replica may serve as the leader, as far as forming the cluster goes: while it
/// forms it, once a majority of the `configured` replicas vote (until then it leads alone,
/// and what it acknowledged would live on one disk).
fn formed_enough(
    forming: &std::sync::atomic::AtomicBool,
    metrics: &openraft::RaftMetrics<u64, openraft::BasicNode>,
    configured: usize,
) -> bool {
    !forming.load(std::sync::atomic::Ordering::Acquire)
        || metrics.membership_config.membership().voter_ids().count() > configured / 2
}

/// A replica whose store was empty at start: it votes in a new cluster (the first replica
/// forms it), joins an existing one without voting, or, still counted a voter there, exits
/// (status 78) with what to do (see `empty_start`).
async fn start_empty(
    replica: crate::replica::Replica,
    link: Arc<replication::GrpcLink>,
    members: std::collections::BTreeMap<u64, String>,
    forming: Arc<std::sync::atomic::AtomicBool>,
) {
    match empty_start::decide(&link, replica.id, &members).await {
        empty_start::Decision::New => {
            replica.voting.formed();
            if replica.id != 1 {
                return;
            }
            forming.store(true, std::sync::atomic::Ordering::Release);
            let addr = members.get(&1).cloned().unwrap_or_default();
            if let Err(e) = replica.form_alone(&addr).await {
                tracing::error!("cannot form the cluster: {e}");
                return;
            }
            tracing::info!("formed a new cluster; the other replicas join as they catch up");
            replica.complete_formation(&members).await;
            forming.store(false, std::sync::atomic::Ordering::Release);
        }
        empty_start::Decision::Join { after } => {
            if let Err(e) = replica.voting.joined(after).await {
                tracing::error!("cannot record that replica {} joins: {e}", replica.id);
                std::process::exit(75);
            }
            tracing::warn!(
                "replica {} joins the cluster with an empty store: it takes the log and votes \
                 only once promoted (`yctl cluster promote {}`)",
                replica.id,
                replica.id
            );
        }
        empty_start::Decision::Refuse(why) => {
            // On stderr once (the journal has it), as a start-up error.
            eprintln!("schedd: error: {why}");
            std::process::exit(78);
        }
    }
}

/// What a replica that does not lead tells clients and agents, and where it forwards
/// clients.
fn where_the_leader_is(
    place: u64,
    leader: Option<u64>,
    members: &std::collections::BTreeMap<u64, String>,
) -> leading::Elsewhere {
    // A replica that counts itself the leader but has no majority behind it (one restarted
    // with its own vote) does not lead either.
    match leader
        .filter(|l| *l != place)
        .and_then(|l| Some((l, members.get(&l)?)))
    {
        Some((l, addr)) => leading::Elsewhere {
            why: format!(
                "not the leader: this schedd is replica {place} of scheduler.replicas; replica \
                 {l} at {addr} leads"
            ),
            leader: Some((l, addr.clone())),
        },
        None => leading::Elsewhere {
            why: format!(
                "no quorum: no replica of scheduler.replicas leads (a majority of the {} must be \
                 up and reach each other); this is replica {place}",
                members.len()
            ),
            leader: None,
        },
    }
}

/// What a replica needs to lead once elected: its config, store and Raft, every replica's
/// address, and the token its followers' forwarded requests carry.
struct Electable {
    config: ysched_common::Config,
    store: crate::store::Store,
    replica: crate::replica::Replica,
    members: std::collections::BTreeMap<u64, String>,
    forwarded: forward::ForwardToken,
    ca: Arc<ysched_common::tls::ClusterCa>,
    /// Set while this replica forms the cluster: it leads alone until a majority of the
    /// replicas vote, and serves only from then on.
    forming: Arc<std::sync::atomic::AtomicBool>,
}

/// Follows the replica's role: once it leads and has applied everything committed, starts
/// the `Cluster` from what the replica kept warm (or the store) and serves it (`serving`;
/// `leading` names it for the metrics endpoint). It steps down when it no longer leads, when
/// no majority has acknowledged it for [`Replica::lease_ms`] (so that it stops before another
/// replica can be elected), or when its replication failed: the cluster retires (see
/// `shell::retire`), clients and agents are told where the leader is, and the replica keeps
/// its state warm again to lead once more if elected.
async fn lead_when_elected(
    electable: Electable,
    serving: tokio::sync::watch::Sender<leading::Serving<Leader>>,
    leading: tokio::sync::watch::Sender<Option<Arc<Cluster>>>,
) {
    let Electable {
        config,
        store,
        replica,
        members,
        forwarded,
        ca,
        forming,
    } = electable;
    let configured = members.len();
    let mut watch = replica.raft.metrics();
    // Where a leader is: every replica of scheduler.replicas, and those added since.
    let members = |m: &openraft::RaftMetrics<u64, openraft::BasicNode>| {
        let mut all = members.clone();
        all.extend(
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, node)| (*id, node.addr.clone())),
        );
        all
    };
    let mut cluster: Option<Arc<Cluster>> = None;
    loop {
        let m = watch.borrow_and_update().clone();
        let leads = m.current_leader == Some(replica.id) && m.state.is_leader();
        if let Some(c) = &cluster {
            if let Some(why) = why_step_down(c, &replica, leads, || {
                where_the_leader_is(replica.id, m.current_leader, &members(&m)).why
            }) {
                c.retire(why);
                cluster = None;
                let _ = leading.send(None);
                let _ = serving.send(leading::Serving::Elsewhere(where_the_leader_is(
                    replica.id,
                    m.current_leader,
                    &members(&m),
                )));
                // Warm again before it may lead again (a whole read of the state).
                let r = replica.clone();
                let _ = tokio::task::spawn_blocking(move || r.keep_warm_again()).await;
                tracing::info!(replica = replica.id, "stepped down: following");
            }
        }
        match (&cluster, leads) {
            (None, true)
                if m.last_applied.map(|l| l.index) >= m.last_log_index
                    && replica.has_quorum()
                    && formed_enough(&forming, &m, configured) =>
            {
                let loading = std::time::Instant::now();
                match Cluster::start_leading(config.clone(), store.clone(), replica.clone()) {
                    Ok(c) => {
                        tracing::info!(
                            replica = replica.id,
                            term = m.current_term,
                            took = ?loading.elapsed(),
                            "leading: state loaded, serving clients and agents"
                        );
                        let _ = leading.send(Some(c.clone()));
                        let _ = serving.send(leading::Serving::Leader(Leader::of(
                            &c,
                            Some(forwarded.clone()),
                            &ca,
                        )));
                        cluster = Some(c);
                    }
                    Err(e) => {
                        tracing::error!("cannot load the state to lead: {e}");
                        eprintln!("schedd: fatal: cannot load the state to lead: {e}");
                        std::process::exit(75);
                    }
                }
            }
            (None, _) => {
                let _ = serving.send(leading::Serving::Elsewhere(where_the_leader_is(
                    replica.id,
                    m.current_leader,
                    &members(&m),
                )));
            }
            (Some(_), _) => {}
        }
        // Looked at again on each change, and every 100 ms (a majority's acknowledgement
        // ages without a change).
        tokio::select! {
            changed = watch.changed() => if changed.is_err() {
                // Raft stopped under us (its store failed: a full disk, an I/O error): as for
                // a failed store write, restart from what is on disk.
                tracing::error!(
                    "replica {} stopped (its log or state could not be written); exiting so \
                     that it restarts from its store",
                    replica.id
                );
                eprintln!("schedd: fatal: replica stopped");
                std::process::exit(75);
            },
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
}

/// Why the leading cluster `c` of `replica` must step down, if it must: its replication
/// failed, Raft no longer has it lead (`leads`; `elsewhere` says where the lead is), or no
/// majority acknowledged it for a leader's lease.
fn why_step_down(
    c: &Cluster,
    replica: &crate::replica::Replica,
    leads: bool,
    elsewhere: impl FnOnce() -> String,
) -> Option<String> {
    // Said to the requests still waiting, and to the log: nothing more was acknowledged.
    const UNSURE: &str = "a change not yet acknowledged takes effect only if a majority took \
                          it (check with yq before you repeat it)";
    if c.is_retired() {
        return Some(format!("replica {} could not replicate", replica.id));
    }
    if !leads {
        return Some(format!(
            "not the leader: replica {} lost the lead ({}); {UNSURE}",
            replica.id,
            elsewhere()
        ));
    }
    replica.quorum_lost().map(|ms| {
        format!(
            "no quorum: replica {} heard from no majority of scheduler.replicas for {ms} ms and \
             stepped down (another may be elected after {} ms); {UNSURE}",
            replica.id,
            replica.lease_ms()
        )
    })
}
