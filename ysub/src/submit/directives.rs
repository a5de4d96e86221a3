//! The batch script `ysub` submits (a file, or `--wrap`) and the options in effect: its
//! `#SBATCH` lines (translated), overridden by its `#YSUB` lines (parsed with the command
//! line's own definitions), overridden by the command line.

use super::options::OptionWords;
use super::{JobOptions, YsubCli};
use crate::args::clap_error_message;
use crate::script::script_directives;
use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use std::path::Path;

/// The batch script to submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchScript {
    /// The job name when none is given: the script's file name, or `wrap`.
    pub default_name: String,
    pub contents: String,
    pub args: Vec<String>,
}

impl BatchScript {
    /// The script `--wrap COMMAND` runs.
    pub fn wrap(command: &str) -> BatchScript {
        BatchScript {
            default_name: "wrap".into(),
            contents: format!("#!/bin/sh\n{command}\n"),
            args: Vec::new(),
        }
    }

    /// Reads the script at `path` (copied into the job now, like sbatch does).
    pub fn read(path: &str, args: Vec<String>) -> Result<BatchScript> {
        let contents =
            std::fs::read(path).with_context(|| format!("cannot read batch script '{path}'"))?;
        let contents = String::from_utf8(contents)
            .map_err(|_| anyhow!("batch script '{path}' is not a text file (not valid UTF-8)"))?;
        if contents.trim().is_empty() {
            bail!("batch script '{path}' is empty");
        }
        let default_name = Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.to_string());
        Ok(BatchScript {
            default_name,
            contents,
            args,
        })
    }
}

/// The script named on the command line (or `--wrap`) and the options in effect: its
/// directives overridden by the command line.
pub fn resolve(cli: YsubCli) -> Result<(JobOptions, BatchScript)> {
    let script = match (cli.wrap, cli.command.split_first()) {
        (Some(_), Some(_)) => bail!("give either a script or --wrap, not both"),
        (Some(command), None) => return Ok((cli.options, BatchScript::wrap(&command))),
        (None, None) => {
            bail!("no batch script given (ysub [OPTIONS] SCRIPT [ARGS]... or ysub --wrap COMMAND)")
        }
        (None, Some((path, args))) => BatchScript::read(path, args.to_vec())?,
    };
    let options =
        options_from_directives(&script.contents, &script.default_name)?.overridden_by(cli.options);
    Ok((options, script))
}

/// The options set by a script's directives: its `#SBATCH` lines translated through the
/// table of Slurm's options ([`crate::slurm`]), overridden by its `#YSUB` lines. Later lines
/// override earlier ones, except that `#YSUB --constraint`s add up. `script_name` only labels
/// errors.
pub fn options_from_directives(contents: &str, script_name: &str) -> Result<JobOptions> {
    let sbatch = super::sbatch::options_from_sbatch_lines(contents)
        .map_err(|e| anyhow!("{script_name}: {e}"))?;
    Ok(sbatch.overridden_by(options_from_ysub_lines(contents, script_name)?))
}

/// The options set by a script's `#YSUB` lines alone.
fn options_from_ysub_lines(contents: &str, script_name: &str) -> Result<JobOptions> {
    let directives = script_directives(contents).map_err(|e| anyhow!("{script_name}: {e}"))?;
    let mut options = JobOptions::default();
    for directive in directives {
        let line = OptionWords::try_parse_from(&directive.words).map_err(|e| {
            anyhow!(
                "{script_name}: line {}: invalid #YSUB directive: {}",
                directive.line,
                crate::slurm::slurm_flag_message(&e).unwrap_or_else(|| clap_error_message(&e))
            )
        })?;
        let mut constraints = std::mem::take(&mut options.constraint);
        constraints.extend(line.options.constraint.iter().cloned());
        options = options.overridden_by(line.options);
        options.constraint = constraints;
    }
    Ok(options)
}
