//! `noded`: the ysched node agent. Parses flags and hands over to the library.

use clap::{ArgAction, Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;
use ysched_noded::{daemon, launch};

// noded and the node's supervisor (the same binary) allocate and free a little for every job
// on many threads; mimalloc spends 10-13 % less of their CPU per job than glibc's malloc on the
// GPU array of `bench hq` (docs/notes/cost-per-job.md), for about 13 and
// 9 MiB more resident memory on a node. C code loaded here (NVML) keeps the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// ysched node agent: runs jobs on this host for schedd.
#[derive(Parser)]
#[command(name = "noded", version)]
struct Cli {
    /// Node name reported to schedd [default: the host name]
    #[arg(long)]
    name: Option<String>,
    /// Read the GPU inventory from this TOML file instead of asking NVML
    #[arg(long, value_name = "FILE")]
    fake_gpus: Option<PathBuf>,
    /// Load NVML from this library instead of the driver's libnvidia-ml.so.1 [default:
    /// node.nvml_library of the config]
    #[arg(long, value_name = "PATH", conflicts_with = "fake_gpus")]
    nvml_library: Option<PathBuf>,
    /// Spool directory [default: node.spool_dir of the config]
    #[arg(long, value_name = "DIR")]
    spool_dir: Option<PathBuf>,
    /// schedd's agent address [default: node.schedd, else scheduler.listen]
    #[arg(long, value_name = "HOST:PORT")]
    schedd: Option<String>,
    /// Address peers of multi-node jobs reach this host at [default: the local IP used to
    /// reach schedd]
    #[arg(long, value_name = "ADDR")]
    address: Option<String>,
    /// CPUs offered to jobs [default: all the host has]. Lets an admin keep cores for the OS,
    /// and lets fake-GPU test agents on a small machine look like real GPU servers.
    #[arg(long, value_name = "N")]
    cpus: Option<u32>,
    /// Memory offered to jobs, e.g. `500G` [default: MemTotal]
    #[arg(long, value_name = "SIZE", value_parser = parse_mem)]
    mem: Option<u64>,
    /// Serve the client socket (the CLIs of this host and its jobs reach schedd through it)
    /// here [default: node.client_socket]; empty: serve none
    #[arg(long, value_name = "PATH", value_parser = parse_path)]
    client_socket: Option<PathBuf>,
    /// A login node (as node.role = "login"): offer no GPU, CPU or memory, run no job, only
    /// serve the client socket
    #[arg(long)]
    no_jobs: bool,
    /// Enrol this host with the token in FILE (from `yctl node enrol NAME` on a scheduler
    /// host; `-`: standard input) before starting, unless it already enrolled with it: its
    /// certificate and key are kept in node.identity_dir [default: node.enrol_token_file]
    #[arg(long, value_name = "FILE")]
    enrol_token: Option<PathBuf>,
    /// Print the inventory this agent would register (GPUs with their NVLink and PCIe
    /// topology, CPUs, memory, features) and exit, without contacting schedd
    #[arg(long)]
    inventory: bool,
    /// With --inventory: print JSON instead of tables
    #[arg(long, requires = "inventory")]
    json: bool,
    /// More log output: -v info, -vv debug (RUST_LOG overrides)
    #[arg(short, long, action = ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    internal: Option<Internal>,
}

#[derive(Subcommand)]
enum Internal {
    /// Starts and watches every job of the spool; started by noded itself.
    #[command(name = "__supervisor", hide = true)]
    Supervisor { spool: PathBuf },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before anything else: the supervisor starts no async runtime (it forks jobs from a
    // process with no thread but its journal's) and logs to its own stderr.
    match &cli.internal {
        Some(Internal::Supervisor { spool }) => return launch::node_supervisor::run(spool),
        None => {}
    }
    init_logging(cli.verbose);
    let options = daemon::Options {
        name: cli.name,
        fake_gpus: cli.fake_gpus,
        nvml_library: cli.nvml_library,
        spool_dir: cli.spool_dir,
        schedd: cli.schedd,
        address: cli.address,
        cpus: cli.cpus,
        mem_mib: cli.mem,
        client_socket: cli.client_socket,
        no_jobs: cli.no_jobs,
        enrol_token: cli.enrol_token,
    };
    if cli.inventory {
        return match daemon::print_inventory(&options, cli.json) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("noded: error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("noded: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(daemon::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Any path, the empty one included (which means none).
fn parse_path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s))
}

fn parse_mem(s: &str) -> Result<u64, String> {
    ysched_common::parse::parse_mem_mib(s).map_err(|e| e.to_string())
}

/// One line per event on stderr; warnings only unless -v, RUST_LOG wins.
fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Plain text in a log file, and with NO_COLOR (no-color.org).
        .with_ansi(
            std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();
}
