//! `cairn serve`, run as an operator runs it: the real binary on a loopback port, driven over
//! HTTP. Every wait polls a condition with a deadline; nothing sleeps a fixed time.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const FULL: &str = "full-token-6f1d2c9a8b7e";
const READ: &str = "read-token-3a9e7c1f5d2b";
const FILE_TOKEN: &str = "file-token-0b8d4e2a9c61";

/// How long a server may take to start, answer or stop.
const DEADLINE: Duration = Duration::from_secs(30);

/// A temporary directory private to this test process, given to every server as `TMPDIR`:
/// doctor looks there for the additivity check's leftovers, and other processes' leftovers in
/// the machine's temporary directory are not this test's business.
fn private_tmp() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn cairn(db: &str) -> Command {
    let mut cmd = common::cairn(db);
    cmd.env("TMPDIR", private_tmp());
    cmd
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// A running `cairn serve` on `127.0.0.1:0`.
struct Server {
    child: Child,
    base: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    agent: ureq::Agent,
}

impl Server {
    /// Starts a server with the full and read-only tokens in its environment.
    fn start(db: &str, extra: &[&str]) -> Self {
        Self::start_with(
            db,
            &[
                ("CAIRN_AUTH__TOKENS", FULL),
                ("CAIRN_AUTH__READ_TOKENS", READ),
            ],
            extra,
        )
    }

    fn start_with(db: &str, env: &[(&str, &str)], extra: &[&str]) -> Self {
        let mut cmd = cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .envs(env.iter().copied());
        let common::Serving {
            child,
            stderr,
            addr,
        } = common::serve(&mut cmd, DEADLINE);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(DEADLINE))
            .build()
            .into();
        let server = Self {
            child,
            base: format!("http://{addr}"),
            stderr,
            agent,
        };
        let deadline = Instant::now() + DEADLINE;
        while server.call("GET", "/healthz", None, None).0 != 200 {
            assert!(Instant::now() < deadline, "healthz answers in time");
            std::thread::yield_now();
        }
        server
    }

    /// Sends a request; returns the status and the JSON body (`Null` when there is none).
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
    ) -> (u16, Value) {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let result = match body {
            Some(b) => self.agent.run(
                req.header("Content-Type", "application/json")
                    .body(b.to_vec())
                    .unwrap(),
            ),
            None => self.agent.run(req.body(()).unwrap()),
        };
        let mut resp = result.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, Some(FULL), None)
    }

    fn send(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        self.call(
            method,
            path,
            Some(FULL),
            Some(&serde_json::to_vec(body).unwrap()),
        )
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Sends SIGTERM and waits (bounded) for the exit; returns the status and stderr.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        terminate(&self.pid());
        let status = wait_exit(&mut self.child);
        let stderr = String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned();
        (status, stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn terminate(pid: &str) {
    let status = Command::new("kill").args(["-TERM", pid]).status().unwrap();
    assert!(status.success());
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the server exits in time");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no typed error>")
}

fn str_of<'a>(body: &'a Value, field: &str) -> &'a str {
    body[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {body}"))
}

fn sqlite_db() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("serve.db").display().to_string();
    (dir, db)
}

/// The API's whole flow against one store: epochs, enqueue dedup, a run enqueued by another
/// process, claim, heartbeat, run events, facts, ack, nack, cancel.
fn flow(db: &str) {
    let server = Server::start(db, &[]);

    // Epochs: append, heads, feed with a cursor, import.
    let (s, first) = server.send(
        "POST",
        "/v1/spaces/docs/epochs",
        &json!({"events": [{"kind": "doc.edit", "key": "k", "payload": "hello"}]}),
    );
    assert_eq!(s, 201, "{first}");
    assert_eq!(first["seq"], 1);
    let (s, second) = server.send(
        "POST",
        "/v1/spaces/docs/epochs",
        &json!({"events": [{"kind": "doc.edit", "payload_b64": "/wA="}]}),
    );
    assert_eq!(s, 201, "{second}");
    assert_eq!(second["parents"][0], first["id"]);
    let (s, heads) = server.get("/v1/spaces/docs/heads");
    assert_eq!(s, 200);
    assert_eq!(heads["heads"], json!([{"seq": 2, "id": second["id"]}]));
    let (s, page) = server.get("/v1/spaces/docs/events?limit=1");
    assert_eq!(s, 200, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 1);
    assert_eq!(page["events"][0]["payload"], "hello");
    assert_eq!(page["events"][0]["key"], "k");
    let next = str_of(&page, "next").to_owned();
    let (s, page) = server.get(&format!("/v1/spaces/docs/events?cursor={next}"));
    assert_eq!(s, 200, "{page}");
    assert_eq!(
        page["events"][0]["payload_b64"], "/wA=",
        "non-UTF-8 bytes as base64"
    );
    // Importing the epoch already present writes nothing (200); its copy claimed for another
    // space does not hash (422); a correct foreign epoch is imported (201).
    let import = |space: &str, id: &Value, parents: Value| {
        server.send(
            "POST",
            &format!("/v1/spaces/{space}/import"),
            &json!({"id": id, "parents": parents,
                    "events": [{"kind": "doc.edit", "key": "k", "payload": "hello"}]}),
        )
    };
    let (s, body) = import("docs", &first["id"], json!([]));
    assert_eq!((s, str_of(&body, "outcome")), (200, "already_present"));
    let (s, body) = import("other", &first["id"], json!([]));
    assert_eq!((s, code(&body)), (422, "hash_mismatch"), "{body}");
    let other = cairn::SpaceId::new("other").unwrap();
    let event = cairn::Event::with_key("doc.edit", "k", "hello");
    let id = cairn::epoch_id(&other, &[], &[event.id()]);
    let (s, body) = import("other", &json!(id.to_string()), json!([]));
    assert_eq!((s, str_of(&body, "outcome")), (201, "imported"), "{body}");
    let (s, body) = import("other", &json!(id.to_string()), json!([second["id"]]));
    assert_eq!(s, 422, "{body}");

    // Enqueue twice: one run id, 201 then 200.
    let enqueue = json!({"key_parts": ["gate", "refs/heads/main", "3f2a"], "payload": "{}"});
    let (s, a) = server.send("POST", "/v1/queues/gate/runs", &enqueue);
    assert_eq!((s, &a["created"]), (201, &json!(true)), "{a}");
    let (s, b) = server.send("POST", "/v1/queues/gate/runs", &enqueue);
    assert_eq!((s, &b["created"]), (200, &json!(false)), "{b}");
    assert_eq!(a["run_id"], b["run_id"]);

    // A run enqueued straight to the store by another process: visible and claimable over
    // HTTP without a restart, and the same key over HTTP finds it.
    let line = ok(cairn(db)
        .args([
            "enqueue",
            "--queue",
            "hook",
            "--key",
            "gate",
            "--key-part",
            "offline",
            "--payload",
            "from the hook",
        ])
        .output()
        .unwrap());
    let hook_id = line.split(' ').next().unwrap().to_owned();
    let (s, run) = server.get(&format!("/v1/runs/{hook_id}"));
    assert_eq!((s, str_of(&run, "state")), (200, "queued"), "{run}");
    assert_eq!(run["key_parts"], json!(["gate", "offline"]));
    let (s, same) = server.send(
        "POST",
        "/v1/queues/hook/runs",
        &json!({"key_parts": ["gate", "offline"], "payload": "ignored"}),
    );
    assert_eq!((s, str_of(&same, "run_id")), (200, hook_id.as_str()));
    let (s, claimed) = server.send(
        "POST",
        "/v1/queues/hook/claim",
        &json!({"consumer": "test/1", "lease_ms": 60000, "limit": 5}),
    );
    assert_eq!(s, 200, "{claimed}");
    let runs = claimed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{claimed}");
    assert_eq!(runs[0]["run_id"], json!(hook_id));
    assert_eq!(runs[0]["payload"], "from the hook");
    let token = str_of(&runs[0], "token").to_owned();
    let run_path = format!("/v1/runs/{hook_id}");

    let (s, hb) = server.send(
        "POST",
        &format!("{run_path}/heartbeat"),
        &json!({"token": token, "lease_ms": 60000}),
    );
    assert_eq!((s, &hb["cancel_requested"]), (200, &json!(false)), "{hb}");
    let stale = "00000000-0000-0000-0000-000000000000";
    let (s, body) = server.send("POST", &format!("{run_path}/ack"), &json!({"token": stale}));
    assert_eq!((s, code(&body)), (409, "lease_lost"), "{body}");

    // Run events: append (201), re-append (200, same seq), list after a seq.
    for (n, id) in ["e1", "e2", "e1"].iter().enumerate() {
        let (s, body) = server.send(
            "POST",
            &format!("{run_path}/events"),
            &json!({"event_id": id, "payload": format!("event {n}")}),
        );
        let expect = if n == 2 {
            (200, 1)
        } else {
            (201, n as u64 + 1)
        };
        assert_eq!((s, body["seq"].as_u64().unwrap()), expect, "{body}");
    }
    let (s, events) = server.get(&format!("{run_path}/events?after=1&limit=10"));
    assert_eq!(s, 200);
    assert_eq!(events["events"].as_array().unwrap().len(), 1, "{events}");
    assert_eq!(events["events"][0]["event_id"], "e2");

    // Facts: first writer wins.
    let fact = format!("{run_path}/facts/review");
    let (s, _) = server.send("PUT", &fact, &json!({"value": "approved"}));
    assert_eq!(s, 201);
    let (s, _) = server.send("PUT", &fact, &json!({"value": "approved"}));
    assert_eq!(s, 200);
    let (s, body) = server.send("PUT", &fact, &json!({"value": "rejected"}));
    assert_eq!((s, code(&body)), (409, "fact_conflict"));
    let (s, facts) = server.get(&format!("{run_path}/facts"));
    assert_eq!(s, 200);
    assert_eq!(
        facts["facts"],
        json!([{"name": "review", "value": "approved"}])
    );

    // Ack (idempotent), then cancel of a finished run is refused.
    for _ in 0..2 {
        let (s, body) = server.send("POST", &format!("{run_path}/ack"), &json!({"token": token}));
        assert_eq!((s, str_of(&body, "state")), (200, "succeeded"), "{body}");
    }
    let (s, body) = server.call("POST", &format!("{run_path}/cancel"), Some(FULL), None);
    assert_eq!((s, code(&body)), (409, "invalid_transition"), "{body}");

    // A retry with its own delay is due that long after the nack instead of after the
    // backoff; a delay over 24 h or negative is refused, writing nothing.
    let (s, _) = server.send(
        "POST",
        "/v1/queues/later/runs",
        &json!({"key": "later", "payload": ""}),
    );
    assert_eq!(s, 201);
    let (_, claimed) = server.send("POST", "/v1/queues/later/claim", &json!({"consumer": "w"}));
    let later = &claimed["runs"][0];
    let later_nack = format!("/v1/runs/{}/nack", str_of(later, "run_id"));
    for (body, what) in [
        (
            json!({"token": later["token"], "retry_after_ms": 86_400_001u64}),
            "a delay over 24 h",
        ),
        (
            json!({"token": later["token"], "retry_after_ms": -1}),
            "a negative delay",
        ),
    ] {
        let (s, body) = server.send("POST", &later_nack, &body);
        assert_eq!((s, code(&body)), (400, "invalid_input"), "{what}: {body}");
    }
    let (_, info) = server.get(&format!("/v1/runs/{}", str_of(later, "run_id")));
    assert_eq!(str_of(&info, "state"), "claimed", "nothing was written");
    let hour_us = 3_600_000_000i64;
    let before = common::now_us();
    let (s, body) = server.send(
        "POST",
        &later_nack,
        &json!({"token": later["token"], "reason": "limited", "retry_after_ms": 3_600_000}),
    );
    let after = common::now_us();
    assert_eq!((s, str_of(&body, "state")), (200, "queued"), "{body}");
    let at = body["retry_at_us"].as_i64().expect("retry_at_us");
    assert!(
        (before + hour_us..=after + hour_us).contains(&at),
        "due an hour after the nack: {at} not in {before}..={after} + 1 h"
    );

    // Nack the gate run as failed; cancel a fresh queued run.
    let (_, claimed) = server.send("POST", "/v1/queues/gate/claim", &json!({"consumer": "w"}));
    let gate = &claimed["runs"][0];
    let (s, body) = server.send(
        "POST",
        &format!("/v1/runs/{}/nack", str_of(gate, "run_id")),
        &json!({"token": gate["token"], "kind": "failed", "reason": "tests failed"}),
    );
    assert_eq!((s, str_of(&body, "state")), (200, "failed"), "{body}");
    let (_, fresh) = server.send(
        "POST",
        "/v1/queues/gate/runs",
        &json!({"key": "fresh", "payload": ""}),
    );
    let (s, body) = server.call(
        "POST",
        &format!("/v1/runs/{}/cancel", str_of(&fresh, "run_id")),
        Some(FULL),
        None,
    );
    assert_eq!((s, str_of(&body, "state")), (200, "canceled"), "{body}");
    let (s, _) = server.get("/readyz");
    assert_eq!(s, 200);

    let (status, stderr) = server.stop();
    assert!(status.success(), "{status:?}: {stderr}");
}

#[test]
fn the_api_flow_on_sqlite_with_one_run_id_per_key_and_an_offline_enqueue_claimable() {
    let (_dir, db) = sqlite_db();
    flow(&db);
}

#[test]
fn the_api_flow_on_postgres() {
    common::on_postgres("cairn_serve", flow);
}

/// Every route of the OpenAPI document, with the path parameters filled in.
fn documented_routes(server: &Server, run_id: &str) -> Vec<(String, String, Vec<u16>)> {
    let (s, doc) = server.get("/v1/openapi.json");
    assert_eq!(s, 200, "{doc}");
    assert!(str_of(&doc, "openapi").starts_with("3."), "OpenAPI 3");
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{space}", "docs")
            .replace("{queue}", "gate")
            .replace("{id}", run_id)
            .replace("{name}", "review");
        for (method, op) in item.as_object().unwrap() {
            let statuses = op["responses"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| k.parse().unwrap())
                .collect();
            routes.push((method.to_uppercase(), concrete.clone(), statuses));
        }
    }
    routes
}

#[test]
fn every_route_in_the_openapi_document_answers_a_documented_status() {
    let (_dir, db) = sqlite_db();
    let server = Server::start(&db, &[]);
    let (_, run) = server.send(
        "POST",
        "/v1/queues/gate/runs",
        &json!({"key": "walk", "payload": "p"}),
    );
    server.send(
        "POST",
        "/v1/spaces/docs/epochs",
        &json!({"events": [{"kind": "k", "payload": "p"}]}),
    );
    let routes = documented_routes(&server, str_of(&run, "run_id"));
    assert_eq!(routes.len(), 43, "{routes:?}");
    for (method, path, documented) in routes {
        let body = (method != "GET").then_some(b"{}".as_slice());
        let (s, answer) = server.call(&method, &path, Some(FULL), body);
        assert!(
            documented.contains(&s),
            "{method} {path} answered {s} ({answer}); documented: {documented:?}"
        );
        if s >= 400 {
            assert_ne!(
                code(&answer),
                "<no typed error>",
                "{method} {path}: {answer}"
            );
        }
    }
}

#[test]
fn tokens_are_required_read_only_tokens_cannot_mutate_and_no_token_is_logged() {
    let stderr = tokens_checked(&[]);
    // One text line per request, with the route template and the status.
    assert!(
        stderr.lines().any(|l| l.contains("request")
            && l.contains("/v1/queues/{queue}/runs")
            && l.contains("201")),
        "{stderr}"
    );
}

/// The same with JSON log lines: every line is a JSON object, one per request with the
/// method, the route template, the status and the latency, and no token anywhere.
#[test]
fn json_logs_have_one_line_per_request_and_no_token() {
    let stderr = tokens_checked(&["--log-format", "json"]);
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let requests: Vec<&Value> = lines.iter().filter(|l| l["message"] == "request").collect();
    assert!(requests.len() > 20, "{stderr}");
    let created = requests
        .iter()
        .find(|l| l["route"] == "/v1/queues/{queue}/runs" && l["status"] == 201)
        .unwrap_or_else(|| panic!("no enqueue line: {stderr}"));
    assert_eq!(created["method"], "POST");
    assert!(created["latency_ms"].as_f64().unwrap() >= 0.0, "{created}");
    assert!(
        requests
            .iter()
            .any(|l| l["status"] == 401 && l["route"] == "/v1/spaces/{space}/epochs"),
        "refused requests are logged too: {stderr}"
    );
}

/// Drives every documented route with no, wrong, read-only and full tokens; returns the
/// server's stderr, which holds no token.
fn tokens_checked(log_args: &[&str]) -> String {
    let (dir, db) = sqlite_db();
    let token_file = dir.path().join("tokens");
    std::fs::write(&token_file, format!("# operators\n\n{FILE_TOKEN}\n")).unwrap();
    let mut args = vec!["--token-file", token_file.to_str().unwrap()];
    args.extend_from_slice(log_args);
    let server = Server::start(&db, &args);
    let (_, run) = server.send(
        "POST",
        "/v1/queues/gate/runs",
        &json!({"key": "a", "payload": "p"}),
    );
    let run_id = str_of(&run, "run_id").to_owned();
    let (s, _) = server.send(
        "POST",
        "/v1/spaces/docs/epochs",
        &json!({"events": [{"kind": "k", "payload": "p"}]}),
    );
    assert_eq!(s, 201);
    // The schedule the `{name}` routes name, so that a read token's GET finds it.
    let (s, made) = server.send(
        "PUT",
        "/v1/schedules/review",
        &json!({"cron": "0 3 * * *", "queue": "gate"}),
    );
    assert_eq!(s, 201, "{made}");
    let routes = documented_routes(&server, &run_id);
    let (_, before) = server.get(&format!("/v1/runs/{run_id}"));
    let (_, heads_before) = server.get("/v1/spaces/docs/heads");
    for (method, path, _) in &routes {
        let public = path == "/healthz" || path == "/readyz";
        let body = (method != "GET").then_some(b"{}".as_slice());
        for token in [None, Some("wrong-token-0000000000"), Some("")] {
            let (s, answer) = server.call(method, path, token, body);
            if public {
                assert_eq!(s, 200, "{method} {path}");
            } else {
                assert_eq!(
                    (s, code(&answer)),
                    (401, "unauthorized"),
                    "{method} {path} {token:?}"
                );
            }
        }
        let (s, answer) = server.call(method, path, Some(READ), body);
        // The sync protocol's two reads sent as POST (their id lists do not fit a URL) take a
        // read token: past the token, the empty body is refused.
        let reading_post = path.ends_with("/sync/epochs") || path.ends_with("/sync/missing");
        if method == "GET" {
            assert!(s == 200, "{method} {path} with a read token: {s} {answer}");
        } else if reading_post {
            assert_eq!(
                (s, code(&answer)),
                (400, "invalid_input"),
                "{method} {path}"
            );
        } else {
            assert_eq!((s, code(&answer)), (403, "forbidden"), "{method} {path}");
        }
    }
    // The token file's token has full access; nothing the refused requests sent was written.
    let (s, heads_after) = server.call("GET", "/v1/spaces/docs/heads", Some(FILE_TOKEN), None);
    assert_eq!(s, 200);
    assert_eq!(
        heads_before, heads_after,
        "no epoch was appended by a refused request"
    );
    let (_, after) = server.get(&format!("/v1/runs/{run_id}"));
    assert_eq!(before, after, "no refused request changed the run");
    let (s, _) = server.call(
        "POST",
        "/v1/queues/gate/runs",
        Some(FILE_TOKEN),
        Some(br#"{"key": "b", "payload": "p"}"#),
    );
    assert_eq!(s, 201);
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status:?}: {stderr}");
    for t in [FULL, READ, FILE_TOKEN, "wrong-token-0000000000"] {
        assert!(!stderr.contains(t), "a token in stderr: {stderr}");
    }
    stderr
}

#[test]
fn bad_input_gets_typed_errors_and_writes_nothing() {
    let (_dir, db) = sqlite_db();
    let server = Server::start(&db, &["--max-body-bytes", "4096"]);
    let big = format!(r#"{{"key": "k", "payload": "{}"}}"#, "x".repeat(8192));
    let unknown = "01a22b8e-34b5-72f6-aaf8-4f06b0f965c8";
    let expect = |method: &str, path: &str, body: Option<&[u8]>, status: u16, want: &str| {
        let (s, answer) = server.call(method, path, Some(FULL), body);
        assert_eq!(
            (s, code(&answer)),
            (status, want),
            "{method} {path}: {answer}"
        );
        let msg = answer["error"]["message"].as_str().unwrap();
        assert!(!msg.is_empty() && !msg.contains('\n'), "{msg}");
    };
    let runs = "/v1/queues/gate/runs";
    let bad_json = "invalid_input";
    expect("POST", runs, Some(b"{not json"), 400, bad_json);
    expect("POST", runs, Some(b""), 400, bad_json);
    expect("POST", runs, Some(big.as_bytes()), 413, "body_too_large");
    expect("POST", runs, Some(br#"{"payload": "p"}"#), 400, bad_json);
    let both = br#"{"key": "k", "payload": "p", "payload_b64": "cA=="}"#;
    expect("POST", runs, Some(both), 400, bad_json);
    let not_b64 = br#"{"key": "k", "payload_b64": "%%%"}"#;
    expect("POST", runs, Some(not_b64), 400, bad_json);
    let unknown_field = br#"{"key": "k", "payload": "p", "bogus": 1}"#;
    expect("POST", runs, Some(unknown_field), 400, bad_json);
    let zero_attempts = br#"{"key": "k", "payload": "p", "max_attempts": 0}"#;
    expect("POST", runs, Some(zero_attempts), 400, bad_json);
    let epochs = "/v1/spaces/docs/epochs";
    expect("POST", epochs, Some(br#"{"events": []}"#), 400, bad_json);
    expect("POST", epochs, Some(b"[1, 2"), 400, bad_json);
    expect("GET", "/v1/spaces/docs/heads", None, 404, "not_found");
    let feed = "/v1/spaces/docs/events";
    expect(
        "GET",
        &format!("{feed}?cursor=c1.zz.1"),
        None,
        400,
        "bad_cursor",
    );
    expect(
        "GET",
        &format!("{feed}?cursor=nonsense"),
        None,
        400,
        "bad_cursor",
    );
    expect("GET", &format!("{feed}?limit=0"), None, 400, bad_json);
    expect("GET", &format!("{feed}?limit=x"), None, 400, bad_json);
    let run = format!("/v1/runs/{unknown}");
    expect("GET", &run, None, 404, "unknown_run");
    expect("GET", "/v1/runs/not-a-run-id", None, 400, bad_json);
    expect("GET", &format!("{run}/facts"), None, 404, "unknown_run");
    expect("POST", &format!("{run}/cancel"), None, 404, "unknown_run");
    let event = br#"{"event_id": "e", "payload": "p"}"#;
    expect(
        "POST",
        &format!("{run}/events"),
        Some(event),
        404,
        "unknown_run",
    );
    let fact = br#"{"value": "v"}"#;
    expect(
        "PUT",
        &format!("{run}/facts/x"),
        Some(fact),
        404,
        "unknown_run",
    );
    let ack = br#"{"token": "nope"}"#;
    expect("POST", &format!("{run}/ack"), Some(ack), 400, bad_json);
    let claim = br#"{"consumer": "c", "lease_ms": 10}"#;
    expect("POST", "/v1/queues/gate/claim", Some(claim), 400, bad_json);
    expect("GET", "/v1/nowhere", None, 404, "not_found");
    let heads = "/v1/spaces/docs/heads";
    expect("DELETE", heads, None, 405, "method_not_allowed");
    // Nothing was written: no run, no space.
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status:?}: {stderr}");
    assert_eq!(ok(cairn(&db).arg("runs").output().unwrap()), "");
    let out = cairn(&db)
        .args(["heads", "--space", "docs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "the space was never created");
}

#[test]
fn sigterm_while_enqueues_arrive_exits_0_and_every_acknowledged_run_survives() {
    let (_dir, db) = sqlite_db();
    let server = Server::start(&db, &[]);
    let base = server.base.clone();
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let base = base.clone();
            let acked = acked.clone();
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(DEADLINE))
                    .build()
                    .into();
                // Bounded: stops at the first refused connection, or after 5000 requests.
                for i in 0..5000 {
                    let body = format!(r#"{{"key_parts": ["c{c}", "{i}"], "payload": "p"}}"#);
                    let resp = agent
                        .post(format!("{base}/v1/queues/gate/runs"))
                        .header("Authorization", format!("Bearer {FULL}"))
                        .send(body.as_bytes());
                    let Ok(mut resp) = resp else { break };
                    if resp.status().as_u16() == 201 {
                        let text = resp.body_mut().read_to_string().unwrap();
                        let v: Value = serde_json::from_str(&text).unwrap();
                        acked.lock().unwrap().push(str_of(&v, "run_id").to_owned());
                    } else {
                        break;
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + DEADLINE;
    while acked.lock().unwrap().len() < 20 {
        assert!(Instant::now() < deadline, "enqueues are acknowledged");
        std::thread::yield_now();
    }
    let (status, stderr) = server.stop();
    assert!(status.success(), "SIGTERM exits 0: {status:?} {stderr}");
    for c in clients {
        c.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 20);
    let server = Server::start(&db, &[]);
    for id in &acked {
        let (s, run) = server.get(&format!("/v1/runs/{id}"));
        assert_eq!((s, str_of(&run, "state")), (200, "queued"), "{id}");
    }
}

#[test]
fn a_refused_store_an_unconfigured_auth_and_a_public_no_auth_address_refuse_to_start() {
    use cairn::testkit::sqlite::{SqliteOptions, SqliteStore};
    use cairn_migrate::{cairn_revisions, MigrationSet, Revision, Runner, RunnerHooks, CAIRN_SET};

    let dir = tempfile::tempdir().unwrap();
    let head = cairn_revisions().last().unwrap().id.clone();
    let extra = |id: &str| {
        let sql = vec![format!(
            "CREATE TABLE {id} (id BIGINT NOT NULL PRIMARY KEY)"
        )];
        Revision {
            id: id.into(),
            parent: Some(head.clone()),
            up_sqlite: sql.clone(),
            up_postgres: sql,
            description: id.into(),
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let create = |path: &std::path::Path, rev: Revision, skip_lineage: bool| {
        let mut revs = cairn_revisions();
        revs.push(rev);
        let runner =
            Runner::new(MigrationSet::new(CAIRN_SET, revs).unwrap()).with_hooks(RunnerHooks {
                skip_lineage,
                ..RunnerHooks::default()
            });
        rt.block_on(SqliteStore::open_migrated(
            path,
            SqliteOptions::default(),
            &runner,
        ))
        .expect("create the store");
    };
    let diverged = dir.path().join("diverged.db");
    create(&diverged, extra("t_theirs"), true);
    let out = cairn(diverged.to_str().unwrap())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("CAIRN_AUTH__TOKENS", FULL)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("cairn: ") && err.contains("t_theirs") && err.contains(&head),
        "{err}"
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "", "never listened");

    // A store ahead of this build serves.
    let ahead = dir.path().join("ahead.db");
    create(&ahead, extra("t_newer"), false);
    let server = Server::start(ahead.to_str().unwrap(), &[]);
    let (s, _) = server.get("/readyz");
    assert_eq!(s, 200);
    drop(server);

    let (_d, db) = sqlite_db();
    for (env, args, needle) in [
        (vec![], vec![], "no bearer token is configured"),
        (
            vec![],
            vec!["--listen", "0.0.0.0:0", "--insecure-no-auth"],
            "loopback",
        ),
        (
            vec![("CAIRN_AUTH__TOKENS", "tiny-tok")],
            vec![],
            "16 characters",
        ),
    ] {
        let out = cairn(&db)
            .arg("serve")
            .args(if args.is_empty() {
                vec!["--listen", "127.0.0.1:0"]
            } else {
                args
            })
            .envs(env)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "a configuration problem: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("cairn: config: auth."), "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(!err.contains("tiny-tok"), "the token is not echoed: {err}");
    }
    // On loopback, --insecure-no-auth serves without tokens.
    let server = Server::start_with(&db, &[], &["--insecure-no-auth"]);
    let (s, _) = server.call(
        "POST",
        "/v1/queues/q/runs",
        None,
        Some(br#"{"key": "k", "payload": ""}"#),
    );
    assert_eq!(s, 201);
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn two_servers_on_one_postgres_give_one_head_and_strictly_increasing_seqs() {
    common::on_postgres("cairn_serve_two", |db| {
        let servers = [Server::start(db, &[]), Server::start(db, &[])];
        const PER_CLIENT: usize = 10;
        std::thread::scope(|scope| {
            for c in 0..4 {
                let server = &servers[c % 2];
                scope.spawn(move || {
                    for i in 0..PER_CLIENT {
                        let epoch =
                            json!({"events": [{"kind": "n", "payload": format!("{c}-{i}")}]});
                        // A 503 (busy) wrote nothing and asks for a retry, as a client would.
                        let deadline = Instant::now() + DEADLINE;
                        loop {
                            let (s, body) = server.send("POST", "/v1/spaces/shared/epochs", &epoch);
                            if s == 201 {
                                break;
                            }
                            assert_eq!(s, 503, "{body}");
                            assert!(Instant::now() < deadline, "{body}");
                        }
                    }
                });
            }
        });
        let (s, heads) = servers[1].get("/v1/spaces/shared/heads");
        assert_eq!(s, 200);
        let total = 4 * PER_CLIENT;
        assert_eq!(heads["heads"].as_array().unwrap().len(), 1, "{heads}");
        assert_eq!(heads["heads"][0]["seq"], total);
        let (_, page) = servers[0].get("/v1/spaces/shared/events?limit=1000");
        let seqs: Vec<u64> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, (1..=total as u64).collect::<Vec<_>>());
    });
}

#[test]
fn a_request_stuck_in_flight_does_not_hold_shutdown_past_the_drain_timeout() {
    use std::io::Write;
    let (_dir, db) = sqlite_db();
    let server = Server::start(&db, &["--drain-timeout", "1"]);
    let addr = server.base.strip_prefix("http://").unwrap().to_owned();
    // A request whose body never arrives: its handler is in flight until the drain ends it.
    let mut stuck = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stuck,
        "POST /v1/queues/gate/runs HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {FULL}\r\n\
         Content-Length: 100\r\n\r\n{{\"key\""
    )
    .unwrap();
    stuck.flush().unwrap();
    // The server has the request once a later one on another connection is answered.
    let (s, _) = server.get("/readyz");
    assert_eq!(s, 200);
    let started = Instant::now();
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(
        started.elapsed() < DEADLINE,
        "the drain is bounded: {stderr}"
    );
    drop(stuck);
    assert_eq!(ok(cairn(&db).arg("runs").output().unwrap()), "");
}

/// One sample of a scrape: metric name, labels, value.
type Sample = (String, std::collections::BTreeMap<String, String>, f64);

/// Parses the Prometheus text exposition format (0.0.4) strictly: every line is a `# HELP`, a
/// `# TYPE` or a sample whose metric has a `# TYPE`; label values may hold any character
/// (braces included) with `\\`, `\"` and `\n` escaped. (The `prometheus-parse` crate skips
/// sample lines whose label values hold a `}`, such as route templates, without an error.)
fn parse_prometheus(text: &str) -> Result<Vec<Sample>, String> {
    let is_name = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut typed = std::collections::BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            if !is_name(name) {
                return Err(format!("bad HELP: {line}"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            let (Some(name), Some(kind), None) = (words.next(), words.next(), words.next()) else {
                return Err(format!("bad TYPE: {line}"));
            };
            if !is_name(name)
                || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
            {
                return Err(format!("bad TYPE: {line}"));
            }
            typed.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or(format!("no value: {line}"))?;
        let name = &line[..name_end];
        if !is_name(name) {
            return Err(format!("bad metric name: {line}"));
        }
        let mut labels = std::collections::BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(mut l) = rest.strip_prefix('{') {
            loop {
                if let Some(after) = l.strip_prefix('}') {
                    rest = after;
                    break;
                }
                let eq = l.find("=\"").ok_or(format!("bad label: {line}"))?;
                let key = &l[..eq];
                if !is_name(key) || key.contains(':') {
                    return Err(format!("bad label name: {line}"));
                }
                let mut value = String::new();
                let mut chars = l[eq + 2..].char_indices();
                let end = loop {
                    match chars.next() {
                        Some((i, '"')) => break eq + 2 + i + 1,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c @ ('\\' | '"'))) => value.push(c),
                            _ => return Err(format!("bad escape: {line}")),
                        },
                        Some((_, c)) => value.push(c),
                        None => return Err(format!("unterminated label value: {line}")),
                    }
                };
                labels.insert(key.to_owned(), value);
                l = &l[end..];
                l = l.strip_prefix(',').unwrap_or(l);
            }
        }
        let mut words = rest.trim_start_matches(' ').split(' ');
        let value = match words.next() {
            Some("+Inf") => f64::INFINITY,
            Some("-Inf") => f64::NEG_INFINITY,
            Some(v) => v.parse::<f64>().map_err(|_| format!("bad value: {line}"))?,
            None => return Err(format!("no value: {line}")),
        };
        if let Some(ts) = words.next() {
            ts.parse::<i64>()
                .map_err(|_| format!("bad timestamp: {line}"))?;
        }
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|b| typed.get(*b).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        if !typed.contains_key(base) {
            return Err(format!("sample without a TYPE: {line}"));
        }
        samples.push((name.to_owned(), labels, value));
    }
    Ok(samples)
}

/// A scrape of `/metrics`, parsed as Prometheus text.
fn scrape(server: &Server, token: &str) -> Vec<Sample> {
    let mut resp = server
        .agent
        .get(format!("{}/metrics", server.base))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let ctype = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let text = resp.body_mut().read_to_string().unwrap();
    parse_prometheus(&text).unwrap_or_else(|e| panic!("not Prometheus text ({e}): {text}"))
}

/// The sum of the samples named `name` whose labels include `labels` (0 when there is none).
fn sample(scrape: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

#[test]
fn the_prometheus_parser_of_these_tests_is_strict() {
    let ok =
        "# HELP a_total A.\n# TYPE a_total counter\na_total{route=\"/x/{id}\",q=\"a\\\"b\"} 2\n\
              # TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 0.5\n";
    let samples = parse_prometheus(ok).unwrap();
    assert_eq!(
        sample(&samples, "a_total", &[("route", "/x/{id}"), ("q", "a\"b")]),
        2.0
    );
    assert_eq!(sample(&samples, "h_count", &[]), 1.0);
    for bad in [
        "a 1\n",
        "# TYPE a counter\na{x=\"1} 1\n",
        "# TYPE a counter\na one\n",
        "# TYPE a counter\na{1x=\"v\"} 1\n",
        "# TYPE a sometimes\n",
    ] {
        assert!(parse_prometheus(bad).is_err(), "{bad}");
    }
}

/// `/metrics` counts what the API did: appends, enqueues by outcome, claims, acks, nacks by
/// kind, requests by route template and status with their latency, and the runs by state read
/// at the scrape. A read-only token may scrape; no token may not.
#[test]
fn metrics_move_by_what_the_api_did_and_parse_as_prometheus_text() {
    let (_dir, db) = sqlite_db();
    let server = Server::start(&db, &[]);
    let (s, body) = server.call("GET", "/metrics", None, None);
    assert_eq!((s, code(&body)), (401, "unauthorized"));
    let before = scrape(&server, READ);
    let append = json!({"events": [{"kind": "k", "payload": "p"}]});
    for _ in 0..2 {
        assert_eq!(
            server.send("POST", "/v1/spaces/docs/epochs", &append).0,
            201
        );
    }
    for (key, status) in [("a", 201), ("b", 201), ("a", 200), ("c", 201)] {
        let (s, _) = server.send(
            "POST",
            "/v1/queues/gate/runs",
            &json!({"key": key, "payload": "p"}),
        );
        assert_eq!(s, status);
    }
    let claim = |server: &Server| -> (String, String) {
        let (s, c) = server.send(
            "POST",
            "/v1/queues/gate/claim",
            &json!({"consumer": "w", "lease_ms": 60000}),
        );
        assert_eq!(s, 200, "{c}");
        let run = &c["runs"][0];
        (
            str_of(run, "run_id").to_owned(),
            str_of(run, "token").to_owned(),
        )
    };
    let (id, token) = claim(&server);
    let (s, _) = server.send(
        "POST",
        &format!("/v1/runs/{id}/ack"),
        &json!({"token": token}),
    );
    assert_eq!(s, 200);
    let (id, token) = claim(&server);
    let nack = json!({"token": token, "kind": "retryable", "reason": "later"});
    assert_eq!(
        server.send("POST", &format!("/v1/runs/{id}/nack"), &nack).0,
        200
    );
    let (id, token) = claim(&server);
    let park = json!({"token": token, "kind": "permanent", "reason": "never"});
    assert_eq!(
        server.send("POST", &format!("/v1/runs/{id}/nack"), &park).0,
        200
    );
    let after = scrape(&server, FULL);
    let delta = |name: &str, labels: &[(&str, &str)]| {
        sample(&after, name, labels) - sample(&before, name, labels)
    };
    assert_eq!(delta("cairn_epoch_appends_total", &[]), 2.0);
    let enq = "cairn_spool_enqueues_total";
    assert_eq!(delta(enq, &[("outcome", "created")]), 3.0);
    assert_eq!(delta(enq, &[("outcome", "existing")]), 1.0);
    assert_eq!(delta("cairn_spool_claimed_runs_total", &[]), 3.0);
    assert_eq!(delta("cairn_spool_acks_total", &[]), 1.0);
    let nacks = "cairn_spool_nacks_total";
    assert_eq!(delta(nacks, &[("kind", "retryable")]), 1.0);
    assert_eq!(delta(nacks, &[("kind", "permanent")]), 1.0);
    let appends = [
        ("method", "POST"),
        ("route", "/v1/spaces/{space}/epochs"),
        ("status", "201"),
    ];
    assert_eq!(delta("cairn_http_requests_total", &appends), 2.0);
    let enqueue_200 = [("route", "/v1/queues/{queue}/runs"), ("status", "200")];
    assert_eq!(delta("cairn_http_requests_total", &enqueue_200), 1.0);
    // The first scrape (401 without a token, then 200) is counted by the second.
    let scrapes = [("route", "/metrics"), ("status", "401")];
    assert_eq!(sample(&after, "cairn_http_requests_total", &scrapes), 1.0);
    let latency = [("route", "/v1/spaces/{space}/epochs")];
    assert_eq!(
        delta("cairn_http_request_duration_seconds_count", &latency),
        2.0,
        "two appends timed"
    );
    let runs = "cairn_spool_runs";
    assert_eq!(
        sample(&after, runs, &[("state", "pending")]),
        0.0,
        "nothing is due now"
    );
    assert_eq!(
        sample(&after, runs, &[("state", "scheduled")]),
        1.0,
        "b, queued again, due after its backoff"
    );
    assert_eq!(sample(&after, runs, &[("state", "claimed")]), 0.0);
    assert_eq!(sample(&after, runs, &[("state", "parked")]), 1.0, "c");
    assert_eq!(sample(&after, "cairn_backfill_enabled", &[]), 1.0);
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
}

fn doctor_check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {report}"))
}

/// `GET /v1/doctor` with a read-only token: 200 and the report while healthy; a parked run
/// is a warning of the spool check naming its repair; event bytes over the configured
/// retention cap (`CAIRN_SPOOL__RETENTION_MAX_BYTES`) are a problem: 503.
fn doctor_over_http(db: &str) {
    let server = Server::start_with(
        db,
        &[
            ("CAIRN_AUTH__TOKENS", FULL),
            ("CAIRN_AUTH__READ_TOKENS", READ),
            ("CAIRN_SPOOL__RETENTION_MAX_BYTES", "64"),
            // The background pass would trim the store this test puts over the cap.
            ("CAIRN_SPOOL__RETENTION_ENABLED", "false"),
        ],
        &[],
    );
    let (s, report) = server.call("GET", "/v1/doctor", Some(READ), None);
    assert_eq!(s, 200, "{report}");
    assert_eq!(report["healthy"], true, "{report}");
    for name in [
        "integrity",
        "scratch",
        "migrations:cairn",
        "spool",
        "retention",
        "head_caches",
    ] {
        assert_eq!(doctor_check(&report, name)["ok"], true, "{name}: {report}");
    }
    assert!(
        str_of(doctor_check(&report, "retention"), "detail").contains("64-byte cap"),
        "{report}"
    );
    let (s, run) = server.send(
        "POST",
        "/v1/queues/gate/runs",
        &json!({"key": "k", "payload": "p"}),
    );
    assert_eq!(s, 201);
    let id = str_of(&run, "run_id").to_owned();
    let event = json!({"event_id": "e1", "payload": "x".repeat(100)});
    assert_eq!(
        server
            .send("POST", &format!("/v1/runs/{id}/events"), &event)
            .0,
        201
    );
    let (_, claimed) = server.send(
        "POST",
        "/v1/queues/gate/claim",
        &json!({"consumer": "w", "lease_ms": 60000}),
    );
    let token = str_of(&claimed["runs"][0], "token").to_owned();
    let park = json!({"token": token, "kind": "permanent", "reason": "broken"});
    assert_eq!(
        server.send("POST", &format!("/v1/runs/{id}/nack"), &park).0,
        200
    );
    let (s, report) = server.call("GET", "/v1/doctor", Some(READ), None);
    assert_eq!(s, 503, "{report}");
    assert_eq!(report["healthy"], false);
    let spool = doctor_check(&report, "spool");
    assert_eq!(spool["ok"], true, "{report}");
    assert_eq!(spool["level"], "warning", "{report}");
    assert!(str_of(spool, "detail").contains("parked=1"), "{report}");
    assert!(
        str_of(spool, "repair").contains("cairn run retry ID"),
        "{report}"
    );
    let retention = doctor_check(&report, "retention");
    assert_eq!(retention["ok"], false, "{report}");
    assert!(
        str_of(retention, "detail").contains("over the cap"),
        "{report}"
    );
    let (s, _) = server.call("GET", "/v1/doctor", None, None);
    assert_eq!(s, 401);
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn doctor_over_http_on_sqlite() {
    let (_dir, db) = sqlite_db();
    doctor_over_http(&db);
}

#[test]
fn doctor_over_http_on_postgres() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pg = rt
        .block_on(cairn::testkit::postgres::testkit::test_server_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    // A database of its own: the scratch check looks at every schema of the database, and
    // other tests' additivity checks leave theirs in the shared one.
    let database = cairn::testkit::scratch_name("cairn_doctor");
    let admin = rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {database}"))
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    });
    let url = with_database(&pg, &database);
    let result = std::panic::catch_unwind(|| doctor_over_http(&url));
    rt.block_on(async {
        let mut admin = admin;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .unwrap();
    });
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{database}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Runs `cairn serve` expecting it to refuse its configuration; returns stderr.
fn refused_config(db: &str, env: &[(&str, &str)], args: &[&str]) -> String {
    let out = cairn(db)
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "", "never listened");
    err
}

/// An unknown key inside a section is named once (`auth.unknown_key`, not
/// `auth.unknown_key.unknown_key`) and does not hide the section's other problems.
#[test]
fn an_unknown_key_in_a_section_is_named_once_and_hides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("never.db");
    let db = db.to_str().unwrap();
    let config = dir.path().join("cairn.toml");
    std::fs::write(
        &config,
        "[auth]\ntokens = [\"short1\"]\nunknown_key = 1\n\n[limits]\nbogus_limit = 2\nmax_body_bytes = 0\n",
    )
    .unwrap();
    let err = refused_config(db, &[], &["--config", config.to_str().unwrap()]);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.contains(&"cairn: config: auth.unknown_key: unknown key"),
        "{err}"
    );
    assert!(
        lines.contains(&"cairn: config: limits.bogus_limit: unknown key"),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("cairn: config: auth.tokens: token 1")),
        "the section's other problem is still reported: {err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("cairn: config: limits.max_body_bytes")),
        "the section's other problem is still reported: {err}"
    );
    assert!(!std::path::Path::new(db).exists(), "nothing opened");
    // A setting's variable whose section does not exist is named too (not silently dropped).
    let err = refused_config(
        db,
        &[
            ("CAIRN_AUTH__TOKENS", FULL),
            ("CAIRN_LIMIT__MAX_BODY_BYTES", "10"),
        ],
        &["--config", config.to_str().unwrap()],
    );
    assert!(
        err.lines().any(|l| l
            .starts_with("cairn: config: CAIRN_LIMIT__MAX_BODY_BYTES: `limit` is not a section")),
        "{err}"
    );
    // In any case, as the variables that are read are matched.
    let err = refused_config(
        db,
        &[
            ("CAIRN_AUTH__TOKENS", FULL),
            ("cairn_limit__max_body_bytes", "10"),
        ],
        &["--config", config.to_str().unwrap()],
    );
    assert!(
        err.lines().any(|l| l
            .starts_with("cairn: config: cairn_limit__max_body_bytes: `limit` is not a section")),
        "{err}"
    );
}

/// A config file with several mistakes: every one is reported on its own line naming its key,
/// exit 2, no token or URL password echoed, and nothing opened (no store file).
#[test]
fn a_bad_config_reports_each_problem_on_its_own_line_and_opens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("never.db");
    let db = db.to_str().unwrap();
    let config = dir.path().join("cairn.toml");
    std::fs::write(
        &config,
        r#"
listen = "not-an-address"
bogus = 1

[auth]
tokens = ["tinytoken1", "a-good-token-0123456789"]

[delivery]
url = "ftp://user:hunter2secret@collector.example/"

[limits]
max_body_bytes = 0
request_timeout_secs = "soon"

[log]
format = "xml"

[backfill]
spaces_per_second = -1
"#,
    )
    .unwrap();
    let err = refused_config(db, &[], &["--config", config.to_str().unwrap()]);
    let lines: Vec<&str> = err.lines().collect();
    for key in [
        "listen:",
        "bogus:",
        "auth.tokens: token 1",
        "delivery.url:",
        "limits.request_timeout_secs:",
        "log.format:",
        "backfill.spaces_per_second",
    ] {
        assert_eq!(
            lines.iter().filter(|l| l.contains(key)).count(),
            1,
            "one line for {key}: {err}"
        );
    }
    assert!(
        lines.iter().all(|l| l.starts_with("cairn: config: ")),
        "{err}"
    );
    for secret in ["tinytoken1", "a-good-token", "hunter2secret", "user:"] {
        assert!(!err.contains(secret), "{secret} echoed: {err}");
    }
    assert!(!std::path::Path::new(db).exists(), "nothing opened");
    // A syntax error names the file and the line, not the line's text.
    std::fs::write(&config, "[auth]\ntokens = [\"tinytoken1\"\n").unwrap();
    let err = refused_config(db, &[], &["--config", config.to_str().unwrap()]);
    assert!(err.contains("not valid TOML"), "{err}");
    assert!(!err.contains("tinytoken1"), "{err}");
    // The limits mistake that a file's type error hides is reported once the type is right.
    std::fs::write(&config, "[limits]\nmax_body_bytes = 0\n").unwrap();
    let err = refused_config(
        db,
        &[("CAIRN_AUTH__TOKENS", FULL)],
        &["--config", config.to_str().unwrap()],
    );
    assert_eq!(
        err.trim(),
        "cairn: config: limits.max_body_bytes: must be at least 1"
    );
}

/// Precedence: a flag beats the environment, which beats the file, which beats the defaults;
/// tokens from the environment work and replace the file's, and no token is printed.
#[test]
fn the_environment_overrides_the_file_and_a_flag_overrides_both() {
    let (dir, db) = sqlite_db();
    let config = dir.path().join("cairn.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"{}\"\n[auth]\ntokens = [\"{FILE_TOKEN}\"]\n[limits]\nmax_body_bytes = 64\n",
            dir.path().join("from-file.db").display()
        ),
    )
    .unwrap();
    let body = json!({"key": "k", "payload": "x".repeat(200)});
    let config_arg = ["--config", config.to_str().unwrap()];
    // The file alone: its token and its limit (`--database` beats the file's `database`).
    let server = Server::start_with(&db, &[], &config_arg);
    assert!(!dir.path().join("from-file.db").exists(), "--database wins");
    let (s, _) = server.call(
        "POST",
        "/v1/queues/gate/runs",
        Some(FILE_TOKEN),
        Some(&serde_json::to_vec(&body).unwrap()),
    );
    assert_eq!(s, 413, "the file's 64-byte limit");
    drop(server);
    // The environment beats the file: its token replaces the file's, its limit is used.
    let server = Server::start_with(
        &db,
        &[
            ("CAIRN_AUTH__TOKENS", FULL),
            ("CAIRN_LIMITS__MAX_BODY_BYTES", "100000"),
        ],
        &config_arg,
    );
    assert_eq!(server.send("POST", "/v1/queues/gate/runs", &body).0, 201);
    let (s, _) = server.call("GET", "/v1/runs/x", Some(FILE_TOKEN), None);
    assert_eq!(
        s, 401,
        "the file's token is overridden by the environment's"
    );
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
    for t in [FULL, FILE_TOKEN] {
        assert!(!stderr.contains(t), "a token in stderr: {stderr}");
    }
    // A flag beats both.
    let mut args = config_arg.to_vec();
    args.extend(["--max-body-bytes", "64"]);
    let server = Server::start_with(
        &db,
        &[
            ("CAIRN_AUTH__TOKENS", FULL),
            ("CAIRN_LIMITS__MAX_BODY_BYTES", "100000"),
        ],
        &args,
    );
    assert_eq!(server.send("POST", "/v1/queues/gate/runs", &body).0, 413);
}

/// With no `--database` and no `CAIRN_DATABASE`, the file's `database` is the store.
#[test]
fn the_config_file_names_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("from-file.db");
    let config = dir.path().join("cairn.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"{}\"\n[auth]\ntokens = \"{FULL}\"\n",
            store.display()
        ),
    )
    .unwrap();
    // Not `cairn()`, which names a database: this server must find it in the file.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .env("TMPDIR", private_tmp())
        .env("CAIRN_CONFIG", &config)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("listening on "), "{first}");
    assert!(store.exists(), "the file's database was opened");
    terminate(&child.id().to_string());
    assert!(wait_exit(&mut child).success());
}

/// `[spool] retention_max_bytes` takes effect while the server runs: run events appended past
/// the cap are removed, oldest first, by the background retention pass, which `/metrics`
/// counts and the log reports.
fn retention_brings_the_store_back_under_its_cap(db: &str) {
    const CAP: usize = 1_000;
    let server = Server::start_with(
        db,
        &[
            ("CAIRN_AUTH__TOKENS", FULL),
            ("CAIRN_AUTH__READ_TOKENS", READ),
            ("CAIRN_SPOOL__RETENTION_MAX_BYTES", "1000"),
            ("CAIRN_SPOOL__RETENTION_INTERVAL_SECS", "1"),
        ],
        &[],
    );
    let (s, run) = server.send(
        "POST",
        "/v1/queues/kept/runs",
        &json!({"key": "retained", "payload": "p"}),
    );
    assert_eq!(s, 201, "{run}");
    let id = str_of(&run, "run_id").to_owned();
    // 20 events of 200 bytes: 4,000 bytes against a 1,000-byte cap.
    for n in 0..20 {
        let event = json!({"event_id": format!("e{n:02}"), "payload": "x".repeat(200)});
        let (s, body) = server.send("POST", &format!("/v1/runs/{id}/events"), &event);
        assert_eq!(s, 201, "{body}");
    }
    let deadline = Instant::now() + DEADLINE;
    let kept = loop {
        let (s, events) = server.get(&format!("/v1/runs/{id}/events?limit=100"));
        assert_eq!(s, 200, "{events}");
        let list = events["events"].as_array().unwrap().clone();
        let bytes: usize = list
            .iter()
            .map(|e| e["payload"].as_str().unwrap().len())
            .sum();
        if bytes <= CAP {
            break list;
        }
        assert!(
            Instant::now() < deadline,
            "{bytes} bytes of run events still stored {DEADLINE:?} after exceeding a {CAP}-byte cap"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // The newest events stay: the pass removes the oldest first, and no more than needed.
    let ids: Vec<&str> = kept.iter().map(|e| str_of(e, "event_id")).collect();
    assert_eq!(ids, ["e15", "e16", "e17", "e18", "e19"], "{kept:?}");
    // The pass commits its deletes before it returns and is counted, so the counters may lag
    // the events by a moment: wait for them, then hold them to exactly what was removed.
    let over_cap = |scraped: &[Sample]| {
        sample(
            scraped,
            "cairn_retention_removed_total",
            &[("kind", "events_over_cap")],
        )
    };
    let freed = |scraped: &[Sample]| sample(scraped, "cairn_retention_bytes_freed_total", &[]);
    let scraped = loop {
        let scraped = scrape(&server, READ);
        // The bytes freed are counted last of the pass's figures.
        if over_cap(&scraped) >= 15.0 && freed(&scraped) >= 3000.0 {
            break scraped;
        }
        assert!(
            Instant::now() < deadline,
            "the retention counters never showed the 15 removed events (3,000 bytes): {scraped:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(sample(&scraped, "cairn_retention_enabled", &[]), 1.0);
    assert_eq!(over_cap(&scraped), 15.0);
    assert_eq!(freed(&scraped), 3000.0);
    assert!(
        sample(
            &scraped,
            "cairn_retention_passes_total",
            &[("outcome", "complete")]
        ) >= 1.0
    );
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("cairn retention: pass done"),
        "the pass is logged: {stderr}"
    );
}

#[test]
fn retention_brings_the_store_back_under_its_cap_on_sqlite() {
    let (_dir, db) = sqlite_db();
    retention_brings_the_store_back_under_its_cap(&db);
}

#[test]
fn retention_brings_the_store_back_under_its_cap_on_postgres() {
    common::on_postgres(
        "cairn_retention",
        retention_brings_the_store_back_under_its_cap,
    );
}

/// The connection limits and the retention pacing are checked with the rest of the
/// configuration: zero, or a timeout past a day, is refused on a line naming the key (env and
/// flag alike).
#[test]
fn connection_limits_and_retention_pacing_out_of_range_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("never.db");
    let db = db.to_str().unwrap();
    let err = refused_config(
        db,
        &[
            ("CAIRN_AUTH__TOKENS", FULL),
            ("CAIRN_LIMITS__MAX_CONNECTIONS", "0"),
            ("CAIRN_LIMITS__HEADER_READ_TIMEOUT_SECS", "86401"),
            ("CAIRN_SPOOL__RETENTION_INTERVAL_SECS", "0"),
            ("CAIRN_SPOOL__RETENTION_MAX_AGE_SECS", "0"),
        ],
        &["--keep-alive-timeout", "0"],
    );
    for line in [
        "limits.max_connections: must be at least 1",
        "limits.header_read_timeout_secs: at most 86400 (one day)",
        "limits.keep_alive_timeout_secs: must be at least 1",
        "spool.retention_interval_secs: must be at least 1",
        "spool.retention_max_age_secs: must be at least 1",
    ] {
        assert!(err.lines().any(|l| l.ends_with(line)), "{line}: {err}");
    }
    assert!(!std::path::Path::new(db).exists(), "nothing opened");
}

/// A NUL character (U+0000) in a text field never gives a 5xx (Postgres refuses it in a TEXT
/// column): an event kind holding one is refused as `invalid_input` and nothing is written; a
/// nack reason holding one is stored with each NUL replaced by U+FFFD, the same on every backend.
fn nul_in_text_fields(db: &str) {
    let server = Server::start(db, &[]);

    let (s, body) = server.send(
        "POST",
        "/v1/spaces/s1/epochs",
        &json!({"events": [{"kind": "k\u{0}", "payload": "p"}]}),
    );
    assert_eq!((s, code(&body)), (400, "invalid_input"), "{body}");
    let (s, body) = server.send(
        "POST",
        "/v1/spaces/s1/epochs",
        &json!({"events": [{"kind": "k", "payload": "p"}]}),
    );
    assert_eq!(
        (s, &body["seq"]),
        (201, &json!(1)),
        "nothing written: {body}"
    );

    let (s, body) = server.send(
        "POST",
        "/v1/queues/gate/runs",
        &json!({"key": "nul", "payload": ""}),
    );
    assert_eq!(s, 201, "{body}");
    let (s, claimed) = server.send("POST", "/v1/queues/gate/claim", &json!({"consumer": "w"}));
    assert_eq!(s, 200, "{claimed}");
    let run = &claimed["runs"][0];
    let id = str_of(run, "run_id").to_owned();
    let (s, body) = server.send(
        "POST",
        &format!("/v1/runs/{id}/nack"),
        &json!({"token": run["token"], "kind": "retryable", "reason": "a\u{0}b"}),
    );
    assert_eq!((s, str_of(&body, "state")), (200, "queued"), "{body}");
    let (s, stored) = server.get(&format!("/v1/runs/{id}"));
    assert_eq!(s, 200, "{stored}");
    assert_eq!(stored["reason"], "a\u{FFFD}b", "{stored}");

    let (status, stderr) = server.stop();
    assert!(status.success(), "{status:?}: {stderr}");
}

#[test]
fn a_nul_in_a_kind_is_refused_and_in_a_reason_replaced_on_sqlite() {
    let (_dir, db) = sqlite_db();
    nul_in_text_fields(&db);
}

#[test]
fn a_nul_in_a_kind_is_refused_and_in_a_reason_replaced_on_postgres() {
    common::on_postgres("cairn_serve_nul", nul_in_text_fields);
}

/// Concurrent `GET /v1/doctor` requests on a Postgres-backed server read the store through the
/// server's own pool: the store's connections (client backends carrying the `application_name`
/// its URL sets, counted in `pg_stat_activity`; parallel workers share their leader's name and
/// are not connections) never exceed the pool (10 by default) plus the one listening
/// connection, however many clients ask at once. (Before, each request's migration check
/// connected on its own: 40 clients pushed the count past 30.)
#[test]
fn doctor_requests_stay_within_the_servers_pool_on_postgres() {
    const MOST: i64 = 10 + 1;
    const CLIENTS: usize = 40;
    const ROUNDS: usize = 5;
    let app = cairn::testkit::scratch_name("doctor_conns");
    common::on_postgres("doctor_conns", |url| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pg = rt
            .block_on(cairn::testkit::postgres::testkit::test_server_url())
            .unwrap_or_else(|msg| panic!("{msg}"));
        let server = Arc::new(Server::start(&format!("{url}&application_name={app}"), &[]));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let done = done.clone();
            std::thread::spawn(move || {
                rt.block_on(async {
                    use sqlx::Connection;
                    let mut admin = sqlx::PgConnection::connect(&pg).await.unwrap();
                    let mut most = 0;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let n: i64 = sqlx::query_scalar(
                            "SELECT count(*) FROM pg_catalog.pg_stat_activity \
                             WHERE application_name = $1 AND backend_type = 'client backend'",
                        )
                        .bind(&app)
                        .fetch_one(&mut admin)
                        .await
                        .expect("pg_stat_activity is readable");
                        most = most.max(n);
                    }
                    most
                })
            })
        };
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let server = server.clone();
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        let (s, report) = server.call("GET", "/v1/doctor", Some(READ), None);
                        assert_eq!(s, 200, "{report}");
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().expect("every doctor request answers 200");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let most = watcher.join().unwrap();
        assert!(most > 0, "the store's connections were not found");
        assert!(
            most <= MOST,
            "the server held {most} connections; its pool and listener are {MOST}"
        );
        let server = Arc::into_inner(server).expect("the clients are done");
        let (status, stderr) = server.stop();
        assert!(status.success(), "{stderr}");
    });
}

/// The byte budget of a read page (`limits.max_page_bytes`) in these tests.
const PAGE_BYTES: usize = 4096;

/// Bytes of JSON the server wrote for a page's `events` array (the compact form `serde_json`
/// writes, as the server does; key order does not change the length).
fn array_bytes(page: &Value) -> usize {
    serde_json::to_string(&page["events"]).unwrap().len()
}

/// Feed and run-event pages end at the byte budget: an item larger than the budget goes out
/// alone, a page of smaller items stays within it, and reading page after page returns every
/// item once, in order. `limit` still counts events, whole epochs only.
fn pages_end_at_their_byte_budget(db: &str) {
    let budget = PAGE_BYTES.to_string();
    let server = Server::start_with(
        db,
        &[
            ("CAIRN_AUTH__TOKENS", FULL),
            ("CAIRN_AUTH__READ_TOKENS", READ),
            ("CAIRN_LIMITS__MAX_PAGE_BYTES", &budget),
        ],
        &[],
    );
    // A control byte is written as six (`\u0001`): 1000 of them are ~6 KB of JSON.
    let control = "\u{1}".repeat(1000);
    let append = |events: Value| {
        let (s, body) = server.send(
            "POST",
            "/v1/spaces/big/epochs",
            &json!({ "events": events }),
        );
        assert_eq!(s, 201, "{body}");
        body["seq"].as_u64().unwrap()
    };
    let mut seqs = vec![append(json!([{"kind": "k", "payload": control}]))];
    seqs.push(append(json!([{"kind": "k", "payload": "small"}])));
    for n in 0..30 {
        // 3 events of ~330 bytes each: about 1 KB of JSON an epoch.
        let payload = format!("{n:03}{}", "x".repeat(250));
        seqs.push(append(json!([
            {"kind": "k", "payload": payload},
            {"kind": "k", "payload": payload},
            {"kind": "k", "payload": payload},
        ])));
    }
    let (s, page) = server.get("/v1/spaces/big/events?limit=1000");
    assert_eq!(s, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "the oversized first epoch goes out alone");
    assert_eq!(events[0]["payload"], json!(control));
    assert!(array_bytes(&page) > PAGE_BYTES);
    // Page after page: every epoch once, in order, each page within the budget.
    let mut seen = vec![events[0]["seq"].as_u64().unwrap()];
    let mut next = str_of(&page, "next").to_owned();
    let mut pages = 0;
    loop {
        let (s, page) = server.get(&format!("/v1/spaces/big/events?limit=1000&cursor={next}"));
        assert_eq!(s, 200, "{page}");
        let events = page["events"].as_array().unwrap();
        if events.is_empty() {
            assert_eq!(
                str_of(&page, "next"),
                next,
                "an empty page keeps the cursor"
            );
            break;
        }
        pages += 1;
        assert!(
            array_bytes(&page) <= PAGE_BYTES,
            "page {pages}: {} bytes",
            array_bytes(&page)
        );
        for e in events {
            let seq = e["seq"].as_u64().unwrap();
            if seen.last() != Some(&seq) {
                seen.push(seq);
            }
        }
        next = str_of(&page, "next").to_owned();
    }
    assert_eq!(seen, seqs, "every epoch once, in order");
    assert!(
        pages >= 8,
        "~31 KB of small epochs take several 4 KB pages: {pages}"
    );
    // `limit` counts events in whole epochs: a 3-event epoch goes out whole for limit 2; with
    // limit 4, the second 3-event epoch waits for the next page.
    let (_, first) = server.get("/v1/spaces/big/events?limit=1");
    let cursor = str_of(&first, "next").to_owned();
    let (_, second) = server.get(&format!("/v1/spaces/big/events?limit=1&cursor={cursor}"));
    let cursor = str_of(&second, "next").to_owned();
    let (_, page) = server.get(&format!("/v1/spaces/big/events?limit=2&cursor={cursor}"));
    assert_eq!(page["events"].as_array().unwrap().len(), 3, "{page}");
    let (_, page) = server.get(&format!("/v1/spaces/big/events?limit=4&cursor={cursor}"));
    assert_eq!(page["events"].as_array().unwrap().len(), 3, "{page}");
    let (_, page) = server.get(&format!("/v1/spaces/big/events?limit=6&cursor={cursor}"));
    assert_eq!(page["events"].as_array().unwrap().len(), 6, "{page}");

    // A run's events: the same rule, with `after` the last seq read.
    let (s, run) = server.send(
        "POST",
        "/v1/queues/pages/runs",
        &json!({"key_parts": ["pages"], "payload": "{}"}),
    );
    assert_eq!(s, 201, "{run}");
    let run_path = format!("/v1/runs/{}", str_of(&run, "run_id"));
    let mut stored = Vec::new();
    for n in 0..40 {
        let payload = if n == 0 {
            control.clone()
        } else {
            format!("{n:03}{}", "y".repeat(300))
        };
        let (s, body) = server.send(
            "POST",
            &format!("{run_path}/events"),
            &json!({"event_id": format!("e{n}"), "payload": payload}),
        );
        assert_eq!(s, 201, "{body}");
        stored.push(body["seq"].as_u64().unwrap());
    }
    let (s, page) = server.get(&format!("{run_path}/events?limit=1000"));
    assert_eq!(s, 200, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 1, "alone: {page}");
    assert!(array_bytes(&page) > PAGE_BYTES);
    let mut seen = vec![page["events"][0]["seq"].as_u64().unwrap()];
    let mut pages = 0;
    loop {
        let after = seen.last().unwrap();
        let (s, page) = server.get(&format!("{run_path}/events?limit=1000&after={after}"));
        assert_eq!(s, 200, "{page}");
        let events = page["events"].as_array().unwrap();
        if events.is_empty() {
            break;
        }
        pages += 1;
        assert!(array_bytes(&page) <= PAGE_BYTES, "page {pages}");
        seen.extend(events.iter().map(|e| e["seq"].as_u64().unwrap()));
    }
    assert_eq!(seen, stored, "every event once, in order");
    assert!(
        pages >= 3,
        "~14 KB of small events take several 4 KB pages: {pages}"
    );
    let (_, page) = server.get(&format!("{run_path}/events?limit=5&after=1"));
    assert_eq!(
        page["events"].as_array().unwrap().len(),
        5,
        "limit still counts"
    );
    server.stop();
}

#[test]
fn pages_end_at_their_byte_budget_on_sqlite() {
    let (_dir, db) = sqlite_db();
    pages_end_at_their_byte_budget(&db);
}

#[test]
fn pages_end_at_their_byte_budget_on_postgres() {
    common::on_postgres("cairn_pages", pages_end_at_their_byte_budget);
}

/// A `cairn serve` that opens a store while an older build without a contract revision is live
/// in the fleet registry defers that revision, and says so in its log: which revision, and the
/// builds that hold it back (an operator otherwise saw nothing until `doctor` warned).
#[test]
fn serve_logs_a_contract_revision_it_defers_with_the_builds_that_hold_it_back() {
    use cairn_core::spool::{Clock, SystemClock};
    let (_dir, db) = sqlite_db();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let url = cairn::DatabaseUrl::parse(&db).unwrap();
        let m = cairn::testkit::migration_backend(&url, true).unwrap();
        let older = cairn_migrate::cairn_set()
            .up_to("0007_spool_ready")
            .unwrap();
        cairn_migrate::Runner::new(older)
            .open(m.as_ref())
            .await
            .unwrap();
        let now = SystemClock.now();
        let entry = cairn_migrate::FleetEntry {
            instance: "older-instance-1".into(),
            build: "cairn-older-build".into(),
            heads: [("cairn".to_owned(), "0007_spool_ready".to_owned())].into(),
            host: "elsewhere".into(),
            pid: 4242,
            started_at: now,
            last_seen: now,
        };
        m.register(&entry, cairn_core::spool::Timestamp::from_unix_micros(0))
            .await
            .unwrap();
    });
    let server = Server::start(&db, &[]);
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status:?}: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("contract revision deferred"))
        .unwrap_or_else(|| panic!("no deferral logged:\n{stderr}"));
    assert!(
        line.contains("0008_spool_ready_contract")
            && line.contains("cairn-older-build")
            && line.contains("elsewhere"),
        "{line}"
    );
}
