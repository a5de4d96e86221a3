//! A unary answer's body as the budget of answers not yet read holds it (see
//! [`super::answers`]): made whole, measured and reserved before anything of it is sent, then
//! handed to the connection a piece at a time, as the client's HTTP/2 window lets each go
//! (hyper asks a body for its next frame only once the stream has room), the reservation
//! given back when the body is dropped: sent, or the client gone.

use super::answers::{Refusal, Reservation};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::codegen::http;

/// The most bytes handed to the connection at once: what the connection may hold beyond the
/// client's window is one piece per stream.
pub const PIECE: usize = 16 << 10;

/// A unary answer made whole (see the module docs).
#[derive(Debug, Default)]
pub struct HeldAnswer {
    data: VecDeque<Bytes>,
    trailers: Option<http::HeaderMap>,
    _reservation: Option<Reservation>,
}

impl HeldAnswer {
    /// The answer's bytes not yet handed to the connection.
    pub fn remaining(&self) -> usize {
        self.data.iter().map(Bytes::len).sum()
    }
}

impl Body for HeldAnswer {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(front) = this.data.front_mut() {
            let piece = if front.len() > PIECE {
                front.split_to(PIECE)
            } else {
                this.data.pop_front().unwrap_or_default()
            };
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining() as u64)
    }
}

/// `response` with its body read whole (a unary answer: tonic encodes its message into one
/// buffer when first asked) and its size `reserve`d: the answer as it is sent from then on,
/// holding the reservation (`None`: nothing to hold). A refusal becomes the answer
/// (`RESOURCE_EXHAUSTED`, nothing of the made answer sent). An answer without data (an error,
/// its status in its headers) needs no reservation.
pub async fn held<B>(
    response: http::Response<B>,
    reserve: impl FnOnce(u64) -> Result<Option<Reservation>, Refusal>,
) -> http::Response<HeldAnswer>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let (parts, mut body) = response.into_parts();
    let mut answer = HeldAnswer::default();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => answer.data.push_back(data),
                Err(frame) => {
                    answer.trailers = frame.into_trailers().ok();
                    break;
                }
            },
            Err(e) => {
                return tonic::Status::internal(format!("an answer could not be made: {e}"))
                    .into_http()
            }
        }
    }
    let size = answer.remaining() as u64;
    if size > 0 {
        match reserve(size) {
            Ok(reservation) => answer._reservation = reservation,
            Err(refusal) => return tonic::Status::from(refusal).into_http(),
        }
    }
    http::Response::from_parts(parts, answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::answers::{AnswerBudget, Caps, ConnectionAnswers, Holder};

    fn answer(len: usize) -> http::Response<http_body_util::Full<Bytes>> {
        http::Response::new(http_body_util::Full::new(Bytes::from(vec![7u8; len])))
    }

    #[tokio::test]
    async fn an_answer_is_handed_out_in_pieces_and_its_reservation_lives_with_its_body() {
        let budget = AnswerBudget::new(Caps::default(), "schedd");
        let holder = Holder {
            uid: 5,
            connection: Some(ConnectionAnswers::default()),
        };
        let len = 3 * PIECE + 10;
        let mut body = held(answer(len), |n| budget.reserve(&holder, n).map(Some))
            .await
            .into_body();
        assert_eq!(budget.held(), len as u64);
        let mut sizes = Vec::new();
        while let Some(frame) = body.frame().await {
            sizes.push(frame.unwrap().into_data().unwrap().len());
        }
        assert_eq!(sizes, [PIECE, PIECE, PIECE, 10]);
        assert_eq!(budget.held(), len as u64, "held until the body is dropped");
        drop(body);
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn a_refused_answer_becomes_resource_exhausted_and_holds_nothing() {
        let budget = AnswerBudget::new(Caps::default(), "schedd");
        let holder = Holder {
            uid: 5,
            connection: None,
        };
        let response = held(answer(40 << 20), |n| budget.reserve(&holder, n).map(Some)).await;
        let status = tonic::Status::from_header_map(response.headers()).expect("a status");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("per user"),
            "{}",
            status.message()
        );
        assert_eq!(response.body().remaining(), 0);
        assert_eq!(budget.held(), 0);
    }
}
