//! Sending one generated request to one RPC of schedd's client service.

use super::{Client, Gen};
use std::time::Duration;
use tokio_stream::StreamExt;
use ysched_proto as pb;

/// Sends one request of `rpc` made by `g`; the status code of the answer.
pub(super) async fn send(client: &mut Client, g: &mut Gen, rpc: &str) -> (String, usize) {
    use prost::Message;
    let code = |r: Result<(), tonic::Status>| match r {
        Ok(()) => "Ok".to_string(),
        Err(s) => format!("{:?}", s.code()),
    };
    match rpc {
        "Submit" | "Submit(valid)" => {
            let spec = if rpc == "Submit" {
                g.spec()
            } else {
                g.valid_spec()
            };
            let request = pb::SubmitRequest { spec: Some(spec) };
            let size = request.encoded_len();
            let r = client.submit(request).await;
            if let Ok(reply) = &r {
                let id = reply.get_ref().job_id;
                if g.known.len() < 512 {
                    g.known.push(id);
                } else {
                    let i = g.rng.below(512) as usize;
                    g.known[i] = id;
                }
            }
            (code(r.map(|_| ())), size)
        }
        "ListJobs" | "ListJobs(targets)" => {
            let request = pb::ListJobsRequest {
                user: if g.rng.percent(50) {
                    String::new()
                } else {
                    g.text()
                },
                job_ids: (0..if g.rng.percent(5) {
                    1200
                } else {
                    g.rng.below(5)
                })
                    .map(|_| g.job_id())
                    .collect(),
                states: g.states(),
                // Every finished job is a full scan: now and then.
                all: g.rng.percent(5),
                targets: if rpc == "ListJobs" {
                    Vec::new()
                } else {
                    g.targets()
                },
                // History by end time, any bounds (negative, reversed, far future).
                since_ms: if g.rng.percent(20) { g.time() } else { 0 },
                until_ms: if g.rng.percent(20) { g.time() } else { 0 },
                // Pages of any size, from anywhere (0: the maximum, from the first).
                limit: if g.rng.percent(20) {
                    g.rng.below(100_000) as u32
                } else {
                    0
                },
                after_id: if g.rng.percent(20) { g.job_id() } else { 0 },
            };
            let size = request.encoded_len();
            (code(client.list_jobs(request).await.map(|_| ())), size)
        }
        "GetJob" => {
            let r = g.job_ref();
            let size = r.encoded_len();
            (code(client.get_job(r).await.map(|_| ())), size)
        }
        "Hold" | "Release" | "Requeue" => {
            let r = g.job_ref();
            let size = r.encoded_len();
            let answer = match rpc {
                "Hold" => client.hold(r).await,
                "Release" => client.release(r).await,
                _ => client.requeue(r).await,
            };
            (code(answer.map(|_| ())), size)
        }
        "UpdateJob" => {
            let request = g.update();
            let size = request.encoded_len();
            (code(client.update_job(request).await.map(|_| ())), size)
        }
        "WatchJob" => {
            let r = g.job_ref();
            let size = r.encoded_len();
            let answer = match client.watch_job(r).await {
                Ok(stream) => {
                    // The first state, then the watch is dropped (a client going away).
                    let mut stream = stream.into_inner();
                    let _ = tokio::time::timeout(Duration::from_secs(2), stream.next()).await;
                    Ok(())
                }
                Err(s) => Err(s),
            };
            (code(answer), size)
        }
        "Cancel" => {
            let request = pb::CancelRequest {
                job_ids: (0..g.rng.below(4)).map(|_| g.job_id()).collect(),
                user: match g.rng.below(4) {
                    0 => "nobody".into(),
                    1 => g.text(),
                    _ => String::new(),
                },
                targets: g.targets(),
            };
            let size = request.encoded_len();
            (code(client.cancel(request).await.map(|_| ())), size)
        }
        "ListNodes" => (
            code(client.list_nodes(pb::ListNodesRequest {}).await.map(|_| ())),
            0,
        ),
        "Drain" => {
            let request = pb::DrainRequest {
                name: g.text(),
                reason: g.text(),
            };
            let size = request.encoded_len();
            (code(client.drain(request).await.map(|_| ())), size)
        }
        "Resume" => {
            let request = pb::NodeRef { name: g.text() };
            let size = request.encoded_len();
            (code(client.resume(request).await.map(|_| ())), size)
        }
        "DrainGpu" => {
            let request = pb::DrainGpuRequest {
                node: g.text(),
                gpus: g.gpu_indices(),
                reason: g.text(),
            };
            let size = request.encoded_len();
            (code(client.drain_gpu(request).await.map(|_| ())), size)
        }
        "ResumeGpu" => {
            let request = pb::ResumeGpuRequest {
                node: g.text(),
                gpus: g.gpu_indices(),
            };
            let size = request.encoded_len();
            (code(client.resume_gpu(request).await.map(|_| ())), size)
        }
        "Audit" => {
            let request = pb::AuditRequest {
                limit: g.small_number(),
                before_id: match g.rng.below(3) {
                    0 => 0,
                    1 => g.rng.below(1_000),
                    _ => g.rng.next_u64(),
                },
            };
            (code(client.audit(request).await.map(|_| ())), 18)
        }
        "Shares" => (
            code(client.shares(pb::SharesRequest {}).await.map(|_| ())),
            0,
        ),
        "Report" | "ExportTrace" => {
            let request = pb::ReportRequest {
                from_ms: g.time(),
                to_ms: g.time(),
                by: if g.rng.percent(70) {
                    g.rng.pick(&["", "user", "tier", "account"]).to_string()
                } else {
                    g.text()
                },
            };
            let size = request.encoded_len();
            let answer = if rpc == "Report" {
                client.report(request).await.map(|_| ())
            } else {
                client.export_trace(request).await.map(|_| ())
            };
            (code(answer), size)
        }
        "ImportUsage" => {
            let n = if g.huge() { 100_000 } else { g.rng.below(10) };
            let runs = (0..n)
                .map(|_| pb::RunUsage {
                    job_id: g.job_id(),
                    account: if n > 10 { "a".into() } else { g.text() },
                    user: "nobody".into(),
                    start_ms: g.time(),
                    end_ms: g.time(),
                    gpus: g.small_number(),
                    ..Default::default()
                })
                .collect();
            let request = pb::ImportUsageRequest { runs };
            let size = request.encoded_len();
            (code(client.import_usage(request).await.map(|_| ())), size)
        }
        other => unreachable!("unknown RPC {other}"),
    }
}
