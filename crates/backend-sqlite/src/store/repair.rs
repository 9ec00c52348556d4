//! The head cache's repair and the diagnostics' read of it: the cached heads, and the rewrite
//! of the cache to what the anti-join computes.

use std::collections::HashSet;

use cairn_core::{Error, Head, RepairOutcome, Result, SpaceId};
use rusqlite::params;

use super::read::{anti_join, probe};
use super::row::heads_from;
use crate::db::{Db, End};
use crate::sql;

/// The head cache's rows as they are, current or not.
pub(crate) fn cached_heads(db: &Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    heads_from(db.rows(sql::CACHED_HEADS, params![space.as_bytes()], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?)
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
    let (was, is): (HashSet<&Head>, HashSet<&Head>) =
        (before.iter().collect(), after.iter().collect());
    for h in before.iter().filter(|h| !is.contains(h)) {
        db.exec(sql::DELETE_HEAD, params![s, h.id.as_bytes()])?;
    }
    for h in after.iter().filter(|h| !was.contains(h)) {
        db.exec(
            sql::INSERT_HEAD,
            params![s, h.id.as_bytes(), h.seq.to_i64()?],
        )?;
    }
    Ok(())
}

/// Rewrites the space's head cache to the anti-join's heads when they differ; nothing is
/// written when they agree.
pub(crate) fn repair_tx(db: &Db<'_>, space: &SpaceId) -> Result<RepairOutcome> {
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
