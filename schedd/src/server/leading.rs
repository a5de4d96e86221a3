//! A service that serves only while this replica leads: the client and agent
//! services of the current leader's `Cluster`, and, on a replica that does not lead, a
//! refusal naming the leader, so that clients and agents go there; or, for the client
//! socket, the request forwarded to the leader (see `forward`).

use super::forward::Forwarder;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::watch;
use tonic::codegen::{http, Service};
use tonic::server::NamedService;

/// What a replica serves: the leader's service, or why not and where to go.
#[derive(Clone)]
pub enum Serving<S> {
    Leader(S),
    /// Not the leader.
    Elsewhere(Elsewhere),
}

/// Where the leader is, as a replica that does not lead knows it.
#[derive(Clone, Debug)]
pub struct Elsewhere {
    /// What a refused client or agent is told ("not the leader: ... replica 2 at h2:7400
    /// leads", or "no quorum: ...").
    pub why: String,
    /// The leader (its place and address), when one is known.
    pub leader: Option<(u64, String)>,
}

/// One of the leader's services (`pick` chooses it from all of them, `L`) while this
/// replica leads; otherwise the request forwarded to the leader (with a forwarder, and a
/// leader known), or a refusal (`UNAVAILABLE`, naming the leader or the lack of a quorum).
pub struct WhileLeading<L, S> {
    serving: watch::Receiver<Serving<L>>,
    pick: fn(&L) -> S,
    forwarder: Option<Arc<Forwarder>>,
}

impl<L, S> Clone for WhileLeading<L, S> {
    fn clone(&self) -> Self {
        WhileLeading {
            serving: self.serving.clone(),
            pick: self.pick,
            forwarder: self.forwarder.clone(),
        }
    }
}

impl<L, S> WhileLeading<L, S> {
    pub fn new(serving: watch::Receiver<Serving<L>>, pick: fn(&L) -> S) -> Self {
        WhileLeading {
            serving,
            pick,
            forwarder: None,
        }
    }

    /// Forwards the requests of a replica that does not lead to the leader, when it knows one.
    pub fn forwarding(mut self, forwarder: Option<Arc<Forwarder>>) -> Self {
        self.forwarder = forwarder;
        self
    }
}

impl<L, S: NamedService> NamedService for WhileLeading<L, S> {
    const NAME: &'static str = S::NAME;
}

impl<L, S> Service<http::Request<tonic::body::Body>> for WhileLeading<L, S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        // Readiness is the served service's, checked per request (it may change between).
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let serving = match &*self.serving.borrow() {
            Serving::Leader(all) => Serving::Leader((self.pick)(all)),
            Serving::Elsewhere(elsewhere) => Serving::Elsewhere(elsewhere.clone()),
        };
        let forwarder = self.forwarder.clone();
        Box::pin(async move {
            match (serving, forwarder) {
                (Serving::Leader(service), _) => {
                    use tower::ServiceExt;
                    service.oneshot(req).await
                }
                (
                    Serving::Elsewhere(Elsewhere {
                        why,
                        leader: Some((leader, addr)),
                    }),
                    Some(forwarder),
                ) => Ok(forwarder.forward(req, leader, &addr, &why).await),
                (Serving::Elsewhere(Elsewhere { why, .. }), _) => {
                    Ok(tonic::Status::unavailable(why).into_http())
                }
            }
        })
    }
}
