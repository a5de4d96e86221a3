//! End-to-end history: finished jobs found by their end (`yq --since/--until`, `-A`, sacct's
//! window), and retention: with a short `scheduler.keep_finished`, finished jobs leave the
//! history (records, events, scripts) while their usage records stay for reports, an array
//! with tasks still queued keeps its ended tasks, and nothing expired comes back after a
//! restart of schedd.

use serde_json::Value;
use std::time::{Duration, Instant};
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

fn yq_json(c: &TestCluster, args: &[&str]) -> Vec<Value> {
    let out = c.run("yq", &[&["--json"], args].concat());
    assert!(out.status.success(), "yq {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("yq json")
}

fn ids(jobs: &[Value]) -> Vec<u64> {
    let mut ids: Vec<u64> = jobs.iter().map(|j| j["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn history_is_found_by_end_and_leaves_after_keep_finished() {
    let mut c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 2, A100)],
        "keep_finished = \"4s\"\nkeep_usage = \"1h\"\n",
        "",
    );
    let done: Vec<u64> = (0..3)
        .map(|_| c.submit(&["-G", "1", "-A", "vision", "--wrap", "true"]))
        .collect();
    for id in &done {
        c.wait_state(*id, "COMPLETED", SECS(30));
    }
    // An array with a task that ran and ended, and tasks still queued (held).
    let array = c.submit(&["-G", "1", "--array", "0-2", "-H", "--wrap", "true"]);
    let out = c.run("yctl", &["release", &format!("{array}_0")]);
    assert!(out.status.success(), "release: {}", stderr(&out));
    c.wait_state(array, "COMPLETED", SECS(30));
    let ended_at = Instant::now();

    // Found by their end: within the last hour, yes; submitted before 2000, none; by account.
    assert_eq!(
        ids(&yq_json(&c, &["--since", "1h", "-t", "COMPLETED"])),
        [done.clone(), vec![array]].concat()
    );
    assert!(yq_json(&c, &["--since", "1h", "--until", "2000-01-01"]).is_empty());
    assert_eq!(ids(&yq_json(&c, &["--since", "1h", "-A", "vision"])), done);
    let future = yq_json(&c, &["--since", "2100-01-01"]);
    assert_eq!(
        ids(&future),
        [array + 1, array + 2],
        "only the active tasks"
    );
    let bad = c.run("yq", &["--since", "last tuesday"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("invalid --since"), "{}", stderr(&bad));

    // Past keep_finished (4 s; the upkeep looks every 2 s): gone from every listing and
    // lookup, while the report still counts their runs.
    let gone = |c: &TestCluster| {
        let all = ids(&c.jobs());
        done.iter().all(|id| !all.contains(id))
    };
    let start = Instant::now();
    while !gone(&c) {
        assert!(
            start.elapsed() < SECS(30),
            "finished jobs still listed {:?} after keep_finished:\n{}",
            c.jobs(),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(ended_at.elapsed() >= SECS(4), "expired early");
    let out = c.run("yq", &["-j", &done[0].to_string()]);
    assert!(
        !out.status.success(),
        "a lookup of an expired job: {}",
        stdout(&out)
    );
    let report = c.run("yctl", &["report", "--since", "1h", "--json"]);
    assert!(report.status.success(), "{}", stderr(&report));
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["cluster"]["runs"].as_u64(), Some(4), "{report}");
    // The array still has queued tasks: its ended task stays (removing its record would make
    // it one of them again), and a restart changes nothing.
    assert_eq!(ids(&c.jobs()), [array, array + 1, array + 2]);
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    assert_eq!(ids(&c.jobs()), [array, array + 1, array + 2]);
    assert_eq!(c.job(array)["state"], "COMPLETED");

    // Its queued tasks cancelled, the whole array leaves with them.
    let out = c.run("ycancel", &[&array.to_string()]);
    assert!(out.status.success(), "ycancel: {}", stderr(&out));
    let start = Instant::now();
    while !c.jobs().is_empty() {
        assert!(
            start.elapsed() < SECS(30),
            "the array still listed {:?}:\n{}",
            c.jobs(),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A restart brings back no expired task as queued. (A kill -9 may undo a removal not yet
    // flushed: such a job comes back ended, and leaves again.)
    c.stop_schedd(nix::sys::signal::Signal::SIGKILL);
    c.start_schedd();
    let start = Instant::now();
    loop {
        let jobs = c.jobs();
        if jobs.is_empty() {
            break;
        }
        for job in &jobs {
            assert!(
                ["COMPLETED", "CANCELLED"].contains(&job["state"].as_str().unwrap_or_default()),
                "an expired job came back as {job}"
            );
        }
        assert!(start.elapsed() < SECS(30), "{jobs:?} came back for good");
        std::thread::sleep(Duration::from_millis(200));
    }
    for id in [done[0], array, array + 2] {
        let out = c.run("yq", &["-j", &id.to_string()]);
        assert!(
            !out.status.success(),
            "job {id} after expiry: {}",
            stdout(&out)
        );
    }
    let log = std::fs::read_to_string(c.dir.path().join("schedd.log")).unwrap();
    assert!(log.contains("history: removed"), "{log}");
}

/// Every job a `ListJobs` request selects, `limit` a page, following `next_after_id`; `between`
/// runs after each page.
fn pages(
    c: &TestCluster,
    request: ysched_proto::ListJobsRequest,
    mut between: impl FnMut(usize),
) -> (Vec<u64>, usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = ysub::client::connect(&c.socket()).await.unwrap();
        let mut listed = Vec::new();
        let mut request = request;
        for page in 1.. {
            let reply = client
                .list_jobs(request.clone())
                .await
                .expect("ListJobs")
                .into_inner();
            assert!(reply.jobs.len() <= request.limit as usize, "page {page}");
            listed.extend(reply.jobs.iter().map(|j| j.id));
            if reply.next_after_id == 0 {
                return (listed, page);
            }
            request.after_id = reply.next_after_id;
            between(page);
        }
        unreachable!()
    })
}

#[test]
fn a_long_listing_comes_in_pages_each_job_once_while_jobs_end_between_them() {
    let c = TestCluster::start(vec![FakeNode::uniform("n1", 2, A100)]);
    // 30 held tasks; 10 of them cancelled one by one (records of their own), the others
    // queued: some end while the listing is paged through.
    let array = c.submit(&["-G", "1", "--array", "0-29", "-H", "--wrap", "true"]);
    let every: Vec<u64> = (array..array + 30).collect();
    for id in &every[..10] {
        let out = c.run("ycancel", &[&format!("{array}_{}", id - array)]);
        assert!(out.status.success(), "ycancel: {}", stderr(&out));
    }
    let request = ysched_proto::ListJobsRequest {
        all: true,
        limit: 7,
        ..Default::default()
    };
    // After page 1 (up to the 7th) one ahead of the cut, after page 2 one behind it, ...
    let mut ending = [every[11], every[12], every[25], every[29]].into_iter();
    let (listed, n) = pages(&c, request.clone(), |_| {
        if let Some(id) = ending.next() {
            let out = c.run("ycancel", &[&format!("{array}_{}", id - array)]);
            assert!(out.status.success(), "ycancel: {}", stderr(&out));
        }
    });
    assert_eq!(listed, every, "each job once, in id order");
    assert!(n >= 5, "{n} pages");
    // By end time: the ended ones, from the history's index, a page at a time too.
    let window = ysched_proto::ListJobsRequest {
        since_ms: ysched_common::time::now_ms() - 3_600_000,
        states: vec!["CANCELLED".into()],
        limit: 4,
        ..Default::default()
    };
    let (ended, n) = pages(&c, window, |_| {});
    let mut expected: Vec<u64> = every[..10].to_vec();
    expected.extend([every[11], every[12], every[25], every[29]]);
    assert_eq!(ended, expected);
    assert_eq!(n, 4);
    // yq follows the pages itself: the same jobs as one listing.
    assert_eq!(ids(&yq_json(&c, &["--all"])), every);
}
