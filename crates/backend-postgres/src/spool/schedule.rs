//! Stored schedules (`spool_schedule`, revision `0009_spool_flow`): put and remove (one
//! statement each, autocommit), reads, and the fire — one transaction that locks the schedule's
//! row (`FOR UPDATE`, so concurrent fires of one schedule run one after the other), enqueues
//! each tick after the mark through [`enqueue::enqueue_on`] (the enqueue's own unbatched
//! statement: the `spool_ready` row of I-ready and the `NOTIFY`, delivered at commit) and moves
//! the mark.
//!
//! A store whose upgrade stopped before 0009 has no `spool_schedule`: every method then
//! refuses with [`schedules_need_revision`] (SQLSTATE 42P01 on that table), not a raw error.

use cairn_core::spool::{
    schedule_tick_key, schedules_need_revision, CatchUp, EnqueueOptions, PartitionKey, QueueName,
    Schedule, ScheduleFired, ScheduleInfo, ScheduleName, SupersedeGroup, Timestamp,
};
use cairn_core::{Error, Result};
use sqlx::postgres::PgRow;
use sqlx::PgConnection;

use super::enqueue;
use super::handle::PgSpool;
use super::row::{corrupt, get, micros, ts};
use crate::error::{map, rolled_back};

/// Creates or replaces a schedule: a new one gets revision 1 and `$12` (now) as its mark and
/// times; an edit replaces every field, bumps the revision and keeps the creation time and the
/// mark — but an edit of the expression or its zone moves the mark up to now, so no tick of the
/// new expression from before the edit is enqueued (catch-up is for ticks missed while no
/// scheduler ran, not for an expression nobody ran). Returns `(high_water, revision, created_at, updated_at)`.
const PUT: &str = "\
INSERT INTO spool_schedule (name, cron, time_zone, queue, payload, priority, max_attempts, \
    supersede_group, partition_key, catch_up, catch_up_cap, high_water, revision, created_at, \
    updated_at) \
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 1, $12, $12) \
ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, time_zone = excluded.time_zone, \
    queue = excluded.queue, payload = excluded.payload, priority = excluded.priority, \
    max_attempts = excluded.max_attempts, supersede_group = excluded.supersede_group, \
    partition_key = excluded.partition_key, catch_up = excluded.catch_up, \
    catch_up_cap = excluded.catch_up_cap, revision = spool_schedule.revision + 1, \
    high_water = CASE WHEN spool_schedule.cron <> excluded.cron \
        OR spool_schedule.time_zone <> excluded.time_zone \
        THEN GREATEST(spool_schedule.high_water, excluded.high_water) \
        ELSE spool_schedule.high_water END, \
    updated_at = excluded.updated_at \
RETURNING high_water, revision, created_at, updated_at";

const SELECT_ONE: &str = "\
SELECT name, cron, time_zone, queue, payload, priority, max_attempts, supersede_group, \
    partition_key, catch_up, catch_up_cap, high_water, revision, created_at, updated_at \
FROM spool_schedule WHERE name = $1";

const SELECT_ALL: &str = "\
SELECT name, cron, time_zone, queue, payload, priority, max_attempts, supersede_group, \
    partition_key, catch_up, catch_up_cap, high_water, revision, created_at, updated_at \
FROM spool_schedule";

/// [`SELECT_ONE`] with the row locked until the fire's transaction ends.
const LOCK_ONE: &str = "\
SELECT name, cron, time_zone, queue, payload, priority, max_attempts, supersede_group, \
    partition_key, catch_up, catch_up_cap, high_water, revision, created_at, updated_at \
FROM spool_schedule WHERE name = $1 FOR UPDATE";

const REMOVE: &str = "DELETE FROM spool_schedule WHERE name = $1";

const MOVE_MARK: &str = "UPDATE spool_schedule SET high_water = $2 WHERE name = $1";

/// A driver error of a statement on `spool_schedule`: [`schedules_need_revision`] when the
/// table does not exist, else the usual mapping.
fn refused(e: sqlx::Error) -> Error {
    let missing = matches!(&e, sqlx::Error::Database(db) if db.code().as_deref() == Some("42P01"));
    if missing {
        schedules_need_revision()
    } else {
        map(e)
    }
}

fn info(row: &PgRow) -> Result<ScheduleInfo> {
    let bad = |what: &str| corrupt(&format!("a schedule's invalid {what}"));
    let max_attempts: Option<i32> = get(row, 6)?;
    let group: Option<Vec<u8>> = get(row, 7)?;
    let partition: Option<String> = get(row, 8)?;
    let catch_up: String = get(row, 9)?;
    let cap: Option<i32> = get(row, 10)?;
    let revision: i64 = get(row, 12)?;
    let options = EnqueueOptions {
        supersede_group: group
            .map(SupersedeGroup::from_bytes)
            .transpose()
            .map_err(|_| bad("supersede group"))?,
        not_before: None,
        max_attempts: max_attempts
            .map(u32::try_from)
            .transpose()
            .map_err(|_| bad("max attempts"))?,
        priority: get(row, 5)?,
        partition_key: partition
            .map(PartitionKey::from_stored)
            .transpose()
            .map_err(|_| bad("partition key"))?,
        // A schedule's runs carry no trace (`check_schedule` refuses one).
        traceparent: None,
    };
    Ok(ScheduleInfo {
        schedule: Schedule {
            name: ScheduleName::from_stored(get::<String>(row, 0)?).map_err(|_| bad("name"))?,
            cron: get(row, 1)?,
            time_zone: get(row, 2)?,
            queue: QueueName::new(get::<String>(row, 3)?).map_err(|_| bad("queue"))?,
            payload: get(row, 4)?,
            options,
            catch_up: CatchUp::from_stored(&catch_up, cap.map(i64::from))
                .ok_or_else(|| bad("catch-up policy"))?,
        },
        high_water: ts(get(row, 11)?),
        revision: u64::try_from(revision).map_err(|_| bad("revision"))?,
        created_at: ts(get(row, 13)?),
        updated_at: ts(get(row, 14)?),
    })
}

fn i32_of(n: u32, what: &'static str) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::invalid(what, "is too large"))
}

/// Stores `schedule` (checked by the caller) at `now`.
pub(super) async fn put_schedule_tx(
    s: &PgSpool,
    schedule: &Schedule,
    now: Timestamp,
) -> Result<ScheduleInfo> {
    let o = &schedule.options;
    let max_attempts = o
        .max_attempts
        .map(|n| i32_of(n, "max attempts"))
        .transpose()?;
    let cap = schedule
        .catch_up
        .cap()
        .map(|n| i32_of(n, "catch-up cap"))
        .transpose()?;
    let row = autocommit!(s, |on| {
        sqlx::query(PUT)
            .bind(schedule.name.as_str())
            .bind(&schedule.cron)
            .bind(&schedule.time_zone)
            .bind(schedule.queue.as_str())
            .bind(&schedule.payload)
            .bind(o.priority)
            .bind(max_attempts)
            .bind(o.supersede_group.as_ref().map(|g| g.as_bytes()))
            .bind(o.partition_key.as_ref().map(|p| p.as_str()))
            .bind(schedule.catch_up.as_str())
            .bind(cap)
            .bind(micros(now))
            .fetch_one(on)
            .await
            .map_err(refused)
    })?;
    let revision: i64 = get(&row, 1)?;
    Ok(ScheduleInfo {
        schedule: schedule.clone(),
        high_water: ts(get(&row, 0)?),
        revision: u64::try_from(revision).map_err(|_| corrupt("a schedule's invalid revision"))?,
        created_at: ts(get(&row, 2)?),
        updated_at: ts(get(&row, 3)?),
    })
}

/// The schedule of `name`.
pub(super) async fn schedule_q(s: &PgSpool, name: &ScheduleName) -> Result<Option<ScheduleInfo>> {
    let row = sqlx::query(SELECT_ONE)
        .bind(name.as_str())
        .fetch_optional(s.pool())
        .await
        .map_err(refused)?;
    row.as_ref().map(info).transpose()
}

/// Every schedule, by name (byte order, as the model's; no collation decides it).
pub(super) async fn schedules_q(s: &PgSpool) -> Result<Vec<ScheduleInfo>> {
    let rows = sqlx::query(SELECT_ALL)
        .fetch_all(s.pool())
        .await
        .map_err(refused)?;
    let mut all = rows.iter().map(info).collect::<Result<Vec<_>>>()?;
    all.sort_by(|a, b| a.schedule.name.cmp(&b.schedule.name));
    Ok(all)
}

/// Removes the schedule of `name`; whether one was stored.
pub(super) async fn remove_schedule_tx(s: &PgSpool, name: &ScheduleName) -> Result<bool> {
    let done = autocommit!(s, |on| {
        sqlx::query(REMOVE)
            .bind(name.as_str())
            .execute(on)
            .await
            .map_err(refused)
    })?;
    Ok(done.rows_affected() > 0)
}

/// Enqueues the ticks (checked by the caller) of `name` at `revision` after its mark and moves
/// the mark, in one transaction.
pub(super) async fn fire_schedule_tx(
    s: &PgSpool,
    name: &ScheduleName,
    revision: u64,
    ticks: &[Timestamp],
    now: Timestamp,
) -> Result<ScheduleFired> {
    let mut tx = s.pool().begin().await.map_err(map)?;
    match fire_on(s, &mut tx, name, revision, ticks, now).await {
        Ok((fired, true)) => {
            tx.commit().await.map_err(map)?;
            Ok(fired)
        }
        Ok((fired, false)) => {
            tx.rollback().await.map_err(map)?;
            Ok(fired)
        }
        Err(e) => Err(rolled_back(tx, e).await),
    }
}

/// The fire's statements on `conn`, inside its transaction; returns the result and whether
/// anything was written (to commit).
async fn fire_on(
    s: &PgSpool,
    conn: &mut PgConnection,
    name: &ScheduleName,
    revision: u64,
    ticks: &[Timestamp],
    now: Timestamp,
) -> Result<(ScheduleFired, bool)> {
    let row = sqlx::query(LOCK_ONE)
        .bind(name.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(refused)?;
    let Some(stored) = row.as_ref().map(info).transpose()? else {
        return Ok((ScheduleFired::Stale, false));
    };
    if stored.revision != revision {
        return Ok((ScheduleFired::Stale, false));
    }
    let sch = &stored.schedule;
    let max_attempts = sch.options.effective_max_attempts()?;
    let mut runs = Vec::new();
    for &tick in ticks.iter().filter(|t| **t > stored.high_water) {
        let key = schedule_tick_key(name, tick)?;
        let done = enqueue::enqueue_on(
            s,
            conn,
            &sch.queue,
            &key,
            sch.payload.clone(),
            sch.options.clone(),
            max_attempts,
            now,
        )
        .await?;
        runs.push((tick, done));
    }
    let Some(&(high_water, _)) = runs.last() else {
        let unchanged = ScheduleFired::Fired {
            runs,
            high_water: stored.high_water,
        };
        return Ok((unchanged, false));
    };
    sqlx::query(MOVE_MARK)
        .bind(name.as_str())
        .bind(micros(high_water))
        .execute(&mut *conn)
        .await
        .map_err(refused)?;
    Ok((ScheduleFired::Fired { runs, high_water }, true))
}
