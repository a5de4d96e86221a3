//! Runs the real binaries against an in-process stand-in for schedd on a Unix socket, to check
//! the connection, the requests they send and how they print replies and exit.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use ysched_proto::ysched_server::{Ysched, YschedServer};
use ysched_proto::*;

#[derive(Default)]
struct MockSchedd {
    submitted: Mutex<Vec<JobSpec>>,
    list_requests: Mutex<Vec<ListJobsRequest>>,
    drains: Mutex<Vec<DrainRequest>>,
    cancels: Mutex<Vec<CancelRequest>>,
    /// `(rpc, request)` of Hold, Release, Requeue and GetJob.
    job_refs: Mutex<Vec<(&'static str, JobRef)>>,
}

/// Array 12 (`0-49%4`, job ids 12 to 61) as schedd would list it: tasks 0 to 3 running, the
/// others waiting for the `%4`, task 49 held.
fn array_task(task: u32) -> JobInfo {
    let state = match task {
        0..=3 => "RUNNING",
        49 => "HELD",
        _ => "PENDING",
    };
    let mut job = if state == "RUNNING" {
        running(12 + u64::from(task))
    } else {
        job(12 + u64::from(task), state)
    };
    job.name = "sweep".into();
    job.reason = match state {
        "PENDING" => "JobArrayTaskLimit",
        "HELD" => "JobHeldUser",
        _ => "",
    }
    .into();
    job.display_id = format!("12_{task}");
    job.array_job_id = Some(12);
    job.array_task_id = Some(task);
    job.array_max_running = 4;
    if let Some(spec) = job.spec.as_mut() {
        spec.array = "0-49%4".into();
    }
    job
}

/// What a target names here: `12_7` is job 19 (array 12 has consecutive ids); a plain id is
/// that job.
fn resolve(target: &str) -> Vec<(u64, String)> {
    let target = ysched_common::JobTarget::parse(target).expect("ycancel sent a bad target");
    match &target.tasks {
        None => vec![(target.id.0, target.id.to_string())],
        Some(ranges) => ranges
            .iter()
            .flat_map(|r| (r.first..=r.last).step_by(r.step as usize))
            .map(|t| (target.id.0 + u64::from(t), format!("{}_{t}", target.id)))
            .collect(),
    }
}

fn job(id: u64, state: &str) -> JobInfo {
    JobInfo {
        id,
        name: "train".into(),
        user: "alice".into(),
        uid: 1000,
        tier: "high".into(),
        state: state.into(),
        submit_time_ms: 1_767_225_600_000,
        spec: Some(Box::new(JobSpec {
            gpus: 2,
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn running(id: u64) -> JobInfo {
    JobInfo {
        start_time_ms: 1_767_225_610_000,
        alloc: vec![NodeAlloc {
            node: "gpu01".into(),
            gpus: vec![2, 3],
            cpus: 4,
            mem_mib: 1024,
        }],
        ..job(id, "RUNNING")
    }
}

fn ended(id: u64, state: &str, exit_code: Option<i32>, signal: Option<i32>) -> JobInfo {
    JobInfo {
        state: state.into(),
        exit_code,
        signal,
        end_time_ms: 1_767_225_620_000,
        ..running(id)
    }
}

type JobStream = Pin<Box<dyn Stream<Item = Result<JobInfo, Status>> + Send>>;

#[tonic::async_trait]
impl Ysched for MockSchedd {
    async fn submit(
        &self,
        request: Request<SubmitRequest>,
    ) -> Result<Response<SubmitReply>, Status> {
        let spec = request.into_inner().spec.unwrap_or_default();
        if spec.tier == "bogus" {
            return Err(Status::invalid_argument("unknown tier 'bogus'"));
        }
        if spec.name == "huge" {
            // What tonic answers for a request over the server's decoding limit.
            return Err(Status::out_of_range(
                "Error, decoded message length too large: found 50001719 bytes, the limit is: \
                 4194304 bytes",
            ));
        }
        // The job id chooses how the job ends in `watch_job`.
        let job_id = match spec.name.as_str() {
            "fail" => 3,
            "killed" => 9,
            _ if !spec.array.is_empty() => 40,
            _ => 7,
        };
        let array_task_count = if spec.array.is_empty() {
            0
        } else {
            ysched_common::ArraySpec::parse(&spec.array, 10_001)
                .map_err(Status::invalid_argument)?
                .count
        };
        self.submitted.lock().unwrap().push(spec);
        Ok(Response::new(SubmitReply {
            job_id,
            array_task_count,
        }))
    }

    async fn list_jobs(
        &self,
        request: Request<ListJobsRequest>,
    ) -> Result<Response<JobList>, Status> {
        let request = request.into_inner();
        // `arrays…`: tests that look up their own request use a name of their own.
        if request.user.starts_with("arrays") {
            self.list_requests.lock().unwrap().push(request);
            let mut jobs: Vec<JobInfo> = (0..50).map(array_task).collect();
            // A plain job among them, expected to start in an hour on gpu02.
            let mut plain = job(70, "PENDING");
            plain.display_id = "70".into();
            plain.reason = "Resources".into();
            plain.expected_start_ms = 1_767_229_200_000;
            plain.expected_nodes = vec!["gpu02".into()];
            jobs.insert(4, plain);
            return Ok(Response::new(JobList {
                jobs,
                next_after_id: 0,
            }));
        }
        if request.user == "many" {
            let jobs = (0..10_000)
                .map(|i| {
                    if i % 2 == 0 {
                        running(i)
                    } else {
                        job(i, "PENDING")
                    }
                })
                .collect();
            return Ok(Response::new(JobList {
                jobs,
                next_after_id: 0,
            }));
        }
        if request.user == "evil" {
            let mut evil = running(1);
            evil.name = "x\x1b[2J\nfake-line".into();
            evil.user = "mallory\r".into();
            evil.alloc[0].node = "gpu01\x07".into();
            let mut pending = job(2, "PENDING");
            pending.name = "训练-é 🚀".into();
            pending.reason = "\u{202e}olleh".into();
            return Ok(Response::new(JobList {
                jobs: vec![evil, pending],
                next_after_id: 0,
            }));
        }
        if request.user == "paged" {
            // Ten jobs, three a page, as schedd pages: by id, after the last one sent.
            self.list_requests.lock().unwrap().push(request.clone());
            let jobs: Vec<JobInfo> = (1..=10)
                .filter(|id| *id > request.after_id)
                .take(3)
                .map(|id| job(id, "PENDING"))
                .collect();
            let last = jobs.last().map_or(0, |j| j.id);
            return Ok(Response::new(JobList {
                jobs,
                next_after_id: if last < 10 { last } else { 0 },
            }));
        }
        self.list_requests.lock().unwrap().push(request);
        let mut pending = job(8, "PENDING");
        pending.reason = "Resources".into();
        Ok(Response::new(JobList {
            jobs: vec![running(7), pending],
            next_after_id: 0,
        }))
    }

    async fn get_job(&self, request: Request<JobRef>) -> Result<Response<JobDetail>, Status> {
        let request = request.into_inner();
        self.job_refs
            .lock()
            .unwrap()
            .push(("get_job", request.clone()));
        if let Some(task) = request.target.strip_prefix("12_") {
            let task: u32 = task
                .parse()
                .map_err(|_| Status::invalid_argument("one task"))?;
            let mut job = array_task(task);
            if let Some(spec) = job.spec.as_mut() {
                spec.dependency = "afterok:5".into();
            }
            return Ok(Response::new(JobDetail {
                job: Some(job),
                events: vec![],
            }));
        }
        match request.job_id {
            7 => Ok(Response::new(JobDetail {
                job: Some(running(7)),
                events: vec![JobEvent {
                    time_ms: 1_767_225_600_000,
                    kind: "SUBMITTED".into(),
                    detail: "by alice".into(),
                }],
            })),
            66 => {
                let mut evil = running(66);
                evil.name = "x\x1b]0;pwned\x07".into();
                evil.account = "acct\n".into();
                if let Some(spec) = evil.spec.as_mut() {
                    spec.workdir = "/tmp/\x1b[31mred".into();
                    spec.args = vec!["a\tb".into()];
                }
                Ok(Response::new(JobDetail {
                    job: Some(evil),
                    events: vec![JobEvent {
                        time_ms: 1_767_225_600_000,
                        kind: "SUBMITTED".into(),
                        detail: "by \x1b[2Jalice\nforged".into(),
                    }],
                }))
            }
            id => Err(Status::not_found(format!("no job {id}"))),
        }
    }

    async fn cancel(
        &self,
        request: Request<CancelRequest>,
    ) -> Result<Response<CancelReply>, Status> {
        let request = request.into_inner();
        self.cancels.lock().unwrap().push(request.clone());
        if request.job_ids.contains(&99) || request.targets.iter().any(|t| t == "99") {
            return Err(Status::permission_denied("job 99 is not yours"));
        }
        let resolved: Vec<(u64, String)> = request
            .job_ids
            .iter()
            .map(|id| (*id, id.to_string()))
            .chain(request.targets.iter().flat_map(|t| resolve(t)))
            .collect();
        Ok(Response::new(CancelReply {
            cancelled: resolved.iter().map(|(id, _)| *id).collect(),
            cancelled_names: resolved.into_iter().map(|(_, name)| name).collect(),
        }))
    }

    async fn hold(&self, request: Request<JobRef>) -> Result<Response<Empty>, Status> {
        self.job_refs
            .lock()
            .unwrap()
            .push(("hold", request.into_inner()));
        Ok(Response::new(Empty {}))
    }

    async fn release(&self, request: Request<JobRef>) -> Result<Response<Empty>, Status> {
        let request = request.into_inner();
        self.job_refs
            .lock()
            .unwrap()
            .push(("release", request.clone()));
        if request.target.starts_with("12_") {
            return Ok(Response::new(Empty {}));
        }
        Err(Status::failed_precondition("job 5 is not held"))
    }

    async fn requeue(&self, request: Request<JobRef>) -> Result<Response<Empty>, Status> {
        self.job_refs
            .lock()
            .unwrap()
            .push(("requeue", request.get_ref().clone()));
        match request.get_ref().job_id {
            5 => Err(Status::failed_precondition(
                "job 5 is PENDING: only a RUNNING job can be requeued",
            )),
            _ => Ok(Response::new(Empty {})),
        }
    }

    async fn list_nodes(&self, _: Request<ListNodesRequest>) -> Result<Response<NodeList>, Status> {
        // Two NVLink pairs (0-1, 2-3), each behind one PCIe switch.
        let gpu = |index: u32| Gpu {
            index,
            model: "NVIDIA A100-SXM4-80GB".into(),
            numa_node: -1,
            nvlink: vec![index ^ 1],
            links: (0..4)
                .filter(|&peer| peer != index)
                .map(|peer| GpuLink {
                    peer,
                    pcie: if peer / 2 == index / 2 { "PIX" } else { "SYS" }.into(),
                    nvlinks: if peer / 2 == index / 2 { 2 } else { 0 },
                })
                .collect(),
            ..Default::default()
        };
        Ok(Response::new(NodeList {
            nodes: vec![NodeInfo {
                name: "gpu01".into(),
                state: "MIXED".into(),
                cpus: 64,
                mem_mib: 524288,
                gpus: (0..4).map(gpu).collect(),
                gpu_holders: vec![0, 0, 7, 7],
                cpus_alloc: 4,
                mem_alloc_mib: 1024,
                features: vec!["ib".into(), "nvme".into()],
                ..Default::default()
            }],
        }))
    }

    async fn drain(&self, request: Request<DrainRequest>) -> Result<Response<Empty>, Status> {
        self.drains.lock().unwrap().push(request.into_inner());
        Ok(Response::new(Empty {}))
    }

    async fn resume(&self, _: Request<NodeRef>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }

    async fn shares(
        &self,
        _request: Request<ysched_proto::SharesRequest>,
    ) -> Result<Response<ysched_proto::ShareList>, Status> {
        let share = |account: &str, parent: &str, shares, norm, used: f64, factor| {
            ysched_proto::AccountShare {
                account: account.into(),
                parent: parent.into(),
                shares,
                norm_shares: norm,
                raw_gpu_secs: used * 2.0,
                decayed_gpu_secs: used,
                effective_usage: used / 7_200.0,
                fair_share: factor,
            }
        };
        Ok(Response::new(ysched_proto::ShareList {
            accounts: vec![
                share("ml", "", 2, 0.6667, 7_200.0, 0.354),
                share("vision", "", 1, 0.3333, 0.0, 1.0),
            ],
            half_life_secs: 86_400,
            as_of_ms: 1_767_225_600_000,
        }))
    }

    async fn report(
        &self,
        _request: Request<ysched_proto::ReportRequest>,
    ) -> Result<Response<ysched_proto::ReportReply>, Status> {
        Err(Status::unimplemented("report"))
    }

    async fn export_trace(
        &self,
        _request: Request<ysched_proto::ReportRequest>,
    ) -> Result<Response<ysched_proto::TraceReply>, Status> {
        Err(Status::unimplemented("export_trace"))
    }

    async fn import_usage(
        &self,
        _request: Request<ysched_proto::ImportUsageRequest>,
    ) -> Result<Response<ysched_proto::ImportUsageReply>, Status> {
        Err(Status::unimplemented("import_usage"))
    }

    async fn drain_gpu(
        &self,
        _request: Request<ysched_proto::DrainGpuRequest>,
    ) -> Result<Response<ysched_proto::Empty>, Status> {
        Err(Status::unimplemented("drain_gpu"))
    }

    async fn resume_gpu(
        &self,
        _request: Request<ysched_proto::ResumeGpuRequest>,
    ) -> Result<Response<ysched_proto::ResumeGpuReply>, Status> {
        Err(Status::unimplemented("resume_gpu"))
    }

    async fn update_job(
        &self,
        _request: Request<ysched_proto::UpdateJobRequest>,
    ) -> Result<Response<ysched_proto::UpdateJobReply>, Status> {
        Err(Status::unimplemented("update_job"))
    }

    async fn cluster_status(
        &self,
        _request: Request<ysched_proto::ClusterStatusRequest>,
    ) -> Result<Response<ysched_proto::ClusterStatusReply>, Status> {
        Err(Status::unimplemented("cluster_status"))
    }

    async fn change_cluster(
        &self,
        request: Request<ClusterChangeRequest>,
    ) -> Result<Response<ClusterChangeReply>, Status> {
        let r = request.into_inner();
        Ok(Response::new(ClusterChangeReply {
            done: format!("{} {} {}", r.action, r.replica, r.address),
            replica: r.replica,
        }))
    }

    async fn enrol_host(
        &self,
        request: Request<EnrolHostRequest>,
    ) -> Result<Response<EnrolHostReply>, Status> {
        let r = request.into_inner();
        if r.name == "taken" {
            return Err(Status::failed_precondition(
                "'taken' is the name of a compute node: a login host needs another name",
            ));
        }
        Ok(Response::new(EnrolHostReply {
            token: format!("ysched-enrol-1.{}.{}.{}", r.name, r.login, r.valid_secs),
            expires_ms: 1_767_225_600_000,
            generation: 3,
        }))
    }

    async fn revoke_host(&self, request: Request<NodeRef>) -> Result<Response<Empty>, Status> {
        match request.get_ref().name.as_str() {
            "n1" => Ok(Response::new(Empty {})),
            _ => Err(Status::not_found("no host 'x' was ever enrolled")),
        }
    }

    async fn list_hosts(
        &self,
        _request: Request<ListHostsRequest>,
    ) -> Result<Response<HostList>, Status> {
        let host = |name: &str, role: &str, revoked, connected| HostInfo {
            name: name.into(),
            role: role.into(),
            generation: 2,
            time_ms: 1_767_225_600_000,
            revoked,
            connected,
        };
        Ok(Response::new(HostList {
            hosts: vec![
                host("gpu-01", "compute", false, true),
                host("login1", "login", false, false),
                host("old\x1b[2J", "compute", true, false),
            ],
        }))
    }

    async fn audit(&self, request: Request<AuditRequest>) -> Result<Response<AuditList>, Status> {
        let entry = |job_id, action: &str| AuditEntry {
            time_ms: 1_767_225_600_000,
            user: "root".into(),
            uid: 0,
            action: action.into(),
            job_id,
            detail: "bad fan".into(),
            host: String::new(),
        };
        let mut log = vec![(2, entry(0, "drain")), (1, entry(7, "cancel"))];
        log[1].1.host = "login1".into();
        // One entry a page, as a schedd whose room for the answer is short sends them.
        let request = request.into_inner();
        let mut older = log
            .into_iter()
            .filter(|(id, _)| request.before_id == 0 || *id < request.before_id);
        let (id, first) = older.next().expect("asked past the end of the log");
        let next_before_id = if older.next().is_some() { id } else { 0 };
        Ok(Response::new(AuditList {
            entries: vec![first],
            next_before_id,
        }))
    }

    type WatchJobStream = JobStream;

    async fn watch_job(&self, request: Request<JobRef>) -> Result<Response<JobStream>, Status> {
        let request = request.into_inner();
        let older_schedd = self
            .submitted
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.name == "older-schedd");
        let updates = match request.job_id {
            // What a schedd that watched one job per request answered for an array's name.
            40 if request.target == "40" && older_schedd => {
                return Err(Status::invalid_argument(
                    "job 40 is an array of 3 tasks: name one task, e.g. 40_0",
                ))
            }
            // The array's name: each task once it has ended, in the order they end.
            40 if request.target == "40" => [41, 40, 42]
                .into_iter()
                .map(|id| {
                    let mut job = if id == 41 {
                        ended(id, "FAILED", Some(3), None)
                    } else {
                        ended(id, "COMPLETED", Some(0), None)
                    };
                    job.display_id = format!("40_{}", id - 40);
                    job.array_job_id = Some(40);
                    job.array_task_id = Some((id - 40) as u32);
                    job
                })
                .collect(),
            7 => vec![
                job(7, "PENDING"),
                running(7),
                ended(7, "COMPLETED", Some(0), None),
            ],
            3 => vec![
                job(3, "PENDING"),
                running(3),
                ended(3, "FAILED", Some(3), None),
            ],
            9 => vec![running(9), ended(9, "CANCELLED", None, Some(15))],
            // The three tasks of the array `ysub --array` gets, 40_0 to 40_2.
            id @ 40..=42 => {
                let task = |mut job: JobInfo| {
                    job.display_id = format!("40_{}", id - 40);
                    job.array_job_id = Some(40);
                    job.array_task_id = Some((id - 40) as u32);
                    job
                };
                let end = if id == 41 {
                    ended(id, "FAILED", Some(3), None)
                } else {
                    ended(id, "COMPLETED", Some(0), None)
                };
                vec![task(job(id, "PENDING")), task(running(id)), task(end)]
            }
            id => return Err(Status::not_found(format!("no job {id}"))),
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(
            updates.into_iter().map(Ok),
        ))))
    }
}

/// A mock schedd of one test, served from a thread of its own on a socket in the test's own
/// directory: each test sees only its own requests. Dropping it stops the server and removes
/// the directory.
struct Harness {
    schedd: Arc<MockSchedd>,
    dir: tempfile::TempDir,
    config: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl Harness {
    fn start() -> Harness {
        let dir = tempfile::Builder::new()
            .prefix("t")
            .tempdir_in(scratch_dir())
            .unwrap();
        let socket = dir.path().join("schedd.sock");
        let config = dir.path().join("ysched.toml");
        std::fs::write(
            &config,
            format!("[scheduler]\nsocket = {:?}\n", socket.to_str().unwrap()),
        )
        .unwrap();
        let schedd = Arc::new(MockSchedd::default());
        let service = YschedServer::from_arc(schedd.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&socket).unwrap();
                ready_tx.send(()).unwrap();
                tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::UnixListenerStream::new(listener),
                        async {
                            let _ = stopped.await;
                        },
                    )
                    .await
                    .unwrap();
            });
        });
        ready_rx.recv().unwrap();
        Harness {
            schedd,
            dir,
            config,
            stop: Some(stop),
            server: Some(server),
        }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A tool pointed at this mock schedd, run in the test's directory.
    fn command(&self, tool: &str) -> Command {
        let binary = match tool {
            "ysub" => env!("CARGO_BIN_EXE_ysub"),
            "yq" => env!("CARGO_BIN_EXE_yq"),
            "ycancel" => env!("CARGO_BIN_EXE_ycancel"),
            "yctl" => env!("CARGO_BIN_EXE_yctl"),
            _ => unreachable!(),
        };
        let mut command = Command::new(binary);
        command
            .env("YSCHED_CONF", &self.config)
            .current_dir(self.dir());
        command
    }

    fn run(&self, tool: &str, args: &[&str]) -> Output {
        self.command(tool)
            .args(args)
            .env("YSUB_TEST_MARKER", "exported")
            .output()
            .unwrap()
    }

    fn write_script(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir().join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// The last job submitted with this name.
    fn submitted_named(&self, name: &str) -> JobSpec {
        let submitted = self.schedd.submitted.lock().unwrap();
        submitted
            .iter()
            .rev()
            .find(|s| s.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("no job named {name}"))
    }

    fn submitted_count(&self) -> usize {
        self.schedd.submitted.lock().unwrap().len()
    }

    /// The last listing asked for `user`'s jobs.
    fn list_request_of(&self, user: &str) -> ListJobsRequest {
        self.schedd
            .list_requests
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|r| r.user == user)
            .cloned()
            .unwrap_or_else(|| panic!("no listing for {user}"))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// The directory of this test process under the build's tmp dir (kept short for the socket
/// paths), after removing those of earlier runs whose process is gone.
fn scratch_dir() -> PathBuf {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ysub-mock");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !Path::new("/proc").join(&pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = base.join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn ysub_sends_script_directives_and_environment() {
    let mock = Harness::start();
    let script = mock.write_script(
        "train.sh",
        "#!/bin/bash\n#YSUB -J directive-name -G 4 -t 10\n#YSUB --mem 2G\npython train.py \"$@\"\n",
    );
    let output = mock.run(
        "ysub",
        &["-J", "cli-name", path_str(&script), "--epochs", "3"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Submitted job 7\n");
    let spec = mock.submitted_named("cli-name");
    assert_eq!(spec.gpus, 4);
    assert_eq!(spec.time_limit_secs, 600);
    assert_eq!(spec.mem_mib, 2048);
    assert_eq!(spec.args, ["--epochs", "3"]);
    assert!(spec.script.starts_with("#!/bin/bash\n#YSUB"));
    assert_eq!(spec.workdir, path_str(mock.dir()));
    assert_eq!(
        spec.env.get("YSUB_TEST_MARKER").map(String::as_str),
        Some("exported")
    );
}

#[test]
fn ysub_parsable_wrap() {
    let mock = Harness::start();
    let output = mock.run(
        "ysub",
        &[
            "--parsable",
            "--export=NONE,A=1",
            "-J",
            "wrapped",
            "--wrap",
            "echo hi",
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "7\n");
    let spec = mock.submitted_named("wrapped");
    assert_eq!(spec.script, "#!/bin/sh\necho hi\n");
    assert_eq!(spec.env.len(), 1);
}

#[test]
fn ysub_wait_exits_with_the_job_code() {
    let mock = Harness::start();
    let output = mock.run("ysub", &["--wait", "--wrap", "true"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("Job 7 COMPLETED (exit 0)"),
        "{}",
        stderr(&output)
    );

    let output = mock.run("ysub", &["--wait", "-J", "fail", "--wrap", "exit 3"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("Job 3 FAILED (exit 3)"),
        "{}",
        stderr(&output)
    );

    let output = mock.run("ysub", &["-W", "-J", "killed", "--wrap", "sleep 1000"]);
    assert_eq!(output.status.code(), Some(143), "{}", stderr(&output));
}

#[test]
fn ysub_reports_server_refusals() {
    let mock = Harness::start();
    let output = mock.run("ysub", &["-p", "bogus", "--wrap", "true"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr(&output), "ysub: error: unknown tier 'bogus'\n");
    assert!(stdout(&output).is_empty());
}

#[test]
fn ysub_bad_input_submits_nothing() {
    let mock = Harness::start();
    for args in [
        &["-G", "-1", "--wrap", "x"][..],
        &["-t", "1:2:3:4", "--wrap", "x"],
        &["--mem", "lots", "--wrap", "x"],
        &["missing.sh"],
    ] {
        let output = mock.run("ysub", args);
        assert!(!output.status.success(), "{args:?} accepted");
        assert!(!stderr(&output).is_empty());
    }
    assert!(stderr(&mock.run("ysub", &["missing.sh"])).contains("missing.sh"));
    // This mock schedd is the test's own: nothing reached it.
    assert_eq!(mock.submitted_count(), 0);
}

#[test]
fn yq_table_and_json() {
    let mock = Harness::start();
    let output = mock.run("yq", &["-u", "alice", "-t", "PD,R"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][0], "JOBID");
    assert_eq!(rows[1][0], "7");
    assert_eq!(rows[1][7], "gpu01");
    assert_eq!(rows[2][7], "(Resources)");
    let request = mock
        .schedd
        .list_requests
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.user == "alice")
        .cloned()
        .unwrap();
    assert_eq!(request.states, ["PENDING", "RUNNING"]);

    let output = mock.run("yq", &["--json"]);
    let jobs: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(jobs[0]["id"], 7);
    assert_eq!(jobs[0]["gpus"], serde_json::json!([2, 3]));
    assert_eq!(jobs[1]["node"], serde_json::Value::Null);
}

#[test]
fn ycancel_and_hold() {
    let mock = Harness::start();
    let output = mock.run("ycancel", &["1", "2"]);
    assert!(output.status.success());
    assert!(stdout(&output).is_empty());
    let output = mock.run("ycancel", &["-v", "1,2"]);
    assert_eq!(stdout(&output), "Cancelled job 1\nCancelled job 2\n");
    let output = mock.run("ycancel", &["99"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr(&output), "ycancel: error: job 99 is not yours\n");

    assert!(mock.run("yctl", &["hold", "5"]).status.success());
    let output = mock.run("yctl", &["release", "5"]);
    assert_eq!(stderr(&output), "yctl: error: job 5 is not held\n");

    assert!(mock.run("yctl", &["requeue", "7"]).status.success());
    let output = mock.run("yctl", &["requeue", "5"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        "yctl: error: job 5 is PENDING: only a RUNNING job can be requeued\n"
    );
}

#[test]
fn yctl_nodes_show_and_drain() {
    let mock = Harness::start();
    let output = mock.run("yctl", &["nodes", "-l"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("4x A100-SXM4-80GB"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["gpu2", "A100-SXM4-80GB", "job", "7"]),
        "{text}"
    );

    assert!(text.lines().nth(1).unwrap().contains("  ib,nvme"), "{text}");

    let nodes: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yctl", &["nodes", "--json"]))).unwrap();
    assert_eq!(nodes[0]["gpus"][3]["job"], 7);
    assert_eq!(nodes[0]["gpus"][3]["links"][2]["nvlinks"], 2);

    let output = mock.run("yctl", &["nodes", "--topology", "gpu01"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with(
            "      GPU0  GPU1  GPU2  GPU3  NUMA Affinity\n\
             GPU0  X     NV2   SYS   SYS   N/A\n\
             GPU1  NV2   X     SYS   SYS   N/A\n\
             GPU2  SYS   SYS   X     NV2   N/A\n\
             GPU3  SYS   SYS   NV2   X     N/A\n"
        ),
        "{text}"
    );
    assert!(text.contains("  PIX  = Connection traversing at most a single PCIe bridge\n"));
    let output = mock.run("yctl", &["nodes", "--topology", "gpu99"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (Some(1), "yctl: error: unknown node 'gpu99'\n")
    );

    let output = mock.run("yctl", &["show", "job", "7"]);
    assert!(
        stdout(&output).starts_with("JobId=7 JobName=train\n"),
        "{}",
        stdout(&output)
    );
    assert!(stdout(&output).contains("Events:\n"));
    let detail: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yctl", &["show", "job", "7", "--json"]))).unwrap();
    assert_eq!(detail["events"][0]["kind"], "SUBMITTED");
    let output = mock.run("yctl", &["show", "job", "404"]);
    assert_eq!(
        (output.status.code(), stderr(&output).as_str()),
        (Some(1), "yctl: error: no job 404\n")
    );

    assert!(mock
        .run("yctl", &["drain", "gpu01", "--reason", "bad fan"])
        .status
        .success());
    let drains = mock.schedd.drains.lock().unwrap();
    assert!(drains
        .iter()
        .any(|d| d.name == "gpu01" && d.reason == "bad fan"));
}

#[test]
fn yq_lists_ten_thousand_jobs_quickly() {
    let mock = Harness::start();
    // Warm up (page cache, socket), then time one listing. The budget is generous for debug
    // builds; release builds take a few milliseconds.
    mock.run("yq", &["-u", "many"]);
    let started = std::time::Instant::now();
    let output = mock.run("yq", &["-u", "many"]);
    let elapsed = started.elapsed();
    eprintln!("yq listed 10,000 jobs in {elapsed:?}");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).lines().count(), 10_001);
    assert!(
        elapsed < std::time::Duration::from_secs(2),
        "yq took {elapsed:?}"
    );
    let jobs: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yq", &["-u", "many", "--json"]))).unwrap();
    assert_eq!(jobs.as_array().unwrap().len(), 10_000);
}

#[test]
fn yq_follows_the_pages_of_a_long_listing() {
    let mock = Harness::start();
    // Ten jobs in pages of three: every one printed once, in order, in the table and the JSON
    // alike, each page asked for after the last one.
    let output = mock.run("yq", &["-u", "paged"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let ids: Vec<String> = stdout(&output)
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(ids, (1..=10).map(|i| i.to_string()).collect::<Vec<_>>());
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yq", &["-u", "paged", "--json"]))).unwrap();
    let json_ids: Vec<u64> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(json_ids, (1..=10).collect::<Vec<_>>());
    let asked: Vec<u64> = mock
        .schedd
        .list_requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.after_id)
        .collect();
    assert_eq!(asked, [0, 3, 6, 9, 0, 3, 6, 9]);
}

#[test]
fn yctl_audit() {
    let mock = Harness::start();
    let output = mock.run("yctl", &["audit", "-n", "2"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["TIME", "USER", "ACTION", "JOB", "DETAIL"]);
    assert_eq!(
        rows[1],
        ["2026-01-01T00:00:00Z", "root", "drain", "-", "bad", "fan"]
    );
    assert_eq!(
        rows[2][1], "root@login1",
        "a relayed request names its host"
    );
    assert_eq!(rows[2][3], "7");
    let entries: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yctl", &["audit", "--json", "-n", "2"]))).unwrap();
    assert_eq!(entries[0]["job_id"], serde_json::Value::Null);
    assert_eq!(entries[0]["action"], "drain");
    assert_eq!(entries[0]["host"], serde_json::Value::Null);
    assert_eq!(entries[1]["host"], "login1");
    // The whole log, page after page; and no more than asked for.
    for (args, n) in [
        (&["audit", "--json"][..], 2),
        (&["audit", "--json", "-n", "1"], 1),
    ] {
        let entries: Vec<serde_json::Value> =
            serde_json::from_str(&stdout(&mock.run("yctl", args))).unwrap();
        assert_eq!(entries.len(), n, "{args:?}");
    }
}

#[test]
fn yctl_shares() {
    let mock = Harness::start();
    let output = mock.run("yctl", &["shares"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "ACCOUNT",
            "PARENT",
            "SHARES",
            "NORM_SHARES",
            "RAW_GPU_H",
            "DECAYED_GPU_H",
            "EFF_USAGE",
            "FAIRSHARE"
        ]
    );
    assert_eq!(
        rows[1],
        ["ml", "-", "2", "0.6667", "4.0", "2.0", "1.0000", "0.354"]
    );
    assert_eq!(rows[2][0], "vision");
    assert!(text.contains("half-life of 1d"), "{text}");
    let value: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yctl", &["shares", "--json"]))).unwrap();
    assert_eq!(value["half_life_secs"], 86_400);
    assert_eq!(value["accounts"][0]["decayed_gpu_hours"], 2.0);
    assert_eq!(value["accounts"][1]["fair_share"], 1.0);
}

#[test]
fn yq_escapes_control_characters_and_keeps_unicode() {
    let mock = Harness::start();
    let output = mock.run("yq", &["-u", "evil"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        !text.contains(|c: char| c.is_control() && c != '\n' || c == '\u{202e}'),
        "{text:?}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let evil: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        evil,
        [
            "1",
            "x\\x1b[2J\\nfake-line",
            "mallory\\r",
            "high",
            "RUNNING",
            evil[5],
            "2",
            "gpu01\\x07"
        ]
    );
    assert!(lines[2].contains(" 训练-é 🚀 "), "{text}");
    assert!(lines[2].ends_with("(\\u{202e}olleh)"), "{text}");
    // Columns stay aligned: STATE starts at the same column on every line.
    let column_of = |line: &str, word: &str| line[..line.find(word).unwrap()].chars().count();
    let state_at = column_of(lines[0], "STATE");
    assert_eq!(column_of(lines[1], "RUNNING"), state_at, "{text}");
    assert_eq!(column_of(lines[2], "PENDING"), state_at, "{text}");

    // JSON stays exact.
    let jobs: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yq", &["-u", "evil", "--json"]))).unwrap();
    assert_eq!(jobs[0]["name"], "x\x1b[2J\nfake-line");
    assert_eq!(jobs[1]["name"], "训练-é 🚀");
    assert_eq!(jobs[1]["reason"], "\u{202e}olleh");
}

#[test]
fn yctl_show_job_escapes_control_characters() {
    let mock = Harness::start();
    let output = mock.run("yctl", &["show", "job", "66"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        !text.contains(|c: char| c.is_control() && c != '\n'),
        "{text:?}"
    );
    for expected in [
        "JobName=x\\x1b]0;pwned\\x07",
        "Account=acct\\n",
        "WorkDir=/tmp/\\x1b[31mred",
        "Args='a\\tb'",
        "by \\x1b[2Jalice\\nforged",
    ] {
        assert!(text.contains(expected), "missing {expected} in\n{text}");
    }
    let detail: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yctl", &["show", "job", "66", "--json"]))).unwrap();
    assert_eq!(detail["name"], "x\x1b]0;pwned\x07");
    assert_eq!(detail["events"][0]["detail"], "by \x1b[2Jalice\nforged");
}

#[test]
fn ysub_names_the_request_that_was_too_large() {
    let mock = Harness::start();
    let output = mock.run("ysub", &["-J", "huge", "--wrap", "true"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        "ysub: error: a message size limit was exceeded: the submit request is 47.7 MiB, \
         over schedd's limit of 4.0 MiB\n"
    );
}

#[test]
fn ysub_refuses_an_oversized_script_before_sending_it() {
    let mock = Harness::start();
    let before = mock.submitted_count();
    let mut contents = String::from("#!/bin/sh\n");
    while contents.len() < 5 * 1024 * 1024 {
        contents.push_str("# padding\n");
    }
    contents.truncate(5 * 1024 * 1024 - 1);
    contents.push('\n');
    let script = mock.write_script("big.sh", &contents);
    let output = mock.run("ysub", &["-J", "too-big", path_str(&script)]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        "ysub: error: script is 5.0 MiB; the limit is 4 MiB (scheduler.max_script_mib)\n"
    );
    let submitted = mock.schedd.submitted.lock().unwrap();
    assert!(submitted[before..].iter().all(|s| s.name != "too-big"));
}

#[test]
fn ysub_refuses_unprintable_names_and_accounts() {
    let mock = Harness::start();
    for args in [
        &["-J", "bad\nname", "--wrap", "true"][..],
        &["-J", "\x1b[2J", "--wrap", "true"],
        &["-A", "acct\u{202e}", "-J", "fine", "--wrap", "true"],
    ] {
        let output = mock.run("ysub", args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let err = stderr(&output);
        assert!(err.starts_with("ysub: error: "), "{err}");
        assert!(
            err.contains("contains a control character")
                || err.contains("contains an invisible formatting character"),
            "{err}"
        );
        assert!(!err.contains('\x1b'), "{err:?}");
    }
    let script = mock.write_script(
        "directive-name.sh",
        "#!/bin/sh\n#YSUB -J \"two\tparts\"\ntrue\n",
    );
    let output = mock.run("ysub", &[path_str(&script)]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        "ysub: error: job name \"two\\tparts\" contains a control character (U+0009); names \
         may not contain control characters\n"
    );
}

#[test]
fn ysub_refuses_a_non_utf8_environment_it_would_export() {
    let mock = Harness::start();
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"caf\xe9");
    let output = mock
        .command("ysub")
        .env("YSUB_BAD_VAR", bad)
        .args(["-J", "bad-env", "--wrap", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        "ysub: error: environment variable YSUB_BAD_VAR is not valid UTF-8; ysched can only \
         carry UTF-8 environments: unset it or use --export=NONE/--export=VAR,...\n"
    );
    // Not exported: fine.
    let output = mock
        .command("ysub")
        .env("YSUB_BAD_VAR", bad)
        .args(["--export=NONE,A=1", "-J", "good-env", "--wrap", "true"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(mock.submitted_named("good-env").env.len(), 1);
    let submitted = mock.schedd.submitted.lock().unwrap();
    assert!(submitted.iter().all(|s| s.name != "bad-env"));
}

#[test]
fn every_tool_reports_argument_errors_as_tool_error_and_exit_1() {
    let mock = Harness::start();
    let before = mock.submitted_count();
    for (tool, args, message) in [
        (
            "ysub",
            &["-G", "4294967296", "--wrap", "x"][..],
            "--gpus 4294967296 exceeds the maximum of 100000",
        ),
        (
            "ysub",
            &["-N", "0", "--wrap", "x"],
            "--nodes must be at least 1 (got 0)",
        ),
        (
            "ysub",
            &["-c", "0", "--wrap", "x"],
            "--cpus must be at least 1 (got 0)",
        ),
        (
            "ysub",
            &["-t", "307445734561825861", "--wrap", "x"],
            "time limit '307445734561825861' exceeds the maximum of 365 days",
        ),
        ("ysub", &["--bogus"], "unexpected argument '--bogus'"),
        ("yq", &["-j", "x"], "invalid value 'x'"),
        ("ycancel", &["7x"], "invalid value '7x'"),
        (
            "yctl",
            &["frobnicate"],
            "unrecognized subcommand 'frobnicate'",
        ),
        ("yctl", &[], "a command is required"),
        ("yctl", &["drain", "gpu01"], "--reason"),
    ] {
        let output = mock.run(tool, args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{tool} {args:?}: {err}");
        assert!(
            err.starts_with(&format!("{tool}: error: ")),
            "{tool} {args:?}: {err}"
        );
        assert!(err.contains(message), "{tool} {args:?}: {err}");
    }
    assert_eq!(mock.submitted_count(), before, "an invalid ysub submitted");

    // A non-UTF-8 argument, to each tool.
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    for tool in ["ysub", "yq", "ycancel", "yctl"] {
        let output = mock
            .command(tool)
            .arg(OsStr::from_bytes(b"\xff\xfe"))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{tool}");
        assert_eq!(
            stderr(&output),
            format!(
                "{tool}: error: argument 1 ('\\xff\\xfe') is not valid UTF-8; ysched tools \
                 take UTF-8 arguments only\n"
            )
        );
    }

    // Help and version still print normally and succeed.
    for tool in ["ysub", "yq", "ycancel", "yctl"] {
        for flag in ["--help", "--version"] {
            let output = mock.run(tool, &[flag]);
            assert_eq!(output.status.code(), Some(0), "{tool} {flag}");
            assert!(!stdout(&output).is_empty(), "{tool} {flag}");
            assert!(stderr(&output).is_empty(), "{tool} {flag}");
        }
    }
}

#[test]
fn yctl_drain_refuses_an_unprintable_reason() {
    let mock = Harness::start();
    let output = mock.run("yctl", &["drain", "gpu01", "--reason", "fan\x1b[2J"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        "yctl: error: drain reason \"fan\\x1b[2J\" contains a control character (U+001B); \
         reasons may not contain control characters\n"
    );
    let drains = mock.schedd.drains.lock().unwrap();
    assert!(drains.iter().all(|d| !d.reason.starts_with("fan")));
}

#[test]
fn ysub_sends_array_and_dependency_from_directives_and_options() {
    let mock = Harness::start();
    let script = mock.write_script(
        "sweep.sh",
        "#!/bin/sh\n#YSUB -J sweep-directives --array 0-9%2\n#YSUB -d afterok:3\necho $YS_ARRAY_TASK_ID\n",
    );
    let output = mock.run("ysub", &[path_str(&script)]);
    assert!(output.status.success(), "{}", stderr(&output));
    // An array prints its id, as a job does (sbatch's way).
    assert_eq!(stdout(&output), "Submitted job 40\n");
    let spec = mock.submitted_named("sweep-directives");
    assert_eq!(spec.array, "0-9%2");
    assert_eq!(spec.dependency, "afterok:3");

    let output = mock.run(
        "ysub",
        &[
            "--parsable",
            "-J",
            "sweep-cli",
            "-a",
            "1,5,9-12",
            "--dependency",
            "afterany:12_7",
            path_str(&script),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "40\n");
    let spec = mock.submitted_named("sweep-cli");
    assert_eq!(spec.array, "1,5,9-12");
    assert_eq!(spec.dependency, "afterany:12_7");
}

#[test]
fn ysub_refuses_bad_arrays_and_dependencies_before_sending() {
    let mock = Harness::start();
    let before = mock.submitted_count();
    for (args, message) in [
        (
            &["-J", "bad-array", "--array", "0-10001", "--wrap", "true"][..],
            "ysub: error: --array '0-10001': index 10001 is above the largest allowed, 10000 \
             (scheduler.max_array_size = 10001)\n",
        ),
        (
            &["-J", "bad-array", "-a", "3-1", "--wrap", "true"],
            "ysub: error: --array '3-1': range '3-1' goes backwards\n",
        ),
        (
            &["-J", "bad-dep", "-d", "afterok", "--wrap", "true"],
            "ysub: error: --dependency 'afterok': 'afterok' names no job (expected e.g. \
             afterok:12)\n",
        ),
    ] {
        let output = mock.run("ysub", args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(stderr(&output).starts_with(message), "{}", stderr(&output));
    }
    let submitted = mock.schedd.submitted.lock().unwrap();
    assert!(submitted[before..]
        .iter()
        .all(|s| s.name != "bad-array" && s.name != "bad-dep"));
}

#[test]
fn ysub_wait_on_an_array_waits_for_every_task() {
    // One watch of the whole array; then as against a schedd that watches one job per request
    // (refusing the array's name), task by task: the same lines and exit code.
    for name in ["wait-array", "older-schedd"] {
        let mock = Harness::start();
        let output = mock.run(
            "ysub",
            &["--wait", "-J", name, "-a", "0-2", "--wrap", "true"],
        );
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(3), "{name}: {err}");
        assert_eq!(stdout(&output), "Submitted job 40\n");
        assert_eq!(
            err,
            "Job 40_1 FAILED (exit 3)\nArray 40: 3 tasks ended, 2 COMPLETED, 1 FAILED (exit 3)\n",
            "{name}"
        );
    }
}

#[test]
fn yq_folds_waiting_array_tasks_and_expands_them_with_array() {
    let mock = Harness::start();
    let output = mock.run("yq", &["-u", "arrays"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let ids: Vec<&str> = text
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "JOBID",
            "12_0",
            "12_1",
            "12_2",
            "12_3",
            "70",
            "12_[4-48%4]",
            "12_49"
        ],
        "{text}"
    );
    assert!(text.contains("12_[4-48%4]  sweep  alice"), "{text}");
    assert!(text
        .lines()
        .nth(6)
        .unwrap()
        .ends_with("(JobArrayTaskLimit)"));
    assert!(text.lines().nth(7).unwrap().contains(" HELD "), "{text}");

    for flag in ["--array", "-r"] {
        let text = stdout(&mock.run("yq", &["-u", "arrays", flag, "--noheader"]));
        assert_eq!(text.lines().count(), 51, "{text}");
        assert!(!text.contains("12_["), "{text}");
        assert!(text.contains("\n12_48  sweep"), "{text}");
    }

    let jobs: serde_json::Value =
        serde_json::from_str(&stdout(&mock.run("yq", &["-u", "arrays", "--json"]))).unwrap();
    let jobs = jobs.as_array().unwrap();
    assert_eq!(jobs.len(), 51, "JSON is never folded");
    assert_eq!(jobs[0]["display_id"], "12_0");
    assert_eq!(jobs[0]["array_job_id"], 12);
    assert_eq!(jobs[0]["array_task_id"], 0);
    assert_eq!(jobs[0]["expected_start"], serde_json::Value::Null);
    assert_eq!(jobs[4]["display_id"], "70");
    assert_eq!(jobs[4]["array_job_id"], serde_json::Value::Null);
    assert_eq!(jobs[4]["expected_start"], "2026-01-01T01:00:00Z");
    assert_eq!(jobs[4]["expected_nodes"], serde_json::json!(["gpu02"]));

    let text = stdout(&mock.run("yq", &["-u", "arrays", "-l"]));
    assert!(text.contains("\n12_[4-48%4]  sweep"), "{text}");
}

#[test]
fn yq_start_lists_expected_starts() {
    let mock = Harness::start();
    let output = mock.run("yq", &["-u", "arrays-start", "--start"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let rows: Vec<Vec<String>> = stdout(&output)
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "JOBID",
            "TIER",
            "NAME",
            "USER",
            "ST",
            "START_TIME",
            "SCHEDNODES",
            "REASON"
        ]
    );
    assert_eq!(
        rows[1],
        [
            "70",
            "high",
            "train",
            "alice",
            "PD",
            "2026-01-01T01:00:00Z",
            "gpu02",
            "Resources"
        ]
    );
    assert_eq!(
        rows[2],
        [
            "12_[4-48%4]",
            "high",
            "sweep",
            "alice",
            "PD",
            "N/A",
            "N/A",
            "JobArrayTaskLimit"
        ]
    );
    assert_eq!(
        rows.len(),
        3,
        "running and held jobs are not listed: {rows:?}"
    );
    assert_eq!(mock.list_request_of("arrays-start").states, ["PENDING"]);
}

#[test]
fn yq_passes_job_targets() {
    let mock = Harness::start();
    let output = mock.run(
        "yq",
        &["-u", "targets", "-j", "12_7,12_[1-3,9]", "-j", "14"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let request = mock.list_request_of("targets");
    assert_eq!(request.targets, ["12_7", "12_[1-3,9]", "14"]);
    assert_eq!(request.job_ids, [14]);
    let output = mock.run("yq", &["-j", "12_x"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("'12_x' is not a job id (expected 12, 12_7 or 12_[1-5])"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn ycancel_sends_targets_and_prints_task_names() {
    let mock = Harness::start();
    let output = mock.run("ycancel", &["-v", "12_7", "12_[1-2],30"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "Cancelled job 12_7\nCancelled job 12_1\nCancelled job 12_2\nCancelled job 30\n"
    );
    let cancels = mock.schedd.cancels.lock().unwrap();
    let request = cancels
        .iter()
        .find(|r| r.targets.first().map(String::as_str) == Some("12_7"))
        .unwrap();
    assert_eq!(request.targets, ["12_7", "12_[1-2]", "30"]);
    assert!(request.job_ids.is_empty());
}

#[test]
fn yctl_job_commands_take_array_targets() {
    let mock = Harness::start();
    assert!(mock
        .run("yctl", &["hold", "12_[100-199],13"])
        .status
        .success());
    let output = mock.run("yctl", &["release", "12_4"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = mock.run("yctl", &["show", "job", "12_7"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with(
            "JobId=19 ArrayJobId=12 ArrayTaskId=7 ArrayTaskThrottle=4 JobName=sweep\n"
        ),
        "{text}"
    );
    assert!(text.contains("   Dependency=afterok:5\n"), "{text}");
    assert!(text.contains("StdOut=ysched-12_7.out"), "{text}");
    let detail: serde_json::Value = serde_json::from_str(&stdout(
        &mock.run("yctl", &["show", "job", "12_7", "--json"]),
    ))
    .unwrap();
    assert_eq!(detail["display_id"], "12_7");
    assert_eq!(detail["array_task_id"], 7);
    assert_eq!(detail["dependency"], "afterok:5");
    assert_eq!(detail["array"], "0-49%4");
    let output = mock.run("yctl", &["show", "job", "12_[1-2]"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("names 2 tasks"),
        "{}",
        stderr(&output)
    );

    let refs = mock.schedd.job_refs.lock().unwrap();
    let sent = |rpc: &str, target: &str| {
        refs.iter()
            .find(|(r, j)| *r == rpc && j.target == target)
            .map(|(_, j)| j.job_id)
    };
    assert_eq!(sent("hold", "12_[100-199]"), Some(0));
    assert_eq!(sent("hold", "13"), Some(13));
    assert_eq!(sent("release", "12_4"), Some(0));
    assert_eq!(sent("get_job", "12_7"), Some(0));
}

#[test]
fn yctl_node_enrol_prints_the_token_alone_or_writes_it_private() {
    let mock = Harness::start();
    let out = mock.run("yctl", &["node", "enrol", "gpu-07", "--valid", "30m"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // stdout is the token alone (scripts take it); stderr says what to do with it.
    assert_eq!(stdout(&out), "ysched-enrol-1.gpu-07.false.1800\n");
    assert!(
        stderr(&out).contains("noded --enrol-token FILE"),
        "{}",
        stderr(&out)
    );
    let out = mock.run("yctl", &["node", "enrol", "login1", "--login", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["role"], "login");
    assert_eq!(v["generation"], 3);
    assert_eq!(v["token"], "ysched-enrol-1.login1.true.3600");
    // Written to a file: 0600, and the token is not printed.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpu-08.token");
    let out = mock.run(
        "yctl",
        &["node", "enrol", "gpu-08", "-o", file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "ysched-enrol-1.gpu-08.false.3600\n"
    );
    // An existing file is not overwritten.
    let out = mock.run(
        "yctl",
        &["node", "enrol", "gpu-08", "-o", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot create"), "{}", stderr(&out));
    // schedd's refusal, and a bad duration.
    let out = mock.run("yctl", &["node", "enrol", "taken", "--login"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is the name of a compute node"));
    let out = mock.run("yctl", &["node", "enrol", "n9", "--valid", "soon"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("yctl: error: --valid soon:"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn yctl_node_hosts_and_revoke() {
    let mock = Harness::start();
    let out = mock.run("yctl", &["node", "hosts"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("NAME"), "{text}");
    assert!(lines[1].starts_with("gpu-01") && lines[1].ends_with("connected"));
    assert!(lines[2].contains("login") && lines[2].ends_with("not connected"));
    // A name is printed escaped, never as a terminal control sequence.
    assert!(lines[3].starts_with("old\\x1b[2J") && lines[3].ends_with("revoked"));
    let out = mock.run("yctl", &["node", "hosts", "--json"]);
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[1]["role"], "login");
    assert_eq!(v[2]["revoked"], true);
    let out = mock.run("yctl", &["node", "revoke", "n1"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("host n1 revoked"));
    let out = mock.run("yctl", &["node", "revoke", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("was ever enrolled"));
}

#[test]
fn yctl_cluster_changes_name_the_action_the_replica_and_the_address() {
    let mock = Harness::start();
    for (args, done) in [
        (
            &["cluster", "add", "sched4:7117", "--id", "4"][..],
            "add 4 sched4:7117\n",
        ),
        (
            &["cluster", "add", "sched5:7117"][..],
            "add 0 sched5:7117\n",
        ),
        (&["cluster", "promote", "4"][..], "promote 4 \n"),
        (&["cluster", "remove", "2"][..], "remove 2 \n"),
    ] {
        let out = mock.run("yctl", args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), done, "{args:?}");
    }
    let out = mock.run("yctl", &["cluster", "promote", "x"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn without_schedds_socket_a_silent_agents_socket_is_named_with_why_it_was_used() {
    let dir = tempfile::tempdir().unwrap();
    // The agent's socket is there (a stale file: noded is not running), schedd's is not.
    let agent = dir.path().join("noded.sock");
    std::fs::write(&agent, "").unwrap();
    let config = dir.path().join("ysched.toml");
    std::fs::write(
        &config,
        format!(
            "[scheduler]\nsocket = \"{}/schedd.sock\"\n[node]\nclient_socket = \"{}\"\n",
            dir.path().display(),
            agent.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_yq"))
        .env("YSCHED_CONF", &config)
        .env_remove("YSCHED_SOCKET")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&agent.display().to_string()), "{err}");
    assert!(
        err.contains("schedd.sock (scheduler.socket) is not there"),
        "{err}"
    );
}
