//! The head-lookup benchmark API: bulk seeding and timed lookups (used by `cargo xtask bench`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_core::{epoch_id, EpochId, Error, Event, Result, Seq, SpaceId};
use sqlx::Connection;

use crate::db::Db;
use crate::error::map;
use crate::sql;
use crate::store::append::{probe, working_heads};
use crate::store::lock::lock_spaces;
use crate::store::PgStore;

/// Which head lookup [`PgStore::bench_time_lookup`] measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HeadLookup {
    /// The anti-join with the `(space, parent, child)` index dropped.
    AntiJoinPlain,
    /// The anti-join with that index (the store's fallback path).
    AntiJoinIndexed,
    /// The store's cache read (the append's read statement: seq probe plus cache rows).
    Cache,
}

/// How [`PgStore::bench_time_lookup_on`] times a lookup.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LookupClock {
    /// Wall time of the round trip, measured by the client.
    RoundTrip,
    /// Planning plus execution time reported by `EXPLAIN (ANALYZE)` on the server.
    Server,
}

/// Reads `Planning Time` and `Execution Time` from `EXPLAIN (ANALYZE)` text output.
fn server_time(rows: &[sqlx::postgres::PgRow]) -> Result<Duration> {
    use sqlx::Row;
    let mut total = 0.0_f64;
    let mut found = 0;
    for row in rows {
        let line: String = row.try_get(0).map_err(map)?;
        for label in ["Planning Time:", "Execution Time:"] {
            if let Some(rest) = line.trim().strip_prefix(label) {
                let ms: f64 = rest
                    .trim()
                    .trim_end_matches("ms")
                    .trim()
                    .parse()
                    .map_err(|_| Error::corrupt(format!("unreadable EXPLAIN line {line:?}")))?;
                total += ms;
                found += 1;
            }
        }
    }
    if found != 2 {
        return Err(Error::corrupt("EXPLAIN (ANALYZE) printed no timing"));
    }
    Ok(Duration::from_secs_f64(total / 1000.0))
}

/// Epochs per bulk-insert statement of [`PgStore::bench_seed_chain`].
const SEED_BATCH: u64 = 5_000;

impl PgStore {
    /// Test support: `VACUUM (ANALYZE)` of the epoch-log tables after bulk seeding, as
    /// autovacuum would do on a live store: fresh statistics for the planner and a visibility
    /// map, so index-only scans need no heap fetches.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn bench_vacuum_analyze(&self) -> Result<()> {
        for table in ["epoch", "epoch_parent", "epoch_event", "epoch_head"] {
            // The table names are the constants above, never input.
            sqlx::query(&format!("VACUUM (ANALYZE) {table}"))
                .persistent(false)
                .execute(self.pool())
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    /// Bulk-seeds a linear chain of `epochs` one-event epochs on `space` (continuing from its
    /// current heads), in transactions of a few thousand epochs written by one statement each,
    /// leaving the head cache current (one row). Calls `progress(done)` after each batch.
    ///
    /// # Errors
    /// Backend errors; batches already committed stay.
    pub async fn bench_seed_chain(
        &self,
        space: &SpaceId,
        epochs: u64,
        progress: Arc<dyn Fn(u64) + Send + Sync>,
    ) -> Result<()> {
        let mut done = 0;
        while done < epochs {
            let n = SEED_BATCH.min(epochs - done);
            let mut tx = self.begin().await?;
            let mut db = Db::new(&mut tx, self.statements());
            lock_spaces(&mut db, self.schema(), &[space]).await?;
            let state = probe(&mut db, space).await?;
            let mut parents: Vec<EpochId> = working_heads(&mut db, space, &state)
                .await?
                .into_iter()
                .map(|h| h.id)
                .collect();
            let first = state.next().0;
            let cap = usize::try_from(n).unwrap_or(0);
            let (mut ids, mut seqs, mut event_ids, mut payloads) = (
                Vec::with_capacity(cap),
                Vec::with_capacity(cap),
                Vec::with_capacity(cap),
                Vec::with_capacity(cap),
            );
            let (mut edge_parents, mut edge_children) = (Vec::new(), Vec::new());
            let mut last = None;
            for seq in first..first + n {
                let event = Event::new("bench.event", format!("bench {seq}").into_bytes());
                let eid = event.id();
                let id = epoch_id(space, &parents, &[eid]);
                for p in &parents {
                    edge_parents.push(p.as_bytes().to_vec());
                    edge_children.push(id.as_bytes().to_vec());
                }
                let seq = Seq(seq).to_i64()?;
                ids.push(id.as_bytes().to_vec());
                seqs.push(seq);
                event_ids.push(eid.as_bytes().to_vec());
                payloads.push(event.payload);
                parents = vec![id];
                last = Some((id, seq));
            }
            let Some((last_id, last_seq)) = last else {
                break;
            };
            sqlx::query(sql::BENCH_SEED_BATCH)
                .bind(space.as_bytes())
                .bind(ids)
                .bind(seqs)
                .bind(edge_parents)
                .bind(edge_children)
                .bind("bench.event")
                .bind(event_ids)
                .bind(payloads)
                .bind(last_id.as_bytes().as_slice())
                .bind(last_seq)
                .execute(db.conn())
                .await
                .map_err(map)?;
            self.commit(tx).await?;
            done += n;
            progress(done);
        }
        Ok(())
    }

    /// Runs the named head lookup `runs` times on one connection (exact SQL the store uses,
    /// parallel workers off) and returns each run's wall time. `AntiJoinPlain` drops the
    /// `(space, parent, child)` index inside a transaction that is rolled back afterwards, so
    /// the index is restored without a rebuild; while it runs, writers of this store wait.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn bench_time_lookup(
        &self,
        space: &SpaceId,
        lookup: HeadLookup,
        runs: usize,
    ) -> Result<Vec<Duration>> {
        self.bench_time_lookup_on(space, lookup, runs, LookupClock::RoundTrip)
            .await
    }

    /// As [`PgStore::bench_time_lookup`], timed by `clock`: [`LookupClock::Server`] runs each
    /// lookup under `EXPLAIN (ANALYZE, TIMING OFF)` (no per-node clock overhead) and returns the
    /// server's planning plus execution time, which is how the published comparison was
    /// measured.
    ///
    /// # Errors
    /// As [`PgStore::bench_time_lookup`].
    pub async fn bench_time_lookup_on(
        &self,
        space: &SpaceId,
        lookup: HeadLookup,
        runs: usize,
        clock: LookupClock,
    ) -> Result<Vec<Duration>> {
        let mut conn = self.pool().acquire().await.map_err(map)?;
        self.tick();
        sqlx::query(sql::NO_PARALLEL_WORKERS)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        let mut times = Vec::with_capacity(runs);
        let outcome: Result<()> = async {
            let query = match lookup {
                HeadLookup::AntiJoinPlain | HeadLookup::AntiJoinIndexed => sql::ANTI_JOIN_HEADS,
                HeadLookup::Cache => sql::PROBE,
            };
            let mut tx = conn.begin().await.map_err(map)?;
            self.tick();
            if lookup == HeadLookup::AntiJoinPlain {
                self.tick();
                sqlx::query(sql::DROP_PARENT_INDEX)
                    .execute(&mut *tx)
                    .await
                    .map_err(map)?;
            }
            // EXPLAIN wraps one of the two constant queries above; nothing here comes from input.
            let explained = format!("EXPLAIN (ANALYZE, TIMING OFF) {query}");
            for _ in 0..runs {
                self.tick();
                let start = Instant::now();
                let sent = match clock {
                    LookupClock::RoundTrip => query,
                    LookupClock::Server => explained.as_str(),
                };
                let rows = sqlx::query(sent)
                    .bind(space.as_bytes())
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(map)?;
                let elapsed = start.elapsed();
                times.push(match clock {
                    LookupClock::RoundTrip => elapsed,
                    LookupClock::Server => server_time(&rows)?,
                });
                if rows.is_empty() {
                    return Err(Error::NotFound {
                        what: format!("space {space}"),
                    });
                }
            }
            self.tick();
            tx.rollback().await.map_err(map)
        }
        .await;
        self.tick();
        sqlx::query(sql::RESET_PARALLEL_WORKERS)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        outcome.map(|()| times)
    }
}
