//! Stored schedules (`spool_schedule`, revision `0009_spool_flow`): put, read, remove, and the
//! fire — the runs of its ticks (through [`enqueue::enqueue_row`], the enqueue's own
//! statements) and the high-water mark in one `BEGIN IMMEDIATE` transaction on the writer.
//!
//! The statements are not in `sql::ALL` (which `SqliteSpool::from_store` prepares up front): a
//! store whose upgrade stopped before 0009 still opens its spool, and only these methods refuse,
//! with [`schedules_need_revision`].

use std::error::Error as _;

use cairn_core::spool::{
    schedule_tick_key, schedules_need_revision, CatchUp, EnqueueOptions, PartitionKey, QueueName,
    Schedule, ScheduleFired, ScheduleInfo, ScheduleName, SupersedeGroup, Timestamp,
};
use cairn_core::{Error, Result};
use rusqlite::{params, Row};

use super::enqueue::enqueue_row;
use super::row::{micros, ts};
use crate::db::{Db, End};
use crate::error::corrupt;

/// Creates or replaces a schedule: a new one gets revision 1 and `?12` (now) as its mark and
/// times; an edit replaces every field, bumps the revision and keeps the creation time and the
/// mark — but an edit of the expression or its zone moves the mark up to now, so no tick of the
/// new expression from before the edit is enqueued (catch-up is for ticks missed while no
/// scheduler ran, not for an expression nobody ran). Returns `(high_water, revision, created_at, updated_at)`.
const PUT: &str = "\
INSERT INTO spool_schedule (name, cron, time_zone, queue, payload, priority, max_attempts, \
    supersede_group, partition_key, catch_up, catch_up_cap, high_water, revision, created_at, \
    updated_at) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 1, ?12, ?12) \
ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, time_zone = excluded.time_zone, \
    queue = excluded.queue, payload = excluded.payload, priority = excluded.priority, \
    max_attempts = excluded.max_attempts, supersede_group = excluded.supersede_group, \
    partition_key = excluded.partition_key, catch_up = excluded.catch_up, \
    catch_up_cap = excluded.catch_up_cap, revision = spool_schedule.revision + 1, \
    high_water = CASE WHEN spool_schedule.cron <> excluded.cron \
        OR spool_schedule.time_zone <> excluded.time_zone \
        THEN max(spool_schedule.high_water, excluded.high_water) \
        ELSE spool_schedule.high_water END, \
    updated_at = excluded.updated_at \
RETURNING high_water, revision, created_at, updated_at";

const COLUMNS: &str = "name, cron, time_zone, queue, payload, priority, max_attempts, \
    supersede_group, partition_key, catch_up, catch_up_cap, high_water, revision, created_at, \
    updated_at";

fn select_one() -> String {
    format!("SELECT {COLUMNS} FROM spool_schedule WHERE name = ?1")
}

fn select_all() -> String {
    format!("SELECT {COLUMNS} FROM spool_schedule")
}

const REMOVE: &str = "DELETE FROM spool_schedule WHERE name = ?1";

const MOVE_MARK: &str = "UPDATE spool_schedule SET high_water = ?2 WHERE name = ?1";

/// A schedule row's columns, as read (converted by [`info`]).
struct Columns {
    name: String,
    cron: String,
    time_zone: String,
    queue: String,
    payload: Vec<u8>,
    priority: i32,
    max_attempts: Option<i64>,
    supersede_group: Option<Vec<u8>>,
    partition_key: Option<String>,
    catch_up: String,
    catch_up_cap: Option<i64>,
    high_water: i64,
    revision: i64,
    created_at: i64,
    updated_at: i64,
}

fn columns(r: &Row<'_>) -> rusqlite::Result<Columns> {
    Ok(Columns {
        name: r.get(0)?,
        cron: r.get(1)?,
        time_zone: r.get(2)?,
        queue: r.get(3)?,
        payload: r.get(4)?,
        priority: r.get(5)?,
        max_attempts: r.get(6)?,
        supersede_group: r.get(7)?,
        partition_key: r.get(8)?,
        catch_up: r.get(9)?,
        catch_up_cap: r.get(10)?,
        high_water: r.get(11)?,
        revision: r.get(12)?,
        created_at: r.get(13)?,
        updated_at: r.get(14)?,
    })
}

fn info(c: Columns) -> Result<ScheduleInfo> {
    let bad = |what: &str| corrupt(format!("a stored schedule's {what} is invalid"));
    let options = EnqueueOptions {
        supersede_group: c
            .supersede_group
            .map(SupersedeGroup::from_bytes)
            .transpose()
            .map_err(|_| bad("supersede group"))?,
        not_before: None,
        max_attempts: c
            .max_attempts
            .map(u32::try_from)
            .transpose()
            .map_err(|_| bad("max attempts"))?,
        priority: c.priority,
        partition_key: c
            .partition_key
            .map(PartitionKey::from_stored)
            .transpose()
            .map_err(|_| bad("partition key"))?,
        // A schedule's runs carry no trace (`check_schedule` refuses one).
        traceparent: None,
    };
    Ok(ScheduleInfo {
        schedule: Schedule {
            name: ScheduleName::from_stored(c.name).map_err(|_| bad("name"))?,
            cron: c.cron,
            time_zone: c.time_zone,
            queue: QueueName::new(c.queue).map_err(|_| bad("queue"))?,
            payload: c.payload,
            options,
            catch_up: CatchUp::from_stored(&c.catch_up, c.catch_up_cap)
                .ok_or_else(|| bad("catch-up policy"))?,
        },
        high_water: ts(c.high_water),
        revision: u64::try_from(c.revision).map_err(|_| bad("revision"))?,
        created_at: ts(c.created_at),
        updated_at: ts(c.updated_at),
    })
}

/// `e`, or [`schedules_need_revision`] when it says the schedule table does not exist.
fn refused(e: Error) -> Error {
    let missing = e
        .source()
        .and_then(|s| s.downcast_ref::<rusqlite::Error>())
        .is_some_and(|r| match r {
            rusqlite::Error::SqliteFailure(_, Some(msg))
            | rusqlite::Error::SqlInputError { msg, .. } => {
                msg.contains("no such table: spool_schedule")
            }
            _ => false,
        });
    if missing {
        schedules_need_revision()
    } else {
        e
    }
}

/// Stores `schedule` (checked by the caller) at `now`.
pub(super) fn put_schedule_tx(
    db: &Db<'_>,
    schedule: &Schedule,
    now: Timestamp,
) -> Result<ScheduleInfo> {
    let s = schedule;
    let stored = db
        .write_tx(|db| {
            let rows = db.rows(
                PUT,
                params![
                    s.name.as_str(),
                    s.cron,
                    s.time_zone,
                    s.queue.as_str(),
                    s.payload,
                    s.options.priority,
                    s.options.max_attempts,
                    s.options.supersede_group.as_ref().map(|g| g.as_bytes()),
                    s.options.partition_key.as_ref().map(|p| p.as_str()),
                    s.catch_up.as_str(),
                    s.catch_up.cap(),
                    micros(now),
                ],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                },
            )?;
            let row = rows
                .first()
                .copied()
                .ok_or_else(|| corrupt("a schedule upsert returned no row"))?;
            Ok((row, End::Commit))
        })
        .map_err(refused)?;
    let (high_water, revision, created_at, updated_at) = stored;
    Ok(ScheduleInfo {
        schedule: schedule.clone(),
        high_water: ts(high_water),
        revision: u64::try_from(revision)
            .map_err(|_| corrupt("a stored schedule's revision is invalid"))?,
        created_at: ts(created_at),
        updated_at: ts(updated_at),
    })
}

fn read_one(db: &Db<'_>, name: &ScheduleName) -> Result<Option<ScheduleInfo>> {
    let rows = db.rows(&select_one(), params![name.as_str()], columns)?;
    rows.into_iter().next().map(info).transpose()
}

/// The schedule of `name`, on a read connection.
pub(super) fn schedule_q(db: &Db<'_>, name: &ScheduleName) -> Result<Option<ScheduleInfo>> {
    read_one(db, name).map_err(refused)
}

/// Every schedule, by name (byte order, as the model's).
pub(super) fn schedules_q(db: &Db<'_>) -> Result<Vec<ScheduleInfo>> {
    let rows = db.rows(&select_all(), [], columns).map_err(refused)?;
    let mut all = rows.into_iter().map(info).collect::<Result<Vec<_>>>()?;
    all.sort_by(|a, b| a.schedule.name.cmp(&b.schedule.name));
    Ok(all)
}

/// Removes the schedule of `name`; whether one was stored.
pub(super) fn remove_schedule_tx(db: &Db<'_>, name: &ScheduleName) -> Result<bool> {
    db.write_tx(|db| {
        let n = db.exec(REMOVE, params![name.as_str()])?;
        Ok((n > 0, if n > 0 { End::Commit } else { End::Rollback }))
    })
    .map_err(refused)
}

/// Enqueues the ticks (checked by the caller) of `name` at `revision` after its mark and moves
/// the mark, in one transaction; returns the result and the queue to wake (when a run was
/// created).
pub(super) fn fire_schedule_tx(
    db: &Db<'_>,
    name: &ScheduleName,
    revision: u64,
    ticks: &[Timestamp],
    now: Timestamp,
) -> Result<(ScheduleFired, Option<QueueName>)> {
    db.write_tx(|db| {
        let Some(stored) = read_one(db, name)? else {
            return Ok(((ScheduleFired::Stale, None), End::Rollback));
        };
        if stored.revision != revision {
            return Ok(((ScheduleFired::Stale, None), End::Rollback));
        }
        let s = &stored.schedule;
        let max_attempts = s.options.effective_max_attempts()?;
        let mut runs = Vec::new();
        for &tick in ticks.iter().filter(|t| **t > stored.high_water) {
            let key = schedule_tick_key(name, tick)?;
            let done = enqueue_row(
                db,
                &s.queue,
                &key,
                &s.payload,
                &s.options,
                max_attempts,
                now,
            )?;
            runs.push((tick, done));
        }
        let Some(&(high_water, _)) = runs.last() else {
            let unchanged = ScheduleFired::Fired {
                runs,
                high_water: stored.high_water,
            };
            return Ok(((unchanged, None), End::Rollback));
        };
        db.exec(MOVE_MARK, params![name.as_str(), micros(high_water)])?;
        let woken = runs.iter().any(|(_, e)| e.created).then(|| s.queue.clone());
        Ok((
            (ScheduleFired::Fired { runs, high_water }, woken),
            End::Commit,
        ))
    })
    .map_err(refused)
}
