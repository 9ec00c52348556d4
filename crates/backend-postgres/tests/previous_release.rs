//! `previous_release_postgres`: the previous release (72b3161, cairn's set at
//! `0006_spool_run_close`; its spool statements kept in `previous_release/release_72b3161.rs`)
//! and this build share one Postgres store through the rollout of `0007_spool_ready` and its
//! contract revision `0008_spool_ready_contract`:
//!
//! 1. the previous release creates the store and registers in the fleet registry, and leaves
//!    runs behind (queued ones, and one it holds a lease on across the migration);
//! 2. this build opens it, applies `0007_spool_ready` and defers `0008_spool_ready_contract`
//!    because the previous release is live;
//! 3. both enqueue (dedup keys map to one run id across builds, concurrently too), both claim
//!    runs the other enqueued (deterministically first, then concurrently until the queue is
//!    drained) and ack them: every run succeeds exactly once, no run is handed to both, the
//!    leases and due times either build writes are the same function of the same inputs, and
//!    both builds count the same runs;
//! 4. once the previous release is gone (leaving runs queued and a lease it holds), the next
//!    open applies the contract revision: the old claim, expiry and finished indexes are gone
//!    (and no trigger is left on `spool_run`), and the invariant I-ready holds — a
//!    `spool_ready` row exists for a run iff its `due_at` is set, with the run's queue,
//!    priority and `due_at`, and `claimed` iff the run is claimed; no `spool_ready` row
//!    outlives its run. (Before the contract revision `spool_ready` is not complete by design:
//!    the previous release does not write it, and every build claims through `spool_run`'s own
//!    indexes; so I-ready is checked from the contract revision on, where it must hold for the
//!    runs both builds left live, not during the rollout.)
//! 5. the previous release is refused from then on, and this build — the instance that opened
//!    before the contract and the one that applied it — keeps working with I-ready intact: it
//!    acks a lease taken before the contract, drains what was left, reclaims the lease the
//!    previous release held once it expired, and enqueues, claims and acks new runs.

#[path = "previous_release/release_72b3161.rs"]
mod old;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_core::spool::FLOW_REVISION;
use cairn_core::spool::{
    Claimed, Clock, ConsumerId, DedupKey, EnqueueItem, EnqueueOptions, ManualClock, QueueName,
    RunId, RunState, Spool, SpoolConfig, SystemClock,
};
use cairn_core::{scratch_name, Error};
use cairn_migrate::fleet::{default_build_id, FleetEntry, PRUNE_AFTER};
use cairn_migrate::SYNC_REVISION;
use cairn_migrate::{Backend, MigrationBackend, OpenOptions, Opened, CAIRN_SET};
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::{PgBackend, PgMigrator, PgOptions, PgStore};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, Row};

/// The queue every run of the test goes to.
const QUEUE: &str = "rollout";
/// The lease every claim takes (the test's clock never moves, so no lease expires).
const LEASE: Duration = Duration::from_secs(60);
/// How long the concurrent drain may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(120);
/// The expand revision this build applies while the previous release is live.
const EXPAND: &str = "0007_spool_ready";
/// The contract revision the fleet registry gates.
const CONTRACT: &str = "0008_spool_ready_contract";
/// The head of cairn's set in this build (after the contract revision and the ones it held back).
const ROOM: &str = "0011_spool_room";
/// The indexes of `spool_run` the previous release claims through, which the contract drops.
const OLD_INDEXES: [&str; 3] = ["spool_run_claim", "spool_run_expiry", "spool_run_finished"];

/// Which build did something.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
enum Side {
    /// The previous release (the harness).
    Old,
    /// This build (its `Spool`).
    New,
}

/// One hand-out of a run: which run, which attempt, to which build.
#[derive(Clone, Debug)]
struct Handout {
    run: RunId,
    attempt: u32,
    side: Side,
    key: Vec<u8>,
    payload: Vec<u8>,
}

/// Drops the test's schema when the test ends, passed or failed.
struct DropSchema {
    url: String,
    schema: String,
}

impl Drop for DropSchema {
    fn drop(&mut self) {
        let Ok(opts) = PgConnectOptions::from_str(&self.url) else {
            return;
        };
        let schema = self.schema.clone();
        // Drop runs inside the test's runtime, which cannot be blocked on; a helper thread with
        // its own runtime drops the schema. A failure leaves a schema behind, nothing more.
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
                    sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
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

fn queue() -> QueueName {
    QueueName::new(QUEUE).unwrap()
}

fn key(name: &str) -> DedupKey {
    DedupKey::from_bytes(name.as_bytes().to_vec()).unwrap()
}

fn prio(p: i32) -> EnqueueOptions {
    EnqueueOptions::default().priority(p)
}

async fn admin(url: &str) -> PgConnection {
    let opts = PgConnectOptions::from_str(url).expect("test server URL");
    PgConnection::connect_with(&opts)
        .await
        .expect("connect to the test server")
}

/// Every row that breaks I-ready in `schema`, described.
async fn ready_violations(conn: &mut PgConnection, schema: &str) -> Vec<String> {
    let rows = sqlx::query(&format!(
        "SELECT r.run_no, q.run_no, r.state, r.queue, q.queue, r.priority, q.priority, \
             r.due_at, q.due_at, q.claimed \
         FROM \"{schema}\".spool_run r FULL JOIN \"{schema}\".spool_ready q \
             ON q.run_no = r.run_no \
         WHERE r.run_no IS NULL \
            OR (q.run_no IS NULL) <> (r.due_at IS NULL) \
            OR (q.run_no IS NOT NULL AND (q.queue, q.priority, q.due_at, q.claimed) \
                IS DISTINCT FROM (r.queue, r.priority, r.due_at, r.state = 'claimed')) \
         ORDER BY 1, 2"
    ))
    .fetch_all(&mut *conn)
    .await
    .expect("the I-ready query runs");
    rows.iter()
        .map(|r| {
            format!(
                "run_no {:?}/{:?} state {:?} queue {:?}/{:?} priority {:?}/{:?} due_at {:?}/{:?} claimed {:?}",
                r.get::<Option<i64>, _>(0),
                r.get::<Option<i64>, _>(1),
                r.get::<Option<String>, _>(2),
                r.get::<Option<String>, _>(3),
                r.get::<Option<String>, _>(4),
                r.get::<Option<i32>, _>(5),
                r.get::<Option<i32>, _>(6),
                r.get::<Option<i64>, _>(7),
                r.get::<Option<i64>, _>(8),
                r.get::<Option<bool>, _>(9),
            )
        })
        .collect()
}

/// Asserts I-ready in `schema` and that `spool_ready` holds `live` rows, `claimed` of them
/// claimed.
async fn assert_ready(conn: &mut PgConnection, schema: &str, live: i64, claimed: i64, at: &str) {
    let bad = ready_violations(conn, schema).await;
    assert!(
        bad.is_empty(),
        "{at}: I-ready is broken:\n{}",
        bad.join("\n")
    );
    let row = sqlx::query(&format!(
        "SELECT pg_catalog.count(*), pg_catalog.count(*) FILTER (WHERE claimed) \
         FROM \"{schema}\".spool_ready"
    ))
    .fetch_one(&mut *conn)
    .await
    .expect("count spool_ready");
    assert_eq!(
        (row.get::<i64, _>(0), row.get::<i64, _>(1)),
        (live, claimed),
        "{at}: spool_ready's live and claimed rows"
    );
}

/// The names of `spool_run`'s indexes in `schema`.
async fn run_indexes(conn: &mut PgConnection, schema: &str) -> BTreeSet<String> {
    sqlx::query_scalar(
        "SELECT indexname::text FROM pg_catalog.pg_indexes \
         WHERE schemaname = $1 AND tablename = 'spool_run'",
    )
    .bind(schema)
    .fetch_all(&mut *conn)
    .await
    .expect("list indexes")
    .into_iter()
    .collect()
}

/// The names of `spool_ready`'s indexes in `schema`.
async fn ready_indexes(conn: &mut PgConnection, schema: &str) -> BTreeSet<String> {
    sqlx::query_scalar(
        "SELECT indexname::text FROM pg_catalog.pg_indexes \
         WHERE schemaname = $1 AND tablename = 'spool_ready'",
    )
    .bind(schema)
    .fetch_all(&mut *conn)
    .await
    .expect("list indexes")
    .into_iter()
    .collect()
}

/// The user triggers on `spool_run` in `schema`.
async fn run_triggers(conn: &mut PgConnection, schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT t.tgname::text FROM pg_catalog.pg_trigger t \
         JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname = 'spool_run' AND NOT t.tgisinternal \
         ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(&mut *conn)
    .await
    .expect("list triggers")
}

/// The stamp of cairn's set in the store.
async fn stamp(pg: PgOptions) -> Option<String> {
    PgMigrator::new(pg)
        .unwrap()
        .read_state(CAIRN_SET)
        .await
        .expect("read the store's state")
        .stamp
}

/// The previous release's view of the run as this test expects it while `h` holds it: claimed
/// once, under `h`'s token, the lease and the due time both builds compute alike.
async fn assert_held(old: &old::OldSpool, new: &Arc<dyn Spool>, h: &Claimed, side: Side) {
    let seen = old.run(h.run_id).await.unwrap().expect("the run is there");
    let what = format!(
        "{side:?}'s claim of {}",
        String::from_utf8_lossy(&seen.dedup_key)
    );
    assert_eq!(seen.queue, QUEUE, "{what}");
    assert_eq!(seen.dedup_key, h.dedup_key.as_bytes(), "{what}");
    assert_eq!(seen.state, RunState::Claimed, "{what}");
    assert_eq!(seen.attempts, 1, "{what}");
    assert_eq!(seen.token, Some(h.token), "{what}: the lease's token");
    assert_eq!(
        seen.lease_expires_at,
        Some(h.expires_at.as_unix_micros()),
        "{what}"
    );
    let backoff = SpoolConfig::default()
        .backoff
        .delay_for(&queue(), &h.dedup_key, 1);
    assert_eq!(
        seen.due_at,
        Some(h.expires_at.saturating_add(backoff).as_unix_micros()),
        "{what}: due_at is the lease expiry plus the backoff of attempt 1"
    );
    let info = new
        .run(h.run_id)
        .await
        .unwrap()
        .expect("this build sees it");
    assert_eq!(info.state, RunState::Claimed, "{what}");
    assert_eq!(info.attempts, 1, "{what}");
}

/// The dedup keys of `claims`, as text.
fn keys_of(claims: &[Claimed]) -> BTreeSet<String> {
    claims
        .iter()
        .map(|c| String::from_utf8_lossy(c.dedup_key.as_bytes()).into_owned())
        .collect()
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn previous_release_postgres() {
    let url = test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = scratch_name("cairn_prev");
    let _cleanup = DropSchema {
        url: url.clone(),
        schema: schema.clone(),
    };
    let pg = || PgOptions::new(url.clone()).schema(schema.clone());
    // One clock for both builds, at the real time (the fleet gate of an open may read the
    // system clock), never moved: no lease expires, so every run is handed out exactly once.
    let clock = ManualClock::new(SystemClock.now());
    let config = SpoolConfig::default();
    let q = queue();
    let mut conn = admin(&url).await;

    // 1. The previous release creates the store and registers in the fleet, as its open did.
    let (old_store, opened) = PgStore::open_migrated(pg(), &old::runner())
        .await
        .expect("the previous release creates the store");
    assert!(
        matches!(&opened, Opened::Upgraded { from: None, applied } if applied.last().map(String::as_str) == Some(old::HEAD)),
        "{opened:?}"
    );
    let old_migrator = PgMigrator::from_store(&old_store);
    let now = clock.now();
    let old_entry = FleetEntry {
        instance: scratch_name("open"),
        build: default_build_id(env!("CARGO_PKG_VERSION"), [(CAIRN_SET, old::HEAD)]),
        heads: [(CAIRN_SET.to_owned(), old::HEAD.to_owned())].into(),
        host: "previous-release".into(),
        pid: std::process::id(),
        started_at: now,
        last_seen: now,
    };
    old_migrator
        .register(&old_entry, now.saturating_sub(PRUNE_AFTER))
        .await
        .expect("the previous release registers");
    let old = old::OldSpool::connect(&url, &schema, Arc::new(clock.clone()), config.backoff)
        .await
        .expect("the previous release connects");
    // Runs it leaves behind before the migration: two queued, one it holds a lease on.
    let mut runs: BTreeMap<String, (RunId, Side)> = BTreeMap::new();
    for name in ["pre-0", "pre-1", "pre-2"] {
        let e = old
            .enqueue(&q, &key(name), name.as_bytes().to_vec(), prio(0))
            .await
            .unwrap();
        assert!(e.created, "{name}");
        runs.insert(name.into(), (e.run_id, Side::Old));
    }
    let old_consumer = ConsumerId::new("previous-release-1").unwrap();
    let (held, _) = old.claim(&q, &old_consumer, LEASE, 1).await.unwrap();
    assert_eq!(keys_of(&held), names("pre", 0..1));

    // 2. This build opens the store: applies the expand revision, defers the contract.
    let opts = || {
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .spool_config(config)
    };
    let new = PgBackend::open(pg(), opts())
        .await
        .expect("this build opens the store the previous release uses");
    let cairn = &new.session().migrations()[0];
    assert_eq!(cairn.set, CAIRN_SET);
    assert_eq!(
        cairn.outcome,
        Opened::Upgraded {
            from: Some(old::HEAD.into()),
            applied: vec![EXPAND.into()],
        },
        "the open applies the expand revision only"
    );
    assert!(cairn.contracts.is_empty(), "{:?}", cairn.contracts);
    let deferred = cairn
        .deferred
        .as_ref()
        .expect("the contract revision waits for the previous release");
    assert_eq!(deferred.revision, CONTRACT);
    let blockers: Vec<(&str, &str)> = deferred
        .blockers
        .iter()
        .map(|b| (b.instance.as_str(), b.knows.as_str()))
        .collect();
    assert_eq!(blockers, [(old_entry.instance.as_str(), old::HEAD)]);
    assert_eq!(deferred.blockers[0].build, old_entry.build);
    assert_eq!(stamp(pg()).await.as_deref(), Some(EXPAND));
    assert!(run_indexes(&mut conn, &schema)
        .await
        .is_superset(&OLD_INDEXES.iter().map(|s| (*s).to_owned()).collect()));
    let ready = ready_indexes(&mut conn, &schema).await;
    assert!(
        ready.contains("spool_ready_claim") && ready.contains("spool_ready_expiry"),
        "{ready:?}"
    );
    let live: BTreeSet<String> = new
        .session()
        .fleet()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.instance)
        .collect();
    assert!(live.contains(&old_entry.instance), "{live:?}");
    assert_eq!(live.len(), 2, "{live:?}");
    let spool = new.spool();

    // 3. Both builds enqueue, interleaved; priorities decide the first claims below.
    let old_prio = |i: usize| match i {
        0..=4 => 4,
        5..=6 => 3,
        _ => 0,
    };
    let new_prio = |i: usize| if i < 5 { 5 } else { 0 };
    for i in 0..30 {
        let name = format!("old-{i}");
        let e = old
            .enqueue(
                &q,
                &key(&name),
                name.clone().into_bytes(),
                prio(old_prio(i)),
            )
            .await
            .unwrap();
        assert!(e.created, "{name}");
        runs.insert(name, (e.run_id, Side::Old));
        let name = format!("new-{i}");
        let e = spool
            .enqueue(
                &q,
                &key(&name),
                name.clone().into_bytes(),
                prio(new_prio(i)),
            )
            .await
            .unwrap();
        assert!(e.created, "{name}");
        runs.insert(name, (e.run_id, Side::New));
    }
    // The previous release's enqueue lane with a batch of ten, this build's bulk enqueue.
    let batch: Vec<_> = (30..40)
        .map(|i| {
            let name = format!("old-{i}");
            (key(&name), name.into_bytes(), prio(0))
        })
        .collect();
    for (i, e) in old
        .enqueue_batch(&q, batch)
        .await
        .unwrap()
        .into_iter()
        .enumerate()
    {
        assert!(e.created, "old-{}", i + 30);
        runs.insert(format!("old-{}", i + 30), (e.run_id, Side::Old));
    }
    let items: Vec<_> = (30..40)
        .map(|i| {
            let name = format!("new-{i}");
            EnqueueItem::new(key(&name), name.into_bytes())
        })
        .collect();
    for (i, e) in spool
        .enqueue_many(&q, items)
        .await
        .unwrap()
        .into_iter()
        .enumerate()
    {
        assert!(e.created, "new-{}", i + 30);
        runs.insert(format!("new-{}", i + 30), (e.run_id, Side::New));
    }

    // S1 across builds: each build re-enqueues the other's keys and gets the other's run.
    for i in 0..10 {
        let name = format!("old-{i}");
        let e = spool
            .enqueue(&q, &key(&name), b"again".to_vec(), prio(9))
            .await
            .unwrap();
        assert_eq!((e.run_id, e.created), (runs[&name].0, false), "S1: {name}");
        let name = format!("new-{i}");
        let e = old
            .enqueue(&q, &key(&name), b"again".to_vec(), prio(9))
            .await
            .unwrap();
        assert_eq!((e.run_id, e.created), (runs[&name].0, false), "S1: {name}");
    }
    // The previous release's batch holding this build's keys and a new one: the new key is
    // created, the others answered through the unbatched statement.
    let mut batch: Vec<_> = (10..14)
        .map(|i| (key(&format!("new-{i}")), b"again".to_vec(), prio(9)))
        .collect();
    batch.push((key("mixed-0"), b"mixed-0".to_vec(), prio(0)));
    let answered = old.enqueue_batch(&q, batch).await.unwrap();
    for (i, e) in answered[..4].iter().enumerate() {
        let name = format!("new-{}", i + 10);
        assert_eq!((e.run_id, e.created), (runs[&name].0, false), "S1: {name}");
    }
    assert!(answered[4].created, "mixed-0");
    runs.insert("mixed-0".into(), (answered[4].run_id, Side::Old));

    // S1 under a race: both builds enqueue the same twenty keys at once, in opposite orders.
    let race = |i: usize| format!("race-{i}");
    let (from_old, from_new) = tokio::join!(
        async {
            let mut out = Vec::new();
            for i in 0..20 {
                let e = old
                    .enqueue(&q, &key(&race(i)), race(i).into_bytes(), prio(0))
                    .await
                    .unwrap();
                out.push((i, e));
            }
            out
        },
        async {
            let mut out = Vec::new();
            for i in (0..20).rev() {
                let e = spool
                    .enqueue(&q, &key(&race(i)), race(i).into_bytes(), prio(0))
                    .await
                    .unwrap();
                out.push((i, e));
            }
            out
        }
    );
    let from_old: HashMap<usize, _> = from_old.into_iter().collect();
    let from_new: HashMap<usize, _> = from_new.into_iter().collect();
    for i in 0..20 {
        let (o, n) = (from_old[&i], from_new[&i]);
        assert_eq!(o.run_id, n.run_id, "S1: {} maps to one run id", race(i));
        assert!(
            o.created ^ n.created,
            "S1: exactly one build creates {}: {o:?} {n:?}",
            race(i)
        );
        let side = if o.created { Side::Old } else { Side::New };
        runs.insert(race(i), (o.run_id, side));
    }
    let total = runs.len();
    assert_eq!(total, 3 + 80 + 1 + 20);
    let ids: BTreeSet<RunId> = runs.values().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), total, "S1: distinct keys, distinct runs");
    let name_of: HashMap<RunId, String> =
        runs.iter().map(|(k, (id, _))| (*id, k.clone())).collect();
    let stats = spool.stats().await.unwrap();
    assert_eq!(
        stats.runs,
        BTreeMap::from([(RunState::Queued, total as u64 - 1), (RunState::Claimed, 1)])
    );
    assert_eq!(
        old.counts().await.unwrap(),
        BTreeMap::from([
            ((QUEUE.to_owned(), "queued".to_owned()), total as i64 - 1),
            ((QUEUE.to_owned(), "claimed".to_owned()), 1),
        ]),
        "both builds count the same runs"
    );

    // The lease the previous release took before the migration is acked after it.
    old.ack(held[0].run_id, held[0].token).await.unwrap();

    // Each build claims runs the other enqueued, deterministically: the previous release
    // first takes this build's priority-5 runs (through its one statement, else its
    // transaction; then through its transaction alone), this build the previous release's
    // priority-4 runs, then the previous release its own priority-3 runs, which carry the
    // claim jitter it writes, so its one statement takes them.
    let mut handouts: Vec<Handout> = Vec::new();
    let record = |out: &mut Vec<Handout>, claims: &[Claimed], side: Side| {
        for c in claims {
            out.push(Handout {
                run: c.run_id,
                attempt: c.attempt,
                side,
                key: c.dedup_key.as_bytes().to_vec(),
                payload: c.payload.clone(),
            });
        }
    };
    let (a, path_a) = old.claim(&q, &old_consumer, LEASE, 3).await.unwrap();
    assert_eq!(keys_of(&a), names("new", 0..3), "via {path_a:?}");
    let b = old
        .claim_pick_apply(&q, &old_consumer, LEASE, 2)
        .await
        .unwrap();
    assert_eq!(keys_of(&b), names("new", 3..5));
    let new_consumer = ConsumerId::new("this-build-1").unwrap();
    let c = spool.claim(&q, &new_consumer, LEASE, 5).await.unwrap();
    assert_eq!(keys_of(&c), names("old", 0..5));
    let (d, path_d) = old.claim(&q, &old_consumer, LEASE, 2).await.unwrap();
    assert_eq!(keys_of(&d), names("old", 5..7));
    assert_eq!(
        path_d,
        old::ClaimPath::OneStatement,
        "the previous release claims its own runs in one statement"
    );
    for (claims, side) in [
        (&a, Side::Old),
        (&b, Side::Old),
        (&c, Side::New),
        (&d, Side::Old),
    ] {
        for h in claims.iter() {
            assert_held(&old, &spool, h, side).await;
        }
        record(&mut handouts, claims, side);
    }
    let old_acks: Vec<_> = a.iter().chain(&b).map(|h| (h.run_id, h.token)).collect();
    old.ack_batch(&old_acks).await.unwrap();
    for h in &d {
        old.ack(h.run_id, h.token).await.unwrap();
    }
    for h in &c {
        spool.ack(h.run_id, h.token).await.unwrap();
    }

    // Then both drain the queue concurrently: two workers of each build, the previous
    // release alternating its two claim paths.
    let drained = Arc::new(Mutex::new(Vec::<Handout>::new()));
    let paths = Arc::new(Mutex::new(Vec::<old::ClaimPath>::new()));
    let old = Arc::new(old);
    let deadline = Instant::now() + DEADLINE;
    let mut workers = Vec::new();
    for w in 0..2 {
        {
            let (old, drained, paths, q) = (old.clone(), drained.clone(), paths.clone(), q.clone());
            workers.push(tokio::spawn(async move {
                let consumer = ConsumerId::new(format!("previous-release-{}", w + 2)).unwrap();
                for round in 0.. {
                    assert!(
                        Instant::now() < deadline,
                        "the previous release's drain timed out"
                    );
                    let claims = if round % 2 == 0 {
                        let (claims, path) = old.claim(&q, &consumer, LEASE, 4).await.unwrap();
                        paths.lock().unwrap().push(path);
                        claims
                    } else {
                        old.claim_pick_apply(&q, &consumer, LEASE, 4).await.unwrap()
                    };
                    if claims.is_empty() {
                        break;
                    }
                    let acks: Vec<_> = claims.iter().map(|c| (c.run_id, c.token)).collect();
                    old.ack_batch(&acks).await.unwrap();
                    let mut out = drained.lock().unwrap();
                    for c in claims {
                        out.push(Handout {
                            run: c.run_id,
                            attempt: c.attempt,
                            side: Side::Old,
                            key: c.dedup_key.as_bytes().to_vec(),
                            payload: c.payload,
                        });
                    }
                }
            }));
        }
        {
            let (spool, drained, q) = (spool.clone(), drained.clone(), q.clone());
            workers.push(tokio::spawn(async move {
                let consumer = ConsumerId::new(format!("this-build-{}", w + 2)).unwrap();
                loop {
                    assert!(Instant::now() < deadline, "this build's drain timed out");
                    let claims = spool.claim(&q, &consumer, LEASE, 4).await.unwrap();
                    if claims.is_empty() {
                        break;
                    }
                    for c in &claims {
                        spool.ack(c.run_id, c.token).await.unwrap();
                    }
                    let mut out = drained.lock().unwrap();
                    for c in claims {
                        out.push(Handout {
                            run: c.run_id,
                            attempt: c.attempt,
                            side: Side::New,
                            key: c.dedup_key.as_bytes().to_vec(),
                            payload: c.payload,
                        });
                    }
                }
            }));
        }
    }
    for w in workers {
        w.await.expect("a drain worker panicked");
    }
    // A worker stops at its first empty claim, which SKIP LOCKED may answer while another
    // claim holds the last runs; a last pass of this build finds anything left.
    loop {
        let claims = spool.claim(&q, &new_consumer, LEASE, 16).await.unwrap();
        if claims.is_empty() {
            break;
        }
        for c in &claims {
            spool.ack(c.run_id, c.token).await.unwrap();
        }
        record(&mut handouts, &claims, Side::New);
    }
    handouts.extend(drained.lock().unwrap().drain(..));
    let paths = paths.lock().unwrap().clone();

    // Every run but the one held across the migration was handed out exactly once (S4, S5),
    // with its key and its first payload; each build took runs the other enqueued.
    let mut by_run: HashMap<RunId, Vec<&Handout>> = HashMap::new();
    for h in &handouts {
        by_run.entry(h.run).or_default().push(h);
    }
    for (run, hs) in &by_run {
        let name = name_of.get(run).expect("only enqueued runs are handed out");
        assert_eq!(
            hs.len(),
            1,
            "S4: {name} was handed out more than once: {hs:?}"
        );
        let h = hs[0];
        assert_eq!(h.attempt, 1, "{name}");
        assert_eq!(h.key, name.as_bytes(), "{name}");
        assert_eq!(
            h.payload,
            name.as_bytes(),
            "S1: {name} keeps its first payload"
        );
    }
    let handed: BTreeSet<RunId> = by_run.keys().copied().collect();
    let mut want = ids.clone();
    want.remove(&held[0].run_id);
    assert_eq!(handed, want, "S5: every run is handed out; none is lost");
    let crossed = |by: Side| {
        handouts
            .iter()
            .filter(|h| h.side == by && runs[&name_of[&h.run]].1 != by)
            .count()
    };
    assert!(
        crossed(Side::Old) >= 5,
        "the previous release drains this build's runs"
    );
    assert!(
        crossed(Side::New) >= 5,
        "this build drains the previous release's runs"
    );
    for (name, (id, _)) in &runs {
        let seen = old.run(*id).await.unwrap().expect("the run is there");
        assert_eq!(seen.state, RunState::Succeeded, "S5: {name}");
        assert!(
            seen.due_at.is_none() && seen.finished_at.is_some(),
            "{name}"
        );
        let info = spool.run(*id).await.unwrap().expect("the run is there");
        assert_eq!(
            (info.state, info.attempts),
            (RunState::Succeeded, 1),
            "{name}"
        );
    }
    let stats = spool.stats().await.unwrap();
    assert_eq!(
        stats.runs,
        BTreeMap::from([(RunState::Succeeded, total as u64)])
    );
    assert_eq!(stats.queues[&q].runs, stats.runs);
    assert_eq!(stats.oldest_queued, None);
    assert_eq!(
        old.counts().await.unwrap(),
        BTreeMap::from([((QUEUE.to_owned(), "succeeded".to_owned()), total as i64)]),
        "both builds count the same runs"
    );
    eprintln!(
        "previous_release_postgres: the previous release's first claim took {path_a:?}; \
         in the drain its claim() took {paths:?}; handouts: {} by it, {} by this build",
        handouts.iter().filter(|h| h.side == Side::Old).count(),
        handouts.iter().filter(|h| h.side == Side::New).count(),
    );

    // Runs left live across the contract revision: two enqueued by each build, one of them
    // held by the previous release, one by this build.
    let mut left: BTreeMap<String, RunId> = BTreeMap::new();
    for i in 0..4 {
        let name = format!("left-{i}");
        let e = if i < 2 {
            old.enqueue(&q, &key(&name), name.clone().into_bytes(), prio(0))
                .await
                .unwrap()
        } else {
            spool
                .enqueue(&q, &key(&name), name.clone().into_bytes(), prio(0))
                .await
                .unwrap()
        };
        assert!(e.created, "{name}");
        left.insert(name, e.run_id);
    }
    let (old_held, _) = old.claim(&q, &old_consumer, LEASE, 1).await.unwrap();
    assert_eq!(keys_of(&old_held), names("left", 0..1));
    let new_held = spool.claim(&q, &new_consumer, LEASE, 1).await.unwrap();
    assert_eq!(keys_of(&new_held), names("left", 1..2));

    // 4. The previous release goes away; the next open of this build applies the contract
    // revision (the instance opened before it is still live and knows it: no blocker).
    old_migrator
        .deregister(&old_entry.instance)
        .await
        .expect("the previous release deregisters");
    old.close().await;
    old_store.close().await;
    let next = PgBackend::open(pg(), opts())
        .await
        .expect("this build opens again");
    let cairn = &next.session().migrations()[0];
    assert_eq!(
        cairn.outcome,
        Opened::Upgraded {
            from: Some(EXPAND.into()),
            // The contract, then every revision after it (0009_spool_flow, 0010_epoch_sync,
            // 0011_spool_room).
            applied: vec![
                CONTRACT.into(),
                FLOW_REVISION.into(),
                SYNC_REVISION.into(),
                ROOM.into(),
            ],
        }
    );
    assert!(cairn.deferred.is_none(), "{:?}", cairn.deferred);
    let applied: Vec<(&str, bool)> = cairn
        .contracts
        .iter()
        .map(|c| (c.revision.as_str(), c.forced))
        .collect();
    assert_eq!(applied, [(CONTRACT, false)]);
    assert_eq!(stamp(pg()).await.as_deref(), Some(ROOM));
    let kept = run_indexes(&mut conn, &schema).await;
    for gone in OLD_INDEXES {
        assert!(!kept.contains(gone), "{gone} is dropped: {kept:?}");
    }
    assert!(run_triggers(&mut conn, &schema).await.is_empty());
    let ready = ready_indexes(&mut conn, &schema).await;
    assert!(
        ready.contains("spool_ready_claim") && ready.contains("spool_ready_expiry"),
        "{ready:?}"
    );
    // I-ready from the contract revision on, over the runs both builds left live.
    assert_ready(&mut conn, &schema, 4, 2, "after the contract revision").await;

    // 5. The previous release is refused now.
    let refused = PgStore::open_migrated(pg(), &old::runner())
        .await
        .expect_err("the previous release must not open a contracted store");
    assert!(
        matches!(refused, Error::Incompatible { .. }) && refused.to_string().contains(CONTRACT),
        "{refused}"
    );

    // Both instances of this build keep working. The one opened before the contract (it last
    // looked at the layout just before the contract was applied) acks the lease it took
    // before it and claims what was left queued, at once: I-ready must hold for its claims
    // too. Then the one that applied the contract, once the lease the previous release held
    // has expired (its due time passed), reclaims that run for its second attempt.
    let (first, second) = (spool, next.spool());
    first
        .ack(new_held[0].run_id, new_held[0].token)
        .await
        .unwrap();
    let rest = first.claim(&q, &new_consumer, LEASE, 8).await.unwrap();
    assert_eq!(keys_of(&rest), names("left", 2..4));
    assert_ready(
        &mut conn,
        &schema,
        3,
        3,
        "claims of the instance opened before the contract, made after it",
    )
    .await;
    for c in &rest {
        assert_eq!(c.attempt, 1);
        first.ack(c.run_id, c.token).await.unwrap();
    }
    assert_ready(
        &mut conn,
        &schema,
        1,
        1,
        "the previous release's lease left",
    )
    .await;
    clock.advance(LEASE + Duration::from_secs(2));
    let reclaimed = second.claim(&q, &new_consumer, LEASE, 8).await.unwrap();
    assert_eq!(keys_of(&reclaimed), names("left", 0..1));
    assert_eq!(reclaimed[0].run_id, old_held[0].run_id);
    assert_eq!(
        reclaimed[0].attempt, 2,
        "S4: the expired lease is taken over"
    );
    assert_ready(
        &mut conn,
        &schema,
        1,
        1,
        "the previous release's lease reclaimed",
    )
    .await;
    second
        .ack(reclaimed[0].run_id, reclaimed[0].token)
        .await
        .unwrap();
    assert!(
        matches!(
            first.ack(old_held[0].run_id, old_held[0].token).await,
            Err(Error::LeaseLost { .. })
        ),
        "the previous release's token is stale"
    );
    for (name, id) in &left {
        let info = first.run(*id).await.unwrap().unwrap();
        assert_eq!(info.state, RunState::Succeeded, "{name}");
    }
    assert_ready(&mut conn, &schema, 0, 0, "after the left runs").await;
    for (producer, consumer, base, at) in [
        (
            &first,
            &second,
            0,
            "enqueued by the first instance, claimed by the second",
        ),
        (
            &second,
            &first,
            3,
            "enqueued by the second instance, claimed by the first",
        ),
    ] {
        let mut after = BTreeMap::new();
        for i in base..base + 3 {
            let name = format!("after-{i}");
            let e = producer
                .enqueue(&q, &key(&name), name.clone().into_bytes(), prio(0))
                .await
                .unwrap();
            assert!(e.created, "{name}");
            after.insert(e.run_id, name);
        }
        assert_ready(&mut conn, &schema, 3, 0, &format!("{at}: enqueued")).await;
        let claims = consumer.claim(&q, &new_consumer, LEASE, 8).await.unwrap();
        let got: BTreeMap<RunId, String> = claims
            .iter()
            .map(|c| (c.run_id, String::from_utf8_lossy(&c.payload).into_owned()))
            .collect();
        assert_eq!(got, after);
        assert_ready(&mut conn, &schema, 3, 3, &format!("{at}: claimed")).await;
        for c in &claims {
            consumer.ack(c.run_id, c.token).await.unwrap();
            let info = producer.run(c.run_id).await.unwrap().unwrap();
            assert_eq!(info.state, RunState::Succeeded);
        }
        assert_ready(&mut conn, &schema, 0, 0, &format!("{at}: acked")).await;
    }
    let stats = second.stats().await.unwrap();
    assert_eq!(
        stats.runs,
        BTreeMap::from([(RunState::Succeeded, total as u64 + 4 + 6)])
    );
    next.close().await.unwrap();
    new.close().await.unwrap();
    let _ = conn.close().await;
}
