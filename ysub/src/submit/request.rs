//! The job spec `ysub` sends, built from the options in effect and the script, with every
//! check that can be made before schedd is contacted (the same ones schedd makes, with the
//! same messages).

use super::options::OpenMode;
use super::{BatchScript, JobOptions};
use crate::script::{current_environment, exported_environment};
use anyhow::{anyhow, bail, Context, Result};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use ysched_common::limits::{MAX_CPUS, MAX_GPUS, MAX_NODES, MAX_NTASKS_PER_NODE};
use ysched_common::parse::{parse_job_mem_mib, parse_time_limit};
use ysched_common::text::check_printable;
use ysched_common::ArraySpec;
use ysched_common::Config;
use ysched_proto::JobSpec;

/// What a submission depends on besides its options: where and in what environment `ysub` runs.
#[derive(Debug, Clone)]
pub struct SubmitContext {
    pub cwd: PathBuf,
    /// The environment as the OS gives it: a variable that is not UTF-8 is refused only if it
    /// would be exported.
    pub env: Vec<(OsString, OsString)>,
    /// `scheduler.max_array_size`: `--array` indices must be below it (schedd checks it too).
    pub max_array_size: u32,
}

impl SubmitContext {
    pub fn from_process(config: &Config) -> Result<SubmitContext> {
        let cwd = std::env::current_dir().context("cannot determine the current directory")?;
        Ok(SubmitContext {
            cwd,
            env: current_environment().collect(),
            max_array_size: config.scheduler.max_array_size,
        })
    }
}

/// Builds the wire job spec, checking every option that can be checked here. Tier names and
/// GPU models are checked by schedd, which knows the cluster.
pub fn build_spec(
    options: &JobOptions,
    script: BatchScript,
    context: &SubmitContext,
) -> Result<JobSpec> {
    check_not_empty(options)?;
    let mem_mib = options
        .mem
        .as_deref()
        .map(parse_job_mem_mib)
        .transpose()?
        .unwrap_or(0);
    let time_limit_secs = match options.time.as_deref() {
        Some(limit) => parse_time_limit(limit)?.unwrap_or(0),
        None => 0,
    };
    let workdir = match options.chdir.as_deref() {
        Some(dir) => absolute_path(&context.cwd, dir),
        None => context.cwd.clone(),
    };
    let workdir = workdir.into_os_string().into_string().map_err(|dir| {
        anyhow!(
            "working directory {} is not valid UTF-8",
            PathBuf::from(dir).display()
        )
    })?;
    let env = exported_environment(
        options.export.as_deref().unwrap_or("ALL"),
        context.env.iter().cloned(),
    )
    .map_err(|e| anyhow!(e))?;
    let constraints: Vec<String> = options
        .constraint
        .iter()
        .flat_map(|c| c.split(','))
        .map(str::trim)
        .map(String::from)
        .collect();
    if constraints.iter().any(String::is_empty) {
        bail!("an empty feature in --constraint (give e.g. --constraint ib,nvme)");
    }
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    let name = options.job_name.clone().unwrap_or(script.default_name);
    // schedd refuses these too; checking here names the problem before anything is sent.
    ysched_common::limits::JOB_NAME
        .check_len(&name)
        .map_err(|e| anyhow!(e))?;
    check_printable("job name", &name).map_err(|e| anyhow!(e))?;
    check_printable("account", &text(&options.account)).map_err(|e| anyhow!(e))?;
    if let Some(array) = &options.array {
        ArraySpec::parse(array, context.max_array_size).map_err(|e| anyhow!(e))?;
    }
    check_slurm_texts(options)?;
    let shape = job_shape(options)?;
    let gpu_type = match (
        &options.gpu_type,
        options.gres.as_ref().and_then(|g| g.gpu_type.as_ref()),
    ) {
        (Some(given), Some(gres)) if !given.eq_ignore_ascii_case(gres) => {
            bail!("--gpu-type {given} and --gres gpu:{gres} name different GPU models: give one")
        }
        (Some(given), _) => given.clone(),
        (None, Some(gres)) => gres.clone(),
        (None, None) => String::new(),
    };
    // Slurm's --wckey has no place of its own: it is kept as the comment, unless one is given.
    let comment = match (&options.comment, &options.wckey) {
        (Some(comment), _) => comment.clone(),
        (None, Some(key)) => format!("wckey={key}"),
        (None, None) => String::new(),
    };

    Ok(JobSpec {
        name,
        tier: text(&options.tier),
        gpus: shape.gpus,
        gpu_type,
        cpus: shape.cpus,
        mem_mib,
        time_limit_secs,
        grace_secs: options.grace,
        checkpoint_dir: text(&options.checkpoint_dir),
        account: text(&options.account),
        // Relative paths stay relative: the agent resolves them against the working directory.
        stdout_path: text(&options.output),
        stderr_path: text(&options.error),
        workdir,
        script: script.contents,
        args: script.args,
        env,
        hold: options.hold,
        nodes: shape.nodes,
        no_requeue: options.no_requeue,
        interconnect: text(&options.interconnect),
        constraints,
        warn_signal: options.signal.map(|w| ysched_proto::WarnSignal {
            signal: w.signal,
            secs: w.secs,
            batch_only: w.batch_only,
        }),
        array: text(&options.array),
        dependency: text(&options.dependency),
        nodelist: options.nodelist.clone().map(|n| n.0).unwrap_or_default(),
        exclude: options.exclude.clone().map(|n| n.0).unwrap_or_default(),
        exclusive: options.exclusive,
        begin_unix_secs: options.begin.unwrap_or(0),
        mail_types: options.mail_type.clone().map(|m| m.0).unwrap_or_default(),
        mail_user: text(&options.mail_user),
        ntasks_per_node: shape.ntasks_per_node,
        partition: text(&options.partition),
        qos: text(&options.qos),
        slurm_env: options.slurm_env,
        open_append: options.open_mode == Some(OpenMode::Append),
        comment,
    })
}

/// The counts a job's options come to once every source is merged: GPUs however they were
/// given (`-G` for the job, `--gpus-per-node` or `--gres` per node), CPUs per node (ysub's
/// `-c`, or Slurm's CPUs per task times the tasks per node), and tasks per node (given, or
/// Slurm's `--ntasks` over the nodes). Zero means "not given", as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct JobShape {
    nodes: u32,
    gpus: u32,
    cpus: u32,
    ntasks_per_node: u32,
}

fn job_shape(options: &JobOptions) -> Result<JobShape> {
    let gpu_forms = [
        options.gpus.is_some(),
        options.gpus_per_node.is_some(),
        options.gres.is_some(),
    ];
    if gpu_forms.iter().filter(|given| **given).count() > 1 {
        bail!("give the GPUs once: -G/--gpus (for the job), --gpus-per-node or --gres (per node)");
    }
    let listed = options
        .nodelist
        .as_ref()
        .map(|names| names.0.len() as u32)
        .filter(|n| *n > 0);
    let mut nodes = options.nodes.or(listed);
    let mut ntasks_per_node = options.ntasks_per_node;
    if let Some(tasks) = options.ntasks {
        match (nodes, ntasks_per_node) {
            (Some(n), Some(per_node)) if u64::from(n) * u64::from(per_node) != u64::from(tasks) => {
                bail!(
                    "--ntasks {tasks} is not --nodes {n} × --ntasks-per-node {per_node}: \
                     ysched starts the same number of tasks on every node; give \
                     --ntasks-per-node alone"
                )
            }
            (Some(_), Some(_)) => {}
            (None, Some(per_node)) => {
                if tasks % per_node != 0 {
                    bail!(
                        "--ntasks {tasks} is not a multiple of --ntasks-per-node {per_node}: \
                         ysched starts the same number of tasks on every node"
                    );
                }
                let count = tasks / per_node;
                if count > MAX_NODES {
                    bail!(
                        "--ntasks {tasks} over --ntasks-per-node {per_node} makes {count} \
                         nodes; the most is {MAX_NODES}"
                    );
                }
                nodes = Some(count);
            }
            (n, None) => {
                let n = n.unwrap_or(1);
                if tasks % n != 0 {
                    bail!(
                        "--ntasks {tasks} does not divide over {n} nodes: ysched starts the \
                         same number of tasks on every node; give --ntasks-per-node"
                    );
                }
                // One task per node is how every job runs: nothing to ask for.
                let per_node = tasks / n;
                if per_node > MAX_NTASKS_PER_NODE {
                    bail!(
                        "--ntasks {tasks} over {n} nodes is {per_node} tasks per node; the \
                         most is {MAX_NTASKS_PER_NODE}"
                    );
                }
                ntasks_per_node = (per_node > 1).then_some(per_node);
            }
        }
    }
    let node_count = nodes.unwrap_or(1);
    let per_node_gpus = options
        .gpus_per_node
        .or(options.gres.as_ref().map(|g| g.per_node));
    let gpus = match (options.gpus, per_node_gpus) {
        (Some(total), _) => total,
        (None, Some(per_node)) => {
            let total = u64::from(per_node) * u64::from(node_count);
            if total > u64::from(MAX_GPUS) {
                bail!(
                    "{per_node} GPUs per node on {node_count} nodes is {total} GPUs; the most \
                     is {MAX_GPUS}"
                );
            }
            total as u32
        }
        (None, None) => 0,
    };
    let cpus = match (options.cpus, options.cpus_per_task) {
        (Some(per_node), _) => per_node,
        (None, Some(per_task)) => {
            let tasks = ntasks_per_node.unwrap_or(1);
            let total = u64::from(per_task) * u64::from(tasks);
            if total > u64::from(MAX_CPUS) {
                bail!(
                    "--cpus-per-task {per_task} × {tasks} tasks per node is {total} CPUs per \
                     node; the most is {MAX_CPUS}"
                );
            }
            total as u32
        }
        (None, None) => 0,
    };
    Ok(JobShape {
        nodes: nodes.unwrap_or(0),
        gpus,
        cpus,
        ntasks_per_node: ntasks_per_node.unwrap_or(0),
    })
}

/// The texts of Slurm's options: printable and within the limits schedd applies
/// (`ysched_common::limits`: partition, QOS, mail user, comment, node names), checked before
/// anything is sent.
fn check_slurm_texts(options: &JobOptions) -> Result<()> {
    use ysched_common::limits::{self, Limit};
    let bounded = |what: &str, value: &Option<String>, limit: &Limit| -> Result<()> {
        let Some(value) = value else { return Ok(()) };
        limit.check_len(value).map_err(|e| anyhow!(e))?;
        check_printable(what, value).map_err(|e| anyhow!(e))
    };
    bounded("partition", &options.partition, &limits::PARTITION)?;
    bounded("QOS", &options.qos, &limits::QOS)?;
    bounded("mail address", &options.mail_user, &limits::MAIL_USER)?;
    if let Some(mail_user) = &options.mail_user {
        ysched_common::mail_address::check_mail_user(mail_user.trim()).map_err(|e| anyhow!(e))?;
    }
    bounded("comment", &options.comment, &limits::COMMENT)?;
    if let Some(key) = &options.wckey {
        // Sent as the comment `wckey=KEY`.
        limits::COMMENT
            .check_len(&format!("wckey={key}"))
            .map_err(|e| anyhow!(e))?;
        check_printable("wckey", key).map_err(|e| anyhow!(e))?;
    }
    for names in [&options.nodelist, &options.exclude].into_iter().flatten() {
        for name in &names.0 {
            ysched_common::limits::NODE_NAME
                .check_len(name)
                .map_err(|e| anyhow!(e))?;
            check_printable("node name", name).map_err(|e| anyhow!(e))?;
        }
    }
    Ok(())
}

/// Refuses options given with an empty value (`-p ''`, `-D ''`): each would silently mean
/// something else (the default tier, the current directory) than what was written.
fn check_not_empty(options: &JobOptions) -> Result<()> {
    let given = [
        ("-J/--job-name", &options.job_name, "a job name"),
        (
            "-p/--priority",
            &options.tier,
            "a tier, or leave -p out for the default tier",
        ),
        (
            "--gpu-type",
            &options.gpu_type,
            "a GPU model, or leave --gpu-type out for any",
        ),
        (
            "-A/--account",
            &options.account,
            "an account, or leave -A out for your primary group",
        ),
        (
            "-D/--chdir",
            &options.chdir,
            "a directory, or leave -D out for the current one",
        ),
        ("-o/--output", &options.output, "a file"),
        ("-e/--error", &options.error, "a file"),
        ("--checkpoint-dir", &options.checkpoint_dir, "a directory"),
        ("--interconnect", &options.interconnect, "nvlink"),
        ("--mem", &options.mem, "a size such as 16G"),
        ("-t/--time", &options.time, "a time limit such as 1:00:00"),
        ("--array", &options.array, "indices such as 0-99"),
        ("--dependency", &options.dependency, "e.g. afterok:12"),
        (
            "--mail-user",
            &options.mail_user,
            "an address, or leave --mail-user out for your user name",
        ),
        (
            "--partition",
            &options.partition,
            "a partition, or leave --partition out",
        ),
        ("--qos", &options.qos, "a QOS, or leave --qos out"),
        (
            "--comment",
            &options.comment,
            "some text, or leave --comment out",
        ),
        ("--wckey", &options.wckey, "a key, or leave --wckey out"),
    ];
    for (flag, value, expected) in given {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            bail!("{flag} is empty: give {expected}");
        }
    }
    if options.constraint.iter().any(|c| c.trim().is_empty()) {
        bail!("--constraint is empty: give a feature, e.g. --constraint ib");
    }
    Ok(())
}

/// `dir` made absolute against `cwd`, without `.` components. Symlinks and `..` are kept: the
/// directory need not exist here, only on the node.
fn absolute_path(cwd: &Path, dir: &str) -> PathBuf {
    cwd.join(dir)
        .components()
        .filter(|c| *c != Component::CurDir)
        .collect()
}

/// What a job carries to its node: each text against its limit, the script and the
/// environment (names and values, plus 2 bytes each) against `scheduler.max_script_mib`, and
/// the launch as a whole (`ysched_common::limits::check_submit`): the check schedd makes,
/// made before the request is sent, with the same message.
pub fn check_payload_size(spec: &JobSpec, config: &Config) -> Result<()> {
    let request = ysched_common::SubmitRequest::from(spec.clone());
    ysched_common::limits::check_submit(&request, config).map_err(|e| anyhow::anyhow!(e))
}
