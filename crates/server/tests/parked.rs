//! Parked runs an operator can act on (issue 25): `cairn run retry ID`, `cairn run discard ID`,
//! `cairn runs retry --queue Q --state parked [--reason-like TEXT]` and their HTTP routes (write
//! token), each recorded as an event of the run; and doctor's verdict on parked runs — a
//! warning (exit 0, HTTP 200) unless `doctor.parked_threshold` is passed. On SQLite and
//! Postgres.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

const FULL: &str = "full-token-2c7e9a1f4b6d";
const READ: &str = "read-token-8d3b5f0a2e9c";
const DEADLINE: Duration = Duration::from_secs(30);

/// Parks one run per `(key, reason)` in `queue` (which holds no other due run) of the store
/// at `db` (created when missing) through the library: enqueue, claim, permanent nack.
/// Returns the run ids.
fn park(db: &str, queue: &str, runs: &[(&str, &str)]) -> Vec<String> {
    use cairn::spool::{EnqueueOptions, NackKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = cairn::Store::open(db).await.unwrap();
        let spool = store.spool();
        let queue = cairn::QueueName::new(queue).unwrap();
        let mut ids = Vec::new();
        for (key, reason) in runs {
            let key = cairn::DedupKey::from_parts([*key]).unwrap();
            let run = spool
                .enqueue(&queue, &key, b"p".to_vec(), EnqueueOptions::default())
                .await
                .unwrap();
            let consumer = cairn::ConsumerId::new("w").unwrap();
            let claimed = spool
                .claim(&queue, &consumer, Duration::from_secs(60), 1)
                .await
                .unwrap();
            assert_eq!(claimed[0].run_id, run.run_id, "one due run at a time");
            spool
                .nack(run.run_id, claimed[0].token, NackKind::Permanent, reason)
                .await
                .unwrap();
            ids.push(run.run_id.to_string());
        }
        store.close().await.unwrap();
        ids
    })
}

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
    text(&out.stdout)
}

/// `cairn doctor --json` with `env`: its exit code and the spool check.
fn doctor_spool(db: &str, env: &[(&str, &str)]) -> (Option<i32>, Value) {
    let out = cairn(db, &["doctor", "--json"], env);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    let spool = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "spool")
        .cloned()
        .unwrap_or_else(|| panic!("no spool check: {report}"));
    (out.status.code(), spool)
}

/// The CLI on the store at `db`.
fn cli_case(db: &str) {
    let ids = park(
        db,
        "gate",
        &[
            ("a", "HTTP 403 from the collector"),
            ("b", "bad input"),
            ("c", "HTTP 403 again"),
        ],
    );

    // Parked runs are a warning: exit 0, with the commands that act on them.
    let (code, spool) = doctor_spool(db, &[]);
    assert_eq!(code, Some(0), "{spool}");
    assert_eq!(
        (&spool["ok"], &spool["level"]),
        (&json!(true), &json!("warning"))
    );
    assert!(
        spool["detail"].as_str().unwrap().contains("parked=3"),
        "{spool}"
    );
    let repair = spool["repair"].as_str().unwrap();
    for cmd in [
        "cairn run retry ID",
        "cairn runs retry --queue Q --state parked",
        "cairn run discard ID",
    ] {
        assert!(repair.contains(cmd), "{repair}");
    }
    let lines = ok(&cairn(db, &["doctor"], &[]));
    assert!(lines.contains("WARNING spool: "), "{lines}");
    // Past the configured threshold they are a problem: exit 1.
    let (code, spool) = doctor_spool(db, &[("CAIRN_DOCTOR__PARKED_THRESHOLD", "2")]);
    assert_eq!(code, Some(1), "{spool}");
    assert_eq!(
        (&spool["ok"], &spool["level"]),
        (&json!(false), &json!("problem"))
    );
    let (code, _) = doctor_spool(db, &[("CAIRN_DOCTOR__PARKED_THRESHOLD", "3")]);
    assert_eq!(code, Some(0));

    // One run: retried, with its event naming who asked and why it was parked.
    let out = ok(&cairn(db, &["run", "retry", &ids[0], "--by", "alice"], &[]));
    assert_eq!(out, format!("retried {} event 1\n", ids[0]));
    let shown = ok(&cairn(db, &["run", "show", &ids[0]], &[]));
    assert!(shown.contains("state queued\n"), "{shown}");
    assert!(shown.contains("attempts 0/10\n"), "{shown}");
    let event = shown
        .lines()
        .find_map(|l| l.strip_prefix("event 1 cairn:retry:1 "))
        .unwrap_or_else(|| panic!("no retry event: {shown}"));
    let event: Value = serde_json::from_str(event).unwrap();
    assert_eq!(
        (
            &event["cairn"],
            &event["by"],
            &event["parked_reason"],
            &event["attempts"]
        ),
        (
            &json!("retry"),
            &json!("alice"),
            &json!("HTTP 403 from the collector"),
            &json!(1)
        ),
        "{event}"
    );
    assert!(event["at_us"].as_i64().unwrap() > 0, "when: {event}");
    // Not parked any more: refused with its state, exit 1, nothing written.
    let again = cairn(db, &["run", "retry", &ids[0]], &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("cannot requeue a run that is queued"),
        "{}",
        text(&again.stderr)
    );
    assert!(ok(&cairn(db, &["run", "show", &ids[0]], &[])).contains("events 1\n"));
    let unknown = cairn(
        db,
        &["run", "discard", "00000000000000000000000000000001"],
        &[],
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        text(&unknown.stderr).contains("does not exist"),
        "{}",
        text(&unknown.stderr)
    );

    // Many runs of a queue by reason: the other 403 run only.
    let out = ok(&cairn(
        db,
        &[
            "runs",
            "retry",
            "--queue",
            "gate",
            "--state",
            "parked",
            "--reason-like",
            "403",
        ],
        &[],
    ));
    assert_eq!(out, "retried=1 unmatched=1 skipped=0 failed=0\n");
    assert!(ok(&cairn(db, &["run", "show", &ids[2]], &[])).contains("state queued\n"));
    // Only parked runs can be retried in bulk: any other state is a usage error.
    let usage = cairn(
        db,
        &["runs", "retry", "--queue", "gate", "--state", "queued"],
        &[],
    );
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage.stderr));

    // The last one: discarded for good.
    let out = ok(&cairn(db, &["run", "discard", &ids[1]], &[]));
    assert_eq!(out, format!("discarded {} event 1\n", ids[1]));
    let shown = ok(&cairn(db, &["run", "show", &ids[1]], &[]));
    assert!(shown.contains("state canceled\n"), "{shown}");
    assert!(shown.contains("reason bad input\n"), "{shown}");
    assert!(shown.contains("event 1 cairn:discard:1 "), "{shown}");
    let (code, spool) = doctor_spool(db, &[("CAIRN_DOCTOR__PARKED_THRESHOLD", "0")]);
    assert_eq!(code, Some(0), "no parked run is left: {spool}");
    assert_eq!(spool["level"], "ok");
}

#[test]
fn cli_retry_discard_and_doctor_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    cli_case(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn cli_retry_discard_and_doctor_on_postgres() {
    common::on_postgres("cairn_parked_cli", cli_case);
}

/// A running `cairn serve`, killed when dropped.
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
    fn start(db: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = common::cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", FULL)
            .env("CAIRN_AUTH__READ_TOKENS", READ)
            .env("CAIRN_BACKFILL__ENABLED", "false")
            .envs(env.iter().copied());
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
        while server.call("GET", "/healthz", None).0 != 200 {
            assert!(Instant::now() < deadline, "healthz answers in time");
            std::thread::yield_now();
        }
        server
    }

    /// A request without a body; the status and the JSON answer.
    fn call(&self, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut resp = self
            .agent
            .run(req.body(()).unwrap())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// A POST of a JSON body; the status and the JSON answer.
    fn post_json(&self, path: &str, token: &str, body: &Value) -> (u16, Value) {
        let req = ureq::http::Request::builder()
            .method("POST")
            .uri(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {token}"))
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .unwrap();
        let mut resp = self
            .agent
            .run(req)
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    fn spool_check(&self) -> (u16, Value) {
        let (status, report) = self.call("GET", "/v1/doctor", Some(READ));
        let spool = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "spool")
            .cloned()
            .unwrap();
        (status, spool)
    }
}

/// The routes on the store at `db`.
fn http_case(db: &str) {
    let ids = park(
        db,
        "gate",
        &[("a", "broken"), ("b", "HTTP 403"), ("c", "HTTP 403 too")],
    );
    let server = Server::start(db, &[]);
    let (status, spool) = server.spool_check();
    assert_eq!(status, 200, "parked runs leave the store healthy: {spool}");
    assert_eq!(spool["level"], "warning", "{spool}");

    let retry = format!("/v1/runs/{}/retry", ids[0]);
    let (s, body) = server.call("POST", &retry, Some(READ));
    assert_eq!(s, 403, "a read-only token may not retry: {body}");
    let (s, body) = server.call("POST", &retry, None);
    assert_eq!(s, 401, "{body}");
    let (s, body) = server.call("POST", &retry, Some(FULL));
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        (
            &body["run_id"],
            &body["state"],
            &body["parked_reason"],
            &body["event_seq"]
        ),
        (
            &json!(ids[0]),
            &json!("queued"),
            &json!("broken"),
            &json!(1)
        )
    );
    let (_, events) = server.call("GET", &format!("/v1/runs/{}/events", ids[0]), Some(READ));
    assert_eq!(events["events"][0]["event_id"], "cairn:retry:1", "{events}");
    let recorded: Value =
        serde_json::from_str(events["events"][0]["payload"].as_str().unwrap()).unwrap();
    assert_eq!(
        recorded,
        json!({"cairn": "retry", "by": "http", "at_us": body["at_us"],
               "parked_reason": "broken", "attempts": 1})
    );
    let (s, body) = server.call("POST", &retry, Some(FULL));
    assert_eq!(
        (s, &body["error"]["code"]),
        (409, &json!("invalid_transition")),
        "{body}"
    );
    // The spool's event ids are not a producer's: refused, nothing written.
    let append = format!("/v1/runs/{}/events", ids[0]);
    for id in ["cairn:retry:2", "cairn:retry:1"] {
        let (s, body) = server.post_json(&append, FULL, &json!({"event_id": id, "payload": "x"}));
        assert_eq!(
            (s, &body["error"]["code"]),
            (400, &json!("reserved")),
            "{id}: {body}"
        );
    }
    let (s, body) = server.post_json(&append, FULL, &json!({"event_id": "p1", "payload": "x"}));
    assert_eq!((s, &body["seq"]), (201, &json!(2)), "{body}");
    let (s, body) = server.call(
        "POST",
        "/v1/runs/00000000000000000000000000000001/discard",
        Some(FULL),
    );
    assert_eq!(
        (s, &body["error"]["code"]),
        (404, &json!("unknown_run")),
        "{body}"
    );

    let (s, body) = server.call(
        "POST",
        "/v1/queues/gate/parked/retry?reason_like=too",
        Some(FULL),
    );
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        body,
        json!({"retried": 1, "unmatched": 1, "skipped": 0, "failed": 0, "failed_runs": []})
    );
    let (s, body) = server.call("POST", &format!("/v1/runs/{}/discard", ids[1]), Some(FULL));
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        (&body["state"], &body["event_seq"]),
        (&json!("canceled"), &json!(1))
    );
    let (_, run) = server.call("GET", &format!("/v1/runs/{}", ids[1]), Some(READ));
    assert_eq!(run["state"], "canceled", "{run}");
    let (status, spool) = server.spool_check();
    assert_eq!((status, &spool["level"]), (200, &json!("ok")), "{spool}");
    drop(server);

    // Past the configured threshold, a parked run makes the store unhealthy: 503.
    park(db, "late", &[("d", "broken again")]);
    let strict = Server::start(db, &[("CAIRN_DOCTOR__PARKED_THRESHOLD", "0")]);
    let (status, spool) = strict.spool_check();
    assert_eq!(status, 503, "{spool}");
    assert_eq!(
        (&spool["ok"], &spool["level"]),
        (&json!(false), &json!("problem"))
    );
}

#[test]
fn http_retry_discard_and_doctor_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    http_case(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn http_retry_discard_and_doctor_on_postgres() {
    common::on_postgres("cairn_parked_http", http_case);
}
