//! A service that serves only while this replica leads (issue 24): the client and agent
//! services of the current leader's `Cluster`, and, on a replica that does not lead, a
//! refusal naming the leader, so that clients and agents go there.

use std::convert::Infallible;
use std::pin::Pin;
use tokio::sync::watch;
use tonic::codegen::{http, Service};
use tonic::server::NamedService;

/// What a replica serves: the leader's service, or why not and where to go.
#[derive(Clone)]
pub enum Serving<S> {
    Leader(S),
    /// Not the leader: the message clients get ("not the leader: replica 2 at h2:7400 is").
    Elsewhere(String),
}

/// One of the leader's services (`pick` chooses it from all of them, `L`) while this
/// replica leads, a refusal (`UNAVAILABLE`, naming the leader) otherwise.
pub struct WhileLeading<L, S> {
    serving: watch::Receiver<Serving<L>>,
    pick: fn(&L) -> S,
}

impl<L, S> Clone for WhileLeading<L, S> {
    fn clone(&self) -> Self {
        WhileLeading {
            serving: self.serving.clone(),
            pick: self.pick,
        }
    }
}

impl<L, S> WhileLeading<L, S> {
    pub fn new(serving: watch::Receiver<Serving<L>>, pick: fn(&L) -> S) -> Self {
        WhileLeading { serving, pick }
    }
}

impl<L, S: NamedService> NamedService for WhileLeading<L, S> {
    const NAME: &'static str = S::NAME;
}

impl<L, S, B> Service<http::Request<B>> for WhileLeading<L, S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
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

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let serving = match &*self.serving.borrow() {
            Serving::Leader(all) => Serving::Leader((self.pick)(all)),
            Serving::Elsewhere(why) => Serving::Elsewhere(why.clone()),
        };
        Box::pin(async move {
            match serving {
                Serving::Leader(service) => {
                    use tower::ServiceExt;
                    service.oneshot(req).await
                }
                Serving::Elsewhere(why) => Ok(tonic::Status::unavailable(why).into_http()),
            }
        })
    }
}
