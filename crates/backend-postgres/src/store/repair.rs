//! The head cache's repair and the diagnostics' reads of it: the cached heads, the largest seq,
//! and the rewrite of the cache to what the anti-join computes.

use cairn_core::{Error, Head, RepairOutcome, Result, Seq, SpaceId};

use super::lock::lock_spaces;
use super::read::anti_join;
use super::row::{head_columns, heads_from};
use crate::config::SchemaName;
use crate::db::Db;
use crate::error::map;
use crate::sql;

/// The head cache's rows, sorted by id bytes.
pub(crate) async fn cached_heads(db: &mut Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    let rows = sqlx::query(sql::CACHED_HEADS)
        .bind(space.as_bytes())
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    heads_from(&rows)
}

/// The space's largest seq.
pub(crate) async fn max_seq(db: &mut Db<'_>, space: &SpaceId) -> Result<Option<Seq>> {
    let max: Option<i64> = sqlx::query_scalar(sql::MAX_SEQ)
        .bind(space.as_bytes())
        .fetch_one(db.conn())
        .await
        .map_err(map)?;
    max.map(Seq::from_i64).transpose()
}

/// Sets the cache to exactly `after` (sorted), in one statement that deletes the rows not in
/// it and upserts the rest (a repair).
pub(crate) async fn cache_exact(db: &mut Db<'_>, space: &SpaceId, after: &[Head]) -> Result<()> {
    let (ids, seqs) = head_columns(after)?;
    sqlx::query(sql::REPLACE_HEADS)
        .bind(space.as_bytes())
        .bind(ids)
        .bind(seqs)
        .execute(db.conn())
        .await
        .map_err(map)?;
    Ok(())
}

/// Rewrites the space's head cache to the anti-join's heads in the open transaction `db`,
/// taking the space's lock first.
pub(crate) async fn repair_tx(
    db: &mut Db<'_>,
    schema: &SchemaName,
    space: &SpaceId,
) -> Result<RepairOutcome> {
    lock_spaces(db, schema, &[space]).await?;
    let before = cached_heads(db, space).await?;
    let after = anti_join(db, space).await?;
    if after.is_empty() {
        return Err(Error::space_not_found(space));
    }
    if before == after {
        return Ok(RepairOutcome::Unchanged);
    }
    cache_exact(db, space, &after).await?;
    Ok(RepairOutcome::Rewritten { before, after })
}
