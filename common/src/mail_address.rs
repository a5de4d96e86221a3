//! What `--mail-user` may be: an address `local@domain` or a local user name, each in a
//! conservative character set, so that no value can reach sendmail as an option (`-oQ/tmp`),
//! a program (`|/path`), a file (`/etc/passwd`) or a second header. `ysub`, `yslurm sbatch`
//! and `schedd` all check it with [`check_mail_user`], so the message is the same wherever it
//! is refused.
//!
//! - an address: the part before the one `@` is letters, digits and `. _ % + - =`, not
//!   starting with `-` or `.`, at most 64 bytes; the part after it is a domain name: labels
//!   of letters, digits and `-` (none starting or ending with `-`) joined by dots;
//! - a user name: letters, digits and `. _ -`, not starting with `-` or `.`.
//!
//! The length as a whole is `limits::MAIL_USER`, checked before this.

use crate::text::excerpt;

/// How much of a refused value the message echoes (escaped).
const ECHO_CHARS: usize = 64;
/// The longest part before the `@` (RFC 5321).
const MAX_LOCAL_PART: usize = 64;

/// Refuses a `--mail-user` value that is neither an address nor a user name (see the module
/// docs), saying why: `--mail-user "|/tmp/x" is not an address (it contains '|'): give
/// user@domain or a user name`. An empty value is no `--mail-user` (the submitting user):
/// the caller decides about it.
pub fn check_mail_user(value: &str) -> Result<(), String> {
    why_not(value).map_or(Ok(()), |why| {
        Err(format!(
            "--mail-user \"{}\" is not an address ({why}): give user@domain or a user name",
            excerpt(value, ECHO_CHARS)
        ))
    })
}

fn why_not(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("it is empty".into());
    }
    if let Some(c) = value.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Some(if c == ' ' {
            "it contains a space".into()
        } else {
            format!("it contains U+{:04X}", c as u32)
        });
    }
    if value.starts_with('-') {
        return Some("it starts with '-'".into());
    }
    let Some((local, domain)) = value.split_once('@') else {
        return why_not_name(value);
    };
    if domain.contains('@') {
        return Some("it has more than one '@'".into());
    }
    if local.is_empty() {
        return Some("nothing before the '@'".into());
    }
    if local.len() > MAX_LOCAL_PART {
        return Some(format!(
            "the part before the '@' is {} bytes; the limit is {MAX_LOCAL_PART}",
            local.len()
        ));
    }
    if let Some(c) = local.chars().find(|&c| !is_local_char(c)) {
        return Some(format!("it contains '{c}'"));
    }
    if local.starts_with('.') {
        return Some("it starts with '.'".into());
    }
    if domain.is_empty() {
        return Some("no domain after the '@'".into());
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if !domain.split('.').all(label_ok) {
        if let Some(c) = domain
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
        {
            return Some(format!("it contains '{c}'"));
        }
        return Some(format!(
            "'{}' is not a domain name",
            excerpt(domain, ECHO_CHARS)
        ));
    }
    None
}

fn why_not_name(value: &str) -> Option<String> {
    if let Some(c) = value.chars().find(|&c| !is_name_char(c)) {
        return Some(format!("it contains '{c}'"));
    }
    if value.starts_with('.') {
        return Some("it starts with '.'".into());
    }
    None
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn is_local_char(c: char) -> bool {
    is_name_char(c) || matches!(c, '%' | '+' | '=')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_user_names_are_accepted() {
        for ok in [
            "alice",
            "bob.smith",
            "svc_train-01",
            "alice@example.org",
            "first.last+ysched@mail.example.co.uk",
            "a%b=c@x-y.example",
            "root@localhost",
            "ALICE@EXAMPLE.ORG",
        ] {
            assert_eq!(check_mail_user(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn hostile_forms_are_refused_saying_why() {
        let refused = |value: &str, why: &str| {
            assert_eq!(
                check_mail_user(value),
                Err(format!(
                    "--mail-user \"{}\" is not an address ({why}): give user@domain or a user \
                     name",
                    excerpt(value, ECHO_CHARS)
                )),
                "{value:?}"
            );
        };
        // A program, a file, an option of sendmail's.
        refused("|/tmp/evil", "it contains '|'");
        refused("|/bin/sh -c id", "it contains a space");
        refused("/etc/passwd", "it contains '/'");
        refused("-oQ/tmp", "it starts with '-'");
        refused("-oQ/tmp@example.org", "it starts with '-'");
        refused("-t", "it starts with '-'");
        refused("alice@example.org -oQ/tmp", "it contains a space");
        refused("alice\tbob", "it contains U+0009");
        refused(
            "alice@example.org\r\nBcc: eve@example.org",
            "it contains U+000D",
        );
        refused("a\u{0}b", "it contains U+0000");
        refused("alice@|cat", "it contains '|'");
        refused("alice@exa/mple.org", "it contains '/'");
        refused("\"alice\"@example.org", "it contains '\"'");
        refused("alice,bob@example.org", "it contains ','");
        refused(
            "alice@example.org,eve@example.org",
            "it has more than one '@'",
        );
        refused("<alice@example.org>", "it contains '<'");
        refused("a@b@c", "it has more than one '@'");
        refused("@example.org", "nothing before the '@'");
        refused("alice@", "no domain after the '@'");
        refused(".alice@example.org", "it starts with '.'");
        refused(".hidden", "it starts with '.'");
        refused("alice@-example.org", "'-example.org' is not a domain name");
        refused("alice@example..org", "'example..org' is not a domain name");
        refused("alice@[127.0.0.1]", "it contains '['");
        refused("a+b", "it contains '+'");
        refused("", "it is empty");
        refused("élodie@example.org", "it contains 'é'");
        let long = format!("{}@example.org", "a".repeat(65));
        refused(
            &long,
            "the part before the '@' is 65 bytes; the limit is 64",
        );
    }
}
