//! Retention batches: each is one transaction of one read (the window [`RetentionPass`] plans
//! from) and one `DELETE`.

use cairn_core::spool::{EventMeta, RetentionPass, RunMeta};
use cairn_core::Result;

use super::handle::PgSpool;
use super::row::{count, get, micros, run_id, ts};
use super::sql;
use crate::error::map;

pub(super) async fn retention_events_tx(s: &PgSpool, pass: &mut RetentionPass) -> Result<()> {
    let mut tx = s.pool().begin().await.map_err(map)?;
    let rows = sqlx::query(sql::RETENTION_EVENT_WINDOW)
        .bind(i64::try_from(pass.batch_size()).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await
        .map_err(map)?;
    let mut total = 0;
    let mut window = Vec::with_capacity(rows.len());
    for row in &rows {
        total = count(get(row, 0)?)?;
        let Some(run) = get::<Option<Vec<u8>>>(row, 1)? else {
            continue;
        };
        window.push(EventMeta {
            run: run_id(&run)?,
            seq: count(get(row, 2)?)?,
            created_at: ts(get(row, 3)?),
            bytes: count(get(row, 4)?)?,
        });
    }
    let batch = pass.plan_events(total, &window);
    if !batch.events.is_empty() {
        let (runs, seqs): (Vec<Vec<u8>>, Vec<i64>) = batch
            .events
            .iter()
            .map(|(run, seq)| {
                (
                    run.as_bytes().to_vec(),
                    i64::try_from(*seq).unwrap_or(i64::MAX),
                )
            })
            .unzip();
        sqlx::query(sql::RETENTION_DELETE_EVENTS)
            .bind(runs)
            .bind(seqs)
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    tx.commit().await.map_err(map)?;
    pass.events_deleted(&batch);
    Ok(())
}

pub(super) async fn retention_runs_tx(s: &PgSpool, pass: &mut RetentionPass) -> Result<()> {
    let mut tx = s.pool().begin().await.map_err(map)?;
    let rows = sqlx::query(sql::RETENTION_RUN_WINDOW)
        .bind(micros(pass.cutoff()))
        .bind(i64::try_from(pass.batch_size()).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await
        .map_err(map)?;
    let window = rows
        .iter()
        .map(|row| {
            Ok(RunMeta {
                run: run_id(&get::<Vec<u8>>(row, 0)?)?,
                finished_at: ts(get(row, 1)?),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let ids = pass.plan_runs(&window);
    let mut removed = 0;
    if !ids.is_empty() {
        let bytes: Vec<Vec<u8>> = ids.iter().map(|id| id.as_bytes().to_vec()).collect();
        removed = sqlx::query(sql::RETENTION_DELETE_RUNS)
            .bind(bytes)
            .execute(&mut *tx)
            .await
            .map_err(map)?
            .rows_affected();
    }
    tx.commit().await.map_err(map)?;
    pass.runs_deleted(usize::try_from(removed).unwrap_or(usize::MAX));
    Ok(())
}
