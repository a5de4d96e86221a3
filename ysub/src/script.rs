//! What `ysub` reads besides its command line: `#YSUB` and `#SBATCH` directives in the batch
//! script and the `--export` list.

use crate::args::show_os_str;
use std::collections::HashMap;
use std::ffi::OsString;
use ysched_common::text::escape_for_terminal;

/// The directive prefix, as `#SBATCH` is for sbatch.
pub const DIRECTIVE_PREFIX: &str = "#YSUB";
/// sbatch's directive prefix: its lines are read too, through the table of Slurm's options.
pub const SBATCH_PREFIX: &str = "#SBATCH";

/// The option words of one `#YSUB` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// 1-based line number in the script, for error messages.
    pub line: usize,
    pub words: Vec<String>,
}

/// Collects the `#YSUB` lines of a batch script the way sbatch collects `#SBATCH` lines: they
/// are read from the top (the shebang is a comment like any other) through comment and blank
/// lines, and the first other line ends the search, so a `#YSUB` after the first command is an
/// ordinary comment. A directive starts at the beginning of the line and its words are split
/// like a shell would split them (quotes, backslashes), up to an unquoted `#` that begins a
/// trailing comment.
pub fn script_directives(script: &str) -> Result<Vec<Directive>, String> {
    directives_with_prefix(script, DIRECTIVE_PREFIX)
}

/// The `#SBATCH` lines of a batch script, found and split as [`script_directives`] finds and
/// splits the `#YSUB` lines (sbatch's own rules: from the top, through comments and blank
/// lines only).
pub fn sbatch_directives(script: &str) -> Result<Vec<Directive>, String> {
    directives_with_prefix(script, SBATCH_PREFIX)
}

/// The directives of one prefix, in order.
fn directives_with_prefix(script: &str, prefix: &str) -> Result<Vec<Directive>, String> {
    let mut directives = Vec::new();
    for (index, raw_line) in script.lines().enumerate() {
        let line = raw_line.strip_suffix('\r').unwrap_or(raw_line);
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if !trimmed.starts_with('#') {
            break;
        }
        let Some(rest) = line.strip_prefix(prefix) else {
            continue;
        };
        // `#YSUBX` (`#SBATCHX`) is a comment, not a directive.
        if rest.chars().next().is_some_and(|c| !c.is_whitespace()) {
            continue;
        }
        let line_number = index + 1;
        let words = split_words(rest).map_err(|e| format!("line {line_number}: {e}"))?;
        if !words.is_empty() {
            directives.push(Directive {
                line: line_number,
                words,
            });
        }
    }
    Ok(directives)
}

/// Splits a directive's text into words like a POSIX shell: whitespace separates words,
/// `'...'` is literal, `"..."` allows `\"`, `\\` (and `\$`, `` \` ``), a backslash outside
/// quotes escapes the next character, and an unquoted `#` at the start of a word begins a
/// comment. No expansion of any kind happens.
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    // Whether a word has begun: `""` is an empty word, not none.
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Builds the environment a job gets from an `--export` value and the submitter's environment:
///
/// * `ALL` (the default): the whole current environment;
/// * `NONE`: nothing;
/// * `VAR1,VAR2=value`: just these, `VAR1` taken from the current environment (left out when
///   unset) and `VAR2` set to the value given;
/// * `ALL,VAR=value` (or `NONE,...`): everything (or nothing) plus these.
///
/// Items are separated by commas, so a value given here cannot contain a comma.
///
/// The wire format carries strings: a variable of `current` whose name or value is not UTF-8 is
/// an error naming it if it would be exported, and ignored if it would not.
pub fn exported_environment<I, K, V>(
    spec: &str,
    current: I,
) -> Result<HashMap<String, String>, String>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<OsString>,
    V: Into<OsString>,
{
    let mut export_all = false;
    let mut export_none = false;
    let mut named: Vec<(&str, Option<&str>)> = Vec::new();
    for item in spec
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        if item.eq_ignore_ascii_case("ALL") {
            export_all = true;
        } else if item.eq_ignore_ascii_case("NONE") {
            export_none = true;
        } else {
            let (name, value) = match item.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (item, None),
            };
            if !is_variable_name(name) {
                return Err(format!(
                    "invalid --export item '{item}': '{name}' is not a variable name"
                ));
            }
            named.push((name, value));
        }
    }
    if export_all && export_none {
        return Err(format!(
            "invalid --export '{spec}': ALL and NONE contradict each other"
        ));
    }
    if !export_all && !export_none && named.is_empty() {
        return Err(format!(
            "invalid --export '{spec}': use ALL, NONE or a comma list of VAR or VAR=value"
        ));
    }

    // Only the variables named without a value are looked up (unless ALL takes them all), and
    // a variable given a value here is not taken from the current environment at all.
    let wanted: Vec<&str> = named
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(n, _)| *n)
        .collect();
    let overridden = |name: &str| named.iter().any(|(n, v)| *n == name && v.is_some());
    let mut environment = HashMap::new();
    for (name, value) in current {
        let (name, value): (OsString, OsString) = (name.into(), value.into());
        let name = match name.into_string() {
            Ok(name) => name,
            // Only ALL exports it: a list names UTF-8 (ASCII) variables only.
            Err(name) if export_all => {
                return Err(format!(
                    "environment variable {} has a name that is not valid UTF-8; {NOT_UTF8_HINT}",
                    show_os_str(&name)
                ))
            }
            Err(_) => continue,
        };
        if !(export_all || wanted.contains(&name.as_str())) || overridden(&name) {
            continue;
        }
        match value.into_string() {
            Ok(value) => {
                environment.insert(name, value);
            }
            Err(_) => {
                return Err(format!(
                    "environment variable {} is not valid UTF-8; {NOT_UTF8_HINT}",
                    escape_for_terminal(&name)
                ))
            }
        }
    }
    for (name, value) in named {
        if let Some(value) = value {
            environment.insert(name.to_string(), value.to_string());
        }
    }
    Ok(environment)
}

fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// What to do about an exported variable that is not UTF-8.
const NOT_UTF8_HINT: &str = "ysched can only carry UTF-8 environments: unset it or use \
                             --export=NONE/--export=VAR,...";

/// The submitter's environment, as the OS gives it: [`exported_environment`] decides what to
/// do with variables that are not UTF-8.
pub fn current_environment() -> impl Iterator<Item = (OsString, OsString)> {
    std::env::vars_os()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(directives: &[Directive]) -> Vec<Vec<&str>> {
        directives
            .iter()
            .map(|d| d.words.iter().map(String::as_str).collect())
            .collect()
    }

    #[test]
    fn directives_follow_the_shebang_and_comments() {
        let script = "#!/bin/bash\n\
                      # a comment\n\
                      #YSUB -J train\n\
                      \n\
                      #YSUB --gpus=2 -t 1:00:00   # trailing comment\n\
                      #YSUBX --not-a-directive\n\
                      #ysub --lowercase-is-a-comment\n\
                      \x20 #YSUB --indented-is-a-comment\n\
                      echo start\n\
                      #YSUB --after-command-is-ignored\n";
        let directives = script_directives(script).unwrap();
        assert_eq!(
            words(&directives),
            [vec!["-J", "train"], vec!["--gpus=2", "-t", "1:00:00"]]
        );
        assert_eq!(directives[0].line, 3);
        assert_eq!(directives[1].line, 5);
    }

    #[test]
    fn directives_without_shebang_and_with_crlf() {
        let script = "#YSUB -G 1\r\n#YSUB -p high\r\npython train.py\r\n";
        assert_eq!(
            words(&script_directives(script).unwrap()),
            [vec!["-G", "1"], vec!["-p", "high"]]
        );
        assert!(script_directives("echo hi\n#YSUB -G 1\n")
            .unwrap()
            .is_empty());
        assert!(script_directives("").unwrap().is_empty());
    }

    #[test]
    fn quoted_values_keep_their_spaces() {
        let directives =
            script_directives("#!/bin/sh\n#YSUB -J \"my job\" --output='out dir/%j.log'\n")
                .unwrap();
        assert_eq!(
            words(&directives),
            [vec!["-J", "my job", "--output=out dir/%j.log"]]
        );
        assert_eq!(
            split_words(r#"a\ b "c\"d" '' x#y"#).unwrap(),
            ["a b", "c\"d", "", "x#y"]
        );
        let err = script_directives("#YSUB -J \"open\n").unwrap_err();
        assert!(
            err.contains("line 1") && err.contains("unterminated"),
            "{err}"
        );
    }

    fn env() -> Vec<(String, String)> {
        [
            ("HOME", "/home/a"),
            ("PATH", "/bin"),
            ("CUDA_HOME", "/cuda"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn sorted(map: HashMap<String, String>) -> Vec<(String, String)> {
        let mut v: Vec<_> = map.into_iter().collect();
        v.sort();
        v
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn export_all_none_and_lists() {
        assert_eq!(exported_environment("ALL", env()).unwrap().len(), 3);
        assert!(exported_environment("NONE", env()).unwrap().is_empty());
        assert_eq!(
            sorted(exported_environment("PATH,FOO=bar,UNSET_VAR", env()).unwrap()),
            pairs(&[("FOO", "bar"), ("PATH", "/bin")])
        );
        let all_plus = sorted(exported_environment("ALL,PATH=/opt/bin,X=1", env()).unwrap());
        assert_eq!(
            all_plus,
            pairs(&[
                ("CUDA_HOME", "/cuda"),
                ("HOME", "/home/a"),
                ("PATH", "/opt/bin"),
                ("X", "1")
            ])
        );
        assert_eq!(
            sorted(exported_environment("NONE,X=a=b", env()).unwrap()),
            pairs(&[("X", "a=b")])
        );
        assert_eq!(exported_environment("all", env()).unwrap().len(), 3);
    }

    #[test]
    fn exported_variables_must_be_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let bad_value = |name: &str| {
            (
                OsString::from(name),
                OsString::from_vec(b"caf\xe9".to_vec()),
            )
        };
        let with = |extra: (OsString, OsString)| {
            let mut current: Vec<(OsString, OsString)> = env()
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
            current.push(extra);
            current
        };
        let hint = "ysched can only carry UTF-8 environments: unset it or use \
                    --export=NONE/--export=VAR,...";
        for spec in ["ALL", "FOO", "PATH,FOO", "NONE,FOO", "ALL,X=1"] {
            assert_eq!(
                exported_environment(spec, with(bad_value("FOO"))).unwrap_err(),
                format!("environment variable FOO is not valid UTF-8; {hint}"),
                "{spec}"
            );
        }
        // Not exported, or replaced by a value given here: no harm done.
        for spec in ["NONE", "PATH", "NONE,X=1", "ALL,FOO=plain", "FOO=plain"] {
            let exported = exported_environment(spec, with(bad_value("FOO"))).unwrap();
            assert_ne!(exported.get("FOO").map(String::as_str), Some("caf\u{fffd}"));
        }
        assert_eq!(
            exported_environment("ALL,FOO=plain", with(bad_value("FOO"))).unwrap()["FOO"],
            "plain"
        );
        let bad_name = (
            OsString::from_vec(b"F\xffO\x1b".to_vec()),
            OsString::from("x"),
        );
        assert_eq!(
            exported_environment("ALL", with(bad_name.clone())).unwrap_err(),
            format!("environment variable F\\xffO\\x1b has a name that is not valid UTF-8; {hint}")
        );
        assert_eq!(
            exported_environment("PATH", with(bad_name)).unwrap().len(),
            1
        );
    }

    #[test]
    fn export_rejects_nonsense() {
        for bad in ["", ",", "ALL,NONE", "1X=2", "=x", "A B"] {
            assert!(
                exported_environment(bad, env()).is_err(),
                "{bad:?} accepted"
            );
        }
    }
}
