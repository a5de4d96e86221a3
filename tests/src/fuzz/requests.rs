//! The fuzz's request generators: edge-length texts, odd Unicode, names, ranges, numbers, specs.

use super::Rng;
use ysched_proto as pb;

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
    pub(super) fn begin(&mut self) {
        self.huge_allowed = self.rng.percent(self.huge_percent);
    }

    /// Whether to make a huge part now (at most one per request).
    pub(super) fn huge(&mut self) -> bool {
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

    pub(super) fn job_id(&mut self) -> u64 {
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

    pub(super) fn targets(&mut self) -> Vec<String> {
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

    /// A `yctl update` with every field arbitrary (each given or not).
    pub(super) fn update(&mut self) -> pb::UpdateJobRequest {
        let tiers = ["low", "medium", "high", "critical", "gpu", ""];
        pb::UpdateJobRequest {
            job: Some(self.job_ref()),
            tier: self.rng.percent(40).then(|| {
                if self.rng.percent(70) {
                    self.rng.pick(&tiers).to_string()
                } else {
                    self.text()
                }
            }),
            time_limit_secs: self.rng.percent(40).then(|| self.big_number()),
            name: self.rng.percent(30).then(|| self.text()),
            dependency: self.rng.percent(30).then(|| self.dependency()),
            hold: self.rng.percent(30).then(|| self.rng.percent(50)),
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
    pub(super) fn gpu_indices(&mut self) -> Vec<u32> {
        let n = match self.rng.below(8) {
            0 => 0,
            1 => 10_000 + self.rng.below(100_000),
            _ => 1 + self.rng.below(4),
        };
        (0..n).map(|_| self.small_number()).collect()
    }

    pub(super) fn small_number(&mut self) -> u32 {
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
            nodelist: self.node_names(),
            exclude: self.node_names(),
            exclusive: self.rng.percent(20),
            begin_unix_secs: self.begin_time(),
            mail_types: self.mail_types(),
            mail_user: match self.rng.below(4) {
                0 => "alice@example.org".into(),
                1 => self.text(),
                _ => String::new(),
            },
            ntasks_per_node: if self.rng.percent(70) {
                0
            } else {
                self.small_number()
            },
            partition: self.slurm_name(),
            qos: self.slurm_name(),
            slurm_env: self.rng.percent(20),
            open_append: self.rng.percent(20),
            comment: match self.rng.below(5) {
                0 => self.text(),
                1 if self.huge() => self.ascii(1 << 20),
                2 => "wckey=fuzz".into(),
                _ => String::new(),
            },
        }
    }

    /// `-w` or `-x`: mostly nothing; names a cluster may have, typos, hostile text, duplicates,
    /// and now and then a list far over its limit.
    fn node_names(&mut self) -> Vec<String> {
        match self.rng.below(10) {
            0 => vec!["node0".into()],
            1 => vec!["node0".into(), "node1".into(), "node0".into()],
            2 => (0..1 + self.rng.below(4)).map(|_| self.text()).collect(),
            3 if self.huge() => (0..20_000).map(|i| format!("n{i}")).collect(),
            4 => vec!["n[1-3]".into(), "gpu9".into()],
            _ => Vec::new(),
        }
    }

    /// `--begin`: mostly none; the past, soon, the far future, beyond any date.
    fn begin_time(&mut self) -> u64 {
        match self.rng.below(8) {
            0 => 1,
            1 => 4_000_000_000,
            2 => u64::MAX - self.rng.below(2),
            3 => self.rng.next_u64(),
            _ => 0,
        }
    }

    /// `--mail-type`: known types, `ALL`, `NONE` with others, unknown and hostile words, and
    /// now and then more than the limit.
    fn mail_types(&mut self) -> Vec<String> {
        const TYPES: &[&str] = &[
            "BEGIN",
            "END",
            "fail",
            "ALL",
            "NONE",
            "ARRAY_TASKS",
            "TIME_LIMIT_80",
            "STAGE_OUT",
        ];
        match self.rng.below(6) {
            0 => (0..1 + self.rng.below(3))
                .map(|_| self.rng.pick(TYPES).to_string())
                .collect(),
            1 => vec![self.text()],
            2 if self.huge() => vec!["END".to_string(); 100],
            _ => Vec::new(),
        }
    }

    /// Slurm's `--partition` or `--qos`: none, a tier's name, a typical mapped name, text.
    fn slurm_name(&mut self) -> String {
        match self.rng.below(6) {
            0 => "gpu".into(),
            1 => "low".into(),
            2 => self.text(),
            _ => String::new(),
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

    pub(super) fn job_ref(&mut self) -> pb::JobRef {
        pb::JobRef {
            job_id: self.job_id(),
            target: if self.rng.percent(70) {
                self.target()
            } else {
                String::new()
            },
        }
    }

    pub(super) fn states(&mut self) -> Vec<String> {
        let names = ["PD", "R", "CD", "CANCELLED", "all", "running"];
        match self.rng.below(4) {
            0 => Vec::new(),
            1 => (0..self.rng.below(100)).map(|_| "PD".into()).collect(),
            2 => (0..1 + self.rng.below(4)).map(|_| self.text()).collect(),
            _ => vec![self.rng.pick(&names).to_string()],
        }
    }

    pub(super) fn time(&mut self) -> i64 {
        match self.rng.below(5) {
            0 => 0,
            1 => i64::MIN,
            2 => i64::MAX,
            3 => self.rng.next_u64() as i64,
            _ => 1_700_000_000_000 + self.rng.below(1 << 40) as i64,
        }
    }
}
