//! Slurm's sbatch options in ysched: one table ([`table::SBATCH_OPTIONS`]) says for every sbatch
//! option whether it is translated into ysub's options, accepted as harmless, or refused with
//! what to do instead. Everything Slurm-facing reads it:
//!
//! * `#SBATCH` lines of a batch script ([`options_from_sbatch_lines`]); ysub reads them before
//!   its `#YSUB` lines, which win, and its command line wins over both;
//! * Slurm's flags on ysub's command line: the translated ones are ysub flags (some hidden from
//!   `--help`), and for the others [`slurm_flag_message`] replaces clap's "similar argument"
//!   tip with the table's alternative;
//! * an `sbatch` front end: [`translate_sbatch_args`] (options only) and
//!   [`parse_sbatch_command_line`] then [`resolve_sbatch`] (options, script and its
//!   directives), where `-p` is Slurm's partition, as for real sbatch;
//! * the user guide's "Coming from Slurm" table ([`markdown::options_table`]), checked against
//!   the table by a unit test.
//!
//! A front end builds the job from the options with [`crate::submit::build_spec`] and submits
//! it with [`crate::submit::submit_and_report`].

pub mod hostlist;
pub mod markdown;
pub mod table;
pub mod translate;

pub use hostlist::{expand_hostlist, MAX_HOSTS};
pub use translate::{apply_sbatch_words, Place, Problem, SbatchOptions, SlurmOptionError};

use crate::script::sbatch_directives;
use crate::submit::{BatchScript, JobOptions};
use anyhow::{bail, Result};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use table::Action;

/// sbatch's command line: its options, `--wrap`'s command, and the script with its arguments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SbatchCommandLine {
    pub options: JobOptions,
    pub wrap: Option<String>,
    /// The script's path, then its arguments; empty with `--wrap` (or for a script on stdin).
    pub command: Vec<String>,
}

/// Reads sbatch's command line (without the program name): options up to the script (or
/// `--`), the script, and its arguments, which are the script's whatever they look like.
pub fn parse_sbatch_command_line(args: &[String]) -> Result<SbatchCommandLine, SlurmOptionError> {
    let mut read = SbatchOptions::default();
    let end = apply_sbatch_words(args, Place::CommandLine, &mut read)?;
    Ok(SbatchCommandLine {
        options: read.options,
        wrap: read.wrap,
        command: args[end..].to_vec(),
    })
}

/// sbatch's options on a command line (without the program name), as ysub's job options. Only
/// options: a script (a word that is not an option) or `--wrap` is refused here, as they are
/// not job options; [`parse_sbatch_command_line`] takes whole command lines.
pub fn translate_sbatch_args(args: &[String]) -> Result<JobOptions, SlurmOptionError> {
    let line = parse_sbatch_command_line(args)?;
    if let Some(word) = line.command.first() {
        return Err(SlurmOptionError {
            place: Place::CommandLine,
            option: word.clone(),
            problem: Problem::Value("a script or its arguments, not an option".into()),
        });
    }
    if line.wrap.is_some() {
        return Err(SlurmOptionError {
            place: Place::CommandLine,
            option: "--wrap".into(),
            problem: Problem::Value(
                "a command, not a job option: use parse_sbatch_command_line".into(),
            ),
        });
    }
    Ok(line.options)
}

/// The options of a script's `#SBATCH` lines, top to bottom, later ones overriding earlier
/// ones. Errors name the line (`line 4: #SBATCH --mem-per-gpu is not supported: ...`); the
/// caller adds the script's name.
pub fn options_from_sbatch_lines(contents: &str) -> Result<JobOptions, String> {
    let mut read = SbatchOptions::default();
    for directive in sbatch_directives(contents)? {
        apply_sbatch_words(&directive.words, Place::Line(directive.line), &mut read)
            .map_err(|e| e.to_string())?;
    }
    Ok(read.options)
}

/// The script an sbatch command line names (or `--wrap`'s, or `stdin_script`, the script
/// sbatch reads from its standard input when none is named) and the options in effect: its
/// `#SBATCH` lines, overridden by its `#YSUB` lines, overridden by the command line.
pub fn resolve_sbatch(
    line: SbatchCommandLine,
    stdin_script: Option<String>,
) -> Result<(JobOptions, BatchScript)> {
    let script = match (line.wrap, line.command.split_first(), stdin_script) {
        (Some(_), Some(_), _) => bail!("give either a script or --wrap, not both"),
        (Some(command), None, _) => return Ok((line.options, BatchScript::wrap(&command))),
        (None, Some((path, args)), _) => BatchScript::read(path, args.to_vec())?,
        (None, None, Some(contents)) => {
            if contents.trim().is_empty() {
                bail!("the batch script on standard input is empty");
            }
            BatchScript {
                default_name: "sbatch".into(),
                contents,
                args: Vec::new(),
            }
        }
        (None, None, None) => bail!("no batch script given (sbatch [OPTIONS] SCRIPT [ARGS]...)"),
    };
    let options = crate::submit::options_from_directives(&script.contents, &script.default_name)?
        .overridden_by(line.options);
    Ok((options, script))
}

/// What ysub says instead of clap's error for a Slurm flag clap does not know: the table's
/// alternative for a refused option, or where a Slurm-only option belongs. `None` for
/// anything else (a typo keeps clap's tip).
pub fn slurm_flag_message(error: &clap::Error) -> Option<String> {
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let (written, entry) = if let Some(body) = arg.strip_prefix("--") {
        let name = body.split('=').next().unwrap_or(body);
        (format!("--{name}"), table::by_long(name)?)
    } else {
        let letter = arg.strip_prefix('-')?.chars().next()?;
        (format!("-{letter}"), table::by_short(letter)?)
    };
    let message = match entry.action {
        Action::Refuse => format!("{written} is not supported: {}", entry.note),
        Action::Accept => format!(
            "{written} is Slurm's; ysub takes it in #SBATCH lines, where it changes nothing: \
             leave it out here"
        ),
        Action::Same(_) | Action::Convert(_) => match entry.long {
            "ntasks" => format!(
                "{written} is taken in #SBATCH lines (tasks in all); on ysub's command line give \
                 --ntasks-per-node N (tasks on each node) and -N/--nodes"
            ),
            "mincpus" => format!(
                "{written} is Slurm's; on ysub's command line give -c/--cpus N (CPUs per node)"
            ),
            other => format!(
                "{written} is taken in #SBATCH lines; on ysub's command line give --{other}"
            ),
        },
    };
    Some(message)
}

#[cfg(test)]
mod tests;
