//! What schedd's answers that clients have not read yet hold (see
//! `ysched_common::edge::answers`). Every request of the client service carries an
//! [`Answering`]: its connection (none for a relayed request: an agent's connection carries
//! every user of its host) and, once the caller is known, its user. A unary answer is
//! reserved in full once made, and held until sent ([`Answering::hold`]); one that is costly
//! to make (a page of a listing, a report) first reserves the room it is made in
//! ([`Answering::room`]), so that what a user has asked for and not read bounds what schedd
//! makes for them, not only what it sends; a watch reserves each event while it waits for
//! the client ([`Answering::reserve`]).

use std::sync::{Arc, Mutex, PoisonError};
use tonic::codegen::http;
use tonic::{Request, Status};
use ysched_common::edge::answer_body;
use ysched_common::edge::answers::{AnswerBudget, ConnectionAnswers, Holder, Reservation};
use ysched_common::edge::unix_listener::ClientConnectInfo;

/// One request's part in schedd's budget of answers not yet read (see the module docs).
#[derive(Clone)]
pub(crate) struct Answering(Arc<Mutex<State>>);

struct State {
    budget: AnswerBudget,
    connection: Option<ConnectionAnswers>,
    /// The caller's uid once known: the peer's on schedd's socket, the relayed caller's on
    /// the agent port.
    uid: Option<u32>,
    /// Room reserved before the answer was made, made its size once it is.
    room: Option<Reservation>,
}

impl Answering {
    /// A request's, on the connection `connect` describes (`None`: the agent port).
    pub(crate) fn new(budget: AnswerBudget, connect: Option<&ClientConnectInfo>) -> Answering {
        Answering(Arc::new(Mutex::new(State {
            budget,
            connection: connect.map(|c| c.answers.clone()),
            uid: connect.and_then(|c| c.peer_cred()).map(|cred| cred.uid()),
            room: None,
        })))
    }

    /// The one `req` carries (every request through `ClientService` does).
    pub(crate) fn of<T>(req: &Request<T>) -> Option<Answering> {
        req.extensions().get::<Answering>().cloned()
    }

    /// The caller is `uid` (a relayed request's is known only once its caller is believed).
    pub(crate) fn set_caller(&self, uid: u32) {
        self.lock().uid = Some(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn holder(state: &State) -> Option<Holder> {
        Some(Holder {
            uid: state.uid?,
            connection: state.connection.clone(),
        })
    }

    /// Reserves the room an answer about to be made may take: as much of `most` as the
    /// caller has, at least `least` (else `RESOURCE_EXHAUSTED`, naming the cap). Returns the
    /// room; it is kept until the answer is made ([`Answering::hold`]).
    pub(crate) fn room(&self, most: u64, least: u64) -> Result<u64, Status> {
        let mut state = self.lock();
        let Some(holder) = Self::holder(&state) else {
            return Ok(most);
        };
        let room = state.budget.reserve_up_to(&holder, most, least)?;
        let bytes = room.bytes();
        state.room = Some(room);
        Ok(bytes)
    }

    /// Reserves `bytes` for one event of a stream, while it waits for the client.
    pub(crate) fn reserve(&self, bytes: u64) -> Result<Option<Reservation>, Status> {
        let state = self.lock();
        match Self::holder(&state) {
            Some(holder) => Ok(Some(state.budget.reserve(&holder, bytes)?)),
            None => Ok(None),
        }
    }

    /// The unary answer `response`, made whole and reserved (its room made its size), held
    /// until it is sent or the client is gone; `RESOURCE_EXHAUSTED` instead when the caller's
    /// answers not yet read leave no room for it.
    pub(crate) async fn hold(
        self,
        response: http::Response<tonic::body::Body>,
    ) -> http::Response<tonic::body::Body> {
        let (budget, holder, room) = {
            let mut state = self.lock();
            (
                state.budget.clone(),
                Self::holder(&state),
                state.room.take(),
            )
        };
        let held = answer_body::held(response, |size| match (room, holder) {
            (Some(mut room), _) => room.resize(size).map(|()| Some(room)),
            (None, Some(holder)) => budget.reserve(&holder, size).map(Some),
            (None, None) => Ok(None),
        })
        .await;
        held.map(tonic::body::Body::new)
    }
}
