//! `cairn sync` killed with SIGKILL at random points: each batch commits with its cursor in one
//! transaction, so after every kill the destination is consistent (exact head cache, every
//! epoch with its parents) and every cursor it keeps is true; a last uninterrupted sync then
//! leaves both sides with the union and the same heads.
//!
//! The history (3,000 epochs with forks, some events of a few KB) is made in memory and
//! copied into a SQLite and a Postgres source once; the kills go round SQLite→SQLite,
//! SQLite→Postgres and Postgres→SQLite. `CAIRN_SYNC_KILLS` sets how many kills (default 51),
//! `CAIRN_SYNC_KILL_SEED` the seed of the delays.

mod common;
mod sync_common;

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::sync::{LocalEndpoint, Sync};
use cairn::{EpochDiagnostics, EpochId, EpochStore, Event, MemoryStore, SpaceId, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sync_common::{append, assert_consistent, assert_same, count, open, space, summaries};

/// Epochs in the source's history, at least.
const EPOCHS: u64 = 3000;
/// Kills when `CAIRN_SYNC_KILLS` does not say.
const DEFAULT_KILLS: usize = 51;
/// Epochs per batch of the killed syncs: many batches, so kills land between and inside them.
const BATCH: &str = "25";

/// The history: rounds of appends on a main store, now and then appends on a second store
/// working on an older view, met by a sync both ways (a fork the next main append merges).
async fn history(space: &SpaceId, rng: &mut StdRng) -> MemoryStore {
    let (main, aux) = (MemoryStore::new(), MemoryStore::new());
    let main_side = Arc::new(LocalEndpoint::new(Arc::new(main.clone()), "main"));
    let aux_side = Arc::new(LocalEndpoint::new(Arc::new(aux.clone()), "aux"));
    let meet = Sync::new(aux_side, main_side)
        .space(space.clone())
        .both_ways(true);
    let main_diag: Arc<dyn EpochDiagnostics> = Arc::new(main.clone());
    let mut i = 0u64;
    while count(&main_diag, space).await < EPOCHS {
        for _ in 0..rng.random_range(1..=20) {
            main.append(space, events(rng, &mut i)).await.unwrap();
        }
        if rng.random_bool(0.3) {
            for _ in 0..rng.random_range(1..=6) {
                aux.append(space, events(rng, &mut i)).await.unwrap();
            }
            meet.run().await.unwrap();
        }
    }
    main
}

/// One to three events, one in ten a few KB.
fn events(rng: &mut StdRng, i: &mut u64) -> Vec<Event> {
    (0..rng.random_range(1..=3))
        .map(|_| {
            *i += 1;
            let mut payload = format!("event {i}").into_bytes();
            if rng.random_bool(0.1) {
                payload.resize(rng.random_range(1000..6000), b'k');
            }
            Event::new("note", payload)
        })
        .collect()
}

/// A side of the test: its URL and the store the test holds open on it.
struct Side {
    url: String,
    store: Store,
}

impl Side {
    async fn at(url: String) -> Self {
        let store = open(&url).await;
        Self { url, store }
    }

    fn d(&self) -> Arc<dyn EpochDiagnostics> {
        self.store.diagnostics()
    }
}

/// Where fresh destinations come from.
enum Kind {
    Sqlite,
    Postgres,
}

struct Fresh<'a> {
    dir: &'a std::path::Path,
    pg: &'a str,
    schemas: &'a std::sync::Mutex<Vec<String>>,
    made: usize,
}

impl Fresh<'_> {
    async fn make(&mut self, kind: &Kind) -> Side {
        self.made += 1;
        let url = match kind {
            Kind::Sqlite => self
                .dir
                .join(format!("dst-{}.db", self.made))
                .display()
                .to_string(),
            Kind::Postgres => {
                let schema = cairn::testkit::scratch_name("sync_kill");
                self.schemas.lock().unwrap().push(schema.clone());
                let sep = if self.pg.contains('?') { '&' } else { '?' };
                format!("{}{sep}cairn_schema={schema}", self.pg)
            }
        };
        Side::at(url).await
    }
}

/// One pair the kills go round.
struct Pair {
    name: &'static str,
    source: usize,
    dest_kind: Kind,
    dest: Side,
    /// The source's epoch ids by its seq (index seq - 1).
    by_seq: Vec<EpochId>,
    /// How long one uninterrupted sync of the whole history took.
    full: Duration,
    /// How long a sync that moves nothing took (start, open, compare, exit).
    idle: Duration,
}

fn spawn(from: &str, to: &str) -> Child {
    sync_common::cairn()
        .args(["sync", from, to, "--space", "hist", "--batch", BATCH])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cairn sync")
}

/// Every cursor `dest` keeps for `source` is true: the source's epoch at its seq is its id,
/// and every source epoch at or below it is in `dest`.
async fn assert_cursors_true(
    source: &Arc<dyn EpochDiagnostics>,
    by_seq: &[EpochId],
    dest: &Arc<dyn EpochDiagnostics>,
    space: &SpaceId,
) -> usize {
    let peer = source.store_id().await.unwrap();
    let mut checked = 0;
    for p in dest.sync_peers(space).await.unwrap() {
        if p.cursor.peer != peer {
            continue;
        }
        let seq = usize::try_from(p.cursor.seq.0).unwrap();
        assert!(seq >= 1 && seq <= by_seq.len(), "cursor seq {seq}");
        assert_eq!(by_seq[seq - 1], p.cursor.id, "the cursor's digest");
        for chunk in by_seq[..seq].chunks(cairn::sync::MAX_MISSING_IDS) {
            let lacking = dest.missing(space, chunk).await.unwrap();
            assert!(
                lacking.is_empty(),
                "cursor at seq {seq}, yet {} of the source's epochs below it are missing",
                lacking.len()
            );
        }
        checked += 1;
    }
    checked
}

#[test]
fn sync_kill() {
    let kills: usize = std::env::var("CAIRN_SYNC_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_KILLS);
    let seed: u64 = std::env::var("CAIRN_SYNC_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_c0de);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pg = rt
        .block_on(cairn::testkit::postgres::testkit::test_server_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schemas = std::sync::Mutex::new(Vec::new());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(run(kills, seed, &pg, &schemas));
    }));
    for schema in schemas.lock().unwrap().iter() {
        rt.block_on(common::drop_schema(&pg, schema));
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

async fn run(kills: usize, seed: u64, pg: &str, schemas: &std::sync::Mutex<Vec<String>>) {
    println!("seed {seed}, {kills} kills");
    let mut rng = StdRng::seed_from_u64(seed);
    let s = space("hist");
    let dir = tempfile::tempdir().unwrap();
    let mut fresh = Fresh {
        dir: dir.path(),
        pg,
        schemas,
        made: 0,
    };

    let made = Instant::now();
    let main = history(&s, &mut rng).await;
    let total = count(&(Arc::new(main.clone()) as Arc<dyn EpochDiagnostics>), &s).await;
    let main_side = Arc::new(LocalEndpoint::new(Arc::new(main.clone()), "main"));
    let sources = vec![
        Side::at(dir.path().join("source.db").display().to_string()).await,
        fresh.make(&Kind::Postgres).await,
    ];
    for src in &sources {
        Sync::new(main_side.clone(), src.store.sync_endpoint(None))
            .space(s.clone())
            .run()
            .await
            .unwrap();
        assert_eq!(count(&src.d(), &s).await, total);
        assert_consistent(&src.d(), &s).await;
    }
    println!("history of {total} epochs made in {:?}", made.elapsed());

    let mut pairs = Vec::new();
    for (name, source, dest_kind) in [
        ("sqlite->sqlite", 0, Kind::Sqlite),
        ("sqlite->postgres", 0, Kind::Postgres),
        ("postgres->sqlite", 1, Kind::Sqlite),
    ] {
        let by_seq: Vec<EpochId> = summaries(&sources[source].d(), &s)
            .await
            .into_iter()
            .map(|(_, id, _)| id)
            .collect();
        // One uninterrupted sync into a throwaway destination measures how long a whole one
        // takes: the kills' delays are drawn below it.
        let probe = fresh.make(&dest_kind).await;
        let started = Instant::now();
        let out = spawn(&sources[source].url, &probe.url)
            .wait_with_output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let full = started.elapsed();
        assert_eq!(count(&probe.d(), &s).await, total);
        let started = Instant::now();
        let out = spawn(&sources[source].url, &probe.url)
            .wait_with_output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let idle = started.elapsed().min(full);
        println!("{name}: a whole sync takes {full:?}, one with nothing to move {idle:?}");
        let dest = fresh.make(&dest_kind).await;
        pairs.push(Pair {
            name,
            source,
            dest_kind,
            dest,
            by_seq,
            full,
            idle,
        });
    }

    let (mut killed, mut mid, mut finished, mut resets) = (0usize, 0usize, 0usize, 0usize);
    let mut attempts = 0usize;
    while killed < kills {
        attempts += 1;
        assert!(
            attempts < kills * 6,
            "too many syncs finished before their kill"
        );
        let pair = &mut pairs[attempts % 3];
        let source = &sources[pair.source];
        let before = count(&pair.dest.d(), &s).await;
        // Drawn over about the time this sync needs: the fixed cost, and the transfer's share
        // of what the destination still lacks.
        #[allow(clippy::cast_precision_loss)]
        let left = (total - before) as f64 / total as f64;
        let needs = pair.idle + (pair.full - pair.idle).mul_f64(left);
        let delay = needs.mul_f64(rng.random_range(0.0..1.1));
        let mut child = spawn(&source.url, &pair.dest.url);
        let deadline = Instant::now() + delay;
        let mut exited = None;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                exited = Some(status);
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if exited.is_none() {
            child.kill().unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let after = count(&pair.dest.d(), &s).await;
        assert_consistent(&pair.dest.d(), &s).await;
        assert_cursors_true(&source.d(), &pair.by_seq, &pair.dest.d(), &s).await;
        match exited {
            None => {
                killed += 1;
                if before < after && after < total {
                    mid += 1;
                }
            }
            Some(status) => {
                // Finished before its kill: it succeeded and the destination is whole; the
                // next kill of this pair starts on a fresh destination.
                assert!(
                    status.success(),
                    "{}: {}",
                    pair.name,
                    String::from_utf8_lossy(&out.stderr)
                );
                assert_eq!(after, total, "{}", pair.name);
                finished += 1;
                resets += 1;
                pair.dest = fresh.make(&pair.dest_kind).await;
            }
        }
    }
    println!(
        "{killed} kills, {mid} mid-sync (the destination held more than before and less than \
         all); {finished} syncs finished before their kill ({resets} fresh destinations)"
    );

    // A last sync, uninterrupted and both ways after the destination appended on its own:
    // both sides hold the union, with the same heads.
    for pair in &pairs {
        let source = &sources[pair.source];
        append(pair.dest.d().as_ref(), &s, pair.name, 2).await;
        let out = sync_common::cairn()
            .args([
                "sync",
                &source.url,
                &pair.dest.url,
                "--space",
                "hist",
                "--both-ways",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_same(&source.d(), &pair.dest.d(), &s).await;
        assert!(count(&pair.dest.d(), &s).await > total);
        println!("{}: whole after the last sync", pair.name);
    }
}
