//! `sbatch`: submits a batch script as `ysub` does, from Slurm's flags and `#SBATCH` lines
//! (translated through ysub's one table of sbatch's options, [`crate::slurm`], as ysub reads
//! `#SBATCH` lines: [`crate::submit::sbatch`]), printing
//! `Submitted batch job ID` (or the id alone with `--parsable`). Its jobs always get Slurm's
//! `SLURM_*` variables: whoever calls sbatch reads them.

use crate::client;
use crate::submit::sbatch::{parse_sbatch_command_line, resolve_sbatch};
use crate::submit::submit_and_report;
use anyhow::{anyhow, Result};
use std::ffi::OsString;
use std::io::{IsTerminal, Read};
use std::process::ExitCode;

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
    // sbatch exports it to the job: noded cannot know where the job was submitted from.
    // Set before any thread starts, so nothing reads the environment meanwhile.
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        std::env::set_var("SLURM_SUBMIT_HOST", host.trim());
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
    let line = parse_sbatch_command_line(&args).map_err(|e| anyhow!("{e}"))?;
    // Without a script or --wrap, sbatch reads the script from its standard input.
    let stdin_script = if line.command.is_empty() && line.wrap.is_none() {
        let mut input = std::io::stdin();
        if input.is_terminal() {
            None
        } else {
            let mut contents = String::new();
            input
                .read_to_string(&mut contents)
                .map_err(|e| anyhow!("cannot read the batch script on standard input: {e}"))?;
            Some(contents)
        }
    } else {
        None
    };
    let (mut options, script) = resolve_sbatch(line, stdin_script)?;
    // Slurm-minded jobs: they see Slurm's variables.
    options.slurm_env = true;
    submit_and_report(&options, script, "Submitted batch job").await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn submitits_script_is_read_as_sbatch_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("submission.sh");
        std::fs::write(
            &script,
            "#!/bin/bash\n\n# Parameters\n#SBATCH --array=0-3%4\n#SBATCH --cpus-per-task=2\n\
             #SBATCH --error=/f/%A_%a_0_log.err\n#SBATCH --job-name=submitit\n\
             #SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n#SBATCH --open-mode=append\n\
             #SBATCH --output=/f/%A_%a_0_log.out\n#SBATCH --signal=USR2@90\n#SBATCH --time=5\n\
             #SBATCH --wckey=submitit\n\n# command\nexport SUBMITIT_EXECUTOR=slurm\n",
        )
        .unwrap();
        let path = script.to_string_lossy().into_owned();
        let line =
            parse_sbatch_command_line(&strings(&["--parsable", "-J", "mine", &path])).unwrap();
        let (options, read) = resolve_sbatch(line, None).unwrap();
        assert!(options.parsable);
        // The command line wins over the script's lines.
        assert_eq!(options.job_name.as_deref(), Some("mine"));
        assert_eq!(options.array.as_deref(), Some("0-3%4"));
        assert_eq!(options.ntasks_per_node, Some(1));
        assert_eq!(options.output.as_deref(), Some("/f/%A_%a_0_log.out"));
        assert_eq!(read.default_name, "submission.sh");
        let err = parse_sbatch_command_line(&strings(&["--licenses=x", "s.sh"]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--licenses is not supported"), "{err}");
    }
}
