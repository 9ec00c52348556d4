//! The throwaway schemas' life cycle: a check claims its schema with a session advisory lock
//! for as long as it runs, a drop guard removes the schema when the check is abandoned (a
//! panic, a cancelled future), and every check drops the schemas of earlier checks that no
//! live session claims any more (a killed process).

use std::time::Duration;

use cairn_core::{key64, Error};
use sqlx::{Connection, PgConnection};

use super::sql;
use crate::config::SchemaName;
use crate::error::map;

/// The prefix of every throwaway schema name (`cairn_add_` + 16 hex digits).
pub(super) const PREFIX: &str = "cairn_add";

/// The key-derivation context of the claims (shared by every build that runs checks: changing
/// it lets one build drop another's live schema).
const CLAIM_CONTEXT: &str = "cairn 2026-11 postgres additivity scratch v1";

fn claim_key(schema: &SchemaName) -> i64 {
    key64(CLAIM_CONTEXT, &[schema.as_str().as_bytes()])
}

/// Whether `name` is exactly a throwaway schema's name, `cairn_add_` + 16 lowercase hex.
fn is_scratch_name(name: &str) -> bool {
    name.strip_prefix("cairn_add_").is_some_and(|hex| {
        hex.len() == 16
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The throwaway schemas without a session of their check: every session of a running check
/// carries the schema's name as its `application_name` (see `PgAdditivity`'s connect options).
const UNOWNED_SCHEMAS: &str = "SELECT n.nspname::text FROM pg_catalog.pg_namespace n \
    WHERE n.nspname LIKE $1 AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a \
    WHERE a.application_name = n.nspname) ORDER BY 1";

/// The `LIKE` pattern of the throwaway schemas' names (`_` escaped).
const LIKE_SCRATCH: &str = "cairn\\_add\\_%";

/// The throwaway schemas of the database `conn` is connected to that no running check owns
/// (no session carries the schema's name as its `application_name`), by name, sorted: what a
/// killed check left behind. Lists only, takes no lock and drops nothing; `cairn doctor`
/// reports them (through the Postgres backend's diagnostics) and the next check drops them.
///
/// # Errors
/// Driver errors.
pub(crate) async fn leftovers(conn: &mut PgConnection) -> Result<Vec<String>, Error> {
    let names: Vec<String> = sqlx::query_scalar(UNOWNED_SCHEMAS)
        .bind(LIKE_SCRATCH)
        .fetch_all(conn)
        .await
        .map_err(map)?;
    Ok(names.into_iter().filter(|n| is_scratch_name(n)).collect())
}

/// A check's claim on its schema: a session holding the schema's advisory lock. The lock goes
/// when the session ends, however the check ends.
pub(super) struct Owner {
    conn: PgConnection,
    key: i64,
}

impl Owner {
    /// Claims `schema` (before it exists) on a session of its own.
    pub(super) async fn claim(url: &str, schema: &SchemaName) -> Result<Self, Error> {
        let options = crate::config::connect_options_from_url(url)?;
        let mut conn = PgConnection::connect_with(&options).await.map_err(map)?;
        let key = claim_key(schema);
        sqlx::query(sql::CLAIM)
            .bind(key)
            .execute(&mut conn)
            .await
            .map_err(map)?;
        Ok(Self { conn, key })
    }

    /// Drops every throwaway schema no live check claims (left by a killed process). Best
    /// effort: a schema that cannot be dropped now is tried again by the next check.
    pub(super) async fn drop_leftovers(&mut self) {
        let Ok(names) = sqlx::query_scalar::<_, String>(sql::SCRATCH_SCHEMAS)
            .bind(LIKE_SCRATCH)
            .fetch_all(&mut self.conn)
            .await
        else {
            return;
        };
        for name in names.iter().filter(|n| is_scratch_name(n)) {
            let Ok(schema) = SchemaName::parse(name) else {
                continue;
            };
            let key = claim_key(&schema);
            if key == self.key {
                continue;
            }
            let free: bool = sqlx::query_scalar(sql::TRY_CLAIM)
                .bind(key)
                .fetch_one(&mut self.conn)
                .await
                .unwrap_or(false);
            if free {
                let _ = sqlx::query(&sql::drop_schema(&schema))
                    .persistent(false)
                    .execute(&mut self.conn)
                    .await;
                let _ = sqlx::query(sql::UNCLAIM)
                    .bind(key)
                    .execute(&mut self.conn)
                    .await;
            }
        }
    }

    /// Ends the claim (closing the session releases the lock).
    pub(super) async fn release(self) {
        let _ = self.conn.close().await;
    }
}

/// Drops the throwaway schema when a check is abandoned before it dropped the schema itself:
/// it ends the check's other sessions (found by their `application_name`, the schema's name),
/// whose open transaction would otherwise hold locks the drop waits for, then drops the schema.
/// The work runs on a thread of its own, since `Drop` cannot wait on the async runtime.
pub(super) struct DropGuard {
    armed: Option<(String, SchemaName)>,
}

impl DropGuard {
    pub(super) fn new(url: String, schema: SchemaName) -> Self {
        Self {
            armed: Some((url, schema)),
        }
    }

    /// The check dropped its schema itself: nothing left to do.
    pub(super) fn disarm(mut self) {
        self.armed = None;
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        let Some((url, schema)) = self.armed.take() else {
            return;
        };
        let Ok(options) = crate::config::connect_options_from_url(&url) else {
            return;
        };
        // Detached: an abandoned check must not hold up the thread that dropped it. If the
        // process exits first, the next check drops the schema (see `Owner::drop_leftovers`).
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let _ = tokio::time::timeout(Duration::from_secs(30), async move {
                    let mut conn = PgConnection::connect_with(&options).await.ok()?;
                    let _ = sqlx::query(sql::END_SESSIONS)
                        .bind(schema.as_str())
                        .execute(&mut conn)
                        .await;
                    let dropped = sqlx::query(&sql::drop_schema(&schema))
                        .persistent(false)
                        .execute(&mut conn)
                        .await;
                    let _ = conn.close().await;
                    dropped.ok()
                })
                .await;
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_scratch_names_are_leftovers() {
        let fresh = cairn_core::scratch_name(PREFIX);
        assert!(is_scratch_name(&fresh), "{fresh}");
        for other in [
            "cairn_add_",
            "cairn_add_0123456789abcdeF",
            "cairn_add_0123456789abcdef0",
            "cairn_add_x123456789abcdef",
            "cairn_addx0123456789abcdef",
            "public",
            "cairn_t_0123456789abcdef",
        ] {
            assert!(!is_scratch_name(other), "{other}");
        }
    }
}
