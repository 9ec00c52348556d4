//! The checked transaction: one connection, one transaction that is always rolled back, each
//! statement of the revision in its own savepoint, judged as it runs.

use std::collections::BTreeSet;

use cairn_migrate::additivity::{Rule, Violation};
use cairn_migrate::outside::in_transaction_form;
use cairn_migrate::{MigrateError, Revision, BOOKKEEPING_TABLES};

use super::checker::{to_migrate, Checker};
use super::judge::{compare, judge_commands, judge_outside, Findings};
use super::sql;

/// The server's one-line message for a failed statement.
fn message(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => db.message().replace('\n', " "),
        other => other.to_string().replace('\n', " "),
    }
}

impl Checker<'_> {
    /// Runs the check; the caller rolls the transaction back whatever happens.
    ///
    /// A no-transaction revision (`no_transaction`) is checked through each statement's
    /// [`in_transaction_form`]: the same change without `CONCURRENTLY`, `VACUUM` skipped.
    pub(super) async fn run(
        mut self,
        revision: &Revision,
        no_transaction: bool,
    ) -> Result<Vec<Violation>, MigrateError> {
        self.exec(sql::BEGIN).await?;
        sqlx::query(sql::LOCAL_TIMEOUTS)
            .execute(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        let bookkeeping: Vec<String> = BOOKKEEPING_TABLES.iter().map(|s| (*s).to_owned()).collect();
        let tables: Vec<(i64, String)> = sqlx::query_as(sql::TABLES)
            .bind(self.schema.as_str())
            .bind(&bookkeeping)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        let oids: Vec<i64> = tables.iter().map(|t| t.0).collect();
        let objects: BTreeSet<(String, i64)> = sqlx::query_as(sql::OBJECTS)
            .bind(self.schema.as_str())
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
            .into_iter()
            .collect();
        let before = self.snapshot(&oids).await?;
        self.create_capture_objects().await?;
        let digests = self.digests(&before).await?;
        self.install_capture(&oids).await?;

        let mut findings = Findings::default();
        // What the check itself holds outside the store before the revision runs (nothing, as
        // a rule): only what the revision adds counts.
        let mut outside = self.outside_locks().await?;
        let mut previous = before.clone();
        let mut last_log = 0i64;
        for (i, original) in revision.up_postgres.iter().enumerate() {
            let n = i + 1;
            let statement = match no_transaction {
                false => original.clone(),
                true => match in_transaction_form(original) {
                    Some(form) => form,
                    None => continue,
                },
            };
            let statement = statement.as_str();
            self.savepoint().await?;
            let ran = sqlx::query(statement)
                .persistent(false)
                .execute(&mut *self.conn)
                .await;
            let closed = self.end_savepoint(ran.is_ok()).await;
            if let Err(e) = &ran {
                findings.add(
                    Rule::Failed,
                    None,
                    n,
                    format!("failed inside the transaction: {}", message(e)),
                );
            }
            if closed.is_err() {
                // The statement ended the checked transaction (COMMIT, ROLLBACK, …): nothing after
                // it can be judged.
                findings.add(Rule::Failed, None, n, "ended the migration transaction");
                return Ok(findings.into_violations());
            }
            let log = self.read_log(last_log).await?;
            if let Some(last) = log.last() {
                last_log = last.id;
            }
            let current = self.snapshot(&oids).await?;
            judge_commands(
                &mut findings,
                n,
                &log,
                &before,
                &objects,
                &previous,
                &current,
            );
            judge_outside(&mut findings, n, &log, self.schema.as_str());
            let now_outside = self.outside_locks().await?;
            for (name, _mode) in now_outside.difference(&outside) {
                findings.add(
                    Rule::OutsideStore,
                    Some(name),
                    n,
                    format!("touches {name}, outside the throwaway store"),
                );
            }
            outside = now_outside;
            previous = current;
        }

        compare(&mut findings, &before, &previous);
        let q = sql::digest(self.schema);
        for (oid, t) in &before.tables {
            if !previous.tables.contains_key(oid) {
                continue;
            }
            let cols: Vec<i32> = t.columns.keys().copied().collect();
            let now: Option<String> = sqlx::query_scalar(&q)
                .bind(oid)
                .bind(&cols)
                .fetch_one(&mut *self.conn)
                .await
                .map_err(to_migrate)?;
            let now = now.unwrap_or_default();
            let was = digests.get(oid).cloned().unwrap_or_default();
            if now != was {
                findings.add(
                    Rule::Rows,
                    Some(&t.name),
                    0,
                    format!("seeded rows changed (rows:digest {was} -> {now})"),
                );
            }
        }
        let q = sql::old_writes(self.schema);
        for (oid, t) in &before.tables {
            // What an older writer names: never a generated column, nor an identity column
            // that only takes its default.
            let cols: Vec<i32> = t
                .columns
                .iter()
                .filter(|(_, c)| c.generated.is_empty() && c.identity != "a")
                .map(|(num, _)| *num)
                .collect();
            self.savepoint().await?;
            let failed: Result<Option<String>, sqlx::Error> = sqlx::query_scalar(&q)
                .bind(oid)
                .bind(&cols)
                .fetch_one(&mut *self.conn)
                .await;
            self.end_savepoint(failed.is_ok())
                .await
                .map_err(to_migrate)?;
            match failed {
                Ok(None) => {}
                Ok(Some(why)) => findings.add(Rule::OldWrites, Some(&t.name), 0, why),
                Err(e) => findings.add(Rule::OldWrites, Some(&t.name), 0, message(&e)),
            }
        }
        Ok(findings.into_violations())
    }
}
