//! Traces from enqueue to handler (issue 47): a run enqueued with a W3C `traceparent` header is
//! handled by `cairn serve`'s delivery worker — a spool consumer in another process — whose
//! run span continues that trace, and the span reaches an OTLP/HTTP collector through the
//! real exporter. The collector is this test: a loopback HTTP/1.1 endpoint that records what
//! arrives at `/v1/traces` (OTLP JSON) and answers the delivery worker's posts to `/ingest`.
//! Without `[otel] endpoint` nothing is exported.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TOKEN: &str = "otel-token-4b8e1d7c2a";
const DEADLINE: Duration = Duration::from_secs(30);
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// What the loopback collector received: OTLP trace exports and delivery posts.
#[derive(Default)]
struct Collector {
    exports: Mutex<Vec<Value>>,
    deliveries: Mutex<u64>,
}

impl Collector {
    fn start() -> (Arc<Self>, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let me = Arc::new(Self::default());
        let c = me.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let c = c.clone();
                std::thread::spawn(move || c.serve(stream));
            }
        });
        (me, format!("http://{addr}"))
    }

    fn serve(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 {
                    return;
                }
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((name, value)) = h.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        len = value.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            if path == "/v1/traces" {
                let export: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                self.exports.lock().unwrap().push(export);
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}"
                );
            } else {
                *self.deliveries.lock().unwrap() += 1;
                let _ = write!(out, "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n");
            }
        }
    }

    /// Every exported span, flattened out of resource and scope spans.
    fn spans(&self) -> Vec<Value> {
        let mut all = Vec::new();
        for export in self.exports.lock().unwrap().iter() {
            for rs in export["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for span in ss["spans"].as_array().into_iter().flatten() {
                        let mut span = span.clone();
                        span["resource"] = rs["resource"].clone();
                        all.push(span);
                    }
                }
            }
        }
        all
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

/// Serves `db` with delivery to the collector and, with `export`, spans to its `/v1/traces`.
fn serve(db: &str, collector: &str, export: bool) -> common::Serving {
    let mut cmd = common::cairn(db);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--delivery-url", &format!("{collector}/ingest")])
        .args(["--delivery-poll-ms", "100"])
        .env("CAIRN_AUTH__TOKENS", TOKEN)
        .env("CAIRN_BACKFILL__ENABLED", "false");
    if export {
        cmd.env("CAIRN_OTEL__ENDPOINT", format!("{collector}/v1/traces"))
            .env("CAIRN_OTEL__SERVICE_NAME", "cairn-otel-test");
    }
    common::serve(&mut cmd, DEADLINE)
}

fn call(addr: &str, method: &str, path: &str, traceparent: Option<&str>, body: Value) -> Value {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(DEADLINE))
        .build()
        .into();
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json");
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    let mut resp = agent.run(req.body(body.to_string()).unwrap()).unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert!(status < 300, "{method} {path}: {status} {v}");
    v
}

/// Enqueues one run with `traceparent`, closes it, and waits until the delivery worker acked
/// it; returns its id.
fn deliver_one(addr: &str, traceparent: Option<&str>) -> String {
    deliver_keyed(addr, "traced", traceparent)
}

/// [`deliver_one`] under the dedup key `key`.
fn deliver_keyed(addr: &str, key: &str, traceparent: Option<&str>) -> String {
    let run = call(
        addr,
        "POST",
        "/v1/queues/telemetry/runs",
        traceparent,
        json!({"key": key, "payload": "p"}),
    );
    let id = run["run_id"].as_str().unwrap().to_owned();
    if let Some(tp) = traceparent {
        let info = call(addr, "GET", &format!("/v1/runs/{id}"), None, Value::Null);
        assert_eq!(info["traceparent"], tp, "stored with the run: {info}");
    }
    call(
        addr,
        "POST",
        &format!("/v1/runs/{id}/close"),
        None,
        Value::Null,
    );
    let deadline = Instant::now() + DEADLINE;
    loop {
        let info = call(addr, "GET", &format!("/v1/runs/{id}"), None, Value::Null);
        if info["state"] == "succeeded" {
            return id;
        }
        assert!(Instant::now() < deadline, "never delivered: {info}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the server with SIGTERM (it flushes its spans on the way out).
fn stop(mut serving: common::Serving) {
    let pid = serving.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = common::wait_until(&mut serving.child, DEADLINE).expect("the server exits");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_run_enqueued_in_a_trace_is_handled_in_a_span_of_that_trace_exported_over_otlp() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (collector, url) = Collector::start();
    let serving = serve(db.to_str().unwrap(), &url, true);
    let tp = format!("00-{TRACE}-{PARENT}-01");
    let run = deliver_one(&serving.addr, Some(&tp));
    stop(serving);

    // One span per time the worker took the run: it may take it before the close and give it
    // back (`released`), then deliver it (`succeeded`); each is in the enqueuer's trace.
    let spans = collector.spans();
    let handled: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "cairn.spool.run")
        .collect();
    assert!(!handled.is_empty(), "run spans: {spans:?}");
    for span in &handled {
        assert_eq!(
            span["traceId"].as_str().map(str::to_lowercase).as_deref(),
            Some(TRACE)
        );
        assert_eq!(
            span["parentSpanId"]
                .as_str()
                .map(str::to_lowercase)
                .as_deref(),
            Some(PARENT),
            "the enqueuer's span is the parent: {span}"
        );
        assert_eq!(
            attribute(span, "run_id").and_then(|v| v["stringValue"].as_str()),
            Some(run.as_str())
        );
    }
    let outcomes: Vec<&str> = handled
        .iter()
        .filter_map(|s| attribute(s, "outcome").and_then(|v| v["stringValue"].as_str()))
        .collect();
    assert_eq!(outcomes.last(), Some(&"succeeded"), "{outcomes:?}");
    assert!(
        outcomes[..outcomes.len() - 1]
            .iter()
            .all(|o| *o == "released"),
        "{outcomes:?}"
    );
    let span = handled[handled.len() - 1];
    let service = span["resource"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "service.name")
        .map(|a| a["value"]["stringValue"].clone());
    assert_eq!(service, Some(json!("cairn-otel-test")));
    assert!(*collector.deliveries.lock().unwrap() >= 1);
}

#[test]
fn a_run_without_a_trace_starts_its_own_and_nothing_is_exported_unless_configured() {
    let dir = tempfile::tempdir().unwrap();
    let (collector, url) = Collector::start();
    // Exporting, a run enqueued without a trace context gets a trace of its own.
    let serving = serve(dir.path().join("a.db").to_str().unwrap(), &url, true);
    deliver_one(&serving.addr, None);
    stop(serving);
    let spans = collector.spans();
    let run: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "cairn.spool.run")
        .collect();
    assert!(!run.is_empty(), "{spans:?}");
    for span in run {
        assert_ne!(
            span["traceId"].as_str().map(str::to_lowercase).as_deref(),
            Some(TRACE)
        );
        assert!(
            span["parentSpanId"].as_str().unwrap_or("").is_empty(),
            "a root span: {span}"
        );
    }

    // Not configured: the same work exports nothing.
    let (quiet, url) = Collector::start();
    let serving = serve(dir.path().join("b.db").to_str().unwrap(), &url, false);
    deliver_one(&serving.addr, Some(&format!("00-{TRACE}-{PARENT}-01")));
    stop(serving);
    assert!(quiet.exports.lock().unwrap().is_empty());
    assert!(*quiet.deliveries.lock().unwrap() >= 1);
}

/// An endpoint nobody listens on: every export fails, and the log says so — once at first
/// (then at most once a minute), not once per span, and without the endpoint's URL.
#[test]
fn an_unreachable_collector_is_reported_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (collector, url) = Collector::start();
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let endpoint = format!("http://{closed}/v1/traces");
    let mut cmd = common::cairn(dir.path().join("s.db").to_str().unwrap());
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--delivery-url", &format!("{url}/ingest")])
        .args(["--delivery-poll-ms", "100"])
        .env("CAIRN_AUTH__TOKENS", TOKEN)
        .env("CAIRN_BACKFILL__ENABLED", "false")
        .env("CAIRN_OTEL__ENDPOINT", &endpoint)
        // The SDK's batch interval (default 5 s), so the first export comes soon.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let serving = common::serve(&mut cmd, DEADLINE);
    let log = |s: &common::Serving| String::from_utf8_lossy(&s.stderr.lock().unwrap()).into_owned();
    const WARNING: &str = "span export to the [otel] endpoint failed";
    // Runs handled in spans, in several batches, until the first warning shows.
    let deadline = Instant::now() + DEADLINE;
    let mut runs = 0;
    while !log(&serving).contains(WARNING) {
        assert!(
            Instant::now() < deadline,
            "no warning about failed exports within {DEADLINE:?}: {}",
            log(&serving)
        );
        if runs < 3 {
            deliver_keyed(&serving.addr, &format!("early-{runs}"), None);
            runs += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // More spans after the first warning, whose export fails at the latest in the flush at
    // shutdown: still one warning.
    for i in 0..2 {
        deliver_keyed(&serving.addr, &format!("late-{i}"), None);
    }
    let text = log(&serving);
    stop(serving);
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains(WARNING)).collect();
    assert_eq!(warnings.len(), 1, "rate-limited: {text}");
    assert!(
        warnings[0].contains("WARN")
            && warnings[0].contains("cairn::otel")
            && warnings[0].contains("failed_exports=1")
            && warnings[0].contains("network error"),
        "{}",
        warnings[0]
    );
    assert!(!text.contains(&closed.to_string()), "no URL logged: {text}");
    assert!(collector.exports.lock().unwrap().is_empty());
}

#[test]
fn a_malformed_traceparent_is_refused_and_nothing_is_enqueued() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (_collector, url) = Collector::start();
    let serving = serve(db.to_str().unwrap(), &url, false);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    for bad in [
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ] {
        let mut resp = agent
            .post(format!("http://{}/v1/queues/q/runs", serving.addr))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("traceparent", bad)
            .content_type("application/json")
            .send(json!({"key": bad, "payload": "p"}).to_string())
            .unwrap();
        let body: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(
            (resp.status().as_u16(), &body["error"]["code"]),
            (400, &json!("invalid_input")),
            "{bad}: {body}"
        );
    }
    let listed = common::ok(
        common::cairn(db.to_str().unwrap())
            .args(["runs"])
            .output()
            .unwrap(),
    );
    assert_eq!(listed, "", "nothing was enqueued");
    stop(serving);
}

/// Posts `body` to `path` with each of `traceparents` as a `traceparent` header of its own;
/// answers the status and the JSON body.
fn post_traced(addr: &str, path: &str, traceparents: &[&str], body: &Value) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(DEADLINE))
        .build()
        .into();
    let mut req = ureq::http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json");
    for tp in traceparents {
        req = req.header("traceparent", *tp);
    }
    let mut resp = agent.run(req.body(body.to_string()).unwrap()).unwrap();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (
        resp.status().as_u16(),
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// A request body for a run keyed `key`.
type Body = fn(&str) -> Value;

#[test]
fn batch_routes_check_and_store_the_traceparent_header_and_one_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (_collector, url) = Collector::start();
    let serving = serve(db.to_str().unwrap(), &url, false);
    let addr = serving.addr.to_string();
    let good = format!("00-{TRACE}-{PARENT}-01");
    let other = format!("00-{TRACE}-{}-01", "1".repeat(16));
    let routes: [(&str, Body); 3] = [
        (
            "/v1/queues/q/runs/batch",
            |key| json!({"items": [{"key": key, "payload": "p"}, {"key": format!("{key}-2"), "payload": "p"}]}),
        ),
        (
            "/v1/batch",
            |key| json!({"ops": [{"op": "enqueue", "queue": "q", "key": key, "payload": "p"}]}),
        ),
        (
            "/v1/queues/q/runs",
            |key| json!({"key": key, "payload": "p"}),
        ),
    ];
    // A header that does not read, or two of them (even two good ones): refused, nothing stored.
    for (path, body) in &routes {
        for bad in [vec!["garbage"], vec![good.as_str(), other.as_str()]] {
            let (status, answer) = post_traced(&addr, path, &bad, &body("refused"));
            assert_eq!(
                (status, &answer["error"]["code"]),
                (400, &json!("invalid_input")),
                "{path} {bad:?}: {answer}"
            );
        }
    }
    let listed = common::ok(
        common::cairn(db.to_str().unwrap())
            .args(["runs"])
            .output()
            .unwrap(),
    );
    assert_eq!(listed, "", "nothing was enqueued");
    // One good header: stored on every run the batch enqueued.
    for (i, (path, body)) in routes.iter().take(2).enumerate() {
        let (status, answer) = post_traced(&addr, path, &[&good], &body(&format!("k{i}")));
        assert_eq!(status, 200, "{path}: {answer}");
        let results = answer["results"].as_array().unwrap();
        assert!(!results.is_empty(), "{answer}");
        for r in results {
            let run = r["run_id"].as_str().unwrap();
            let info = call(&addr, "GET", &format!("/v1/runs/{run}"), None, Value::Null);
            assert_eq!(info["traceparent"], json!(good), "{path}: {info}");
        }
    }
    stop(serving);
}
