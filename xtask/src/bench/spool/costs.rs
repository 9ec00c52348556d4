//! Row 8's write cost per job on Postgres (cairn only): the row versions and index entries the
//! drain wrote, from the server's own counters (`pg_stat_user_tables` of the store's schema),
//! beside the WAL bytes and the CPU that [`super`] measures.
//!
//! The counters move only when a session flushes its pending statistics: at a transaction's end
//! at most once a second, an idle session within 10 s, a session that ends at once (Postgres
//! 15 and later). So the enqueue goes through a spool of its own that is closed before the
//! first snapshot, the drain's spool is closed before the second, and each snapshot waits until
//! the closed spool's sessions (found by their `application_name`) have ended: a session flushes
//! its statistics before it leaves `pg_stat_activity`. The snapshots are outside the drain's
//! clock, CPU window and WAL window.
//!
//! Per table and in total, per job: inserts, updates (of which HOT), deletes, new row versions
//! (inserts + updates), and index entries = (inserts + non-HOT updates) × the table's indexes.
//! A partial index takes an entry only for a row inside its predicate, so on a table with one
//! the figure is an upper bound (printed with `≤`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::spool::SpoolConfig;
use cairn::testkit::postgres::{PgOptions, PgSpool, PgStore};
use cairn::SystemClock;

use super::super::setup::{random_tag, store_err};
use super::fresh::Fresh;

/// How long a snapshot waits for a closed spool's sessions to end.
const SESSIONS_DEADLINE: Duration = Duration::from_secs(30);

/// One table's counters (`pg_stat_user_tables`), or their growth over a drain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tuples {
    pub(super) ins: u64,
    pub(super) upd: u64,
    /// Of `upd`, the HOT updates (no index entry written).
    pub(super) hot: u64,
    pub(super) del: u64,
}

impl Tuples {
    /// The growth from `before` to `self`.
    fn since(self, before: Tuples) -> Tuples {
        Tuples {
            ins: self.ins.saturating_sub(before.ins),
            upd: self.upd.saturating_sub(before.upd),
            hot: self.hot.saturating_sub(before.hot),
            del: self.del.saturating_sub(before.del),
        }
    }

    /// New row versions: inserts and updates.
    fn versions(self) -> u64 {
        self.ins + self.upd
    }

    /// Index entries on a table of `indexes` indexes: every insert and every non-HOT update
    /// adds one to each index.
    fn index_entries(self, indexes: u64) -> u64 {
        (self.ins + self.upd.saturating_sub(self.hot)) * indexes
    }

    fn is_zero(self) -> bool {
        self == Tuples::default()
    }
}

/// One table's share of one drain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TableCost {
    pub(super) table: String,
    /// The table's indexes, and how many of them are partial.
    pub(super) indexes: u64,
    pub(super) partial: u64,
    pub(super) tuples: Tuples,
}

/// What one drain wrote, table by table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CostRun {
    pub(super) concurrency: u64,
    pub(super) jobs: u64,
    pub(super) tables: Vec<TableCost>,
}

/// Every drain's costs so far (cairn on Postgres), for the report after the last run.
static RECORDED: Mutex<Vec<CostRun>> = Mutex::new(Vec::new());

pub(super) fn record(run: CostRun) {
    RECORDED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(run);
}

pub(super) fn recorded() -> Vec<CostRun> {
    RECORDED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// `url` with `application_name=name` added to its query.
pub(super) fn with_application_name(url: &str, name: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={name}")
}

/// The counting side of a Postgres store for row 8: the drain's spool (the `Fresh` that
/// [`Counted::open`] returns with it, its sessions named `<tag>_d`) and a spool for the enqueue
/// on the same schema (its sessions named `<tag>_e`).
pub(super) struct Counted {
    pub(super) enqueuer: PgSpool,
    drainer: PgSpool,
    admin: sqlx::PgPool,
    schema: String,
    tag: String,
}

impl Counted {
    /// A new schema on the server at `url`, the drain's store on it, and the counting side.
    pub(super) async fn open(url: &str) -> Result<(Fresh, Self), String> {
        let tag = format!("cairn_bench_drain_{}", random_tag());
        let schema = format!("cairn_bench_spool_{}", random_tag());
        let admin = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| format!("cannot connect to Postgres: {e}"))?;
        let drainer = open_spool(url, &schema, &format!("{tag}_d")).await?;
        let enqueuer = open_spool(url, &schema, &format!("{tag}_e")).await?;
        let fresh = Fresh {
            spool: Arc::new(drainer.clone()),
            target: url.to_owned(),
            schema: schema.clone(),
            _dir: None,
            admin: Some(admin.clone()),
            pg: Some(drainer.clone()),
        };
        Ok((
            fresh,
            Self {
                enqueuer,
                drainer,
                admin,
                schema,
                tag,
            },
        ))
    }

    /// After the enqueue: closes the enqueue's spool, waits for its sessions to end, and takes
    /// the counters the drain starts from.
    pub(super) async fn before(&self) -> Result<BTreeMap<String, Tuples>, String> {
        self.enqueuer.close().await;
        self.sessions_ended("e").await?;
        self.snapshot().await
    }

    /// After the drain (its consumer shut down): closes the drain's spool, waits for its
    /// sessions to end, and returns what the drain wrote since `before`.
    pub(super) async fn after(
        &self,
        before: &BTreeMap<String, Tuples>,
        concurrency: u64,
        jobs: u64,
    ) -> Result<CostRun, String> {
        self.drainer.close().await;
        self.sessions_ended("d").await?;
        let after = self.snapshot().await?;
        let indexes = self.indexes().await?;
        let tables: Vec<TableCost> = after
            .into_iter()
            .map(|(table, now)| {
                let tuples = now.since(before.get(&table).copied().unwrap_or_default());
                let (indexes, partial) = indexes.get(&table).copied().unwrap_or((0, 0));
                TableCost {
                    table,
                    indexes,
                    partial,
                    tuples,
                }
            })
            .collect();
        // Every job's run changed at least one row: fewer changes mean counters not flushed.
        let changed: u64 = tables
            .iter()
            .map(|t| t.tuples.ins + t.tuples.upd + t.tuples.del)
            .sum();
        if changed < jobs {
            return Err(format!(
                "the counters grew by {changed} row changes over {jobs} jobs: not flushed?"
            ));
        }
        Ok(CostRun {
            concurrency,
            jobs,
            tables,
        })
    }

    /// Waits (20 ms polls, at most [`SESSIONS_DEADLINE`]) until no session named
    /// `<tag>_<which>` is left.
    async fn sessions_ended(&self, which: &str) -> Result<(), String> {
        let name = format!("{}_{which}", self.tag);
        let deadline = Instant::now() + SESSIONS_DEADLINE;
        loop {
            let left: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1",
            )
            .bind(&name)
            .fetch_one(&self.admin)
            .await
            .map_err(|e| format!("cannot read pg_stat_activity: {e}"))?;
            if left == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{left} session(s) of the closed spool still open after {} s",
                    SESSIONS_DEADLINE.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The schema's table counters, read afresh (`pg_stat_clear_snapshot` first, on the same
    /// connection).
    async fn snapshot(&self) -> Result<BTreeMap<String, Tuples>, String> {
        let err = |e: sqlx::Error| format!("cannot read pg_stat_user_tables: {e}");
        let mut conn = self.admin.acquire().await.map_err(err)?;
        sqlx::query("SELECT pg_catalog.pg_stat_clear_snapshot()")
            .execute(&mut *conn)
            .await
            .map_err(err)?;
        let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del \
             FROM pg_catalog.pg_stat_user_tables WHERE schemaname = $1",
        )
        .bind(&self.schema)
        .fetch_all(&mut *conn)
        .await
        .map_err(err)?;
        let n = |x: i64| u64::try_from(x).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(|(t, ins, upd, hot, del)| {
                (
                    t,
                    Tuples {
                        ins: n(ins),
                        upd: n(upd),
                        hot: n(hot),
                        del: n(del),
                    },
                )
            })
            .collect())
    }

    /// Each table's indexes, and how many of them are partial.
    async fn indexes(&self) -> Result<BTreeMap<String, (u64, u64)>, String> {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT c.relname::text, count(*), count(*) FILTER (WHERE i.indpred IS NOT NULL) \
             FROM pg_catalog.pg_index i \
             JOIN pg_catalog.pg_class c ON c.oid = i.indrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 GROUP BY c.relname",
        )
        .bind(&self.schema)
        .fetch_all(&self.admin)
        .await
        .map_err(|e| format!("cannot read pg_index: {e}"))?;
        let n = |x: i64| u64::try_from(x).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(|(t, all, partial)| (t, (n(all), n(partial))))
            .collect())
    }
}

/// A spool on `schema` (created when missing) whose sessions carry `application_name`.
async fn open_spool(url: &str, schema: &str, application_name: &str) -> Result<PgSpool, String> {
    let store = PgStore::open_with(
        PgOptions::new(with_application_name(url, application_name)).schema(schema.to_owned()),
    )
    .await
    .map_err(store_err)?;
    PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default()).map_err(store_err)
}

/// The per-job cost table of `runs` (cairn's drains on Postgres), one block of rows per
/// concurrency: the tables the drains wrote, then their total. Means over the runs (each
/// table's counts summed over the runs ÷ the jobs of those runs), so the rows add up to the
/// total.
pub(super) fn table(runs: &[CostRun], concurrencies: &[u64]) -> String {
    let mut out = String::from(
        "| row | table | indexes | inserts | updates | of which HOT | deletes | new row versions | index entries |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let per = |x: u64, jobs: u64| format!("{:.2}", x as f64 / jobs.max(1) as f64);
    for &c in concurrencies {
        let at: Vec<&CostRun> = runs.iter().filter(|r| r.concurrency == c).collect();
        let row = format!("10. writes per job, concurrency {c}");
        if at.is_empty() {
            out.push_str(&format!("| {row} | n/a | | | | | | | |\n"));
            continue;
        }
        let jobs: u64 = at.iter().map(|r| r.jobs).sum();
        // Per table: its indexes (the last run's) and its counts summed over the runs.
        let mut tables: BTreeMap<&str, (u64, u64, Tuples)> = BTreeMap::new();
        for t in at.iter().flat_map(|r| &r.tables) {
            let e = tables.entry(&t.table).or_default();
            e.0 = t.indexes;
            e.1 = t.partial;
            e.2.ins += t.tuples.ins;
            e.2.upd += t.tuples.upd;
            e.2.hot += t.tuples.hot;
            e.2.del += t.tuples.del;
        }
        let mut total = Tuples::default();
        let (mut entries, mut bound) = (0, false);
        for (name, (indexes, partial, s)) in tables.into_iter().filter(|(_, t)| !t.2.is_zero()) {
            let written = s.index_entries(indexes);
            let upper = partial > 0 && written > 0;
            total.ins += s.ins;
            total.upd += s.upd;
            total.hot += s.hot;
            total.del += s.del;
            entries += written;
            bound |= upper;
            out.push_str(&format!(
                "| {row} | {name} | {indexes}{} | {} | {} | {} | {} | {} | {}{} |\n",
                if partial > 0 {
                    format!(" ({partial} partial)")
                } else {
                    String::new()
                },
                per(s.ins, jobs),
                per(s.upd, jobs),
                per(s.hot, jobs),
                per(s.del, jobs),
                per(s.versions(), jobs),
                if upper { "≤ " } else { "" },
                per(written, jobs),
            ));
        }
        out.push_str(&format!(
            "| {row} | **total** | | {} | {} | {} | {} | {} | {}{} |\n",
            per(total.ins, jobs),
            per(total.upd, jobs),
            per(total.hot, jobs),
            per(total.del, jobs),
            per(total.versions(), jobs),
            if bound { "≤ " } else { "" },
            per(entries, jobs),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ins: u64, upd: u64, hot: u64, del: u64) -> Tuples {
        Tuples { ins, upd, hot, del }
    }

    #[test]
    fn growth_versions_and_index_entries() {
        let d = t(10, 50, 20, 7).since(t(4, 10, 5, 7));
        assert_eq!(d, t(6, 40, 15, 0));
        assert_eq!(d.versions(), 46);
        // (6 inserts + 25 non-HOT updates) × 3 indexes; deletes write no index entry.
        assert_eq!(d.index_entries(3), 93);
        assert_eq!(d.index_entries(0), 0);
        // A counter that went back (a reset) counts as no growth, never as a wrap.
        assert_eq!(t(1, 0, 0, 0).since(t(5, 0, 0, 0)), Tuples::default());
        assert!(Tuples::default().is_zero() && !t(0, 0, 0, 1).is_zero());
    }

    #[test]
    fn application_name_joins_the_query() {
        assert_eq!(
            with_application_name("postgres://u@h:5432/db", "x_d"),
            "postgres://u@h:5432/db?application_name=x_d"
        );
        assert_eq!(
            with_application_name("postgres://u@h/db?sslmode=disable", "x_e"),
            "postgres://u@h/db?sslmode=disable&application_name=x_e"
        );
    }

    fn cost(table: &str, indexes: u64, partial: u64, tuples: Tuples) -> TableCost {
        TableCost {
            table: table.into(),
            indexes,
            partial,
            tuples,
        }
    }

    #[test]
    fn the_table_gives_means_per_job_and_marks_partial_indexes() {
        let runs = vec![
            CostRun {
                concurrency: 10,
                jobs: 100,
                tables: vec![
                    cost("spool_run", 7, 3, t(0, 200, 0, 0)),
                    cost("spool_event", 1, 0, t(100, 0, 0, 0)),
                    cost("untouched", 2, 0, Tuples::default()),
                ],
            },
            CostRun {
                concurrency: 10,
                jobs: 100,
                tables: vec![
                    cost("spool_run", 7, 3, t(0, 200, 100, 0)),
                    cost("spool_event", 1, 0, t(100, 0, 0, 0)),
                ],
            },
            CostRun {
                concurrency: 24,
                jobs: 50,
                tables: vec![cost("spool_ready", 2, 0, t(0, 50, 50, 50))],
            },
        ];
        let out = table(&runs, &[10, 24, 99]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "| row | table | indexes | inserts | updates | of which HOT | deletes | new row versions | index entries |"
        );
        assert_eq!(lines[1], "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        // BTreeMap order; the untouched table is left out; 400 updates (100 HOT) over 200
        // jobs: 1.5 non-HOT × 7 indexes, an upper bound (3 are partial).
        assert_eq!(
            lines[2],
            "| 10. writes per job, concurrency 10 | spool_event | 1 | 1.00 | 0.00 | 0.00 | 0.00 | 1.00 | 1.00 |"
        );
        assert_eq!(
            lines[3],
            "| 10. writes per job, concurrency 10 | spool_run | 7 (3 partial) | 0.00 | 2.00 | 0.50 | 0.00 | 2.00 | ≤ 10.50 |"
        );
        assert_eq!(
            lines[4],
            "| 10. writes per job, concurrency 10 | **total** | | 1.00 | 2.00 | 0.50 | 0.00 | 3.00 | ≤ 11.50 |"
        );
        // Only HOT updates and deletes: no index entry, no bound.
        assert_eq!(
            lines[5],
            "| 10. writes per job, concurrency 24 | spool_ready | 2 | 0.00 | 1.00 | 1.00 | 1.00 | 1.00 | 0.00 |"
        );
        assert_eq!(
            lines[6],
            "| 10. writes per job, concurrency 24 | **total** | | 0.00 | 1.00 | 1.00 | 1.00 | 1.00 | 0.00 |"
        );
        assert_eq!(
            lines[7],
            "| 10. writes per job, concurrency 99 | n/a | | | | | | | |"
        );
        assert_eq!(lines.len(), 8);
    }
}
