//! A job's detail as `GetJob` answers it (the wire form, times in milliseconds), and the runs
//! its history records.

use std::path::Path;

/// `GetJob` of job `id` over the client socket `socket`.
pub fn job_detail(socket: &Path, id: u64) -> ysched_proto::JobDetail {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = ysub::client::connect(socket).await.unwrap();
        client
            .get_job(ysched_proto::JobRef {
                job_id: id,
                target: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
    })
}

/// The runs a job's history records, as reports charge them: each from `scheduled` to the
/// `exited` that follows (milliseconds).
pub fn runs_in_history(detail: &ysched_proto::JobDetail) -> Vec<(i64, i64)> {
    let mut runs = Vec::new();
    let mut start = None;
    for e in &detail.events {
        match e.kind.as_str() {
            "scheduled" => start = Some(e.time_ms),
            "exited" => runs.push((start.take().expect("exited after scheduled"), e.time_ms)),
            _ => {}
        }
    }
    runs
}
