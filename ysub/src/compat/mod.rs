//! `yslurm`: Slurm's commands (`sbatch`, `squeue`, `scancel`, `sinfo`, `sacct`, `srun`) for the
//! tools that drive a cluster through them (submitit, dask-jobqueue, Snakemake, Nextflow).
//!
//! One binary answers to all of them: it is the tool its file name names (`sbatch`, or with an
//! administrator's prefix or suffix, `ys-sbatch`, `sbatch-ys`), or the one named by its first
//! argument (`yslurm sbatch ...`). `yslurm install DIR` makes those names in DIR as links to
//! itself, never shadowing another program of the same name on PATH (a real Slurm).
//! Each command speaks Slurm's flags and output formats for what those tools use, over the
//! same client library as `ysub`, `yq` and `ycancel`; what ysched cannot do is refused with
//! `<tool>: error: ...` and exit 1, never silently dropped.
//!
//! Slurm's words, states and formats come from [`crate::slurm`]; no other module uses
//! `compat` (only the `yslurm` binary).
//!
//! - [`sbatch`], [`squeue`], [`scancel`], [`sinfo`], [`sacct`], [`srun`]: the commands.
//! - [`install`]: `yslurm install`.

pub mod install;
pub mod sacct;
pub mod sbatch;
pub mod scancel;
pub mod sinfo;
pub mod squeue;
pub mod srun;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

/// The commands `yslurm` can be, by their Slurm names.
pub const TOOLS: [&str; 6] = ["sbatch", "squeue", "scancel", "sinfo", "sacct", "srun"];

/// What `yslurm` prints for `--help` or a missing command.
const USAGE: &str = "\
yslurm: Slurm's commands for tools that call them, on ysched

Usage: yslurm COMMAND [ARGS]...      (or run it under the name of a command)
       yslurm install DIR [--prefix P] [--suffix S]

Commands: sbatch, squeue, scancel, sinfo, sacct, srun
`yslurm install DIR` makes links named after each command in DIR (never shadowing another
program of that name on PATH); put DIR on PATH only for the users and pipelines that want
Slurm's commands. See docs/slurm-compat.md.
";

/// The Slurm command a program file name stands for: the name itself, or the name with a
/// prefix or suffix an administrator chose, set off by a character that is not a letter or
/// digit (`ys-sbatch`, `sbatch.ys`, `ys_srun`). `yslurm` and unrelated names stand for none.
pub fn tool_for_program_name(name: &str) -> Option<&'static str> {
    TOOLS.into_iter().find(|tool| {
        name.match_indices(tool).any(|(at, _)| {
            let before = name[..at].chars().next_back();
            let after = name[at + tool.len()..].chars().next();
            before.is_none_or(|c| !c.is_ascii_alphanumeric())
                && after.is_none_or(|c| !c.is_ascii_alphanumeric())
        })
    })
}

/// The `yslurm` binary: the tool named by the program's name, or by its first argument.
pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let program = args
        .first()
        .and_then(|arg0| Path::new(arg0).file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(tool) = tool_for_program_name(&program) {
        return run_tool(tool, args);
    }
    // `yslurm COMMAND ARGS...`: the command sees itself as argv[0].
    let command = args.get(1).map(|a| a.to_string_lossy().into_owned());
    if let Some(tool) = TOOLS.into_iter().find(|t| Some(*t) == command.as_deref()) {
        return run_tool(tool, args[1..].to_vec());
    }
    match command.as_deref() {
        Some("install") => install::main(args[1..].to_vec()),
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("yslurm {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!(
                "yslurm: error: unknown command '{}' (known: {}, install)",
                crate::args::show_os_str(std::ffi::OsStr::new(other)),
                TOOLS.join(", ")
            );
            ExitCode::FAILURE
        }
        None => {
            eprint!("{USAGE}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `tool` with `args` (its own name first, as clap expects).
fn run_tool(tool: &'static str, args: Vec<OsString>) -> ExitCode {
    match tool {
        "sbatch" => sbatch::main(args),
        "squeue" => squeue::main(args),
        "scancel" => scancel::main(args),
        "sinfo" => sinfo::main(args),
        "sacct" => sacct::main(args),
        _ => srun::main(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_names_with_an_admins_prefix_or_suffix_name_their_tool() {
        for (name, tool) in [
            ("sbatch", Some("sbatch")),
            ("ys-sbatch", Some("sbatch")),
            ("sbatch.ys", Some("sbatch")),
            ("ys_squeue", Some("squeue")),
            ("sacct", Some("sacct")),
            ("srun", Some("srun")),
            ("ysrun", None),
            ("sbatchy", None),
            ("yslurm", None),
            ("", None),
        ] {
            assert_eq!(tool_for_program_name(name), tool, "{name}");
        }
    }
}
