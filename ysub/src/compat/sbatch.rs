//! `sbatch`: submits a batch script as `ysub` does, from Slurm's flags and `#SBATCH` lines,
//! printing `Submitted batch job ID` (or the id alone with `--parsable`). Its jobs always get
//! Slurm's `SLURM_*` variables: whoever calls sbatch reads them.
//!
//! Slurm's options become ysub's through [`translate`]. Until ysub reads `#SBATCH` lines
//! and Slurm's flags itself (the Slurm front end of issue 22), this module holds a
//! translation of its own, [`interim`], for what submitit and the common pipelines write;
//! anything else is refused naming the option.

use crate::client::{self, reply_to};
use crate::submit::{build_spec, check_payload_size, resolve, SubmitContext, YsubCli};
use anyhow::{anyhow, bail, Result};
use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;
use ysched_common::Config;
use ysched_proto::SubmitRequest;

/// What sbatch's command line becomes: ysub's command line, and what ysub cannot say yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translated {
    /// ysub's arguments (options, then the script and its arguments).
    pub ysub_args: Vec<String>,
    /// `--parsable`: print the id alone.
    pub parsable: bool,
    /// `--open-mode=append`.
    pub open_append: bool,
    /// `--ntasks-per-node`; 0: not given.
    pub ntasks_per_node: u32,
}

/// sbatch's arguments (without its name) as ysub's: the one switch point between the interim
/// translation and ysub's own.
pub fn translate(args: &[String]) -> Result<Translated> {
    interim::translate(args)
}

/// The `sbatch` command.
pub fn main(args: Vec<OsString>) -> ExitCode {
    if let Err(message) = crate::args::check_utf8_args(&args) {
        eprintln!("sbatch: error: {message}");
        return ExitCode::FAILURE;
    }
    let args: Vec<String> = args
        .into_iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if matches!(args.first().map(String::as_str), Some("-h" | "--help")) {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    client::run_tool("sbatch", || run(args))
}

const HELP: &str = "\
Usage: sbatch [OPTIONS] SCRIPT [ARGS]...
       sbatch [OPTIONS] --wrap COMMAND

Slurm's sbatch on ysched: submits SCRIPT with Slurm's options (on the command line and in
#SBATCH lines), translated into ysub's. Prints `Submitted batch job ID`, or the id alone with
--parsable. The job sees Slurm's SLURM_* variables. See docs/slurm-compat.md.
";

pub async fn run(args: Vec<String>) -> Result<ExitCode> {
    let translated = translate(&args)?;
    let mut ysub_args = vec!["sbatch".to_string()];
    ysub_args.extend(translated.ysub_args.iter().cloned());
    let cli = YsubCli::try_parse_from(&ysub_args)
        .map_err(|e| anyhow!("{}", crate::args::clap_error_message(&e)))?;
    let (options, script) = resolve(cli)?;
    let config = Config::load()?;
    let mut spec = build_spec(&options, script, &SubmitContext::from_process(&config)?)?;
    // Slurm-minded jobs: the variables, and what ysub has no flag for yet.
    spec.slurm_env = true;
    spec.open_append |= translated.open_append;
    if translated.ntasks_per_node > 0 {
        spec.ntasks_per_node = translated.ntasks_per_node;
    }
    // sbatch itself sets it (noded cannot know where the job was submitted from).
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        spec.env
            .insert("SLURM_SUBMIT_HOST".into(), host.trim().to_string());
    }
    check_payload_size(&spec, &config)?;
    let socket = client::socket_path(&config);
    let mut client = client::connect(&socket).await?;
    let submitted = reply_to(
        "submit",
        client.submit(SubmitRequest { spec: Some(spec) }).await,
    )?;
    let job_id = submitted.job_id;
    if translated.parsable || options.parsable {
        println!("{job_id}");
    } else {
        println!("Submitted batch job {job_id}");
    }
    if !options.wait {
        return Ok(ExitCode::SUCCESS);
    }
    // `-W/--wait`: sbatch exits with the job's exit code (an array's highest).
    let is_array = submitted.array_task_count > 0;
    let count = submitted.array_task_count.max(1);
    let jobs = crate::submit::wait::wait_for_jobs(client, &socket, job_id, count, is_array).await?;
    let code = if is_array {
        crate::submit::array_exit_code(&jobs)
    } else {
        jobs.first().map_or(1, crate::submit::wait_exit_code)
    };
    Ok(ExitCode::from(code))
}

/// The translation sbatch uses until ysub reads Slurm's options itself: Slurm's flags and
/// the script's `#SBATCH` lines (first, so the command line wins) as ysub's options.
pub mod interim {
    use super::*;

    /// How an sbatch option is carried over.
    #[derive(Clone, Copy)]
    enum How {
        /// ysub's option of this name, value as given (`None`: a flag).
        Same(&'static str, bool),
        /// `--mem`: Slurm's `4GB` is ysub's `4G`.
        Mem,
        /// `--gpus-per-node N`: N GPUs on each node.
        GpusPerNode,
        /// `--gres gpu[:TYPE][:N]`.
        Gres,
        /// `--open-mode append|truncate`.
        OpenMode,
        /// `--ntasks-per-node N`.
        TasksPerNode,
        /// `--parsable`.
        Parsable,
        /// Accepted, nothing to do: `--requeue` (the default), `--wckey` (kept by nobody until
        /// ysched has comments).
        Ignore(bool),
    }

    /// Slurm's option names (long, short) and how each is carried over.
    const OPTIONS: &[(&str, Option<char>, How)] = &[
        ("job-name", Some('J'), How::Same("--job-name", true)),
        ("output", Some('o'), How::Same("--output", true)),
        ("error", Some('e'), How::Same("--error", true)),
        ("chdir", Some('D'), How::Same("--chdir", true)),
        ("account", Some('A'), How::Same("--account", true)),
        ("time", Some('t'), How::Same("--time", true)),
        ("nodes", Some('N'), How::Same("--nodes", true)),
        ("array", Some('a'), How::Same("--array", true)),
        ("dependency", Some('d'), How::Same("--dependency", true)),
        ("export", None, How::Same("--export", true)),
        ("hold", Some('H'), How::Same("--hold", false)),
        ("constraint", Some('C'), How::Same("--constraint", true)),
        ("signal", None, How::Same("--signal", true)),
        ("no-requeue", None, How::Same("--no-requeue", false)),
        ("cpus-per-task", Some('c'), How::Same("--cpus", true)),
        ("gpus", Some('G'), How::Same("--gpus", true)),
        ("wait", Some('W'), How::Same("--wait", false)),
        ("wrap", None, How::Same("--wrap", true)),
        ("mem", None, How::Mem),
        ("gpus-per-node", None, How::GpusPerNode),
        ("gres", None, How::Gres),
        ("open-mode", None, How::OpenMode),
        ("ntasks-per-node", None, How::TasksPerNode),
        ("parsable", None, How::Parsable),
        ("requeue", None, How::Ignore(false)),
        ("wckey", None, How::Ignore(true)),
    ];

    /// What the options say besides ysub's words.
    #[derive(Default)]
    struct State {
        out: Translated,
        nodes: u32,
        gpus_per_node: Option<u32>,
        gpu_type: Option<String>,
    }

    /// Translates `args` (sbatch's command line); the script's `#SBATCH` lines come first.
    pub fn translate(args: &[String]) -> Result<Translated> {
        let mut state = State::default();
        let rest = options(args, &mut state, "")?;
        let mut command_line = std::mem::take(&mut state.out.ysub_args);
        if let Some(script) = rest.first() {
            let contents = std::fs::read_to_string(script)
                .map_err(|e| anyhow!("cannot read batch script '{script}': {e}"))?;
            for (line, words) in sbatch_lines(&contents)? {
                let left = options(&words, &mut state, &format!("{script}: line {line}: "))?;
                if !left.is_empty() {
                    bail!(
                        "{script}: line {line}: unexpected word '{}' in #SBATCH",
                        left[0]
                    );
                }
            }
        }
        // Directives first, the command line after: the command line wins.
        let mut ysub_args = std::mem::take(&mut state.out.ysub_args);
        ysub_args.append(&mut command_line);
        if let Some(per_node) = state.gpus_per_node {
            ysub_args.push(format!("--gpus={}", per_node * state.nodes.max(1)));
        }
        if let Some(model) = state.gpu_type.take() {
            ysub_args.push(format!("--gpu-type={model}"));
        }
        // clap takes each of ysub's options once: the last one given wins, as in Slurm
        // (constraints add up).
        let flag = |arg: &String| arg.split('=').next().unwrap_or_default().to_string();
        let mut seen = std::collections::HashSet::new();
        let mut kept: Vec<String> = Vec::with_capacity(ysub_args.len());
        for arg in ysub_args.into_iter().rev() {
            if flag(&arg) == "--constraint" || seen.insert(flag(&arg)) {
                kept.push(arg);
            }
        }
        kept.reverse();
        let mut ysub_args = kept;
        if !rest.is_empty() {
            ysub_args.push("--".into());
            ysub_args.extend(rest.iter().cloned());
        }
        state.out.ysub_args = ysub_args;
        Ok(state.out)
    }

    /// Reads options up to the first word that is not one (the script), returning the rest.
    fn options(args: &[String], state: &mut State, at: &str) -> Result<Vec<String>> {
        let mut words = args.iter();
        while let Some(word) = words.next() {
            if word == "--" {
                return Ok(words.cloned().collect());
            }
            let (name, inline): (String, Option<String>) = if let Some(long) =
                word.strip_prefix("--")
            {
                match long.split_once('=') {
                    Some((n, v)) => (n.to_string(), Some(v.to_string())),
                    None => (long.to_string(), None),
                }
            } else if let Some(short) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
                let mut chars = short.chars();
                let letter = chars.next().unwrap_or('-');
                let Some((long, _, _)) = OPTIONS.iter().find(|(_, s, _)| *s == Some(letter)) else {
                    bail!("{at}option -{letter} is not supported by this sbatch (see docs/slurm-compat.md)");
                };
                let rest: String = chars.collect();
                (long.to_string(), (!rest.is_empty()).then_some(rest))
            } else {
                let mut rest = vec![word.clone()];
                rest.extend(words.cloned());
                return Ok(rest);
            };
            let Some((long, _, how)) = OPTIONS.iter().find(|(l, _, _)| *l == name) else {
                bail!("{at}option --{name} is not supported by this sbatch (see docs/slurm-compat.md)");
            };
            let takes_value = !matches!(
                how,
                How::Same(_, false) | How::Parsable | How::Ignore(false)
            );
            let value = match (takes_value, inline) {
                (false, Some(_)) => bail!("{at}option --{long} takes no value"),
                (false, None) => String::new(),
                (true, Some(v)) => v,
                (true, None) => words
                    .next()
                    .cloned()
                    .ok_or_else(|| anyhow!("{at}option --{long} needs a value"))?,
            };
            apply(*how, long, value, state, at)?;
        }
        Ok(Vec::new())
    }

    fn number(at: &str, long: &str, value: &str) -> Result<u32> {
        value
            .trim()
            .parse()
            .map_err(|_| anyhow!("{at}--{long}: '{value}' is not a whole number"))
    }

    fn apply(how: How, long: &str, value: String, state: &mut State, at: &str) -> Result<()> {
        let args = &mut state.out.ysub_args;
        match how {
            How::Same(flag, false) => args.push(flag.to_string()),
            How::Same(flag, true) => {
                if flag == "--nodes" {
                    state.nodes = number(at, long, &value)?;
                }
                args.push(format!("{flag}={value}"));
            }
            How::Mem => {
                let value = value.trim();
                let size = value
                    .strip_suffix(['B', 'b'])
                    .filter(|v| v.ends_with(|c: char| c.is_ascii_alphabetic()))
                    .unwrap_or(value);
                args.push(format!("--mem={size}"));
            }
            How::GpusPerNode => state.gpus_per_node = Some(number(at, long, &value)?),
            How::Gres => {
                let parts: Vec<&str> = value.split(':').collect();
                let (per_node, model) = match parts.as_slice() {
                    ["gpu"] => (1, None),
                    ["gpu", n] if n.parse::<u32>().is_ok() => (number(at, long, n)?, None),
                    ["gpu", model] => (1, Some(model.to_string())),
                    ["gpu", model, n] => (number(at, long, n)?, Some(model.to_string())),
                    _ => bail!("{at}--gres '{value}': only gpu[:TYPE][:N] is known here"),
                };
                state.gpus_per_node = Some(per_node);
                state.gpu_type = model;
            }
            How::OpenMode => match value.as_str() {
                "append" | "a" => state.out.open_append = true,
                "truncate" | "t" => state.out.open_append = false,
                other => bail!("{at}--open-mode '{other}': use append or truncate"),
            },
            How::TasksPerNode => {
                state.out.ntasks_per_node = number(at, long, &value)?;
                if !(1..=10_000).contains(&state.out.ntasks_per_node) {
                    bail!("{at}--ntasks-per-node must be from 1 to 10000 (got {value})");
                }
            }
            How::Parsable => state.out.parsable = true,
            How::Ignore(_) => {}
        }
        Ok(())
    }

    /// The `#SBATCH` lines of a script, read as sbatch reads them: from the top through
    /// comments and blank lines, the first other line ending the search.
    fn sbatch_lines(script: &str) -> Result<Vec<(usize, Vec<String>)>> {
        let mut lines = Vec::new();
        for (index, raw) in script.lines().enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            let trimmed = line.trim_start();
            if trimmed.is_empty() {
                continue;
            }
            if !trimmed.starts_with('#') {
                break;
            }
            let Some(rest) = line.strip_prefix("#SBATCH") else {
                continue;
            };
            if rest.chars().next().is_some_and(|c| !c.is_whitespace()) {
                continue;
            }
            let words =
                crate::script::split_words(rest).map_err(|e| anyhow!("line {}: {e}", index + 1))?;
            if !words.is_empty() {
                lines.push((index + 1, words));
            }
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn submitits_script_translates() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("submission.sh");
        std::fs::write(
            &script,
            "#!/bin/bash\n\n# Parameters\n#SBATCH --array=0-3%4\n#SBATCH --cpus-per-task=2\n\
             #SBATCH --error=/f/%A_%a_0_log.err\n#SBATCH --gpus-per-node=1\n\
             #SBATCH --job-name=submitit\n#SBATCH --mem=4GB\n#SBATCH --nodes=2\n\
             #SBATCH --ntasks-per-node=1\n#SBATCH --open-mode=append\n\
             #SBATCH --output=/f/%A_%a_0_log.out\n#SBATCH --signal=USR2@90\n#SBATCH --time=5\n\
             #SBATCH --wckey=submitit\n\n# command\nexport SUBMITIT_EXECUTOR=slurm\n",
        )
        .unwrap();
        let path = script.to_string_lossy().into_owned();
        let t = translate(&strings(&["--parsable", &path])).unwrap();
        assert!(t.parsable && t.open_append);
        assert_eq!(t.ntasks_per_node, 1);
        assert_eq!(
            t.ysub_args,
            strings(&[
                "--array=0-3%4",
                "--cpus=2",
                "--error=/f/%A_%a_0_log.err",
                "--job-name=submitit",
                "--mem=4G",
                "--nodes=2",
                "--output=/f/%A_%a_0_log.out",
                "--signal=USR2@90",
                "--time=5",
                "--gpus=2",
                "--",
                &path,
            ])
        );
        // The command line wins over the script's lines, and parses as ysub's.
        let t = translate(&strings(&["-J", "mine", "-t10", &path, "arg"])).unwrap();
        let mut argv = strings(&["sbatch"]);
        argv.extend(t.ysub_args);
        let cli = YsubCli::try_parse_from(&argv).unwrap();
        assert_eq!(cli.options.job_name.as_deref(), Some("mine"));
        assert_eq!(cli.options.time.as_deref(), Some("10"));
        assert_eq!(cli.command, strings(&[&path, "arg"]));
    }

    #[test]
    fn unknown_and_malformed_options_are_refused_by_name() {
        let err = translate(&strings(&["--licenses=x", "s.sh"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("option --licenses is not supported"), "{err}");
        let err = translate(&strings(&["-q", "s.sh"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("option -q is not supported"), "{err}");
        assert!(translate(&strings(&["--open-mode=sideways", "s.sh"])).is_err());
        assert!(translate(&strings(&["--gres=shard:2", "s.sh"])).is_err());
        assert!(translate(&strings(&["--hold=yes", "s.sh"])).is_err());
        let t = translate(&strings(&["--gres=gpu:a100:2", "--wrap", "true"])).unwrap();
        assert_eq!(
            t.ysub_args,
            strings(&["--wrap=true", "--gpus=2", "--gpu-type=a100"])
        );
    }
}
