//! Slurm's forms of option values read as ysub's: memory sizes with `KB`..`TB`, node counts
//! as `N-N`, feature expressions, output patterns (checked against the letters ysched
//! expands) and `--gres gpu[:TYPE][:N]`.

use ysched_common::limits::MAX_GPUS;
use ysched_common::parse::{parse_bounded_u32, parse_job_mem_mib, parse_mem_mib};
use ysched_common::text::excerpt;

/// Slurm's `--mem` as ysub's: `KB`, `MB`, `GB`, `TB` (as submitit writes them) are `K`, `M`,
/// `G`, `T`; `0`, all of a node's memory in Slurm, is refused with what to give instead.
pub fn slurm_mem(value: &str) -> Result<String, String> {
    let trimmed = value.trim();
    let size = match trimmed.strip_suffix(['B', 'b']) {
        Some(head) if head.ends_with(|c: char| "KMGTkmgt".contains(c)) => head,
        _ => trimmed,
    };
    if parse_mem_mib(size) == Ok(0) {
        return Err(
            "--mem=0 (all of a node's memory) is not supported: give --exclusive for whole \
             nodes, or a size such as 64G"
                .into(),
        );
    }
    parse_job_mem_mib(size).map_err(|e| e.to_string())?;
    Ok(size.to_string())
}

/// Slurm's `-N`: `N`, or `MIN-MAX` with MIN = MAX.
pub fn slurm_nodes(value: &str) -> Result<String, String> {
    let trimmed = value.trim();
    let one_number = || {
        format!(
            "'{}': ysched runs a job on exactly N nodes: give one number",
            excerpt(trimmed, 30)
        )
    };
    if trimmed.contains([',', ':']) {
        return Err(one_number());
    }
    match trimmed.split_once('-') {
        None => Ok(trimmed.to_string()),
        Some((low, high))
            if !low.is_empty() && low.trim_start_matches('0') == high.trim_start_matches('0') =>
        {
            Ok(low.to_string())
        }
        Some(_) => Err(one_number()),
    }
}

/// Slurm's `-C` as ysub's: `&` and `,` both mean "and"; the rest of Slurm's feature
/// expressions (OR, brackets, counts, negation) has no ysched meaning.
pub fn slurm_constraint(value: &str) -> Result<String, String> {
    if let Some(bad) = value.chars().find(|c| "|[]*()!".contains(*c)) {
        return Err(format!(
            "'{}': '{bad}' is not supported: ysched's features are all required (a&b or a,b); \
             for one of several, submit to each or ask for a common feature",
            excerpt(value, 60)
        ));
    }
    Ok(value.replace('&', ","))
}

/// Refuses an `-o`/`-e` pattern with a `%` letter ysched does not expand, or with padding
/// (`%4j`), naming it: a file name with `%t` left in it would surprise.
pub fn check_output_pattern(pattern: &str) -> Result<(), String> {
    use ysched_common::output_pattern::{expanded_letters, letter_of};
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            width.push(d);
        }
        let Some(letter) = chars.next().filter(|l| *l != '%') else {
            continue;
        };
        match letter_of(letter) {
            Some(l) if l.expanded && !width.is_empty() => {
                return Err(format!(
                    "'%{width}{letter}': padding is not supported; write %{letter}"
                ))
            }
            Some(l) if l.expanded => {}
            known => {
                let meaning = known.map(|l| format!(" ({})", l.means)).unwrap_or_default();
                return Err(format!(
                    "'%{letter}'{meaning} in '{}' has no ysched meaning: use {} or %%",
                    excerpt(pattern, 60),
                    expanded_letters()
                ));
            }
        }
    }
    Ok(())
}

/// `--gres gpu[:TYPE][:N]`: GPUs per node and their model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GresGpus {
    pub per_node: u32,
    pub gpu_type: Option<String>,
}

/// The value parser of `--gres`: `gpu`, `gpu:N`, `gpu:TYPE` or `gpu:TYPE:N` (N from 0 to
/// 100000, default 1); another resource, or more than one, is refused.
pub fn gres(value: &str) -> Result<GresGpus, String> {
    let text = value.trim();
    let bad = |why: String| format!("invalid --gres '{}': {why}", excerpt(text, 60));
    if text.contains(',') {
        return Err(bad("give one resource, gpu[:TYPE][:N]".into()));
    }
    let mut fields = text.split(':');
    let name = fields.next().unwrap_or_default();
    if name != "gpu" {
        return Err(bad(format!(
            "ysched schedules GPUs only ('{}' is not gpu): give gpu[:TYPE][:N], and -C/--constraint for node features",
            excerpt(name, 30)
        )));
    }
    let rest: Vec<&str> = fields.collect();
    let count =
        |text: &str| parse_bounded_u32("--gres", text, 0, MAX_GPUS).map_err(|e| e.to_string());
    let is_number = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let (gpu_type, per_node) = match rest[..] {
        [] => (None, 1),
        [n] if is_number(n) => (None, count(n)?),
        [model] => (Some(model), 1),
        [model, n] => (Some(model), count(n)?),
        _ => return Err(bad("use gpu[:TYPE][:N]".into())),
    };
    if gpu_type.is_some_and(|t| t.trim().is_empty()) {
        return Err(bad("the GPU type is empty".into()));
    }
    Ok(GresGpus {
        per_node,
        gpu_type: gpu_type.map(str::to_string),
    })
}
