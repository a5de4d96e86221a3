//! Arbitrary and adversarial requests to every RPC of schedd's client service, for the fuzz
//! test (`tests/tests/e2e/bounds.rs`) and the `fuzz` benchmark group: texts at, just over and far
//! over their limits (up to the message limit), odd Unicode (format and control characters,
//! right-to-left text), huge and overlapping task ranges, many names in one request, deep
//! brackets and long dependency chains, extreme numbers and time windows.
//!
//! Deterministic for a seed (its own xorshift generator), so a failure can be replayed with
//! `YSCHED_FUZZ_SEED`. Runs as whatever user starts it: the test runs it as `nobody` through
//! the `fuzz-client` binary.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;
use ysched_proto as pb;

/// A small deterministic generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `p` out of 100.
    pub fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

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
pub const RPCS: [&str; 20] = [
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
    // Submits that are valid, so that there are jobs (and arrays) to name.
    "Submit(valid)",
    "ListJobs(targets)",
];

/// Characters that must never reach a terminal as they are, and others that are fine.
const ODD: &[char] = &[
    '\u{200b}',
    '\u{200e}',
    '\u{200f}',
    '\u{061c}',
    '\u{feff}',
    '\u{202e}',
    '\u{2066}',
    '\u{ad}',
    '\u{e0041}',
    '\n',
    '\r',
    '\t',
    '\x1b',
    '\0',
    '\x7f',
    '\u{85}',
    '\u{2028}',
    'é',
    '训',
    '🚀',
    'ש',
    '\u{301}',
    '[',
    ']',
    ',',
    ':',
    '?',
    '%',
    '-',
    '_',
    '/',
    '~',
    '|',
];

/// Limits a text is most interesting around.
const EDGES: &[usize] = &[32, 64, 128, 255, 256, 1024, 4096];

/// Generators of every part of a request.
pub struct Gen {
    pub rng: Rng,
    pub max_message: usize,
    pub huge_percent: u64,
    /// Job ids schedd gave this run's submits: names that resolve.
    pub known: Vec<u64>,
    /// Whether the request being made may still hold one huge part (megabytes): a few
    /// requests in a hundred do, so that the rest are many.
    huge_allowed: bool,
}

impl Gen {
    pub fn new(seed: u64, max_message: usize, huge_percent: u64) -> Gen {
        Gen {
            rng: Rng::new(seed),
            max_message,
            huge_percent,
            known: Vec::new(),
            huge_allowed: false,
        }
    }

    /// Starts a new request: whether it may hold a huge part is drawn now.
    fn begin(&mut self) {
        self.huge_allowed = self.rng.percent(self.huge_percent);
    }

    /// Whether to make a huge part now (at most one per request).
    fn huge(&mut self) -> bool {
        std::mem::take(&mut self.huge_allowed) && self.rng.percent(50)
    }

    /// `base` plus up to `extra` letters.
    fn ascii_about(&mut self, base: usize, extra: u64) -> String {
        let n = base + self.rng.below(extra) as usize;
        self.ascii(n)
    }

    fn ascii(&mut self, n: usize) -> String {
        let c = b'a' + self.rng.below(26) as u8;
        String::from_utf8(vec![c; n]).expect("ASCII")
    }

    /// A text: empty, a word, odd characters, one around a limit, long, or (rarely) huge.
    pub fn text(&mut self) -> String {
        match self.rng.below(10) {
            0 => String::new(),
            1 | 2 => self.ascii_about(1, 12),
            3 | 4 => {
                let n = 1 + self.rng.below(40) as usize;
                (0..n).map(|_| *self.rng.pick(ODD)).collect()
            }
            5 | 6 => {
                let edge = *self.rng.pick(EDGES);
                let n = edge + self.rng.below(3) as usize;
                self.ascii(n.saturating_sub(1))
            }
            7 | 8 => self.ascii_about(0, 64 << 10),
            _ => {
                if self.huge() {
                    self.huge_text()
                } else {
                    self.ascii_about(0, 8192)
                }
            }
        }
    }

    /// Megabytes of text, up to a little over the message limit.
    fn huge_text(&mut self) -> String {
        let n = (1 << 20) + self.rng.below(self.max_message as u64 + (1 << 20)) as usize;
        self.ascii(n)
    }

    fn job_id(&mut self) -> u64 {
        match self.rng.below(6) {
            0 => 0,
            1 => u64::MAX - self.rng.below(3),
            2 => self.rng.next_u64(),
            _ if !self.known.is_empty() => *self.rng.pick(&self.known) + self.rng.below(3),
            _ => 1 + self.rng.below(50),
        }
    }

    fn index(&mut self) -> u64 {
        match self.rng.below(5) {
            0 => u64::from(u32::MAX) - self.rng.below(2),
            1 => self.rng.next_u64(),
            _ => self.rng.below(12_000),
        }
    }

    /// A list of task ranges as users type them, often huge or long.
    fn ranges(&mut self) -> String {
        let n = match self.rng.below(4) {
            0 => 1,
            1 => 1 + self.rng.below(10),
            2 => 100 + self.rng.below(200),
            _ => 1 + self.rng.below(3),
        };
        let mut parts = Vec::new();
        for _ in 0..n {
            let a = self.index();
            let part = match self.rng.below(5) {
                0 => format!("{a}"),
                1 => "0-4294967294".to_string(),
                2 => format!("{a}-{}", a.saturating_add(self.rng.below(20_000))),
                3 => format!("0-{}:{}", self.index(), self.rng.below(5)),
                _ => format!("{a}-{}:{}", self.index(), 1 + self.rng.below(1000)),
            };
            parts.push(part);
        }
        let mut text = parts.join(",");
        if self.rng.percent(5) {
            text.push_str(&format!("%{}", self.rng.below(100)));
        }
        text
    }

    /// A job as users name it: `12`, `12_7`, `12_[…]`, or junk (deep brackets, odd text).
    pub fn target(&mut self) -> String {
        let id = self.job_id();
        match self.rng.below(9) {
            0 => id.to_string(),
            1 => format!("{id}_{}", self.index()),
            2..=5 => format!("{id}_[{}]", self.ranges()),
            6 => format!("{id}_{}", "[".repeat(1 + self.rng.below(2000) as usize)),
            7 => self.text(),
            _ => format!("{id}_[{}", self.ranges()),
        }
    }

    fn targets(&mut self) -> Vec<String> {
        let n = match self.rng.below(5) {
            0 => 0,
            1 => 990 + self.rng.below(30),
            _ => 1 + self.rng.below(6),
        };
        if n > 50 {
            if self.rng.percent(50) {
                // One array named over and over, as `yq -j "1_[0-9999],1_[0-9999],…"`.
                let t = self.target();
                return vec![t; n as usize];
            }
            // Many short names: ids and tasks.
            return (0..n)
                .map(|_| match self.rng.below(3) {
                    0 => self.job_id().to_string(),
                    _ => format!("{}_[{}-{}]", self.job_id(), self.index(), self.index()),
                })
                .collect();
        }
        (0..n).map(|_| self.target()).collect()
    }

    fn array(&mut self) -> String {
        match self.rng.below(8) {
            0 => String::new(),
            1 => format!("0-{}", self.rng.below(300)),
            2 => format!("0-{}%{}", self.rng.below(10_001), self.rng.below(4)),
            3 => vec!["7"; 1 + self.rng.below(20_000) as usize].join(","),
            4 => "0-4294967294".into(),
            5 => self.ranges(),
            6 => self.text(),
            _ => format!("{}", self.rng.below(20)),
        }
    }

    fn dependency(&mut self) -> String {
        let kinds = [
            "after",
            "afterany",
            "afterok",
            "afternotok",
            "before",
            "singleton",
        ];
        match self.rng.below(6) {
            0 => String::new(),
            1 => "singleton".into(),
            2 => self.text(),
            3 => {
                // A long chain of ids.
                let n = 1 + self.rng.below(200);
                let ids: Vec<String> = (0..n).map(|_| self.target()).collect();
                format!("afterok:{}", ids.join(":"))
            }
            4 => format!("afterok:1_{}", "[".repeat(self.rng.below(5000) as usize)),
            _ => {
                let n = 1 + self.rng.below(8);
                let sep = if self.rng.percent(50) { "," } else { "?" };
                let clauses: Vec<String> = (0..n)
                    .map(|_| format!("{}:{}", self.rng.pick(&kinds), self.target()))
                    .collect();
                clauses.join(sep)
            }
        }
    }

    /// GPU indices for a request: none, a few, or far too many.
    fn gpu_indices(&mut self) -> Vec<u32> {
        let n = match self.rng.below(8) {
            0 => 0,
            1 => 10_000 + self.rng.below(100_000),
            _ => 1 + self.rng.below(4),
        };
        (0..n).map(|_| self.small_number()).collect()
    }

    fn small_number(&mut self) -> u32 {
        match self.rng.below(6) {
            0 => 0,
            1 => u32::MAX - self.rng.below(2) as u32,
            2 => self.rng.next_u64() as u32,
            _ => self.rng.below(9) as u32,
        }
    }

    fn big_number(&mut self) -> u64 {
        match self.rng.below(4) {
            0 => 0,
            1 => u64::MAX - self.rng.below(2),
            2 => self.rng.next_u64(),
            _ => self.rng.below(100_000),
        }
    }

    /// A script that does nothing whatever follows it (a comment without a line break), so
    /// that a job this run gets to start is harmless.
    fn script(&mut self) -> String {
        let padding = match self.rng.below(20) {
            0 if self.huge() => self.rng.below(self.max_message as u64) as usize,
            1 if self.huge() => 4 << 20,
            2 if self.huge() => (4 << 20) + 1,
            _ => self.rng.below(2000) as usize,
        };
        let mut s = String::from("#!/bin/sh\nexit 0\n#");
        s.push_str(&self.ascii(padding));
        s
    }

    fn env(&mut self) -> std::collections::HashMap<String, String> {
        let mut env = std::collections::HashMap::new();
        match self.rng.below(8) {
            0 if self.huge() => {
                // Many tiny variables: framing heavier than their content.
                let n = self.rng.below(300_000);
                for i in 0..n {
                    env.insert(format!("V{i}"), String::new());
                }
            }
            1 if self.huge() => {
                env.insert("BIG".into(), self.huge_text());
            }
            2 => {
                env.insert(self.text(), self.text());
            }
            _ => {
                env.insert("PATH".into(), "/usr/bin:/bin".into());
            }
        }
        env
    }

    fn args(&mut self) -> Vec<String> {
        match self.rng.below(8) {
            0 if self.huge() => vec![String::new(); self.rng.below(500_000) as usize],
            1 if self.huge() => vec![self.ascii(1 << 20); 1 + self.rng.below(14) as usize],
            2 => (0..self.rng.below(5)).map(|_| self.text()).collect(),
            _ => Vec::new(),
        }
    }

    fn path(&mut self) -> String {
        match self.rng.below(6) {
            0 => String::new(),
            1 => "/tmp".into(),
            2 => format!("/{}", self.ascii_about(4000, 200)),
            3 => self.ascii_about(0, 5000),
            _ => self.text(),
        }
    }

    fn constraints(&mut self) -> Vec<String> {
        let mut features: Vec<String> = (0..self.rng.below(4)).map(|_| self.text()).collect();
        if self.rng.percent(5) {
            features.extend(std::iter::repeat_n("ib".to_string(), 100));
        }
        features
    }

    /// A job spec with every field arbitrary.
    pub fn spec(&mut self) -> pb::JobSpec {
        let tiers = ["", "low", "medium", "high", "critical", "LOW"];
        pb::JobSpec {
            name: self.text(),
            tier: if self.rng.percent(70) {
                self.rng.pick(&tiers).to_string()
            } else {
                self.text()
            },
            gpus: self.small_number(),
            gpu_type: if self.rng.percent(50) {
                String::new()
            } else {
                self.text()
            },
            cpus: self.small_number(),
            mem_mib: self.big_number(),
            time_limit_secs: self.big_number(),
            grace_secs: self.rng.percent(50).then(|| self.small_number()),
            checkpoint_dir: self.path(),
            account: if self.rng.percent(50) {
                String::new()
            } else {
                self.text()
            },
            stdout_path: self.path(),
            stderr_path: self.path(),
            workdir: if self.rng.percent(60) {
                "/tmp".into()
            } else {
                self.path()
            },
            script: self.script(),
            args: self.args(),
            env: self.env(),
            hold: self.rng.percent(85),
            nodes: self.small_number(),
            no_requeue: self.rng.percent(50),
            interconnect: if self.rng.percent(70) {
                String::new()
            } else {
                self.text()
            },
            constraints: self.constraints(),
            warn_signal: self.rng.percent(20).then(|| pb::WarnSignal {
                signal: self.rng.next_u64() as i32,
                secs: self.small_number(),
                batch_only: self.rng.percent(50),
            }),
            array: if self.rng.percent(50) {
                String::new()
            } else {
                self.array()
            },
            dependency: if self.rng.percent(60) {
                String::new()
            } else {
                self.dependency()
            },
        }
    }

    /// A spec schedd accepts (mostly): held, small, an array now and then, so that there
    /// are jobs and arrays to name.
    pub fn valid_spec(&mut self) -> pb::JobSpec {
        pb::JobSpec {
            name: format!("fuzz{}", self.rng.below(1000)),
            script: "#!/bin/sh\nexit 0\n".into(),
            workdir: "/tmp".into(),
            hold: self.rng.percent(90),
            array: match self.rng.below(4) {
                0 => format!("0-{}", self.rng.below(2000)),
                1 => "1,5,9-12,100-200:7".into(),
                _ => String::new(),
            },
            dependency: if self.rng.percent(20) && !self.known.is_empty() {
                format!("afterany:{}", self.rng.pick(&self.known))
            } else {
                String::new()
            },
            ..Default::default()
        }
    }

    fn job_ref(&mut self) -> pb::JobRef {
        pb::JobRef {
            job_id: self.job_id(),
            target: if self.rng.percent(70) {
                self.target()
            } else {
                String::new()
            },
        }
    }

    fn states(&mut self) -> Vec<String> {
        let names = ["PD", "R", "CD", "CANCELLED", "all", "running"];
        match self.rng.below(4) {
            0 => Vec::new(),
            1 => (0..self.rng.below(100)).map(|_| "PD".into()).collect(),
            2 => (0..1 + self.rng.below(4)).map(|_| self.text()).collect(),
            _ => vec![self.rng.pick(&names).to_string()],
        }
    }

    fn time(&mut self) -> i64 {
        match self.rng.below(5) {
            0 => 0,
            1 => i64::MIN,
            2 => i64::MAX,
            3 => self.rng.next_u64() as i64,
            _ => 1_700_000_000_000 + self.rng.below(1 << 40) as i64,
        }
    }
}

type Client = pb::ysched_client::YschedClient<tonic::transport::Channel>;

/// Sends one request of `rpc` made by `g`; the status code of the answer.
async fn send(client: &mut Client, g: &mut Gen, rpc: &str) -> (String, usize) {
    use prost::Message;
    let code = |r: Result<(), tonic::Status>| match r {
        Ok(()) => "Ok".to_string(),
        Err(s) => format!("{:?}", s.code()),
    };
    match rpc {
        "Submit" | "Submit(valid)" => {
            let spec = if rpc == "Submit" {
                g.spec()
            } else {
                g.valid_spec()
            };
            let request = pb::SubmitRequest { spec: Some(spec) };
            let size = request.encoded_len();
            let r = client.submit(request).await;
            if let Ok(reply) = &r {
                let id = reply.get_ref().job_id;
                if g.known.len() < 512 {
                    g.known.push(id);
                } else {
                    let i = g.rng.below(512) as usize;
                    g.known[i] = id;
                }
            }
            (code(r.map(|_| ())), size)
        }
        "ListJobs" | "ListJobs(targets)" => {
            let request = pb::ListJobsRequest {
                user: if g.rng.percent(50) {
                    String::new()
                } else {
                    g.text()
                },
                job_ids: (0..if g.rng.percent(5) {
                    1200
                } else {
                    g.rng.below(5)
                })
                    .map(|_| g.job_id())
                    .collect(),
                states: g.states(),
                // Every finished job is a full scan: now and then.
                all: g.rng.percent(5),
                targets: if rpc == "ListJobs" {
                    Vec::new()
                } else {
                    g.targets()
                },
            };
            let size = request.encoded_len();
            (code(client.list_jobs(request).await.map(|_| ())), size)
        }
        "GetJob" => {
            let r = g.job_ref();
            let size = r.encoded_len();
            (code(client.get_job(r).await.map(|_| ())), size)
        }
        "Hold" | "Release" | "Requeue" => {
            let r = g.job_ref();
            let size = r.encoded_len();
            let answer = match rpc {
                "Hold" => client.hold(r).await,
                "Release" => client.release(r).await,
                _ => client.requeue(r).await,
            };
            (code(answer.map(|_| ())), size)
        }
        "WatchJob" => {
            let r = g.job_ref();
            let size = r.encoded_len();
            let answer = match client.watch_job(r).await {
                Ok(stream) => {
                    // The first state, then the watch is dropped (a client going away).
                    let mut stream = stream.into_inner();
                    let _ = tokio::time::timeout(Duration::from_secs(2), stream.next()).await;
                    Ok(())
                }
                Err(s) => Err(s),
            };
            (code(answer), size)
        }
        "Cancel" => {
            let request = pb::CancelRequest {
                job_ids: (0..g.rng.below(4)).map(|_| g.job_id()).collect(),
                user: match g.rng.below(4) {
                    0 => "nobody".into(),
                    1 => g.text(),
                    _ => String::new(),
                },
                targets: g.targets(),
            };
            let size = request.encoded_len();
            (code(client.cancel(request).await.map(|_| ())), size)
        }
        "ListNodes" => (
            code(client.list_nodes(pb::ListNodesRequest {}).await.map(|_| ())),
            0,
        ),
        "Drain" => {
            let request = pb::DrainRequest {
                name: g.text(),
                reason: g.text(),
            };
            let size = request.encoded_len();
            (code(client.drain(request).await.map(|_| ())), size)
        }
        "Resume" => {
            let request = pb::NodeRef { name: g.text() };
            let size = request.encoded_len();
            (code(client.resume(request).await.map(|_| ())), size)
        }
        "DrainGpu" => {
            let request = pb::DrainGpuRequest {
                node: g.text(),
                gpus: g.gpu_indices(),
                reason: g.text(),
            };
            let size = request.encoded_len();
            (code(client.drain_gpu(request).await.map(|_| ())), size)
        }
        "ResumeGpu" => {
            let request = pb::ResumeGpuRequest {
                node: g.text(),
                gpus: g.gpu_indices(),
            };
            let size = request.encoded_len();
            (code(client.resume_gpu(request).await.map(|_| ())), size)
        }
        "Audit" => {
            let request = pb::AuditRequest {
                limit: g.small_number(),
            };
            (code(client.audit(request).await.map(|_| ())), 8)
        }
        "Shares" => (
            code(client.shares(pb::SharesRequest {}).await.map(|_| ())),
            0,
        ),
        "Report" | "ExportTrace" => {
            let request = pb::ReportRequest {
                from_ms: g.time(),
                to_ms: g.time(),
                by: if g.rng.percent(70) {
                    g.rng.pick(&["", "user", "tier", "account"]).to_string()
                } else {
                    g.text()
                },
            };
            let size = request.encoded_len();
            let answer = if rpc == "Report" {
                client.report(request).await.map(|_| ())
            } else {
                client.export_trace(request).await.map(|_| ())
            };
            (code(answer), size)
        }
        "ImportUsage" => {
            let n = if g.huge() { 100_000 } else { g.rng.below(10) };
            let runs = (0..n)
                .map(|_| pb::RunUsage {
                    job_id: g.job_id(),
                    account: if n > 10 { "a".into() } else { g.text() },
                    user: "nobody".into(),
                    start_ms: g.time(),
                    end_ms: g.time(),
                    gpus: g.small_number(),
                    ..Default::default()
                })
                .collect();
            let request = pb::ImportUsageRequest { runs };
            let size = request.encoded_len();
            (code(client.import_usage(request).await.map(|_| ())), size)
        }
        other => unreachable!("unknown RPC {other}"),
    }
}

/// Connects to schedd's socket as the tools do.
pub async fn connect(socket: &Path) -> anyhow::Result<Client> {
    ysub::client::connect(socket).await
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
