//! Slurm's words, formats and states, as ysched's tools speak them; it depends on no other
//! part of the tools (`submit`, `jobs` and `compat` read it):
//!
//! * [`table`]: THE table of sbatch's options ([`table::SBATCH_OPTIONS`]): for every sbatch
//!   option whether it is translated into ysub's options, accepted as harmless, or refused
//!   with what to do instead; [`translate`] reads sbatch's words (an `#SBATCH` line, sbatch's
//!   command line) through it into ysub's terms, and [`values`] Slurm's forms of their values;
//!   [`slurm_flag_message`] replaces clap's "similar argument" tip for a Slurm flag on ysub's
//!   command line with the table's alternative; [`markdown`] renders the user guide's
//!   "Coming from Slurm" table, checked against the table by a unit test;
//! * [`hostlist`]: host lists (`node[1-4,7]`) expanded and compressed;
//! * [`words`]: job and node states, times and durations in Slurm's words;
//! * [`format`]: `%` format strings (`squeue -o`, `sinfo -o`) and fixed-width columns.
//!
//! ysub's submit applies the translated options (`crate::submit::sbatch`): `#SBATCH` lines,
//! and the `sbatch` front end's command line, where `-p` is Slurm's partition.

pub mod format;
pub mod hostlist;
pub mod markdown;
pub mod table;
pub mod translate;
pub mod values;
pub mod words;

pub use hostlist::{compress_hostlist, expand_hostlist, MAX_HOSTS};
pub use translate::{read_sbatch_words, Place, Problem, SlurmOptionError, Translated};

use clap::error::{ContextKind, ContextValue, ErrorKind};
use table::Action;

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
