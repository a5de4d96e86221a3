//! Slurm's host lists (`a,b,node[1-3,07],rack[1-2]-gpu[01-04]`): expanded into node names, with
//! a bound on how many they may name, so that `node[1-999999999]` is refused, not allocated;
//! and compressed from them, as Slurm's commands print a job's nodes (`n[1-3,7]`).

/// The most names one host list may expand to: as many as a job may have nodes.
pub const MAX_HOSTS: usize = ysched_common::limits::MAX_NODES as usize;

/// The node names `list` names, in order, duplicates dropped (Slurm's `-w a,a` is node `a`
/// once). Items are separated by commas outside brackets; each may hold bracketed ranges,
/// `[1-3,5]`, whose numbers keep the width of a zero-padded start (`[07-10]` gives `07`, `08`,
/// `09`, `10`). More than `max` names, or a malformed item, is an error naming it; `flag`
/// labels the messages.
pub fn expand_hostlist(flag: &str, list: &str, max: usize) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for item in split_outside_brackets(list) {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!(
                "{flag} '{}' has an empty name (give e.g. node1,node[2-4])",
                excerpt(list)
            ));
        }
        let mut expanded = vec![String::new()];
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            let close = rest[open..].find(']').map(|i| open + i).ok_or_else(|| {
                format!(
                    "{flag} '{}': '[' without ']' in '{}'",
                    excerpt(list),
                    excerpt(item)
                )
            })?;
            let prefix = &rest[..open];
            let choices = range_items(flag, item, &rest[open + 1..close], max)?;
            let count = expanded.len().saturating_mul(choices.len());
            if count > max {
                return Err(too_many(flag, list, max));
            }
            expanded = expanded
                .iter()
                .flat_map(|head| choices.iter().map(move |c| format!("{head}{prefix}{c}")))
                .collect();
            rest = &rest[close + 1..];
        }
        if rest.contains(']') {
            return Err(format!(
                "{flag} '{}': ']' without '[' in '{}'",
                excerpt(list),
                excerpt(item)
            ));
        }
        for name in expanded {
            let name = name + rest;
            if seen.insert(name.clone()) {
                if names.len() == max {
                    return Err(too_many(flag, list, max));
                }
                names.push(name);
            }
        }
    }
    Ok(names)
}

/// The message for a list past `max` names.
fn too_many(flag: &str, list: &str, max: usize) -> String {
    format!(
        "{flag} '{}' names more than {max} nodes (the most a job may have)",
        excerpt(list)
    )
}

/// A short excerpt of `text` for messages: a host list may be long.
fn excerpt(text: &str) -> String {
    ysched_common::text::excerpt(text, 60)
}

/// The items of `list` separated by commas that are not inside brackets.
fn split_outside_brackets(list: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&list[start..]);
    items
}

/// The texts one bracket stands for: `1-3,5` gives `1 2 3 5`, `07-09` gives `07 08 09`.
fn range_items(flag: &str, item: &str, inside: &str, max: usize) -> Result<Vec<String>, String> {
    let bad = |why: &str| {
        format!(
            "{flag}: bad range '[{inside}]' in '{}': {why}",
            excerpt(item)
        )
    };
    let mut out = Vec::new();
    for part in inside.split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(first) || !digits(last) {
            return Err(bad("use numbers, e.g. [1-4,7]"));
        }
        let (Ok(lo), Ok(hi)) = (first.parse::<u64>(), last.parse::<u64>()) else {
            return Err(bad("a number is too large"));
        };
        if lo > hi {
            return Err(bad("a range goes backwards"));
        }
        if hi - lo >= max as u64 || out.len() + (hi - lo) as usize >= max {
            return Err(bad(&format!("more than {max} names")));
        }
        let width = first.len();
        out.extend((lo..=hi).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Slurm's compressed host list: names that differ only in a trailing number share a
/// prefix and a bracketed list of ranges (`n1,n2,n3,n7` → `n[1-3,7]`), numbers keeping
/// their zero padding; others are listed as they are. Order is kept by first appearance.
pub fn compress_hostlist(names: &[&str]) -> String {
    // (prefix, width, numbers) groups in order; width 0: no zero padding.
    let mut groups: Vec<(String, usize, Vec<u64>)> = Vec::new();
    let mut items: Vec<Result<usize, String>> = Vec::new();
    for name in names {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, number) = name.split_at(name.len() - digits);
        let parsed = (digits > 0 && digits <= 18)
            .then(|| number.parse::<u64>().ok())
            .flatten();
        let Some(value) = parsed else {
            items.push(Err(name.to_string()));
            continue;
        };
        let width = if number.starts_with('0') && digits > 1 {
            digits
        } else {
            0
        };
        match groups
            .iter()
            .position(|(p, w, _)| p == prefix && *w == width)
        {
            Some(index) => groups[index].2.push(value),
            None => {
                groups.push((prefix.to_string(), width, vec![value]));
                items.push(Ok(groups.len() - 1));
            }
        }
    }
    let rendered: Vec<String> = items
        .into_iter()
        .map(|item| match item {
            Err(name) => name,
            Ok(index) => {
                let (prefix, width, numbers) = &mut groups[index];
                numbers.sort_unstable();
                numbers.dedup();
                let number = |n: u64| format!("{n:0width$}", width = *width);
                if let [only] = numbers.as_slice() {
                    return format!("{prefix}{}", number(*only));
                }
                let mut ranges: Vec<String> = Vec::new();
                let mut start = numbers[0];
                let mut end = start;
                for &n in &numbers[1..] {
                    if n == end + 1 {
                        end = n;
                        continue;
                    }
                    ranges.push(range_text(start, end, &number));
                    start = n;
                    end = n;
                }
                ranges.push(range_text(start, end, &number));
                format!("{prefix}[{}]", ranges.join(","))
            }
        })
        .collect();
    rendered.join(",")
}

fn range_text(start: u64, end: u64, number: &dyn Fn(u64) -> String) -> String {
    if start == end {
        number(start)
    } else {
        format!("{}-{}", number(start), number(end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_compress_as_slurms() {
        assert_eq!(compress_hostlist(&[]), "");
        assert_eq!(compress_hostlist(&["n1"]), "n1");
        assert_eq!(compress_hostlist(&["n1", "n2", "n3", "n7"]), "n[1-3,7]");
        assert_eq!(
            compress_hostlist(&["gpu07", "gpu08", "login"]),
            "gpu[07-08],login"
        );
        assert_eq!(compress_hostlist(&["b2", "a1", "b1"]), "b[1-2],a1");
    }
}
