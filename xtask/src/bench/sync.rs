//! `cargo xtask bench sync`: what `cairn sync` costs. Two rows per pair of engines:
//!
//! - **difference**: two copies of a space holding the same `--history` epochs, the sender
//!   `--diff` epochs ahead — once negotiated (a sender the receiver holds no cursor for:
//!   heads, then the history newest first with one `need` call per page) and once by the
//!   receiver's cursor — with the bytes moved between the sides;
//! - **first sync**: `--initial` epochs into an empty store, epochs per second.
//!
//! Between stores opened here, bytes are counted by a metering side in front of each store, in
//! a fixed encoding: an id 32 bytes, a seq or a count 8, an event its stored bytes (kind, key,
//! payload) plus 8 — what any wire format must carry at least. Over HTTP (`cairn sync` into a
//! `cairn serve` over the receiver), a counting TCP proxy between the two counts the bytes on
//! the wire, both ways, HTTP headers and JSON included.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cairn::sync::{StoreId, Sync, SyncCursor, SyncEndpoint, SyncOptions, SyncPeer, SyncReport};
use cairn::{
    epoch_id, Epoch, EpochId, EpochSummary, Event, ForeignEpoch, Head, ImportOutcome, Result, Seq,
    SpaceId,
};

use super::appends::Fresh;
use super::figures::{printable_command, thousands};
use super::setup::{random_tag, store_err, Backend};

/// Options of `bench sync`.
#[derive(clap::Args)]
pub(crate) struct SyncArgs {
    /// Engines to pair, or `all` (every ordered pair).
    #[arg(long, value_enum)]
    backend: super::spool::BackendChoice,
    /// Epochs both copies share in the difference row.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    history: u64,
    /// Epochs the sender is ahead by.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    diff: u64,
    /// Epochs of the first-sync row.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    initial: u64,
    /// Leave out the rows over HTTP (`cairn sync` into a `cairn serve`, which this builds).
    #[arg(long)]
    no_http: bool,
}

/// The stored bytes of a bench event.
const PAYLOAD: usize = 100;

/// `n` epochs of a chain in `space` after `parent`, made here (ids computed as any store
/// computes them), so every store holds the very same history.
fn chain(space: &SpaceId, parent: Option<EpochId>, n: u64, tag: &str) -> Vec<ForeignEpoch> {
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    let mut parent = parent;
    for i in 0..n {
        let mut payload = format!("{tag}-{i}-").into_bytes();
        payload.resize(PAYLOAD, b'.');
        let events = vec![Event::new("bench.sync", payload)];
        let parents: Vec<EpochId> = parent.into_iter().collect();
        let ids: Vec<_> = events.iter().map(Event::id).collect();
        let id = epoch_id(space, &parents, &ids);
        out.push(ForeignEpoch {
            space: space.clone(),
            id,
            parents,
            events,
        });
        parent = Some(id);
    }
    out
}

/// Imports `epochs` in batches of 1,000 (one transaction each); returns epochs per second.
async fn fill(store: &Fresh, space: &SpaceId, epochs: Vec<ForeignEpoch>) -> Result<f64> {
    let t = Instant::now();
    let n = epochs.len();
    let diag = store.diagnostics();
    let mut epochs = epochs.into_iter().peekable();
    while epochs.peek().is_some() {
        let batch: Vec<ForeignEpoch> = epochs.by_ref().take(1000).collect();
        diag.import_batch(space, batch, None, 0).await?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64().max(1e-9))
}

/// A side that counts what crosses it, in the fixed encoding of the module docs.
#[derive(Debug)]
struct Metered {
    inner: Arc<dyn SyncEndpoint>,
    bytes: Arc<AtomicU64>,
    /// Answers a fresh id instead of the store's: a sender the receiver never synced from.
    id: Option<StoreId>,
}

fn epoch_size(parents: usize, events: &[Event]) -> u64 {
    (48 + 32 * parents + events.iter().map(|e| e.stored_bytes() + 8).sum::<usize>()) as u64
}

impl Metered {
    fn add(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }
}

#[async_trait]
impl SyncEndpoint for Metered {
    fn label(&self) -> String {
        self.inner.label()
    }
    async fn store_id(&self) -> Result<StoreId> {
        self.add(32);
        match &self.id {
            Some(id) => Ok(id.clone()),
            None => self.inner.store_id().await,
        }
    }
    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        let l = self.inner.list_spaces(after, limit).await?;
        self.add(l.iter().map(|s| s.as_bytes().len() as u64 + 8).sum());
        Ok(l)
    }
    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let h = self.inner.heads(space).await?;
        self.add(40 * h.len() as u64);
        Ok(h)
    }
    async fn summaries(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        let s = self.inner.summaries(space, before, limit).await?;
        self.add(
            16 + s
                .iter()
                .map(|e| 48 + 32 * e.parents.len() as u64)
                .sum::<u64>(),
        );
        Ok(s)
    }
    async fn epochs(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<Epoch>> {
        let e = self.inner.epochs(space, ids).await?;
        self.add(
            32 * ids.len() as u64
                + e.iter()
                    .map(|e| epoch_size(e.parents.len(), &e.events))
                    .sum::<u64>(),
        );
        Ok(e)
    }
    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        let m = self.inner.missing(space, ids).await?;
        self.add(32 * (ids.len() + m.len()) as u64);
        Ok(m)
    }
    async fn peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        let p = self.inner.peers(space).await?;
        self.add(96 * p.len() as u64);
        Ok(p)
    }
    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        self.add(
            epochs
                .iter()
                .map(|e| epoch_size(e.parents.len(), &e.events))
                .sum::<u64>()
                + 80,
        );
        let o = self
            .inner
            .import_batch(space, epochs, cursor, at_us)
            .await?;
        self.add(8 * o.len() as u64);
        Ok(o)
    }
}

struct Measured {
    report: SyncReport,
    bytes: u64,
    took: Duration,
}

/// One sync from `from` to `to` of `space`, metered on both sides.
async fn measure(from: &Fresh, to: &Fresh, space: &SpaceId, fresh_id: bool) -> Result<Measured> {
    let bytes = Arc::new(AtomicU64::new(0));
    let side = |f: &Fresh, label: &str, id: Option<StoreId>| -> Arc<dyn SyncEndpoint> {
        Arc::new(Metered {
            inner: Arc::new(cairn::sync::LocalEndpoint::new(f.diagnostics(), label)),
            bytes: bytes.clone(),
            id,
        })
    };
    let from = side(from, "sender", fresh_id.then(StoreId::random));
    let to = side(to, "receiver", None);
    let t = Instant::now();
    let report = Sync::new(from, to)
        .space(space.clone())
        .options(SyncOptions::default())
        .run()
        .await?;
    Ok(Measured {
        report,
        took: t.elapsed(),
        bytes: bytes.load(Ordering::Relaxed),
    })
}

fn row(pair: &str, what: &str, m: &Measured) {
    let r = &m.report.spaces[0];
    println!(
        "| {pair} | {what} | {:?} | {} | {} | {} | {} | {:.1} ms |",
        r.path,
        thousands(r.epochs),
        thousands(r.summaries),
        thousands(r.ids_checked),
        thousands(m.bytes),
        m.took.as_secs_f64() * 1000.0
    );
}

/// Copies `from`'s epoch log into the empty store `to` of the same engine with the engine's
/// own bulk copy (the tables row for row): a second copy of a long history without importing
/// it again.
async fn copy_log(from: &Fresh, to: &Fresh) -> std::result::Result<(), String> {
    const TABLES: [&str; 4] = ["epoch", "epoch_parent", "epoch_event", "epoch_head"];
    match (from, to) {
        (Fresh::Sqlite { _dir: a, .. }, Fresh::Sqlite { _dir: b, .. }) => {
            let (src, dst) = (a.path().join("log.db"), b.path().join("log.db"));
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open(&dst).map_err(|e| e.to_string())?;
                conn.busy_timeout(Duration::from_secs(30))
                    .map_err(|e| e.to_string())?;
                conn.execute("ATTACH DATABASE ?1 AS src", [src.display().to_string()])
                    .map_err(|e| e.to_string())?;
                let mut sql = String::from("BEGIN IMMEDIATE;");
                for t in TABLES {
                    sql.push_str(&format!("INSERT INTO main.{t} SELECT * FROM src.{t};"));
                }
                sql.push_str("COMMIT;");
                conn.execute_batch(&sql).map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())?
        }
        (Fresh::Postgres(_, pool, a), Fresh::Postgres(_, _, b)) => {
            let mut sql = String::from("BEGIN;");
            for t in TABLES {
                sql.push_str(&format!("INSERT INTO {b}.{t} SELECT * FROM {a}.{t};"));
            }
            sql.push_str("COMMIT;");
            sqlx::raw_sql(&sql)
                .execute(pool)
                .await
                .map(|_| ())
                .map_err(|e| format!("cannot copy the bench history: {e}"))
        }
        _ => Err("a copy goes between stores of one engine".into()),
    }
}

/// The space's newest head on `store`.
async fn tip(store: &Fresh, space: &SpaceId) -> std::result::Result<Option<EpochId>, String> {
    let heads = store.diagnostics().heads(space).await.map_err(store_err)?;
    Ok(heads.iter().max_by_key(|h| h.seq).map(|h| h.id))
}

/// Appends `n` epochs after the space's newest head on `store`.
async fn extend(
    store: &Fresh,
    space: &SpaceId,
    n: u64,
    tag: &str,
) -> std::result::Result<(), String> {
    let after = tip(store, space).await?;
    fill(store, space, chain(space, after, n, tag))
        .await
        .map_err(store_err)?;
    Ok(())
}

/// Two copies of one history per engine: the sender and the receiver of its pairs.
struct Copies {
    sender: Fresh,
    receiver: Fresh,
}

/// Runs the benchmark and prints its report.
pub(crate) async fn run(args: SyncArgs) -> std::result::Result<(), String> {
    let backends = args.backend.backends();
    let pg_url = if backends.contains(&Backend::Postgres) {
        Some(cairn::testkit::postgres::testkit::test_server_url().await?)
    } else {
        None
    };
    let url = pg_url.as_deref();
    println!(
        "`{}` — history {} epochs, sender ahead by {}, first sync of {}; release profile: {}",
        printable_command(std::env::args().skip(1)),
        thousands(args.history),
        args.diff,
        thousands(args.initial),
        !cfg!(debug_assertions)
    );
    let binary = if args.no_http {
        None
    } else {
        Some(super::server::build_cairn()?)
    };
    let tag = random_tag();
    let space = SpaceId::new(format!("bench-sync-{tag}")).map_err(store_err)?;
    let first = SpaceId::new(format!("bench-sync-first-{tag}")).map_err(store_err)?;
    let mut copies = Vec::new();
    for b in &backends {
        eprintln!(
            "{}: importing {} epochs…",
            b.name(),
            thousands(args.history)
        );
        let sender = Fresh::open(*b, url).await?;
        let rate = fill(&sender, &space, chain(&space, None, args.history, "shared"))
            .await
            .map_err(store_err)?;
        eprintln!(
            "{}: {rate:.0} epochs/s (import_batch, 1,000 per batch); copying…",
            b.name()
        );
        let receiver = Fresh::open(*b, url).await?;
        copy_log(&sender, &receiver).await?;
        fill(&sender, &first, chain(&first, None, args.initial, "first"))
            .await
            .map_err(store_err)?;
        copies.push((*b, Copies { sender, receiver }));
    }
    println!();
    println!("| sender → receiver | sync | path | epochs moved | summaries read | ids checked | bytes moved | time |");
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    let mut n = 0;
    for (a, from) in &copies {
        for (b, to) in &copies {
            n += 1;
            let pair = format!("{} → {}", a.name(), b.name());
            eprintln!("{pair}…");
            let (from, to) = (&from.sender, &to.receiver);
            // Equal copies first (earlier pairs moved epochs), with a cursor for the sender.
            measure(from, to, &space, false).await.map_err(store_err)?;
            extend(from, &space, args.diff, &format!("ahead-{n}")).await?;
            let negotiated = measure(from, to, &space, true).await.map_err(store_err)?;
            row(
                &pair,
                &format!("{} apart, no cursor", args.diff),
                &negotiated,
            );
            measure(from, to, &space, false).await.map_err(store_err)?;
            extend(from, &space, args.diff, &format!("more-{n}")).await?;
            let cursor = measure(from, to, &space, false).await.map_err(store_err)?;
            row(&pair, &format!("{} apart, by cursor", args.diff), &cursor);

            let empty = Fresh::open(*b, url).await?;
            let m = measure(from, &empty, &first, false)
                .await
                .map_err(store_err)?;
            row(
                &pair,
                &format!("first sync of {}", thousands(args.initial)),
                &m,
            );
            println!(
                "| {pair} | first sync: {:.0} epochs/s | | | | | | |",
                m.report.epochs() as f64 / m.took.as_secs_f64().max(1e-9)
            );
            empty.close().await?;

            if let Some(binary) = &binary {
                extend(from, &space, args.diff, &format!("http-{n}")).await?;
                let h = over_http(binary, from, to, &space, url).await?;
                http_row(&pair, &format!("{} apart, by cursor", args.diff), h);
                let empty = Fresh::open(*b, url).await?;
                let h = over_http(binary, from, &empty, &first, url).await?;
                http_row(
                    &pair,
                    &format!("first sync of {}", thousands(args.initial)),
                    h,
                );
                println!(
                    "| {pair} | first sync over HTTP: {:.0} epochs/s (the command's start and opens included) | | | | | | |",
                    h.0 as f64 / h.2.as_secs_f64().max(1e-9)
                );
                empty.close().await?;
            }
        }
    }
    for (_, c) in copies {
        c.sender.close().await?;
        c.receiver.close().await?;
    }
    Ok(())
}

/// A loopback TCP proxy in front of `upstream` that counts every byte it carries, both ways:
/// the bytes an HTTP sync puts on the wire, headers included.
struct Proxy {
    addr: std::net::SocketAddr,
    bytes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: &str) -> std::result::Result<Self, String> {
        let upstream = upstream
            .strip_prefix("http://")
            .ok_or("the server's address is not http://")?
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let bytes = Arc::new(AtomicU64::new(0));
        let counted = bytes.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, counted) = (upstream.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = tokio::io::copy(&mut cr, &mut sw);
                    let down = tokio::io::copy(&mut sr, &mut cw);
                    let (a, b) = tokio::join!(up, down);
                    counted.fetch_add(a.unwrap_or(0) + b.unwrap_or(0), Ordering::Relaxed);
                });
            }
        });
        Ok(Self { addr, bytes, task })
    }
}

/// `cairn sync SENDER http://proxy --space S` into a `cairn serve` over `to`; the bytes on the
/// wire and the time the command took (its start and the sender's open included).
async fn over_http(
    binary: &std::path::Path,
    from: &Fresh,
    to: &Fresh,
    space: &SpaceId,
    pg_url: Option<&str>,
) -> std::result::Result<(u64, u64, Duration), String> {
    let mut served = super::server::Served::start(binary, &to.url(pg_url))?;
    let proxy = Proxy::start(&served.base).await?;
    let t = Instant::now();
    let mut cmd = std::process::Command::new(binary);
    cmd.env_remove("CAIRN_CONFIG")
        .env("CAIRN_DEST_TOKEN", super::server::TOKEN)
        .args(["sync", &from.url(pg_url), &format!("http://{}", proxy.addr)])
        .args(["--space", &space.to_string(), "--json"]);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot run cairn sync: {e}"))?;
    let took = t.elapsed();
    served.stop();
    // The server closed its connections: the proxy's copies have ended.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut bytes = proxy.bytes.load(Ordering::Relaxed);
    while Instant::now() < deadline {
        tokio::task::yield_now().await;
        let now = proxy.bytes.load(Ordering::Relaxed);
        if now == bytes && now > 0 {
            break;
        }
        bytes = now;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.task.abort();
    if !out.status.success() {
        return Err(format!(
            "cairn sync failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cairn sync --json printed no report: {e}"))?;
    let epochs = report
        .pointer("/epochs")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("no total epochs in {report}"))?;
    Ok((epochs, bytes, took))
}

fn http_row(pair: &str, what: &str, (epochs, bytes, took): (u64, u64, Duration)) {
    println!(
        "| {pair} | {what} | over HTTP | {} | | | {} on the wire | {:.1} ms |",
        thousands(epochs),
        thousands(bytes),
        took.as_secs_f64() * 1000.0
    );
}
