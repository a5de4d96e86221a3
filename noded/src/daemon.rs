//! Starting the agent and running it until noded is told to stop.
//!
//! Configuration and flags, host facts, job recovery, the client socket, then the session with
//! schedd. Stopping noded leaves jobs running.
//!
//! A login node (`node.role = "login"`, or `noded --no-jobs`) offers nothing: no GPU is
//! looked for, it registers no CPU, memory or feature, never fences (it has no job), and
//! refuses every launch. It serves its client socket all the same.

use crate::agent::{Agent, AgentConfig};
use crate::credential::{self, HostCredential};
use crate::gpu::{health_monitor, inventory, InventoryError};
use crate::gpu_watch::GpuWatch;
use crate::host;
use crate::inventory::Inventory;
use crate::launch::{CgroupRoot, Launcher, LauncherOptions};
use crate::relay::{Relay, RelayConfig};
use anyhow::{bail, Context};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use ysched_common::config::{ROLE_COMPUTE, ROLE_LOGIN};
use ysched_common::Config;
use ysched_proto as pb;

/// Command-line overrides of the config.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Node name; default: the host name.
    pub name: Option<String>,
    /// GPU inventory file instead of NVML.
    pub fake_gpus: Option<PathBuf>,
    /// The NVML library instead of `node.nvml_library`.
    pub nvml_library: Option<PathBuf>,
    pub spool_dir: Option<PathBuf>,
    /// schedd's agent address, `host:port`.
    pub schedd: Option<String>,
    /// Where peers reach this host; default: the local IP used to reach schedd.
    pub address: Option<String>,
    /// CPUs and memory offered to jobs; default: what the host has.
    pub cpus: Option<u32>,
    pub mem_mib: Option<u64>,
    /// The client socket to serve instead of `node.client_socket`; empty: none.
    pub client_socket: Option<PathBuf>,
    /// A login node whatever `node.role` says: runs nothing, offers nothing.
    pub no_jobs: bool,
    /// An enrolment token's file instead of `node.enrol_token_file`.
    pub enrol_token: Option<PathBuf>,
}

impl Options {
    /// The NVML library to load: `--nvml-library`, else `node.nvml_library`; `None`: the
    /// driver's `libnvidia-ml.so.1`.
    pub fn nvml_library(&self, config: &Config) -> Option<PathBuf> {
        self.nvml_library
            .clone()
            .or_else(|| Some(config.node.nvml_library.clone()))
            .filter(|path| !path.as_os_str().is_empty())
    }
}

/// Runs the agent until SIGTERM or SIGINT. Errors are fatal start-up problems.
pub async fn run(options: Options) -> anyhow::Result<()> {
    // Its message already names the cause; as an error source it would be printed twice.
    let config = Config::load().map_err(|e| anyhow::anyhow!("{e}"))?;
    // Client connections are file descriptors: the connection limits, not EMFILE, must be
    // what refuses them.
    match ysched_common::edge::raise_open_files_limit() {
        Ok(limit) if limit < u64::from(config.node.max_client_connections) + 1024 => {
            tracing::warn!(
                "noded may open only {limit} files (RLIMIT_NOFILE), not much more than \
                 node.max_client_connections = {}: raise LimitNOFILE= in its unit",
                config.node.max_client_connections
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the limit of open files: {e}"),
    }
    ysched_common::edge::peer_log::spawn_summaries();
    let cluster_key = read_cluster_key(&config.scheduler.cluster_key_file)?;
    let ca_cert_path = config.ca_cert_path();
    let ca_cert_pem = std::fs::read_to_string(&ca_cert_path).with_context(|| {
        format!(
            "cannot read the cluster CA certificate {} (schedd creates it at first start \
             beside the cluster key; copy it to this node)",
            ca_cert_path.display()
        )
    })?;
    let spool_dir = options
        .spool_dir
        .clone()
        .unwrap_or_else(|| config.node.spool_dir.clone());
    let schedd = options
        .schedd
        .clone()
        .unwrap_or_else(|| config.schedd_addr().to_string());
    let address = match &options.address {
        Some(address) => address.clone(),
        None => host::local_address_towards(&schedd).await.to_string(),
    };
    let login = options.no_jobs || config.node.role == ROLE_LOGIN;
    let Inventory {
        name,
        cpus,
        mem_mib,
        features,
        gpus,
        ..
    } = if login {
        Inventory {
            name: options.name.clone().unwrap_or_else(host::hostname),
            cpus: 0,
            mem_mib: 0,
            features: Vec::new(),
            gpus: Vec::new(),
            excluded: Vec::new(),
            containment: None,
        }
    } else {
        let gpus = detect_gpus(options.fake_gpus.clone(), options.nvml_library(&config)).await?;
        Inventory::new(&options, &config, gpus)
    };
    let endpoints = if options.schedd.is_some() || config.scheduler.replicas.is_empty() {
        vec![schedd.clone()]
    } else {
        config.scheduler.replicas.clone()
    };
    let credential = host_credential(
        &options,
        &config,
        HostFacts {
            name: &name,
            login,
            spool_dir: &spool_dir,
            endpoints: &endpoints,
            ca_cert_pem: &ca_cert_pem,
        },
        cluster_key,
    )
    .await?;
    let client_socket = client_socket_path(&options, &config)?;
    // Bound before anything else starts: a second noded on this host stops here.
    let clients = client_socket
        .as_deref()
        .map(crate::relay::bind_client_socket)
        .transpose()?;
    if client_socket.is_none() {
        tracing::info!("node {name}: serving no client socket (node.client_socket is empty)");
    }

    if !login && !config.node.allow_root_jobs {
        tracing::info!("node {name}: jobs as root are refused (node.allow_root_jobs = false)");
    }
    let (launcher, events) = Launcher::with_options(LauncherOptions {
        allow_root_jobs: config.node.allow_root_jobs,
        cgroup_root: CgroupRoot::from_config(&config.node.cgroup_root),
        job_pids_max: config.node.job_pids_max,
        client_socket: client_socket.clone(),
        runs_jobs: !login,
        spool_reserve_mib: config.node.spool_reserve_mib,
        slurm_env: config.node.slurm_env,
        ..LauncherOptions::new(&spool_dir, &name)
    })
    .with_context(|| format!("cannot open the spool {}", spool_dir.display()))?;
    let recovery = launcher
        .recover()
        .await
        .context("cannot recover jobs from the spool")?;
    if login {
        tracing::info!("node {name} ({address}): a login node, it runs no job");
    } else {
        // Said at registration: a node that starts on a full spool takes no job.
        let _ = tokio::task::spawn_blocking(launcher.health_probe()).await;
        tracing::info!(
            "node {name} ({address}): {} GPUs; re-attached jobs {:?}, ended while away {:?}",
            gpus.len(),
            recovery.reattached,
            recovery.ended
        );
    }
    let relay_config = RelayConfig {
        node: name.clone(),
        schedd: schedd.clone(),
        cluster_key: credential.cluster_key.clone(),
        jobs: (!login).then(|| launcher.jobs_of_users()),
        max_connections_per_user: config.node.max_connections_per_user as usize,
        max_client_connections: config.node.max_client_connections as usize,
    };

    let agent_config = AgentConfig {
        name,
        address,
        // `--schedd` names one schedd; otherwise the replicas, when there are any.
        replicas: if options.schedd.is_some() {
            Vec::new()
        } else {
            config.scheduler.replicas.clone()
        },
        schedd,
        credential,
        ca_cert_pem,
        ca_cert_path: ca_cert_path.display().to_string(),
        max_message_bytes: config.max_message_bytes(),
        heartbeat: Duration::from_secs(config.scheduler.heartbeat_secs),
        cpus,
        mem_mib,
        gpus: gpus.iter().map(pb::Gpu::from).collect(),
        features,
        role: if login { ROLE_LOGIN } else { ROLE_COMPUTE }.to_string(),
        fence_after_secs: if login {
            0
        } else {
            config.node.fence_after_secs
        },
    };
    let mut agent = Agent::new(agent_config, launcher, events)?;
    if !login {
        // A login node has no GPU to watch (and answers no forget: it has no outage).
        agent = agent.with_gpu_watch(gpu_watch(&options, &config, &gpus));
    }
    // The relay serves as long as noded runs, with or without a session (it then answers
    // that schedd is not reachable).
    if let (Some(listener), Some(path)) = (clients, &client_socket) {
        let relay = Relay::new(relay_config, agent.session_slot())?;
        tracing::info!("serving the client socket {}", path.display());
        let path = path.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::relay::serve(listener, relay).await {
                tracing::error!("the client socket {} failed: {e}", path.display());
            }
        });
    }
    tokio::select! {
        () = agent.run() => Ok(()),
        signal = shutdown_signal() => {
            tracing::info!("{signal}: stopping; jobs keep running under the node's supervisor");
            Ok(())
        }
    }
}

/// The GPU health thread: the monitor the flags ask for, polled every
/// `node.gpu_health_secs`; with 0, none (forgets are still confirmed).
fn gpu_watch(options: &Options, config: &Config, gpus: &[ysched_common::Gpu]) -> GpuWatch {
    let secs = config.node.gpu_health_secs;
    if secs == 0 || gpus.is_empty() {
        if gpus.is_empty() {
            tracing::info!("no GPU to watch");
        } else {
            tracing::info!("GPU health is not watched (node.gpu_health_secs = 0)");
        }
        return GpuWatch::start(None, None);
    }
    let monitor = health_monitor(
        options.fake_gpus.as_deref(),
        options.nvml_library(config).as_deref(),
        gpus,
    );
    tracing::info!("watching the health of {} GPUs every {secs} s", gpus.len());
    GpuWatch::start(Some(monitor), Some(Duration::from_secs(secs)))
}

/// The client socket to serve, absolute (jobs get it as `YSCHED_SOCKET`, whatever their
/// working directory); `None`: none.
fn client_socket_path(options: &Options, config: &Config) -> anyhow::Result<Option<PathBuf>> {
    let path = options
        .client_socket
        .as_ref()
        .unwrap_or(&config.node.client_socket);
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let path = std::path::absolute(path)
        .with_context(|| format!("bad client socket path {}", path.display()))?;
    Ok(Some(path))
}

/// The cluster key, where this host has one (`None`: enrolled hosts need none); refused
/// when others may read or write it, or it belongs to another user (see
/// [`ysched_common::secret`]).
fn read_cluster_key(path: &Path) -> anyhow::Result<Option<String>> {
    let Some(key) = ysched_common::secret::read_private_file(path, "cluster key")? else {
        return Ok(None);
    };
    let key = key.trim();
    if key.is_empty() {
        bail!("the cluster key file {} is empty", path.display());
    }
    Ok(Some(key.to_string()))
}

/// What enrolment needs to know of this host and where schedd is.
struct HostFacts<'a> {
    name: &'a str,
    login: bool,
    spool_dir: &'a Path,
    endpoints: &'a [String],
    ca_cert_pem: &'a str,
}

/// This host's credential: its certificate, enrolling first with the token of
/// `--enrol-token` (or `node.enrol_token_file`) when it has none or the token is new; else
/// the cluster key (warned about); else an error that says how to enrol.
async fn host_credential(
    options: &Options,
    config: &Config,
    host: HostFacts<'_>,
    cluster_key: Option<String>,
) -> anyhow::Result<HostCredential> {
    let dir = credential::identity_dir(&config.node.identity_dir, host.spool_dir);
    let mut own = credential::load(&dir)?;
    let token_file = options
        .enrol_token
        .clone()
        .or_else(|| Some(config.node.enrol_token_file.clone()))
        .filter(|p| !p.as_os_str().is_empty());
    if let Some(path) = token_file {
        let token = credential::read_token(&path)?;
        if own.is_none() || !credential::enrolled_with(&dir, &token) {
            credential::check_token_is_for(&token, host.name, host.login)?;
            let enrolled =
                credential::enrol(&token, host.name, host.endpoints, host.ca_cert_pem, &dir)
                    .await
                    .with_context(|| format!("cannot enrol host {}", host.name))?;
            tracing::warn!(
                "enrolled as {}; certificate and key in {}",
                enrolled.identity,
                dir.display()
            );
            own = Some(enrolled);
        }
    }
    match (&own, &cluster_key) {
        (Some(own), _) => credential::check_matches(own, host.name, host.login, &dir)?,
        (None, Some(_)) => tracing::warn!(
            "host {} has no certificate of its own: it authenticates with the shared cluster \
             key, which schedd may refuse (scheduler.accept_cluster_key). Enrol it: `yctl \
             node enrol {}` on a scheduler host, then noded --enrol-token FILE",
            host.name,
            host.name
        ),
        (None, None) => bail!(
            "host {name} has no certificate (none in {}) and no cluster key: enrol it: run \
             `yctl node enrol {name}{}` on a scheduler host, then start noded here with \
             --enrol-token FILE",
            dir.display(),
            if host.login { " --login" } else { "" },
            name = host.name,
        ),
    }
    Ok(HostCredential { own, cluster_key })
}

/// Prints what this noded would register (`noded --inventory`) and returns; needs neither
/// schedd nor the cluster key.
pub fn print_inventory(options: &Options, json: bool) -> anyhow::Result<()> {
    let config = Config::load().map_err(|e| anyhow::anyhow!("{e}"))?;
    let inventory = Inventory::detect(options, &config)?;
    let text = if json {
        let mut text = serde_json::to_string_pretty(&inventory.to_json())?;
        text.push('\n');
        text
    } else {
        inventory.to_text()
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // `noded --inventory | head` is fine.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.context("cannot write to stdout"),
    }
}

/// A bad fake inventory file, or an NVML library that was named but cannot be loaded, is a
/// configuration error; other NVML trouble costs the GPUs concerned (each one NVML cannot
/// describe is logged and left out), or all of them when NVML cannot list any.
async fn detect_gpus(
    fake_gpus: Option<PathBuf>,
    nvml_library: Option<PathBuf>,
) -> anyhow::Result<Vec<ysched_common::Gpu>> {
    let is_fake = fake_gpus.is_some();
    let result = tokio::task::spawn_blocking(move || {
        inventory(fake_gpus.as_deref(), nvml_library.as_deref()).detect()
    })
    .await
    .context("GPU inventory")?;
    match result {
        Ok(detected) => {
            for excluded in &detected.excluded {
                if excluded.fault {
                    tracing::error!("{excluded}");
                } else {
                    tracing::warn!("{excluded}");
                }
            }
            Ok(detected.gpus)
        }
        Err(e) if is_fake || matches!(e, InventoryError::Library { .. }) => Err(e.into()),
        Err(e) => {
            tracing::error!("GPU inventory failed, reporting no GPUs: {e}");
            Ok(Vec::new())
        }
    }
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        },
        _ => std::future::pending().await,
    }
}
