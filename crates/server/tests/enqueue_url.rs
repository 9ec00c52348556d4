//! `cairn enqueue --url`: through a running server when one answers, straight to the store
//! otherwise; the same key gives the same run id on both paths, and a running server delivers
//! a run that was written straight to the store, without a restart. Every wait polls a
//! condition with a deadline.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cairn;

const FULL: &str = "full-token-6f1d2c9a8b7e";
const DEADLINE: Duration = Duration::from_secs(30);

/// `cairn enqueue --url URL` on queue `gate` with key `gate`, `refs/heads/main`, `key`.
fn enqueue(db: &str, url: &str, token: &str, key: &str) -> Output {
    cairn(db)
        .args(["enqueue", "--queue", "gate", "--key", "gate"])
        .args(["--key-part", "refs/heads/main", "--key-part", key])
        .args(["--payload", "{}", "--url", url])
        .env("CAIRN_TOKEN", token)
        .output()
        .unwrap()
}

/// The `(run id, created|existing)` a successful enqueue printed.
fn printed(out: &Output) -> (String, String) {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let mut words = text.split_whitespace();
    (
        words.next().unwrap().to_owned(),
        words.next().unwrap().to_owned(),
    )
}

/// A collector that answers 202 to every request and records the run ids.
fn collector() -> (Arc<Mutex<Vec<String>>>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let sink = sink.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut len = 0;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h.trim_end().is_empty() {
                            break;
                        }
                        if let Some((n, v)) = h.split_once(':') {
                            if n.eq_ignore_ascii_case("content-length") {
                                len = v.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0; len];
                    reader.read_exact(&mut body).unwrap();
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    sink.lock()
                        .unwrap()
                        .push(v["run_id"].as_str().unwrap().to_owned());
                    let _ = out.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n");
                }
            });
        }
    });
    (seen, url)
}

struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(db: &str, collector: &str) -> Self {
        let mut cmd = cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--delivery-url", collector, "--delivery-queue", "gate"])
            .args(["--delivery-poll-ms", "100"])
            .env("CAIRN_AUTH__TOKENS", FULL);
        let common::Serving { child, addr, .. } = common::serve(&mut cmd, DEADLINE);
        Self {
            child,
            base: format!("http://{addr}"),
        }
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + DEADLINE;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the server stops in time");
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

#[test]
fn enqueue_url_goes_through_a_running_server_else_straight_to_the_store_with_one_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cairn.db").display().to_string();
    // A store the HTTP path must never touch: the command names it, the server does not use it.
    let elsewhere = dir.path().join("elsewhere.db").display().to_string();
    let (delivered, collector_url) = collector();
    let server = Server::start(&db, &collector_url);
    let url = server.base.clone();

    // Server up: the run goes through it.
    let (id, how) = printed(&enqueue(&elsewhere, &url, FULL, "sha1"));
    assert_eq!(how, "created");
    assert!(
        !std::path::Path::new(&elsewhere).exists(),
        "the HTTP path wrote no store of its own"
    );
    let (again, how) = printed(&enqueue(&elsewhere, &url, FULL, "sha1"));
    assert_eq!((again.as_str(), how.as_str()), (id.as_str(), "existing"));
    // A server that answers with an error is reported, never bypassed.
    let refused = enqueue(&db, &url, "wrong-token-0000000000", "sha2");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains(&url), "the URL is not printed: {stderr}");

    // While the server runs, an enqueue that finds nobody at its URL writes straight to the
    // store, and the running server delivers that run without a restart.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (direct, how) = printed(&enqueue(&db, &dead, FULL, "sha3"));
    assert_eq!(how, "created");
    let deadline = Instant::now() + DEADLINE;
    while !delivered.lock().unwrap().contains(&direct) {
        assert!(
            Instant::now() < deadline,
            "the running server delivers the straight-to-store run"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(delivered.lock().unwrap().contains(&id));

    // Server down: the same key goes straight to the store and finds the same run.
    server.stop();
    let (down, how) = printed(&enqueue(&db, &url, FULL, "sha1"));
    assert_eq!((down.as_str(), how.as_str()), (id.as_str(), "existing"));
    let (down3, how) = printed(&enqueue(&db, &url, FULL, "sha3"));
    assert_eq!(
        (down3.as_str(), how.as_str()),
        (direct.as_str(), "existing")
    );
}

/// An address where nobody listens (bound, then released).
fn nobody() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

/// `cairn enqueue --url URL` with no `--database` and no `CAIRN_…` variable, its home and data
/// directory under `home` (so the platform default store would land there).
fn enqueue_without_database(home: &std::path::Path, url: &str, key: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("CAIRN_") {
            cmd.env_remove(var);
        }
    }
    cmd.env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .args(["enqueue", "--queue", "gate", "--key", "gate"])
        .args(["--key-part", "refs/heads/main", "--key-part", key])
        .args(["--payload", "{}", "--url", url]);
    cmd
}

/// The one stderr line of a refused fallback, checked.
fn refused_fallback(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "nothing printed as created: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("no cairn server answered") && err.contains("nothing was written"),
        "{err}"
    );
    err
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Issue 21 item 4: with nobody answering at `--url`, the run goes to a store only when
/// `--database` or `CAIRN_DATABASE` names one that exists. Without one — the platform default
/// would be a fresh store no server reads — and with a named store that does not exist, the
/// command exits 1 with one line saying the server was unreachable and nothing was written,
/// and creates no file.
#[test]
fn enqueue_url_with_nobody_answering_writes_only_to_an_existing_named_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let dead = nobody();

    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let out = enqueue_without_database(&home, &dead, "sha1")
        .output()
        .unwrap();
    let err = refused_fallback(&out);
    assert!(err.contains("--database"), "{err}");
    assert!(!err.contains(&dead), "the URL is not printed: {err}");
    assert_eq!(files_under(&home), Vec::<std::path::PathBuf>::new());

    let missing = dir.path().join("missing.db");
    let out = enqueue(missing.to_str().unwrap(), &dead, FULL, "sha1");
    refused_fallback(&out);
    assert!(!missing.exists(), "no store was created");

    // An empty file is no store either (SQLite would take it as an empty database and the
    // fallback would create one in it).
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let out = enqueue(empty.to_str().unwrap(), &dead, FULL, "sha1");
    refused_fallback(&out);
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "nothing was written into the empty file"
    );

    // A store that exists, named by CAIRN_DATABASE: the run goes there, and the same key
    // named by --database finds it.
    let db = dir.path().join("named.db");
    let db = db.to_str().unwrap();
    let made = cairn(db)
        .args(["append", "--space", "s", "--kind", "k", "--payload", "p"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let out = enqueue_without_database(&home, &dead, "sha1")
        .env("CAIRN_DATABASE", db)
        .output()
        .unwrap();
    let (id, how) = printed(&out);
    assert_eq!(how, "created");
    let (again, how) = printed(&enqueue(db, &dead, FULL, "sha1"));
    assert_eq!((again.as_str(), how.as_str()), (id.as_str(), "existing"));
    assert_eq!(files_under(&home), Vec::<std::path::PathBuf>::new());
}

/// Whether schema `schema` exists on the server `conn` is connected to.
async fn schema_exists(conn: &mut sqlx::PgConnection, schema: &str) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(schema)
        .fetch_one(conn)
        .await
        .unwrap()
}

/// Issue 21 item 4 on Postgres: a named schema that holds no store is not created by the
/// fallback; once the store exists there, the run goes to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_url_with_nobody_answering_writes_only_to_an_existing_named_postgres_store() {
    use sqlx::Connection;
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_enqueue_fallback");
    let sep = if pg.contains('?') { '&' } else { '?' };
    let url = format!("{pg}{sep}cairn_schema={schema}");
    let dead = nobody();
    let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();

    let (u, d) = (url.clone(), dead.clone());
    let out = tokio::task::spawn_blocking(move || enqueue(&u, &d, FULL, "sha1"))
        .await
        .unwrap();
    refused_fallback(&out);
    assert!(
        !schema_exists(&mut conn, &schema).await,
        "no schema was created"
    );

    let (u, d) = (url.clone(), dead.clone());
    let (made, first, again) = tokio::task::spawn_blocking(move || {
        let made = cairn(&u)
            .args(["append", "--space", "s", "--kind", "k", "--payload", "p"])
            .output()
            .unwrap();
        (
            made,
            enqueue(&u, &d, FULL, "sha1"),
            enqueue(&u, &d, FULL, "sha1"),
        )
    })
    .await
    .unwrap();
    assert!(made.status.success(), "{made:?}");
    let (id, how) = printed(&first);
    assert_eq!(how, "created");
    assert_eq!(printed(&again), (id, "existing".to_owned()));
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// Something accepted the connection but the exchange failed before a request went out (here:
/// `https://` to a listener that answers plain text, so the TLS handshake fails). That is not
/// "nobody answered": the command fails, names no URL, and the named store is not written.
#[test]
fn enqueue_url_whose_tls_handshake_fails_does_not_take_the_direct_path() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("named.db");
    let db = db.to_str().unwrap();
    let made = cairn(db)
        .args(["append", "--space", "s", "--kind", "k", "--payload", "p"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    // Answers every connection with plain HTTP, whatever it receives; stops with the test.
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let out = enqueue(db, &url, FULL, "tls");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "nothing printed as created: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!err.contains(&url), "the URL is not printed: {err}");
    let runs = cairn(db).args(["runs"]).output().unwrap();
    assert!(runs.status.success(), "{runs:?}");
    assert!(
        String::from_utf8_lossy(&runs.stdout).trim().is_empty(),
        "no run in the store: {runs:?}"
    );
}
