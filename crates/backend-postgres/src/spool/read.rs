//! Reads: run, runs, stats, next_due. One statement each.

use cairn_core::spool::{check_limit, QueueName, RunFilter, RunId, RunInfo, SpoolStats, Timestamp};
use cairn_core::Result;

use super::handle::PgSpool;
use super::row::{corrupt, count, get, opt_ts, run_info, state};
use super::sql;
use super::sql_flow;
use super::sql_record;
use crate::error::map;

pub(super) async fn run_tx(s: &PgSpool, run: RunId) -> Result<Option<RunInfo>> {
    let statement = if s.flow_layout().await? {
        sql_flow::RUN_INFO_FLOW
    } else {
        sql::RUN_INFO
    };
    let row = sqlx::query(statement)
        .bind(run.as_bytes().as_slice())
        .fetch_optional(s.pool())
        .await
        .map_err(map)?;
    row.as_ref().map(run_info).transpose()
}

pub(super) async fn payload_tx(s: &PgSpool, run: RunId) -> Result<Option<Vec<u8>>> {
    sqlx::query_scalar(sql::RUN_PAYLOAD)
        .bind(run.as_bytes().as_slice())
        .fetch_optional(s.pool())
        .await
        .map_err(map)
}

pub(super) async fn runs_tx(s: &PgSpool, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>> {
    check_limit(limit)?;
    let statement = if s.flow_layout().await? {
        sql_flow::RUN_LIST_FLOW
    } else {
        sql::RUN_LIST
    };
    let rows = sqlx::query(statement)
        .bind(filter.after.map(|a| a.as_bytes().to_vec()))
        .bind(filter.queue.as_ref().map(|q| q.as_str().to_owned()))
        .bind(filter.state.map(|s| s.as_str()))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(s.pool())
        .await
        .map_err(map)?;
    rows.iter().map(run_info).collect()
}

pub(super) async fn stats_tx(s: &PgSpool) -> Result<SpoolStats> {
    let now = cairn_core::spool::Spool::clock(s).now();
    let rows = sqlx::query(sql::STATS)
        .bind(now.as_unix_micros())
        .fetch_all(s.pool())
        .await
        .map_err(map)?;
    let mut stats = SpoolStats::default();
    for row in &rows {
        let queue: Option<String> = get(row, 0)?;
        let name: Option<String> = get(row, 1)?;
        if let (Some(queue), Some(name)) = (queue, name) {
            let queue = QueueName::new(queue).map_err(|_| corrupt("an invalid queue name"))?;
            let n: Option<i64> = get(row, 2)?;
            let scheduled: Option<i64> = get(row, 7)?;
            stats.add_scheduled(queue.clone(), count(scheduled.unwrap_or(0))?);
            stats.add_runs(
                queue,
                state(&name)?,
                count(n.unwrap_or(0))?,
                opt_ts(get(row, 3)?),
            );
        }
        stats.events = count(get(row, 4)?)?;
        stats.event_bytes = count(get(row, 5)?)?;
        stats.oldest_event = opt_ts(get(row, 6)?);
    }
    Ok(stats)
}

pub(super) async fn next_due_q(s: &PgSpool, queue: &QueueName) -> Result<Option<Timestamp>> {
    let statement = if s.ready_layout().await? {
        sql::NEXT_DUE
    } else {
        sql_record::NEXT_DUE_RECORD
    };
    let due: Option<i64> = sqlx::query_scalar(statement)
        .bind(queue.as_str())
        .fetch_one(s.pool())
        .await
        .map_err(map)?;
    Ok(opt_ts(due))
}
