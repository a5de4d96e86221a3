//! A relayed answer on its way from schedd to a client of the node's socket: read from schedd
//! as it comes (the relay's connection to schedd is shared by every user of the host, so one
//! client that does not read must not leave schedd's data unread on it, which would stall
//! the others' answers), queued for the client, and handed to the client's connection only as
//! its HTTP/2 window lets each piece go. What is queued is reserved in the node's budget of
//! answers not yet read (`ysched_common::edge::answers`): a unary answer within the room
//! reserved for it before its request went on (grown if it comes larger), held until its body
//! is dropped; a stream's events piece by piece, each given back as it leaves. Past a cap the
//! answer is cut: what is queued is dropped, the client gets `RESOURCE_EXHAUSTED`, and
//! schedd's stream is reset.

use super::schedd_status;
use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use tonic::codegen::http::HeaderMap;
use tonic::Status;
use ysched_common::edge::answers::{AnswerBudget, Holder, Reservation};

/// What is queued for the client, and how it ends.
#[derive(Default)]
struct Queue {
    /// Each with its own reservation when the answer has no room of its own (a stream).
    pieces: VecDeque<(Bytes, Option<Reservation>)>,
    /// The room of a unary answer, reserved before its request went on.
    room: Option<Reservation>,
    trailers: Option<HeaderMap>,
    /// Nothing more comes (the trailers, if any, are the last).
    ended: bool,
    /// The client's connection, waiting for the next piece.
    waker: Option<Waker>,
}

/// The client's side of a relayed answer: its body. Dropping it (the answer sent, or the
/// client gone) ends the pump, which resets schedd's stream.
pub(super) struct RelayedAnswer {
    queue: Arc<Mutex<Queue>>,
    _reader: tokio::sync::oneshot::Sender<()>,
}

fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Body for RelayedAnswer {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let mut queue = lock(&self.queue);
        // The piece's reservation is given back as it goes to the connection.
        if let Some((piece, _held)) = queue.pieces.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        if let Some(trailers) = queue.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        if queue.ended {
            return Poll::Ready(None);
        }
        queue.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// The body of schedd's answer `upstream`, relayed to `holder` within `budget`, in `room` when
/// it is a unary answer's (see the module docs); the pump runs on a task of its own until the
/// answer has been read from schedd, or the client is gone.
pub(super) fn relayed<B>(
    upstream: B,
    budget: AnswerBudget,
    holder: Holder,
    room: Option<Reservation>,
) -> RelayedAnswer
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display,
{
    let queue = Arc::new(Mutex::new(Queue {
        room,
        ..Queue::default()
    }));
    let (reader, gone) = tokio::sync::oneshot::channel();
    tokio::spawn(pump(upstream, Arc::clone(&queue), gone, budget, holder));
    RelayedAnswer {
        queue,
        _reader: reader,
    }
}

async fn pump<B>(
    mut upstream: B,
    queue: Arc<Mutex<Queue>>,
    mut gone: tokio::sync::oneshot::Receiver<()>,
    budget: AnswerBudget,
    holder: Holder,
) where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    // What a unary answer has brought so far: its room grows to it if it must.
    let mut received = 0u64;
    loop {
        let frame = tokio::select! {
            frame = upstream.frame() => frame,
            // The client is gone: dropping `upstream` resets schedd's stream.
            _ = &mut gone => return,
        };
        let end = match frame {
            None => None,
            Some(Err(e)) => Some(status_trailers(Status::unavailable(format!(
                "schedd's answer broke off: {e}"
            )))),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(piece) => {
                    let mut q = lock(&queue);
                    let len = piece.len() as u64;
                    received += len;
                    let held = match q.room.as_mut() {
                        Some(room) if received <= room.bytes() => Ok(None),
                        Some(room) => room.resize(received).map(|()| None),
                        None => budget.reserve(&holder, len).map(Some),
                    };
                    match held {
                        Ok(held) => {
                            q.pieces.push_back((piece, held));
                            if let Some(waker) = q.waker.take() {
                                waker.wake();
                            }
                            continue;
                        }
                        Err(refusal) => {
                            // What was queued goes (the client cannot use part of an answer).
                            q.pieces.clear();
                            q.room = None;
                            Some(status_trailers(refusal.into()))
                        }
                    }
                }
                Err(frame) => frame.into_trailers().ok().map(|trailers| {
                    match Status::from_header_map(&trailers) {
                        Some(status) => status_trailers(schedd_status(status)),
                        None => HeaderMap::new(),
                    }
                }),
            },
        };
        let mut q = lock(&queue);
        q.trailers = end;
        q.ended = true;
        if let Some(waker) = q.waker.take() {
            waker.wake();
        }
        return;
    }
}

/// `status` as gRPC's trailers.
pub(super) fn status_trailers(status: Status) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    if status.add_header(&mut trailers).is_err() {
        let _ =
            Status::internal("an answer's status could not be written").add_header(&mut trailers);
    }
    trailers
}

#[cfg(test)]
mod tests {
    use super::*;
    use ysched_common::edge::answers::{Caps, ConnectionAnswers};

    type Frames = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, Status>>;
    type Upstream = http_body_util::StreamBody<
        tokio_stream::wrappers::ReceiverStream<Result<Frame<Bytes>, Status>>,
    >;

    /// schedd's answer, as the frames the test sends.
    fn upstream() -> (Frames, Upstream) {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        (
            tx,
            http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
        )
    }

    fn caps(per_user: u64) -> Caps {
        Caps {
            per_user,
            ..Caps::default()
        }
    }

    #[tokio::test]
    async fn what_is_queued_is_reserved_until_it_goes_to_the_client() {
        let budget = AnswerBudget::new(caps(1 << 20), "node n1's agent");
        let connection = ConnectionAnswers::default();
        let holder = Holder {
            uid: 7,
            connection: Some(connection.clone()),
        };
        let (tx, body) = upstream();
        let mut answer = relayed(body, budget.clone(), holder, None);
        for _ in 0..4 {
            tx.send(Ok(Frame::data(Bytes::from(vec![1u8; 1000]))))
                .await
                .unwrap();
        }
        let ok = status_trailers(Status::ok(""));
        tx.send(Ok(Frame::trailers(ok))).await.unwrap();
        drop(tx);
        // Read from schedd whether or not the client reads.
        eventually(|| budget.held() == 4000).await;
        assert_eq!(connection.held(), 4000);
        let first = answer.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap().len(), 1000);
        assert_eq!(budget.held(), 3000);
        let mut rest = 0;
        let mut trailers = None;
        while let Some(frame) = answer.frame().await {
            match frame.unwrap().into_data() {
                Ok(data) => rest += data.len(),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        assert_eq!(rest, 3000);
        let status = Status::from_header_map(&trailers.unwrap()).unwrap();
        assert_eq!(status.code(), tonic::Code::Ok);
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn past_the_cap_the_queue_goes_and_the_client_gets_resource_exhausted() {
        let budget = AnswerBudget::new(caps(64 << 10), "node n1's agent");
        let holder = Holder {
            uid: 7,
            connection: None,
        };
        let (tx, body) = upstream();
        let mut answer = relayed(body, budget.clone(), holder, None);
        for _ in 0..100 {
            if tx
                .send(Ok(Frame::data(Bytes::from(vec![1u8; 16 << 10]))))
                .await
                .is_err()
            {
                break;
            }
        }
        let frame = answer.frame().await.unwrap().unwrap();
        let status = Status::from_header_map(frame.trailers_ref().unwrap()).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("per user"),
            "{}",
            status.message()
        );
        assert!(answer.frame().await.is_none());
        assert_eq!(budget.held(), 0);
        // schedd's stream was let go: its sender sees the pump gone.
        eventually(|| tx.is_closed()).await;
    }

    #[tokio::test]
    async fn a_unary_answer_is_held_in_its_room_grown_if_it_comes_larger() {
        let budget = AnswerBudget::new(caps(1 << 20), "node n1's agent");
        let holder = Holder {
            uid: 7,
            connection: None,
        };
        let room = budget.reserve(&holder, 3000).unwrap();
        let (tx, body) = upstream();
        let mut answer = relayed(body, budget.clone(), holder, Some(room));
        for _ in 0..2 {
            tx.send(Ok(Frame::data(Bytes::from(vec![1u8; 1000]))))
                .await
                .unwrap();
        }
        eventually(|| lock(&answer.queue).pieces.len() == 2).await;
        assert_eq!(budget.held(), 3000, "within its room");
        for _ in 0..2 {
            tx.send(Ok(Frame::data(Bytes::from(vec![1u8; 1000]))))
                .await
                .unwrap();
        }
        eventually(|| budget.held() == 4000).await;
        drop(tx);
        while answer.frame().await.is_some() {}
        assert_eq!(budget.held(), 4000, "held until the body is dropped");
        drop(answer);
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn a_client_gone_ends_the_pump_and_gives_everything_back() {
        let budget = AnswerBudget::new(caps(1 << 20), "node n1's agent");
        let holder = Holder {
            uid: 7,
            connection: None,
        };
        let (tx, body) = upstream();
        let answer = relayed(body, budget.clone(), holder, None);
        tx.send(Ok(Frame::data(Bytes::from(vec![1u8; 5000]))))
            .await
            .unwrap();
        eventually(|| budget.held() == 5000).await;
        drop(answer);
        // A watch that says nothing more is let go at once, not at its next event.
        eventually(|| tx.is_closed()).await;
        eventually(|| budget.held() == 0).await;
    }

    /// Waits (up to 5 s) for `done`.
    async fn eventually(done: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !done() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "timed out"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
