//! sbatch's options applied to ysub's: the `#SBATCH` lines of a script (read before its
//! `#YSUB` lines, which win), and the `sbatch` front end's command line (options, script and
//! its directives; `-p` is Slurm's partition, as for real sbatch). Each option is read and
//! translated by [`crate::slurm`]'s table; the ysub words it comes to are parsed by ysub's own
//! definitions ([`OptionWords`]), with the same checks and messages. Later options override
//! earlier ones.

use super::options::{JobOptions, OptionWords};
use super::BatchScript;
use crate::args::clap_error_message;
use crate::script::sbatch_directives;
use crate::slurm::{read_sbatch_words, Place, Problem, SlurmOptionError, Translated};
use anyhow::{bail, Result};
use clap::Parser;

/// What sbatch words add up to: the job options, and `--wrap`'s command.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SbatchOptions {
    pub options: JobOptions,
    pub wrap: Option<String>,
}

/// Reads `words` as sbatch options into `into`, later ones overriding earlier ones; where
/// they end, as [`read_sbatch_words`] says.
pub fn apply_sbatch_words(
    words: &[String],
    place: Place,
    into: &mut SbatchOptions,
) -> Result<usize, SlurmOptionError> {
    read_sbatch_words(words, place, |translated| {
        let later = match translated {
            Translated::Words(words) => {
                OptionWords::try_parse_from(&words)
                    .map_err(|e| clap_error_message(&e))?
                    .options
            }
            Translated::CpusPerTask(cpus) => JobOptions {
                cpus_per_task: Some(cpus),
                ..Default::default()
            },
            Translated::Ntasks(tasks) => JobOptions {
                ntasks: Some(tasks),
                ..Default::default()
            },
            Translated::Wrap(command) => {
                into.wrap = Some(command);
                return Ok(());
            }
        };
        into.options = std::mem::take(&mut into.options).overridden_by(later);
        Ok(())
    })
}

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
    let options = super::options_from_directives(&script.contents, &script.default_name)?
        .overridden_by(line.options);
    Ok((options, script))
}
