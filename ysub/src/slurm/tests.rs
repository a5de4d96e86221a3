//! Tests of Slurm's side alone: host lists, the sbatch table and its notes, and the user
//! guide's copy of the table. How the table's translations make ysub's jobs is tested with
//! ysub's submit (`crate::submit::sbatch`).

use super::table::{by_long, Action, SBATCH_OPTIONS};
use super::*;

#[test]
fn host_lists_expand_with_their_padding() {
    let expand = |list: &str| expand_hostlist("--nodelist", list, MAX_HOSTS);
    assert_eq!(expand("a").unwrap(), ["a"]);
    assert_eq!(
        expand("a,b,node[1-3,07]").unwrap(),
        ["a", "b", "node1", "node2", "node3", "node07"]
    );
    assert_eq!(expand("gpu[08-10]").unwrap(), ["gpu08", "gpu09", "gpu10"]);
    assert_eq!(
        expand("r[1-2]-n[1-2].ib").unwrap(),
        ["r1-n1.ib", "r1-n2.ib", "r2-n1.ib", "r2-n2.ib"]
    );
    assert_eq!(expand("a,a,n[1-2],n1").unwrap(), ["a", "n1", "n2"]);
    assert_eq!(expand("n[1-10000]").unwrap().len(), 10_000);
    for (bad, wanted) in [
        ("", "empty name"),
        ("a,,b", "empty name"),
        ("n[1-3", "'[' without ']'"),
        ("n1-3]", "']' without '['"),
        ("n[3-1]", "goes backwards"),
        ("n[a-b]", "use numbers"),
        ("n[1-99999999999999999999]", "too large"),
        ("n[1-10001]", "more than 10000"),
        ("n[1-100][1-200]", "more than 10000 nodes"),
        ("n[1-5000],m[1-5001]", "more than 10000 nodes"),
    ] {
        let err = expand(bad).unwrap_err();
        assert!(err.contains(wanted), "{bad}: {err}");
        assert!(err.starts_with("--nodelist"), "{err}");
    }
}

#[test]
fn the_output_notes_name_the_letters_of_the_pattern_table() {
    use ysched_common::output_pattern::LETTERS;
    let letters = |expanded: bool| {
        LETTERS
            .iter()
            .filter(|l| l.expanded == expanded)
            .map(|l| format!("%{}", l.letter))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for long in ["output", "error"] {
        let note = by_long(long).unwrap().note;
        assert!(
            note.contains(&format!("`{} %%` are expanded", letters(true))),
            "{note}"
        );
        assert!(
            note.contains(&format!("other letters (`{}`)", letters(false))),
            "{note}"
        );
    }
}

#[test]
fn the_table_is_consistent() {
    let mut longs: Vec<&str> = SBATCH_OPTIONS.iter().map(|o| o.long).collect();
    let sorted = {
        let mut s = longs.clone();
        s.sort_unstable();
        s
    };
    assert_eq!(longs, sorted, "the table is sorted by long name");
    longs.dedup();
    assert_eq!(longs.len(), SBATCH_OPTIONS.len(), "no option twice");
    let mut shorts: Vec<char> = SBATCH_OPTIONS.iter().filter_map(|o| o.short).collect();
    let count = shorts.len();
    shorts.sort_unstable();
    shorts.dedup();
    assert_eq!(shorts.len(), count, "no letter twice");
    for option in SBATCH_OPTIONS {
        assert!(!option.note.is_empty(), "{}", option.long);
        if option.action == Action::Refuse {
            // Printed in error messages as they are: plain text.
            assert!(!option.note.contains('`'), "{}", option.long);
        }
    }
    // sbatch options a Slurm user may write, rare ones included: each is in the table (so it is
    // translated, carried out or refused with the alternative, never unknown).
    for name in [
        "mem-per-cpu",
        "mem-per-gpu",
        "gpus-per-task",
        "gpu-bind",
        "cpu-bind",
        "distribution",
        "licenses",
        "reservation",
        "nice",
        "priority",
        "time-min",
        "deadline",
        "clusters",
        "container",
        "network",
        "switches",
        "core-spec",
        "thread-spec",
        "hint",
        "sockets-per-node",
        "cores-per-socket",
        "threads-per-core",
        "tmp",
        "uid",
        "gid",
        "get-user-env",
        "kill-on-invalid-dep",
        "propagate",
        "profile",
        "acctg-freq",
        "mcs-label",
        "burst-buffer",
        "bb",
        "bbf",
        "batch",
        "chdir",
        "input",
        "overcommit",
        "oversubscribe",
        "spread-job",
        "use-min-nodes",
        "wait-all-nodes",
        "test-only",
        "quiet",
        "verbose",
        "exclusive",
        "mincpus",
        "nodefile",
        "ntasks-per-core",
        "ntasks-per-socket",
        "ntasks-per-gpu",
        "power",
        "reboot",
        "export-file",
        "gres-flags",
        "x11",
        "delay-boot",
        "het-group",
        "prefer",
        "exclude",
        "gres",
        "gpus",
        "gpus-per-node",
        "nodes",
        "time",
        "cpus-per-task",
        "mem",
        "job-name",
        "output",
        "error",
        "array",
        "dependency",
        "signal",
        "requeue",
        "no-requeue",
        "account",
        "export",
        "constraint",
        "partition",
        "qos",
        "nodelist",
        "begin",
        "mail-type",
        "mail-user",
        "ntasks-per-node",
        "open-mode",
        "comment",
        "wckey",
        "hold",
        "parsable",
        "wait",
        "wrap",
        "ntasks",
        "cpus-per-gpu",
    ] {
        assert!(by_long(name).is_some(), "--{name} is missing");
    }
}

#[test]
fn the_user_guide_holds_the_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/user-guide.md");
    let guide = std::fs::read_to_string(path).unwrap();
    let start = guide
        .find(markdown::BEGIN_MARKER)
        .expect("the begin marker is in docs/user-guide.md")
        + markdown::BEGIN_MARKER.len();
    let end = guide[start..]
        .find(markdown::END_MARKER)
        .expect("the end marker is in docs/user-guide.md")
        + start;
    assert_eq!(
        guide[start..end].trim(),
        markdown::options_table().trim(),
        "docs/user-guide.md's sbatch table differs from ysub's: paste the output of \
         `ysub --slurm-options-markdown` between the markers"
    );
}
