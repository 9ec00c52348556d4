//! `cairn backfill` and the background backfill of `cairn serve`, run as an operator runs them:
//! the real binary on a SQLite file (and `cairn backfill` once on the Postgres test server).
//! Every wait polls a condition with a deadline.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::backfill::{marker_present, probe};
use cairn::{EpochDiagnostics, Event, SpaceId};

use common::cairn;

const DEADLINE: Duration = Duration::from_secs(30);
const TOKEN: &str = "backfill-test-token-5c2e9a";

fn run(db: &str, args: &[&str]) -> Output {
    cairn(db)
        .args(args)
        .output()
        .expect("the cairn binary runs")
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

/// A store with a current space `a` and a stale space `b` (a cache-unaware append after a
/// cached one).
async fn seed(store: &dyn EpochDiagnostics, legacy: impl std::future::Future<Output = ()>) {
    let a = SpaceId::new("a").unwrap();
    let b = SpaceId::new("b").unwrap();
    store.append(&a, vec![Event::new("k", "1")]).await.unwrap();
    store.append(&b, vec![Event::new("k", "1")]).await.unwrap();
    legacy.await;
    assert!(!probe(store, &b).await.unwrap().cache_is_current());
}

async fn sqlite_store(db: &Path) -> Arc<dyn EpochDiagnostics> {
    Arc::new(cairn::testkit::sqlite::SqliteStore::open(db).await.unwrap())
}

async fn seeded_sqlite() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let store = cairn::testkit::sqlite::SqliteStore::open(&db)
        .await
        .unwrap();
    let b = SpaceId::new("b").unwrap();
    seed(&store, async {
        store
            .legacy_append(&b, None, vec![Event::new("k", "legacy")])
            .await
            .unwrap();
    })
    .await;
    (dir, db.to_str().unwrap().to_owned())
}

/// One pass repairs the stale space and leaves the current one alone; a second pass (the
/// command ignores the completion marker) finds both current.
#[tokio::test]
async fn backfill_repairs_the_stale_cache_once_and_a_second_pass_finds_all_current() {
    let (_dir, db) = seeded_sqlite().await;
    let args = ["backfill", "--backfill-spaces-per-second", "1000"];
    let db2 = db.clone();
    let (first, second) =
        tokio::task::spawn_blocking(move || (ok(run(&db2, &args)), ok(run(&db2, &args))))
            .await
            .unwrap();
    assert_eq!(first, "visited=2 repaired=1 current=1\n");
    assert_eq!(second, "visited=2 repaired=0 current=2\n");
    let store = sqlite_store(Path::new(&db)).await;
    let b = SpaceId::new("b").unwrap();
    assert!(probe(store.as_ref(), &b).await.unwrap().cache_is_current());
    assert!(marker_present(store.as_ref()).await.unwrap());
}

/// The same on Postgres (a fresh schema of the test server; fails when there is none).
#[tokio::test]
async fn backfill_on_postgres_repairs_the_stale_cache() {
    let h = cairn::testkit::postgres::testkit::harness().await;
    let base = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}cairn_schema={}", h.schema());
    let store = h.store().await.unwrap();
    let b = SpaceId::new("b").unwrap();
    seed(&store, async {
        store
            .legacy_append(&b, None, vec![Event::new("k", "legacy")])
            .await
            .unwrap();
    })
    .await;
    let out = tokio::task::spawn_blocking(move || {
        ok(run(
            &url,
            &["backfill", "--backfill-spaces-per-second", "1000"],
        ))
    })
    .await
    .unwrap();
    assert_eq!(out, "visited=2 repaired=1 current=1\n");
    assert!(probe(&store, &b).await.unwrap().cache_is_current());
}

/// Bad pacing is refused with one line before the store is touched.
#[test]
fn bad_pacing_is_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let out = run(
        db.to_str().unwrap(),
        &["backfill", "--backfill-spaces-per-second", "0"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("backfill.spaces_per_second"), "{err}");
    assert!(!db.exists(), "a refused command creates no store");
}

/// A running `cairn serve`; its stderr is collected.
struct Server {
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    addr: String,
}

impl Server {
    fn start(db: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", TOKEN)
            .envs(env.iter().copied());
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

    /// The `/metrics` text.
    fn metrics(&self) -> String {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(DEADLINE))
            .build()
            .into();
        agent
            .get(format!("http://{}/metrics", self.addr))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "SIGTERM exits 0: {}", self.stderr());
                break;
            }
            assert!(Instant::now() < deadline, "the server exits in time");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stderr()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cairn serve` runs the pass in the background: the stale cache is repaired and the marker
/// written, and the completion line carries counts only (no space ids).
#[tokio::test]
async fn serve_repairs_stale_caches_in_the_background() {
    let (_dir, db) = seeded_sqlite().await;
    let db2 = db.clone();
    let log = tokio::task::spawn_blocking(move || {
        let server = Server::start(&db2, &[("CAIRN_BACKFILL__SPACES_PER_SECOND", "1000")]);
        let deadline = Instant::now() + DEADLINE;
        while !server.stderr().contains("cairn backfill: pass complete") {
            assert!(Instant::now() < deadline, "the pass completes in time");
            std::thread::sleep(Duration::from_millis(10));
        }
        let metrics = server.metrics();
        for line in [
            "\ncairn_backfill_enabled 1\n",
            "\ncairn_backfill_state 1\n",
            "cairn_backfill_spaces{kind=\"visited\"} 2\n",
            "cairn_backfill_spaces{kind=\"repaired\"} 1\n",
        ] {
            assert!(metrics.contains(line), "{line} in {metrics}");
        }
        server.stop()
    })
    .await
    .unwrap();
    let done = log
        .lines()
        .find(|l| l.contains("cairn backfill: pass complete"))
        .unwrap();
    assert!(done.contains("visited=2 repaired=1 current=1"), "{log}");
    let store = sqlite_store(Path::new(&db)).await;
    let b = SpaceId::new("b").unwrap();
    assert!(probe(store.as_ref(), &b).await.unwrap().cache_is_current());
    assert!(marker_present(store.as_ref()).await.unwrap());
}

/// `CAIRN_BACKFILL__ENABLED=false` switches the background pass off: the server starts and
/// stops without visiting a space, says so in one line and in `cairn_backfill_enabled 0`, and
/// its bad pacing is not even checked.
#[tokio::test]
async fn serve_with_the_backfill_switched_off_repairs_nothing() {
    let (_dir, db) = seeded_sqlite().await;
    let db2 = db.clone();
    let (metrics, log) = tokio::task::spawn_blocking(move || {
        let server = Server::start(
            &db2,
            &[
                ("CAIRN_BACKFILL__ENABLED", "false"),
                ("CAIRN_BACKFILL__SPACES_PER_SECOND", "0"),
            ],
        );
        (server.metrics(), server.stop())
    })
    .await
    .unwrap();
    assert!(
        metrics.contains("\ncairn_backfill_enabled 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"cairn_backfill_spaces{kind="visited"} 0"#),
        "{metrics}"
    );
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cairn backfill"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("cairn backfill: switched off"), "{log}");
    let store = sqlite_store(Path::new(&db)).await;
    let b = SpaceId::new("b").unwrap();
    assert!(!probe(store.as_ref(), &b).await.unwrap().cache_is_current());
    assert!(!marker_present(store.as_ref()).await.unwrap());
}
