//! `previous_release_sqlite`: the previous release (72b3161, cairn's set at
//! `0006_spool_run_close`; its spool statements kept in `previous_release/release_72b3161.rs`)
//! and this build share one SQLite store file through the rollout of `0007_spool_ready` and its
//! contract revision `0008_spool_ready_contract` (both change nothing of SQLite's spool tables;
//! the contract mark is the revision's on both engines):
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
//!    open applies the contract revision (I-ready is Postgres's; SQLite keeps one table);
//! 5. the previous release is refused from then on, and this build — the instance that opened
//!    before the contract and the one that applied it — keeps working: it acks a lease taken
//!    before the contract, drains what was left, reclaims the lease the previous release held
//!    once it expired, and enqueues, claims and acks new runs.

#[path = "previous_release/release_72b3161.rs"]
mod old;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
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
use cairn_sqlite::{SqliteBackend, SqliteMigrator, SqliteOptions, SqliteStore};

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

fn handouts(claims: &[Claimed], side: Side) -> impl Iterator<Item = Handout> + '_ {
    claims.iter().map(move |c| Handout {
        run: c.run_id,
        attempt: c.attempt,
        side,
        key: c.dedup_key.as_bytes().to_vec(),
        payload: c.payload.clone(),
    })
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

/// The stamp of cairn's set in the store.
async fn stamp(path: &Path) -> Option<String> {
    SqliteMigrator::new(path, SqliteOptions::default())
        .read_state(CAIRN_SET)
        .await
        .expect("read the store's state")
        .stamp
}

/// The previous release's view of the run as this test expects it while `h` holds it: claimed
/// once, under `h`'s token, the lease and the due time both builds compute alike.
async fn assert_held(old: &old::OldSpool, new: &Arc<dyn Spool>, h: &Claimed, side: Side) {
    let what = format!(
        "{side:?}'s claim of {}",
        String::from_utf8_lossy(h.dedup_key.as_bytes())
    );
    let seen = old.run(h.run_id).await.unwrap().expect("the run is there");
    assert_eq!(seen.state, RunState::Claimed, "{what}");
    assert_eq!(seen.attempts, 1, "{what}");
    assert_eq!(seen.token, Some(h.token), "{what}: the lease's token");
    let backoff = SpoolConfig::default()
        .backoff
        .delay_for(&queue(), &h.dedup_key, 1);
    assert_eq!(
        old.lease_times(h.run_id).await.unwrap(),
        (
            Some(h.expires_at.saturating_add(backoff).as_unix_micros()),
            Some(h.expires_at.as_unix_micros())
        ),
        "{what}: due_at is the lease expiry plus the backoff of attempt 1"
    );
    let info = new
        .run(h.run_id)
        .await
        .unwrap()
        .expect("this build sees it");
    assert_eq!(
        (info.state, info.attempts),
        (RunState::Claimed, 1),
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn previous_release_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    // One clock for both builds, at the real time (the fleet gate of an open may read the
    // system clock), never moved: no lease expires, so every run is handed out exactly once.
    let clock = ManualClock::new(SystemClock.now());
    let config = SpoolConfig::default();
    let busy = SqliteOptions::default().busy_timeout;
    let q = queue();

    // 1. The previous release creates the store and registers in the fleet, as its open did.
    let (old_store, opened) =
        SqliteStore::open_migrated(&path, SqliteOptions::default(), &old::runner())
            .await
            .expect("the previous release creates the store");
    assert!(
        matches!(&opened, Opened::Upgraded { from: None, applied } if applied.last().map(String::as_str) == Some(old::HEAD)),
        "{opened:?}"
    );
    let old_migrator = SqliteMigrator::new(&path, SqliteOptions::default());
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
    // Two processes of the previous release, each with its own connection to the file.
    let olds: Vec<old::OldSpool> = (0..2)
        .map(|_| {
            old::OldSpool::connect(&path, busy, Arc::new(clock.clone()), config.backoff)
                .expect("the previous release connects")
        })
        .collect();
    let old = &olds[0];
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
    let held = old.claim(&q, &old_consumer, LEASE, 1).await.unwrap();
    assert_eq!(keys_of(&held), names("pre", 0..1));

    // 2. This build opens the store: applies the expand revision, defers the contract.
    let opts = || {
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .spool_config(config)
    };
    let new = SqliteBackend::open(&path, SqliteOptions::default(), opts())
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
    assert_eq!(stamp(&path).await.as_deref(), Some(EXPAND));
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
        let e = olds[i % 2]
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
    for i in 30..40 {
        let name = format!("old-{i}");
        let e = old
            .enqueue(&q, &key(&name), name.clone().into_bytes(), prio(0))
            .await
            .unwrap();
        assert!(e.created, "{name}");
        runs.insert(name, (e.run_id, Side::Old));
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
        let e = olds[i % 2]
            .enqueue(&q, &key(&name), b"again".to_vec(), prio(9))
            .await
            .unwrap();
        assert_eq!((e.run_id, e.created), (runs[&name].0, false), "S1: {name}");
    }
    // A bulk enqueue of this build holding the previous release's keys and a new one.
    let mut items: Vec<_> = (10..14)
        .map(|i| EnqueueItem::new(key(&format!("old-{i}")), b"again".to_vec()))
        .collect();
    items.push(EnqueueItem::new(key("mixed-0"), b"mixed-0".to_vec()));
    let answered = spool.enqueue_many(&q, items).await.unwrap();
    for (i, e) in answered[..4].iter().enumerate() {
        let name = format!("old-{}", i + 10);
        assert_eq!((e.run_id, e.created), (runs[&name].0, false), "S1: {name}");
    }
    assert!(answered[4].created, "mixed-0");
    runs.insert("mixed-0".into(), (answered[4].run_id, Side::New));

    // S1 under a race: both builds enqueue the same twenty keys at once, in opposite orders.
    let race = |i: usize| format!("race-{i}");
    let (from_old, from_new) = tokio::join!(
        async {
            let mut out = Vec::new();
            for i in 0..20 {
                let e = olds[1]
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
    // first takes this build's priority-5 runs, this build the previous release's
    // priority-4 runs, then the previous release its own priority-3 runs.
    let mut all: Vec<Handout> = Vec::new();
    let a = old.claim(&q, &old_consumer, LEASE, 3).await.unwrap();
    assert_eq!(keys_of(&a), names("new", 0..3));
    let b = olds[1].claim(&q, &old_consumer, LEASE, 2).await.unwrap();
    assert_eq!(keys_of(&b), names("new", 3..5));
    let new_consumer = ConsumerId::new("this-build-1").unwrap();
    let c = spool.claim(&q, &new_consumer, LEASE, 5).await.unwrap();
    assert_eq!(keys_of(&c), names("old", 0..5));
    let d = old.claim(&q, &old_consumer, LEASE, 2).await.unwrap();
    assert_eq!(keys_of(&d), names("old", 5..7));
    for (claims, side) in [
        (&a, Side::Old),
        (&b, Side::Old),
        (&c, Side::New),
        (&d, Side::Old),
    ] {
        for h in claims.iter() {
            assert_held(old, &spool, h, side).await;
        }
        all.extend(handouts(claims, side));
    }
    for h in a.iter().chain(&b).chain(&d) {
        old.ack(h.run_id, h.token).await.unwrap();
    }
    for h in &c {
        spool.ack(h.run_id, h.token).await.unwrap();
    }

    // Then both drain the queue concurrently: each process of the previous release and two
    // workers of this build. A claim here is one write transaction, so an empty one means the
    // queue holds no due run.
    let drained = Arc::new(Mutex::new(Vec::<Handout>::new()));
    let deadline = Instant::now() + DEADLINE;
    let mut workers = Vec::new();
    for (w, old) in olds.iter().enumerate() {
        {
            let (old, drained, q) = (old.clone(), drained.clone(), q.clone());
            workers.push(tokio::spawn(async move {
                let consumer = ConsumerId::new(format!("previous-release-{}", w + 2)).unwrap();
                loop {
                    assert!(
                        Instant::now() < deadline,
                        "the previous release's drain timed out"
                    );
                    let claims = old.claim(&q, &consumer, LEASE, 4).await.unwrap();
                    if claims.is_empty() {
                        break;
                    }
                    for c in &claims {
                        old.ack(c.run_id, c.token).await.unwrap();
                    }
                    drained.lock().unwrap().extend(handouts(&claims, Side::Old));
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
                    drained.lock().unwrap().extend(handouts(&claims, Side::New));
                }
            }));
        }
    }
    for w in workers {
        w.await.expect("a drain worker panicked");
    }
    all.extend(drained.lock().unwrap().drain(..));

    // Every run but the one held across the migration was handed out exactly once (S4, S5),
    // with its key and its first payload; each build took runs the other enqueued.
    let mut by_run: HashMap<RunId, Vec<&Handout>> = HashMap::new();
    for h in &all {
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
        all.iter()
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
        assert_eq!(old.lease_times(*id).await.unwrap(), (None, None), "{name}");
        let info = spool.run(*id).await.unwrap().expect("the run is there");
        assert_eq!(
            (info.state, info.attempts),
            (RunState::Succeeded, 1),
            "{name}"
        );
        assert!(info.finished_at.is_some(), "{name}");
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
        "previous_release_sqlite: handouts: {} by the previous release, {} by this build",
        all.iter().filter(|h| h.side == Side::Old).count(),
        all.iter().filter(|h| h.side == Side::New).count(),
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
    let old_held = old.claim(&q, &old_consumer, LEASE, 1).await.unwrap();
    assert_eq!(keys_of(&old_held), names("left", 0..1));
    let new_held = spool.claim(&q, &new_consumer, LEASE, 1).await.unwrap();
    assert_eq!(keys_of(&new_held), names("left", 1..2));

    // 4. The previous release goes away; the next open of this build applies the contract
    // revision (the instance opened before it is still live and knows it: no blocker).
    old_migrator
        .deregister(&old_entry.instance)
        .await
        .expect("the previous release deregisters");
    drop(olds);
    drop(old_store);
    let next = SqliteBackend::open(&path, SqliteOptions::default(), opts())
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
    assert_eq!(stamp(&path).await.as_deref(), Some(ROOM));

    // 5. The previous release is refused now.
    let refused = SqliteStore::open_migrated(&path, SqliteOptions::default(), &old::runner())
        .await
        .expect_err("the previous release must not open a contracted store");
    assert!(
        matches!(refused, Error::Incompatible { .. }) && refused.to_string().contains(CONTRACT),
        "{refused}"
    );

    // Both instances of this build keep working: the one opened before the contract acks the
    // lease it took before it, the one that applied it drains what was left queued, then,
    // once the lease the previous release held has expired (its due time passed), reclaims
    // that run for its second attempt; then each drains what the other enqueues.
    let (first, second) = (spool, next.spool());
    first
        .ack(new_held[0].run_id, new_held[0].token)
        .await
        .unwrap();
    let rest = second.claim(&q, &new_consumer, LEASE, 8).await.unwrap();
    assert_eq!(keys_of(&rest), names("left", 2..4));
    for c in &rest {
        assert_eq!(c.attempt, 1);
        second.ack(c.run_id, c.token).await.unwrap();
    }
    clock.advance(LEASE + Duration::from_secs(2));
    let reclaimed = second.claim(&q, &new_consumer, LEASE, 8).await.unwrap();
    assert_eq!(keys_of(&reclaimed), names("left", 0..1));
    assert_eq!(reclaimed[0].run_id, old_held[0].run_id);
    assert_eq!(
        reclaimed[0].attempt, 2,
        "S4: the expired lease is taken over"
    );
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
    for (producer, consumer, base) in [(&first, &second, 0), (&second, &first, 3)] {
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
        let claims = consumer.claim(&q, &new_consumer, LEASE, 8).await.unwrap();
        let got: BTreeMap<RunId, String> = claims
            .iter()
            .map(|c| (c.run_id, String::from_utf8_lossy(&c.payload).into_owned()))
            .collect();
        assert_eq!(got, after);
        for c in &claims {
            consumer.ack(c.run_id, c.token).await.unwrap();
            let info = producer.run(c.run_id).await.unwrap().unwrap();
            assert_eq!(info.state, RunState::Succeeded);
        }
    }
    let stats = second.stats().await.unwrap();
    assert_eq!(
        stats.runs,
        BTreeMap::from([(RunState::Succeeded, total as u64 + 4 + 6)])
    );
    next.close().await.unwrap();
    new.close().await.unwrap();
}
