//! Commit boundaries of the two imports (issue 14): the epoch import of a foreign epoch
//! ([`EpochStore::import`]) and the spool's import of runs ([`Spool::import_runs`], what the
//! legacy import writes), on both backends, without any hook in the backends' code.
//!
//! - **Before** the transaction: a batch the store refuses before it writes (an epoch whose id
//!   does not recompute; an import batch `check_import` refuses), and on SQLite an import
//!   abandoned while it waits for the writer (the caller dropped, as a process dying would).
//!   Nothing is written.
//! - **Inside** the commit: the COMMIT itself fails (SQLite: the store's testkit commit hook
//!   turns it into a rollback; Postgres: a test-only deferred constraint trigger on the target
//!   table raises at COMMIT). The import fails, nothing is written, and a retry imports
//!   exactly once.
//! - **After** the commit: the caller never hears the answer, so a restarted process runs the
//!   same import again (on a store instance of its own): it reports the import as done
//!   (`AlreadyPresent` with the same seq; `AlreadyImported` with the marker's counts), and
//!   nothing is duplicated or renumbered.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn::spool::{
    ImportSource, ImportedEvent, ImportedRun, RunFilter, RunImportOutcome, SpoolConfig,
};
use cairn::testkit::postgres::testkit::{harness as pg_harness, test_server_url, PgHarness};
use cairn::testkit::postgres::{PgSpool, PgStore};
use cairn::testkit::sqlite::{SqliteOptions, SqliteSpool, SqliteStore};
use cairn::{
    epoch_id, DedupKey, EpochDiagnostics, EpochStore, Error, Event, ForeignEpoch, ImportOutcome,
    QueueName, RunEventId, RunId, RunState, Seq, SpaceId, Spool, SystemClock, Timestamp,
};
use sqlx::{Connection, PgConnection};

fn space() -> SpaceId {
    SpaceId::new("import-boundaries").unwrap()
}

fn queue() -> QueueName {
    QueueName::new("import-boundaries").unwrap()
}

/// A foreign epoch on top of `parent` (its id recomputes).
fn foreign(parent: cairn::EpochId) -> ForeignEpoch {
    let events = vec![Event::new("imported", "one"), Event::new("imported", "two")];
    let ids: Vec<_> = events.iter().map(Event::id).collect();
    ForeignEpoch {
        space: space(),
        id: epoch_id(&space(), &[parent], &ids),
        parents: vec![parent],
        events,
    }
}

/// Everything an epoch import could change in the space, read through the store's API.
#[derive(Debug, PartialEq)]
struct EpochView {
    heads: Vec<cairn::Head>,
    cached: Vec<cairn::Head>,
    next: Seq,
    events: usize,
}

async fn epoch_view<S: EpochStore + EpochDiagnostics>(store: &S) -> EpochView {
    let page = store
        .events_since(&space(), None, 1000)
        .await
        .expect("events_since");
    EpochView {
        heads: store.heads(&space()).await.unwrap(),
        cached: store.cached_heads(&space()).await.unwrap(),
        next: store.next_seq(&space()).await.unwrap(),
        events: page.events.len(),
    }
}

/// The legacy import's shape: three runs (queued, succeeded, parked) with an event each and a
/// fact on one.
fn batch() -> (ImportSource, Vec<ImportedRun>) {
    let t = |ms: i64| Timestamp::from_unix_micros(ms * 1000);
    let run = |n: u8, state: RunState| {
        let terminal = state != RunState::Queued;
        ImportedRun {
            run_id: RunId::generate(t(1_700_000_000_000 + i64::from(n))),
            queue: queue(),
            dedup_key: DedupKey::from_parts(["legacy", &n.to_string()]).unwrap(),
            supersede_group: None,
            payload: vec![n; 16],
            state,
            attempts: u32::from(terminal),
            max_attempts: 3,
            priority: 0,
            enqueued_at: t(1_700_000_000_000),
            due_at: (!terminal).then(|| t(1_700_000_000_000)),
            finished_at: terminal.then(|| t(1_700_000_100_000)),
            reason: (state == RunState::Parked).then(|| "imported parked".to_owned()),
            facts: if n == 1 {
                BTreeMap::from([(cairn::FactName::new("verdict").unwrap(), b"ok".to_vec())])
            } else {
                BTreeMap::new()
            },
            events: vec![ImportedEvent {
                event_id: RunEventId::new(format!("e{n}").into_bytes()).unwrap(),
                payload: vec![n; 8],
                created_at: t(1_700_000_050_000),
            }],
        }
    };
    let source = ImportSource {
        fingerprint: [7; 32],
        description: "legacy directory /var/lib/made, generation 3 (test)".into(),
    };
    (
        source,
        vec![
            run(1, RunState::Succeeded),
            run(2, RunState::Queued),
            run(3, RunState::Parked),
        ],
    )
}

/// Every run of the test queue with its events (ids and seqs), by run id.
async fn spool_view(spool: &dyn Spool) -> BTreeMap<RunId, (RunState, Vec<(u64, RunEventId)>)> {
    let filter = RunFilter {
        queue: Some(queue()),
        ..RunFilter::default()
    };
    let mut out = BTreeMap::new();
    for info in spool.runs(&filter, 1000).await.unwrap() {
        let events = spool
            .events(info.run_id, 0, 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.seq, e.event_id))
            .collect();
        out.insert(info.run_id, (info.state, events));
    }
    out
}

/// A write under the injected commit failure must fail with a store error (not `Ok`, not a
/// validation verdict).
fn assert_store_error<T: std::fmt::Debug>(r: cairn::Result<T>, what: &str) {
    match r {
        Err(Error::Backend { .. } | Error::Io { .. } | Error::Unavailable { .. }) => {}
        other => panic!("{what}: a failed commit must fail the import, got {other:?}"),
    }
}

/// How a test makes the commits of one store fail, and stops.
enum CommitFault<'a> {
    /// SQLite: the store's commit hook turns commits into rollbacks (every commit of the
    /// writer connection while armed).
    Sqlite(&'a SqliteStore),
    /// Postgres: a deferred constraint trigger on the target table, in the harness's scratch
    /// schema, raises when the inserting transaction commits.
    Postgres { url: String, schema: String },
}

impl CommitFault<'_> {
    /// From now on every commit writing `table` fails.
    async fn arm(&self, table: &str) {
        match self {
            Self::Sqlite(store) => store.testkit_fail_commits(u64::MAX).await.unwrap(),
            // `scratch_name` makes `[a-z0-9_]` schema names; the tables are cairn's own.
            Self::Postgres { schema: s, .. } => {
                self.pg_exec(&format!(
                    "CREATE OR REPLACE FUNCTION \"{s}\".test_fail_at_commit() RETURNS trigger \
                     LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected: the commit fails'; \
                     END $$; \
                     CREATE CONSTRAINT TRIGGER test_fail_at_commit AFTER INSERT \
                     ON \"{s}\".\"{table}\" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW \
                     EXECUTE FUNCTION \"{s}\".test_fail_at_commit();"
                ))
                .await
            }
        }
    }

    /// Commits succeed again.
    async fn disarm(&self, table: &str) {
        match self {
            Self::Sqlite(store) => store.testkit_fail_commits(0).await.unwrap(),
            Self::Postgres { schema: s, .. } => {
                self.pg_exec(&format!(
                    "DROP TRIGGER test_fail_at_commit ON \"{s}\".\"{table}\""
                ))
                .await
            }
        }
    }

    async fn pg_exec(&self, sql: &str) {
        let Self::Postgres { url, .. } = self else {
            unreachable!("Postgres only")
        };
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }
}

/// The epoch import's boundaries. `store` is the first process's store, `restarted` opens
/// another instance over the same store (a restarted process).
async fn epoch_import_boundaries<S, F, Fut>(store: &S, fault: &CommitFault<'_>, restarted: F)
where
    S: EpochStore + EpochDiagnostics,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
{
    let first = store
        .append(&space(), vec![Event::new("local", "first")])
        .await
        .unwrap();
    let epoch = foreign(first.id);
    let before = epoch_view(store).await;

    // Before the transaction: an epoch whose id does not recompute is refused, nothing written.
    let mut forged = epoch.clone();
    forged.events.push(Event::new("imported", "smuggled"));
    match store.import(forged).await {
        Err(Error::HashMismatch { .. }) => {}
        other => panic!("before: a forged epoch must be refused HashMismatch, got {other:?}"),
    }
    assert_eq!(epoch_view(store).await, before, "before: nothing written");

    // Inside the commit: the COMMIT fails; nothing is written, no seq is used.
    fault.arm("epoch").await;
    assert_store_error(store.import(epoch.clone()).await, "inside the commit");
    fault.disarm("epoch").await;
    assert_eq!(
        epoch_view(store).await,
        before,
        "inside the commit: the failed commit wrote nothing and used no seq"
    );
    assert_eq!(store.epoch(&space(), &epoch.id).await.unwrap(), None);

    // The retry imports exactly once, at the next seq.
    let seq = match store.import(epoch.clone()).await.unwrap() {
        ImportOutcome::Imported(seq) => seq,
        other => panic!("the retry must import: {other:?}"),
    };
    assert_eq!(
        seq, before.next,
        "the retry takes the seq the failed one did not use"
    );
    let after = epoch_view(store).await;
    assert_eq!(after.events, before.events + 2);
    assert_eq!(after.heads, after.cached, "the head cache is exact");
    assert_eq!(after.heads.len(), 1, "the import extends the only head");
    assert_eq!(after.heads[0].id, epoch.id);

    // After the commit: the caller lost the answer; a restarted process imports again.
    let other = restarted().await;
    assert_eq!(
        other.import(epoch.clone()).await.unwrap(),
        ImportOutcome::AlreadyPresent(seq),
        "after the commit: the re-import finds the epoch at its seq"
    );
    assert_eq!(
        store.import(epoch).await.unwrap(),
        ImportOutcome::AlreadyPresent(seq)
    );
    assert_eq!(
        epoch_view(&other).await,
        after,
        "after the commit: the re-imports wrote nothing and used no seq"
    );
    let next = other
        .append(&space(), vec![Event::new("local", "after")])
        .await
        .unwrap();
    assert_eq!(next.parents, vec![after.heads[0].id]);
    assert_eq!(
        next.seq, after.next,
        "no seq was consumed by the re-imports"
    );
}

/// The spool import's boundaries; as [`epoch_import_boundaries`].
async fn spool_import_boundaries<S, F, Fut>(spool: &S, fault: &CommitFault<'_>, restarted: F)
where
    S: Spool,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Box<dyn Spool>>,
{
    let (source, runs) = batch();

    // Before the transaction: a batch `check_import` refuses (a run twice) writes nothing.
    let mut twice = runs.clone();
    twice.push(runs[0].clone());
    match spool.import_runs(&source, twice).await {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("before: a refused batch must fail InvalidInput, got {other:?}"),
    }
    assert!(
        spool_view(spool).await.is_empty(),
        "before: nothing written"
    );

    // Inside the commit: the COMMIT fails; no run, event, fact or marker is left.
    fault.arm("spool_import").await;
    assert_store_error(
        spool.import_runs(&source, runs.clone()).await,
        "inside the commit",
    );
    fault.disarm("spool_import").await;
    assert!(
        spool_view(spool).await.is_empty(),
        "inside the commit: the failed commit left runs"
    );
    for r in &runs {
        assert_eq!(spool.run(r.run_id).await.unwrap(), None);
    }

    // The retry imports every run once (no marker was left to stop it).
    let ids: Vec<RunId> = runs.iter().map(|r| r.run_id).collect();
    match spool.import_runs(&source, runs.clone()).await.unwrap() {
        RunImportOutcome::Imported { created, existing } => {
            assert_eq!(created, ids, "the retry creates every run, in order");
            assert!(existing.is_empty());
        }
        other => panic!("the retry must import: {other:?}"),
    }
    let after = spool_view(spool).await;
    assert_eq!(after.len(), 3);
    for (id, (_, events)) in &after {
        assert_eq!(events.len(), 1, "run {id}: one event, numbered 1");
        assert_eq!(events[0].0, 1);
    }
    let facts = spool.facts(ids[0]).await.unwrap();
    assert_eq!(facts.len(), 1);

    // After the commit: a restarted process runs the same import again.
    let other = restarted().await;
    for s in [&*other, spool as &dyn Spool] {
        match s.import_runs(&source, runs.clone()).await.unwrap() {
            RunImportOutcome::AlreadyImported(marker) => {
                assert_eq!((marker.runs_created, marker.runs_existing), (3, 0));
            }
            other => panic!("after the commit: the re-import must find the marker: {other:?}"),
        }
    }
    assert_eq!(
        spool_view(&*other).await,
        after,
        "after the commit: nothing duplicated or renumbered"
    );
    assert_eq!(spool.facts(ids[0]).await.unwrap(), facts);
}

async fn sqlite_store(path: &std::path::Path) -> SqliteStore {
    SqliteStore::open(path).await.unwrap()
}

/// Epoch import boundaries on SQLite, plus an import abandoned while it waits for the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_epoch_import_commit_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = sqlite_store(&path).await;

    // Before the transaction: the import waits for the writer (held), and its caller goes
    // away; nothing is written.
    let first = store
        .append(&space(), vec![Event::new("local", "zero")])
        .await
        .unwrap();
    let before = epoch_view(&store).await;
    let hold = store.testkit_hold_writer().await.unwrap();
    let abandoned =
        tokio::time::timeout(Duration::from_millis(200), store.import(foreign(first.id))).await;
    assert!(
        abandoned.is_err(),
        "the import cannot finish while the writer is held: {abandoned:?}"
    );
    drop(hold);
    assert_eq!(epoch_view(&store).await, before, "before: nothing written");

    epoch_import_boundaries(&store, &CommitFault::Sqlite(&store), || async {
        sqlite_store(&path).await
    })
    .await;
}

/// Spool import boundaries on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_spool_import_commit_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let open = || async {
        SqliteSpool::open(&path, SqliteOptions::default(), Arc::new(SystemClock))
            .await
            .unwrap()
    };
    let spool = open().await;
    spool_import_boundaries(&spool, &CommitFault::Sqlite(spool.store()), || async {
        Box::new(open().await) as Box<dyn Spool>
    })
    .await;
}

async fn pg_fault(h: &PgHarness) -> CommitFault<'static> {
    let url = test_server_url()
        .await
        .unwrap_or_else(|why| panic!("no Postgres server: {why}"));
    CommitFault::Postgres {
        url,
        schema: h.schema().to_owned(),
    }
}

/// Epoch import boundaries on Postgres (a scratch schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_epoch_import_commit_boundaries() {
    let h = pg_harness().await;
    let store = h.store().await.unwrap();
    let fault = pg_fault(&h).await;
    epoch_import_boundaries(&store, &fault, || async { h.store().await.unwrap() }).await;
}

/// Spool import boundaries on Postgres (a scratch schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_spool_import_commit_boundaries() {
    let h = pg_harness().await;
    let open = || async {
        let store = h.store().await.unwrap();
        PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default()).unwrap()
    };
    // The schema exists once a store connected (it runs cairn's migrations).
    let _store: PgStore = h.store().await.unwrap();
    let spool = open().await;
    let fault = pg_fault(&h).await;
    spool_import_boundaries(&spool, &fault, || async {
        Box::new(open().await) as Box<dyn Spool>
    })
    .await;
}
