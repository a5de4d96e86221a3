//! Arbitrary and adversarial requests to every RPC of schedd's client service, for the fuzz
//! test (`tests/tests/e2e/bounds.rs`) and the `fuzz` benchmark group: texts at, just over and far
//! over their limits (up to the message limit), odd Unicode (format and control characters,
//! right-to-left text), huge and overlapping task ranges, many names in one request, deep
//! brackets and long dependency chains, extreme numbers and time windows.
//!
//! Deterministic for a seed (its own xorshift generator), so a failure can be replayed with
//! `YSCHED_FUZZ_SEED`. Runs as whatever user starts it: the test runs it as `nobody` through
//! the `fuzz-client` binary. [`agent_port`] does the same on the agent port, with a host's
//! own certificate.

pub mod agent_port;
mod requests;
mod rng;
mod send;

pub use requests::Gen;
pub use rng::Rng;

use send::send;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use ysched_proto as pb;

/// What one run is to do.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    pub duration: Duration,
    pub seed: u64,
    /// Requests in flight at once (each worker its own connection).
    pub workers: usize,
    /// The largest request to send, in bytes: schedd's message limit (twice
    /// `scheduler.max_script_mib` plus 8 MiB), a little over it now and then.
    pub max_message: usize,
    /// In percent: how many requests are "huge" (megabytes).
    pub huge_percent: u64,
    /// Print each request (RPC, answer, milliseconds) to stderr.
    pub verbose: bool,
}

impl Default for FuzzConfig {
    fn default() -> Self {
        FuzzConfig {
            duration: Duration::from_secs(8),
            seed: 1,
            workers: 3,
            max_message: 16 << 20,
            huge_percent: 3,
            verbose: false,
        }
    }
}

/// What a run sent and got.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FuzzStats {
    pub requests: u64,
    /// Requests per RPC.
    pub per_rpc: BTreeMap<String, u64>,
    /// Answers per status code ("Ok", "InvalidArgument", ...).
    pub codes: BTreeMap<String, u64>,
    /// The largest request sent, in bytes (its encoded length).
    pub largest_request: usize,
    /// The slowest answer, in milliseconds, and to what.
    pub slowest_ms: u64,
    pub slowest_rpc: String,
    /// Connections that failed (schedd gone or refusing): a few are expected only if schedd
    /// limits connections.
    pub connect_failures: u64,
}

/// The RPCs of the `Ysched` service, as named in the stats.
pub const RPCS: [&str; 21] = [
    "Submit",
    "ListJobs",
    "GetJob",
    "Cancel",
    "Hold",
    "Release",
    "ListNodes",
    "Drain",
    "Resume",
    "Requeue",
    "WatchJob",
    "Audit",
    "Shares",
    "Report",
    "ExportTrace",
    "ImportUsage",
    "DrainGpu",
    "ResumeGpu",
    "UpdateJob",
    // Submits that are valid, so that there are jobs (and arrays) to name.
    "Submit(valid)",
    "ListJobs(targets)",
];

type Client = pb::ysched_client::YschedClient<tonic::transport::Channel>;

/// Connects to schedd's socket as the tools do.
pub async fn connect(socket: &Path) -> anyhow::Result<Client> {
    Ok(ysub::client::connect(socket).await?.rpc())
}

/// Sends arbitrary requests to every RPC from `config.workers` connections until
/// `config.duration` has passed. A request over the message limit, or one schedd refuses,
/// is an answer like any other; a connection that breaks is made again.
pub async fn run(socket: &Path, config: &FuzzConfig) -> FuzzStats {
    let deadline = Instant::now() + config.duration;
    let mut workers = Vec::new();
    for w in 0..config.workers {
        let socket = socket.to_path_buf();
        let config = config.clone();
        workers.push(tokio::spawn(async move {
            let mut g = Gen::new(
                config.seed.wrapping_add(w as u64 * 0x9e37_79b9),
                config.max_message,
                config.huge_percent,
            );
            let mut stats = FuzzStats::default();
            let mut client: Option<Client> = None;
            while Instant::now() < deadline {
                let mut c = match client.take() {
                    Some(c) => c,
                    None => match connect(&socket).await {
                        Ok(c) => c,
                        Err(_) => {
                            stats.connect_failures += 1;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                // Every RPC once first, then at random; valid submits and listings with
                // names more often, so that there is something to name.
                let rpc = if stats.requests < RPCS.len() as u64 {
                    RPCS[(stats.requests as usize + w) % RPCS.len()]
                } else if g.rng.percent(25) {
                    *g.rng
                        .pick(&["Submit(valid)", "ListJobs(targets)", "Cancel"])
                } else {
                    *g.rng.pick(&RPCS)
                };
                g.begin();
                let began = Instant::now();
                let answer =
                    tokio::time::timeout(Duration::from_secs(60), send(&mut c, &mut g, rpc)).await;
                let took = began.elapsed().as_millis() as u64;
                let (code, size) = answer.unwrap_or_else(|_| ("ClientTimeout".into(), 0));
                if config.verbose {
                    let at = (Instant::now() + config.duration - deadline).as_millis();
                    eprintln!("{at} ms: worker {w}: {rpc} {size} bytes: {code} in {took} ms");
                }
                stats.requests += 1;
                *stats.per_rpc.entry(rpc.to_string()).or_default() += 1;
                *stats.codes.entry(code.clone()).or_default() += 1;
                stats.largest_request = stats.largest_request.max(size);
                if took > stats.slowest_ms {
                    stats.slowest_ms = took;
                    stats.slowest_rpc = rpc.to_string();
                }
                // A transport error: the connection is made again.
                if code != "Unavailable" && code != "ClientTimeout" {
                    client = Some(c);
                }
            }
            stats
        }));
    }
    let mut all = FuzzStats::default();
    for w in workers {
        let s = w.await.expect("fuzz worker");
        all.requests += s.requests;
        for (k, v) in s.per_rpc {
            *all.per_rpc.entry(k).or_default() += v;
        }
        for (k, v) in s.codes {
            *all.codes.entry(k).or_default() += v;
        }
        all.largest_request = all.largest_request.max(s.largest_request);
        if s.slowest_ms > all.slowest_ms {
            all.slowest_ms = s.slowest_ms;
            all.slowest_rpc = s.slowest_rpc;
        }
        all.connect_failures += s.connect_failures;
    }
    all
}
