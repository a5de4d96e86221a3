//! The words `--mail-type` takes (Slurm's, less those of features ysched lacks), in one table,
//! and the one check `ysub` (on its command line and `#SBATCH` lines) and `schedd` (on every
//! submit) make of them, with the same messages.

/// The events a job may be mailed about, in the order its mail types are stored.
pub const EVENTS: [&str; 9] = [
    "BEGIN",
    "END",
    "FAIL",
    "REQUEUE",
    "INVALID_DEPEND",
    "TIME_LIMIT",
    "TIME_LIMIT_50",
    "TIME_LIMIT_80",
    "TIME_LIMIT_90",
];

/// What `ALL` stands for, as in Slurm: every event of a job's life (the first five of
/// [`EVENTS`]), not the time-limit warnings.
const ALL_EVENTS: usize = 5;

/// No mail; only alone.
pub const NONE: &str = "NONE";
/// Each task of an array mails on its own (else the array mails once); only with events.
pub const ARRAY_TASKS: &str = "ARRAY_TASKS";
/// [`EVENTS`]' first five.
pub const ALL: &str = "ALL";

/// Every word `--mail-type` takes, as messages list them.
pub fn words() -> Vec<&'static str> {
    let mut words = vec![NONE];
    words.extend(EVENTS);
    words.extend([ARRAY_TASKS, ALL]);
    words
}

/// The mail types `given` (the words of `--mail-type`, each trimmed, any case) as a job
/// stores them: upper case, `ALL` expanded, in [`EVENTS`]' order, then `ARRAY_TASKS`; empty
/// for `NONE`. Refused: an unknown word, `NONE` with another, `ARRAY_TASKS` without an event
/// (`invalid --mail-type 'NONE,END': NONE cannot be combined with other types`).
pub fn parse<S: AsRef<str>>(given: &[S]) -> Result<Vec<String>, String> {
    use crate::text::excerpt;
    let value = given
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(",");
    let refuse = |why: String| format!("invalid --mail-type '{}': {why}", excerpt(&value, 60));
    let mut wanted = [false; EVENTS.len()];
    let (mut none, mut array_tasks) = (false, false);
    for raw in given {
        let word = raw.as_ref().trim().to_ascii_uppercase();
        match word.as_str() {
            NONE => none = true,
            ALL => wanted[..ALL_EVENTS].fill(true),
            ARRAY_TASKS => array_tasks = true,
            other => match EVENTS.iter().position(|e| *e == other) {
                Some(i) => wanted[i] = true,
                None => {
                    return Err(refuse(format!(
                        "'{}' is not one of {}",
                        excerpt(raw.as_ref().trim(), 30),
                        words().join(", ")
                    )))
                }
            },
        }
    }
    let any_event = wanted.contains(&true);
    if none && (array_tasks || any_event) {
        return Err(refuse("NONE cannot be combined with other types".into()));
    }
    if array_tasks && !any_event {
        return Err(refuse(
            "ARRAY_TASKS needs the events to mail too (e.g. END,ARRAY_TASKS)".into(),
        ));
    }
    let mut types: Vec<String> = EVENTS
        .iter()
        .zip(wanted)
        .filter(|(_, on)| *on)
        .map(|(event, _)| event.to_string())
        .collect();
    if array_tasks {
        types.push(ARRAY_TASKS.into());
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_stored_in_one_order() {
        assert_eq!(
            parse(&["end", " Fail", "ALL"]).unwrap(),
            ["BEGIN", "END", "FAIL", "REQUEUE", "INVALID_DEPEND"]
        );
        assert_eq!(
            parse(&["ARRAY_TASKS", "TIME_LIMIT_80", "END"]).unwrap(),
            ["END", "TIME_LIMIT_80", "ARRAY_TASKS"]
        );
        assert!(parse(&["none"]).unwrap().is_empty());
        assert!(parse::<&str>(&[]).unwrap().is_empty());
    }

    #[test]
    fn the_user_guide_names_every_word() {
        let guide = include_str!("../../docs/user-guide.md");
        let row = guide
            .lines()
            .find(|l| l.starts_with("| `--mail-type TYPES` |"))
            .expect("the --mail-type row of the user guide's options table");
        for word in words() {
            assert!(row.contains(&format!("`{word}`")), "{word}: {row}");
        }
    }

    #[test]
    fn refusals_name_the_value_and_the_word() {
        assert_eq!(
            parse(&["END", "STAGE_OUT"]).unwrap_err(),
            "invalid --mail-type 'END,STAGE_OUT': 'STAGE_OUT' is not one of NONE, BEGIN, END, \
             FAIL, REQUEUE, INVALID_DEPEND, TIME_LIMIT, TIME_LIMIT_50, TIME_LIMIT_80, \
             TIME_LIMIT_90, ARRAY_TASKS, ALL"
        );
        assert_eq!(
            parse(&["NONE", "END"]).unwrap_err(),
            "invalid --mail-type 'NONE,END': NONE cannot be combined with other types"
        );
        assert_eq!(
            parse(&["ARRAY_TASKS"]).unwrap_err(),
            "invalid --mail-type 'ARRAY_TASKS': ARRAY_TASKS needs the events to mail too (e.g. \
             END,ARRAY_TASKS)"
        );
    }
}
