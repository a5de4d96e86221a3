//! The messages that tell schedd about a run of job events: a start still queued with its
//! job's end goes out inside that end.

use crate::launch::JobEvent;
use ysched_proto as pb;
use ysched_proto::agent_message::Msg as AgentMsg;

/// `events`, in the order they came, as the messages that tell them: a start whose end is
/// among them goes out inside that end (`JobFinished.started`: one message, and one event for
/// schedd, where there were two; a short job often ends before its start is sent when the
/// agent is busy). A change of the node's health is told by a heartbeat (`heartbeat()`),
/// in its place: ahead of the end of a launch that failed for it, so that schedd drains (or
/// resumes) the node before it places that job again.
pub(super) fn job_messages(
    events: impl IntoIterator<Item = JobEvent>,
    mut heartbeat: impl FnMut() -> pb::Heartbeat,
) -> Vec<AgentMsg> {
    let mut messages: Vec<AgentMsg> = Vec::new();
    for event in events {
        match event {
            JobEvent::Started(started) => messages.push(AgentMsg::Started((&started).into())),
            JobEvent::Finished(finished) => {
                let mut end = pb::JobFinished::from(&finished);
                let start = messages
                    .iter()
                    .position(|m| matches!(m, AgentMsg::Started(s) if s.job_id == finished.job_id));
                if let Some(AgentMsg::Started(s)) = start.map(|i| messages.remove(i)) {
                    end.started = Some(s);
                }
                messages.push(AgentMsg::Finished(end));
            }
            JobEvent::Health(_) => messages.push(AgentMsg::Heartbeat(heartbeat())),
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::{FinishedRecord, JobStarted};

    fn started(job_id: u64) -> JobEvent {
        JobEvent::Started(JobStarted {
            job_id,
            pid: 100 + job_id as u32,
            time_ms: 1_000,
        })
    }

    fn finished(job_id: u64) -> JobEvent {
        JobEvent::Finished(FinishedRecord {
            job_id,
            exit_code: Some(0),
            end_time_ms: 2_000,
            ..Default::default()
        })
    }

    /// What each message is, by kind and job: `S1` a start, `F1` an end, `F1+S` an end
    /// carrying its start, `H` a heartbeat.
    fn kinds(messages: &[AgentMsg]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match m {
                AgentMsg::Started(s) => format!("S{}", s.job_id),
                AgentMsg::Finished(f) if f.started.is_some() => format!("F{}+S", f.job_id),
                AgentMsg::Finished(f) => format!("F{}", f.job_id),
                AgentMsg::Heartbeat(_) => "H".into(),
                AgentMsg::Register(_) => "R".into(),
            })
            .collect()
    }

    #[test]
    fn a_start_queued_with_its_end_goes_inside_it_and_the_rest_keeps_its_order() {
        let events = [
            started(1),
            started(2),
            JobEvent::Health(Some("spool full".into())),
            finished(1),
            finished(3),
        ];
        let messages = job_messages(events, pb::Heartbeat::default);
        assert_eq!(kinds(&messages), ["S2", "H", "F1+S", "F3"]);
        let AgentMsg::Finished(end) = &messages[2] else {
            panic!("an end")
        };
        let start = end.started.as_ref().expect("its start");
        assert_eq!((start.job_id, start.pid, start.time_ms), (1, 101, 1_000));
        assert_eq!((end.exit_code, end.end_time_ms), (Some(0), 2_000));
    }

    #[test]
    fn a_start_alone_and_an_end_alone_go_as_they_are() {
        assert_eq!(
            kinds(&job_messages([started(4)], pb::Heartbeat::default)),
            ["S4"]
        );
        assert_eq!(
            kinds(&job_messages([finished(4)], pb::Heartbeat::default)),
            ["F4"]
        );
    }
}
