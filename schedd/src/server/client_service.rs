//! The client service as the listeners serve it: `ListJobs` answered by [`ClientApi`]'s own
//! encoding (see [`ClientService`]), every other method by the generated service, and every
//! answer held in schedd's budget of answers not yet read until it is sent (see `answering`).

use super::answering::Answering;
use super::client_api::ClientApi;
use super::convert::listing::JobListReply;
use super::forward::ForwardToken;
use crate::shell::Cluster;
use std::pin::Pin;
use std::sync::Arc;
use tonic::codegen::{http, Body, Service, StdError};
use tonic::{Request, Response, Status};
use ysched_common::edge::answers::AnswerBudget;
use ysched_common::edge::unix_listener::ClientConnectInfo;
use ysched_proto as pb;

/// The client service: `ListJobs` answered from the listing entries active jobs keep (the
/// generated service could only send a `JobList` of `JobInfo`s made afresh), every other
/// method passed to the generated service; every answer held in schedd's budget of answers
/// not yet read until it is sent (see `answering`).
#[derive(Clone)]
pub struct ClientService {
    api: Arc<ClientApi>,
    generated: pb::ysched_server::YschedServer<ClientApi>,
    max_decoding: usize,
    answers: AnswerBudget,
}

impl ClientService {
    /// The service for `cluster`, taking requests of at most `max_decoding` bytes, and
    /// forwarded ones with the `forwarded` token; its answers held within `answers`;
    /// enrolment tokens are signed for `ca`.
    pub fn new(
        cluster: Arc<Cluster>,
        max_decoding: usize,
        forwarded: Option<ForwardToken>,
        answers: AnswerBudget,
        ca: Arc<ysched_common::tls::ClusterCa>,
    ) -> Self {
        ClientService {
            api: Arc::new(ClientApi::new(
                cluster.clone(),
                forwarded.clone(),
                Arc::clone(&ca),
            )),
            generated: pb::ysched_server::YschedServer::new(ClientApi::new(cluster, forwarded, ca))
                .max_decoding_message_size(max_decoding)
                .max_encoding_message_size(usize::MAX),
            max_decoding,
            answers,
        }
    }
}

impl tonic::server::NamedService for ClientService {
    const NAME: &'static str = pb::ysched_server::SERVICE_NAME;
}

/// The path of `ListJobs`, as the generated service matches it.
const LIST_JOBS_PATH: &str = "/ysched.v1.Ysched/ListJobs";
/// The path of `WatchJob`: a stream, whose answers are reserved one by one (see `watch`).
const WATCH_JOB_PATH: &str = "/ysched.v1.Ysched/WatchJob";

/// `ListJobs` as a unary service of [`ClientService`].
struct ListJobsFast(Arc<ClientApi>);

impl tonic::server::UnaryService<pb::ListJobsRequest> for ListJobsFast {
    type Response = JobListReply;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Response<JobListReply>, Status>> + Send>>;

    fn call(&mut self, request: Request<pb::ListJobsRequest>) -> Self::Future {
        let api = Arc::clone(&self.0);
        Box::pin(async move { api.job_list(request).await.map(Response::new) })
    }
}

impl<B> Service<http::Request<B>> for ClientService
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        Service::<http::Request<B>>::poll_ready(&mut self.generated, cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let answering = Answering::new(
            self.answers.clone(),
            req.extensions().get::<ClientConnectInfo>(),
        );
        req.extensions_mut().insert(answering.clone());
        let streamed = req.uri().path() == WATCH_JOB_PATH;
        let answer = if req.uri().path() != LIST_JOBS_PATH {
            self.generated.call(req)
        } else {
            let api = Arc::clone(&self.api);
            let max_decoding = self.max_decoding;
            Box::pin(async move {
                let codec = tonic_prost::ProstCodec::<JobListReply, pb::ListJobsRequest>::default();
                let mut grpc = tonic::server::Grpc::new(codec)
                    .apply_max_message_size_config(Some(max_decoding), Some(usize::MAX));
                Ok(grpc.unary(ListJobsFast(api), req).await)
            })
        };
        Box::pin(async move {
            let Ok(response) = answer.await;
            Ok(if streamed {
                response
            } else {
                answering.hold(response).await
            })
        })
    }
}
