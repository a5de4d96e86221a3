//! The `Ysched` service for local clients (and those agents relay), with `ListJobs`
//! answered from the listing entries active jobs keep (see [`ClientService`]).

use super::convert::JobListReply;
use super::forward::ForwardToken;
use crate::error::ApiError;
use crate::shell::{Cluster, GpuResumeOutcome, Named};
use crate::submit;
use prost::Message;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::codegen::{http, Body, Service, StdError};
use tonic::transport::server::UdsConnectInfo;
use tonic::{Request, Response, Status};
use ysched_common::{limits, Caller, JobId, JobState};
use ysched_proto as pb;

pub struct ClientApi {
    cluster: Arc<Cluster>,
    /// The replicas' forwarding token, on a replica's agent port: requests its followers
    /// forward are taken with it (see `relay`).
    forwarded: Option<ForwardToken>,
    /// The cluster CA, whose key signs enrolment tokens.
    ca: Arc<ysched_common::tls::ClusterCa>,
}

impl ClientApi {
    pub fn new(
        cluster: Arc<Cluster>,
        forwarded: Option<ForwardToken>,
        ca: Arc<ysched_common::tls::ClusterCa>,
    ) -> Self {
        ClientApi {
            cluster,
            forwarded,
            ca,
        }
    }
}

impl ClientApi {
    /// Who sent the request: on schedd's own socket, the process the kernel saw connect; on
    /// the agent port, the caller the relaying agent names (see [`super::relay`]). Anything
    /// else is refused.
    async fn caller<T>(&self, req: &Request<T>) -> Result<(Caller, Option<PathBuf>), Status> {
        let config = self.cluster.config();
        if let Some(info) = req.extensions().get::<UdsConnectInfo>() {
            let cred = info
                .peer_cred
                .ok_or_else(|| Status::unauthenticated("no peer credentials on this connection"))?;
            let (uid, gid) = (cred.uid(), cred.gid());
            // The name service (NSS: LDAP, sssd) may be slow or hang: asked on a blocking
            // thread, so that it stalls this caller only, never a runtime worker.
            let (owner, home) = ysched_common::identity::identity_off_runtime(uid, gid).await?;
            let admin = config.is_admin(&owner, None);
            let caller = Caller {
                owner,
                host: None,
                admin,
            };
            return Ok((caller, home));
        }
        let relayed = super::relay::relayed_caller(req, &self.cluster, self.forwarded.as_ref())?;
        let admin = config.is_admin(&relayed.owner, relayed.node.as_deref());
        let caller = Caller {
            owner: relayed.owner,
            host: relayed.node,
            admin,
        };
        Ok((caller, relayed.home))
    }

    /// `ListJobs`' reply, encoded: the jobs the request selects, as the caller may see them
    /// (see `convert::WireListing`).
    async fn job_list(&self, req: Request<pb::ListJobsRequest>) -> Result<JobListReply, Status> {
        let t = std::time::Instant::now();
        let (caller, _) = self.caller(&req).await?;
        // Bounded before anything is looked up (see `convert::job_filter`).
        let mut filter = super::convert::job_filter(req.get_ref())?;
        let r = req.into_inner();
        // Names are resolved and finished jobs read from the store on a blocking thread: a
        // listing of the whole history must not hold up the threads that answer everyone.
        let reply = self
            .cluster
            .off_runtime(move |cluster| {
                if !r.targets.is_empty() {
                    let named = cluster.resolve_targets(&r.targets, r.job_ids.len())?;
                    filter.ids.extend(named);
                }
                let (view, expected) = (cluster.queue_view(), cluster.expected_starts());
                let listing =
                    super::convert::WireListing::new(&caller, cluster.config(), &view, &expected);
                let page = cluster.list_jobs_with(&filter, &listing)?;
                Ok(listing.encode(page.entries, page.next_after))
            })
            .await?;
        let (n, bytes) = (reply.jobs(), reply.encoded_len());
        tracing::debug!(n, bytes, took = ?t.elapsed(), "list_jobs");
        Ok(reply)
    }
}

/// The client service: `ListJobs` answered from the listing entries active jobs keep (the
/// generated service could only send a `JobList` of `JobInfo`s made afresh), every other
/// method passed to the generated service.
#[derive(Clone)]
pub struct ClientService {
    api: Arc<ClientApi>,
    generated: pb::ysched_server::YschedServer<ClientApi>,
    max_decoding: usize,
}

impl ClientService {
    /// The service for `cluster`, taking requests of at most `max_decoding` bytes, and
    /// forwarded ones with the `forwarded` token; enrolment tokens are signed for `ca`.
    pub fn new(
        cluster: Arc<Cluster>,
        max_decoding: usize,
        forwarded: Option<ForwardToken>,
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
        }
    }
}

impl tonic::server::NamedService for ClientService {
    const NAME: &'static str = pb::ysched_server::SERVICE_NAME;
}

/// The path of `ListJobs`, as the generated service matches it.
const LIST_JOBS_PATH: &str = "/ysched.v1.Ysched/ListJobs";

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

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != LIST_JOBS_PATH {
            return self.generated.call(req);
        }
        let api = Arc::clone(&self.api);
        let max_decoding = self.max_decoding;
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<JobListReply, pb::ListJobsRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec)
                .apply_max_message_size_config(Some(max_decoding), Some(usize::MAX));
            Ok(grpc.unary(ListJobsFast(api), req).await)
        })
    }
}

/// The job a `JobRef` names: its `target` as typed when set, else its `job_id`.
fn named(r: &pb::JobRef) -> Result<Named, ApiError> {
    Named::from_ref(r.job_id, &r.target)
}

/// A refusal of a request's field (a limit broken), as the status clients get.
/// The bounds of a request naming GPUs of one node (`yctl drain/resume NODE --gpu N,...`).
fn check_gpus_of_node(node: &str, gpus: &[u32]) -> Result<(), Status> {
    limits::NODE_NAME.check_len(node).map_err(invalid)?;
    limits::GPUS_NAMED
        .check_count(gpus.len() as u64)
        .map_err(invalid)
}

fn invalid(message: String) -> Status {
    ApiError::Invalid(message).into()
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::JobInfo, Status>> + Send>>;

/// `WatchJob` of a name of several jobs (an array, `12_[1-5]`): each of `ids` once, when it
/// has ended (already ended ones first, in id order), without its spec; the stream ends after
/// the last. One stream for a whole array, where a watch per task cost a request per task to
/// `ysub --wait` and to schedd. A job that cannot be read any more (purged from the history)
/// ends the stream with the error.
///
/// What a watch holds is bounded whatever the array's size: a bit per job still waited for
/// (see [`Waiting`]), the stream's few queued answers, and while it looks at every job (the
/// first look, and after missed announcements) one chunk of them, looked at on a blocking
/// thread since ended tasks are read from the store.
fn watch_ends(
    cluster: &Arc<Cluster>,
    ids: Vec<JobId>,
    mut changes: tokio::sync::broadcast::Receiver<JobId>,
    seen_by_caller: impl Fn(&ysched_common::Job) -> pb::JobInfo + Send + Sync + 'static,
) -> Response<WatchStream> {
    use tokio::sync::broadcast::error::RecvError;
    let cluster = Arc::clone(cluster);
    let seen_by_caller = Arc::new(seen_by_caller);
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let mut waiting = Waiting::new(&ids);
        drop(ids);
        let mut look_at_all = true;
        loop {
            if look_at_all {
                look_at_all = false;
                // A chunk at a time on a blocking thread, its answers sent from here: a
                // client slow to read holds up its own watch, never a blocking thread.
                let mut after = None;
                loop {
                    let chunk: Vec<JobId> = waiting
                        .ids()
                        .filter(|id| after.is_none_or(|a| *id > a))
                        .take(LOOKED_AT_ONCE)
                        .collect();
                    let Some(&last) = chunk.last() else {
                        break;
                    };
                    after = Some(last);
                    let (cluster, seen) = (Arc::clone(&cluster), Arc::clone(&seen_by_caller));
                    let looked = tokio::task::spawn_blocking(move || {
                        chunk
                            .into_iter()
                            .map(|id| (id, ended(&cluster, &*seen, id)))
                            .collect::<Vec<_>>()
                    })
                    .await;
                    let looked = match looked {
                        Ok(looked) => looked,
                        Err(e) => {
                            let _ = tx
                                .send(Err(Status::internal(format!("watch failed: {e}"))))
                                .await;
                            return;
                        }
                    };
                    for (id, answer) in looked {
                        if !pass_on(&tx, &mut waiting, id, answer).await {
                            return;
                        }
                    }
                }
            }
            if waiting.is_empty() {
                return;
            }
            // As for one job: a client that went away ends its watch at once.
            let change = tokio::select! {
                change = changes.recv() => change,
                () = tx.closed() => return,
            };
            match change {
                Ok(id) if waiting.contains(id) => {
                    let answer = ended(&cluster, &*seen_by_caller, id);
                    if !pass_on(&tx, &mut waiting, id, answer).await {
                        return;
                    }
                }
                Ok(_) => {}
                // Changes were missed: look at every job still waited for.
                Err(RecvError::Lagged(_)) => look_at_all = true,
                Err(RecvError::Closed) => return,
            }
        }
    });
    Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

/// What a watch does with what it found of job `id` (see [`ended`]): an ended job is sent and
/// no longer waited for. `false` when the watch is over: the client went away, or the job
/// could not be read (the error sent).
async fn pass_on(
    tx: &tokio::sync::mpsc::Sender<Result<pb::JobInfo, Status>>,
    waiting: &mut Waiting,
    id: JobId,
    answer: Result<Option<pb::JobInfo>, Status>,
) -> bool {
    match answer {
        Ok(None) => true,
        Ok(Some(info)) => {
            waiting.remove(id);
            tx.send(Ok(info)).await.is_ok()
        }
        Err(status) => {
            let _ = tx.send(Err(status)).await;
            false
        }
    }
}

/// How many jobs a watch looks at in one go on a blocking thread (see [`watch_ends`]).
const LOOKED_AT_ONCE: usize = 256;

/// Job `id` as its watcher sees it, without its spec, if it has ended.
fn ended(
    cluster: &Cluster,
    seen_by_caller: &dyn Fn(&ysched_common::Job) -> pb::JobInfo,
    id: JobId,
) -> Result<Option<pb::JobInfo>, Status> {
    let job = cluster.job(id)?;
    if !job.state.is_terminal() {
        return Ok(None);
    }
    let mut info = seen_by_caller(&job);
    info.spec = None;
    Ok(Some(info))
}

/// The jobs a watch still waits for, among the ids it was given: those ids as runs of
/// consecutive ones (an array's tasks are one run) and a bit each, so that a watch of a
/// 10,000-task array holds about 1.3 KB, not a set of 10,000 ids.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Waiting {
    /// `(first id, how many, the first one's place)`, ascending.
    runs: Vec<(u64, u64, usize)>,
    /// A bit per place: still waited for.
    bits: Vec<u64>,
    left: usize,
}

impl Waiting {
    /// `ids` ascending (as a name resolves).
    fn new(ids: &[JobId]) -> Waiting {
        let mut runs: Vec<(u64, u64, usize)> = Vec::new();
        for (place, id) in ids.iter().enumerate() {
            match runs.last_mut() {
                Some((first, len, _)) if *first + *len == id.0 => *len += 1,
                _ => runs.push((id.0, 1, place)),
            }
        }
        let mut bits = vec![u64::MAX; ids.len().div_ceil(64)];
        if !ids.len().is_multiple_of(64) {
            if let Some(last) = bits.last_mut() {
                *last = (1u64 << (ids.len() % 64)) - 1;
            }
        }
        Waiting {
            runs,
            bits,
            left: ids.len(),
        }
    }

    fn place(&self, id: JobId) -> Option<usize> {
        let i = self.runs.partition_point(|(first, _, _)| *first <= id.0);
        let (first, len, start) = *self.runs.get(i.checked_sub(1)?)?;
        (id.0 < first + len).then(|| start + (id.0 - first) as usize)
    }

    fn contains(&self, id: JobId) -> bool {
        self.place(id)
            .is_some_and(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }

    fn remove(&mut self, id: JobId) {
        if let Some(p) = self.place(id) {
            let word = &mut self.bits[p / 64];
            if *word & (1 << (p % 64)) != 0 {
                *word &= !(1 << (p % 64));
                self.left -= 1;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The ids still waited for, ascending.
    fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.runs.iter().flat_map(move |&(first, len, start)| {
            (0..len).filter_map(move |k| {
                let p = start + k as usize;
                (self.bits[p / 64] & (1 << (p % 64)) != 0).then_some(JobId(first + k))
            })
        })
    }
}

#[tonic::async_trait]
impl pb::ysched_server::Ysched for ClientApi {
    async fn submit(
        &self,
        req: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitReply>, Status> {
        let (caller, home) = self.caller(&req).await?;
        let spec = req
            .into_inner()
            .spec
            .ok_or_else(|| Status::invalid_argument("missing job spec"))?;
        let wanted_tier = spec.tier.clone();
        let submitted = match submit::validate(spec.into(), &caller, self.cluster.config()) {
            Ok(v) => v,
            Err(ApiError::Denied(why)) => {
                self.cluster
                    .submit_refused(&caller, &wanted_tier, &why)
                    .await?;
                return Err(ApiError::Denied(why).into());
            }
            Err(e) => return Err(e.into()),
        };
        let done = self.cluster.submit_jobs(caller, home, submitted).await?;
        Ok(Response::new(pb::SubmitReply {
            job_id: done.id.0,
            array_task_count: done.array_tasks,
        }))
    }

    async fn list_jobs(
        &self,
        req: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::JobList>, Status> {
        // Served by `ListJobsFast` (see `serve`); this decodes the same bytes, for callers
        // of the trait.
        let reply = self.job_list(req).await?;
        pb::JobList::decode(reply.encode_to_vec().as_slice())
            .map(Response::new)
            .map_err(|e| Status::internal(format!("a listing did not decode: {e}")))
    }

    async fn get_job(&self, req: Request<pb::JobRef>) -> Result<Response<pb::JobDetail>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let r = req.get_ref();
        let id = self
            .cluster
            .resolve_one(&Named::from_ref(r.job_id, &r.target)?, "show")
            .await?;
        let mut detail = super::convert::job_detail(&self.cluster.job_detail(id).await?);
        let view = self.cluster.queue_view();
        super::convert::add_queue_places(detail.job.as_mut_slice(), &view);
        super::convert::add_expected_starts(
            detail.job.as_mut_slice(),
            &self.cluster.expected_starts(),
        );
        super::convert::hide_others_usage(
            detail.job.as_mut_slice(),
            &caller,
            self.cluster.config(),
        );
        if detail.job.as_ref().is_some_and(|j| j.usage_private) {
            // Its history is its usage: where and when it ran, was preempted, requeued.
            detail.events.clear();
        }
        Ok(Response::new(detail))
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let r = req.into_inner();
        limits::USER.check_len(&r.user).map_err(invalid)?;
        let done = self
            .cluster
            .cancel_named(&caller, &r.job_ids, &r.targets, &r.user)
            .await?;
        Ok(Response::new(pb::CancelReply {
            cancelled: done.iter().map(|(id, _)| id.0).collect(),
            cancelled_names: done.into_iter().map(|(_, name)| name).collect(),
        }))
    }

    async fn hold(&self, req: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let name = named(req.get_ref())?;
        self.cluster.hold_named(&caller, &name, true).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn release(&self, req: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let name = named(req.get_ref())?;
        self.cluster.hold_named(&caller, &name, false).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn requeue(&self, req: Request<pb::JobRef>) -> Result<Response<pb::Empty>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let name = named(req.get_ref())?;
        self.cluster.requeue_named(&caller, &name).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn update_job(
        &self,
        req: Request<pb::UpdateJobRequest>,
    ) -> Result<Response<pb::UpdateJobReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let r = req.into_inner();
        let job = r
            .job
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("missing job"))?;
        let name = named(job)?;
        let request = crate::update::UpdateRequest {
            tier: r.tier,
            time_limit_secs: r.time_limit_secs,
            name: r.name,
            dependency: r.dependency,
            hold: r.hold,
        };
        let update = match crate::update::validate(&request, &caller, self.cluster.config()) {
            Ok(update) => update,
            Err(ApiError::Denied(why)) => {
                self.cluster
                    .update_refused(&caller, name.job_id(), &why)
                    .await?;
                return Err(ApiError::Denied(why).into());
            }
            Err(e) => return Err(e.into()),
        };
        let changed = self.cluster.update_named(&caller, &name, update).await?;
        Ok(Response::new(pb::UpdateJobReply { changed }))
    }

    /// A schedd without replicas: itself alone (a replica answers before its `ClientApi`
    /// sees the request, see `cluster_status::StatusFirst`).
    async fn cluster_status(
        &self,
        req: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusReply>, Status> {
        self.caller(&req).await?;
        Ok(Response::new(super::cluster_status::standalone(
            &self.cluster.config().scheduler.listen,
        )))
    }

    async fn change_cluster(
        &self,
        req: Request<pb::ClusterChangeRequest>,
    ) -> Result<Response<pb::ClusterChangeReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let reply = super::hosts::change_cluster(&self.cluster, &caller, req.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn enrol_host(
        &self,
        req: Request<pb::EnrolHostRequest>,
    ) -> Result<Response<pb::EnrolHostReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let reply =
            super::hosts::enrol_token(&self.cluster, &self.ca, &caller, req.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn revoke_host(&self, req: Request<pb::NodeRef>) -> Result<Response<pb::Empty>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let name = &req.get_ref().name;
        limits::NODE_NAME.check_len(name).map_err(invalid)?;
        self.cluster.revoke_host(&caller, name).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn list_hosts(
        &self,
        req: Request<pb::ListHostsRequest>,
    ) -> Result<Response<pb::HostList>, Status> {
        let (caller, _) = self.caller(&req).await?;
        Ok(Response::new(super::hosts::list_hosts(
            &self.cluster,
            &caller,
        )?))
    }

    async fn list_nodes(
        &self,
        req: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::NodeList>, Status> {
        let (caller, _) = self.caller(&req).await?;
        Ok(Response::new(pb::NodeList {
            nodes: self
                .cluster
                .list_nodes(&caller)
                .iter()
                .map(super::convert::node_info)
                .collect(),
        }))
    }

    async fn drain(&self, req: Request<pb::DrainRequest>) -> Result<Response<pb::Empty>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let r = req.into_inner();
        limits::NODE_NAME.check_len(&r.name).map_err(invalid)?;
        limits::DRAIN_REASON.check_len(&r.reason).map_err(invalid)?;
        if r.reason.trim().is_empty() {
            return Err(Status::invalid_argument(
                "a drain needs a reason (--reason TEXT)",
            ));
        }
        self.cluster.drain(&caller, &r.name, Some(r.reason)).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn resume(&self, req: Request<pb::NodeRef>) -> Result<Response<pb::Empty>, Status> {
        let (caller, _) = self.caller(&req).await?;
        limits::NODE_NAME
            .check_len(&req.get_ref().name)
            .map_err(invalid)?;
        self.cluster
            .drain(&caller, &req.get_ref().name, None)
            .await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn drain_gpu(
        &self,
        req: Request<pb::DrainGpuRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let r = req.into_inner();
        check_gpus_of_node(&r.node, &r.gpus)?;
        limits::DRAIN_REASON.check_len(&r.reason).map_err(invalid)?;
        if r.reason.trim().is_empty() {
            return Err(Status::invalid_argument(
                "taking a GPU out of service needs a reason (--reason TEXT)",
            ));
        }
        self.cluster
            .drain_gpus(&caller, &r.node, &r.gpus, &r.reason)
            .await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn resume_gpu(
        &self,
        req: Request<pb::ResumeGpuRequest>,
    ) -> Result<Response<pb::ResumeGpuReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let r = req.into_inner();
        check_gpus_of_node(&r.node, &r.gpus)?;
        let outcomes = self.cluster.resume_gpus(&caller, &r.node, &r.gpus).await?;
        Ok(Response::new(pb::ResumeGpuReply {
            gpus: outcomes
                .into_iter()
                .map(|(index, outcome)| {
                    let mut resumed = pb::GpuResumed {
                        index,
                        ..Default::default()
                    };
                    match outcome {
                        GpuResumeOutcome::Confirmed => resumed.confirmed = true,
                        GpuResumeOutcome::Pending(why) => resumed.pending = why,
                        GpuResumeOutcome::StillFailing(fault) => resumed.still_failing = fault,
                    }
                    resumed
                })
                .collect(),
        }))
    }

    async fn audit(
        &self,
        req: Request<pb::AuditRequest>,
    ) -> Result<Response<pb::AuditList>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let limit = req.get_ref().limit as usize;
        // A scan of the audit log in the store: on a blocking thread.
        let entries = self
            .cluster
            .off_runtime(move |cluster| cluster.audit_log(&caller, limit))
            .await?;
        Ok(Response::new(pb::AuditList {
            entries: entries.iter().map(Into::into).collect(),
        }))
    }

    async fn shares(
        &self,
        req: Request<pb::SharesRequest>,
    ) -> Result<Response<pb::ShareList>, Status> {
        let (caller, _) = self.caller(&req).await?;
        Ok(Response::new(super::convert::share_list(
            &self.cluster.shares(&caller),
        )))
    }

    async fn report(
        &self,
        req: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let r = req.into_inner();
        limits::REPORT_BY.check_len(&r.by).map_err(invalid)?;
        let t = std::time::Instant::now();
        let report = self
            .cluster
            .usage_report(&caller, r.from_ms, r.to_ms, &r.by)
            .await?;
        tracing::debug!(took = ?t.elapsed(), "report");
        Ok(Response::new(super::convert::report_reply(&report)))
    }

    async fn export_trace(
        &self,
        req: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::TraceReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let r = req.into_inner();
        let t = std::time::Instant::now();
        let export = self
            .cluster
            .export_trace(&caller, r.from_ms, r.to_ms)
            .await?;
        tracing::debug!(took = ?t.elapsed(), jobs = export.trace.rows.len(), "export_trace");
        Ok(Response::new(super::convert::trace_reply(&export)))
    }

    async fn import_usage(
        &self,
        req: Request<pb::ImportUsageRequest>,
    ) -> Result<Response<pb::ImportUsageReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let runs = req
            .into_inner()
            .runs
            .iter()
            .map(ysched_common::RunRecord::from)
            .collect();
        let imported = self.cluster.import_usage(&caller, runs).await?;
        Ok(Response::new(pb::ImportUsageReply { imported }))
    }

    type WatchJobStream = WatchStream;

    async fn watch_job(&self, req: Request<pb::JobRef>) -> Result<Response<WatchStream>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let name = named(req.get_ref())?;
        // Subscribe before the first read so no change slips between them.
        let mut changes = self.cluster.subscribe();
        let ids = match &name {
            Named::Id(id) => vec![*id],
            Named::Target(_) => self.cluster.resolve(&name).await?.ids,
        };
        let cluster = self.cluster.clone();
        let seen_by_caller = move |job: &ysched_common::Job| {
            let mut info = pb::JobInfo::from(job);
            super::convert::hide_others_usage(
                std::slice::from_mut(&mut info),
                &caller,
                cluster.config(),
            );
            info
        };
        let id = match ids.as_slice() {
            [id] => *id,
            _ => return Ok(watch_ends(&self.cluster, ids, changes, seen_by_caller)),
        };
        let first = seen_by_caller(&self.cluster.job(id)?);
        let cluster = self.cluster.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let mut last = first;
            let terminal =
                |j: &pb::JobInfo| JobState::parse(&j.state).is_some_and(|s| s.is_terminal());
            if tx.send(Ok(last.clone())).await.is_err() || terminal(&last) {
                return;
            }
            loop {
                // A client that went away ends its watch at once, not at the job's next
                // change (a held job may never change: its watchers would pile up).
                let change = tokio::select! {
                    change = changes.recv() => change,
                    () = tx.closed() => return,
                };
                match change {
                    Ok(changed) if changed != id => continue,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return,
                }
                let Ok(job) = cluster.job(id) else {
                    return;
                };
                let info = seen_by_caller(&job);
                if info != last {
                    last = info;
                    if tx.send(Ok(last.clone())).await.is_err() || terminal(&last) {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::{JobId, Waiting};

    fn ids(v: impl IntoIterator<Item = u64>) -> Vec<JobId> {
        v.into_iter().map(JobId).collect()
    }

    #[test]
    fn a_watch_waits_for_each_id_it_was_given_until_removed() {
        // An array's 130 tasks (past two words of bits), then a gap, then two more ids.
        let given = ids((12..142).chain([500, 501]));
        let mut waiting = Waiting::new(&given);
        assert_eq!(waiting.runs.len(), 2);
        assert_eq!(waiting.bits.len(), 3, "a bit per id");
        assert_eq!(waiting.ids().collect::<Vec<_>>(), given);
        for outside in [0, 11, 142, 499, 502, u64::MAX] {
            assert!(!waiting.contains(JobId(outside)), "{outside}");
        }
        for id in [12, 75, 76, 141, 500] {
            assert!(waiting.contains(JobId(id)));
            waiting.remove(JobId(id));
            assert!(!waiting.contains(JobId(id)));
            // Removing twice, or an id never given, changes nothing.
            waiting.remove(JobId(id));
            waiting.remove(JobId(id + 1000));
        }
        let left: Vec<JobId> = waiting.ids().collect();
        assert_eq!(left.len(), 132 - 5);
        assert_eq!(waiting.left, left.len());
        assert!(!left.contains(&JobId(75)) && left.contains(&JobId(74)));
        for id in left {
            assert!(!waiting.is_empty());
            waiting.remove(id);
        }
        assert!(waiting.is_empty());
        assert_eq!(waiting.ids().count(), 0);
    }

    #[test]
    fn a_watch_of_64_ids_uses_a_whole_word() {
        let mut waiting = Waiting::new(&ids(1..=64));
        assert_eq!(waiting.bits, [u64::MAX]);
        waiting.remove(JobId(64));
        assert!(waiting.contains(JobId(63)) && !waiting.contains(JobId(64)));
        assert_eq!(waiting.ids().count(), 63);
    }
}
