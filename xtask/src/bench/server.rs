//! `cargo xtask bench server`: the HTTP API of the real `cairn serve` binary on loopback against
//! the same operations through the library (`cairn::Store`), in one run, on two fresh stores of
//! the same backend, with the same number of concurrent clients for the same time.
//!
//! Operations: appends (a one-event epoch; each client appends to its own space), enqueues
//! (every key distinct, so every enqueue creates a run) and overlapping batches (`POST
//! /v1/batch`, and a library transaction doing the same: one-event appends to 3 of 4 spaces
//! and enqueues of 6 of 12 keys all clients share, each list in an order of its own, so every
//! batch contends with the others for its locks). Each client issues one operation at a time;
//! HTTP clients share one keep-alive connection pool.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::figures::{fmt_duration, printable_command, thousands};
use super::setup::{random_tag, Backend};

/// Options of `bench server`.
#[derive(clap::Args)]
pub(crate) struct ServerArgs {
    /// Backend to measure.
    #[arg(long, value_enum)]
    backend: Backend,
    /// Concurrent clients, each with one operation in flight.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    clients: u64,
    /// Seconds each operation is measured on each side.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    seconds: u64,
    /// Postgres: the server (default: the test server, found like the test suite finds it);
    /// two fresh schemas are created and dropped. Not used for SQLite (temporary files).
    #[arg(long, value_name = "URL")]
    database: Option<String>,
}

/// The bearer token of the benchmarked server (loopback only, for this run).
pub(super) const TOKEN: &str = "bench-server-token-0123456789";

/// One side's figures for one operation.
struct Figures {
    ops: u64,
    seconds: f64,
    p50: Duration,
    p99: Duration,
}

impl Figures {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.seconds
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Append,
    Enqueue,
    Batch,
}

/// The operations measured, in the report's order.
const OPS: [Op; 3] = [Op::Append, Op::Enqueue, Op::Batch];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Append => "append (1 event)",
            Self::Enqueue => "enqueue (new key)",
            Self::Batch => "batch (3 of 4 shared spaces, 6 of 12 shared keys)",
        }
    }
}

/// The shared spaces and keys batch `i` of `client` writes (indices into 4 spaces and 12
/// keys), each list in an order of its own (xorshift64* over the client and the batch).
fn batch_picks(client: usize, i: u64) -> (Vec<usize>, Vec<usize>) {
    let mut x = (client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ i.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut shuffle = |n: usize, keep: usize| -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for j in (1..n).rev() {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
            v.swap(j, (r % (j as u64 + 1)) as usize);
        }
        v.truncate(keep);
        v
    };
    let spaces = shuffle(4, 3);
    (spaces, shuffle(12, 6))
}

/// A fresh store's URL, and what removes it at the end.
struct FreshStore {
    url: String,
    _dir: Option<tempfile::TempDir>,
    drop_schema: Option<(String, String)>,
}

async fn fresh_store(
    backend: Backend,
    database: Option<&str>,
    tag: &str,
) -> Result<FreshStore, String> {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::Builder::new()
                .prefix("cairn-bench-server-")
                .tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let url = dir.path().join("bench.db").display().to_string();
            Ok(FreshStore {
                url,
                _dir: Some(dir),
                drop_schema: None,
            })
        }
        Backend::Postgres => {
            let base = match database {
                Some(url) => url.to_owned(),
                None => cairn::testkit::postgres::testkit::test_server_url().await?,
            };
            let schema = format!("cairn_bench_{tag}");
            let sep = if base.contains('?') { '&' } else { '?' };
            Ok(FreshStore {
                url: format!("{base}{sep}cairn_schema={schema}"),
                _dir: None,
                drop_schema: Some((base, schema)),
            })
        }
    }
}

impl FreshStore {
    async fn remove(self) {
        if let Some((base, schema)) = self.drop_schema {
            if let Ok(pool) = sqlx::PgPool::connect(&base).await {
                let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .execute(&pool)
                    .await;
                pool.close().await;
            }
        }
    }
}

/// Runs the benchmark and prints its report.
pub(crate) async fn run(args: ServerArgs) -> Result<(), String> {
    let binary = build_cairn()?;
    let window = Duration::from_secs(args.seconds);
    let clients = usize::try_from(args.clients).map_err(|e| e.to_string())?;
    let tag = random_tag();

    let server_store = fresh_store(
        args.backend,
        args.database.as_deref(),
        &format!("srv_{tag}"),
    )
    .await?;
    let mut server = Served::start(&binary, &server_store.url)?;
    eprintln!("server listening on {}", server.base);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .tcp_nodelay(true)
        .no_proxy()
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let mut over_http = Vec::new();
    for op in OPS {
        eprintln!(
            "HTTP: {} for {} with {clients} clients…",
            op.name(),
            fmt_duration(window)
        );
        let (http, base, tag) = (http.clone(), server.base.clone(), tag.clone());
        over_http.push(
            measure(clients, window, move |client, i| {
                let (http, base, tag) = (http.clone(), base.clone(), tag.clone());
                async move { http_op(&http, &base, op, client, i, &tag).await }
            })
            .await?,
        );
    }
    server.stop();
    server_store.remove().await;

    let lib_store = fresh_store(
        args.backend,
        args.database.as_deref(),
        &format!("lib_{tag}"),
    )
    .await?;
    let store = cairn::Store::open(&lib_store.url)
        .await
        .map_err(|e| e.to_string())?;
    let mut in_process = Vec::new();
    for op in OPS {
        eprintln!(
            "library: {} for {} with {clients} clients…",
            op.name(),
            fmt_duration(window)
        );
        let epochs = store.epochs();
        let spool = store.spool();
        let tag = tag.clone();
        let store = store.clone();
        in_process.push(
            measure(clients, window, move |client, i| {
                let epochs = epochs.clone();
                let spool = spool.clone();
                let tag = tag.clone();
                let store = store.clone();
                async move {
                    match op {
                        Op::Append => {
                            let space = cairn::SpaceId::new(format!("bench-{tag}-{client}"))
                                .map_err(|e| e.to_string())?;
                            epochs
                                .append(&space, vec![cairn::Event::new("bench", "payload")])
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        Op::Enqueue => {
                            let queue =
                                cairn::QueueName::new("bench").map_err(|e| e.to_string())?;
                            let key = cairn::DedupKey::from_parts([
                                tag.clone(),
                                client.to_string(),
                                i.to_string(),
                            ])
                            .map_err(|e| e.to_string())?;
                            spool
                                .enqueue(&queue, &key, b"payload".to_vec(), Default::default())
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        Op::Batch => library_batch(&store, &tag, client, i)
                            .await
                            .map_err(|e| e.to_string())?,
                    }
                    Ok(())
                }
            })
            .await?,
        );
    }
    store.close().await.map_err(|e| e.to_string())?;
    lib_store.remove().await;

    report(&args, clients, window, &over_http, &in_process);
    Ok(())
}

/// `clients` tasks each run `op` back to back for `window`; returns the figures.
async fn measure<F, Fut>(clients: usize, window: Duration, op: F) -> Result<Figures, String>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static + Clone,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let op = op.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    op(client, i).await?;
                    latencies.push(t.elapsed());
                    i += 1;
                }
                Ok::<_, String>(latencies)
            })
        })
        .collect();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.map_err(|e| e.to_string())??);
    }
    let seconds = started.elapsed().as_secs_f64();
    if all.is_empty() {
        return Err("no operation finished in the window".into());
    }
    all.sort();
    let pct = |p: f64| all[((all.len() - 1) as f64 * p).round() as usize];
    Ok(Figures {
        ops: all.len() as u64,
        seconds,
        p50: pct(0.50),
        p99: pct(0.99),
    })
}

/// What `POST /v1/batch` does for batch `i` of `client`, as a library transaction: the
/// spaces' locks up front, the appends, the keys as one bulk enqueue.
async fn library_batch(
    store: &cairn::Store,
    tag: &str,
    client: usize,
    i: u64,
) -> cairn::Result<()> {
    let (spaces, keys) = batch_picks(client, i);
    let spaces = spaces
        .iter()
        .map(|s| cairn::SpaceId::new(format!("bench-{tag}-shared-{s}")))
        .collect::<cairn::Result<Vec<_>>>()?;
    let items = keys
        .iter()
        .map(|k| {
            let key = cairn::DedupKey::from_parts([tag, "shared", &k.to_string()])?;
            Ok(cairn::spool::EnqueueItem::new(key, "payload"))
        })
        .collect::<cairn::Result<Vec<_>>>()?;
    let queue = cairn::QueueName::new("bench-batch")?;
    let mut tx = store.begin().await?;
    tx.lock_spaces(&spaces).await?;
    for space in &spaces {
        tx.append(space, vec![cairn::Event::new("bench", "payload")])
            .await?;
    }
    tx.enqueue_many(&queue, items).await?;
    tx.commit().await
}

async fn http_op(
    http: &reqwest::Client,
    base: &str,
    op: Op,
    client: usize,
    i: u64,
    tag: &str,
) -> Result<(), String> {
    let (path, body, want) = match op {
        Op::Append => (
            format!("{base}/v1/spaces/bench-{tag}-{client}/epochs"),
            r#"{"events": [{"kind": "bench", "payload": "payload"}]}"#.to_owned(),
            201,
        ),
        Op::Enqueue => (
            format!("{base}/v1/queues/bench/runs"),
            format!(r#"{{"key_parts": ["{tag}", "{client}", "{i}"], "payload": "payload"}}"#),
            201,
        ),
        Op::Batch => {
            let (spaces, keys) = batch_picks(client, i);
            let appends = spaces.iter().map(|s| {
                serde_json::json!({"op": "append", "space": format!("bench-{tag}-shared-{s}"),
                                   "events": [{"kind": "bench", "payload": "payload"}]})
            });
            let enqueues = keys.iter().map(|k| {
                serde_json::json!({"op": "enqueue", "queue": "bench-batch",
                                   "key_parts": [tag, "shared", k.to_string()],
                                   "payload": "payload"})
            });
            let ops: Vec<serde_json::Value> = appends.chain(enqueues).collect();
            (
                format!("{base}/v1/batch"),
                serde_json::json!({ "ops": ops }).to_string(),
                200,
            )
        }
    };
    let resp = http
        .post(path)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = resp.status().as_u16();
    // Reading the body to its end returns the connection to the pool.
    let text = resp.bytes().await.map_err(|e| e.to_string())?;
    if status != want {
        return Err(format!(
            "the server answered {status}: {}",
            String::from_utf8_lossy(&text)
        ));
    }
    Ok(())
}

/// Builds the `cairn` binary with xtask's own profile; returns its path. `CAIRN_BENCH_BINARY`
/// names one built already (e.g. by `cargo build --release -p xtask -p cairn-server`, whose
/// features differ from `-p cairn-server` alone and would build the tree again).
pub(super) fn build_cairn() -> Result<std::path::PathBuf, String> {
    if let Some(given) = std::env::var_os("CAIRN_BENCH_BINARY") {
        let given = std::path::PathBuf::from(given);
        return if given.is_file() {
            Ok(given)
        } else {
            Err(format!(
                "CAIRN_BENCH_BINARY: no file at {}",
                given.display()
            ))
        };
    }
    let release = !cfg!(debug_assertions);
    let mut cmd = crate::cargo::plain_cargo();
    cmd.args(["build", "-p", "cairn-server", "--bin", "cairn"]);
    if release {
        cmd.arg("--release");
    }
    eprintln!(
        "building the cairn binary ({})…",
        if release { "release" } else { "dev" }
    );
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("building the cairn binary failed".into());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("cannot find xtask's target directory")?;
    let binary = dir.join(format!("cairn{}", std::env::consts::EXE_SUFFIX));
    if binary.exists() {
        Ok(binary)
    } else {
        Err(format!("no cairn binary at {}", binary.display()))
    }
}

/// A running `cairn serve`.
pub(super) struct Served {
    child: Child,
    pub(super) base: String,
}

impl Served {
    pub(super) fn start(binary: &std::path::Path, url: &str) -> Result<Self, String> {
        use std::io::BufRead;
        let mut child = Command::new(binary)
            .env_remove("CAIRN_CONFIG")
            .env("CAIRN_AUTH__TOKENS", TOKEN)
            .args(["--database", url, "serve", "--listen", "127.0.0.1:0"])
            .args(["--backfill-enabled", "false"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Request lines are written (that cost is the server's) and dropped.
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start cairn serve: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut first = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .map_err(|e| e.to_string())?;
        let addr = first
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("cairn serve did not start: {first:?}"))?
            .to_owned();
        Ok(Self {
            child,
            base: format!("http://{addr}"),
        })
    }

    pub(super) fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn report(args: &ServerArgs, clients: usize, window: Duration, http: &[Figures], lib: &[Figures]) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    println!(
        "### Server vs library: {}, {clients} clients",
        args.backend.name()
    );
    println!();
    println!("Command: `{}`", printable_command(std::env::args().skip(1)));
    println!();
    println!(
        "Machine: {cores} cores, {} {}, binaries built with the {profile} profile. Each \
         operation measured {} per side with {clients} concurrent clients (one operation in \
         flight each); HTTP over loopback with keep-alive, the server logging every request.",
        std::env::consts::OS,
        std::env::consts::ARCH,
        fmt_duration(window),
    );
    println!();
    println!(
        "| {} | server ops/s | server p50 | server p99 | library ops/s | library p50 | library p99 | server ÷ library | target ≥50% |",
        args.backend.name()
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for (op, (h, l)) in OPS.iter().zip(http.iter().zip(lib)) {
        let ratio = h.rate() / l.rate();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0}% | {} |",
            op.name(),
            thousands(h.rate().round() as u64),
            fmt_duration(h.p50),
            fmt_duration(h.p99),
            thousands(l.rate().round() as u64),
            fmt_duration(l.p50),
            fmt_duration(l.p99),
            ratio * 100.0,
            if ratio >= 0.5 { "met" } else { "not met" },
        );
    }
    println!();
    println!(
        "({} HTTP and {} library operations in total.)",
        thousands(http.iter().map(|f| f.ops).sum()),
        thousands(lib.iter().map(|f| f.ops).sum())
    );
}
