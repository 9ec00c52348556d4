//! Test support (feature `testkit`): test-server provisioning (DESIGN §7), the conformance
//! harness, the legacy (cache-unaware) writer and the head-lookup benchmark API.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cairn_conformance::{Harness, HeldLock};
use cairn_core::{
    epoch_id, next_seq, Appended, EpochDiagnostics, EpochId, Error, Event, EventId, Result, Seq,
    SpaceId,
};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, Postgres, Transaction};
use tokio::sync::OnceCell;

use crate::config::{PgOptions, SchemaName};
use crate::error::map_sqlx;
use crate::sql;
use crate::store::{bind_epoch, id_bytes, space_lock_key, EventColumns, PgStore};

/// Environment variable naming the test server (`postgres://user@host:port/db`).
pub const TEST_URL_ENV: &str = "CAIRN_TEST_POSTGRES_URL";

const LOCAL_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

static SERVER_URL: OnceCell<std::result::Result<String, String>> = OnceCell::const_new();

/// Finds a Postgres server for the tests, once per process, in DESIGN §7 order:
/// `CAIRN_TEST_POSTGRES_URL`; a server on `127.0.0.1:5432` (user `postgres`, trust auth); a
/// private throwaway cluster started with `initdb`/`pg_ctl` from `PATH` or
/// `/usr/lib/postgresql/*/bin` (stopped and removed when the process exits); a throwaway
/// container started with testcontainers when a Docker engine answers
/// ([`start_docker_postgres`]).
///
/// # Errors
/// A message saying what was tried and how to get a server (never containing a URL).
pub async fn test_server_url() -> std::result::Result<String, String> {
    SERVER_URL
        .get_or_init(|| discover(std::env::var(TEST_URL_ENV).ok()))
        .await
        .clone()
}

/// The §7 search; `explicit` is the value of [`TEST_URL_ENV`].
async fn discover(explicit: Option<String>) -> std::result::Result<String, String> {
    let mut tried = Vec::new();
    if let Some(url) = explicit {
        if !url.is_empty() {
            // An explicit choice is not second-guessed: fall through to nothing else.
            return match probe(&url, Duration::from_secs(10)).await {
                Ok(()) => Ok(url),
                Err(e) => Err(format!(
                    "{TEST_URL_ENV} is set but its server cannot be used: {e}; fix or unset it"
                )),
            };
        }
    }
    tried.push(format!("{TEST_URL_ENV} (not set)"));
    match probe(LOCAL_URL, Duration::from_secs(2)).await {
        Ok(()) => return Ok(LOCAL_URL.to_owned()),
        Err(e) => tried.push(format!("127.0.0.1:5432 as user postgres ({e})")),
    }
    match tokio::task::spawn_blocking(start_private_cluster).await {
        Ok(Ok(cluster)) => {
            let url = cluster.url.clone();
            match probe(&url, Duration::from_secs(10)).await {
                Ok(()) => {
                    keep_watchdog(cluster);
                    return Ok(url);
                }
                Err(e) => {
                    cluster.stop();
                    tried.push(format!(
                        "a private initdb/pg_ctl cluster (started, but {e})"
                    ));
                }
            }
        }
        Ok(Err(e)) => tried.push(format!("a private initdb/pg_ctl cluster ({e})")),
        Err(e) => tried.push(format!("a private initdb/pg_ctl cluster ({e})")),
    }
    match start_docker_postgres().await {
        Ok(url) => return Ok(url),
        Err(e) => tried.push(format!("testcontainers ({e})")),
    }
    Err(format!(
        "no PostgreSQL server for the cairn Postgres tests. Tried: {}. To fix: set \
         {TEST_URL_ENV}=postgres://USER@HOST:PORT/DB, or start a server on 127.0.0.1:5432 that \
         accepts user postgres without a password (Debian: `pg_ctlcluster --skip-systemctl-redirect \
         <version> main start`), or install the PostgreSQL server binaries (initdb, pg_ctl) on \
         PATH or under /usr/lib/postgresql/<version>/bin",
        tried.join("; ")
    ))
}

/// Connects once and disconnects; the error text never includes the URL.
async fn probe(url: &str, within: Duration) -> std::result::Result<(), String> {
    let opts = PgConnectOptions::from_str(url).map_err(|_| "unparsable URL".to_owned())?;
    match tokio::time::timeout(within, PgConnection::connect_with(&opts)).await {
        Err(_) => Err(format!("no answer within {within:?}")),
        Ok(Err(e)) => Err(map_sqlx(e).to_string()),
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
    }
}

/// The image the testcontainers fallback runs.
const DOCKER_IMAGE: (&str, &str) = ("postgres", "16-alpine");

/// Removes the container named by `$1` once stdin closes (when the test process exits).
const CONTAINER_WATCHDOG_SCRIPT: &str = r#"read _ignored
docker rm -f "$1" >/dev/null 2>&1"#;

/// The last provisioning step (DESIGN §7): a throwaway PostgreSQL container started with
/// testcontainers when a Docker engine answers (`DOCKER_HOST` or the default socket). A
/// watchdog process removes the container when the test process exits. Returns the container's
/// URL once it accepts connections.
///
/// # Errors
/// A one-line reason: no Docker engine answered, the image could not be started, or the server
/// did not accept connections within a minute.
pub async fn start_docker_postgres() -> std::result::Result<String, String> {
    use std::os::unix::process::CommandExt;
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{GenericImage, ImageExt};

    let container = GenericImage::new(DOCKER_IMAGE.0, DOCKER_IMAGE.1)
        .with_exposed_port(5432.tcp())
        .with_wait_for(WaitFor::message_on_stderr(
            "database system is ready to accept connections",
        ))
        .with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust")
        .start()
        .await
        .map_err(|e| format!("no Docker engine answered or the container failed to start: {e}"))?;
    let watchdog = Command::new("sh")
        .arg("-c")
        .arg(CONTAINER_WATCHDOG_SCRIPT)
        .arg("cairn-pg-container-watchdog")
        .arg(container.id())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the container watchdog: {e}"))?;
    keep_watchdog_stdin(watchdog);
    let host = container.get_host().await.map_err(|e| e.to_string())?;
    let port = container
        .get_host_port_ipv4(5432.tcp())
        .await
        .map_err(|e| e.to_string())?;
    // The watchdog owns the container's removal now; dropping the handle here would stop the
    // container while the tests still use it.
    std::mem::forget(container);
    let url = format!("postgres://postgres@{host}:{port}/postgres");
    // The image restarts its server once after initialising: poll until it accepts.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match probe(&url, Duration::from_secs(5)).await {
            Ok(()) => return Ok(url),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "the container's server did not accept connections: {e}"
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A throwaway cluster in a temp dir, stopped and removed by its watchdog.
struct PrivateCluster {
    url: String,
    watchdog: std::process::Child,
}

impl PrivateCluster {
    /// Closes the watchdog's stdin, which makes it stop the cluster and remove its directory,
    /// and waits for it.
    fn stop(mut self) {
        drop(self.watchdog.stdin.take());
        let _ = self.watchdog.wait();
    }
}

/// Keeps the watchdog's stdin open until the process exits; its EOF is the stop signal.
fn keep_watchdog(cluster: PrivateCluster) {
    keep_watchdog_stdin(cluster.watchdog);
}

/// Keeps a watchdog's stdin open for the life of the process.
fn keep_watchdog_stdin(mut watchdog: std::process::Child) {
    static WATCHDOGS: OnceLock<Mutex<Vec<std::process::ChildStdin>>> = OnceLock::new();
    if let Some(stdin) = watchdog.stdin.take() {
        WATCHDOGS
            .get_or_init(|| Mutex::new(Vec::new()))
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(stdin);
    }
}

fn find_pg_bin() -> Option<PathBuf> {
    let has_tools = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(dir) = std::env::split_paths(&path).find(|d| has_tools(d)) {
            return Some(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has_tools(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d)
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `initdb` refuses to run as root: as root, the cluster belongs to user `postgres`.
fn pg_command(as_postgres: bool, tool: &Path) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(tool);
        c
    } else {
        Command::new(tool)
    }
}

fn run(mut cmd: Command, what: &str) -> std::result::Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("").trim().to_owned();
        Err(format!("{what} failed ({}): {last}", out.status))
    }
}

/// Stops the cluster and removes its directory once its stdin reaches EOF, i.e. when the test
/// process exits for any reason. `$1` = 1 to run pg_ctl as user postgres, `$2` pg_ctl, `$3`
/// data dir, `$4` the directory to remove.
const WATCHDOG_SCRIPT: &str = r#"read _ignored
if [ "$1" = 1 ]; then runuser -u postgres -- "$2" -D "$3" -m immediate -w stop >/dev/null 2>&1
else "$2" -D "$3" -m immediate -w stop >/dev/null 2>&1; fi
rm -rf "$4""#;

fn start_private_cluster() -> std::result::Result<PrivateCluster, String> {
    use std::os::unix::process::CommandExt;

    let bin = find_pg_bin()
        .ok_or("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")?;
    let as_postgres = running_as_root();
    let dir = tempfile::Builder::new()
        .prefix("cairn-pg-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?
        .keep();
    let data = dir.join("data");
    let cleanup = |e: String| {
        let _ = std::fs::remove_dir_all(&dir);
        e
    };
    if as_postgres {
        let mut chown = Command::new("chown");
        chown.arg("postgres:").arg(&dir);
        run(chown, "chown").map_err(cleanup)?;
    }
    let mut initdb = pg_command(as_postgres, &bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
        .arg("--no-locale");
    run(initdb, "initdb").map_err(cleanup)?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| cleanup(format!("no free port: {e}")))?
        .port();
    let mut start = pg_command(as_postgres, &bin.join("pg_ctl"));
    start
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("server.log"))
        .args(["-w", "-t", "60", "-o"])
        .arg(format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            dir.display()
        ))
        .arg("start");
    run(start, "pg_ctl start").map_err(cleanup)?;

    let watchdog = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("cairn-pg-watchdog")
        .arg(if as_postgres { "1" } else { "0" })
        .arg(bin.join("pg_ctl"))
        .arg(&data)
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C to the test run must not kill it before it cleans up.
        .process_group(0)
        .spawn();
    match watchdog {
        Ok(watchdog) => Ok(PrivateCluster {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            watchdog,
        }),
        Err(e) => {
            let mut stop = pg_command(as_postgres, &bin.join("pg_ctl"));
            stop.arg("-D").arg(&data).args(["-m", "immediate", "stop"]);
            let _ = run(stop, "pg_ctl stop");
            Err(cleanup(format!("cannot start the cluster watchdog: {e}")))
        }
    }
}

/// A fresh harness over a new random schema of the test server.
///
/// # Panics
/// When no server can be found (with the §7 message saying how to get one) or the schema
/// cannot be created: Postgres tests fail, they never pass silently.
pub async fn harness() -> PgHarness {
    let url = match test_server_url().await {
        Ok(url) => url,
        Err(msg) => panic!("{msg}"),
    };
    let h = PgHarness::empty(url);
    h.admin().await;
    h
}

/// The conformance harness: one random schema of the test server. Dropping it drops the
/// schema.
pub struct PgHarness {
    url: String,
    schema: String,
    admin: OnceCell<PgStore>,
}

impl std::fmt::Debug for PgHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgHarness")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PgHarness {
    /// A harness over a new random schema that does not exist yet (nothing is created until a
    /// store or the migration runner opens it).
    fn empty(url: String) -> Self {
        let schema = format!("cairn_t_{:016x}", rand::random::<u64>());
        Self {
            url,
            schema,
            admin: OnceCell::new(),
        }
    }

    /// The harness's own store, for the test-only writers (connected on first use).
    async fn admin(&self) -> &PgStore {
        self.admin
            .get_or_init(|| async {
                PgStore::connect_with(PgOptions {
                    max_connections: 4,
                    ..self.options()
                })
                .await
                .unwrap_or_else(|e| {
                    panic!("postgres test server: cannot create the test schema: {e}")
                })
            })
            .await
    }

    /// Options for a new store ("node") over this harness's schema.
    pub fn options(&self) -> PgOptions {
        PgOptions {
            max_connections: 8,
            ..PgOptions::new(self.url.clone()).with_schema(self.schema.clone())
        }
    }

    /// Connects a new store over this harness's schema.
    ///
    /// # Errors
    /// As [`PgStore::connect_with`].
    pub async fn store(&self) -> Result<PgStore> {
        PgStore::connect_with(self.options()).await
    }

    /// The schema this harness owns.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

impl Drop for PgHarness {
    fn drop(&mut self) {
        let Ok(schema) = SchemaName::parse(&self.schema) else {
            return;
        };
        let Ok(opts) = PgConnectOptions::from_str(&self.url) else {
            return;
        };
        // Drop runs inside the test's runtime, which cannot be blocked on; a helper thread with
        // its own runtime does the async cleanup. Failures leave a schema behind, nothing more.
        let worker = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), async move {
                    let mut conn = PgConnection::connect_with(&opts).await.ok()?;
                    sqlx::query(&sql::drop_schema(&schema))
                        .persistent(false)
                        .execute(&mut conn)
                        .await
                        .ok()?;
                    conn.close().await.ok()
                })
                .await;
            });
        });
        let _ = worker.join();
    }
}

struct PgHeldLock {
    tx: Transaction<'static, Postgres>,
}

#[async_trait]
impl HeldLock for PgHeldLock {
    async fn release(self: Box<Self>) {
        let _ = self.tx.rollback().await;
    }
}

#[async_trait]
impl Harness for PgHarness {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>> {
        Ok(Arc::new(self.store().await?))
    }

    async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        self.admin()
            .await
            .legacy_append(space, parents, events)
            .await
    }

    fn append_statement_budget(&self) -> Option<u64> {
        Some(5)
    }

    async fn hold_space_lock(&self, space: &SpaceId) -> Result<Box<dyn HeldLock>> {
        let admin = self.admin().await;
        let mut tx = admin.pool().begin().await.map_err(map_sqlx)?;
        sqlx::query(sql::LOCK)
            .bind(space_lock_key(admin.schema(), space))
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx)?;
        Ok(Box::new(PgHeldLock { tx }))
    }
}

/// Which head lookup [`PgStore::bench_time_lookup`] measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HeadLookup {
    /// The anti-join with the `(space, parent, child)` index dropped.
    AntiJoinPlain,
    /// The anti-join with that index (the store's fallback path).
    AntiJoinIndexed,
    /// The store's cache read (the append's read statement: seq probe plus cache rows).
    Cache,
}

/// How [`PgStore::bench_time_lookup_on`] times a lookup.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LookupClock {
    /// Wall time of the round trip, measured by the client.
    RoundTrip,
    /// Planning plus execution time reported by `EXPLAIN (ANALYZE)` on the server.
    Server,
}

/// Reads `Planning Time` and `Execution Time` from `EXPLAIN (ANALYZE)` text output.
fn server_time(rows: &[sqlx::postgres::PgRow]) -> Result<Duration> {
    use sqlx::Row;
    let mut total = 0.0_f64;
    let mut found = 0;
    for row in rows {
        let line: String = row.try_get(0).map_err(map_sqlx)?;
        for label in ["Planning Time:", "Execution Time:"] {
            if let Some(rest) = line.trim().strip_prefix(label) {
                let ms: f64 = rest
                    .trim()
                    .trim_end_matches("ms")
                    .trim()
                    .parse()
                    .map_err(|_| Error::corrupt(format!("unreadable EXPLAIN line {line:?}")))?;
                total += ms;
                found += 1;
            }
        }
    }
    if found != 2 {
        return Err(Error::corrupt("EXPLAIN (ANALYZE) printed no timing"));
    }
    Ok(Duration::from_secs_f64(total / 1000.0))
}

/// Epochs per bulk-insert statement of [`PgStore::bench_seed_chain`].
const SEED_BATCH: u64 = 5_000;

impl PgStore {
    /// Appends an epoch the way a writer that predates the head cache does: same space lock
    /// and seq rule, parents from the anti-join (or `parents`, sorted and de-duplicated), and
    /// the cache untouched.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an invalid batch, [`Error::UnknownParent`] for a parent not
    /// in the space.
    pub async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let event_ids: Vec<EventId> = events.iter().map(Event::id).collect();
        let cols = EventColumns::new(events, &event_ids);
        let mut tx = self.begin().await?;
        self.lock_spaces(&mut tx, &[space]).await?;
        let parents = match parents {
            None => self
                .anti_join(&mut tx, space)
                .await?
                .into_iter()
                .map(|h| h.id)
                .collect(),
            Some(mut given) => {
                given.sort();
                given.dedup();
                self.tick();
                let known: Vec<Vec<u8>> = sqlx::query_scalar(sql::KNOWN_EPOCHS)
                    .bind(space.as_bytes())
                    .bind(id_bytes(&given))
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(map_sqlx)?;
                if let Some(missing) = given
                    .iter()
                    .find(|p| !known.iter().any(|k| k.as_slice() == p.as_bytes()))
                {
                    return Err(Error::UnknownParent { parent: *missing });
                }
                given
            }
        };
        self.tick();
        let max: Option<i64> = sqlx::query_scalar(sql::MAX_SEQ)
            .bind(space.as_bytes())
            .fetch_one(&mut *tx)
            .await
            .map_err(map_sqlx)?;
        let seq = next_seq(max.map(Seq::from_i64).transpose()?);
        let id = epoch_id(space, &parents, &event_ids);
        self.tick();
        bind_epoch(
            sqlx::query(sql::LEGACY_WRITE),
            space,
            &id,
            seq,
            &parents,
            cols,
        )?
        .execute(&mut *tx)
        .await
        .map_err(map_sqlx)?;
        self.commit(tx).await?;
        Ok(Appended { id, seq, parents })
    }

    /// Test support: `VACUUM (ANALYZE)` of the epoch-log tables after bulk seeding, as
    /// autovacuum would do on a live store: fresh statistics for the planner and a visibility
    /// map, so index-only scans need no heap fetches.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn bench_vacuum_analyze(&self) -> Result<()> {
        for table in ["epoch", "epoch_parent", "epoch_event", "epoch_head"] {
            // The table names are the constants above, never input.
            sqlx::query(&format!("VACUUM (ANALYZE) {table}"))
                .persistent(false)
                .execute(self.pool())
                .await
                .map_err(map_sqlx)?;
        }
        Ok(())
    }

    /// Bulk-seeds a linear chain of `epochs` one-event epochs on `space` (continuing from its
    /// current heads), in transactions of a few thousand epochs written by one statement each,
    /// leaving the head cache current (one row). Calls `progress(done)` after each batch.
    ///
    /// # Errors
    /// Backend errors; batches already committed stay.
    pub async fn bench_seed_chain(
        &self,
        space: &SpaceId,
        epochs: u64,
        progress: Arc<dyn Fn(u64) + Send + Sync>,
    ) -> Result<()> {
        let mut done = 0;
        while done < epochs {
            let n = SEED_BATCH.min(epochs - done);
            let mut tx = self.begin().await?;
            self.lock_spaces(&mut tx, &[space]).await?;
            let state = self.read_state(&mut tx, space).await?;
            let mut parents: Vec<EpochId> = self
                .current_heads(&mut tx, space, &state)
                .await?
                .into_iter()
                .map(|h| h.id)
                .collect();
            let first = state.next().0;
            let cap = usize::try_from(n).unwrap_or(0);
            let (mut ids, mut seqs, mut event_ids, mut payloads) = (
                Vec::with_capacity(cap),
                Vec::with_capacity(cap),
                Vec::with_capacity(cap),
                Vec::with_capacity(cap),
            );
            let (mut edge_parents, mut edge_children) = (Vec::new(), Vec::new());
            let mut last = None;
            for seq in first..first + n {
                let event = Event::new("bench.event", format!("bench {seq}").into_bytes());
                let eid = event.id();
                let id = epoch_id(space, &parents, &[eid]);
                for p in &parents {
                    edge_parents.push(p.as_bytes().to_vec());
                    edge_children.push(id.as_bytes().to_vec());
                }
                let seq = Seq(seq).to_i64()?;
                ids.push(id.as_bytes().to_vec());
                seqs.push(seq);
                event_ids.push(eid.as_bytes().to_vec());
                payloads.push(event.payload);
                parents = vec![id];
                last = Some((id, seq));
            }
            let Some((last_id, last_seq)) = last else {
                break;
            };
            self.tick();
            sqlx::query(sql::BENCH_SEED_BATCH)
                .bind(space.as_bytes())
                .bind(ids)
                .bind(seqs)
                .bind(edge_parents)
                .bind(edge_children)
                .bind("bench.event")
                .bind(event_ids)
                .bind(payloads)
                .bind(last_id.as_bytes().as_slice())
                .bind(last_seq)
                .execute(&mut *tx)
                .await
                .map_err(map_sqlx)?;
            self.commit(tx).await?;
            done += n;
            progress(done);
        }
        Ok(())
    }

    /// Runs the named head lookup `runs` times on one connection (exact SQL the store uses,
    /// parallel workers off) and returns each run's wall time. `AntiJoinPlain` drops the
    /// `(space, parent, child)` index inside a transaction that is rolled back afterwards, so
    /// the index is restored without a rebuild; while it runs, writers of this store wait.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn bench_time_lookup(
        &self,
        space: &SpaceId,
        lookup: HeadLookup,
        runs: usize,
    ) -> Result<Vec<Duration>> {
        self.bench_time_lookup_on(space, lookup, runs, LookupClock::RoundTrip)
            .await
    }

    /// As [`PgStore::bench_time_lookup`], timed by `clock`: [`LookupClock::Server`] runs each
    /// lookup under `EXPLAIN (ANALYZE, TIMING OFF)` (no per-node clock overhead) and returns the
    /// server's planning plus execution time, which is how the published comparison was
    /// measured.
    ///
    /// # Errors
    /// As [`PgStore::bench_time_lookup`].
    pub async fn bench_time_lookup_on(
        &self,
        space: &SpaceId,
        lookup: HeadLookup,
        runs: usize,
        clock: LookupClock,
    ) -> Result<Vec<Duration>> {
        let mut conn = self.pool().acquire().await.map_err(map_sqlx)?;
        self.tick();
        sqlx::query(sql::NO_PARALLEL_WORKERS)
            .execute(&mut *conn)
            .await
            .map_err(map_sqlx)?;
        let mut times = Vec::with_capacity(runs);
        let outcome: Result<()> = async {
            let query = match lookup {
                HeadLookup::AntiJoinPlain | HeadLookup::AntiJoinIndexed => sql::COMPUTED_HEADS,
                HeadLookup::Cache => sql::READ_STATE,
            };
            let mut tx = conn.begin().await.map_err(map_sqlx)?;
            self.tick();
            if lookup == HeadLookup::AntiJoinPlain {
                self.tick();
                sqlx::query(sql::DROP_PARENT_INDEX)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_sqlx)?;
            }
            // EXPLAIN wraps one of the two constant queries above; nothing here comes from input.
            let explained = format!("EXPLAIN (ANALYZE, TIMING OFF) {query}");
            for _ in 0..runs {
                self.tick();
                let start = Instant::now();
                let sent = match clock {
                    LookupClock::RoundTrip => query,
                    LookupClock::Server => explained.as_str(),
                };
                let rows = sqlx::query(sent)
                    .bind(space.as_bytes())
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(map_sqlx)?;
                let elapsed = start.elapsed();
                times.push(match clock {
                    LookupClock::RoundTrip => elapsed,
                    LookupClock::Server => server_time(&rows)?,
                });
                if rows.is_empty() {
                    return Err(Error::NotFound {
                        what: format!("space {space}"),
                    });
                }
            }
            self.tick();
            tx.rollback().await.map_err(map_sqlx)
        }
        .await;
        self.tick();
        sqlx::query(sql::RESET_PARALLEL_WORKERS)
            .execute(&mut *conn)
            .await
            .map_err(map_sqlx)?;
        outcome.map(|()| times)
    }
}

const SCHEMA_COLUMNS: &str =
    "SELECT table_name::text, column_name::text FROM information_schema.columns \
    WHERE table_schema = $1 ORDER BY table_name, ordinal_position";
const CATALOG_PROBE: &str = "SELECT coalesce(string_agg(x, ',' ORDER BY x), '') FROM ( \
    SELECT 'rel:' || c.relname || ':' || c.xmin::text AS x FROM pg_catalog.pg_class c \
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 \
    UNION ALL SELECT 'ns:' || xmin::text FROM pg_catalog.pg_namespace WHERE nspname = $1) q";
const HAS_STAMP: &str = "SELECT to_regclass('cairn_migration_stamp') IS NOT NULL";
const STAMP_PROBE: &str = "SELECT coalesce((SELECT string_agg(xmin::text, ',' ORDER BY set_name) FROM cairn_migration_stamp), '') \
    || '|' || coalesce((SELECT string_agg(xmin::text, ',' ORDER BY set_name, position) FROM cairn_migration_lineage), '')";

impl PgHarness {
    async fn probe_connection(&self) -> PgConnection {
        let opts = PgConnectOptions::from_str(&self.url).expect("test server URL");
        let mut conn = PgConnection::connect_with(&opts)
            .await
            .expect("connect to the test server");
        sqlx::query(sql::SESSION_SETUP)
            .bind(self.schema.as_str())
            .bind("10000")
            .execute(&mut conn)
            .await
            .expect("session setup");
        conn
    }
}

#[async_trait]
impl cairn_conformance::MigrationHarness for PgHarness {
    async fn fresh(&self) -> Self {
        Self::empty(self.url.clone())
    }

    async fn migrator(&self) -> Arc<dyn cairn_migrate::MigrationBackend> {
        Arc::new(crate::PgMigrator::new(self.options()).expect("valid test schema"))
    }

    async fn open_as(&self, runner: &cairn_migrate::Runner) -> Result<Arc<dyn EpochDiagnostics>> {
        let (store, _) = PgStore::connect_migrated(self.options(), runner).await?;
        Ok(Arc::new(store))
    }

    async fn schema(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut conn = self.probe_connection().await;
        let rows: Vec<(String, String)> = sqlx::query_as(SCHEMA_COLUMNS)
            .bind(self.schema.as_str())
            .fetch_all(&mut conn)
            .await
            .expect("read the schema's columns");
        let _ = conn.close().await;
        let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (table, column) in rows {
            if !crate::BOOKKEEPING_TABLES.contains(&table.as_str()) {
                out.entry(table).or_default().push(column);
            }
        }
        out
    }

    async fn commit_probe(&self) -> String {
        let mut conn = self.probe_connection().await;
        let catalog: String = sqlx::query_scalar(CATALOG_PROBE)
            .bind(self.schema.as_str())
            .fetch_one(&mut conn)
            .await
            .expect("catalog probe");
        let has: bool = sqlx::query_scalar(HAS_STAMP)
            .fetch_one(&mut conn)
            .await
            .expect("stamp probe");
        let stamp: String = if has {
            sqlx::query_scalar(STAMP_PROBE)
                .fetch_one(&mut conn)
                .await
                .expect("stamp probe")
        } else {
            String::new()
        };
        let _ = conn.close().await;
        format!("{catalog}#{stamp}")
    }
}

impl cairn_conformance::AdditivityHarness for PgHarness {
    fn additivity(&self) -> Arc<dyn cairn_migrate::additivity::AdditivityEngine> {
        Arc::new(crate::PgAdditivity::new(self.url.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_explicit_url_without_a_server_fails_with_a_how_to_and_no_secret() {
        let err = discover(Some("postgres://someone:s3cret@127.0.0.1:1/db".into()))
            .await
            .unwrap_err();
        assert!(err.contains(TEST_URL_ENV), "{err}");
        assert!(!err.contains("s3cret") && !err.contains("someone"), "{err}");
    }

    /// The third provisioning step works on its own: a private cluster starts, answers, and is
    /// stopped and removed by its watchdog.
    #[tokio::test]
    async fn private_cluster_starts_answers_and_is_removed() {
        let cluster = tokio::task::spawn_blocking(start_private_cluster)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("private cluster: {e}"));
        let url = cluster.url.clone();
        let port: u16 = url
            .rsplit(':')
            .next()
            .and_then(|s| s.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        probe(&url, Duration::from_secs(10)).await.unwrap();
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .unwrap();
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "the cluster still listens after its watchdog ran"
        );
    }
}
