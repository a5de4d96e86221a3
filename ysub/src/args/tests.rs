//! Tests of command-line parsing: clap's errors as tool errors, and non-UTF-8 arguments.

use super::*;
use clap::CommandFactory;

/// What `tool` prints for `argv` refused by `command`.
fn refusal(tool: &str, command: clap::Command, argv: &[&str]) -> String {
    let args = std::iter::once(tool).chain(argv.iter().copied());
    let error = command.clone().try_get_matches_from(args).unwrap_err();
    clap_error_text(tool, &command, &error)
}

#[test]
fn each_kind_of_refusal_says_what_clap_says() {
    use crate::admin::YctlCli;
    use crate::queue::YqCli;
    use crate::submit::YsubCli;
    assert_eq!(
        refusal("ysub", YsubCli::command(), &["--job-nam", "x"]),
        "ysub: error: unexpected argument '--job-nam' found\n\n  \
         tip: a similar argument exists: '--job-name'\n  \
         tip: to pass '--job-nam' as a value, use '-- --job-nam'\n\n\
         Usage: ysub [OPTIONS] SCRIPT [ARGS]...\n       ysub [OPTIONS] --wrap COMMAND\n\n\
         For more information, try '--help'.\n"
    );
    assert_eq!(
        refusal("yq", YqCli::command(), &["-u", "a", "--me"]),
        "yq: error: the argument '--user <USER>' cannot be used with '--me'\n\n\
         Usage: yq --user <USER>\n\nFor more information, try '--help'.\n"
    );
    assert_eq!(
        refusal("yq", YqCli::command(), &["-j", "x"]),
        "yq: error: invalid value 'x' for '--jobs <ID[,ID]>': 'x' is not a job id (expected \
         12, 12_7 or 12_[1-5])\n\nFor more information, try '--help'.\n"
    );
    assert_eq!(
        refusal("yctl", YctlCli::command(), &["drai"]),
        "yctl: error: unrecognized subcommand 'drai'\n\n  \
         tip: a similar subcommand exists: 'drain'\n\nUsage: yctl <COMMAND>\n\n\
         For more information, try '--help'.\n"
    );
    assert_eq!(
        refusal("yctl", YctlCli::command(), &["drain", "gpu01"]),
        "yctl: error: the following required arguments were not provided: --reason \
         <REASON>\n\nUsage: yctl drain --reason <REASON> <NODE>...\n\n\
         For more information, try '--help'.\n"
    );
    assert_eq!(
        refusal("yctl", YctlCli::command(), &["report", "--by", "x"]),
        "yctl: error: invalid value 'x' for '--by <WHAT>' [possible values: account, user, \
         tier]\n\nFor more information, try '--help'.\n"
    );
    let help = refusal("yctl", YctlCli::command(), &["usage"]);
    assert!(
        help.starts_with("yctl: error: a command is required\n\n"),
        "{help}"
    );
    assert!(help.contains("Usage: yctl usage <COMMAND>"), "{help}");
}

#[derive(clap::Parser, Debug)]
#[command(name = "tool", version)]
struct TestCli {
    #[arg(short = 'n', value_parser = |v: &str| -> Result<u32, OptionError> {
        v.parse().map_err(|_| OptionError(format!("-n wants a number, not '{v}'")))
    })]
    n: Option<u32>,
}

#[derive(clap::Parser, Debug)]
#[command(name = "tool")]
struct RequiredCli {
    #[arg(long, required = true)]
    reason: String,
}

fn args(list: &[&str]) -> Vec<std::ffi::OsString> {
    list.iter().map(std::ffi::OsString::from).collect()
}

#[test]
fn clap_errors_become_tool_errors() {
    use clap::Parser as _;
    let e = TestCli::try_parse_from(["tool", "-n", "x"]).unwrap_err();
    assert_eq!(clap_error_message(&e), "-n wants a number, not 'x'");
    let text = clap_error_text("tool", &TestCli::command(), &e);
    assert!(
        text.starts_with("tool: error: -n wants a number, not 'x'\n"),
        "{text}"
    );
    // Control characters of a typed value are shown escaped, on the message line.
    let e = TestCli::try_parse_from(["tool", "--bo\ngus\x1b[2J"]).unwrap_err();
    let text = clap_error_text("tool", &TestCli::command(), &e);
    assert!(
        text.starts_with("tool: error: unexpected argument '--bo\\ngus\\x1b[2J' found\n"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text:?}");
    assert!(text.contains("Usage: tool"), "{text}");
    // clap's continuation lines join the message line.
    let e = RequiredCli::try_parse_from(["tool"]).unwrap_err();
    assert_eq!(
        clap_error_message(&e),
        "the following required arguments were not provided: --reason <REASON>"
    );

    assert!(parse_args_from::<TestCli>("tool", args(&["tool", "-n", "3"])).is_ok());
    // (--help and --version, which print, are run by tests/mock_schedd.rs.)
    assert_eq!(
        parse_args_from::<TestCli>("tool", args(&["tool", "-n", "x"])).unwrap_err(),
        ExitCode::FAILURE
    );
}

#[test]
fn non_utf8_arguments_are_named() {
    use std::os::unix::ffi::OsStringExt;
    let mut list = args(&["tool", "-n"]);
    list.push(std::ffi::OsString::from_vec(b"4\xff2\x1b".to_vec()));
    assert_eq!(
        check_utf8_args(&list).unwrap_err(),
        "argument 2 ('4\\xff2\\x1b') is not valid UTF-8; ysched tools take UTF-8 arguments \
         only"
    );
    assert_eq!(
        parse_args_from::<TestCli>("tool", list).unwrap_err(),
        ExitCode::FAILURE
    );
    // The program name itself is not checked.
    let list = vec![std::ffi::OsString::from_vec(b"/opt/\xff/tool".to_vec())];
    assert_eq!(check_utf8_args(&list), Ok(()));
}
