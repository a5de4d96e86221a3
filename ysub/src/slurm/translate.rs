//! sbatch's option words (an `#SBATCH` line, or sbatch's command line) read as getopt_long
//! reads them, and each option turned through [`super::table`] into what it is in ysub's
//! terms ([`Translated`]): ysub's own option words, or the counts Slurm gives that ysub has no
//! flag for. Whoever takes them (ysub's submit) parses the words by ysub's own definitions,
//! with the same checks and messages; Slurm's value forms are read in [`super::values`].

use super::table::{self, Action, Conversion, SbatchOption, Takes};
use super::values::{check_output_pattern, gres, slurm_constraint, slurm_mem, slurm_nodes};
use std::fmt;
use ysched_common::limits::{MAX_CPUS, MAX_NODES, MAX_NTASKS_PER_NODE};
use ysched_common::parse::{parse_bounded_u32, parse_time_limit};
use ysched_common::text::{escape_for_terminal, excerpt};

/// Where sbatch words come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// An `#SBATCH` line of a script (1-based line number).
    Line(usize),
    /// sbatch's command line.
    CommandLine,
}

/// Why an sbatch option was refused, naming it (and the line) and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmOptionError {
    pub place: Place,
    /// The option as written (`--mem-per-gpu`, `-n`), or the stray word.
    pub option: String,
    pub problem: Problem,
}

/// What is wrong with an option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// An sbatch option ysched does not carry out; what to do instead.
    NotSupported(&'static str),
    /// Not an sbatch option at all.
    Unknown,
    /// A value was needed and none came.
    MissingValue,
    /// A flag was given `=value`.
    NoValueTaken,
    /// The value is wrong; the message names it.
    Value(String),
    /// A word that is not an option where only options may be.
    Stray,
}

impl fmt::Display for SlurmOptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let option = escape_for_terminal(&excerpt(&self.option, 60)).into_owned();
        let option = match self.place {
            Place::Line(line) => {
                write!(f, "line {line}: ")?;
                format!("#SBATCH {option}")
            }
            Place::CommandLine => option,
        };
        match &self.problem {
            Problem::NotSupported(instead) => write!(f, "{option} is not supported: {instead}"),
            Problem::Unknown => write!(f, "{option} is not an sbatch option"),
            Problem::MissingValue => write!(f, "{option} needs a value"),
            Problem::NoValueTaken => write!(f, "{option} takes no value"),
            Problem::Value(message) => {
                write!(f, "{option}: {}", escape_for_terminal(message))
            }
            Problem::Stray if self.option == "hetjob" => write!(
                f,
                "{option}: ysched has no heterogeneous jobs: submit each part as a job of its \
                 own, linked with -d/--dependency"
            ),
            Problem::Stray => write!(
                f,
                "{option}: not an option (an #SBATCH line holds options only)"
            ),
        }
    }
}

impl std::error::Error for SlurmOptionError {}

/// What one sbatch option is in ysub's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Translated {
    /// ysub's own option words (`--mem=16G`, `--gpu-type=a100 --gpus=2`).
    Words(Vec<String>),
    /// Slurm's CPUs per task (ysub's `-c` is CPUs per node).
    CpusPerTask(u32),
    /// Slurm's tasks in all.
    Ntasks(u32),
    /// `--wrap`'s command (the command line only).
    Wrap(String),
}

/// Reads `words` as sbatch options, handing each one's translation to `take` in order (an
/// error from `take` is that option's, named with its place). On the command line, the first
/// word that is not an option (the script) ends them, and `--` does too; its index is
/// returned (`words.len()` if none). In an `#SBATCH` line, every word must be an option.
pub fn read_sbatch_words(
    words: &[String],
    place: Place,
    mut take: impl FnMut(Translated) -> Result<(), String>,
) -> Result<usize, SlurmOptionError> {
    let mut apply = |entry: &SbatchOption, value: Option<String>, written: &str| match translate(
        entry, value, written, place,
    )? {
        Some(translated) => take(translated).map_err(|message| SlurmOptionError {
            place,
            option: written.to_string(),
            problem: Problem::Value(message),
        }),
        None => Ok(()),
    };
    let error = |option: &str, problem: Problem| SlurmOptionError {
        place,
        option: option.to_string(),
        problem,
    };
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        if let Some(body) = word.strip_prefix("--") {
            if body.is_empty() {
                if place == Place::CommandLine {
                    return Ok(i + 1);
                }
                return Err(error(word, Problem::Stray));
            }
            let (name, joined) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (body, None),
            };
            let written = format!("--{name}");
            let entry = table::by_long(name).ok_or_else(|| error(&written, Problem::Unknown))?;
            let value = match entry.takes {
                Takes::Nothing if joined.is_some() => {
                    return Err(error(&written, Problem::NoValueTaken))
                }
                Takes::Nothing | Takes::Optional(_) => joined.map(str::to_string),
                Takes::Value(_) => match joined {
                    Some(value) => Some(value.to_string()),
                    None => {
                        i += 1;
                        Some(
                            words
                                .get(i)
                                .ok_or_else(|| error(&written, Problem::MissingValue))?
                                .clone(),
                        )
                    }
                },
            };
            apply(entry, value, &written)?;
        } else if word.len() > 1 && word.starts_with('-') {
            // A cluster of short options, as getopt reads it: `-HW`, `-t60`, `-t 60`.
            let letters: Vec<char> = word[1..].chars().collect();
            let mut j = 0;
            while j < letters.len() {
                let written = format!("-{}", letters[j]);
                let entry =
                    table::by_short(letters[j]).ok_or_else(|| error(&written, Problem::Unknown))?;
                let rest: String = letters[j + 1..].iter().collect();
                match entry.takes {
                    Takes::Nothing => {
                        apply(entry, None, &written)?;
                        j += 1;
                        continue;
                    }
                    Takes::Optional(_) => {
                        let value = (!rest.is_empty()).then_some(rest);
                        apply(entry, value, &written)?;
                    }
                    Takes::Value(_) => {
                        let value = if rest.is_empty() {
                            i += 1;
                            words
                                .get(i)
                                .ok_or_else(|| error(&written, Problem::MissingValue))?
                                .clone()
                        } else {
                            rest
                        };
                        apply(entry, Some(value), &written)?;
                    }
                }
                break;
            }
        } else if place == Place::CommandLine {
            return Ok(i);
        } else {
            return Err(error(word, Problem::Stray));
        }
        i += 1;
    }
    Ok(words.len())
}

/// One option of the table with its value in ysub's terms; `None` for one that changes
/// nothing.
fn translate(
    entry: &SbatchOption,
    value: Option<String>,
    written: &str,
    place: Place,
) -> Result<Option<Translated>, SlurmOptionError> {
    let error = |problem: Problem| SlurmOptionError {
        place,
        option: written.to_string(),
        problem,
    };
    let bad = |message: String| error(Problem::Value(message));
    let value_text = value.clone().unwrap_or_default();
    let ysub_words: Vec<String> = match entry.action {
        Action::Refuse => return Err(error(Problem::NotSupported(entry.note))),
        Action::Accept => return Ok(None),
        Action::Same(ysub) => {
            // ysub checks a time limit only when it builds the job: checked here, the
            // message names the line.
            if ysub == "time" {
                parse_time_limit(&value_text).map_err(|e| bad(e.to_string()))?;
            }
            match value {
                Some(value) => vec![format!("--{ysub}={value}")],
                None => vec![format!("--{ysub}")],
            }
        }
        Action::Convert(conversion) => match conversion {
            Conversion::Gpus | Conversion::GpusPerNode => {
                let flag = if conversion == Conversion::Gpus {
                    "--gpus"
                } else {
                    "--gpus-per-node"
                };
                let mut words = Vec::new();
                let count = match value_text.rsplit_once(':') {
                    Some((model, count)) => {
                        words.push(format!("--gpu-type={model}"));
                        count
                    }
                    None => value_text.as_str(),
                };
                words.push(format!("{flag}={count}"));
                words
            }
            Conversion::Gres => {
                let gpus = gres(&value_text).map_err(bad)?;
                let mut words = vec![format!("--gpus-per-node={}", gpus.per_node)];
                if let Some(model) = gpus.gpu_type {
                    words.push(format!("--gpu-type={model}"));
                }
                words
            }
            Conversion::Mem => vec![format!("--mem={}", slurm_mem(&value_text).map_err(bad)?)],
            Conversion::Nodes => vec![format!(
                "--nodes={}",
                slurm_nodes(&value_text).map_err(bad)?
            )],
            Conversion::CpusPerTask => {
                let cpus = parse_bounded_u32("--cpus-per-task", &value_text, 1, MAX_CPUS)
                    .map_err(|e| bad(e.to_string()))?;
                return Ok(Some(Translated::CpusPerTask(cpus)));
            }
            Conversion::Ntasks => {
                let tasks =
                    parse_bounded_u32("--ntasks", &value_text, 1, MAX_NODES * MAX_NTASKS_PER_NODE)
                        .map_err(|e| bad(e.to_string()))?;
                return Ok(Some(Translated::Ntasks(tasks)));
            }
            Conversion::Output | Conversion::Error => {
                check_output_pattern(&value_text).map_err(bad)?;
                let flag = if conversion == Conversion::Output {
                    "--output"
                } else {
                    "--error"
                };
                vec![format!("{flag}={value_text}")]
            }
            Conversion::Constraint => {
                vec![format!(
                    "--constraint={}",
                    slurm_constraint(&value_text).map_err(bad)?
                )]
            }
            Conversion::Exclusive => match value.as_deref() {
                None | Some("") => vec!["--exclusive".to_string()],
                Some(kind) => {
                    return Err(bad(format!(
                        "'{}' is not supported: ysched gives each node of an --exclusive job \
                         to that job alone; give --exclusive without a value",
                        excerpt(kind, 30)
                    )))
                }
            },
            Conversion::Wrap => {
                if place != Place::CommandLine {
                    return Err(error(Problem::NotSupported(
                        "--wrap belongs on the command line: put the command in the script",
                    )));
                }
                return Ok(Some(Translated::Wrap(value_text)));
            }
        },
    };
    Ok(Some(Translated::Words(ysub_words)))
}
