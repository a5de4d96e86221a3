//! The `Ysched` service for local clients (and those agents relay), with `ListJobs`
//! answered from the listing entries active jobs keep (see `client_service`).

use super::answering::Answering;
use super::convert::listing::JobListReply;
use super::forward::ForwardToken;
use super::watch;
use crate::error::ApiError;
use crate::shell::{Cluster, GpuResumeOutcome, Named};
use crate::submit;
use prost::Message;
use std::path::PathBuf;
use std::sync::Arc;
use tonic::{Request, Response, Status};
use ysched_common::edge::answers::ANSWER_ROOM_METADATA;
use ysched_common::edge::unix_listener::ClientConnectInfo;
use ysched_common::{limits, Caller};
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
        let (caller, home) = self.identify(req).await?;
        // The caller's answers count against their own room (see `answering`).
        if let Some(answering) = Answering::of(req) {
            answering.set_caller(caller.owner.uid);
        }
        Ok((caller, home))
    }

    async fn identify<T>(&self, req: &Request<T>) -> Result<(Caller, Option<PathBuf>), Status> {
        let config = self.cluster.config();
        if let Some(info) = req.extensions().get::<ClientConnectInfo>() {
            let cred = info
                .peer_cred()
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

    /// Reserves the room for an answer that is costly to make (a page of a listing, a report,
    /// the audit log) before it is made: at most a listing's page, less when the caller has
    /// less room for answers not yet read; `RESOURCE_EXHAUSTED` when it has almost none.
    /// Returns the room.
    fn room_to_make<T>(&self, req: &Request<T>) -> Result<u64, Status> {
        // A node's relay says how much room it has for the answer (see `noded::relay`).
        let relay_room = req
            .metadata()
            .get(ANSWER_ROOM_METADATA)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let most = relay_room.map_or(limits::LISTING_BYTES_PER_REPLY.max, |room| {
            room.min(limits::LISTING_BYTES_PER_REPLY.max)
        });
        match Answering::of(req) {
            Some(answering) => answering.room(most, limits::LISTING_BYTES_AT_LEAST),
            None => Ok(most),
        }
    }

    /// `ListJobs`' reply, encoded: the jobs the request selects, as the caller may see them
    /// (see `convert::listing::WireListing`).
    pub(super) async fn job_list(
        &self,
        req: Request<pb::ListJobsRequest>,
    ) -> Result<JobListReply, Status> {
        let t = std::time::Instant::now();
        let (caller, _) = self.caller(&req).await?;
        // Bounded before anything is looked up (see `convert::listing::job_filter`).
        let mut filter = super::convert::listing::job_filter(req.get_ref())?;
        // The page is made in the room the caller has for answers not yet read, and cut
        // shorter when that is less than a whole page (the tools follow the pages).
        let room = self.room_to_make(&req)?;
        filter.max_bytes = filter
            .max_bytes
            .min(room.saturating_sub(ANSWER_FRAMING) as usize);
        let r = req.into_inner();
        // Names are resolved and finished jobs read from the store on a blocking thread: a
        // listing of the whole history must not hold up the threads that answer everyone.
        // One that scans the history runs at low priority (see `shell::bulk`).
        let bulk = r.targets.is_empty() && filter.scans_history();
        let work = move |cluster: &Cluster| {
            if !r.targets.is_empty() {
                let named = cluster.resolve_targets(&r.targets, r.job_ids.len())?;
                filter.ids.extend(named);
            }
            let (view, expected) = (cluster.queue_view(), cluster.expected_starts());
            let listing = super::convert::listing::WireListing::new(
                &caller,
                cluster.config(),
                &view,
                &expected,
            );
            let page = cluster.list_jobs_with(&filter, &listing)?;
            Ok(listing.encode(page.entries, page.next_after))
        };
        let reply = if bulk {
            self.cluster.off_runtime_bulk(work).await?
        } else {
            self.cluster.off_runtime(work).await?
        };
        let (n, bytes) = (reply.jobs(), reply.encoded_len());
        tracing::debug!(n, bytes, took = ?t.elapsed(), "list_jobs");
        Ok(reply)
    }
}

/// What an answer adds to its message: gRPC's frame header, and a listing's `next_after_id`.
const ANSWER_FRAMING: u64 = 64;

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
        let mut detail = super::convert::client::job_detail(&self.cluster.job_detail(id).await?);
        let view = self.cluster.queue_view();
        super::convert::listing::add_queue_places(detail.job.as_mut_slice(), &view);
        super::convert::listing::add_expected_starts(
            detail.job.as_mut_slice(),
            &self.cluster.expected_starts(),
        );
        super::convert::listing::hide_others_usage(
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
                .map(super::convert::client::node_info)
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
        // A page made in the room the caller has for answers not yet read (`yctl audit`
        // follows the pages).
        let room = self.room_to_make(&req)?;
        let max_bytes = room.saturating_sub(ANSWER_FRAMING) as usize;
        let (limit, before) = (req.get_ref().limit as usize, req.get_ref().before_id);
        // A scan of the audit log in the store: on a blocking thread.
        let (entries, next) = self
            .cluster
            .off_runtime(move |cluster| {
                cluster.audit_page(&caller, (before != 0).then_some(before), limit, max_bytes)
            })
            .await?;
        Ok(Response::new(pb::AuditList {
            entries: entries.iter().map(Into::into).collect(),
            next_before_id: next.unwrap_or(0),
        }))
    }

    async fn shares(
        &self,
        req: Request<pb::SharesRequest>,
    ) -> Result<Response<pb::ShareList>, Status> {
        let (caller, _) = self.caller(&req).await?;
        Ok(Response::new(super::convert::client::share_list(
            &self.cluster.shares(&caller),
        )))
    }

    async fn report(
        &self,
        req: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        self.room_to_make(&req)?;
        let r = req.into_inner();
        limits::REPORT_BY.check_len(&r.by).map_err(invalid)?;
        let t = std::time::Instant::now();
        let report = self
            .cluster
            .usage_report(&caller, r.from_ms, r.to_ms, &r.by)
            .await?;
        tracing::debug!(took = ?t.elapsed(), "report");
        Ok(Response::new(super::convert::client::report_reply(&report)))
    }

    async fn export_trace(
        &self,
        req: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::TraceReply>, Status> {
        let (caller, _) = self.caller(&req).await?;
        self.room_to_make(&req)?;
        let r = req.into_inner();
        let t = std::time::Instant::now();
        let export = self
            .cluster
            .export_trace(&caller, r.from_ms, r.to_ms)
            .await?;
        tracing::debug!(took = ?t.elapsed(), jobs = export.trace.rows.len(), "export_trace");
        Ok(Response::new(super::convert::client::trace_reply(&export)))
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

    type WatchJobStream = watch::WatchStream;

    async fn watch_job(
        &self,
        req: Request<pb::JobRef>,
    ) -> Result<Response<watch::WatchStream>, Status> {
        let (caller, _) = self.caller(&req).await?;
        let name = named(req.get_ref())?;
        // Subscribe before the first read so no change slips between them.
        let changes = self.cluster.subscribe();
        let ids = match &name {
            Named::Id(id) => vec![*id],
            Named::Target(_) => self.cluster.resolve(&name).await?.ids,
        };
        let cluster = self.cluster.clone();
        let seen_by_caller = move |job: &ysched_common::Job| {
            let mut info = pb::JobInfo::from(job);
            super::convert::listing::hide_others_usage(
                std::slice::from_mut(&mut info),
                &caller,
                cluster.config(),
            );
            info
        };
        let answering = Answering::of(&req);
        let id = match ids.as_slice() {
            [id] => *id,
            _ => {
                return Ok(watch::watch_ends(
                    &self.cluster,
                    ids,
                    changes,
                    seen_by_caller,
                    answering,
                ))
            }
        };
        let first = seen_by_caller(&self.cluster.job(id)?);
        Ok(watch::watch_one(
            &self.cluster,
            id,
            first,
            changes,
            seen_by_caller,
            answering,
        ))
    }
}
