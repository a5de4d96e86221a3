//! User-supplied text that ends up on someone's terminal: job names, accounts, drain reasons,
//! node names, paths. Two rules keep a terminal safe from what other users typed:
//!
//! * [`check_printable`] refuses control characters and invisible formatting characters
//!   (zero-width spaces and joiners, bidi marks and overrides, the byte-order mark, soft
//!   hyphens: Unicode's whole `Cf` category), which reorder, hide or break a line, where such
//!   text enters the system;
//! * [`escape_for_terminal`] shows whatever gets through anyway (older records, names from
//!   agents, paths) as visible escapes, `\n`, `\x1b`, `\u{202e}`, in human-readable output.
//!
//! JSON output needs neither: serde escapes control characters itself. Error messages echo at
//! most an [`excerpt`] of what a user gave.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Output paths' patterns, kept here for the callers that expand them by this path.
pub use crate::output_pattern::{expand_output_pattern, PatternVars};

/// Whether `c` is a control character (C0, DEL, C1) or a line or paragraph separator
/// (U+2028, U+2029).
fn is_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Whether `c` is in Unicode's `Cf` (format) category (Unicode 15.1): characters that are not
/// shown but change how text around them reads, e.g. U+200B ZERO WIDTH SPACE, U+200E/U+200F
/// (LRM, RLM), U+061C (ALM), U+202A–U+202E and U+2066–U+2069 (bidi embeddings, overrides and
/// isolates), U+FEFF (BOM), U+00AD (soft hyphen), U+E0001 and the tag characters.
pub fn is_format_char(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

/// Whether `c` must not reach a terminal as is: a control character (C0, DEL, C1), a line or
/// paragraph separator (U+2028, U+2029), or a format character ([`is_format_char`]: bidi
/// controls, zero-width characters, ...), which can make text read differently from what it
/// is, or hide part of it.
pub fn is_unsafe_char(c: char) -> bool {
    is_control(c) || is_format_char(c)
}

/// How much of a refused value an error message echoes (escaped), so a huge value does not
/// flood the terminal.
const ECHO_CHARS: usize = 80;

/// At most `max_chars` characters of `value`, escaped for a terminal ([`escape_for_terminal`]),
/// with `…` when cut: what an error message may echo of a user's input.
pub fn excerpt(value: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut shown = 0;
    // Only what is shown is looked at: the cost does not grow with the value.
    for c in value.chars() {
        let before = out.len();
        push_escaped(&mut out, c);
        // Escapes are ASCII; other characters count one each.
        let width = if is_unsafe_char(c) {
            out.len() - before
        } else {
            1
        };
        if shown + width > max_chars {
            out.truncate(before);
            out.push('…');
            return out;
        }
        shown += width;
    }
    out
}

/// `c`, or its visible escape when [`is_unsafe_char`] flags it.
fn push_escaped(out: &mut String, c: char) {
    if !is_unsafe_char(c) {
        out.push(c);
        return;
    }
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// Refuses `value` if it holds a character [`is_unsafe_char`] flags. `field` names the value
/// in the message, e.g. `job name "bad\nname" contains a control character (U+000A); names may
/// not contain control characters`, or `... contains an invisible formatting character
/// (U+200B); names may not contain control or formatting characters`.
pub fn check_printable(field: &str, value: &str) -> Result<(), String> {
    let Some(bad) = value.chars().find(|&c| is_unsafe_char(c)) else {
        return Ok(());
    };
    let shown = excerpt(value, ECHO_CHARS);
    // "job name" → "names", "account" → "accounts", "mail address" → "addresses".
    let noun = field.rsplit(' ').next().unwrap_or(field);
    let noun = if noun.ends_with('s') {
        format!("{noun}e")
    } else {
        noun.to_string()
    };
    if is_control(bad) {
        Err(format!(
            "{field} \"{shown}\" contains a control character (U+{:04X}); {noun}s may not \
             contain control characters",
            bad as u32
        ))
    } else {
        Err(format!(
            "{field} \"{shown}\" contains an invisible formatting character (U+{:04X}); {noun}s \
             may not contain control or formatting characters",
            bad as u32
        ))
    }
}

/// `s` with every character [`is_unsafe_char`] flags replaced by a visible escape: `\n`, `\r`,
/// `\t`, `\x1b` (other ASCII controls and DEL as `\xNN`), and `\u{85}`, `\u{202e}` beyond
/// ASCII. Everything else, non-ASCII letters included, is kept as is; text that needs no
/// escaping is returned borrowed.
pub fn escape_for_terminal(s: &str) -> Cow<'_, str> {
    let clean = if s.is_ascii() {
        !s.bytes().any(|b| b < 0x20 || b == 0x7f)
    } else {
        !s.chars().any(is_unsafe_char)
    };
    if clean {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// How many characters `s` takes once [`escape_for_terminal`] has escaped it (what a table
/// pads to): its length in one look for text of printable ASCII only, the common case.
pub fn escaped_width(s: &str) -> usize {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return s.len();
    }
    escape_for_terminal(s).chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_width_counts_what_the_escape_shows() {
        for text in [
            "",
            "train-llm",
            "a b",
            "bad\nname",
            "\x1b[31m",
            "résumé 训练",
            "x\u{202e}y",
            "\x7f",
        ] {
            assert_eq!(
                escaped_width(text),
                escape_for_terminal(text).chars().count(),
                "{text:?}"
            );
        }
        assert_eq!(escaped_width("bad\nname"), "bad\\nname".len());
    }

    #[test]
    fn printable_text_passes() {
        for ok in [
            "",
            "train-llm",
            "my job",
            "résumé α→β 训练 🚀",
            "path/with\\backslash",
            "עברית",
        ] {
            assert_eq!(check_printable("job name", ok), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn control_characters_are_refused_with_the_code_point() {
        assert_eq!(
            check_printable("job name", "bad\nname").unwrap_err(),
            "job name \"bad\\nname\" contains a control character (U+000A); names may not \
             contain control characters"
        );
        let err = check_printable("account", "x\x1b[2J").unwrap_err();
        assert!(
            err.starts_with(
                "account \"x\\x1b[2J\" contains a control character (U+001B); accounts may"
            ),
            "{err}"
        );
        let err = check_printable("drain reason", "fan\u{202e}olleh").unwrap_err();
        assert!(
            err.contains("invisible formatting character (U+202E); reasons may not"),
            "{err}"
        );
        for bad in [
            "a\rb",
            "a\tb",
            "a\x7fb",
            "a\u{85}b",
            "a\u{9b}b",
            "a\u{2028}b",
            "a\u{2029}b",
            "a\u{202a}b",
            "a\u{202d}b",
            "a\u{2066}b",
            "a\u{2069}b",
            "\0",
        ] {
            assert!(
                check_printable("job name", bad).is_err(),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn invisible_formatting_characters_are_refused() {
        // Zero-width space, LRM, RLM, ALM, BOM, soft hyphen, word joiner, a tag character.
        for c in [
            '\u{200b}',
            '\u{200e}',
            '\u{200f}',
            '\u{061c}',
            '\u{feff}',
            '\u{ad}',
            '\u{2060}',
            '\u{e0041}',
            '\u{200d}',
            '\u{2066}',
        ] {
            let err = check_printable("job name", &format!("a{c}b")).unwrap_err();
            assert!(
                err.contains(&format!(
                    "contains an invisible formatting character (U+{:04X})",
                    c as u32
                )),
                "{err}"
            );
            assert_eq!(
                escape_for_terminal(&format!("a{c}")),
                format!("a\\u{{{:x}}}", c as u32)
            );
        }
        // Visible neighbours of the format characters pass.
        for ok in ["a\u{2010}b", "\u{2070}", "\u{fefe}", "\u{061b}", "\u{00ae}"] {
            assert_eq!(check_printable("job name", ok), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn excerpts_are_short_and_escaped() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt(&"x".repeat(1000), 5), "xxxxx…");
        assert_eq!(excerpt("a\nb", 10), "a\\nb");
        // Escapes count as what they show, and are never cut.
        assert_eq!(excerpt("\n\n\n\n", 5), "\\n\\n…");
        assert_eq!(excerpt("ab\u{202e}", 3), "ab…");
        assert_eq!(excerpt("训练训练", 2), "训练…");
    }

    #[test]
    fn refused_values_are_echoed_short() {
        let long = format!("{}\n", "x".repeat(10_000));
        let err = check_printable("job name", &long).unwrap_err();
        assert!(err.len() < 300, "{err}");
        assert!(err.contains("x…\""), "{err}");
    }

    #[test]
    fn escapes() {
        assert!(matches!(
            escape_for_terminal("plain"),
            Cow::Borrowed("plain")
        ));
        assert!(matches!(escape_for_terminal("训练 é"), Cow::Borrowed(_)));
        assert_eq!(escape_for_terminal("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(escape_for_terminal("\x1b[2J"), "\\x1b[2J");
        assert_eq!(escape_for_terminal("\0\x07\x7f"), "\\x00\\x07\\x7f");
        assert_eq!(escape_for_terminal("a\u{85}b"), "a\\u{85}b");
        assert_eq!(escape_for_terminal("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(
            escape_for_terminal("\u{2028}\u{2069}"),
            "\\u{2028}\\u{2069}"
        );
        assert_eq!(escape_for_terminal("é\n"), "é\\n");
        // The escaped text itself is safe.
        for s in ["\x1b]0;pwned\x07", "\u{202e}x", "\r\n"] {
            assert_eq!(check_printable("x", &escape_for_terminal(s)), Ok(()));
        }
    }
}
