//! [`SqliteStore`]: the epoch log on one SQLite file.
//!
//! Concurrency model: each store instance owns one writer connection behind an async mutex and
//! a small set of read connections ([`SqliteOptions::read_connections`], [`crate::pool`]), each
//! used only inside `spawn_blocking`, so no rusqlite call runs on the async executor. The
//! writer mutex is the in-process writer guard: a writer waits for it without holding a
//! thread, and no longer than the busy timeout (then [`Error::Retryable`], as for SQLite's own
//! lock). `BEGIN IMMEDIATE` then takes SQLite's single writer lock, which serializes writers
//! across instances and processes. WAL lets every read connection read its own snapshot
//! meanwhile, so reads neither wait for the writer nor for each other. Seqs are assigned under
//! that lock, which is what makes the head-cache check sound. Appends (and the spool's hot
//! writes) go through `SqliteStore::with_writer_grouped`: concurrent ones share one
//! transaction and one fsync ([`crate::group`]).
//!
//! The epoch-log paths are built from per-step free functions over the connection wrapper
//! [`Db`], named as in the Postgres backend: [`probe`] (next seq and cache rows in one
//! statement), [`working_heads`] (the cache when current, else the anti-join), [`anti_join`],
//! [`insert_epoch`], [`cache_sole_head`] and [`cache_exact`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use cairn_core::{
    epoch_id, heads_after_import, next_seq, verify_epoch, Appended, Epoch, EpochDiagnostics,
    EpochId, EpochStore, EpochSummary, Error, Event, EventId, FeedCursor, FeedEvent, FeedPage,
    ForeignEpoch, Head, HeadProbe, ImportOutcome, RepairOutcome, Result, Seq, SpaceId,
};
use rusqlite::{params, Connection};
use std::time::Duration;

use cairn_migrate::{cairn_set, Opened, Runner};

use crate::config::SqliteOptions;
use crate::db::{blocking, lock, Db, End};
use crate::error::{corrupt, map};
use crate::group::{self, GroupStats, Pending};
use crate::migrate::SqliteMigrator;
use crate::pool::ReadPool;
use crate::{files, sql};

/// Statements a single-event append costs when the head cache is current and holds one row
/// (the steady state): `BEGIN IMMEDIATE`, the probe (next seq + cache rows), the epoch insert,
/// one parent edge, one event, the cache `UPDATE`, `COMMIT`. In general an append with a
/// current cache costs `5 + parents + events`, whatever the history's length.
pub const APPEND_STATEMENT_BUDGET: u64 = 7;

/// The epoch log on one SQLite file. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    opts: SqliteOptions,
    opened: Opened,
    writer: Arc<tokio::sync::Mutex<Connection>>,
    readers: Arc<ReadPool>,
    statements: AtomicU64,
    /// Write operations waiting for the writer's next group commit ([`crate::group`]).
    pending: std::sync::Mutex<Vec<Box<dyn Pending>>>,
    groups: GroupStats,
    /// The store file and `-wal` file this instance opened, checked before every write
    /// transaction ([`check_files`]) and every [`IDENTITY_WATCH_INTERVAL`] by the watcher
    /// thread ([`watch`]).
    identity: files::Identity,
    /// Set once the write-ahead log was checkpointed away after the store file was found
    /// replaced ([`check_files`]).
    wal_scrubbed: AtomicBool,
}

/// Refuses a write when the store file or its `-wal` file is no longer the one this instance
/// opened (one `lstat` of each path per write transaction; a group commit checks once).
///
/// The first time the store file itself is found replaced while the `-wal` file is still this
/// store's, the writer checkpoints the log into the file it opened (through its open
/// descriptor) and truncates it: the log's frames belong to that file, and any process opening
/// the path would otherwise read them as pages of the file now there.
fn check_files(inner: &Inner, conn: &Connection) -> Result<()> {
    let Some(changed) = inner.identity.changed()? else {
        return Ok(());
    };
    if matches!(changed, files::Changed::Main(_)) && !inner.wal_scrubbed.load(Ordering::SeqCst) {
        // Best effort: a failure (a reader holding a snapshot past the busy timeout) leaves
        // the log as it was, and the next write or watcher tick tries again; the write is
        // refused either way. The first column is 1 when the checkpoint could not finish.
        let done = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
            .is_ok_and(|busy| busy == 0);
        if done {
            inner.wal_scrubbed.store(true, Ordering::SeqCst);
        }
    }
    Err(inner.identity.error(&changed))
}

/// How often an open store's identity watcher looks at the store file and its `-wal` file
/// (one `lstat` of each).
///
/// Writes and readiness check the files themselves, but a store that writes nothing after
/// its file was replaced (`mv other.db store.db`) would otherwise leave its log at
/// `store.db-wal` until it closes, and the next process to open `store.db` would apply that
/// log to the replacement — reading the old store's pages in the new file. The watcher finds
/// the replacement within this interval and runs the same step as a write (checkpoint the
/// log into the file this store opened, truncate the `-wal`); writes and readiness go on
/// refusing with [`Error::StoreReplaced`].
///
/// **Remaining window:** SQLite cannot bind a `-wal` file to its database file. A process
/// that opens the new file at the path within this interval of the replacement (before the
/// watcher's checkpoint) still reads this store's log over it; so does one that opens it
/// while the writer is busy past the interval, or when the checkpoint cannot finish (a
/// reader holding an old snapshot; the watcher retries every interval). Stop the process
/// owning a store before replacing its file.
pub const IDENTITY_WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// Starts the identity watcher of a newly opened store: a thread that holds the store only
/// weakly and ends within one [`IDENTITY_WATCH_INTERVAL`] after the store's last handle is
/// dropped, or once the log was checkpointed away after a replacement.
fn start_watcher(inner: &Arc<Inner>) -> Result<()> {
    let weak = Arc::downgrade(inner);
    std::thread::Builder::new()
        .name("cairn-sqlite-identity".into())
        .spawn(move || watch(&weak, IDENTITY_WATCH_INTERVAL))
        .map(drop)
        .map_err(|e| {
            Error::unavailable(format!(
                "cannot start the store file's identity watcher: {e}"
            ))
        })
}

/// The watcher's loop ([`start_watcher`]).
fn watch(store: &Weak<Inner>, interval: Duration) {
    loop {
        std::thread::sleep(interval);
        let Some(inner) = store.upgrade() else {
            return;
        };
        if inner.wal_scrubbed.load(Ordering::SeqCst) {
            return;
        }
        // A path that cannot be looked at now is looked at again next time; writes refuse
        // meanwhile.
        let Ok(Some(_)) = inner.identity.changed() else {
            continue;
        };
        // A busy writer is mid-write, and that write checks the files itself; otherwise the
        // watcher runs the check (and its checkpoint) through the writer.
        if let Ok(conn) = inner.writer.try_lock() {
            let _ = check_files(&inner, &conn);
        };
    }
}

/// A copy of `e` for each caller of a group the check refused (the error is not `Clone`).
fn copy_error(e: &Error) -> Error {
    match e {
        Error::StoreReplaced { path, detail } => Error::StoreReplaced {
            path: path.clone(),
            detail: detail.clone(),
        },
        Error::Io { path, source } => Error::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        // The writer busy past the timeout: each waiting caller gets the same retryable
        // error, its detail once (not the first error's whole message wrapped again).
        Error::Retryable { detail, .. } => Error::retryable(detail.clone()),
        other => Error::backend("sqlite", other.to_string()),
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("busy_timeout", &self.inner.opts.busy_timeout)
            .field("read_connections", &self.inner.opts.read_connections)
            .finish_non_exhaustive()
    }
}

fn epoch_id_from(bytes: &[u8]) -> Result<EpochId> {
    EpochId::from_slice(bytes).map_err(|_| corrupt("a stored epoch id is not 32 bytes"))
}

fn heads_from(rows: Vec<(Vec<u8>, i64)>) -> Result<Vec<Head>> {
    rows.into_iter()
        .map(|(id, seq)| {
            Ok(Head {
                id: epoch_id_from(&id)?,
                seq: Seq::from_i64(seq)?,
            })
        })
        .collect()
}

type ProbeRow = (Option<i64>, Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>);

/// One statement: the largest seq and the id there, next to the cache rows (see
/// [`sql::PROBE`]).
pub(crate) fn probe(db: &Db<'_>, space: &SpaceId) -> Result<HeadProbe> {
    let rows: Vec<ProbeRow> = db.rows(sql::PROBE, params![space.as_bytes()], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })?;
    let max_seq = match rows.first().and_then(|r| r.0) {
        Some(s) => Some(Seq::from_i64(s)?),
        None => None,
    };
    let max_id = match rows.first().and_then(|r| r.1.as_deref()) {
        Some(id) => Some(epoch_id_from(id)?),
        None => None,
    };
    let mut cached = Vec::with_capacity(rows.len());
    for (_, _, id, seq) in rows {
        if let (Some(id), Some(seq)) = (id, seq) {
            cached.push(Head {
                id: epoch_id_from(&id)?,
                seq: Seq::from_i64(seq)?,
            });
        }
    }
    Ok(HeadProbe {
        max_seq,
        max_id,
        cached,
    })
}

pub(crate) fn anti_join(db: &Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    heads_from(
        db.rows(sql::ANTI_JOIN_HEADS, params![space.as_bytes()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?,
    )
}

fn cached_heads(db: &Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    heads_from(db.rows(sql::CACHED_HEADS, params![space.as_bytes()], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?)
}

pub(crate) fn max_seq(db: &Db<'_>, space: &SpaceId) -> Result<Option<Seq>> {
    let rows: Vec<i64> = db.rows(sql::MAX_SEQ, params![space.as_bytes()], |r| r.get(0))?;
    rows.first().map(|s| Seq::from_i64(*s)).transpose()
}

pub(crate) fn epoch_seq(db: &Db<'_>, space: &SpaceId, id: &EpochId) -> Result<Option<Seq>> {
    let rows: Vec<i64> = db.rows(
        sql::EPOCH_SEQ,
        params![space.as_bytes(), id.as_bytes()],
        |r| r.get(0),
    )?;
    rows.first().map(|s| Seq::from_i64(*s)).transpose()
}

/// The heads the append path works from: the cache when current, else the anti-join (once).
pub(crate) fn working_heads(db: &Db<'_>, space: &SpaceId, probe: &HeadProbe) -> Result<Vec<Head>> {
    if probe.cache_is_current() {
        Ok(probe.cached.clone())
    } else {
        anti_join(db, space)
    }
}

/// Inserts an epoch with its parent edges and events at `seq`; `parents` must be sorted and
/// already in the space. Returns its id.
pub(crate) fn insert_epoch(
    db: &Db<'_>,
    space: &SpaceId,
    seq: Seq,
    parents: &[EpochId],
    events: &[Event],
    event_ids: &[EventId],
) -> Result<EpochId> {
    let id = epoch_id(space, parents, event_ids);
    let s = space.as_bytes();
    let seq_i = seq.to_i64()?;
    db.exec(sql::INSERT_EPOCH, params![s, id.as_bytes(), seq_i])?;
    for p in parents {
        db.exec(sql::INSERT_PARENT, params![s, p.as_bytes(), id.as_bytes()])?;
    }
    for (i, (ev, ev_id)) in events.iter().zip(event_ids).enumerate() {
        db.exec(
            sql::INSERT_EVENT,
            params![
                s,
                seq_i,
                i as i64,
                id.as_bytes(),
                ev_id.as_bytes(),
                ev.kind,
                ev.key,
                ev.payload
            ],
        )?;
    }
    Ok(id)
}

/// Makes `head` the space's only cached row: one row → UPDATE, none → INSERT, several →
/// DELETE + INSERT (DESIGN §2 step 5).
pub(crate) fn cache_sole_head(
    db: &Db<'_>,
    space: &SpaceId,
    before: &[Head],
    head: Head,
) -> Result<()> {
    let s = space.as_bytes();
    let seq = head.seq.to_i64()?;
    match before.len() {
        1 => db.exec(sql::UPDATE_SOLE_HEAD, params![s, head.id.as_bytes(), seq])?,
        0 => db.exec(sql::INSERT_HEAD, params![s, head.id.as_bytes(), seq])?,
        _ => {
            db.exec(sql::DELETE_HEADS, params![s])?;
            db.exec(sql::INSERT_HEAD, params![s, head.id.as_bytes(), seq])?
        }
    };
    Ok(())
}

/// Rewrites the cache from `before` to exactly `after` (both sorted), touching only the rows
/// that differ.
pub(crate) fn cache_exact(
    db: &Db<'_>,
    space: &SpaceId,
    before: &[Head],
    after: &[Head],
) -> Result<()> {
    let s = space.as_bytes();
    for h in before.iter().filter(|h| !after.contains(h)) {
        db.exec(sql::DELETE_HEAD, params![s, h.id.as_bytes()])?;
    }
    for h in after.iter().filter(|h| !before.contains(h)) {
        db.exec(
            sql::INSERT_HEAD,
            params![s, h.id.as_bytes(), h.seq.to_i64()?],
        )?;
    }
    Ok(())
}

fn event_ids(events: &[Event]) -> Vec<EventId> {
    events.iter().map(Event::id).collect()
}

pub(crate) fn append_tx(db: &Db<'_>, space: &SpaceId, events: &[Event]) -> Result<Appended> {
    let ids = event_ids(events);
    db.write_tx(|db| {
        let probe = probe(db, space)?;
        let parents: Vec<EpochId> = working_heads(db, space, &probe)?
            .into_iter()
            .map(|h| h.id)
            .collect();
        let seq = probe.next();
        let id = insert_epoch(db, space, seq, &parents, events, &ids)?;
        cache_sole_head(db, space, &probe.cached, Head { id, seq })?;
        Ok((Appended { id, seq, parents }, End::Commit))
    })
}

fn heads_tx(db: &Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    db.read_tx(|db| {
        let probe = probe(db, space)?;
        if probe.max_seq.is_none() {
            return Err(Error::space_not_found(space));
        }
        working_heads(db, space, &probe)
    })
}

fn repair_tx(db: &Db<'_>, space: &SpaceId) -> Result<RepairOutcome> {
    db.write_tx(|db| {
        let probe = probe(db, space)?;
        if probe.max_seq.is_none() {
            return Err(Error::space_not_found(space));
        }
        let after = anti_join(db, space)?;
        if probe.cached == after {
            return Ok((RepairOutcome::Unchanged, End::Rollback));
        }
        cache_exact(db, space, &probe.cached, &after)?;
        Ok((
            RepairOutcome::Rewritten {
                before: probe.cached,
                after,
            },
            End::Commit,
        ))
    })
}

fn import_tx(db: &Db<'_>, epoch: &ForeignEpoch) -> Result<ImportOutcome> {
    let space = &epoch.space;
    let ids = event_ids(&epoch.events);
    db.write_tx(|db| {
        if let Some(seq) = epoch_seq(db, space, &epoch.id)? {
            return Ok((ImportOutcome::AlreadyPresent(seq), End::Rollback));
        }
        for p in &epoch.parents {
            if epoch_seq(db, space, p)?.is_none() {
                return Err(Error::UnknownParent { parent: *p });
            }
        }
        let probe = probe(db, space)?;
        let before = working_heads(db, space, &probe)?;
        let seq = probe.next();
        let id = insert_epoch(db, space, seq, &epoch.parents, &epoch.events, &ids)?;
        if id != epoch.id {
            // verify_epoch ran before the transaction; this would be a bug, not bad input.
            return Err(Error::HashMismatch {
                claimed: epoch.id,
                actual: id,
            });
        }
        let heads = heads_after_import(&before, &epoch.parents, Head { id, seq });
        cache_exact(db, space, &probe.cached, &heads)?;
        Ok((ImportOutcome::Imported(seq), End::Commit))
    })
}

type FeedRow = (i64, i64, Vec<u8>, Vec<u8>, String, Option<Vec<u8>>, Vec<u8>);

fn feed_event(row: FeedRow) -> Result<FeedEvent> {
    let (seq, epoch_seq, epoch, event_id, kind, key, payload) = row;
    Ok(FeedEvent {
        seq: Seq::from_i64(seq)?,
        epoch: epoch_id_from(&epoch)?,
        epoch_seq: u32::try_from(epoch_seq)
            .map_err(|_| corrupt("a stored event position is out of range"))?,
        event_id: EventId::from_slice(&event_id)
            .map_err(|_| corrupt("a stored event id is not 32 bytes"))?,
        event: Event { kind, key, payload },
    })
}

/// The feed page after `after`: whole epochs, at most `limit` events and `max_bytes` of their
/// stored bytes ([`Event::stored_bytes`]), at least one epoch. Rows are read one at a time, so
/// an epoch that does not fit is read no further than its first event that does not.
fn events_since_tx(
    db: &Db<'_>,
    space: &SpaceId,
    after: Seq,
    limit: usize,
    max_bytes: usize,
) -> Result<FeedPage> {
    db.read_tx(|db| {
        if max_seq(db, space)?.is_none() {
            return Err(Error::space_not_found(space));
        }
        db.count();
        let mut stmt = db.conn().prepare_cached(sql::EVENTS_AFTER).map_err(map)?;
        let mut rows = stmt
            .query(params![space.as_bytes(), after.to_i64()?])
            .map_err(map)?;
        let mut page: Vec<FeedEvent> = Vec::new();
        // The epoch being read; it joins the page only once complete and only if it fits.
        let mut current: Vec<FeedEvent> = Vec::new();
        // Stored bytes of `page` and `current` together.
        let mut bytes = 0usize;
        let mut last = after;
        loop {
            let Some(row) = rows.next().map_err(map)? else {
                if let Some(first) = current.first() {
                    last = first.seq;
                    page.append(&mut current);
                }
                break;
            };
            let fe = feed_event((
                row.get(0).map_err(map)?,
                row.get(1).map_err(map)?,
                row.get(2).map_err(map)?,
                row.get(3).map_err(map)?,
                row.get(4).map_err(map)?,
                row.get(5).map_err(map)?,
                row.get(6).map_err(map)?,
            ))?;
            if let Some(first) = current.first() {
                if first.seq != fe.seq {
                    last = first.seq;
                    page.append(&mut current);
                }
            }
            // Stop before an epoch that would take the page past `limit` events or
            // `max_bytes`, unless the page would otherwise be empty.
            bytes = bytes.saturating_add(fe.event.stored_bytes());
            if !page.is_empty() && (page.len() + current.len() + 1 > limit || bytes > max_bytes) {
                break;
            }
            current.push(fe);
        }
        Ok(FeedPage {
            events: page,
            next: FeedCursor::new(space, last),
        })
    })
}

fn epoch_tx(db: &Db<'_>, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
    db.read_tx(|db| {
        let Some(seq) = epoch_seq(db, space, id)? else {
            return Ok(None);
        };
        let s = space.as_bytes();
        let parents = db
            .rows(sql::EPOCH_PARENTS, params![s, id.as_bytes()], |r| {
                r.get::<_, Vec<u8>>(0)
            })?
            .iter()
            .map(|p| epoch_id_from(p))
            .collect::<Result<Vec<_>>>()?;
        let events = db.rows(sql::EPOCH_EVENTS, params![s, seq.to_i64()?], |r| {
            Ok(Event {
                kind: r.get(0)?,
                key: r.get(1)?,
                payload: r.get(2)?,
            })
        })?;
        Ok(Some(Epoch {
            space: space.clone(),
            id: *id,
            seq,
            parents,
            events,
        }))
    })
}

type RecentRow = (
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
    Option<Vec<u8>>,
);

/// One statement ([`sql::RECENT_EPOCHS`]), so one snapshot: the page, its parents and its
/// counts at one committed state, and whether the space exists at all.
fn recent_epochs_q(
    db: &Db<'_>,
    space: &SpaceId,
    before: Option<Seq>,
    limit: usize,
) -> Result<Vec<EpochSummary>> {
    // A bound above every storable seq reads from the newest epoch.
    let before = before.map_or(i64::MAX, |b| i64::try_from(b.0).unwrap_or(i64::MAX));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows: Vec<RecentRow> = db.rows(
        sql::RECENT_EPOCHS,
        params![space.as_bytes(), before, limit],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )?;
    if rows.first().is_none_or(|r| r.0.is_none()) {
        return Err(Error::space_not_found(space));
    }
    let mut page: Vec<EpochSummary> = Vec::new();
    for (_, id, seq, events, parent) in rows {
        let (Some(id), Some(seq), Some(events)) = (id, seq, events) else {
            continue;
        };
        let seq = Seq::from_i64(seq)?;
        if page.last().is_none_or(|e| e.seq != seq) {
            page.push(EpochSummary {
                id: epoch_id_from(&id)?,
                seq,
                parents: Vec::new(),
                events: u64::try_from(events).map_err(|_| corrupt("a negative event count"))?,
            });
        }
        if let (Some(parent), Some(e)) = (parent, page.last_mut()) {
            e.parents.push(epoch_id_from(&parent)?);
        }
    }
    Ok(page)
}

fn list_spaces_q(db: &Db<'_>, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
    let start: &[u8] = after.map_or(&[], SpaceId::as_bytes);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.rows(sql::SPACES_AFTER, params![start, limit], |r| {
        r.get::<_, Vec<u8>>(0)
    })?
    .into_iter()
    .map(|s| SpaceId::from_stored(s).map_err(|_| corrupt("a stored space id is out of bounds")))
    .collect()
}

impl SqliteStore {
    /// Opens (creating when missing) the store at `path` with default [`SqliteOptions`].
    ///
    /// # Errors
    /// See [`SqliteStore::open_with`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the store at `path`, creating it when missing unless
    /// [`SqliteOptions::create_if_missing`] is off: refuses a symlinked file, `-wal` or
    /// `-shm`; creates the directory 0700 and the file 0600 and fsyncs the directory; refuses a
    /// database that holds other tables and no cairn stamp (unless
    /// [`SqliteOptions::share_file_with_application`]); runs cairn's migration set through the
    /// lineage-aware runner ([`SqliteStore::opened`] says what it did); turns on WAL, foreign
    /// keys, the busy timeout and `synchronous=FULL`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for options no store can be opened with (0 read connections);
    /// [`Error::NotFound`] when no file exists and `create_if_missing` is off (nothing is
    /// created); [`Error::UnsafePath`] for a symlink or a non-file at the path (nothing is
    /// created); [`Error::Io`] when the file or directory cannot be created or opened;
    /// [`Error::Corrupt`] when the file is not a SQLite database, holds an application's tables
    /// without the opt-in, or holds tables that do not match cairn's schema;
    /// [`Error::Incompatible`] for a store whose migration history this build must not use
    /// (nothing is changed); [`Error::Retryable`] when another writer held the lock past the
    /// busy timeout.
    pub async fn open_with(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<Self> {
        let runner = Runner::new(cairn_set())
            .with_lock_timeout(opts.busy_timeout.max(Duration::from_secs(30)));
        Self::open_with_runner(path.as_ref(), opts, &runner).await
    }

    /// Test support: opens the store at `path` as the build whose view of cairn's migration set
    /// `runner` holds (an older or a diverged build, or a runner with test hooks).
    ///
    /// # Errors
    /// As [`SqliteStore::open_with`].
    #[cfg(feature = "testkit")]
    pub async fn open_migrated(
        path: impl AsRef<Path>,
        opts: SqliteOptions,
        runner: &Runner,
    ) -> Result<(Self, Opened)> {
        let store = Self::open_with_runner(path.as_ref(), opts, runner).await?;
        let opened = store.opened().clone();
        Ok((store, opened))
    }

    pub(crate) async fn open_with_runner(
        path: &Path,
        opts: SqliteOptions,
        runner: &Runner,
    ) -> Result<Self> {
        opts.validate()?;
        let path = path.to_path_buf();
        {
            let (path, opts) = (path.clone(), opts.clone());
            // A file that is not a SQLite database, or a database of something else, is refused
            // before anything (even the switch to WAL) is written to it.
            blocking(move || {
                files::prepare(&path, &opts)?;
                let conn = files::connect_unconfigured(&path, &opts)?;
                files::check_not_foreign(&conn, &opts)
                    .map_err(|e| files::open_error_mapped(&path, e))
            })
            .await?;
        }
        let opened = runner
            .open(&SqliteMigrator::new(&path, opts.clone()))
            .await
            .map_err(|e| files::open_error_mapped(&path, e.into()))?;
        blocking(move || {
            let writer = files::connect(&path, &opts)?;
            files::check_schema(&writer).map_err(|e| files::open_error_mapped(&path, e))?;
            let readers = (0..opts.read_connections)
                .map(|_| files::connect_reader(&path, &opts))
                .collect::<Result<Vec<_>>>()?;
            let identity = files::Identity::record(&path)?;
            let store = Self {
                inner: Arc::new(Inner {
                    path,
                    opts,
                    opened,
                    writer: Arc::new(tokio::sync::Mutex::new(writer)),
                    readers: ReadPool::new(readers),
                    statements: AtomicU64::new(0),
                    pending: std::sync::Mutex::new(Vec::new()),
                    groups: GroupStats::default(),
                    identity,
                    wal_scrubbed: AtomicBool::new(false),
                }),
            };
            start_watcher(&store.inner)?;
            Ok(store)
        })
        .await
    }

    /// What cairn's migration runner did to the store's schema when this instance opened it
    /// (at head, upgraded, ahead of this build, lineage repaired).
    pub fn opened(&self) -> &Opened {
        &self.inner.opened
    }

    /// The store file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &SqliteOptions {
        &self.inner.opts
    }

    /// Runs `f` on the writer connection, once the in-process writer guard is free.
    ///
    /// # Errors
    /// [`Error::Retryable`] when another task of this instance held the guard past the busy
    /// timeout; whatever `f` returns.
    pub(crate) async fn with_writer<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>) -> Result<T> + Send + 'static,
    {
        let conn = self.writer_guard().await?;
        let inner = self.inner.clone();
        blocking(move || {
            check_files(&inner, &conn)?;
            f(&Db::new(&conn, &inner.statements))
        })
        .await
    }

    /// Runs `f` on the writer connection as part of a group commit ([`crate::group`]):
    /// concurrent calls share one transaction and one fsync, and each is answered only after
    /// that transaction committed. `f` may run twice (the second time on its own, in a fresh
    /// transaction, after the group's transaction failed and left nothing behind).
    ///
    /// # Errors
    /// [`Error::Retryable`] when the writer could not be had within the busy timeout; whatever
    /// `f` returns.
    pub(crate) async fn with_writer_grouped<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Db<'_>) -> Result<T> + Send + 'static,
    {
        let (op, answer) = group::Op::queued(f);
        lock(&self.inner.pending).push(op);
        // The drain runs as a task of its own, so a caller that stops waiting cannot strand
        // the operations queued behind it; every queued operation has a drain after it.
        let store = self.clone();
        tokio::spawn(async move { store.drain_group().await });
        answer.await.map_err(|_| {
            Error::backend(
                "sqlite",
                "a grouped write ended without an answer (its writer task failed)",
            )
        })?
    }

    /// Takes the writer, then runs every queued operation (up to [`group::MAX_GROUP`]) as one
    /// group.
    async fn drain_group(&self) {
        let conn = match self.writer_guard().await {
            Ok(conn) => conn,
            Err(e) => {
                let ops = std::mem::take(&mut *lock(&self.inner.pending));
                for op in ops {
                    op.fail(copy_error(&e));
                }
                return;
            }
        };
        let ops: Vec<Box<dyn Pending>> = {
            let mut pending = lock(&self.inner.pending);
            let n = pending.len().min(group::MAX_GROUP);
            pending.drain(..n).collect()
        };
        if ops.is_empty() {
            return;
        }
        let inner = self.inner.clone();
        let _ = blocking(move || {
            match check_files(&inner, &conn) {
                Ok(()) => group::run_group(&conn, &inner.statements, &inner.groups, ops),
                Err(e) => {
                    for op in ops {
                        op.fail(copy_error(&e));
                    }
                }
            }
            Ok(())
        })
        .await;
    }

    /// Test and bench support: how many group commits of several operations this instance
    /// made, the operations they held, and the groups that fell back to one transaction per
    /// operation.
    #[cfg(feature = "testkit")]
    pub fn testkit_group_stats(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let g = &self.inner.groups;
        (
            g.groups.load(Relaxed),
            g.grouped_ops.load(Relaxed),
            g.fallbacks.load(Relaxed),
        )
    }

    /// Test support: write operations queued for the next group commit.
    #[cfg(feature = "testkit")]
    pub fn testkit_pending_writes(&self) -> usize {
        lock(&self.inner.pending).len()
    }

    /// Test support: makes the writer connection's next `fail` commits fail (SQLite's commit
    /// hook turns them into rollbacks), to check that no caller is answered with success for
    /// a write that did not commit.
    #[cfg(feature = "testkit")]
    pub async fn testkit_fail_commits(&self, fail: u64) -> Result<()> {
        let conn = self.writer_guard().await?;
        blocking(move || {
            let left = std::sync::atomic::AtomicU64::new(fail);
            conn.commit_hook(Some(move || {
                left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            }))
            .map_err(map)?;
            Ok(())
        })
        .await
    }

    /// The in-process writer guard, waited for at most the busy timeout. A panic inside a
    /// write leaves no transaction behind that matters: `Db::begin` rolls back whatever the
    /// connection still has open.
    pub(crate) async fn writer_guard(&self) -> Result<tokio::sync::OwnedMutexGuard<Connection>> {
        let timeout = self.inner.opts.busy_timeout;
        tokio::time::timeout(timeout, self.inner.writer.clone().lock_owned())
            .await
            .map_err(|_| {
                Error::retryable(format!(
                    "another write of this store instance held the writer past the busy \
                     timeout ({} ms); retry, or raise SqliteOptions::busy_timeout",
                    timeout.as_millis()
                ))
            })
    }

    /// Refuses a write on `conn` (the writer) when the store's files are no longer the ones
    /// this instance opened (see `check_files`).
    pub(crate) fn check_writer(&self, conn: &Connection) -> Result<()> {
        check_files(&self.inner, conn)
    }

    /// The statement counter, for a [`Db`] over the writer.
    pub(crate) fn statements(&self) -> &AtomicU64 {
        &self.inner.statements
    }

    /// Runs `f` on a read connection of its own (waiting, without holding a thread, while all
    /// of them are busy).
    pub(crate) async fn with_reader<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>) -> Result<T> + Send + 'static,
    {
        let conn = self.inner.readers.checkout().await?;
        let inner = self.inner.clone();
        blocking(move || f(&Db::new(&conn, &inner.statements))).await
    }

    /// Test support: the read connections, to hold one busy.
    #[cfg(feature = "testkit")]
    pub(crate) fn readers(&self) -> &Arc<ReadPool> {
        &self.inner.readers
    }

    /// Test support: rows the writer connection has changed since it was opened
    /// (`sqlite3_total_changes`), to prove that an operation wrote nothing.
    #[cfg(feature = "testkit")]
    pub async fn testkit_total_changes(&self) -> Result<u64> {
        let conn = self.writer_guard().await?;
        blocking(move || Ok(conn.total_changes())).await
    }
}

#[async_trait]
impl EpochStore for SqliteStore {
    async fn append(&self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let space = space.clone();
        self.with_writer_grouped(move |db| append_tx(db, &space, &events))
            .await
    }

    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let space = space.clone();
        self.with_reader(move |db| heads_tx(db, &space)).await
    }

    async fn repair_heads(&self, space: &SpaceId) -> Result<RepairOutcome> {
        let space = space.clone();
        self.with_writer(move |db| repair_tx(db, &space)).await
    }

    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome> {
        verify_epoch(&epoch)?;
        self.with_writer(move |db| import_tx(db, &epoch)).await
    }

    async fn events_since(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
    ) -> Result<FeedPage> {
        let after = FeedCursor::start_after(space, cursor, limit)?;
        let space = space.clone();
        self.with_reader(move |db| events_since_tx(db, &space, after, limit, usize::MAX))
            .await
    }

    async fn events_since_within(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
        max_bytes: usize,
    ) -> Result<FeedPage> {
        let after = FeedCursor::start_after(space, cursor, limit)?;
        let space = space.clone();
        self.with_reader(move |db| events_since_tx(db, &space, after, limit, max_bytes))
            .await
    }

    async fn epoch(&self, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
        let (space, id) = (space.clone(), *id);
        self.with_reader(move |db| epoch_tx(db, &space, &id)).await
    }

    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        if limit == 0 {
            return Err(Error::invalid("page limit", "must be at least 1"));
        }
        let after = after.cloned();
        self.with_reader(move |db| list_spaces_q(db, after.as_ref(), limit))
            .await
    }
}

#[async_trait]
impl EpochDiagnostics for SqliteStore {
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let space = space.clone();
        self.with_reader(move |db| cached_heads(db, &space)).await
    }

    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let space = space.clone();
        self.with_reader(move |db| anti_join(db, &space)).await
    }

    async fn next_seq(&self, space: &SpaceId) -> Result<Seq> {
        let space = space.clone();
        self.with_reader(move |db| max_seq(db, &space).map(next_seq))
            .await
    }

    async fn recent_epochs(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        EpochSummary::check_limit(limit)?;
        let space = space.clone();
        self.with_reader(move |db| recent_epochs_q(db, &space, before, limit))
            .await
    }

    async fn check_ready(&self) -> Result<()> {
        let inner = self.inner.clone();
        blocking(move || inner.identity.check()).await
    }

    fn statements_executed(&self) -> u64 {
        self.inner.statements.load(Ordering::Relaxed)
    }
}
