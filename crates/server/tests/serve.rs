//! `cairn serve`, run as an operator runs it: the real binary on a loopback port, driven over
//! HTTP. Every wait polls a condition with a deadline; nothing sleeps a fixed time.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const FULL: &str = "full-token-6f1d2c9a8b7e";
const READ: &str = "read-token-3a9e7c1f5d2b";
const FILE_TOKEN: &str = "file-token-0b8d4e2a9c61";

/// How long a server may take to start, answer or stop.
const DEADLINE: Duration = Duration::from_secs(30);

fn cairn(db: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.env_remove("CAIRN_DATABASE")
        .env_remove("CAIRN_AUTH__TOKENS")
        .env_remove("CAIRN_AUTH__READ_TOKENS")
        .env_remove("CAIRN_LISTEN")
        .args(["--database", db]);
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
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn cairn serve");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        {
            let sink = stderr.clone();
            let mut pipe = child.stderr.take().unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            // Keep draining so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let first = rx
            .recv_timeout(DEADLINE)
            .expect("the server prints its address in time");
        let Some(first) = first else {
            let status = child.wait().unwrap();
            panic!(
                "the server exited ({status:?}) before listening: {}",
                String::from_utf8_lossy(&stderr.lock().unwrap())
            );
        };
        let addr = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line is `listening on ADDR`: {first:?}"))
            .to_owned();
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pg = rt
        .block_on(cairn::testkit::postgres::testkit::test_server_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_serve");
    let sep = if pg.contains('?') { '&' } else { '?' };
    let result = std::panic::catch_unwind(|| flow(&format!("{pg}{sep}cairn_schema={schema}")));
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&mut conn)
            .await
            .unwrap();
    });
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
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
    assert_eq!(routes.len(), 18, "{routes:?}");
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
    let (dir, db) = sqlite_db();
    let token_file = dir.path().join("tokens");
    std::fs::write(&token_file, format!("# operators\n\n{FILE_TOKEN}\n")).unwrap();
    let server = Server::start(&db, &["--token-file", token_file.to_str().unwrap()]);
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
        if method == "GET" {
            assert!(s == 200, "{method} {path} with a read token: {s} {answer}");
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
    for t in [FULL, READ, FILE_TOKEN] {
        assert!(!stderr.contains(t), "a token in stderr: {stderr}");
    }
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
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pg = rt
        .block_on(cairn::testkit::postgres::testkit::test_server_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_serve_two");
    let sep = if pg.contains('?') { '&' } else { '?' };
    let db = format!("{pg}{sep}cairn_schema={schema}");
    let result = std::panic::catch_unwind(|| {
        let servers = [Server::start(&db, &[]), Server::start(&db, &[])];
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
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&mut conn)
            .await
            .unwrap();
    });
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
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
