//! The submit-time check of the job's output directories: `-o logs/%x-%j.out` where `logs/`
//! does not exist fails the job at launch, so `ysub` looks, as the user on the submit host,
//! and warns (the directory may still exist on the node, as on a node-local disk: the submit
//! goes ahead).

use std::path::{Path, PathBuf};
use ysched_common::output_pattern::{expand_output_pattern, Letter, PatternVars, LETTERS};
use ysched_common::text::escape_for_terminal;
use ysched_proto::JobSpec;

/// Output thrown away: no file is made, so its directory (`/dev`, not the user's) need not
/// take one.
const DISCARDED: &str = "/dev/null";

/// The directory of the output file `pattern` as the job will open it, relative to `workdir`
/// (`%x` and `%u` filled in), or `None` when it cannot be known at submit or is the working
/// directory itself.
pub fn output_dir(pattern: &str, workdir: &str, job_name: &str, user: &str) -> Option<PathBuf> {
    if pattern == DISCARDED {
        return None;
    }
    let (dir, _) = pattern.rsplit_once('/')?;
    if dir.is_empty() {
        return Some(PathBuf::from("/"));
    }
    // `%%j` is a literal `%j`, which is fine; anything else naming the run is not known yet.
    // A directory holding a letter only the job's run knows cannot be checked at submit.
    let unescaped = dir.replace("%%", "");
    let at_run = |l: &&Letter| l.expanded && l.at_run;
    if LETTERS
        .iter()
        .filter(at_run)
        .any(|l| unescaped.contains(&format!("%{}", l.letter)))
    {
        return None;
    }
    let vars = PatternVars {
        job_id: 0,
        job_name,
        user,
        node: None,
        array: None,
    };
    let dir = expand_output_pattern(dir, &vars);
    Some(Path::new(workdir).join(dir))
}

/// Why `dir` would not take the job's output when the job runs as the caller here: it does
/// not exist, is not a directory, or the caller may not create files in it. `None`: it would.
pub fn unusable(dir: &Path) -> Option<&'static str> {
    use nix::unistd::{access, AccessFlags};
    match std::fs::metadata(dir) {
        Err(_) => Some("does not exist"),
        Ok(meta) if !meta.is_dir() => Some("is not a directory"),
        // access(2) checks the real uid: the user who runs ysub, whom the job runs as.
        Ok(_) if access(dir, AccessFlags::W_OK | AccessFlags::X_OK).is_err() => {
            Some("is not writable by you")
        }
        Ok(_) => None,
    }
}

/// The warnings for `spec`'s output and error files, one per directory (`warning: the output
/// directory 'logs' does not exist here; ...`), shown as the user typed the path.
pub fn output_dir_warnings(spec: &JobSpec, user: &str) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for (what, pattern) in [("output", &spec.stdout_path), ("error", &spec.stderr_path)] {
        let Some(dir) = output_dir(pattern, &spec.workdir, &spec.name, user) else {
            continue;
        };
        if seen.contains(&dir) {
            continue;
        }
        let Some(why) = unusable(&dir) else {
            continue;
        };
        let shown = pattern.rsplit_once('/').map_or("", |(d, _)| d);
        warnings.push(format!(
            "warning: the {what} directory '{}' {why} here; the job will fail at launch unless \
             it exists{} on the node",
            escape_for_terminal(if shown.is_empty() { "/" } else { shown }),
            if why == "does not exist" {
                ""
            } else {
                " and is writable"
            }
        ));
        seen.push(dir);
    }
    warnings
}

/// Whether the output or error pattern names a directory at all ([`output_dir`] is `None` for
/// a pattern without a `/`: the working directory).
fn names_a_directory(spec: &JobSpec) -> bool {
    [&spec.stdout_path, &spec.stderr_path]
        .iter()
        .any(|pattern| pattern.contains('/') && *pattern != DISCARDED)
}

/// How long the look may take: a directory on a hung network or FUSE mount would otherwise
/// hold the submit forever, for a warning.
const LOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Prints [`output_dir_warnings`] on stderr; the submit goes ahead. The look runs on a thread
/// of its own and is given [`LOOK_TIMEOUT`]: past it, ysub says it could not look and submits
/// (the thread is left behind; the process's exit ends it).
pub fn warn_about_output_dirs(spec: &JobSpec) {
    if !names_a_directory(spec) {
        // The usual case (`ysched-%j.out`, files in the working directory): nothing to look
        // at, so no thread, no copy of the spec and no user lookup on every submit.
        return;
    }
    let user = crate::queue::current_user_name().unwrap_or_default();
    let (tx, rx) = std::sync::mpsc::channel();
    let looked_at = spec.clone();
    let spawned = std::thread::Builder::new()
        .name("output-dir".into())
        .spawn(move || {
            let _ = tx.send(output_dir_warnings(&looked_at, &user));
        });
    if spawned.is_err() {
        return;
    }
    match rx.recv_timeout(LOOK_TIMEOUT) {
        Ok(warnings) => {
            for warning in warnings {
                eprintln!("{warning}");
            }
        }
        Err(_) => eprintln!(
            "warning: could not check the output directory here within {} s (a slow or hung \
             filesystem?); submitting anyway",
            LOOK_TIMEOUT.as_secs()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(workdir: &Path, stdout: &str, stderr: &str) -> JobSpec {
        JobSpec {
            name: "train".into(),
            workdir: workdir.display().to_string(),
            stdout_path: stdout.into(),
            stderr_path: stderr.into(),
            ..Default::default()
        }
    }

    #[test]
    fn only_patterns_with_a_directory_are_looked_at() {
        let here = Path::new("/nonexistent-workdir");
        for (stdout, stderr, looked) in [
            ("ysched-%j.out", "", false),
            ("out-%j.txt", "err-%j.txt", false),
            ("logs/%j.out", "", true),
            ("o.txt", "/tmp/e.txt", true),
            ("/dev/null", "/dev/null", false),
        ] {
            let spec = spec(here, stdout, stderr);
            assert_eq!(names_a_directory(&spec), looked, "{stdout} {stderr}");
            if !looked {
                // Nothing was skipped that the look would have warned about.
                assert!(output_dir_warnings(&spec, "alice").is_empty());
            }
        }
    }

    #[test]
    fn directories_are_found_with_what_submit_knows() {
        let dir = |p| output_dir(p, "/work", "train", "alice");
        assert_eq!(dir("logs/%x-%j.out"), Some(PathBuf::from("/work/logs")));
        assert_eq!(
            dir("/data/%u/%x/o.txt"),
            Some(PathBuf::from("/data/alice/train"))
        );
        assert_eq!(dir("out-%j.txt"), None, "the working directory itself");
        assert_eq!(dir("/o.txt"), Some(PathBuf::from("/")));
        assert_eq!(
            dir("/dev/null"),
            None,
            "output thrown away: no directory to look at"
        );
        assert_eq!(dir("logs/%j/o.txt"), None, "known only when it runs");
        assert_eq!(dir("logs/%N/o.txt"), None);
        assert_eq!(
            dir("logs/100%%j/o"),
            Some(PathBuf::from("/work/logs/100%j"))
        );
    }

    #[test]
    fn a_missing_output_directory_is_warned_about_once() {
        let tmp = std::env::temp_dir().join(format!("ysub-outdir-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("present")).unwrap();
        let warnings =
            output_dir_warnings(&spec(&tmp, "logs/%x-%j.out", "logs/%x-%j.err"), "alice");
        assert_eq!(
            warnings,
            [
                "warning: the output directory 'logs' does not exist here; the job will fail at \
              launch unless it exists on the node"
            ]
        );
        assert!(output_dir_warnings(&spec(&tmp, "present/%j.out", ""), "alice").is_empty());
        std::fs::write(tmp.join("file"), "").unwrap();
        let warnings = output_dir_warnings(&spec(&tmp, "", "file/e.txt"), "alice");
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("error directory 'file' is not a directory"),
            "{warnings:?}"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
