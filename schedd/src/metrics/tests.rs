//! The registry's encoding, the transitions the counters see, and the census.

use super::*;
use crate::core::testkit::{JobBuilder, NodeBuilder, A100, H100, T0};
use crate::state::agent_events::Limits;
use crate::state::lifecycle::PartEnd;
use crate::state::Records;
use ysched_common::JobId;

const TIERS: [&str; 4] = ["critical", "high", "medium", "low"];

fn metrics() -> Metrics {
    Metrics::new(TIERS)
}

/// The value of the sample `name{labels}` (labels exactly as encoded), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (s, v) = l.rsplit_once(' ')?;
        (s == series).then(|| v.parse().unwrap())
    })
}

/// Checks the Prometheus text format strictly enough for these tests: every line is a
/// `# HELP`/`# TYPE` comment or `name{labels} value`, every sample belongs to a family whose
/// HELP and TYPE came before it, and names are valid.
fn check_text(text: &str) {
    let valid_name = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut helped = BTreeSet::new();
    let mut typed = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(valid_name(name), "{line}");
            assert!(helped.insert(name.to_string()), "second HELP: {line}");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(helped.contains(name), "TYPE before HELP: {line}");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed.insert(name.to_string(), kind.to_string());
        } else {
            let name_end = line.find(['{', ' ']).unwrap();
            let name = &line[..name_end];
            assert!(valid_name(name), "{line}");
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| typed.get(*f).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(name);
            assert!(typed.contains_key(family), "sample without TYPE: {line}");
            let value = line.rsplit_once(' ').unwrap().1;
            assert!(value.parse::<f64>().is_ok() || value == "+Inf", "{line}");
        }
    }
}

#[test]
fn every_family_is_encoded_with_help_and_type() {
    let m = metrics();
    let nodes: BTreeMap<_, _> = [NodeBuilder::dgx("n1", 8, A100).build()]
        .into_iter()
        .map(|n| (n.name.clone(), n))
        .collect();
    let text = m.render(
        &Census::count(&ActiveJobs::default(), &nodes, []),
        Format::Text,
    );
    check_text(&text);
    for family in [
        "ysched_jobs gauge",
        "ysched_jobs_submitted_total counter",
        "ysched_jobs_started_total counter",
        "ysched_jobs_ended_total counter",
        "ysched_queue_wait_seconds histogram",
        "ysched_preemptions_total counter",
        "ysched_preempted_runs_ended_total counter",
        "ysched_preemption_checkpoint_saves_total counter",
        "ysched_scheduling_pass_duration_seconds histogram",
        "ysched_submit_duration_seconds histogram",
        "ysched_gpus gauge",
        "ysched_gpus_allocated gauge",
        "ysched_gpus_draining gauge",
        "ysched_gpus_out_of_service gauge",
        "ysched_gpu_failures_total counter",
        "ysched_node_up gauge",
        "ysched_agent_sessions gauge",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family}\n")),
            "{family}:\n{text}"
        );
    }
    // Per-tier series exist at zero from the start.
    assert_eq!(
        sample(&text, "ysched_jobs_submitted_total{tier=\"high\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "ysched_jobs{tier=\"low\",state=\"PENDING\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "ysched_jobs_ended_total{tier=\"medium\",state=\"COMPLETED\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "ysched_queue_wait_seconds_count{tier=\"critical\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "ysched_agent_sessions{kind=\"login\"}"),
        Some(0.0)
    );
}

#[test]
fn openmetrics_ends_with_eof_and_text_does_not() {
    let m = metrics();
    let om = m.render(&Census::default(), Format::OpenMetrics);
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains("# TYPE ysched_jobs_submitted counter\n"));
    let text = m.render(&Census::default(), Format::Text);
    assert!(!text.contains("# EOF"));
    assert_eq!(Format::from_accept(None), Format::Text);
    assert_eq!(
        Format::from_accept(Some(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        )),
        Format::OpenMetrics
    );
    assert!(Format::Text
        .content_type()
        .starts_with("text/plain; version=0.0.4"));
}

#[test]
fn submits_and_passes_fill_their_histograms() {
    let m = metrics();
    m.submitted(&JobBuilder::new(1).high().build(), Duration::from_millis(3));
    m.submitted(
        &JobBuilder::new(2).high().build(),
        Duration::from_millis(30),
    );
    m.pass(Duration::from_micros(200));
    let text = m.render(&m.census(&BTreeMap::new(), []), Format::Text);
    check_text(&text);
    assert_eq!(
        sample(&text, "ysched_jobs_submitted_total{tier=\"high\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "ysched_submit_duration_seconds_count"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "ysched_jobs{tier=\"high\",state=\"PENDING\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "ysched_submit_duration_seconds_bucket{le=\"0.005\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "ysched_scheduling_pass_duration_seconds_count"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "ysched_scheduling_pass_duration_seconds_bucket{le=\"0.00025\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn a_start_counts_once_with_its_wait_from_queued_at_or_submit() {
    let m = metrics();
    let pending = JobBuilder::new(1).high().build();
    let mut requeued = JobBuilder::new(2).low().build();
    requeued.queued_at = Some(T0 + 100_000);
    let before: BTreeMap<_, _> = [
        (pending.id, std::sync::Arc::new(pending)),
        (requeued.id, std::sync::Arc::new(requeued.clone())),
    ]
    .into();
    let started = JobBuilder::new(1)
        .high()
        .running_on("n1", &[0])
        .started(T0 + 2_500)
        .build();
    let mut started2 = requeued;
    started2.state = JobState::Running;
    started2.start_time = Some(T0 + 160_000);
    // An earlier version of job 1 in the same event does not count: the last one does.
    let stale = JobBuilder::new(1).high().build();
    m.observe_jobs(&before, &[stale, started.clone(), started2.clone()]);
    // The same versions again (already running before): no new start.
    let now_running: BTreeMap<_, _> = [(started.id, std::sync::Arc::new(started.clone()))].into();
    m.observe_jobs(&now_running, &[started]);
    let text = m.render(&Census::default(), Format::Text);
    assert_eq!(
        sample(&text, "ysched_jobs_started_total{tier=\"high\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "ysched_queue_wait_seconds_sum{tier=\"high\"}"),
        Some(2.5)
    );
    assert_eq!(
        sample(
            &text,
            "ysched_queue_wait_seconds_bucket{tier=\"high\",le=\"5\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "ysched_queue_wait_seconds_sum{tier=\"low\"}"),
        Some(60.0)
    );
}

#[test]
fn an_eviction_counts_a_preemption_and_its_end_a_saved_checkpoint_by_the_victims_tier() {
    let m = metrics();
    let running = JobBuilder::new(1).low().running_on("n1", &[0, 1]).build();
    let before: BTreeMap<_, _> = [(running.id, std::sync::Arc::new(running))].into();
    let evicted = JobBuilder::new(1)
        .low()
        .running_on("n1", &[0, 1])
        .preempted_by(9)
        .build();
    m.observe_jobs(&before, std::slice::from_ref(&evicted));
    // The same event again changes nothing (still preempting).
    let preempting: BTreeMap<_, _> = [(evicted.id, std::sync::Arc::new(evicted.clone()))].into();
    m.observe_jobs(&preempting, std::slice::from_ref(&evicted));

    // The real state machine ends the run on the agent's report: requeued, checkpoint saved.
    let rec = Records::with_jobs(vec![evicted]);
    let reports = vec![(
        "n1".to_string(),
        AgentReport::Finished(PartEnd {
            job_id: 1,
            exit_code: Some(0),
            end_time_ms: T0 + 5_000,
            checkpoint_saved: true,
            ..PartEnd::default()
        }),
    )];
    let limits = Limits {
        max_requeues: 20,
        max_launch_attempts: 3,
    };
    let fx = rec.agent_reports(&reports, limits, T0 + 6_000);
    assert_eq!(fx.jobs.last().unwrap().state, JobState::Pending);
    let saved = preempted_checkpoint_saves(rec.jobs(), &fx.jobs, &reports);
    assert_eq!(saved, vec!["low".to_string()]);
    m.observe_jobs(rec.jobs(), &fx.jobs);
    m.checkpoints_saved(&saved);

    let text = m.render(&Census::default(), Format::Text);
    check_text(&text);
    for (series, want) in [
        ("ysched_preemptions_total{tier=\"low\"}", 1.0),
        ("ysched_preempted_runs_ended_total{tier=\"low\"}", 1.0),
        (
            "ysched_preemption_checkpoint_saves_total{tier=\"low\"}",
            1.0,
        ),
        ("ysched_preemptions_total{tier=\"high\"}", 0.0),
        // Requeued, not ended.
        (
            "ysched_jobs_ended_total{tier=\"low\",state=\"PREEMPTED\"}",
            0.0,
        ),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}");
    }
}

#[test]
fn a_preempted_run_without_a_checkpoint_counts_no_save() {
    let evicted = JobBuilder::new(1)
        .low()
        .running_on("n1", &[0])
        .preempted_by(9)
        .build();
    let rec = Records::with_jobs(vec![evicted]);
    let reports = vec![(
        "n1".to_string(),
        AgentReport::Finished(PartEnd {
            job_id: 1,
            signal: Some(9),
            killed: true,
            ..PartEnd::default()
        }),
    )];
    let limits = Limits {
        max_requeues: 20,
        max_launch_attempts: 3,
    };
    let fx = rec.agent_reports(&reports, limits, T0 + 6_000);
    assert!(preempted_checkpoint_saves(rec.jobs(), &fx.jobs, &reports).is_empty());
}

#[test]
fn an_end_counts_once_by_tier_and_final_state() {
    let m = metrics();
    let running = JobBuilder::new(1).medium().running_on("n1", &[0]).build();
    let before: BTreeMap<_, _> = [(running.id, std::sync::Arc::new(running.clone()))].into();
    let mut done = running;
    done.state = JobState::Completed;
    done.alloc.clear();
    m.observe_jobs(&before, std::slice::from_ref(&done));
    let text = m.render(&Census::default(), Format::Text);
    assert_eq!(
        sample(
            &text,
            "ysched_jobs_ended_total{tier=\"medium\",state=\"COMPLETED\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn the_census_counts_jobs_by_tier_and_state_and_gpus_by_node_and_model() {
    let jobs: BTreeMap<_, _> = [
        JobBuilder::new(1).high().build(),
        JobBuilder::new(2).high().build(),
        JobBuilder::new(3).low().held().build(),
        JobBuilder::new(4).low().running_on("n1", &[0, 1]).build(),
        JobBuilder::new(5)
            .low()
            .running_on("n2", &[3])
            .preempted_by(1)
            .build(),
    ]
    .into_iter()
    .map(|j| (j.id, j))
    .collect();
    let mut mixed = NodeBuilder::dgx("n2", 4, A100)
        .gpu_out_of_service(1, "XID 79: GPU has fallen off the bus")
        .build();
    let mut gpus = (*mixed.gpus).clone();
    gpus[3].model = H100.to_string();
    mixed.gpus = std::sync::Arc::new(gpus);
    let nodes: BTreeMap<_, _> = [
        NodeBuilder::dgx("n1", 8, A100).build(),
        mixed,
        NodeBuilder::dgx("n3", 2, A100)
            .drained("maintenance")
            .disconnected()
            .build(),
    ]
    .into_iter()
    .map(|n| (n.name.clone(), n))
    .collect();
    let census = Census::count(
        &ActiveJobs::count(jobs.values()),
        &nodes,
        [false, false, true],
    );
    assert_eq!(
        census.jobs,
        [
            (("high".to_string(), JobState::Pending), 2),
            (("low".to_string(), JobState::Held), 1),
            (("low".to_string(), JobState::Running), 1),
            (("low".to_string(), JobState::Preempting), 1),
        ]
        .into()
    );
    let gpu = |node: &str, model: &str, total, allocated, draining, out_of_service| GpuCount {
        node: node.into(),
        model: model.into(),
        total,
        allocated,
        draining,
        out_of_service,
    };
    assert_eq!(
        census.gpus,
        vec![
            gpu("n1", A100, 8, 2, 0, 0),
            gpu("n2", A100, 3, 0, 0, 1),
            gpu("n2", H100, 1, 1, 0, 0),
            gpu("n3", A100, 2, 0, 2, 0),
        ]
    );
    assert_eq!(
        census.nodes_up,
        vec![
            ("n1".to_string(), true),
            ("n2".to_string(), true),
            ("n3".to_string(), false)
        ]
    );
    assert_eq!((census.compute_sessions, census.login_sessions), (2, 1));

    let m = metrics();
    let text = m.render(&census, Format::Text);
    check_text(&text);
    for (series, want) in [
        ("ysched_jobs{tier=\"high\",state=\"PENDING\"}", 2.0),
        ("ysched_jobs{tier=\"high\",state=\"RUNNING\"}", 0.0),
        ("ysched_jobs{tier=\"low\",state=\"PREEMPTING\"}", 1.0),
        (
            "ysched_gpus{node=\"n2\",model=\"NVIDIA H100 80GB HBM3\"}",
            1.0,
        ),
        (
            "ysched_gpus_allocated{node=\"n1\",model=\"NVIDIA A100-SXM4-80GB\"}",
            2.0,
        ),
        (
            "ysched_gpus_draining{node=\"n3\",model=\"NVIDIA A100-SXM4-80GB\"}",
            2.0,
        ),
        (
            "ysched_gpus_out_of_service{node=\"n2\",model=\"NVIDIA A100-SXM4-80GB\"}",
            1.0,
        ),
        (
            "ysched_gpus_out_of_service{node=\"n1\",model=\"NVIDIA A100-SXM4-80GB\"}",
            0.0,
        ),
        ("ysched_gpu_failures_total{node=\"n3\"}", 0.0),
        ("ysched_node_up{node=\"n3\"}", 0.0),
        ("ysched_agent_sessions{kind=\"compute\"}", 2.0),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}\n{text}");
    }
    // A node that is gone disappears from the next scrape.
    let text = m.render(&Census::default(), Format::Text);
    assert_eq!(sample(&text, "ysched_node_up{node=\"n3\"}"), None);
}

#[test]
fn gpu_failures_count_per_node() {
    let m = metrics();
    m.gpus_failed("n1", 2);
    m.gpus_failed("n1", 0);
    m.gpus_failed("n2", 1);
    let text = m.render(&Census::default(), Format::Text);
    check_text(&text);
    assert_eq!(
        sample(&text, "ysched_gpu_failures_total{node=\"n1\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "ysched_gpu_failures_total{node=\"n2\"}"),
        Some(1.0)
    );
}

#[test]
fn label_values_are_escaped() {
    let nodes: BTreeMap<_, _> = [NodeBuilder::dgx("n1", 1, "odd \"model\"\\x\ny").build()]
        .into_iter()
        .map(|n| (n.name.clone(), n))
        .collect();
    let census = Census::count(&ActiveJobs::default(), &nodes, []);
    let text = metrics().render(&census, Format::Text);
    check_text(&text);
    assert!(
        text.contains(r#"ysched_gpus{node="n1",model="odd \"model\"\\x\ny"} 1"#),
        "{text}"
    );
}

/// The Grafana dashboard shipped in `docs/` is valid JSON, takes its data source as the
/// `DS_PROMETHEUS` input, and asks only for series this registry exports.
#[test]
fn the_grafana_dashboard_uses_only_metrics_that_exist() {
    let text = include_str!("../../../docs/grafana/ysched-dashboard.json");
    let dash: serde_json::Value = serde_json::from_str(text).expect("dashboard JSON");
    assert_eq!(dash["__inputs"][0]["name"], "DS_PROMETHEUS");
    let nodes: BTreeMap<_, _> = [NodeBuilder::dgx("n1", 8, A100).build()]
        .into_iter()
        .map(|n| (n.name.clone(), n))
        .collect();
    let census = Census::count(&ActiveJobs::default(), &nodes, [false]);
    let exported = metrics().render(&census, Format::Text);
    let mut exprs = 0;
    for panel in dash["panels"].as_array().unwrap() {
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}", "{panel}");
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            exprs += 1;
            for (i, _) in expr.match_indices("ysched_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    exported.lines().any(|l| !l.starts_with('#')
                        && l.starts_with(&format!("{name}{{"))
                        || l.starts_with(&format!("{name} "))),
                    "{name} (in {expr}) is not exported"
                );
            }
        }
    }
    assert!(exprs >= 20, "{exprs}");
}

#[test]
fn a_preempted_gang_ends_with_its_last_part_and_a_cancel_in_the_grace_is_no_preempted_end() {
    let limits = Limits {
        max_requeues: 20,
        max_launch_attempts: 3,
    };
    let end = |node: &str, saved| {
        (
            node.to_string(),
            AgentReport::Finished(PartEnd {
                job_id: 1,
                exit_code: Some(0),
                end_time_ms: T0 + 5_000,
                checkpoint_saved: saved,
                ..PartEnd::default()
            }),
        )
    };
    let m = metrics();
    let gang = JobBuilder::new(1)
        .low()
        .running_on("n1", &[0])
        .running_on("n2", &[0])
        .preempted_by(9)
        .build();
    let mut rec = Records::with_jobs(vec![gang]);
    // The first part's end: the run goes on.
    let first = vec![end("n1", false)];
    let fx = rec.agent_reports(&first, limits, T0 + 6_000);
    assert!(preempted_checkpoint_saves(rec.jobs(), &fx.jobs, &first).is_empty());
    m.observe_jobs(rec.jobs(), &fx.jobs);
    rec.commit(fx);
    // The last part's end decides, and saved.
    let last = vec![end("n2", true)];
    let fx = rec.agent_reports(&last, limits, T0 + 7_000);
    assert_eq!(
        preempted_checkpoint_saves(rec.jobs(), &fx.jobs, &last),
        vec!["low".to_string()]
    );
    m.observe_jobs(rec.jobs(), &fx.jobs);

    // Cancelled while preempting: the stop becomes a cancel; no preempted run ends.
    let evicted = JobBuilder::new(2)
        .medium()
        .running_on("n1", &[1])
        .preempted_by(9)
        .build();
    let mut cancelled = evicted.clone();
    cancelled.stop = Some(Box::new(StopRequest {
        reason: StopReason::Cancel { by: "alice".into() },
        at: T0,
        grace_secs: 30,
    }));
    let before: BTreeMap<_, _> = [(evicted.id, std::sync::Arc::new(evicted))].into();
    m.observe_jobs(&before, &[cancelled]);

    let text = m.render(&Census::default(), Format::Text);
    assert_eq!(
        sample(&text, "ysched_preempted_runs_ended_total{tier=\"low\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "ysched_preempted_runs_ended_total{tier=\"medium\"}"),
        Some(0.0)
    );
}

/// The job counts kept event by event equal a count from scratch after every event: starts,
/// holds and releases, a preemption, a part's end of a gang, a requeue, ends and cancels.
#[test]
fn job_counts_kept_by_events_match_a_count_from_scratch() {
    use crate::state::Effects;
    let root = crate::core::testkit::root();
    let none_finished = |_: JobId| -> crate::error::ApiResult<Option<Job>> { Ok(None) };
    let limits = Limits {
        max_requeues: 20,
        max_launch_attempts: 3,
    };
    let ended = |job: u64, node: &str, code| {
        (
            node.to_string(),
            AgentReport::Finished(PartEnd {
                job_id: job,
                exit_code: Some(code),
                end_time_ms: T0 + 5_000,
                ..PartEnd::default()
            }),
        )
    };
    let mut rec = Records::with_jobs(vec![
        JobBuilder::new(1).high().gpus(2).build(),
        JobBuilder::new(2).low().held().build(),
        JobBuilder::new(3).low().running_on("n1", &[0, 1]).build(),
        JobBuilder::new(4)
            .medium()
            .running_on("n1", &[2])
            .running_on("n2", &[2])
            .build(),
        JobBuilder::new(5).low().running_on("n2", &[5]).build(),
    ]);
    let m = metrics();
    m.recovered(rec.jobs().values().map(|j| &**j));
    let step = |rec: &mut Records, fx: Effects| {
        m.observe_jobs(rec.jobs(), &fx.jobs);
        rec.commit(fx);
        assert_eq!(
            *m.active(),
            ActiveJobs::count(rec.jobs().values().map(|j| &**j))
        );
    };
    // Job 1 starts (a placement's new version), job 2 is released.
    let mut started = Job::clone(&rec.jobs()[&JobId(1)]);
    started.state = JobState::Running;
    started.start_time = Some(T0 + 1_000);
    started.alloc = JobBuilder::new(1).running_on("n2", &[0, 1]).build().alloc;
    let mut fx = Effects::default();
    fx.put_job(started);
    step(&mut rec, fx);
    let fx = rec.hold(&root, JobId(2), false, T0 + 1_000).unwrap();
    step(&mut rec, fx);
    // Job 3 is evicted for job 1, then its end requeues it.
    let mut evicted = Job::clone(&rec.jobs()[&JobId(3)]);
    evicted.state = JobState::Preempting;
    evicted.stop = JobBuilder::new(3).preempted_by(1).build().stop;
    let mut fx = Effects::default();
    fx.put_job(evicted);
    step(&mut rec, fx);
    let fx = rec.agent_reports(&[ended(3, "n1", 0)], limits, T0 + 6_000);
    step(&mut rec, fx);
    assert_eq!(rec.jobs()[&JobId(3)].state, JobState::Pending);
    // The gang's part on n1 fails (its GPUs free at once), then its part on n2 ends.
    let fx = rec.agent_reports(&[ended(4, "n1", 1)], limits, T0 + 6_000);
    step(&mut rec, fx);
    let fx = rec.agent_reports(&[ended(4, "n2", 0)], limits, T0 + 7_000);
    step(&mut rec, fx);
    assert!(!rec.jobs().contains_key(&JobId(4)));
    // Job 5 completes; job 1 is cancelled (stopping), job 2 too (queued: at once).
    let fx = rec.agent_reports(&[ended(5, "n2", 0)], limits, T0 + 6_000);
    step(&mut rec, fx);
    let (fx, _) = rec
        .cancel(&root, &[1, 2], "", &none_finished, T0 + 8_000)
        .unwrap();
    step(&mut rec, fx);
    let fx = rec.agent_reports(&[ended(1, "n2", 143)], limits, T0 + 9_000);
    step(&mut rec, fx);

    let text = m.render(&Census::default(), Format::Text);
    for (series, want) in [
        (
            "ysched_jobs_ended_total{tier=\"medium\",state=\"FAILED\"}",
            1.0,
        ),
        (
            "ysched_jobs_ended_total{tier=\"low\",state=\"COMPLETED\"}",
            1.0,
        ),
        (
            "ysched_jobs_ended_total{tier=\"low\",state=\"CANCELLED\"}",
            1.0,
        ),
        (
            "ysched_jobs_ended_total{tier=\"high\",state=\"CANCELLED\"}",
            1.0,
        ),
        ("ysched_jobs_started_total{tier=\"high\"}", 1.0),
        ("ysched_preemptions_total{tier=\"low\"}", 1.0),
        ("ysched_preempted_runs_ended_total{tier=\"low\"}", 1.0),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}\n{text}");
    }
    // What is left: job 3, requeued and pending.
    assert_eq!(
        Census::count(&m.active(), &BTreeMap::new(), []).jobs,
        [(("low".to_string(), JobState::Pending), 1)].into()
    );
}
