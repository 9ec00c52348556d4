//! A SQLite file replaced under a running `cairn serve` is detected, not corrupted (issue 21,
//! item 13): after `mv other.db store.db` every write answers 503 `store_replaced`, `/readyz`
//! answers 503, and the file now at the path passes `PRAGMA quick_check` with its own data, while
//! other processes opening and closing the real store beforehand replace nothing.

mod common;

use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(30);
const TOKEN: &str = "replaced-test-token-41b7e2";

struct Server {
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    addr: String,
    agent: ureq::Agent,
}

impl Server {
    fn start(db: &str) -> Self {
        let mut cmd = common::cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", TOKEN)
            .env("CAIRN_BACKFILL__ENABLED", "false");
        let common::Serving {
            child,
            stderr,
            addr,
        } = common::serve(&mut cmd, DEADLINE);
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(DEADLINE))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            child,
            stderr,
            addr,
            agent,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("Authorization", format!("Bearer {TOKEN}"));
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let mut resp = self.agent.run(req.body(body).unwrap()).unwrap();
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn enqueue(&self, key: &str) -> (u16, Value) {
        self.call(
            "POST",
            "/v1/queues/q/runs",
            Some(&json!({"key": key, "payload": "p"})),
        )
    }

    /// SIGTERM, then the exit within the deadline.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let deadline = Instant::now() + DEADLINE;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the server exits in time");
            std::thread::sleep(Duration::from_millis(10));
        }
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn quick_check(db: &std::path::Path) -> String {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("PRAGMA quick_check", [], |r| r.get(0))
        .unwrap()
}

fn run_ok(db: &str, args: &[&str]) -> String {
    let out = common::cairn(db).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Makes another store at `path` holding one epoch in space `theirs`: the file that replaces
/// the server's.
fn another_store(path: &std::path::Path) {
    run_ok(
        path.to_str().unwrap(),
        &[
            "append",
            "--space",
            "theirs",
            "--kind",
            "k",
            "--payload",
            "p",
        ],
    );
}

#[test]
fn a_store_file_replaced_under_cairn_serve_is_refused_with_503_and_not_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let other = dir.path().join("other.db");
    let db_s = db.to_str().unwrap();
    another_store(&other);

    let server = Server::start(db_s);
    for i in 0..30 {
        let (s, body) = server.enqueue(&format!("before-{i}"));
        assert_eq!(s, 201, "{body}");
    }
    // Another process opening, writing and closing the real store replaces nothing.
    run_ok(
        db_s,
        &["append", "--space", "mine", "--kind", "k", "--payload", "p"],
    );
    let (s, body) = server.enqueue("after-a-command");
    assert_eq!(s, 201, "{body}");
    assert_eq!(server.call("GET", "/readyz", None).0, 200);

    std::fs::rename(&other, &db).unwrap();

    let (s, body) = server.call("GET", "/readyz", None);
    assert_eq!(s, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_replaced", "{body}");
    for i in 0..30 {
        let (s, body) = server.enqueue(&format!("after-{i}"));
        assert_eq!(s, 503, "{body}");
        assert_eq!(body["error"]["code"], "store_replaced", "{body}");
    }
    let (s, body) = server.call(
        "POST",
        "/v1/spaces/mine/epochs",
        Some(&json!({"events": [{"kind": "k", "payload": "late"}]})),
    );
    assert_eq!((s, &body["error"]["code"]), (503, &json!("store_replaced")));

    // While the server still runs, the file at the path is the other store, whole.
    assert_eq!(quick_check(&db), "ok");
    assert_eq!(
        run_ok(db_s, &["heads", "--space", "theirs"])
            .lines()
            .count(),
        1
    );
    let log = server.stop();
    assert!(log.contains("status=503"), "the refusals are logged: {log}");
    assert_eq!(quick_check(&db), "ok");
    assert_eq!(
        run_ok(db_s, &["heads", "--space", "theirs"])
            .lines()
            .count(),
        1
    );
}

/// The outside tester's case: `mv other.db store.db` under a `cairn serve` that then gets no
/// write and no readiness probe. The store's identity watcher checkpoints the server's log
/// away by itself (the `-wal` at the path empties within the deadline), so the file at the
/// path reads as the other store, its own rows; `/v1/doctor` reports the replacement.
#[test]
fn a_store_file_replaced_under_an_idle_cairn_serve_gets_no_log_of_the_old_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let wal = dir.path().join("store.db-wal");
    let other = dir.path().join("other.db");
    let db_s = db.to_str().unwrap();
    another_store(&other);

    let server = Server::start(db_s);
    let payload = "x".repeat(3000);
    for _ in 0..30 {
        let (s, body) = server.call(
            "POST",
            "/v1/spaces/mine/epochs",
            Some(&json!({"events": [{"kind": "k", "payload": payload}]})),
        );
        assert_eq!(s, 201, "{body}");
    }
    assert!(
        std::fs::metadata(&wal).unwrap().len() > 0,
        "the log holds the appends"
    );

    std::fs::rename(&other, &db).unwrap();

    // No write and no probe: only the watcher can act.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        if len == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the -wal at the path still holds {len} bytes of the server's log"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    let epochs: i64 = conn
        .query_row("SELECT count(*) FROM epoch", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        epochs, 1,
        "the file at the path holds the other store's one epoch"
    );
    drop(conn);
    assert_eq!(quick_check(&db), "ok");

    let (s, body) = server.call("GET", "/v1/doctor", None);
    assert_eq!(s, 503, "{body}");
    let ready = body["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ready")
        .unwrap_or_else(|| panic!("no ready check: {body}"));
    assert_eq!(ready["ok"], false, "{body}");
    assert!(ready["repair"].is_string(), "{body}");
    server.stop();
    assert_eq!(
        run_ok(db_s, &["heads", "--space", "theirs"])
            .lines()
            .count(),
        1
    );
}
