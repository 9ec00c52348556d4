//! Legacy import (S13): directories of the replaced system's files, written by the case into a
//! temporary directory, planned by `cairn_core::spool::legacy` and imported with
//! [`Spool::import_runs`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cairn_core::spool::legacy::{
    read_dir, seal_record, ImportPlan, LegacyError, LegacyOptions, CHECKPOINT_FILE, SPOOL_FILE,
    WAL_FILE,
};
use cairn_core::spool::{
    ExistingRun, ImportSource, ImportedRun, RunFilter, RunImportOutcome, RunState, SpoolStats,
};
use cairn_core::{Clock, DedupKey, EnqueueOptions, QueueName, RunId, Spool, Timestamp};

use super::support::{assert_err, consumer, info, open_spool, LEASE};
use crate::{random_queue, SpoolHarness};

/// A temporary legacy directory, removed when dropped.
struct LegacyDir(PathBuf);

impl LegacyDir {
    fn new(label: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("cairn-{label}-{}", crate::random_space("legacy")));
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        Self(dir)
    }

    fn write(&self, name: &str, lines: &[String]) -> Vec<u8> {
        let bytes: Vec<u8> = lines.concat().into_bytes();
        std::fs::write(self.0.join(name), &bytes).expect("write a legacy file");
        bytes
    }

    fn write_bytes(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.0.join(name), bytes).expect("write a legacy file");
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for LegacyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The id of legacy run `n`.
fn id(n: u32) -> String {
    format!("0190a5c0-0000-7000-8000-{n:012x}")
}

fn rid(n: u32) -> RunId {
    RunId::parse(&id(n)).expect("a valid id")
}

/// The dedup key legacy run `n` has: `(ci, refs/heads/main, sha<n>)`.
fn legacy_key(n: u32) -> DedupKey {
    DedupKey::from_parts(["ci", "refs/heads/main", &format!("sha{n}")]).expect("a valid key")
}

/// A sealed record line.
fn rec(body: String) -> String {
    format!("{}\n", seal_record(&body).expect("a record body"))
}

/// A run object; `extra` is `,"member":value…` or empty.
fn run_obj(n: u32, state: &str, attempts: u32, extra: &str) -> String {
    let finished = if matches!(state, "queued" | "running") {
        String::new()
    } else {
        ",\"finished_ms\":1700000200000".to_owned()
    };
    format!(
        "{{\"run_id\":\"{}\",\"gate\":\"ci\",\"ref\":\"refs/heads/main\",\"input_sha\":\"sha{n}\",\
         \"payload\":\"payload {n}\",\"state\":\"{state}\",\"attempts\":{attempts},\
         \"created_ms\":{},\"updated_ms\":1700000100000{finished}{extra}}}",
        id(n),
        1_700_000_000_000u64 + u64::from(n)
    )
}

fn header(generation: u64, runs: usize, events: usize, drained: u64) -> String {
    rec(format!(
        "{{\"kind\":\"checkpoint\",\"format\":1,\"generation\":{generation},\"runs\":{runs},\
         \"events\":{events},\"spool_drained\":{drained},\"written_ms\":1700000300000}}"
    ))
}

fn cp_run(run: String) -> String {
    rec(format!("{{\"kind\":\"run\",\"run\":{run}}}"))
}

fn cp_event(n: u32, event: &str) -> String {
    rec(format!(
        "{{\"kind\":\"event\",\"run_id\":\"{}\",\"event_id\":\"{event}\",\"payload\":\"body of {event}\",\"at_ms\":1700000050000}}",
        id(n)
    ))
}

fn wal(gen: u64, seq: u64, op: &str, fields: &str) -> String {
    rec(format!(
        "{{\"gen\":{gen},\"seq\":{seq},\"op\":\"{op}\",{fields}}}"
    ))
}

fn submission(n: u32) -> String {
    rec(format!(
        "{{\"run_id\":\"{}\",\"gate\":\"ci\",\"ref\":\"refs/heads/main\",\"input_sha\":\"sha{n}\",\
         \"payload\":\"payload {n}\",\"submitted_ms\":1700000400000}}",
        id(n)
    ))
}

fn plan(dir: &LegacyDir, q: &QueueName) -> ImportPlan {
    read_dir(
        dir.path(),
        &LegacyOptions {
            queue: q.clone(),
            ..LegacyOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("S13: plan the legacy directory: {e}"))
}

async fn import(spool: &dyn Spool, p: &ImportPlan) -> RunImportOutcome {
    spool
        .import_runs(&p.source, p.runs.clone())
        .await
        .unwrap_or_else(|e| panic!("S13: import: {e}"))
}

/// Everything the store shows about one queue, to compare before and after.
async fn snapshot(spool: &dyn Spool, q: &QueueName) -> (SpoolStats, Vec<cairn_core::RunInfo>) {
    let filter = RunFilter {
        queue: Some(q.clone()),
        ..RunFilter::default()
    };
    (
        spool.stats().await.unwrap(),
        spool.runs(&filter, 1000).await.unwrap(),
    )
}

/// S13: a legacy directory (checkpoint, log, spool) imports once: run ids and dedup keys are
/// kept, states and attempts mapped, undelivered events and facts carried; a second import of
/// the same directory, through another instance, is a no-op reporting the first; the imported
/// runs deduplicate later enqueues and are claimed like any other.
pub async fn s13_legacy_import_once_keeps_ids_keys_events_and_facts<H: SpoolHarness>(h: &H) {
    let q = random_queue("s13");
    let dir = LegacyDir::new("s13-once");
    dir.write(
        CHECKPOINT_FILE,
        &[
            header(2, 3, 2, 0),
            cp_run(run_obj(
                1,
                "succeeded",
                1,
                ",\"stages\":{\"build\":\"passed\"},\"decision\":\"approve\",\"merged_sha\":\"abc123\"",
            )),
            cp_run(run_obj(2, "running", 1, "")),
            cp_run(run_obj(3, "queued", 2, ",\"last_error\":\"flaky\"")),
            cp_event(2, "e1"),
            cp_event(2, "e2"),
        ],
    );
    dir.write(
        WAL_FILE,
        &[
            wal(2, 1, "ack", &format!("\"run_id\":\"{}\",\"event_ids\":[\"e1\"]", id(2))),
            wal(
                2,
                2,
                "event",
                &format!(
                    "\"run_id\":\"{}\",\"event_id\":\"e3\",\"payload\":\"late\",\"at_ms\":1700000060000",
                    id(2)
                ),
            ),
        ],
    );
    dir.write(SPOOL_FILE, &[submission(4)]);

    let spool = open_spool(h).await;
    let p = plan(&dir, &q);
    assert_eq!(p.runs.len(), 4);
    let outcome = import(spool.as_ref(), &p).await;
    let RunImportOutcome::Imported { created, existing } = outcome else {
        panic!("S13: the first import imports: {outcome:?}");
    };
    assert!(existing.is_empty());
    assert_eq!(
        created,
        p.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(),
        "S13: created in the order given"
    );

    let want = [
        (1, RunState::Succeeded, 1),
        (2, RunState::Queued, 1),
        (3, RunState::Queued, 2),
        (4, RunState::Queued, 0),
    ];
    for (n, state, attempts) in want {
        let i = info(spool.as_ref(), rid(n)).await;
        assert_eq!(
            (&i.queue, &i.dedup_key, i.state, i.attempts),
            (&q, &legacy_key(n), state, attempts),
            "S13: run {n} keeps its id and key, and its state and attempts map"
        );
        // Runs keep their submission time; a pending submission's is when it was appended.
        let submitted_ms = if n == 4 {
            1_700_000_400_000
        } else {
            1_700_000_000_000 + i64::from(n)
        };
        assert_eq!(
            i.enqueued_at,
            Timestamp::from_unix_micros(submitted_ms * 1000)
        );
        assert!(i.lease.is_none());
    }
    let a = info(spool.as_ref(), rid(1)).await;
    assert_eq!(
        a.finished_at,
        Some(Timestamp::from_unix_micros(1_700_000_200_000_000))
    );
    let facts: BTreeMap<String, Vec<u8>> = spool
        .facts(rid(1))
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k.as_str().to_owned(), v))
        .collect();
    assert_eq!(
        facts,
        BTreeMap::from([
            ("decision".to_owned(), b"approve".to_vec()),
            ("merged".to_owned(), b"abc123".to_vec()),
            ("stage.build".to_owned(), b"passed".to_vec()),
        ])
    );
    assert_eq!(
        info(spool.as_ref(), rid(3)).await.reason.as_deref(),
        Some("flaky")
    );
    let events = spool.events(rid(2), 0, 10).await.unwrap();
    let seen: Vec<(u64, &[u8], &[u8])> = events
        .iter()
        .map(|e| (e.seq, e.event_id.as_bytes(), e.payload.as_slice()))
        .collect();
    assert_eq!(
        seen,
        vec![(1, &b"e2"[..], &b"body of e2"[..]), (2, b"e3", b"late")],
        "S13: undelivered events, in order, numbered from 1"
    );
    let next = spool
        .append_event(
            rid(2),
            &cairn_core::RunEventId::new(b"e4".to_vec()).unwrap(),
            b"new".to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(
        next.seq, 3,
        "S13: the event sequence continues after the imported events"
    );

    // Once: another instance (another process) importing the same directory writes nothing.
    let before = snapshot(spool.as_ref(), &q).await;
    let other = open_spool(h).await;
    match import(other.as_ref(), &plan(&dir, &q)).await {
        RunImportOutcome::AlreadyImported(m) => {
            assert_eq!((m.runs_created, m.runs_existing), (4, 0));
            assert_eq!(m.imported_at, h.clock().now());
        }
        o => panic!("S13: a second import is a no-op: {o:?}"),
    }
    assert_eq!(
        snapshot(other.as_ref(), &q).await,
        before,
        "S13: nothing changed"
    );

    // The imported keys deduplicate, and the queued runs are claimed as any run.
    let again = other
        .enqueue(&q, &legacy_key(4), Vec::new(), EnqueueOptions::default())
        .await
        .unwrap();
    assert!(!again.created && again.run_id == rid(4));
    let claimed = other.claim(&q, &consumer("s13"), LEASE, 10).await.unwrap();
    let mut got: Vec<(RunId, u32)> = claimed.iter().map(|c| (c.run_id, c.attempt)).collect();
    got.sort();
    assert_eq!(got, vec![(rid(2), 2), (rid(3), 3), (rid(4), 1)]);
}

/// S13: a torn final record of the log and of the spool is left out and reported; the
/// complete records import; cutting the torn bytes off afterwards leaves the same source, so
/// importing again is a no-op.
pub async fn s13_legacy_torn_tail_imported_and_reported<H: SpoolHarness>(h: &H) {
    let q = random_queue("s13-torn");
    let dir = LegacyDir::new("s13-torn");
    let whole = [
        wal(
            0,
            1,
            "run",
            &format!("\"run\":{}", run_obj(1, "queued", 0, "")),
        ),
        wal(
            0,
            2,
            "run",
            &format!("\"run\":{}", run_obj(2, "queued", 0, "")),
        ),
    ];
    let mut bytes = whole.concat().into_bytes();
    let complete = whole[0].len();
    bytes.truncate(complete + whole[1].len() / 2);
    dir.write_bytes(WAL_FILE, &bytes);
    let spool_line = submission(3);
    dir.write_bytes(SPOOL_FILE, &spool_line.as_bytes()[..spool_line.len() - 1]);

    let p = plan(&dir, &q);
    let torn: Vec<(&str, u64)> = p.report.torn.iter().map(|t| (t.file, t.line)).collect();
    assert_eq!(
        torn,
        vec![(WAL_FILE, 2), (SPOOL_FILE, 1)],
        "S13: torn tails reported"
    );
    let spool = open_spool(h).await;
    match import(spool.as_ref(), &p).await {
        RunImportOutcome::Imported { created, .. } => assert_eq!(created, vec![rid(1)]),
        o => panic!("S13: {o:?}"),
    }
    assert!(spool.run(rid(2)).await.unwrap().is_none());
    assert!(spool.run(rid(3)).await.unwrap().is_none());

    dir.write_bytes(WAL_FILE, &bytes[..complete]);
    dir.write_bytes(SPOOL_FILE, b"");
    let repaired = plan(&dir, &q);
    assert!(repaired.report.torn.is_empty());
    assert!(matches!(
        import(spool.as_ref(), &repaired).await,
        RunImportOutcome::AlreadyImported(_)
    ));
}

/// S13: log records of a generation older than the checkpoint's never replay over it (a
/// crash between installing a checkpoint and resetting the log); a log newer than the
/// checkpoint is refused and nothing is imported.
pub async fn s13_legacy_stale_generation_never_replays<H: SpoolHarness>(h: &H) {
    let q = random_queue("s13-stale");
    let dir = LegacyDir::new("s13-stale");
    dir.write(
        CHECKPOINT_FILE,
        &[header(5, 1, 0, 0), cp_run(run_obj(1, "succeeded", 1, ""))],
    );
    dir.write(
        WAL_FILE,
        &[
            wal(
                4,
                1,
                "run",
                &format!("\"run\":{}", run_obj(1, "queued", 0, "")),
            ),
            wal(
                4,
                2,
                "run",
                &format!("\"run\":{}", run_obj(2, "queued", 0, "")),
            ),
            wal(
                5,
                1,
                "run",
                &format!("\"run\":{}", run_obj(3, "queued", 0, "")),
            ),
        ],
    );
    let p = plan(&dir, &q);
    assert_eq!((p.report.wal_stale, p.report.wal_applied), (2, 1));
    let spool = open_spool(h).await;
    import(spool.as_ref(), &p).await;
    assert_eq!(
        info(spool.as_ref(), rid(1)).await.state,
        RunState::Succeeded
    );
    assert!(
        spool.run(rid(2)).await.unwrap().is_none(),
        "S13: a stale record created nothing"
    );
    assert_eq!(info(spool.as_ref(), rid(3)).await.state, RunState::Queued);

    let newer = LegacyDir::new("s13-newer");
    newer.write(CHECKPOINT_FILE, &[header(5, 0, 0, 0)]);
    newer.write(
        WAL_FILE,
        &[wal(
            6,
            1,
            "run",
            &format!("\"run\":{}", run_obj(9, "queued", 0, "")),
        )],
    );
    match read_dir(
        newer.path(),
        &LegacyOptions {
            queue: q.clone(),
            ..LegacyOptions::default()
        },
    ) {
        Err(LegacyError::Record { file, line, .. }) => assert_eq!((file, line), (WAL_FILE, 1)),
        other => panic!("S13: a log newer than its checkpoint is refused: {other:?}"),
    }
}

/// S13: a corrupt record in the middle of the log is refused with its file and line, and the
/// store is unchanged; an import batch the spool refuses (invalid, or one run id already
/// stored under another key) writes nothing at all — not even the batch's valid runs or the
/// completion marker — so a corrected import succeeds.
pub async fn s13_legacy_corruption_refused_with_nothing_changed<H: SpoolHarness>(h: &H) {
    let q = random_queue("s13-corrupt");
    let spool = open_spool(h).await;
    let present = spool
        .enqueue(
            &q,
            &DedupKey::from_parts(["present"]).unwrap(),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let before = snapshot(spool.as_ref(), &q).await;

    let dir = LegacyDir::new("s13-corrupt");
    let lines = [
        wal(
            0,
            1,
            "run",
            &format!("\"run\":{}", run_obj(1, "queued", 0, "")),
        ),
        wal(
            0,
            2,
            "run",
            &format!("\"run\":{}", run_obj(2, "queued", 0, "")),
        ),
        wal(
            0,
            3,
            "run",
            &format!("\"run\":{}", run_obj(3, "queued", 0, "")),
        ),
    ];
    let mut bytes = lines.concat().into_bytes();
    let at = lines[0].len() + 40;
    bytes[at] ^= 0x04;
    dir.write_bytes(WAL_FILE, &bytes);
    match read_dir(
        dir.path(),
        &LegacyOptions {
            queue: q.clone(),
            ..LegacyOptions::default()
        },
    ) {
        Err(e @ LegacyError::Record { .. }) => {
            let LegacyError::Record { file, line, .. } = &e else {
                unreachable!()
            };
            assert_eq!(
                (*file, *line),
                (WAL_FILE, 2),
                "S13: the error names file and line"
            );
            assert!(e.to_string().contains("runs.wal line 2"));
        }
        other => panic!("S13: a corrupt record is refused: {other:?}"),
    }
    assert_eq!(snapshot(spool.as_ref(), &q).await, before);

    // The spool's own refusals are atomic too.
    dir.write(WAL_FILE, &lines);
    let p = plan(&dir, &q);
    let mut clash = p.runs.clone();
    clash[2].run_id = present.run_id; // an id stored already, under another key
    assert_err(
        spool.import_runs(&p.source, clash).await,
        "Conflict",
        "S13: an id stored under another key",
    );
    let mut claimed = p.runs.clone();
    claimed[1].state = RunState::Claimed;
    assert_err(
        spool.import_runs(&p.source, claimed).await,
        "InvalidInput",
        "S13: a lease cannot be imported",
    );
    let twice: Vec<ImportedRun> = vec![p.runs[0].clone(), p.runs[0].clone()];
    assert_err(
        spool.import_runs(&p.source, twice).await,
        "InvalidInput",
        "S13: one run twice in a batch",
    );
    let bad_source = ImportSource {
        description: String::new(),
        ..p.source.clone()
    };
    assert_err(
        spool.import_runs(&bad_source, p.runs.clone()).await,
        "InvalidInput",
        "S13: a source needs a description",
    );
    assert_eq!(
        snapshot(spool.as_ref(), &q).await,
        before,
        "S13: a refused import changed nothing"
    );
    match import(spool.as_ref(), &p).await {
        RunImportOutcome::Imported { created, .. } => assert_eq!(created.len(), 3),
        o => panic!("S13: the corrected import runs (no marker was left behind): {o:?}"),
    }
}

/// S13: a legacy run whose `(queue, dedup key)` the spool already holds is reported, not
/// duplicated, and the stored run is left as it is.
pub async fn s13_legacy_existing_keys_reported_not_duplicated<H: SpoolHarness>(h: &H) {
    let q = random_queue("s13-existing");
    let spool = open_spool(h).await;
    let mine = spool
        .enqueue(
            &q,
            &legacy_key(2),
            b"enqueued since".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let before = info(spool.as_ref(), mine.run_id).await;
    let dir = LegacyDir::new("s13-existing");
    dir.write(
        WAL_FILE,
        &[
            wal(
                0,
                1,
                "run",
                &format!("\"run\":{}", run_obj(1, "queued", 0, "")),
            ),
            wal(
                0,
                2,
                "run",
                &format!("\"run\":{}", run_obj(2, "failed", 1, "")),
            ),
        ],
    );
    let p = plan(&dir, &q);
    match import(spool.as_ref(), &p).await {
        RunImportOutcome::Imported { created, existing } => {
            assert_eq!(created, vec![rid(1)]);
            assert_eq!(
                existing,
                vec![ExistingRun {
                    imported: rid(2),
                    existing: mine.run_id
                }]
            );
        }
        o => panic!("S13: {o:?}"),
    }
    assert_eq!(info(spool.as_ref(), mine.run_id).await, before);
    assert!(spool.run(rid(2)).await.unwrap().is_none());
    match import(spool.as_ref(), &p).await {
        RunImportOutcome::AlreadyImported(m) => {
            assert_eq!((m.runs_created, m.runs_existing), (1, 1));
        }
        o => panic!("S13: {o:?}"),
    }
}
