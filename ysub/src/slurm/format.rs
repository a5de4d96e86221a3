//! Slurm's output formats: `%` format strings (`squeue -o "%.18i %j"`, `sinfo -o`), named
//! field lists (`squeue -O JobID:10,Name`) and fixed-width cells.

/// One piece of a `%` format string: literal text, or a field code with its width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Field(Field),
}

/// A field of a format: its code, width (`None`: as wide as its value) and alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub code: char,
    pub width: Option<usize>,
    /// `%.10i`: right-justified; otherwise left.
    pub right: bool,
}

/// The widest a field may ask to be: a bound on what one line may cost.
const MAX_WIDTH: usize = 1024;

/// Reads a `%[.][WIDTH]CODE` format; `known` are the codes the command has. `%%` is a `%`.
pub fn parse_percent_format(format: &str, known: &[char]) -> Result<Vec<Piece>, String> {
    // What the user typed goes back into messages: escaped for the terminal.
    let shown = ysched_common::text::escape_for_terminal(format);
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            text.push('%');
            continue;
        }
        let right = chars.next_if_eq(&'.').is_some();
        let mut digits = String::new();
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            digits.push(d);
        }
        let Some(code) = chars.next() else {
            return Err(format!("format '{shown}' ends inside a field"));
        };
        if !known.contains(&code) {
            let list: String = known.iter().map(|k| format!(" %{k}")).collect();
            return Err(format!(
                "format '{shown}': unknown field %{} (known:{list})",
                ysched_common::text::escape_for_terminal(&code.to_string())
            ));
        }
        let width = match digits.as_str() {
            "" => None,
            d => Some(
                d.parse::<usize>()
                    .ok()
                    .filter(|w| *w <= MAX_WIDTH)
                    .ok_or_else(|| format!("format '{shown}': width {d} is over {MAX_WIDTH}"))?,
            ),
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(Piece::Field(Field { code, width, right }));
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// Reads a `-O/--Format` list, `Name[:[.]WIDTH],...`, each name (any case) looked up in
/// `names` (name, code); fields without a width are 20 wide, as Slurm's, and a space follows
/// every field but the last.
pub fn parse_named_format(list: &str, names: &[(&str, char)]) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, width) = match item.split_once(':') {
            Some((name, width)) => (name, Some(width)),
            None => (item, None),
        };
        let Some((_, code)) = names.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) else {
            let known: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "unknown field '{name}' (known: {})",
                known.join(", ")
            ));
        };
        let (right, digits) = match width {
            Some(w) => match w.strip_prefix('.') {
                Some(rest) => (true, rest),
                None => (false, w),
            },
            None => (false, "20"),
        };
        let width = digits
            .parse::<usize>()
            .ok()
            .filter(|w| *w <= MAX_WIDTH)
            .ok_or_else(|| {
                format!("field '{item}': '{digits}' is not a width up to {MAX_WIDTH}")
            })?;
        if !pieces.is_empty() {
            pieces.push(Piece::Text(" ".into()));
        }
        pieces.push(Piece::Field(Field {
            code: *code,
            width: Some(width),
            right,
        }));
    }
    if pieces.is_empty() {
        return Err(format!("no field in '{list}'"));
    }
    Ok(pieces)
}

/// `value` cut or padded to `width` (in characters), as Slurm's formats print a field.
pub fn fit(value: &str, width: Option<usize>, right: bool) -> String {
    let Some(width) = width else {
        return value.to_string();
    };
    let cut: String = value.chars().take(width).collect();
    if right {
        format!("{cut:>width$}")
    } else {
        format!("{cut:<width$}")
    }
}

/// One line of a format: each field's value from `value`, in its width.
pub fn render_line(pieces: &[Piece], mut value: impl FnMut(char) -> String) -> String {
    let mut line = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => line.push_str(text),
            Piece::Field(field) => {
                line.push_str(&fit(&value(field.code), field.width, field.right));
            }
        }
    }
    // Terminal-safe: names and reasons are other users' text.
    ysched_common::text::escape_for_terminal(line.trim_end()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_formats_read_and_render_as_slurms() {
        let pieces = parse_percent_format("%.6i|%-%j %5u%%", &['i', 'j', 'u']).unwrap_or_default();
        assert!(pieces.is_empty(), "%- is no field");
        let pieces = parse_percent_format("%.6i|%j %5u%%", &['i', 'j', 'u']).unwrap();
        let line = render_line(&pieces, |code| match code {
            'i' => "12".into(),
            'j' => "train".into(),
            _ => "alexander".into(),
        });
        assert_eq!(line, "    12|train alexa%");
        let err = parse_percent_format("%i %z", &['i']).unwrap_err();
        assert!(err.contains("unknown field %z"), "{err}");
        assert!(parse_percent_format("%.9", &['i']).is_err());
        assert!(parse_percent_format("%99999i", &['i']).is_err());
    }

    #[test]
    fn named_formats_read_and_render() {
        let names = [("JobID", 'i'), ("Name", 'j')];
        let pieces = parse_named_format("jobid:.5,Name:4", &names).unwrap();
        assert_eq!(
            render_line(&pieces, |c| if c == 'i' {
                "7".into()
            } else {
                "training".into()
            }),
            "    7 trai"
        );
        let pieces = parse_named_format("JobID", &names).unwrap();
        assert_eq!(render_line(&pieces, |_| "7".into()), "7");
        let err = parse_named_format("JobID,Bogus", &names).unwrap_err();
        assert!(
            err.contains("unknown field 'Bogus' (known: JobID, Name)"),
            "{err}"
        );
        assert!(parse_named_format("JobID:x", &names).is_err());
    }
}
