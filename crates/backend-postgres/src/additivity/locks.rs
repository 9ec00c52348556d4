//! The executed lock check on PostgreSQL
//! ([`AdditivityEngine::check_locks`](cairn_migrate::additivity::AdditivityEngine::check_locks)).
//!
//! The throwaway store is built and filled as for the additivity check (every table holds a
//! row). Then, with a *probe* session beside the revision's session:
//!
//! - **A transactional revision** runs as the runner runs it, in one transaction, statement
//!   by statement. After each statement, for every table that existed before: the locks the
//!   revision's session holds on it (`pg_locks`), its file node and its indexes' (a change is a
//!   rewrite, a new one an index build), and the sequential scans counted on it in the
//!   transaction (`pg_stat_get_xact_numscans`, exact inside one transaction) are compared with
//!   before the statement. Whenever the lock on a table grew, the probe tries a read
//!   (`SELECT 1 FROM t LIMIT 1`) and a write (`DELETE FROM t WHERE false`, rolled back) with a
//!   100 ms `lock_timeout`; "blocked" is the probe giving up, with the time it waited. Locks
//!   only grow inside a transaction and are held to its end, so what the probe sees after a
//!   statement is what live traffic sees from that statement until the revision commits.
//! - **A no-transaction revision** (`-- cairn:no-transaction`) runs its real statements,
//!   outside a transaction, on the throwaway store, each measured *while it runs*: a third
//!   session first opens a transaction holding a writer's lock on every existing table, so a
//!   concurrent index build (or drop, or reindex) stops at its first wait with its own lock
//!   already taken; the probe then reads that session's locks (held and awaited) and tries
//!   every table, and the holder lets go. A statement that never waits (`ALTER TYPE … ADD
//!   VALUE`, a plain `VACUUM`) is over before it can be measured; it takes no lock that blocks
//!   reads or writes. `CREATE INDEX CONCURRENTLY` is measured holding `SHARE UPDATE
//!   EXCLUSIVE`, with reads and writes going on.
//!
//! Findings are judged from these measurements by
//! [`cairn_migrate::additivity::lock_report`]. What it cannot measure: how long the work
//! takes on production data (the throwaway tables hold a row each; the measured time is
//! reported but says nothing about scale), and locks a statement takes and releases within
//! itself.

use std::time::{Duration, Instant};

use cairn_migrate::additivity::{CheckTarget, LockMeasurement, StatementLocks, TableEffect};
use cairn_migrate::{MigrateError, Revision};
use sqlx::{Connection, PgConnection};

use super::checker::to_migrate;
use super::probe::{backend_pid, session_locks, states, tables, Probe, Table};
use super::{lock_sql, sql, PgAdditivity};
use crate::config::SchemaName;

/// How long a no-transaction statement may take to reach its first wait before it is left to
/// finish unmeasured.
const REACH_WAIT: Duration = Duration::from_secs(10);

/// The server's one-line message for a failed statement.
fn message(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => db.message().replace('\n', " "),
        other => other.to_string().replace('\n', " "),
    }
}

impl PgAdditivity {
    /// Builds the store, opens the sessions and measures the revision (see the module docs).
    pub(super) async fn check_locks_in(
        &self,
        schema: &SchemaName,
        target: &CheckTarget,
        revision: &Revision,
    ) -> Result<LockMeasurement, MigrateError> {
        self.build(schema, target).await?;
        let mut conn = self.connect(schema).await?;
        let probe = match self.connect(schema).await {
            Ok(p) => Probe::new(p).await,
            Err(e) => Err(e.into()),
        };
        let mut probe = match probe {
            Ok(p) => p,
            Err(e) => {
                let _ = conn.close().await;
                return Err(e);
            }
        };
        let outcome = if target.no_transaction() {
            match self.connect(schema).await {
                Ok(holder) => match Probe::new(holder).await {
                    Ok(mut holder) => {
                        let measured =
                            outside(&mut conn, &mut probe, &mut holder, schema, revision).await;
                        let _ = holder.conn.close().await;
                        measured
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e.into()),
            }
        } else {
            let measured = inside(&mut conn, &mut probe, schema, revision).await;
            // Nothing of the check is ever kept.
            let _ = sqlx::query(sql::ROLLBACK)
                .persistent(false)
                .execute(&mut conn)
                .await;
            measured
        };
        let _ = probe.conn.close().await;
        let _ = conn.close().await;
        outcome
    }
}

/// What the probe last saw on a table, and under which lock.
#[derive(Clone, Copy, Default)]
struct Seen {
    mode: Option<cairn_migrate::additivity::LockMode>,
    reads: Option<Duration>,
    writes: Option<Duration>,
}

/// A transactional revision, in one transaction on `conn` (rolled back by the caller).
async fn inside(
    conn: &mut PgConnection,
    probe: &mut Probe,
    schema: &SchemaName,
    revision: &Revision,
) -> Result<LockMeasurement, MigrateError> {
    let tables = tables(&mut probe.conn, schema).await?;
    exec(conn, sql::BEGIN).await?;
    sqlx::query(lock_sql::REVISION_SESSION)
        .bind(true)
        .execute(&mut *conn)
        .await
        .map_err(to_migrate)?;
    let pid = backend_pid(conn).await?;
    let mut before = states(conn, &tables).await?;
    let mut seen: Vec<Seen> = vec![Seen::default(); tables.len()];
    let mut out = LockMeasurement::default();
    for (i, statement) in revision.up_postgres.iter().enumerate() {
        let n = i + 1;
        let started = Instant::now();
        let ran = sqlx::query(statement)
            .persistent(false)
            .execute(&mut *conn)
            .await;
        let took = started.elapsed();
        if let Err(e) = ran {
            out.failed = Some((n, message(&e)));
            break;
        }
        let after = states(conn, &tables).await?;
        let locks = session_locks(conn, pid, &tables).await?;
        let mut effects = Vec::new();
        for (t, seen) in tables.iter().zip(seen.iter_mut()) {
            let (Some(was), Some(now)) = (before.get(&t.oid), after.get(&t.oid)) else {
                continue;
            };
            let mode = locks.get(&t.oid).copied();
            let rewritten = now.rewritten_since(was);
            let index_built = now.index_built_since(was);
            let scanned = now.scanned_since(was);
            if mode.is_none() && !rewritten && !index_built && !scanned {
                continue;
            }
            if mode != seen.mode {
                *seen = Seen {
                    mode,
                    reads: probe.read(t).await?,
                    writes: probe.write(t).await?,
                };
            }
            effects.push(effect(t, *seen, rewritten, index_built, scanned));
        }
        out.statements.push(StatementLocks {
            statement: n,
            sql: statement.clone(),
            took,
            tables: effects,
        });
        before = after;
    }
    Ok(out)
}

fn effect(t: &Table, seen: Seen, rewritten: bool, index_built: bool, scanned: bool) -> TableEffect {
    TableEffect {
        table: t.name.clone(),
        mode: seen.mode,
        reads_blocked: seen.reads,
        writes_blocked: seen.writes,
        rewritten,
        index_built,
        scanned,
    }
}

/// A no-transaction revision: each statement on `conn` in autocommit, measured while it waits
/// behind `holder` (see the module docs).
async fn outside(
    conn: &mut PgConnection,
    probe: &mut Probe,
    holder: &mut Probe,
    schema: &SchemaName,
    revision: &Revision,
) -> Result<LockMeasurement, MigrateError> {
    let tables = tables(&mut probe.conn, schema).await?;
    sqlx::query(lock_sql::REVISION_SESSION)
        .bind(false)
        .execute(&mut *conn)
        .await
        .map_err(to_migrate)?;
    let pid = backend_pid(conn).await?;
    let mut out = LockMeasurement {
        outside_transaction: true,
        ..LockMeasurement::default()
    };
    for (i, statement) in revision.up_postgres.iter().enumerate() {
        let n = i + 1;
        let before = states(&mut probe.conn, &tables).await?;
        holder.hold(&tables).await?;
        let started = Instant::now();
        let run = sqlx::query(statement).persistent(false).execute(&mut *conn);
        tokio::pin!(run);
        // Until the statement waits behind the holder (measured), or ends (not measured).
        let mut seen: Vec<Seen> = vec![Seen::default(); tables.len()];
        let mut ended = None;
        let deadline = Instant::now() + REACH_WAIT;
        loop {
            tokio::select! {
                r = &mut run => { ended = Some(r); break; }
                waiting = probe.waiting(pid) => {
                    if waiting? {
                        let locks = session_locks(&mut probe.conn, pid, &tables).await?;
                        for (t, seen) in tables.iter().zip(seen.iter_mut()) {
                            if let Some(mode) = locks.get(&t.oid) {
                                *seen = Seen {
                                    mode: Some(*mode),
                                    reads: probe.read(t).await?,
                                    writes: probe.write(t).await?,
                                };
                            }
                        }
                        break;
                    }
                    if Instant::now() > deadline {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        holder.release().await?;
        let ran = match ended {
            Some(r) => r,
            None => run.await,
        };
        let took = started.elapsed();
        if let Err(e) = ran {
            out.failed = Some((n, message(&e)));
            break;
        }
        let after = states(&mut probe.conn, &tables).await?;
        let mut effects = Vec::new();
        for (t, seen) in tables.iter().zip(seen) {
            let (Some(was), Some(now)) = (before.get(&t.oid), after.get(&t.oid)) else {
                continue;
            };
            if seen.mode.is_some() {
                // The scans of another session's statement are not counted here: a full
                // read under a blocking lock shows as blocked writes with a build or rewrite.
                let built = now.index_built_since(was);
                effects.push(effect(t, seen, now.rewritten_since(was), built, false));
            }
        }
        out.statements.push(StatementLocks {
            statement: n,
            sql: statement.clone(),
            took,
            tables: effects,
        });
    }
    Ok(out)
}

async fn exec(conn: &mut PgConnection, statement: &str) -> Result<(), MigrateError> {
    sqlx::query(statement)
        .persistent(false)
        .execute(conn)
        .await
        .map(|_| ())
        .map_err(to_migrate)
}
