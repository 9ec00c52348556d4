//! Batches of writes (issue 23), on SQLite and Postgres: `POST /v1/queues/{queue}/runs/batch`
//! (one atomic bulk enqueue, per-item 201/200 in the body), `POST /v1/batch` (enqueues, epoch
//! appends, run events and cancels committed together) and `cairn enqueue --from-file` (a
//! JSON-lines file as one bulk enqueue, locally or through `--url`).
//!
//! All or nothing is checked from the outside: after a refused batch the store is listed
//! (`cairn runs`, the space's heads) and a key of the refused batch enqueued alone is new.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

const FULL: &str = "batch-full-token-5e1c7a9d3b";
const READ: &str = "batch-read-token-0f6b2d8e4a";
const DEADLINE: Duration = Duration::from_secs(60);
const UNKNOWN_RUN: &str = "00000000000000000000000000000001";

fn cairn(db: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    common::cairn(db)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(text(&out.stderr), "", "nothing on stderr");
    text(&out.stdout)
}

/// The CLI's error contract: exit 1, nothing on stdout, one `cairn: …` line. The message.
#[track_caller]
fn fails(out: &Output) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "", "nothing on stdout: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    err.strip_prefix("cairn: ")
        .unwrap_or_else(|| panic!("{err}"))
        .trim_end()
        .to_owned()
}

/// The run ids `cairn runs --queue QUEUE` lists.
fn runs(db: &str, queue: &str) -> Vec<String> {
    ok(&cairn(
        db,
        &["runs", "--queue", queue, "--limit", "1000"],
        &[],
    ))
    .lines()
    .map(|l| l.split(' ').next().unwrap().to_owned())
    .collect()
}

/// A running `cairn serve` with a full and a read-only token, killed when dropped.
struct Server {
    child: Child,
    base: String,
    agent: ureq::Agent,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(db: &str) -> Self {
        Self::start_with(db, &[])
    }

    fn start_with(db: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = common::cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .envs(env.iter().copied())
            .env("CAIRN_AUTH__TOKENS", FULL)
            .env("CAIRN_AUTH__READ_TOKENS", READ)
            .env("CAIRN_BACKFILL__ENABLED", "false");
        let serving = common::serve(&mut cmd, DEADLINE);
        let server = Self {
            child: serving.child,
            base: format!("http://{}", serving.addr),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(DEADLINE))
                .build()
                .into(),
        };
        let deadline = Instant::now() + DEADLINE;
        while server.send("GET", "/healthz", None, None).0 != 200 {
            assert!(Instant::now() < deadline, "healthz answers in time");
            std::thread::yield_now();
        }
        server
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let body = body.map(Value::to_string).unwrap_or_default();
        self.send_text(method, path, token, body)
    }

    /// Sends `body` as it is written (a JSON value cannot hold a key twice).
    fn send_text(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: String,
    ) -> (u16, Value) {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("Content-Type", "application/json");
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut resp = self
            .agent
            .run(req.body(body).unwrap())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send("POST", path, Some(FULL), Some(body))
    }

    fn post_text(&self, path: &str, body: &str) -> (u16, Value) {
        self.send_text("POST", path, Some(FULL), body.to_owned())
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.send("GET", path, Some(READ), None)
    }

    /// Enqueues one run through the single route; its status and id.
    fn enqueue(&self, queue: &str, key: &str) -> (u16, String) {
        let (s, body) = self.post(
            &format!("/v1/queues/{queue}/runs"),
            &json!({"key": key, "payload": "p"}),
        );
        assert!(s == 200 || s == 201, "{s} {body}");
        (s, body["run_id"].as_str().unwrap().to_owned())
    }
}

/// A refusal: the status, the code and the index the error names.
#[track_caller]
fn refused(answer: &(u16, Value), status: u16, code: &str, index: Option<usize>) -> String {
    let (s, body) = answer;
    assert_eq!(
        (*s, body["error"]["code"].as_str()),
        (status, Some(code)),
        "{body}"
    );
    assert_eq!(
        body["error"]["index"].as_u64(),
        index.map(|i| i as u64),
        "{body}"
    );
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// `POST /v1/queues/{queue}/runs/batch`: per-item results, atomicity, limits.
fn enqueue_batch_case(server: &Server, db: &str) {
    let (_, stored) = server.enqueue("gate", "stored");
    let (s, body) = server.post(
        "/v1/queues/gate/runs/batch",
        &json!({"items": [
            {"key": "a", "payload": "1"},
            {"key_parts": ["b", "x"], "payload_b64": "/wA=", "priority": 5},
            {"key": "a", "payload": "ignored, the key is the first item's run"},
            {"key": "stored", "payload": "p"},
        ]}),
    );
    assert_eq!(s, 200, "{body}");
    let results = body["results"].as_array().unwrap();
    let field = |name: &str| results.iter().map(|r| r[name].clone()).collect::<Vec<_>>();
    assert_eq!(field("status"), [201, 201, 200, 200], "{body}");
    assert_eq!(field("created"), [true, true, false, false], "{body}");
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids[2], ids[0], "a key repeated in the batch is one run");
    assert_eq!(ids[3], stored, "a stored key answers its run");
    assert_ne!(ids[0], ids[1]);
    let (_, b) = server.get(&format!("/v1/runs/{}", ids[1]));
    assert_eq!(
        (&b["key_parts"], &b["priority"], &b["payload_bytes"]),
        (&json!(["b", "x"]), &json!(5), &json!(2)),
        "{b}"
    );
    let (_, a) = server.get(&format!("/v1/runs/{}", ids[0]));
    assert_eq!(
        a["payload_bytes"], 1,
        "the first item's payload is kept: {a}"
    );
    let mut listed = runs(db, "gate");
    listed.sort();
    let mut expected = vec![ids[0], ids[1], stored.as_str()];
    expected.sort();
    assert_eq!(listed, expected);

    // An invalid item at index k refuses the whole batch, naming k; nothing is written.
    let too_big = "x".repeat(cairn::spool::MAX_RUN_PAYLOAD + 1);
    for (n, (k, bad, says)) in [
        (1, json!({"key_parts": [], "payload": "p"}), "dedup key"),
        (2, json!({"key": "z", "payload": too_big}), "run payload"),
        (0, json!({"key": "z", "payload": 5}), "invalid type"),
        (
            1,
            json!({"key": "z", "payload": "p", "max_attempts": 0}),
            "attempts",
        ),
        (
            2,
            json!({"key": "z", "key_parts": ["z"], "payload": "p"}),
            "exactly one",
        ),
        (
            1,
            json!({"key": "z", "payload": "p", "extra": true}),
            "unknown field `extra`",
        ),
        (1, json!("not an object"), "invalid type"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut items: Vec<Value> = (0..3)
            .map(|i| json!({"key": format!("fresh-{n}-{i}"), "payload": "p"}))
            .collect();
        items[k] = bad;
        let answer = server.post("/v1/queues/atomic/runs/batch", &json!({ "items": items }));
        let msg = refused(&answer, 400, "invalid_batch_item", Some(k));
        assert!(msg.starts_with(&format!("batch item {k}: ")), "{msg}");
        assert!(msg.contains(says), "{says}: {msg}");
    }
    assert_eq!(
        runs(db, "atomic"),
        Vec::<String>::new(),
        "nothing was written"
    );
    assert_eq!(
        server.enqueue("atomic", "fresh-0-0").0,
        201,
        "the key is new"
    );

    // Limits: the item count, before any item is read; a bad queue in the path.
    let items: Vec<Value> = (0..=cairn::spool::MAX_ENQUEUE_BATCH)
        .map(|i| json!({"key": format!("k{i}"), "payload": ""}))
        .collect();
    let answer = server.post("/v1/queues/many/runs/batch", &json!({ "items": items }));
    let msg = refused(&answer, 400, "invalid_input", None);
    assert!(msg.contains("10000"), "{msg}");
    let answer = server.post("/v1/queues/many/runs/batch", &json!({"items": [], "x": 1}));
    refused(&answer, 400, "invalid_input", None);
    let answer = server.post("/v1/queues/%01/runs/batch", &json!({"items": []}));
    refused(&answer, 400, "invalid_input", None);
    assert_eq!(runs(db, "many"), Vec::<String>::new());
    let (s, body) = server.post("/v1/queues/many/runs/batch", &json!({"items": []}));
    assert_eq!((s, &body["results"]), (200, &json!([])), "{body}");
}

/// `POST /v1/batch`: ops commit together, or none does.
fn batch_case(server: &Server, db: &str) {
    let (_, run) = server.enqueue("jobs", "r");
    let (_, doomed) = server.enqueue("jobs", "c");
    let (s, body) = server.post(
        "/v1/batch",
        &json!({"ops": [
            {"op": "enqueue", "queue": "jobs", "key_parts": ["j", "1"], "payload": "{}"},
            {"op": "append", "space": "docs", "events": [{"kind": "doc.edit", "payload": "hello"}]},
            {"op": "append", "space": "docs",
             "events": [{"kind": "doc.edit", "key": "k", "payload_b64": "/wA="}]},
            {"op": "append_event", "run_id": run, "event_id": "built", "payload": "ok"},
            {"op": "cancel", "run_id": doomed},
            {"op": "enqueue", "queue": "jobs", "key_parts": ["j", "1"], "payload": "dup"},
        ]}),
    );
    assert_eq!(s, 200, "{body}");
    let r = body["results"].as_array().unwrap();
    assert_eq!(r.len(), 6, "{body}");
    let ops: Vec<&Value> = r.iter().map(|o| &o["op"]).collect();
    assert_eq!(
        ops,
        [
            "enqueue",
            "append",
            "append",
            "append_event",
            "cancel",
            "enqueue"
        ]
    );
    assert_eq!(
        (&r[0]["created"], &r[0]["status"]),
        (&json!(true), &json!(201))
    );
    assert_eq!(
        (&r[5]["created"], &r[5]["status"], &r[5]["run_id"]),
        (&json!(false), &json!(200), &r[0]["run_id"]),
        "the same key twice in one batch is one run"
    );
    assert_eq!((&r[1]["seq"], &r[1]["parents"]), (&json!(1), &json!([])));
    assert_eq!(
        (&r[2]["seq"], &r[2]["parents"]),
        (&json!(2), &json!([r[1]["id"]])),
        "two appends to one space chain"
    );
    assert_eq!(
        (&r[3]["seq"], &r[3]["created"], &r[3]["status"]),
        (&json!(1), &json!(true), &json!(201))
    );
    assert_eq!(
        (&r[4]["run_id"], &r[4]["state"]),
        (&json!(doomed), &json!("canceled"))
    );
    // Everything is there, together.
    let (_, heads) = server.get("/v1/spaces/docs/heads");
    assert_eq!(
        heads["heads"],
        json!([{"seq": 2, "id": r[2]["id"]}]),
        "{heads}"
    );
    let (_, events) = server.get(&format!("/v1/runs/{run}/events"));
    assert_eq!(events["events"][0]["event_id"], "built", "{events}");
    assert_eq!(events["events"][0]["payload"], "ok", "{events}");
    let (_, canceled) = server.get(&format!("/v1/runs/{doomed}"));
    assert_eq!(canceled["state"], "canceled", "{canceled}");
    let j1 = r[0]["run_id"].as_str().unwrap();
    let (_, queued) = server.get(&format!("/v1/runs/{j1}"));
    assert_eq!(queued["state"], "queued", "{queued}");
    // A run event the run already holds: 200 in the body.
    let (s, body) = server.post(
        "/v1/batch",
        &json!({"ops": [{"op": "append_event", "run_id": run, "event_id": "built", "payload": "ok"}]}),
    );
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        (
            &body["results"][0]["created"],
            &body["results"][0]["status"]
        ),
        (&json!(false), &json!(200))
    );
    let jobs = runs(db, "jobs");
    assert_eq!(jobs.len(), 3, "{jobs:?}");

    // An op the store refuses in the middle rolls back the ops before it.
    let answer = server.post(
        "/v1/batch",
        &json!({"ops": [
            {"op": "enqueue", "queue": "jobs", "key": "j-fail", "payload": "p"},
            {"op": "append", "space": "docs-fail", "events": [{"kind": "k", "payload": "p"}]},
            {"op": "append", "space": "docs", "events": [{"kind": "k", "payload": "p"}]},
            {"op": "append_event", "run_id": UNKNOWN_RUN, "event_id": "e", "payload": "p"},
            {"op": "enqueue", "queue": "jobs", "key": "j-fail-2", "payload": "p"},
        ]}),
    );
    let msg = refused(&answer, 404, "unknown_run", Some(3));
    assert!(msg.starts_with("op 3: "), "{msg}");
    assert!(msg.contains("nothing of it was written"), "{msg}");
    assert_eq!(
        runs(db, "jobs"),
        jobs,
        "the enqueue before it was rolled back"
    );
    let (s, body) = server.get("/v1/spaces/docs-fail/heads");
    assert_eq!(s, 404, "the append before it was rolled back: {body}");
    let (_, heads) = server.get("/v1/spaces/docs/heads");
    assert_eq!(heads["heads"][0]["seq"], 2, "{heads}");
    // A run whose stream is closed refuses its event: 409, rolled back as well.
    let (s, body) = server.post(&format!("/v1/runs/{run}/close"), &json!({}));
    assert_eq!(s, 200, "{body}");
    let answer = server.post(
        "/v1/batch",
        &json!({"ops": [
            {"op": "append", "space": "docs", "events": [{"kind": "k", "payload": "late"}]},
            {"op": "append_event", "run_id": run, "event_id": "late", "payload": "p"},
        ]}),
    );
    refused(&answer, 409, "run_closed", Some(1));
    let (_, heads) = server.get("/v1/spaces/docs/heads");
    assert_eq!(heads["heads"][0]["seq"], 2, "{heads}");

    // An op that does not read refuses the batch before anything is opened, naming it.
    let good = json!({"op": "enqueue", "queue": "jobs", "key": "v", "payload": "p"});
    for (bad, says) in [
        (json!({"op": "frobnicate"}), "names no op"),
        (
            json!({"queue": "jobs", "key": "v", "payload": "p"}),
            "has no `op`",
        ),
        (json!(7), "not a JSON object"),
        (
            json!({"op": "enqueue", "queue": "", "key": "v", "payload": "p"}),
            "queue",
        ),
        (
            json!({"op": "enqueue", "queue": "jobs", "payload": "p"}),
            "dedup key",
        ),
        (
            json!({"op": "append", "space": "s", "events": "nope"}),
            "invalid type",
        ),
        (
            json!({"op": "append", "space": "\u{0}cairn/x", "events": [{"kind": "k", "payload": "p"}]}),
            "reserved",
        ),
        (
            json!({"op": "append_event", "run_id": run, "event_id": "cairn:retry:9", "payload": "p"}),
            "reserved",
        ),
        (json!({"op": "cancel", "run_id": "not-a-run"}), "run id"),
        (
            json!({"op": "cancel", "run_id": run, "why": "x"}),
            "unknown field `why`",
        ),
    ] {
        let answer = server.post("/v1/batch", &json!({"ops": [good, bad, good]}));
        let msg = refused(&answer, 400, "invalid_batch_item", Some(1));
        assert!(msg.starts_with("batch item 1: "), "{msg}");
        assert!(msg.contains(says), "{says}: {msg}");
    }
    let ops = vec![good.clone(); 1001];
    let msg = refused(
        &server.post("/v1/batch", &json!({ "ops": ops })),
        400,
        "invalid_input",
        None,
    );
    assert!(msg.contains("1000"), "{msg}");
    assert_eq!(runs(db, "jobs"), jobs, "no refused batch wrote anything");
    assert_eq!(server.enqueue("jobs", "v").0, 201, "the key is new");
    assert_eq!(server.enqueue("jobs", "j-fail").0, 201, "the key is new");
    let (s, body) = server.post("/v1/batch", &json!({"ops": []}));
    assert_eq!((s, &body["results"]), (200, &json!([])), "{body}");
}

/// Both routes are writes: a read-only token gets 403, no token 401.
fn auth_case(server: &Server) {
    let enqueue = json!({"items": [{"key": "ro", "payload": "p"}]});
    let batch = json!({"ops": [{"op": "enqueue", "queue": "ro", "key": "ro", "payload": "p"}]});
    for (path, body) in [
        ("/v1/queues/ro/runs/batch", &enqueue),
        ("/v1/batch", &batch),
    ] {
        let answer = server.send("POST", path, Some(READ), Some(body));
        refused(&answer, 403, "forbidden", None);
        let answer = server.send("POST", path, None, Some(body));
        refused(&answer, 401, "unauthorized", None);
    }
}

/// `cairn enqueue --from-file --url` through the running server: one batch over HTTP.
fn cli_through_server_case(server: &Server, db: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("items.jsonl");
    std::fs::write(
        &file,
        "{\"key\":\"via-http\",\"payload\":\"1\"}\n{\"key\":\"stored\",\"payload\":\"2\"}\n",
    )
    .unwrap();
    let (_, stored) = server.enqueue("gate", "stored");
    let args = |file: &Path| {
        [
            "enqueue",
            "--queue",
            "gate",
            "--from-file",
            file.to_str().unwrap(),
            "--url",
            &server.base,
        ]
        .map(str::to_owned)
    };
    let a = args(&file);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = ok(&cairn(db, &a, &[("CAIRN_TOKEN", FULL)]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].ends_with(" created"), "{out}");
    assert_eq!(lines[1], format!("{stored} existing"));
    assert_eq!(lines[2], "items=2 created=1 existing=1");
    let id = lines[0].split(' ').next().unwrap();
    assert!(runs(db, "gate").iter().any(|r| r == id), "stored: {id}");
    // The server's refusal is reported, never bypassed.
    let msg = fails(&cairn(db, &a, &[("CAIRN_TOKEN", READ)]));
    assert!(msg.contains("403 forbidden"), "{msg}");
}

fn http_case(db: &str) {
    let server = Server::start(db);
    enqueue_batch_case(&server, db);
    batch_case(&server, db);
    auth_case(&server);
    cli_through_server_case(&server, db);
}

#[test]
fn http_batches_are_all_or_nothing_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    http_case(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn http_batches_are_all_or_nothing_on_postgres() {
    common::on_postgres("cairn_batch_http", http_case);
}

/// `cairn enqueue --from-file` straight to the store.
fn cli_case(db: &str) {
    let dir = tempfile::tempdir().unwrap();
    let stored = ok(&cairn(
        db,
        &[
            "enqueue",
            "--queue",
            "q",
            "--key",
            "stored",
            "--payload",
            "p",
        ],
        &[],
    ));
    let stored = stored.split(' ').next().unwrap().to_owned();
    let file = dir.path().join("items.jsonl");
    std::fs::write(
        &file,
        "{\"key\":\"one\",\"payload\":\"1\"}\n\
         \n\
         {\"key_parts\":[\"two\",\"x\"],\"payload_b64\":\"/wA=\",\"priority\":2}\n\
         {\"key\":\"one\",\"payload\":\"again\"}\n\
         {\"key\":\"stored\",\"payload\":\"p\"}\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let out = ok(&cairn(
        db,
        &["enqueue", "--queue", "q", "--from-file", f],
        &[],
    ));
    let lines: Vec<(&str, &str)> = out
        .lines()
        .map(|l| l.split_once(' ').unwrap_or((l, "")))
        .collect();
    assert_eq!(lines.len(), 5, "{out}");
    let how: Vec<&str> = lines.iter().map(|l| l.1).collect();
    assert_eq!(
        how,
        [
            "created",
            "created",
            "existing",
            "existing",
            "created=2 existing=2"
        ],
        "{out}"
    );
    assert_eq!(lines[4].0, "items=4", "{out}");
    assert_eq!(lines[2].0, lines[0].0, "a repeated key is one run");
    assert_eq!(lines[3].0, stored, "a stored key answers its run");
    let mut listed = runs(db, "q");
    listed.sort();
    let mut expected = vec![lines[0].0, lines[1].0, stored.as_str()];
    expected.sort();
    assert_eq!(listed, expected);
    let shown = ok(&cairn(db, &["run", "show", lines[1].0], &[]));
    assert!(shown.contains("\npriority 2\n"), "{shown}");
    assert!(shown.contains("\npayload_bytes 2\n"), "{shown}");

    // `-` reads stdin.
    let mut child = common::cairn(db)
        .args(["enqueue", "--queue", "q", "--from-file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"key\":\"three\",\"payload\":\"3\"}\n")
        .unwrap();
    let out = ok(&child.wait_with_output().unwrap());
    assert!(
        out.ends_with(" created\nitems=1 created=1 existing=0\n"),
        "{out}"
    );

    // A bad line refuses the whole file, naming the line; nothing is written.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"key\":\"fine\",\"payload\":\"1\"}\n\n{\"key\":\"broken\",\"payload\":\"1\",\"max_attempts\":0}\n{\"key\":\"later\",\"payload\":\"1\"}\n",
    )
    .unwrap();
    let msg = fails(&cairn(
        db,
        &[
            "enqueue",
            "--queue",
            "bad",
            "--from-file",
            bad.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(msg.starts_with("line 3: "), "{msg}");
    assert!(msg.contains("attempts"), "{msg}");
    assert!(msg.ends_with("nothing was written"), "{msg}");
    assert_eq!(runs(db, "bad"), Vec::<String>::new());

    // More items than one atomic enqueue takes: refused as the file is read.
    let many = dir.path().join("many.jsonl");
    let lines: String = (0..=cairn::spool::MAX_ENQUEUE_BATCH)
        .map(|i| format!("{{\"key\":\"k{i}\",\"payload\":\"\"}}\n"))
        .collect();
    std::fs::write(&many, lines).unwrap();
    let msg = fails(&cairn(
        db,
        &[
            "enqueue",
            "--queue",
            "bad",
            "--from-file",
            many.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(msg.contains("more than 10000 items"), "{msg}");
    assert_eq!(runs(db, "bad"), Vec::<String>::new());

    // A missing file is one line; --from-file with a single run's flags is a usage error.
    let missing = dir.path().join("missing.jsonl");
    fails(&cairn(
        db,
        &[
            "enqueue",
            "--queue",
            "bad",
            "--from-file",
            missing.to_str().unwrap(),
        ],
        &[],
    ));
    let usage = cairn(
        db,
        &["enqueue", "--queue", "bad", "--from-file", f, "--key", "k"],
        &[],
    );
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage.stderr));
    let usage = cairn(db, &["enqueue", "--queue", "bad", "--payload", "p"], &[]);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage.stderr));
    assert_eq!(runs(db, "bad"), Vec::<String>::new());
}

#[test]
fn cli_enqueue_from_file_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    cli_case(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn cli_enqueue_from_file_on_postgres() {
    common::on_postgres("cairn_batch_cli", cli_case);
}

/// A key written twice in a batch item, an op or a `--from-file` line is refused as the single
/// route refuses it in its body (never "the last one wins"), and nothing is written.
fn duplicate_keys_case(db: &str) {
    let server = Server::start(db);
    let (_, run) = server.enqueue("dup-runs", "r");
    let single = server.post_text(
        "/v1/queues/dq/runs",
        r#"{"key":"s2","key":"s3","payload":"x"}"#,
    );
    assert!(
        refused(&single, 400, "invalid_input", None).contains("duplicate field `key`"),
        "{single:?}"
    );
    let answer = server.post_text(
        "/v1/queues/dq/runs/batch",
        r#"{"items":[{"key":"d1","payload":"x"},{"key":"d2","key":"d3","payload":"x"}]}"#,
    );
    let msg = refused(&answer, 400, "invalid_batch_item", Some(1));
    assert!(msg.starts_with("batch item 1: "), "{msg}");
    assert!(msg.contains("duplicate field `key`"), "{msg}");
    let good = r#"{"op":"enqueue","queue":"dq","key":"d0","payload":"x"}"#;
    for (bad, field) in [
        (
            r#"{"op":"cancel","op":"enqueue","queue":"dq","key":"d4","payload":"x"}"#.to_owned(),
            "op",
        ),
        (
            r#"{"op":"enqueue","queue":"dq","queue":"dq2","key":"d5","payload":"x"}"#.to_owned(),
            "queue",
        ),
        (
            r#"{"op":"enqueue","queue":"dq","key":"d6","payload":"x","payload":"y"}"#.to_owned(),
            "payload",
        ),
        (
            format!(
                r#"{{"op":"append_event","run_id":"{run}","event_id":"cairn:zz","event_id":"ok2","payload":"p"}}"#
            ),
            "event_id",
        ),
        (
            format!(r#"{{"op":"cancel","run_id":"{run}","run_id":"{run}"}}"#),
            "run_id",
        ),
        (
            r#"{"op":"append","space":"dup-space","events":[{"kind":"k","kind":"j","payload":"p"}]}"#
                .to_owned(),
            "kind",
        ),
    ] {
        let body = format!(r#"{{"ops":[{good},{bad}]}}"#);
        let answer = server.post_text("/v1/batch", &body);
        let msg = refused(&answer, 400, "invalid_batch_item", Some(1));
        assert!(msg.starts_with("batch item 1: "), "{bad}: {msg}");
        assert!(msg.contains(&format!("duplicate field `{field}`")), "{bad}: {msg}");
    }
    assert_eq!(runs(db, "dq"), Vec::<String>::new(), "nothing was written");
    assert_eq!(runs(db, "dq2"), Vec::<String>::new(), "nothing was written");
    let (s, body) = server.get("/v1/spaces/dup-space/heads");
    assert_eq!(s, 404, "{body}");
    let (_, events) = server.get(&format!("/v1/runs/{run}/events"));
    assert_eq!(events["events"], json!([]), "{events}");
    let (_, shown) = server.get(&format!("/v1/runs/{run}"));
    assert_eq!(shown["state"], "queued", "{shown}");

    // A `--from-file` line: the same item, the same refusal, straight or through --url.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dup.jsonl");
    std::fs::write(
        &file,
        "{\"key\":\"h1\",\"payload\":\"a\"}\n{\"key\":\"h2\",\"key\":\"h3\",\"payload\":\"a\"}\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    for url in [None, Some(server.base.as_str())] {
        let mut args = vec!["enqueue", "--queue", "dq", "--from-file", f];
        args.extend(url.iter().flat_map(|u| ["--url", *u]));
        let msg = fails(&cairn(db, &args, &[("CAIRN_TOKEN", FULL)]));
        assert!(msg.starts_with("line 2: "), "{msg}");
        assert!(msg.contains("duplicate field `key`"), "{msg}");
    }
    assert_eq!(runs(db, "dq"), Vec::<String>::new(), "nothing was written");
}

#[test]
fn duplicate_keys_in_batches_are_refused_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    duplicate_keys_case(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn duplicate_keys_in_batches_are_refused_on_postgres() {
    common::on_postgres("cairn_batch_dup", duplicate_keys_case);
}

/// `POST /v1/batch` bounds its ops' payloads together (enqueue payloads, run event payloads,
/// epoch event payloads, decoded) by `MAX_ENQUEUE_BATCH_BYTES`, whatever the body limit.
fn batch_payload_cap_case(db: &str) {
    let server = Server::start_with(db, &[("CAIRN_LIMITS__MAX_BODY_BYTES", "209715200")]);
    let (_, run) = server.enqueue("cap-runs", "r");
    let mib = cairn::spool::MAX_RUN_PAYLOAD;
    let epoch = "x".repeat(cairn::MAX_EVENT_PAYLOAD);
    let one = "x".repeat(mib);
    // 3 × 16 MiB of epoch events, 1 MiB of run event (base64, counted decoded), 15 × 1 MiB
    // of enqueues: 64 MiB, then one byte more.
    let b64 = "eHh4".repeat(mib / 3) + "eA==";
    assert_eq!(mib / 3 * 3 + 1, mib);
    let mut ops = vec![format!(
        r#"{{"op":"append_event","run_id":"{run}","event_id":"e","payload_b64":"{b64}"}}"#
    )];
    for _ in 0..3 {
        ops.push(format!(
            r#"{{"op":"append","space":"cap","events":[{{"kind":"k","payload":"{epoch}"}}]}}"#
        ));
    }
    for i in 0..15 {
        ops.push(format!(
            r#"{{"op":"enqueue","queue":"cap","key":"k{i}","payload":"{one}"}}"#
        ));
    }
    let at_limit = ops.join(",");
    let over = format!(r#"{at_limit},{{"op":"enqueue","queue":"cap","key":"last","payload":"x"}}"#);
    let answer = server.post_text("/v1/batch", &format!(r#"{{"ops":[{over}]}}"#));
    let msg = refused(&answer, 400, "invalid_input", None);
    assert!(
        msg.contains(&cairn::spool::MAX_ENQUEUE_BATCH_BYTES.to_string()),
        "{msg}"
    );
    assert_eq!(runs(db, "cap"), Vec::<String>::new(), "nothing was written");
    let (s, body) = server.get("/v1/spaces/cap/heads");
    assert_eq!(s, 404, "{body}");
    let (_, events) = server.get(&format!("/v1/runs/{run}/events"));
    assert_eq!(events["events"], json!([]), "{events}");
    // At the limit exactly, the batch commits.
    let (s, body) = server.post_text("/v1/batch", &format!(r#"{{"ops":[{at_limit}]}}"#));
    assert_eq!(s, 200, "{body}");
    assert_eq!(runs(db, "cap").len(), 15);
}

#[test]
fn batch_payloads_are_capped_together_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    batch_payload_cap_case(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn batch_payloads_are_capped_together_on_postgres() {
    common::on_postgres("cairn_batch_cap", batch_payload_cap_case);
}

/// Concurrent `/v1/batch` requests whose enqueues share keys in opposite orders all commit:
/// a batch writes its keys in key order, so the two never deadlock (the server no longer reruns
/// a batch; `batch_concurrency.rs` has 16 clients). Every key ends as one run.
fn concurrent_batches_case(db: &str) {
    let server = std::sync::Arc::new(Server::start(db));
    for round in 0..5 {
        let keys: Vec<String> = (0..100).map(|i| format!("r{round}-{i:03}")).collect();
        let ops = |keys: &[String]| -> Value {
            json!({"ops": keys.iter().map(|k| json!({
                "op": "enqueue", "queue": "overlap", "key": k, "payload": "p"
            })).collect::<Vec<_>>()})
        };
        let forward = ops(&keys);
        let backward = ops(&keys.iter().rev().cloned().collect::<Vec<_>>());
        let handles: Vec<_> = [forward, backward]
            .into_iter()
            .map(|body| {
                let server = server.clone();
                std::thread::spawn(move || server.post("/v1/batch", &body))
            })
            .collect();
        for h in handles {
            let (status, body) = h.join().unwrap();
            assert_eq!(status, 200, "round {round}: {body}");
        }
    }
    assert_eq!(runs(db, "overlap").len(), 500, "one run per key");
}

#[test]
fn concurrent_batches_of_shared_keys_commit_on_postgres() {
    common::on_postgres("cairn_batch_deadlock", concurrent_batches_case);
}

#[test]
fn concurrent_batches_of_shared_keys_commit_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_batches_case(dir.path().join("s.db").to_str().unwrap());
}
