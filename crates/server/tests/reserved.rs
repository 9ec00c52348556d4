//! Names cairn reserves for its own records (issue 21, item 12): the backfill's completion
//! marker lives in the space `\0cairn/backfill`, and nothing outside cairn may write it — a
//! planted marker would make every later server skip its backfill. The HTTP API refuses every
//! reserved space id with 400 `reserved`, the library's `SpaceId::new` refuses it with
//! `Error::Reserved`, and each backend still reads back the marker cairn itself wrote.
//!
//! The CLI takes space ids from its arguments, which cannot hold the NUL byte every reserved
//! id starts with; its commands build ids with the same `SpaceId::new`.

mod common;

use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::backfill::{
    marker_present, marker_space, run_pass, BackfillConfig, BackfillOutcome, Quiet, TokioPacer,
    MARKER_SPACE,
};
use cairn::{EpochDiagnostics, EpochStore, Error, Event, SpaceId};
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(30);
const TOKEN: &str = "reserved-test-token-8d1f0b";

/// A running `cairn serve` on a SQLite file.
struct Server {
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    addr: String,
}

impl Server {
    fn start(db: &str, backfill: bool) -> Self {
        let mut cmd = common::cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", TOKEN)
            .env(
                "CAIRN_BACKFILL__ENABLED",
                if backfill { "true" } else { "false" },
            )
            .env("CAIRN_BACKFILL__SPACES_PER_SECOND", "1000");
        let common::Serving {
            child,
            stderr,
            addr,
        } = common::serve(&mut cmd, DEADLINE);
        Self {
            child,
            stderr,
            addr,
        }
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Sends `method path` with the token and an optional JSON body; the status and the body.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(DEADLINE))
            .http_status_as_error(false)
            .build()
            .into();
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("Authorization", format!("Bearer {TOKEN}"));
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let mut resp = agent.run(req.body(body).unwrap()).unwrap();
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Waits until the log holds `line`.
    fn wait_for_log(&self, line: &str) {
        let deadline = Instant::now() + DEADLINE;
        while !self.stderr().contains(line) {
            assert!(
                Instant::now() < deadline,
                "`{line}` in time: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A SQLite store holding one space whose head cache is stale (a cache-unaware append after a
/// cached one), so a backfill pass has one space to repair.
async fn stale_sqlite_store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let store = cairn::testkit::sqlite::SqliteStore::open(&db)
        .await
        .unwrap();
    let b = SpaceId::new("b").unwrap();
    store.append(&b, vec![Event::new("k", "1")]).await.unwrap();
    store
        .legacy_append(&b, None, vec![Event::new("k", "legacy")])
        .await
        .unwrap();
    (dir, db.to_str().unwrap().to_owned())
}

/// The marker space and other reserved ids, percent-encoded for a path.
const RESERVED_IN_PATHS: [&str; 3] = [
    "%00cairn%2Fbackfill",
    "%00cairn%2F",
    "%00cairn%2Fsomething-else",
];

/// `POST /v1/spaces/%00cairn%2Fbackfill/epochs` (and import, heads, feed on every reserved id)
/// answers 400 `reserved` and writes nothing, so a server started afterwards still runs its
/// backfill and repairs the stale space instead of finding a planted marker.
#[tokio::test]
async fn the_api_refuses_reserved_spaces_and_a_later_server_still_runs_its_backfill() {
    let (_dir, db) = stale_sqlite_store().await;
    let db2 = db.clone();
    tokio::task::spawn_blocking(move || {
        let server = Server::start(&db2, false);
        let event = json!({"events": [{"kind": "cairn.backfill.complete", "payload": "x"}]});
        let import = json!({
            "id": "00".repeat(32),
            "parents": [],
            "events": [{"kind": "cairn.backfill.complete", "payload": "x"}],
        });
        for space in RESERVED_IN_PATHS {
            for (method, path, body) in [
                ("POST", format!("/v1/spaces/{space}/epochs"), Some(&event)),
                ("POST", format!("/v1/spaces/{space}/import"), Some(&import)),
                ("GET", format!("/v1/spaces/{space}/heads"), None),
                ("GET", format!("/v1/spaces/{space}/events"), None),
            ] {
                let (status, body) = server.call(method, &path, body);
                assert_eq!(status, 400, "{method} {path}: {body}");
                assert_eq!(body["error"]["code"], "reserved", "{method} {path}: {body}");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains("reserved"), "{message}");
            }
        }
        // Ids that only look alike are ordinary spaces.
        let (status, body) =
            server.call("POST", "/v1/spaces/cairn%2Fbackfill/epochs", Some(&event));
        assert_eq!(status, 201, "{body}");
    })
    .await
    .unwrap();
    let store = cairn::testkit::sqlite::SqliteStore::open(&db)
        .await
        .unwrap();
    assert!(
        !marker_present(&store).await.unwrap(),
        "no marker was planted"
    );
    drop(store);
    let log = tokio::task::spawn_blocking(move || {
        let server = Server::start(&db, true);
        server.wait_for_log("cairn backfill: pass complete");
        server.stderr()
    })
    .await
    .unwrap();
    assert!(!log.contains("already complete"), "{log}");
    assert!(log.contains("repaired=1"), "{log}");
}

/// The library refuses a reserved id by type, while a backend still lists and reads the marker
/// space cairn itself wrote: two passes over `store`, the second seeing the first's marker.
async fn reserved_ids_are_refused_and_the_marker_reads_back(store: &dyn EpochDiagnostics) {
    let err = SpaceId::new(MARKER_SPACE).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Reserved {
                what: "space id",
                ..
            }
        ),
        "{err:?}"
    );
    let a = SpaceId::new("a").unwrap();
    store.append(&a, vec![Event::new("k", "1")]).await.unwrap();
    let config = BackfillConfig {
        spaces_per_second: 1000.0,
        ..BackfillConfig::default()
    };
    for _ in 0..2 {
        let outcome = run_pass(
            store,
            &config,
            &TokioPacer::default(),
            &Quiet,
            false,
            std::future::pending(),
        )
        .await;
        assert!(
            matches!(outcome, BackfillOutcome::Completed(p) if p.visited == 1),
            "{outcome:?}"
        );
    }
    assert!(marker_present(store).await.unwrap());
    let spaces = store.list_spaces(None, 10).await.unwrap();
    assert_eq!(spaces, vec![marker_space(), a]);
}

#[tokio::test]
async fn on_sqlite_reserved_ids_are_refused_and_the_marker_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = cairn::testkit::sqlite::SqliteStore::open(dir.path().join("s.db"))
        .await
        .unwrap();
    reserved_ids_are_refused_and_the_marker_reads_back(&store).await;
}

/// On Postgres (a fresh schema of the test server; fails when there is none).
#[tokio::test]
async fn on_postgres_reserved_ids_are_refused_and_the_marker_reads_back() {
    let h = cairn::testkit::postgres::testkit::harness().await;
    let store = h.store().await.unwrap();
    reserved_ids_are_refused_and_the_marker_reads_back(&store).await;
}

#[tokio::test]
async fn in_memory_reserved_ids_are_refused_and_the_marker_reads_back() {
    reserved_ids_are_refused_and_the_marker_reads_back(&cairn::MemoryStore::default()).await;
}
