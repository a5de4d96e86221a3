//! End-to-end: schedd's Prometheus endpoint (`scheduler.metrics_listen`). Every scrape is
//! checked by a strict parser of the Prometheus text format (0.0.4), and the counters must
//! move as real jobs run, end and are preempted.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use ysched_tests::*;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A trainer that saves its step on SIGTERM and exits 0 (as in `preemption.rs`).
const TRAINER: &str = r#"#!/bin/sh
ck="$YS_CHECKPOINT_DIR/step"
step=0
[ -f "$ck" ] && step=$(cat "$ck")
echo "start restart=$YS_RESTART_COUNT step=$step"
trap 'echo "$step" > "$ck.tmp" && mv "$ck.tmp" "$ck"; echo "checkpointed step=$step"; exit 0' TERM
while true; do step=$((step+1)); sleep 0.05; done
"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends `request` as is and returns the whole answer (the server closes the connection).
fn http(port: u16, request: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    s.set_read_timeout(Some(SECS(10))).unwrap();
    s.write_all(request).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    String::from_utf8(answer).expect("utf-8 answer")
}

/// `GET /metrics`: checks the status and content type, parses the body strictly.
fn scrape(port: u16) -> Exposition {
    let answer = http(
        port,
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n",
    );
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    assert_eq!(length, body.len());
    Exposition::parse(body).unwrap_or_else(|e| panic!("not Prometheus text: {e}\n{body}"))
}

// ---- A strict parser of the Prometheus text exposition format, version 0.0.4 ----

#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug, Default)]
struct Exposition {
    /// Family name → (HELP, TYPE).
    families: BTreeMap<String, (String, String)>,
    samples: Vec<Sample>,
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse().map_err(|_| format!("bad value {s:?}")),
    }
}

/// `{a="x",b="y"}` (with `\\`, `\"` and `\n` escapes) from the start of `s`; returns the
/// labels and the rest.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s.strip_prefix('{').ok_or("expected {")?;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !is_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (_, '\n') => return Err("newline in label value".into()),
                (_, c) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("expected , or } after a label".into());
        }
    }
}

impl Exposition {
    fn parse(text: &str) -> Result<Exposition, String> {
        let mut e = Exposition::default();
        let mut help: BTreeMap<String, String> = BTreeMap::new();
        let mut done_families = BTreeSet::new();
        let mut current: Option<String> = None;
        let mut series = BTreeSet::new();
        if !text.ends_with('\n') {
            return Err("no final newline".into());
        }
        for (n, line) in text.lines().enumerate() {
            let err = |m: String| format!("line {}: {m}: {line:?}", n + 1);
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, doc) = rest.split_once(' ').unwrap_or((rest, ""));
                if !is_metric_name(name) || help.contains_key(name) {
                    return Err(err("bad or repeated HELP".into()));
                }
                help.insert(name.to_string(), doc.to_string());
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').ok_or_else(|| err("TYPE".into()))?;
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                    return Err(err(format!("bad type {kind}")));
                }
                if e.families.contains_key(name) {
                    return Err(err("second TYPE".into()));
                }
                let doc = help
                    .get(name)
                    .ok_or_else(|| err("TYPE without HELP".into()))?;
                e.families
                    .insert(name.to_string(), (doc.clone(), kind.to_string()));
                if let Some(prev) = current.replace(name.to_string()) {
                    done_families.insert(prev);
                }
                continue;
            }
            if line.starts_with('#') {
                continue; // another comment
            }
            let name_end = line
                .find(['{', ' '])
                .ok_or_else(|| err("no value".into()))?;
            let name = &line[..name_end];
            if !is_metric_name(name) {
                return Err(err("bad metric name".into()));
            }
            let (labels, rest) = if line[name_end..].starts_with('{') {
                parse_labels(&line[name_end..]).map_err(err)?
            } else {
                (BTreeMap::new(), &line[name_end..])
            };
            let mut fields = rest
                .strip_prefix(' ')
                .ok_or_else(|| err("no space before the value".into()))?
                .split(' ');
            let value = parse_value(fields.next().unwrap_or_default()).map_err(err)?;
            if let Some(ts) = fields.next() {
                ts.parse::<i64>().map_err(|_| err("bad timestamp".into()))?;
            }
            if fields.next().is_some() {
                return Err(err("trailing fields".into()));
            }
            // The family: the name itself, or a histogram's name before its suffix.
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| e.families.get(*f).is_some_and(|(_, k)| k == "histogram"))
                })
                .unwrap_or(name);
            if !e.families.contains_key(family) {
                return Err(err(format!("sample of {family} without TYPE")));
            }
            if current.as_deref() != Some(family) || done_families.contains(family) {
                return Err(err(format!("{family}'s samples are not together")));
            }
            if name.ends_with("_bucket") && family != name && !labels.contains_key("le") {
                return Err(err("bucket without le".into()));
            }
            if !series.insert(format!("{name}{labels:?}")) {
                return Err(err("repeated series".into()));
            }
            e.samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
        e.check_histograms()?;
        Ok(e)
    }

    /// Buckets never decrease with `le`, and the `+Inf` bucket equals `_count`.
    fn check_histograms(&self) -> Result<(), String> {
        for (family, (_, kind)) in &self.families {
            if kind != "histogram" {
                continue;
            }
            let bucket = format!("{family}_bucket");
            let mut by_series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            for s in self.samples.iter().filter(|s| s.name == bucket) {
                let mut key = s.labels.clone();
                let le = parse_value(&key.remove("le").unwrap())?;
                by_series
                    .entry(format!("{key:?}"))
                    .or_default()
                    .push((le, s.value));
            }
            for (key, mut buckets) in by_series {
                buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
                if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
                    return Err(format!("{family}{key}: buckets decrease"));
                }
                let last = buckets.last().unwrap();
                let count = self
                    .samples
                    .iter()
                    .find(|s| {
                        s.name == format!("{family}_count") && format!("{:?}", s.labels) == key
                    })
                    .ok_or(format!("{family}{key}: no _count"))?;
                if last.0 != f64::INFINITY || last.1 != count.value {
                    return Err(format!("{family}{key}: +Inf bucket is not _count"));
                }
            }
        }
        Ok(())
    }

    /// The value of `name` with exactly these labels (0 when absent).
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
            .unwrap_or(0.0)
    }

    fn kind(&self, family: &str) -> &str {
        self.families
            .get(family)
            .map(|(_, k)| k.as_str())
            .unwrap_or_else(|| panic!("no family {family}"))
    }
}

#[test]
fn the_strict_parser_refuses_what_prometheus_would() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"\\n\\\\\"} 1\n";
    let e = Exposition::parse(ok).unwrap();
    assert_eq!(e.get("a_total", &[("x", "q\"\n\\")]), 1.0);
    for bad in [
        "a 1\n",                                                                // no TYPE
        "# TYPE a gauge\na 1\n",                                                // no HELP
        "# HELP a A.\n# TYPE a gauge\na{x=\"1} 1\n",                            // unterminated
        "# HELP a A.\n# TYPE a gauge\na{x=\"\\t\"} 1\n",                        // bad escape
        "# HELP a A.\n# TYPE a gauge\na{1x=\"1\"} 1\n",                         // bad label name
        "# HELP a A.\n# TYPE a gauge\na 1 2 3\n",                               // trailing
        "# HELP a A.\n# TYPE a gauge\na one\n",                                 // bad value
        "# HELP a A.\n# TYPE a gauge\na 1\na 2\n",                              // repeated series
        "# HELP a A.\n# TYPE a gauge\na 1",                                     // no final newline
        "# HELP a A.\n# TYPE a wat\na 1\n",                                     // bad type
        "# HELP a A.\n# TYPE a gauge\n# HELP b B.\n# TYPE b gauge\nb 1\na 1\n", // split
    ] {
        assert!(Exposition::parse(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn metrics_parse_and_move_as_jobs_run_end_and_are_preempted() {
    let port = free_port();
    let c = TestCluster::start_with(
        vec![FakeNode::uniform("n1", 8, A100)],
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
        "",
    );
    let m = scrape(port);
    for (family, kind) in [
        ("ysched_jobs", "gauge"),
        ("ysched_jobs_submitted_total", "counter"),
        ("ysched_jobs_started_total", "counter"),
        ("ysched_jobs_ended_total", "counter"),
        ("ysched_queue_wait_seconds", "histogram"),
        ("ysched_preemptions_total", "counter"),
        ("ysched_preempted_runs_ended_total", "counter"),
        ("ysched_preemption_checkpoint_saves_total", "counter"),
        ("ysched_scheduling_pass_duration_seconds", "histogram"),
        ("ysched_submit_duration_seconds", "histogram"),
        ("ysched_gpus", "gauge"),
        ("ysched_gpus_allocated", "gauge"),
        ("ysched_gpus_draining", "gauge"),
        ("ysched_gpus_out_of_service", "gauge"),
        ("ysched_gpu_failures_total", "counter"),
        ("ysched_node_up", "gauge"),
        ("ysched_agent_sessions", "gauge"),
    ] {
        assert_eq!(m.kind(family), kind, "{family}");
    }
    let n1 = [("node", "n1"), ("model", A100)];
    assert_eq!(m.get("ysched_gpus", &n1), 8.0);
    assert_eq!(m.get("ysched_gpus_allocated", &n1), 0.0);
    assert_eq!(m.get("ysched_gpus_out_of_service", &n1), 0.0);
    assert_eq!(m.get("ysched_gpu_failures_total", &[("node", "n1")]), 0.0);
    assert_eq!(m.get("ysched_node_up", &[("node", "n1")]), 1.0);
    assert_eq!(m.get("ysched_agent_sessions", &[("kind", "compute")]), 1.0);
    assert!(m.get("ysched_scheduling_pass_duration_seconds_count", &[]) >= 1.0);

    // A job runs to completion: submitted, started (its wait observed) and ended.
    let id = c.submit(&["-p", "medium", "-G", "1", "--wrap", "true"]);
    c.wait_state(id, "COMPLETED", SECS(20));
    let medium = [("tier", "medium")];
    let m = scrape(port);
    assert_eq!(m.get("ysched_jobs_submitted_total", &medium), 1.0);
    assert_eq!(m.get("ysched_jobs_started_total", &medium), 1.0);
    assert_eq!(m.get("ysched_queue_wait_seconds_count", &medium), 1.0);
    assert_eq!(
        m.get(
            "ysched_jobs_ended_total",
            &[("tier", "medium"), ("state", "COMPLETED")]
        ),
        1.0
    );
    assert_eq!(m.get("ysched_submit_duration_seconds_count", &[]), 1.0);
    assert_eq!(
        m.get("ysched_jobs", &[("tier", "medium"), ("state", "PENDING")]),
        0.0
    );

    // Two low trainers fill the node; a critical job evicts one, which saves a checkpoint,
    // is requeued and starts again once the critical job is done.
    let trainer = c.script("trainer.sh", TRAINER);
    let trainers: Vec<u64> = (0..2)
        .map(|_| {
            c.submit(&[
                "-p",
                "low",
                "-G",
                "4",
                "--grace",
                "10",
                trainer.to_str().unwrap(),
            ])
        })
        .collect();
    for id in &trainers {
        c.wait_state(*id, "RUNNING", SECS(15));
        let out = c.path(&format!("ysched-{id}.out"));
        wait_until(SECS(10), "trainer started", || {
            std::fs::read_to_string(&out).is_ok_and(|s| s.contains("start"))
        });
    }
    let m = scrape(port);
    assert_eq!(m.get("ysched_gpus_allocated", &n1), 8.0);
    assert_eq!(
        m.get("ysched_jobs", &[("tier", "low"), ("state", "RUNNING")]),
        2.0
    );
    let critical = c.submit(&["-p", "critical", "-G", "4", "--wrap", "sleep 1"]);
    c.wait_state(critical, "COMPLETED", SECS(30));
    let victim = *trainers
        .iter()
        .find(|id| c.job(**id)["restart_count"] == 1)
        .expect("one trainer was evicted");
    c.wait_state(victim, "RUNNING", SECS(20));

    let low = [("tier", "low")];
    let m = scrape(port);
    assert_eq!(m.get("ysched_preemptions_total", &low), 1.0);
    assert_eq!(m.get("ysched_preempted_runs_ended_total", &low), 1.0);
    assert_eq!(m.get("ysched_preemption_checkpoint_saves_total", &low), 1.0);
    assert_eq!(
        m.get("ysched_preemptions_total", &[("tier", "medium")]),
        0.0
    );
    // Two first starts and the victim's restart; the critical job's own start and end.
    assert_eq!(m.get("ysched_jobs_started_total", &low), 3.0);
    assert_eq!(m.get("ysched_queue_wait_seconds_count", &low), 3.0);
    assert_eq!(
        m.get("ysched_jobs_started_total", &[("tier", "critical")]),
        1.0
    );
    assert_eq!(
        m.get(
            "ysched_jobs_ended_total",
            &[("tier", "critical"), ("state", "COMPLETED")]
        ),
        1.0
    );
    assert_eq!(m.get("ysched_jobs_submitted_total", &low), 2.0);
    assert_eq!(
        m.get("ysched_jobs", &[("tier", "low"), ("state", "RUNNING")]),
        2.0
    );
    assert_eq!(m.get("ysched_gpus_allocated", &n1), 8.0);

    // A drain shows in the draining gauge.
    let out = c.run("yctl", &["drain", "n1", "--reason", "metrics test"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(scrape(port).get("ysched_gpus_draining", &n1), 8.0);

    // The endpoint serves nothing else, and survives garbage.
    let a = http(port, b"GET / HTTP/1.1\r\n\r\n");
    assert!(a.starts_with("HTTP/1.1 404 "), "{a}");
    let a = http(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(a.starts_with("HTTP/1.1 405 "), "{a}");
    let a = http(
        port,
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n",
    );
    assert!(a.starts_with("HTTP/1.1 400 "), "{a}");
    let a = http(port, &[b'x'; 20_000]);
    assert!(a.starts_with("HTTP/1.1 431 "), "{a}");
    // OpenMetrics when asked for, with its EOF marker.
    let a = http(
        port,
        b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n",
    );
    assert!(
        a.contains("Content-Type: application/openmetrics-text"),
        "{a}"
    );
    assert!(a.ends_with("# EOF\n"), "{a}");
    scrape(port);
}

#[test]
fn a_metrics_address_that_cannot_be_bound_stops_schedd_with_a_clear_error() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let conf = dir.path().join("ysched.toml");
    std::fs::write(
        &conf,
        format!(
            "[scheduler]\nmetrics_listen = \"{addr}\"\nlisten = \"127.0.0.1:{}\"\n\
             socket = \"{d}/schedd.sock\"\nstate_dir = \"{d}/state\"\n\
             cluster_key_file = \"{d}/cluster.key\"\n",
            free_port()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(bin_dir().join("schedd"))
        .env("YSCHED_CONF", &conf)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "cannot listen on {addr} for metrics (scheduler.metrics_listen)"
        )),
        "{err}"
    );
    drop(held);
}
