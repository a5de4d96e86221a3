//! The largest value of each number a job asks for (GPUs, nodes, CPUs, tasks per node, memory,
//! time), in one table ([`MAXIMA`]), with the one refusal the CLIs' parsers and `schedd` both
//! give: `--gpus 100001 exceeds the maximum of 100000`, `memory size '1025T' exceeds the
//! maximum of 1024T (1 PiB)`.

/// The most GPUs one job may ask for (`--gpus`, over all its nodes).
pub const MAX_GPUS: u32 = 100_000;
/// The most nodes one job may span (`--nodes`).
pub const MAX_NODES: u32 = 10_000;
/// The most CPUs per node one job may ask for (`--cpus`).
pub const MAX_CPUS: u32 = 100_000;
/// The most processes per node `--ntasks-per-node` may announce.
pub const MAX_NTASKS_PER_NODE: u32 = 10_000;
/// The largest `--mem`: 1024T (1 PiB) per node, in MiB.
pub const MAX_MEM_MIB: u64 = 1 << 30;
/// The longest time limit a job may have: 365 days. Longer is refused rather than stored, so
/// no time arithmetic downstream can overflow.
pub const MAX_TIME_LIMIT_SECS: u64 = 365 * 86_400;
/// The most seconds `--signal`'s `@SECS` may be (sbatch's bound); checked by
/// [`crate::WarnSignal::check`], in the CLIs and `schedd` alike.
pub const MAX_WARN_SECS: u32 = 65_535;
/// The largest `scheduler.max_array_size` a configuration may set: any array index at or
/// above it is refused whatever the configuration says.
pub const MAX_ARRAY_SIZE_CEILING: u32 = 4_000_001;

/// How a number is written in a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// As a plain number, unquoted: `--gpus 100001`.
    Plain,
    /// As given, quoted; a size `schedd` gets in MiB is written `<n>M`: `'1025T'`.
    Mib,
    /// As given, quoted; a time `schedd` gets in seconds is written as Slurm's `D-HH:MM:SS`.
    Seconds,
}

/// One number's maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maximum {
    /// What is limited, as refusals name it: `--gpus`, `memory size`.
    pub what: &'static str,
    /// Where users give it (for the docs).
    pub given_by: &'static str,
    pub max: u64,
    /// The maximum as refusals and the docs write it: `100000`, `1024T (1 PiB)` (a plain
    /// number's is its `max`, which a unit test checks).
    pub shown: &'static str,
    pub written: Written,
}

impl Maximum {
    /// The refusal of `given` (the value as the user wrote it): `--gpus 100001 exceeds the
    /// maximum of 100000`, `time limit '366-00' exceeds the maximum of 365 days (365-00:00:00)`.
    pub fn refusal(&self, given: &str) -> String {
        match self.written {
            Written::Plain => over_maximum(self.what, given, self.shown),
            Written::Mib | Written::Seconds => {
                over_maximum(self.what, &format!("'{given}'"), self.shown)
            }
        }
    }

    /// Refuses `n` (as `schedd` gets it: MiB, seconds) over the maximum, with the refusal the
    /// CLI gives for the same value written the user's way.
    pub fn check(&self, n: u64) -> Result<(), String> {
        if n <= self.max {
            return Ok(());
        }
        let given = match self.written {
            Written::Plain => n.to_string(),
            Written::Mib => format!("{n}M"),
            Written::Seconds => crate::time::format_elapsed(n),
        };
        Err(self.refusal(&given))
    }
}

/// The one form of a number past its maximum: `{what} {given} exceeds the maximum of {max}`
/// (also for an option of its own that shares a maximum: `--gres 100001 ...`).
pub fn over_maximum(what: &str, given: &str, max: &str) -> String {
    format!("{what} {given} exceeds the maximum of {max}")
}

const fn plain(
    what: &'static str,
    given_by: &'static str,
    max: u32,
    shown: &'static str,
) -> Maximum {
    Maximum {
        what,
        given_by,
        max: max as u64,
        shown,
        written: Written::Plain,
    }
}

pub const GPUS: Maximum = plain(
    "--gpus",
    "ysub -G/--gpus (over all nodes)",
    MAX_GPUS,
    "100000",
);
pub const NODES: Maximum = plain("--nodes", "ysub -N/--nodes", MAX_NODES, "10000");
pub const CPUS: Maximum = plain("--cpus", "ysub -c/--cpus (per node)", MAX_CPUS, "100000");
pub const NTASKS_PER_NODE: Maximum = plain(
    "--ntasks-per-node",
    "ysub --ntasks-per-node",
    MAX_NTASKS_PER_NODE,
    "10000",
);
pub const MEM: Maximum = Maximum {
    what: "memory size",
    given_by: "ysub --mem (per node)",
    max: MAX_MEM_MIB,
    shown: "1024T (1 PiB)",
    written: Written::Mib,
};
pub const TIME_LIMIT: Maximum = Maximum {
    what: "time limit",
    given_by: "ysub -t/--time, yctl update TimeLimit=",
    max: MAX_TIME_LIMIT_SECS,
    shown: "365 days (365-00:00:00)",
    written: Written::Seconds,
};

/// Every number's maximum, in the order of the admin guide's table.
pub const MAXIMA: &[Maximum] = &[GPUS, NODES, CPUS, NTASKS_PER_NODE, MEM, TIME_LIMIT];
