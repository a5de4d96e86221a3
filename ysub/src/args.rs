//! Parsing a tool's command line: clap's errors become `<tool>: error: <message>` lines,
//! written from the error's kind and context (never from clap's rendered text), and
//! arguments that are not UTF-8 are refused by position.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use std::ffi::{OsStr, OsString};
use std::process::ExitCode;
use ysched_common::text::escape_for_terminal;

/// A bad option value, with a message that already names the option, the value and the bound
/// it broke (`--nodes must be at least 1 (got 0)`). Value parsers return it so that
/// [`clap_error_message`] can print it instead of clap's wrapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError(pub String);

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

/// The message of a clap error, on one line: our own [`OptionError`] as is, else what clap
/// says for its kind (`unexpected argument '--bogus' found`), the lists clap puts on lines of
/// their own joined to it. Control characters in it (a value the user typed) are escaped.
pub fn clap_error_message(error: &clap::Error) -> String {
    use std::error::Error as _;
    if let Some(own) = error
        .source()
        .and_then(|source| source.downcast_ref::<OptionError>())
    {
        return escape_for_terminal(&own.0).into_owned();
    }
    escape_for_terminal(&describe(error)).into_owned()
}

/// One context value of `error` as text, if it has it in that form.
fn context_str(error: &clap::Error, kind: ContextKind) -> Option<&str> {
    match error.get(kind) {
        Some(ContextValue::String(text)) => Some(text),
        _ => None,
    }
}

/// One context list of `error`, if it has it in that form.
fn context_list(error: &clap::Error, kind: ContextKind) -> Option<&[String]> {
    match error.get(kind) {
        Some(ContextValue::Strings(list)) => Some(list),
        _ => None,
    }
}

/// One context number of `error`, if it has it in that form.
fn context_number(error: &clap::Error, kind: ContextKind) -> Option<isize> {
    match error.get(kind) {
        Some(ContextValue::Number(n)) => Some(*n),
        _ => None,
    }
}

/// A value of a list of choices as clap shows it: quoted when empty or with spaces.
fn choice(value: &str) -> String {
    if value.is_empty() || value.contains(char::is_whitespace) {
        format!("{value:?}")
    } else {
        value.to_string()
    }
}

/// ` [possible values: a, b]`, or nothing without choices.
fn choices(label: &str, values: Option<&[String]>) -> String {
    match values {
        Some(values) if !values.is_empty() => {
            let values: Vec<String> = values.iter().map(|v| choice(v)).collect();
            format!(" [{label}: {}]", values.join(", "))
        }
        _ => String::new(),
    }
}

/// `" was provided"` or `" were provided"`, as clap says it.
fn were_provided(count: isize) -> &'static str {
    if count > 1 {
        " were provided"
    } else {
        " was provided"
    }
}

/// What clap says for `error`, in its words, from its kind and context, on one line.
fn describe(error: &clap::Error) -> String {
    let arg = context_str(error, ContextKind::InvalidArg);
    let value = context_str(error, ContextKind::InvalidValue);
    let subcommand = context_str(error, ContextKind::InvalidSubcommand);
    let said = match error.kind() {
        ErrorKind::UnknownArgument => arg.map(|arg| format!("unexpected argument '{arg}' found")),
        ErrorKind::InvalidSubcommand => {
            subcommand.map(|name| format!("unrecognized subcommand '{name}'"))
        }
        ErrorKind::InvalidValue => match (arg, value) {
            (Some(arg), Some("")) => Some(format!(
                "a value is required for '{arg}' but none was supplied{}",
                choices(
                    "possible values",
                    context_list(error, ContextKind::ValidValue)
                )
            )),
            (Some(arg), Some(value)) => Some(format!(
                "invalid value '{value}' for '{arg}'{}",
                choices(
                    "possible values",
                    context_list(error, ContextKind::ValidValue)
                )
            )),
            _ => None,
        },
        ErrorKind::ValueValidation => match (arg, value) {
            (Some(arg), Some(value)) => {
                use std::error::Error as _;
                let mut text = format!("invalid value '{value}' for '{arg}'");
                if let Some(source) = error.source() {
                    text.push_str(&format!(": {source}"));
                }
                Some(text)
            }
            _ => None,
        },
        ErrorKind::MissingRequiredArgument => {
            context_list(error, ContextKind::InvalidArg).map(|missing| {
                format!(
                    "the following required arguments were not provided: {}",
                    missing.join(" ")
                )
            })
        }
        ErrorKind::MissingSubcommand => subcommand.map(|name| {
            format!(
                "'{name}' requires a subcommand but one was not provided{}",
                choices(
                    "subcommands",
                    context_list(error, ContextKind::ValidSubcommand)
                )
            )
        }),
        ErrorKind::ArgumentConflict => Some(conflict(error)),
        ErrorKind::NoEquals => {
            arg.map(|arg| format!("equal sign is needed when assigning values to '{arg}'"))
        }
        ErrorKind::TooManyValues => match (arg, value) {
            (Some(arg), Some(value)) => Some(format!(
                "unexpected value '{value}' for '{arg}' found; no more were expected"
            )),
            _ => None,
        },
        ErrorKind::TooFewValues => match (
            arg,
            context_number(error, ContextKind::ActualNumValues),
            context_number(error, ContextKind::MinValues),
        ) {
            (Some(arg), Some(actual), Some(min)) => Some(format!(
                "{min} values required by '{arg}'; only {actual}{}",
                were_provided(actual)
            )),
            _ => None,
        },
        ErrorKind::WrongNumberOfValues => match (
            arg,
            context_number(error, ContextKind::ActualNumValues),
            context_number(error, ContextKind::ExpectedNumValues),
        ) {
            (Some(arg), Some(actual), Some(expected)) => Some(format!(
                "{expected} values required for '{arg}' but {actual}{}",
                were_provided(actual)
            )),
            _ => None,
        },
        _ => None,
    };
    said.unwrap_or_else(|| generic(error))
}

/// `the argument '--a' cannot be used with '--b'` (or with several, or twice).
fn conflict(error: &clap::Error) -> String {
    let prior = error.get(ContextKind::PriorArg);
    let mut text = if let Some(arg) = context_str(error, ContextKind::InvalidArg) {
        if matches!(prior, Some(ContextValue::String(p)) if p == arg) {
            return format!("the argument '{arg}' cannot be used multiple times");
        }
        format!("the argument '{arg}' cannot be used with")
    } else if let Some(name) = context_str(error, ContextKind::InvalidSubcommand) {
        format!("the subcommand '{name}' cannot be used with")
    } else {
        return generic(error);
    };
    match prior {
        Some(ContextValue::Strings(others)) => {
            text.push(':');
            for other in others {
                text.push(' ');
                text.push_str(other);
            }
        }
        Some(ContextValue::String(other)) => text.push_str(&format!(" '{other}'")),
        _ => text.push_str(" one or more of the other specified arguments"),
    }
    text
}

/// What clap says of an error kind without context: its description, else the value
/// parser's own error.
fn generic(error: &clap::Error) -> String {
    use std::error::Error as _;
    match (error.kind().as_str(), error.source()) {
        (Some(description), _) => description.to_string(),
        (None, Some(source)) => source.to_string(),
        (None, None) => "invalid command line".to_string(),
    }
}

/// The hints clap gives after an error's message, each paragraph after a blank line: its
/// tips (a similar argument or subcommand, unless `with_tips` is false), the usage, and where
/// to find more (when `help_flag` is `Some`).
fn hints(error: &clap::Error, help_flag: Option<&str>, with_tips: bool) -> String {
    let mut tips = Vec::new();
    for (kind, what) in [
        (ContextKind::SuggestedSubcommand, "subcommand"),
        (ContextKind::SuggestedArg, "argument"),
        (ContextKind::SuggestedValue, "value"),
    ] {
        match error.get(kind) {
            Some(ContextValue::String(similar)) => {
                tips.push(format!("  tip: a similar {what} exists: '{similar}'"));
            }
            Some(ContextValue::Strings(similar)) => {
                let quoted: Vec<String> = similar.iter().map(|s| format!("'{s}'")).collect();
                let exist = if similar.len() == 1 {
                    format!("a similar {what} exists")
                } else {
                    format!("some similar {what}s exist")
                };
                tips.push(format!("  tip: {exist}: {}", quoted.join(", ")));
            }
            _ => {}
        }
    }
    if let Some(ContextValue::StyledStrs(suggestions)) = error.get(ContextKind::Suggested) {
        tips.extend(suggestions.iter().map(|s| format!("  tip: {s}")));
    }
    if !with_tips {
        tips.clear();
    }
    let mut paragraphs = Vec::new();
    if !tips.is_empty() {
        paragraphs.push(tips.join("\n"));
    }
    if let Some(ContextValue::StyledStr(usage)) = error.get(ContextKind::Usage) {
        paragraphs.push(usage.to_string());
    }
    if let Some(flag) = help_flag {
        paragraphs.push(format!("For more information, try '{flag}'."));
    }
    paragraphs.join("\n\n")
}

/// The flag that prints `command`'s help, as clap names it in its hints.
fn help_flag(command: &clap::Command) -> Option<String> {
    if !command.is_disable_help_flag_set() {
        return Some("--help".into());
    }
    let own = command.get_arguments().find(|arg| {
        matches!(
            arg.get_action(),
            clap::ArgAction::Help | clap::ArgAction::HelpShort | clap::ArgAction::HelpLong
        )
    });
    if let Some(arg) = own {
        return arg
            .get_long()
            .map(|long| format!("--{long}"))
            .or_else(|| arg.get_short().map(|short| format!("-{short}")));
    }
    (command.has_subcommands() && !command.is_disable_help_subcommand_set()).then(|| "help".into())
}

/// What a tool prints for a command line clap refused: `<tool>: error: <message>`, then clap's
/// hints (tip, usage, where to find more) when it has any. `command` is the tool's command
/// (its help flag is named). Control characters in it are escaped.
pub fn clap_error_text(tool: &str, command: &clap::Command, error: &clap::Error) -> String {
    clap_error_text_with(tool, command, error, None)
}

/// A tool's own word on a command line clap refused, in place of clap's message and tips
/// (ysub names the Slurm options it refuses, with what to do instead); `None` leaves clap's.
pub type ErrorHook = fn(&clap::Error) -> Option<String>;

/// [`clap_error_text`] with the tool's own message for the errors `hook` knows better.
pub fn clap_error_text_with_hook(
    tool: &str,
    command: &clap::Command,
    error: &clap::Error,
    hook: ErrorHook,
) -> String {
    clap_error_text_with(tool, command, error, hook(error))
}

/// [`clap_error_text`], with `own` (a tool's own message) in place of clap's message and tips
/// when it is `Some`.
fn clap_error_text_with(
    tool: &str,
    command: &clap::Command,
    error: &clap::Error,
    own: Option<String>,
) -> String {
    if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // The "error" is the tool's help, printed as it is after a line saying what is missing.
        return format!(
            "{tool}: error: a command is required\n\n{}\n",
            error.render().to_string().trim_end()
        );
    }
    let with_tips = own.is_none();
    let message = match own {
        Some(own) => escape_for_terminal(&own).into_owned(),
        None => clap_error_message(error),
    };
    let mut text = format!("{tool}: error: {message}\n");
    let hints = hints(error, help_flag(command).as_deref(), with_tips);
    if !hints.is_empty() {
        text.push('\n');
        text.push_str(&escape_lines(&hints));
        text.push('\n');
    }
    text
}

/// The first argument that is not valid UTF-8, as an error naming it: the wire format carries
/// strings, so such an argument can go nowhere.
pub fn check_utf8_args(args: &[OsString]) -> Result<(), String> {
    for (position, arg) in args.iter().enumerate().skip(1) {
        if arg.to_str().is_none() {
            return Err(format!(
                "argument {position} ('{}') is not valid UTF-8; ysched tools take UTF-8 arguments only",
                show_os_str(arg)
            ));
        }
    }
    Ok(())
}

/// An OS string for messages: valid UTF-8 runs escaped for the terminal, other bytes as
/// `\xNN`.
pub fn show_os_str(text: &OsStr) -> String {
    use std::fmt::Write as _;
    use std::os::unix::ffi::OsStrExt as _;
    let mut out = String::new();
    for chunk in text.as_bytes().utf8_chunks() {
        out.push_str(&escape_for_terminal(chunk.valid()));
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out
}

/// Parses the process's command line as `C`, the way every tool does: `--help` and
/// `--version` print and exit 0 (`Err(ExitCode::SUCCESS)`), and any error, clap's or a
/// non-UTF-8 argument, prints `<tool>: error: <message>` and exits 1.
pub fn parse_args<C: clap::Parser>(tool: &str) -> Result<C, ExitCode> {
    parse_args_from(tool, std::env::args_os().collect())
}

/// [`parse_args`] on given arguments (the first is the program name).
pub fn parse_args_from<C: clap::Parser>(tool: &str, args: Vec<OsString>) -> Result<C, ExitCode> {
    parse_args_with(tool, args, |_| None)
}

/// [`parse_args_from`] with the tool's own message for the errors `hook` knows better.
pub fn parse_args_with<C: clap::Parser>(
    tool: &str,
    args: Vec<OsString>,
    hook: ErrorHook,
) -> Result<C, ExitCode> {
    if let Err(message) = check_utf8_args(&args) {
        eprintln!("{tool}: error: {message}");
        return Err(ExitCode::FAILURE);
    }
    match C::try_parse_from(args) {
        Ok(cli) => Ok(cli),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprint!(
                "{}",
                clap_error_text_with_hook(tool, &C::command(), &e, hook)
            );
            Err(ExitCode::FAILURE)
        }
    }
}

/// `text` with control characters escaped, line by line (its own line breaks are kept).
pub(crate) fn escape_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| escape_for_terminal(line))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests;
