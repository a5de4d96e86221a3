//! schedd: parses arguments, sets up logging, opens the store and serves until SIGTERM/SIGINT.

use clap::Parser;
use std::path::PathBuf;
use ysched_common::Config;
use ysched_schedd::{server, shell::Cluster, store::Store};

/// The ysched central scheduler daemon.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Override `scheduler.state_dir`.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Override `scheduler.listen` (TCP address for node agents).
    #[arg(long)]
    listen: Option<String>,
    /// Override `scheduler.socket` (Unix socket for clients).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// This replica's 1-based place in `scheduler.replicas` (overrides `scheduler.replica`).
    #[arg(long, value_name = "N")]
    replica: Option<u32>,
    /// More log output (-v info, -vv debug). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    // openraft logs each failed send to a down replica (several lines a second, as long as
    // it is down): schedd says so itself, once and then every minute (`replica::reachability`).
    let default = format!(
        "{default},openraft::replication=off,openraft::engine::handler::replication_handler=off"
    );
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colours())
        .init();
}

/// Whether the log is coloured: only on a terminal (a log file or journald gets plain text,
/// no escape codes), and not when `NO_COLOR` is set to anything (no-color.org).
fn log_colours() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// glibc gives every thread that allocates its own arena (up to eight per core), and memory
/// freed in one arena is not reused by another: with a scheduling pass on a blocking thread
/// and requests on the runtime's workers, each copy of a large queue ends up in a different
/// arena and RSS grows with the number of threads. Two arenas keep contention low and RSS
/// close to what is in use.
fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn main() {
    // Before anything is created: sled's files, the snapshots, the ballast are 0600.
    ysched_common::secret::restrict_umask();
    limit_malloc_arenas();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(async_main());
}

async fn async_main() {
    let args = Args::parse();
    init_tracing(args.verbose);
    if let Err(e) = run(args).await {
        eprintln!("schedd: error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut config = Config::load()?;
    if let Some(d) = args.state_dir {
        config.scheduler.state_dir = d;
    }
    if let Some(l) = args.listen {
        config.scheduler.listen = l;
    }
    if let Some(s) = args.socket {
        config.scheduler.socket = s;
    }
    // This replica's place among `scheduler.replicas` (none: schedd runs alone).
    if args.replica.is_some() && config.scheduler.replicas.is_empty() {
        anyhow::bail!(
            "--replica needs scheduler.replicas (the addresses of all replicas); without them \
             schedd runs alone"
        );
    }
    let place = config
        .replica_place(args.replica.unwrap_or(config.scheduler.replica))
        .map_err(|e| anyhow::anyhow!(e))?
        .map(|_| u64::from(args.replica.unwrap_or(config.scheduler.replica)));
    raise_open_files_limit(&config);
    ysched_common::edge::peer_log::spawn_summaries();
    // Every user's scripts and exported environments are in it: created 0700 (durably: a
    // power loss right after the first start must not take it), refused when others may use
    // it, and what an older schedd left readable inside is tightened.
    let state_dir = &config.scheduler.state_dir;
    ysched_common::secret::private_dir(state_dir, "state directory")?;
    match ysched_common::secret::tighten_private_tree(state_dir) {
        Ok(0) => {}
        Ok(n) => tracing::warn!(
            "made {n} files and directories in {} private to schedd's user",
            state_dir.display()
        ),
        Err(e) => anyhow::bail!(
            "cannot make the files in {} private: {e}",
            state_dir.display()
        ),
    }
    let ca = std::sync::Arc::new(server::load_or_create_ca(
        &config.ca_cert_path(),
        &config.ca_key_path(),
    )?);
    let key = server::load_cluster_key(&config)?;
    let tls = server::tls_server_config(&ca)?;
    let opening = std::time::Instant::now();
    let store = Store::open_with_reserve(
        &config.scheduler.state_dir,
        config.scheduler.state_reserve_mib,
    )?;
    tracing::info!(took = ?opening.elapsed(), "state store opened");
    let agents = tokio::net::TcpListener::bind(&config.scheduler.listen)
        .await
        .map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                " (another process holds the agent port: `ss -ltnp` names it; the admin guide's \
                 \"Keeping the agent port from being squatted\" says how to prevent this)"
            } else {
                ""
            };
            anyhow::anyhow!("cannot listen on {}: {e}{hint}", config.scheduler.listen)
        })?;
    let clients = server::bind_client_socket(&config.scheduler.socket)?;
    let metrics = match config.scheduler.metrics_listen.as_str() {
        "" => None,
        addr => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            anyhow::anyhow!("cannot listen on {addr} for metrics (scheduler.metrics_listen): {e}")
        })?),
    };
    let socket_path = config.scheduler.socket.clone();
    let doors = server::Doors {
        clients,
        agents,
        metrics,
        key,
        tls,
        ca,
    };
    if let Some(place) = place {
        tracing::info!(
            replica = place,
            of = config.scheduler.replicas.len(),
            "schedd starting as a replica"
        );
        let _ = ysched_common::sdnotify::notify_ready();
        server::serve_replica(config, store, place, doors, shutdown_signal()).await?;
        let _ = std::fs::remove_file(socket_path);
        return Ok(());
    }
    let recovering = std::time::Instant::now();
    let cluster = Cluster::start(config, store)?;
    tracing::info!(recovery = ?recovering.elapsed(), "schedd ready");
    let _ = ysched_common::sdnotify::notify_ready();
    server::serve(cluster, doors, shutdown_signal()).await?;
    let _ = std::fs::remove_file(socket_path);
    Ok(())
}

/// Every client connection, agent connection and store file is a file descriptor: raise the
/// soft limit to the hard one (systemd's default soft limit, 1024, is below the connection
/// limits), and say so when even that is below what the limits allow.
fn raise_open_files_limit(config: &Config) {
    match ysched_common::edge::raise_open_files_limit() {
        Ok(limit) => {
            let wanted = u64::from(config.scheduler.max_client_connections)
                + server::UNAUTHENTICATED_AGENT_CONNECTIONS as u64
                + 1024;
            if limit < wanted {
                tracing::warn!(
                    "schedd may open only {limit} files (RLIMIT_NOFILE): under a flood of \
                     connections it may run out before the connection limits refuse any; \
                     raise it (LimitNOFILE= in the unit) to at least {wanted} plus two per node"
                );
            } else {
                tracing::info!("schedd may open {limit} files");
            }
        }
        Err(e) => tracing::warn!("cannot raise the limit of open files: {e}"),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}
