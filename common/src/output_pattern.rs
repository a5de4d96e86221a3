//! The `%` letters of Slurm's output file patterns (`-o logs/%x-%j.out`) in one table
//! ([`LETTERS`]): which ysched expands, which only a job's run knows, and what the others
//! mean in Slurm, with the one expansion noded opens files with and the CLIs show.

/// One letter of Slurm's output patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Letter {
    pub letter: char,
    /// What it stands for in Slurm.
    pub means: &'static str,
    /// Whether ysched expands it ([`expand_output_pattern`]).
    pub expanded: bool,
    /// Whether only the job's run knows it (its id, its node), not its submit.
    pub at_run: bool,
}

const fn letter(letter: char, means: &'static str, expanded: bool, at_run: bool) -> Letter {
    Letter {
        letter,
        means,
        expanded,
        at_run,
    }
}

/// Every letter: ysched's, in the order messages list them, then Slurm's that ysched does
/// not expand. `%%` is a percent sign.
pub const LETTERS: &[Letter] = &[
    letter('j', "job id", true, true),
    letter('x', "job name", true, false),
    letter('A', "array job id", true, true),
    letter('a', "array task id", true, true),
    letter('N', "node name", true, true),
    letter('u', "user name", true, false),
    letter('J', "job id.step id", false, true),
    letter('s', "step id", false, true),
    letter('t', "task id", false, true),
    letter('n', "node id relative to the job", false, true),
    letter('b', "array task id modulo 10", false, true),
];

/// The row of `c`, if Slurm's patterns have it.
pub fn letter_of(c: char) -> Option<&'static Letter> {
    LETTERS.iter().find(|l| l.letter == c)
}

/// The letters ysched expands, as messages list them: `%j %x %A %a %N %u`.
pub fn expanded_letters() -> String {
    LETTERS
        .iter()
        .filter(|l| l.expanded)
        .map(|l| format!("%{}", l.letter))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `pattern` with each `%<letter>` that `value` writes (into the output, returning `true`)
/// replaced, `%%` as a percent sign, and any other `%` sequence kept as written: the one walk
/// over a pattern, for a job's files here and for `srun`'s per-task files.
pub fn expand_with(pattern: &str, mut value: impl FnMut(char, &mut String) -> bool) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(letter) => {
                if !value(letter, &mut out) {
                    out.push('%');
                    out.push(letter);
                }
            }
            None => out.push('%'),
        }
    }
    out
}

/// What sbatch-style patterns in output paths stand for (see [`expand_output_pattern`]).
#[derive(Debug, Clone, Copy)]
pub struct PatternVars<'a> {
    pub job_id: u64,
    pub job_name: &'a str,
    pub user: &'a str,
    /// The node the path is opened on; `None`: `%N` is kept as written (it differs per node).
    pub node: Option<&'a str>,
    /// An array task's array id and task index; `None`: not an array task.
    pub array: Option<(u64, u32)>,
}

/// Expands sbatch-style patterns: `%j` job id, `%x` job name, `%u` user, `%N` node, `%A` the
/// array's id (a plain job: its job id), `%a` the array task's index (a plain job: `0`), `%%` a
/// percent sign. Unknown patterns are kept as written. The one expansion noded opens files
/// with and the CLIs show.
pub fn expand_output_pattern(pattern: &str, vars: &PatternVars) -> String {
    use std::fmt::Write;
    expand_with(pattern, |letter, out| {
        match letter {
            'j' => {
                let _ = write!(out, "{}", vars.job_id);
            }
            'x' => out.push_str(vars.job_name),
            'u' => out.push_str(vars.user),
            'N' => match vars.node {
                Some(node) => out.push_str(node),
                None => return false,
            },
            'A' => {
                let array_id = vars.array.map_or(vars.job_id, |(array_id, _)| array_id);
                let _ = write!(out, "{array_id}");
            }
            'a' => {
                let _ = write!(out, "{}", vars.array.map_or(0, |(_, task)| task));
            }
            _ => return false,
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_what_the_expansion_does() {
        let vars = PatternVars {
            job_id: 7,
            job_name: "n",
            user: "u",
            node: Some("h"),
            array: Some((5, 2)),
        };
        for l in LETTERS {
            let pattern = format!("%{}", l.letter);
            let expanded = expand_output_pattern(&pattern, &vars) != pattern;
            assert_eq!(expanded, l.expanded, "%{}", l.letter);
        }
        assert_eq!(expanded_letters(), "%j %x %A %a %N %u");
        assert_eq!(
            expand_output_pattern("%x-%j_%A_%a.%N.%u %% 100%%j %q %", &vars),
            "n-7_5_2.h.u % 100%j %q %"
        );
        let no_node = PatternVars { node: None, ..vars };
        assert_eq!(expand_output_pattern("%N/%j", &no_node), "%N/7");
    }
}
