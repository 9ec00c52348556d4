//! Issue 48 item 1, as an operator runs it on Postgres: an application set whose revision is
//! `-- cairn:no-transaction` + `CREATE INDEX CONCURRENTLY`, applied with `cairn migrate up`
//! while another connection keeps writing to the table (no write waits on it; the same index
//! built by a plain revision does block them), and a `cairn migrate up` killed with SIGKILL in
//! the middle of the build: `migrate status` and `doctor` show the invalid index it left with
//! the repair, and the next `up` drops it, builds it again and stamps the revision.
//!
//! The builds are made slow on purpose: the index is on `slow_key(name)`, an immutable
//! function that sleeps a millisecond per row.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

const SET: &str = "shop";

use common::{ok, text};

/// `cairn --database URL migrate --set shop --source DIR ARGS…`.
fn migrate(url: &str, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = common::cairn(url);
    cmd.args(["migrate", "--set", SET, "--source"])
        .arg(dir)
        .args(args);
    cmd
}

struct Shop {
    url: String,
    server: String,
    schema: String,
    dir: tempfile::TempDir,
}

impl Shop {
    /// A store in a new schema whose `shop` set is at `0001_items`, with `rows` items and the
    /// slow key function.
    async fn new(rows: i64) -> Self {
        let server = cairn::testkit::postgres::testkit::test_server_url()
            .await
            .unwrap_or_else(|msg| panic!("{msg}"));
        let schema = cairn::testkit::scratch_name("cairn_online");
        let sep = if server.contains('?') { '&' } else { '?' };
        let url = format!("{server}{sep}cairn_schema={schema}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("0001_items.sql"),
            "-- the items\nCREATE TABLE items (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL);",
        )
        .unwrap();
        // A cairn store (cairn's own set), then the application's set beside it.
        ok(common::cairn(&url)
            .args(["migrate", "up"])
            .output()
            .unwrap());
        ok(migrate(&url, dir.path(), &["up"]).output().unwrap());
        let shop = Self {
            url,
            server,
            schema,
            dir,
        };
        let mut conn = shop.connect().await;
        for sql in [
            "CREATE FUNCTION slow_key(v TEXT) RETURNS TEXT LANGUAGE plpgsql IMMUTABLE AS \
             $$ BEGIN PERFORM pg_catalog.pg_sleep(0.001); RETURN v; END $$",
            &format!(
                "INSERT INTO items (name) SELECT 'item ' || g FROM generate_series(1, {rows}) g"
            ),
        ] {
            sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
        }
        shop
    }

    async fn connect(&self) -> PgConnection {
        let mut conn = PgConnection::connect(&self.server).await.unwrap();
        sqlx::raw_sql(&format!("SET search_path TO {}", self.schema))
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    }

    /// Adds revision `file` with `sql`.
    fn revision(&self, file: &str, sql: &str) {
        std::fs::write(self.dir.path().join(file), sql).unwrap();
    }

    fn migrate(&self, args: &[&str]) -> Command {
        migrate(&self.url, self.dir.path(), args)
    }

    async fn stamp(&self) -> String {
        let mut conn = self.connect().await;
        sqlx::query_scalar("SELECT revision FROM cairn_migration_stamp WHERE set_name = $1")
            .bind(SET)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    }

    /// Index `name` of the schema: `None` when missing, else whether it is valid.
    async fn index(&self, name: &str) -> Option<bool> {
        let mut conn = self.connect().await;
        sqlx::query_scalar(
            "SELECT i.indisvalid FROM pg_catalog.pg_index i \
             JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relname = $1 AND n.nspname = $2",
        )
        .bind(name)
        .bind(&self.schema)
        .fetch_optional(&mut conn)
        .await
        .unwrap()
    }

    async fn drop(self) {
        let mut conn = PgConnection::connect(&self.server).await.unwrap();
        sqlx::raw_sql(&format!("DROP SCHEMA {} CASCADE", self.schema))
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

/// What a writer saw while a migration ran: inserts that committed, and inserts that gave up
/// waiting for a lock (`lock_timeout` 300 ms).
#[derive(Debug, Default)]
struct Writes {
    committed: u64,
    lock_waits: u64,
}

/// Runs `up` (a child process) while one connection inserts items one at a time, 200 a second,
/// each in its own transaction under a 300 ms `lock_timeout`, from before the child starts to after it
/// ends. Returns the child's output and what the writer saw while the child ran.
async fn up_while_writing(shop: &Shop) -> (Output, Writes) {
    let mut conn = shop.connect().await;
    sqlx::raw_sql("SET lock_timeout = '300ms'")
        .execute(&mut conn)
        .await
        .unwrap();
    let running = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let (committed, waits) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writer = {
        let (running, stop) = (running.clone(), stop.clone());
        let (committed, waits) = (committed.clone(), waits.clone());
        tokio::spawn(async move {
            // Live traffic, not a flood: every row written during a concurrent build is one
            // more the build's validation pass must index (a millisecond each here).
            let mut pace = tokio::time::interval(Duration::from_millis(5));
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                pace.tick().await;
                n += 1;
                let during = running.load(Ordering::SeqCst);
                let done = sqlx::query("INSERT INTO items (name) VALUES ($1)")
                    .bind(format!("written {n}"))
                    .execute(&mut conn)
                    .await;
                match done {
                    Ok(_) if during => {
                        committed.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {
                        waits.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => panic!("the writer failed: {e}"),
                }
            }
        })
    };
    running.store(true, Ordering::SeqCst);
    let mut child = shop
        .migrate(&["up"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        let out = child.wait();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        use std::io::Read;
        child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_end(&mut stderr)
            .unwrap();
        Output {
            status: out.unwrap(),
            stdout,
            stderr,
        }
    })
    .await
    .unwrap();
    running.store(false, Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let writes = Writes {
        committed: committed.load(Ordering::SeqCst),
        lock_waits: waits.load(Ordering::SeqCst),
    };
    (out, writes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_index_build_applies_while_writes_go_on_and_a_plain_one_blocks_them() {
    // The control: a plain CREATE INDEX (in the upgrade transaction) holds a SHARE lock on the
    // table for the whole build, and the writer's inserts give up waiting.
    let plain = Shop::new(1500).await;
    plain.revision(
        "0002_by_key.sql",
        "-- index the items by key\nCREATE INDEX items_by_key ON items (slow_key(name));",
    );
    let (out, writes) = up_while_writing(&plain).await;
    ok(out);
    assert!(
        writes.lock_waits >= 1,
        "the plain build blocked no insert: {writes:?}"
    );
    plain.drop().await;

    // The same index built concurrently by a no-transaction revision: no insert waits.
    let shop = Shop::new(1500).await;
    shop.revision(
        "0002_by_key.postgres.sql",
        "-- cairn:no-transaction\n-- index the items by key, online\n\
         CREATE INDEX CONCURRENTLY items_by_key ON items (slow_key(name));",
    );
    shop.revision(
        "0002_by_key.sqlite.sql",
        "-- index the items by key\nCREATE INDEX items_by_key ON items (name);",
    );
    let (out, writes) = up_while_writing(&shop).await;
    let printed = ok(out);
    assert!(printed.contains("applied 0002_by_key"), "{printed}");
    assert_eq!(
        writes.lock_waits, 0,
        "an insert waited on the build: {writes:?}"
    );
    assert!(
        writes.committed >= 20,
        "the writer barely ran during the build: {writes:?}"
    );
    assert_eq!(shop.index("items_by_key").await, Some(true));
    assert_eq!(shop.stamp().await, "0002_by_key");
    shop.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_concurrent_build_is_shown_by_status_and_doctor_and_repaired_by_the_next_up() {
    let shop = Shop::new(4000).await;
    shop.revision(
        "0002_by_key.sql",
        "-- cairn:no-transaction\n-- index the items by key, online\n\
         CREATE INDEX CONCURRENTLY items_by_key ON items (slow_key(name));",
    );
    let mut child = shop
        .migrate(&["up"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the server is building the index.
    let mut conn = shop.connect().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let building: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_stat_progress_create_index p \
             JOIN pg_catalog.pg_class c ON c.oid = p.relid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = 'items' AND p.phase LIKE 'building index%'",
        )
        .bind(&shop.schema)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if building > 0 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "cairn migrate up ended before the build was seen"
        );
        assert!(Instant::now() < deadline, "the build never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While it builds, status and doctor say a build is running, and by which process.
    let status = ok(shop.migrate(&["status"]).output().unwrap());
    assert!(
        status.lines().any(|l| l.starts_with("invalid index: ")
            && l.contains("items_by_key")
            && l.contains("a build of it is still running (server process ")),
        "{status}"
    );
    let doctor = common::cairn(&shop.url)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let indexes = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "indexes")
        .unwrap_or_else(|| panic!("no indexes check: {report}"))
        .clone();
    assert_eq!(indexes["level"], "warning", "{indexes}");
    assert!(
        indexes["detail"]
            .as_str()
            .unwrap()
            .contains("being built by server process"),
        "{indexes}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // The build's server process notices its client is gone (client_connection_check_interval)
    // and stops: no build of the table is left running.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let building: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_stat_progress_create_index p \
             JOIN pg_catalog.pg_class c ON c.oid = p.relid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = 'items'",
        )
        .bind(&shop.schema)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if building == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed client's build is still running"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(shop.stamp().await, "0001_items");
    assert_eq!(
        shop.index("items_by_key").await,
        Some(false),
        "the killed build left its index invalid"
    );

    let status = ok(shop.migrate(&["status"]).output().unwrap());
    assert!(status.contains("pending: 0002_by_key"), "{status}");
    // The dry run shows the drop `up` runs first.
    let plan = ok(shop.migrate(&["up", "--dry-run"]).output().unwrap());
    let lines: Vec<&str> = plan.lines().collect();
    let drop_at = lines
        .iter()
        .position(|l| {
            l.starts_with("DROP INDEX CONCURRENTLY IF EXISTS") && l.contains(".items_by_key")
        })
        .unwrap_or_else(|| panic!("no drop in the plan:\n{plan}"));
    assert!(
        lines[drop_at + 1].starts_with("CREATE INDEX CONCURRENTLY items_by_key"),
        "{plan}"
    );
    let line = status
        .lines()
        .find(|l| l.starts_with("invalid index: "))
        .unwrap_or_else(|| panic!("status names no invalid index:\n{status}"));
    assert!(
        line.contains(".items_by_key on ") && line.contains("cairn migrate up"),
        "{line}"
    );
    let doctor = common::cairn(&shop.url).arg("doctor").output().unwrap();
    assert_eq!(
        doctor.status.code(),
        Some(1),
        "an invalid index is a problem"
    );
    let report = text(&doctor.stdout);
    assert!(
        report.contains("indexes") && report.contains("items_by_key"),
        "{report}"
    );

    // The next up waits for the killed session to let go of the lock (its server process
    // notices its client is gone within a second), drops the invalid index and builds it.
    let up = ok(shop.migrate(&["up"]).output().unwrap());
    assert!(up.contains("applied 0002_by_key"), "{up}");
    assert_eq!(shop.index("items_by_key").await, Some(true));
    assert_eq!(shop.stamp().await, "0002_by_key");
    let status = ok(shop.migrate(&["status"]).output().unwrap());
    assert!(!status.contains("invalid index"), "{status}");
    assert!(status.contains("state: at head"), "{status}");
    shop.drop().await;
}

/// Issue 48 item 3 through the binary: `up --lock-timeout-ms 100 --tries 50` behind a
/// transaction that holds the table: each try gives up after 100 ms and the upgrade runs again,
/// applying once the transaction ends, and says how many tries it took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_gives_way_to_a_long_transaction_and_reports_its_tries() {
    let shop = Shop::new(10).await;
    shop.revision(
        "0002_note.sql",
        "-- a note per item\nALTER TABLE items ADD COLUMN note TEXT;",
    );
    let mut holder = shop.connect().await;
    sqlx::raw_sql("BEGIN; SELECT count(*) FROM items")
        .execute(&mut holder)
        .await
        .unwrap();
    let child = shop
        .migrate(&["up", "--lock-timeout-ms", "100", "--tries", "50"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Released once the upgrade was seen waiting for the table twice (two tries).
    let mut look = shop.connect().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut seen, mut was) = (0, false);
    while seen < 2 {
        assert!(Instant::now() < deadline, "the upgrade never waited twice");
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_locks l \
             JOIN pg_catalog.pg_class c ON c.oid = l.relation \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE NOT l.granted AND n.nspname = $1 AND c.relname = 'items'",
        )
        .bind(&shop.schema)
        .fetch_one(&mut look)
        .await
        .unwrap();
        if waiting > 0 && !was {
            seen += 1;
        }
        was = waiting > 0;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let printed = ok(out);
    let tries: u32 = printed
        .lines()
        .find_map(|l| l.strip_prefix("tries: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tries line:\n{printed}"));
    assert!(tries >= 2, "{printed}");
    assert!(printed.contains("applied 0002_note"), "{printed}");
    assert_eq!(shop.stamp().await, "0002_note");
    shop.drop().await;
}

/// An interrupted `REINDEX INDEX CONCURRENTLY` leaves its new copy (`…_ccnew`) invalid: the
/// next `up` drops it and rebuilds. The rebuild is made to fail on purpose: the index is on
/// `picky(name)`, which raises while the table `picky_fails` has a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_concurrent_reindex_is_repaired_by_the_next_up() {
    let shop = Shop::new(50).await;
    let mut conn = shop.connect().await;
    for sql in [
        "CREATE TABLE picky_fails (x INT)",
        "CREATE FUNCTION picky(v TEXT) RETURNS TEXT LANGUAGE plpgsql IMMUTABLE AS \
         $$ BEGIN IF EXISTS (SELECT 1 FROM picky_fails) THEN RAISE 'picky'; END IF; \
         RETURN v; END $$",
        "CREATE INDEX items_picky ON items (picky(name))",
        "INSERT INTO picky_fails VALUES (1)",
    ] {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
    shop.revision(
        "0002_rebuild.sql",
        "-- cairn:no-transaction\n-- rebuild the picky index online\n\
         REINDEX INDEX CONCURRENTLY items_picky;",
    );
    let out = shop.migrate(&["up"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("the store stays at 0001_items"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        shop.index("items_picky_ccnew").await,
        Some(false),
        "the copy is left invalid"
    );
    let status = ok(shop.migrate(&["status"]).output().unwrap());
    assert!(
        status.contains("invalid index: ") && status.contains("items_picky_ccnew"),
        "{status}"
    );

    sqlx::raw_sql("DELETE FROM picky_fails")
        .execute(&mut conn)
        .await
        .unwrap();
    let up = ok(shop.migrate(&["up"]).output().unwrap());
    assert!(up.contains("applied 0002_rebuild"), "{up}");
    assert_eq!(
        shop.index("items_picky_ccnew").await,
        None,
        "the leftover is dropped"
    );
    assert_eq!(shop.index("items_picky").await, Some(true));
    let status = ok(shop.migrate(&["status"]).output().unwrap());
    assert!(!status.contains("invalid index"), "{status}");
    shop.drop().await;
}
