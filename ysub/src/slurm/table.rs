//! THE table of sbatch's options: for each, whether ysched translates it (and into what),
//! accepts it as harmless, or refuses it with what to do instead. `#SBATCH` lines, Slurm's
//! flags on ysub's command line, the `sbatch` front end and the user guide's "Coming from
//! Slurm" table all read it; nothing Slurm-specific is dropped without a word.
//!
//! The notes of refused options are printed in error messages, so they are plain text and say
//! what to do in ysched instead. The notes of the others appear only in the user guide.

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A flag: `--hold`. `--hold=x` is an error.
    Nothing,
    /// A value, joined (`--time=1:00`, `-t1:00`) or as the next word (`--time 1:00`).
    Value(&'static str),
    /// An optional value, joined only (`--exclusive`, `--exclusive=user`).
    Optional(&'static str),
}

/// What ysched does with an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// ysub's own option of this long name, with the value as given.
    Same(&'static str),
    /// Translated by [`super::translate`], which reads the value Slurm's way.
    Convert(Conversion),
    /// Accepted and changes nothing (the note says why that is right).
    Accept,
    /// Refused; the note says what to do instead.
    Refuse,
}

/// The options whose value ysched reads differently from ysub's own option, or which are
/// not ysub options at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// `[TYPE:]N` GPUs for the job.
    Gpus,
    /// `[TYPE:]N` GPUs on each node.
    GpusPerNode,
    /// `gpu[:TYPE][:N]`.
    Gres,
    /// Slurm's sizes, also `KB`, `MB`, `GB`, `TB`; `0` refused.
    Mem,
    /// `N` or `N-N`.
    Nodes,
    /// CPUs per task.
    CpusPerTask,
    /// Tasks in all.
    Ntasks,
    /// An output pattern, checked for the letters ysched expands.
    Output,
    /// An error pattern, likewise.
    Error,
    /// Features joined with `&` or `,`.
    Constraint,
    /// `--exclusive` alone; `=user|mcs|topo` refused.
    Exclusive,
    /// `--wrap COMMAND`: the command line only.
    Wrap,
}

/// One sbatch option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SbatchOption {
    /// The long name, without `--`.
    pub long: &'static str,
    /// The short letter, if it has one.
    pub short: Option<char>,
    pub takes: Takes,
    pub action: Action,
    /// For a refused option, what to do instead (plain text, printed in errors); else what the
    /// translation means (Markdown, for the user guide).
    pub note: &'static str,
}

const fn opt(
    long: &'static str,
    short: Option<char>,
    takes: Takes,
    action: Action,
    note: &'static str,
) -> SbatchOption {
    SbatchOption {
        long,
        short,
        takes,
        action,
        note,
    }
}

use Action::{Accept, Convert, Refuse, Same};
use Conversion as C;
use Takes::{Nothing, Optional, Value};

/// What refusing a CPU-layout option says: ysched counts CPUs per node.
const CPUS_PER_NODE: &str =
    "give -c/--cpus-per-task (ysched counts CPUs per node, times --ntasks-per-node tasks)";
/// What refusing a memory option says.
const MEM_PER_NODE: &str = "give --mem (memory per node) instead";
/// What refusing an option for a job's user says.
const AS_SUBMITTER: &str = "a job runs as the user who submits it: submit it as that user";
/// What refusing a binding option says.
const BIND_IN_JOB: &str = "ysched confines each job to its own CPUs, GPUs and memory (its cgroup); bind processes inside the job (taskset, numactl, your launcher)";
/// What refusing a cluster option says.
const ONE_CLUSTER: &str = "ysched schedules one cluster: submit on the cluster you want";
/// What refusing an option for help says.
const HELP: &str = "run ysub --help for ysub's options; the user guide's Coming from Slurm table lists every sbatch option";

/// Every sbatch option (Slurm 23.02 to 24.11), sorted by long name.
#[rustfmt::skip]
pub const SBATCH_OPTIONS: &[SbatchOption] = &[
    opt("account", Some('A'), Value("NAME"), Same("account"), "the account charged, as `ysub -A`"),
    opt("acctg-freq", None, Value("LIST"), Refuse, "ysched samples every job's usage itself; leave it out (see yctl report)"),
    opt("array", Some('a'), Value("INDICES"), Same("array"), "a job array, the same syntax (`0-99:4%8`); see [job arrays](#job-arrays)"),
    opt("batch", None, Value("FEATURES"), Refuse, "give the node features with -C/--constraint"),
    opt("bb", None, Value("SPEC"), Refuse, "ysched has no burst buffers: stage data in and out in the script"),
    opt("bbf", None, Value("FILE"), Refuse, "ysched has no burst buffers: stage data in and out in the script"),
    opt("begin", Some('b'), Value("TIME"), Same("begin"), "not started before TIME, in the submit host's local time: `now+1hour`, `now+30minutes`, `now+60` (seconds), `16:00[:30]` (its next occurrence), `2026-12-24[T16:00[:00]]`, `midnight`, `noon`, `teatime`, `today`, `tomorrow`; at most 365 days ahead"),
    opt("burst-buffer", None, Value("SPEC"), Refuse, "ysched has no burst buffers: stage data in and out in the script"),
    opt("chdir", Some('D'), Value("DIR"), Same("chdir"), "the working directory"),
    opt("cluster-constraint", None, Value("LIST"), Refuse, ONE_CLUSTER),
    opt("clusters", Some('M'), Value("NAMES"), Refuse, ONE_CLUSTER),
    opt("comment", None, Value("TEXT"), Same("comment"), "free text kept with the job, at most 1024 bytes"),
    opt("constraint", Some('C'), Value("LIST"), Convert(C::Constraint), "required node features: `a&b` and `a,b` need all of them; OR (`a|b`), brackets and counts (`a*2`) are refused"),
    opt("container", None, Value("PATH"), Refuse, "start the container from the script (apptainer exec, docker run, ...)"),
    opt("container-id", None, Value("ID"), Refuse, "start the container from the script (apptainer exec, docker run, ...)"),
    opt("contiguous", None, Nothing, Refuse, "ysched does not place by node adjacency: name the nodes with -w/--nodelist"),
    opt("core-spec", Some('S'), Value("N"), Refuse, "ysched reserves no cores per job for the system: leave it out"),
    opt("cores-per-socket", None, Value("N"), Refuse, CPUS_PER_NODE),
    opt("cpu-bind", None, Value("TYPE"), Refuse, BIND_IN_JOB),
    opt("cpu-freq", None, Value("FREQ"), Refuse, "ysched does not set CPU frequencies: leave it out"),
    opt("cpus-per-gpu", None, Value("N"), Refuse, "give -c/--cpus-per-task with the CPUs each task needs (GPUs per task times CPUs per GPU)"),
    opt("cpus-per-task", Some('c'), Value("N"), Convert(C::CpusPerTask), "CPUs per task: the job gets N × `--ntasks-per-node` CPUs on each node (N without it). On ysub's command line `-c` is CPUs per node"),
    opt("deadline", None, Value("TIME"), Refuse, "ysched has no deadlines: give -t/--time, and cancel the job (ycancel) if it has not started in time"),
    opt("delay-boot", None, Value("MINUTES"), Refuse, "ysched does not reboot nodes: leave it out"),
    opt("dependency", Some('d'), Value("LIST"), Same("dependency"), "`after`, `afterany`, `afterok`, `afternotok` (each `:ID[:ID...]`), `singleton`, joined by `,` or `?`; `aftercorr` and `afterburstbuffer` are refused; see [dependencies](#dependencies)"),
    opt("distribution", Some('m'), Value("LAYOUT"), Refuse, "ysched places a job by node; your launcher lays out its processes: leave it out"),
    opt("error", Some('e'), Value("PATTERN"), Convert(C::Error), "the standard error file; `%j %x %A %a %N %u %%` are expanded; other letters (`%J %s %t %n %b`) and padding (`%4a`) are refused"),
    opt("exclude", Some('x'), Value("HOSTS"), Same("exclude"), "never on these nodes; a host list such as `node[1-3,7]`"),
    opt("exclusive", None, Optional("user|mcs|topo"), Convert(C::Exclusive), "whole nodes: every GPU, CPU and all the memory of each of the job's nodes; `=user`, `=mcs` and `=topo` are refused"),
    opt("export", None, Value("ALL|NONE|VARS"), Same("export"), "the environment: `ALL`, `NONE`, `VAR[=value],...`, optionally after `ALL,` or `NONE,`"),
    opt("export-file", None, Value("FILE"), Refuse, "give the variables with --export=ALL,VAR=value,... or set them in the script"),
    opt("extra", None, Value("LIST"), Refuse, "give the node features with -C/--constraint"),
    opt("extra-node-info", Some('B'), Value("S:C:T"), Refuse, CPUS_PER_NODE),
    opt("get-user-env", None, Optional("TIMEOUT"), Refuse, "--export=ALL (the default) passes your environment; ysched loads no login environment: source it in the script"),
    opt("gid", None, Value("GROUP"), Refuse, AS_SUBMITTER),
    opt("gpu-bind", None, Value("TYPE"), Refuse, "ysched gives each job its GPUs by topology (CUDA_VISIBLE_DEVICES); assign GPUs to processes in your launcher"),
    opt("gpu-freq", None, Value("FREQ"), Refuse, "ysched does not set GPU clocks: leave it out"),
    opt("gpus", Some('G'), Value("[TYPE:]N"), Convert(C::Gpus), "GPUs for the whole job; `TYPE` becomes `--gpu-type`"),
    opt("gpus-per-node", None, Value("[TYPE:]N"), Convert(C::GpusPerNode), "N GPUs on each node (the job's GPUs are N × its nodes); `TYPE` becomes `--gpu-type`"),
    opt("gpus-per-socket", None, Value("N"), Refuse, "give --gpus-per-node (ysched chooses a node's GPUs by topology)"),
    opt("gpus-per-task", None, Value("N"), Refuse, "give --gpus-per-node (GPUs per task times --ntasks-per-node)"),
    opt("gres", None, Value("gpu[:TYPE][:N]"), Convert(C::Gres), "N GPUs (default 1) on each node, of model `TYPE`; resources other than `gpu` are refused"),
    opt("gres-flags", None, Value("FLAGS"), Refuse, "ysched always chooses GPUs by topology: leave it out"),
    opt("help", Some('h'), Nothing, Refuse, HELP),
    opt("het-group", None, Value("N"), Refuse, "ysched has no heterogeneous jobs: submit each part as a job of its own, linked with -d/--dependency"),
    opt("hint", None, Value("TYPE"), Refuse, CPUS_PER_NODE),
    opt("hold", Some('H'), Nothing, Same("hold"), "submitted held, until `yctl release`"),
    opt("ignore-pbs", None, Nothing, Accept, "ysched never reads `#PBS` lines"),
    opt("input", Some('i'), Value("PATTERN"), Refuse, "a job's standard input is /dev/null: redirect it in the script (command < file)"),
    opt("job-name", Some('J'), Value("NAME"), Same("job-name"), "the job name"),
    opt("kill-on-invalid-dep", None, Value("yes|no"), Refuse, "a job whose dependency can never be met stays PENDING (DependencyNeverSatisfied) unless the site sets scheduler.kill_invalid_depend: cancel it with ycancel"),
    opt("licenses", Some('L'), Value("LIST"), Refuse, "ysched has no licenses: ask your administrator for a node feature and give -C/--constraint"),
    opt("mail-type", None, Value("TYPES"), Same("mail-type"), "mail on these events, sent by sendmail on the scheduler host: `NONE`, `BEGIN`, `END`, `FAIL`, `REQUEUE`, `TIME_LIMIT`, `TIME_LIMIT_50`, `_80`, `_90`, `ARRAY_TASKS`, `INVALID_DEPEND`, `ALL`"),
    opt("mail-user", None, Value("ADDRESS"), Same("mail-user"), "where the mail goes (default: your user name)"),
    opt("mcs-label", None, Value("LABEL"), Refuse, "ysched has no MCS labels: leave it out"),
    opt("mem", None, Value("SIZE"), Convert(C::Mem), "memory per node: `K`, `M` (the default), `G`, `T`, and `KB`, `MB`, `GB`, `TB` as the same units; `--mem=0` (all of a node's) is refused: give `--exclusive`"),
    opt("mem-bind", None, Value("TYPE"), Refuse, BIND_IN_JOB),
    opt("mem-per-cpu", None, Value("SIZE"), Refuse, MEM_PER_NODE),
    opt("mem-per-gpu", None, Value("SIZE"), Refuse, MEM_PER_NODE),
    opt("mincpus", None, Value("N"), Same("cpus"), "CPUs per node"),
    opt("network", None, Value("TYPE"), Refuse, "give --interconnect nvlink, or -C/--constraint with your network's node feature"),
    opt("nice", None, Optional("N"), Refuse, "choose a lower tier with --qos or --partition (on ysub's command line, -p TIER)"),
    opt("no-kill", Some('k'), Optional("off"), Refuse, "ysched requeues a job whose node fails (--no-requeue ends it instead): leave it out"),
    opt("no-requeue", None, Nothing, Same("no-requeue"), "a preempted job ends PREEMPTED instead of going back to the queue"),
    opt("nodefile", Some('F'), Value("FILE"), Refuse, "give the names with -w/--nodelist (a host list such as node[1-4])"),
    opt("nodelist", Some('w'), Value("HOSTS"), Same("nodelist"), "exactly these nodes, a host list such as `node[1-3,7]`; the job's node count defaults to their number"),
    opt("nodes", Some('N'), Value("N[-N]"), Convert(C::Nodes), "the number of nodes; a range `MIN-MAX` only with MIN = MAX (ysched runs a job on exactly N nodes)"),
    opt("ntasks", Some('n'), Value("N"), Convert(C::Ntasks), "tasks in all, N = nodes × tasks per node: sets `--ntasks-per-node` to N ÷ nodes (with `--ntasks-per-node` and no `-N`, the nodes are N ÷ it); one task per node changes nothing"),
    opt("ntasks-per-core", None, Value("N"), Refuse, "give --ntasks-per-node"),
    opt("ntasks-per-gpu", None, Value("N"), Refuse, "give --ntasks-per-node with --gpus-per-node"),
    opt("ntasks-per-node", None, Value("N"), Same("ntasks-per-node"), "the processes your launcher starts on each node (`YS_NTASKS_PER_NODE`); ysched starts the script once per node"),
    opt("ntasks-per-socket", None, Value("N"), Refuse, "give --ntasks-per-node"),
    opt("oom-kill-step", None, Optional("0|1"), Refuse, "a job out of memory is stopped as a whole and ends OUT_OF_MEMORY: leave it out"),
    opt("open-mode", None, Value("append|truncate"), Same("open-mode"), "`append` appends to the output and error files instead of truncating them"),
    opt("output", Some('o'), Value("PATTERN"), Convert(C::Output), "the standard output file; `%j %x %A %a %N %u %%` are expanded; other letters (`%J %s %t %n %b`) and padding (`%4a`) are refused"),
    opt("overcommit", Some('O'), Nothing, Refuse, "ysched never overcommits CPUs: leave it out"),
    opt("oversubscribe", Some('s'), Nothing, Refuse, "ysched never shares a job's GPUs or CPUs with another: leave it out"),
    opt("parsable", None, Nothing, Same("parsable"), "print only the job id"),
    opt("partition", Some('p'), Value("NAME"), Same("partition"), "a tier name, or a name the site maps to a tier (`[slurm] partitions`). On ysub's command line `-p` is ysub's tier: write `--partition` there"),
    opt("power", None, Value("FLAGS"), Refuse, "ysched does not manage node power: leave it out"),
    opt("prefer", None, Value("LIST"), Refuse, "ysched has no soft preferences: give required features with -C/--constraint"),
    opt("priority", None, Value("N"), Refuse, "choose a tier with --qos or --partition (on ysub's command line, -p/--priority TIER)"),
    opt("profile", None, Value("TYPES"), Refuse, "ysched records every job's usage itself (yctl report, the metrics): leave it out"),
    opt("propagate", None, Optional("LIMITS"), Refuse, "ysched does not copy resource limits: set them with ulimit in the script"),
    opt("qos", Some('q'), Value("NAME"), Same("qos"), "a tier name, or a name the site maps to a tier (`[slurm] qos`)"),
    opt("quiet", Some('Q'), Nothing, Accept, "ysub prints only the job id line and errors anyway"),
    opt("reboot", None, Nothing, Refuse, "ysched does not reboot nodes: leave it out"),
    opt("requeue", None, Nothing, Same("requeue"), "the default (a preempted job goes back to the queue); cancels an earlier `--no-requeue`"),
    opt("reservation", None, Value("NAMES"), Refuse, "ysched has no reservations: ask your administrator for a tier, or give --begin"),
    opt("resv-ports", None, Optional("N"), Refuse, "ysched has no job steps: leave it out"),
    opt("segment", None, Value("N"), Refuse, "give -N/--nodes, and -w/--nodelist to choose the nodes"),
    opt("signal", None, Value("[B:]SIG[@SECS]"), Same("signal"), "the warning signal before the time limit; `R:` is refused"),
    opt("sockets-per-node", None, Value("N"), Refuse, CPUS_PER_NODE),
    opt("spread-job", None, Nothing, Refuse, "give -N/--nodes with the number of nodes to use"),
    opt("stepmgr", None, Nothing, Refuse, "ysched has no job steps: leave it out"),
    opt("switches", None, Value("N[@TIME]"), Refuse, "give --interconnect, or -C/--constraint with a node feature of your network"),
    opt("test-only", None, Nothing, Refuse, "submit with --hold and look with yq --start, then yctl release or ycancel"),
    opt("thread-spec", None, Value("N"), Refuse, "ysched reserves no threads per job for the system: leave it out"),
    opt("threads-per-core", None, Value("N"), Refuse, CPUS_PER_NODE),
    opt("time", Some('t'), Value("LIMIT"), Same("time"), "every Slurm form: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`, `UNLIMITED`, `INFINITE`; at most 365 days"),
    opt("time-min", None, Value("LIMIT"), Refuse, "give -t/--time: ysched backfills with the time limit"),
    opt("tmp", None, Value("SIZE"), Refuse, "ask your administrator for a node feature for local disk, and give -C/--constraint"),
    opt("tres-bind", None, Value("SPEC"), Refuse, BIND_IN_JOB),
    opt("tres-per-task", None, Value("LIST"), Refuse, "give --gpus-per-node, -c/--cpus-per-task and --ntasks-per-node"),
    opt("uid", None, Value("USER"), Refuse, AS_SUBMITTER),
    opt("usage", None, Nothing, Refuse, HELP),
    opt("use-min-nodes", None, Nothing, Refuse, "give -N/--nodes with one number"),
    opt("verbose", Some('v'), Nothing, Accept, "ysub has nothing more to say"),
    opt("version", Some('V'), Nothing, Refuse, "run ysub --version"),
    opt("wait", Some('W'), Nothing, Same("wait"), "wait for the job's end and exit with its exit code"),
    opt("wait-all-nodes", None, Value("0|1"), Accept, "a multi-node job starts on all its nodes at once"),
    opt("wckey", None, Value("KEY"), Same("wckey"), "kept as the comment `wckey=KEY` (unless `--comment` is given too)"),
    opt("wrap", None, Value("COMMAND"), Convert(C::Wrap), "run COMMAND with `/bin/sh`; on the command line only"),
    opt("x11", None, Optional("WHERE"), Refuse, "ysched runs batch jobs only: leave it out"),
];

/// The option of this long name (without `--`).
pub fn by_long(name: &str) -> Option<&'static SbatchOption> {
    SBATCH_OPTIONS.iter().find(|o| o.long == name)
}

/// The option of this short letter.
pub fn by_short(letter: char) -> Option<&'static SbatchOption> {
    SBATCH_OPTIONS.iter().find(|o| o.short == Some(letter))
}

impl SbatchOption {
    /// `-c/--cpus-per-task`, or `--mem` without a short letter: how messages name it.
    pub fn names(&self) -> String {
        match self.short {
            Some(letter) => format!("-{letter}/--{}", self.long),
            None => format!("--{}", self.long),
        }
    }
}
