//! The node protocol: every message noded and the node's supervisor send each other, typed.
//!
//! A message is one line: its verb, then, for most, a space and its argument (a job id, a pid
//! and a time, a reason in words, or a record as JSON, which never holds a raw newline).
//! This is the encoding every noded and supervisor since the supervisor's first speak, and it
//! stays so: a supervisor outlives noded upgrades, and a noded may find an older supervisor
//! running. A new message takes a new verb (an older peer logs it as unknown), and a record
//! gains fields only as `serde(default)`.
//!
//! Which answers which, and on what connection, is the supervisor's to say (see
//! [`super::node_supervisor`]).

use super::spool::{FinishedRecord, JobRecord, StopState};
use std::fmt;

// Each verb, once.
pub(super) const LAUNCH: &str = "launch";
pub(super) const ATTACH: &str = "attach";
pub(super) const STOP: &str = "stop";
pub(super) const RECORD: &str = "record";
pub(super) const LIST: &str = "list";
pub(super) const ACK: &str = "ack";
pub(super) const STARTED: &str = "started";
pub(super) const ENDED: &str = "ended";
pub(super) const REFUSED: &str = "refused";
pub(super) const GONE: &str = "gone";
pub(super) const ATTACHED: &str = "attached";
pub(super) const UNKNOWN: &str = "unknown";
pub(super) const RECORDED: &str = "recorded";
pub(super) const FAILED: &str = "failed";
pub(super) const JOB: &str = "job";
pub(super) const DONE: &str = "done";

/// What noded asks of the supervisor.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Record the job's launch (synced) and start it; the connection then follows the job.
    Launch(Box<JobRecord>),
    /// A restarted noded follows a job again.
    Attach { job_id: u64 },
    /// noded's stop progress for the job its connection follows, before its first signal.
    Stop(StopState),
    /// Record an end noded made (a launch that failed before it was handed over).
    Record(FinishedRecord),
    /// The jobs the supervisor runs and the ends schedd has not acknowledged.
    List,
    /// schedd recorded the job's end.
    Ack { job_id: u64 },
}

/// What the supervisor tells noded.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The job has exec'd, as `pid`, at `time_ms` (ms since the epoch; `None`: not said).
    Started { pid: u32, time_ms: Option<i64> },
    /// The job is over and its end recorded (synced); or, to `attach`, it ended meanwhile;
    /// or, in a list, an end schedd has not acknowledged.
    Ended(FinishedRecord),
    /// The launch could not be recorded (nothing was started), or the request was unreadable.
    Refused(String),
    /// Every process of a job without a cgroup is gone: its group's number may be another's
    /// from now on.
    Gone,
    /// The answer to `attach`: the job is followed.
    Attached,
    /// The answer to `attach`: no such job.
    Unknown,
    /// The answer to `record`: synced.
    Recorded,
    /// The answer to `record`: it could not be recorded, and why.
    Failed(String),
    /// In a list: a job the supervisor runs.
    Job(Box<JobRecord>),
    /// The end of a list.
    Done,
}

/// A line that is not a message of its direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadLine {
    /// Its verb is none this side knows.
    Unknown,
    /// Its verb's argument does not read: the verb, and why.
    Unreadable { verb: &'static str, why: String },
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadLine::Unknown => f.write_str("unknown message"),
            BadLine::Unreadable { verb, why } => write!(f, "unreadable {verb}: {why}"),
        }
    }
}

impl Request {
    /// The message as sent, its newline included.
    pub fn to_line(&self) -> serde_json::Result<String> {
        Ok(match self {
            Request::Launch(record) => with_json(LAUNCH, record.as_ref())?,
            Request::Attach { job_id } => format!("{ATTACH} {job_id}\n"),
            Request::Stop(stop) => with_json(STOP, stop)?,
            Request::Record(finished) => with_json(RECORD, finished)?,
            Request::List => format!("{LIST}\n"),
            Request::Ack { job_id } => format!("{ACK} {job_id}\n"),
        })
    }

    /// Reads a line (its newline taken off).
    pub fn parse(line: &str) -> Result<Request, BadLine> {
        let (verb, argument) = line.split_once(' ').unwrap_or((line, ""));
        match verb {
            LAUNCH => Ok(Request::Launch(json(LAUNCH, argument)?)),
            ATTACH => Ok(Request::Attach {
                job_id: job_id(ATTACH, argument)?,
            }),
            STOP => Ok(Request::Stop(json(STOP, argument)?)),
            RECORD => Ok(Request::Record(json(RECORD, argument)?)),
            LIST => Ok(Request::List),
            ACK => Ok(Request::Ack {
                job_id: job_id(ACK, argument)?,
            }),
            _ => Err(BadLine::Unknown),
        }
    }
}

impl Reply {
    /// The message as sent, its newline included.
    pub fn to_line(&self) -> serde_json::Result<String> {
        Ok(match self {
            Reply::Started {
                pid,
                time_ms: Some(time_ms),
            } => format!("{STARTED} {pid} {time_ms}\n"),
            Reply::Started { pid, time_ms: None } => format!("{STARTED} {pid}\n"),
            Reply::Ended(finished) => with_json(ENDED, finished)?,
            Reply::Refused(why) => with_words(REFUSED, why),
            Reply::Gone => format!("{GONE}\n"),
            Reply::Attached => format!("{ATTACHED}\n"),
            Reply::Unknown => format!("{UNKNOWN}\n"),
            Reply::Recorded => format!("{RECORDED}\n"),
            Reply::Failed(why) => with_words(FAILED, why),
            Reply::Job(record) => with_json(JOB, record.as_ref())?,
            Reply::Done => format!("{DONE}\n"),
        })
    }

    /// Reads a line (its newline taken off).
    pub fn parse(line: &str) -> Result<Reply, BadLine> {
        let (verb, argument) = line.split_once(' ').unwrap_or((line, ""));
        match verb {
            STARTED => {
                let mut words = argument.split_whitespace();
                let pid = words.next().unwrap_or_default();
                let pid = pid.parse().map_err(|_| BadLine::Unreadable {
                    verb: STARTED,
                    why: format!("bad pid {pid:?}"),
                })?;
                let time_ms = words.next().and_then(|time| time.parse().ok());
                Ok(Reply::Started { pid, time_ms })
            }
            ENDED => Ok(Reply::Ended(json(ENDED, argument)?)),
            REFUSED => Ok(Reply::Refused(argument.to_string())),
            GONE => Ok(Reply::Gone),
            ATTACHED => Ok(Reply::Attached),
            UNKNOWN => Ok(Reply::Unknown),
            RECORDED => Ok(Reply::Recorded),
            FAILED => Ok(Reply::Failed(argument.to_string())),
            JOB => Ok(Reply::Job(json(JOB, argument)?)),
            DONE => Ok(Reply::Done),
            _ => Err(BadLine::Unknown),
        }
    }
}

fn with_json(verb: &str, value: &impl serde::Serialize) -> serde_json::Result<String> {
    Ok(format!("{verb} {}\n", serde_json::to_string(value)?))
}

/// A reason in words: one line, whatever it holds.
fn with_words(verb: &str, words: &str) -> String {
    format!("{verb} {}\n", words.replace('\n', " "))
}

fn json<T: serde::de::DeserializeOwned>(verb: &'static str, argument: &str) -> Result<T, BadLine> {
    serde_json::from_str(argument).map_err(|e| BadLine::Unreadable {
        verb,
        why: e.to_string(),
    })
}

fn job_id(verb: &'static str, argument: &str) -> Result<u64, BadLine> {
    argument.parse().map_err(|_| BadLine::Unreadable {
        verb,
        why: format!("bad job id {argument:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(job_id: u64) -> JobRecord {
        JobRecord::unreadable(job_id)
    }

    fn finished(job_id: u64) -> FinishedRecord {
        FinishedRecord {
            job_id,
            exit_code: Some(3),
            error: "cannot\nsay".into(),
            ..Default::default()
        }
    }

    /// The lines as every supervisor and noded so far write them: what a peer of another
    /// version sends and expects.
    #[test]
    fn the_lines_are_those_older_peers_speak() {
        let cases: Vec<(Request, String)> = vec![
            (
                Request::Launch(Box::new(record(4))),
                format!("launch {}\n", json(&record(4))),
            ),
            (Request::Attach { job_id: 12 }, "attach 12\n".into()),
            (
                Request::Stop(StopState::default()),
                format!("stop {}\n", json(&StopState::default())),
            ),
            (
                Request::Record(finished(5)),
                format!("record {}\n", json(&finished(5))),
            ),
            (Request::List, "list\n".into()),
            (Request::Ack { job_id: 9 }, "ack 9\n".into()),
        ];
        for (request, line) in cases {
            assert_eq!(request.to_line().unwrap(), line);
            assert_eq!(Request::parse(line.trim_end_matches('\n')), Ok(request));
        }
        let cases: Vec<(Reply, String)> = vec![
            (
                Reply::Started {
                    pid: 41,
                    time_ms: Some(1_700_000_000_123),
                },
                "started 41 1700000000123\n".into(),
            ),
            (
                Reply::Ended(finished(6)),
                format!("ended {}\n", json(&finished(6))),
            ),
            (
                Reply::Refused("No space left on device (os error 28)".into()),
                "refused No space left on device (os error 28)\n".into(),
            ),
            (Reply::Gone, "gone\n".into()),
            (Reply::Attached, "attached\n".into()),
            (Reply::Unknown, "unknown\n".into()),
            (Reply::Recorded, "recorded\n".into()),
            (Reply::Failed("disk".into()), "failed disk\n".into()),
            (
                Reply::Job(Box::new(record(8))),
                format!("job {}\n", json(&record(8))),
            ),
            (Reply::Done, "done\n".into()),
        ];
        for (reply, line) in cases {
            assert_eq!(reply.to_line().unwrap(), line);
            assert_eq!(Reply::parse(line.trim_end_matches('\n')), Ok(reply));
        }
    }

    fn json(value: &impl serde::Serialize) -> String {
        serde_json::to_string(value).unwrap()
    }

    #[test]
    fn each_message_is_one_line() {
        let line = Reply::Refused("two\nlines".into()).to_line().unwrap();
        assert_eq!(line, "refused two lines\n");
        let line = Reply::Ended(finished(1)).to_line().unwrap();
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
    }

    #[test]
    fn a_start_without_its_time_still_reads() {
        assert_eq!(
            Reply::parse("started 17"),
            Ok(Reply::Started {
                pid: 17,
                time_ms: None
            })
        );
    }

    #[test]
    fn bad_lines_say_what_did_not_read() {
        assert_eq!(Request::parse("launch {"), Err(unreadable(LAUNCH)));
        assert_eq!(
            Request::parse("attach x"),
            Err(BadLine::Unreadable {
                verb: ATTACH,
                why: "bad job id \"x\"".into()
            })
        );
        assert_eq!(Request::parse("fork 1"), Err(BadLine::Unknown));
        assert_eq!(Request::parse("started 1 2"), Err(BadLine::Unknown));
        assert_eq!(Reply::parse("ended"), Err(unreadable(ENDED)));
        assert!(matches!(
            Reply::parse("started x 2"),
            Err(BadLine::Unreadable { verb: STARTED, .. })
        ));
        assert_eq!(Reply::parse("ack 1"), Err(BadLine::Unknown));
    }

    fn unreadable(verb: &'static str) -> BadLine {
        let why = match verb {
            ENDED => serde_json::from_str::<FinishedRecord>("").unwrap_err(),
            _ => serde_json::from_str::<JobRecord>("{").unwrap_err(),
        };
        BadLine::Unreadable {
            verb,
            why: why.to_string(),
        }
    }
}
