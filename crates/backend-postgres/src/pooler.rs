//! Running behind a connection pooler in transaction mode (PgBouncer `pool_mode = transaction`).
//!
//! Such a pooler lends a server connection to a client for one transaction and gives it to
//! another client afterwards. It keeps no session state: a session setting, a prepared
//! statement, a session advisory lock or a `LISTEN` made outside a transaction lands on a server
//! connection other clients then use, and the next statement may run on another one. A store
//! declared to be behind such a pooler ([`Pooler::Transaction`], `?cairn_pooler=transaction` on
//! the URL) therefore keeps everything it needs inside transactions:
//!
//! - Every checkout of a pooled connection is one transaction. Taking the connection out of the
//!   pool opens it ([`begin_sql`]: `DEALLOCATE ALL`, `BEGIN`, then the store's settings —
//!   `search_path`, `lock_timeout`, no bitmap scans — with `set_config(…, true)`, which last until
//!   the transaction ends), all in one simple query, so one server connection runs it; giving the
//!   connection back commits what is still open ([`END`]). A statement's Parse and Bind are then
//!   always sent to the server connection the transaction holds. An operation that opens its own
//!   transaction (`BEGIN` inside the checkout's one is a no-op) ends the checkout's transaction
//!   with its COMMIT or ROLLBACK; it sends nothing after it.
//! - Statements are not cached (`statement_cache_capacity(0)`). The driver still names each
//!   statement it prepares (`sqlx_s_N`, counted per client connection); `DEALLOCATE ALL` at the
//!   start of every checkout drops whatever names an earlier transaction of any client left on
//!   the server connection, so names never collide.
//! - Advisory locks are transaction-scoped only (the space locks always were; the migration lock
//!   becomes `pg_try_advisory_xact_lock` in the upgrade transaction).
//! - Wake-ups do not `LISTEN` (a pooled connection cannot keep it): a subscription returns at its
//!   fallback poll ([`crate::PgSpool::set_wake_poll`], default 1 s), so new work is found within
//!   that bound.
//!
//! `client_min_messages` is `error` inside the checkout's transaction so the no-op `BEGIN`s and
//! the final COMMIT after an operation's own COMMIT log no warnings.

use cairn_core::{Error, Result};

/// The query parameter that declares a pooler on a `postgres://` URL.
pub const POOLER_PARAM: &str = "cairn_pooler";

/// What sits between cairn and the Postgres server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooler {
    /// Nothing, or a pooler in session mode: cairn keeps session state on its connections
    /// (settings, cached prepared statements, a `LISTEN` connection). The default.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): every operation is
    /// a transaction that sets what it needs, and wake-ups poll (see the module docs).
    Transaction,
}

impl Pooler {
    /// The URL value (`cairn_pooler=…`) that selects this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
        }
    }

    fn parse(value: &str) -> Result<Self> {
        match value {
            "none" => Ok(Pooler::None),
            "transaction" => Ok(Pooler::Transaction),
            _ => Err(Error::invalid(
                "postgres connection options",
                format!("`{POOLER_PARAM}` must be `transaction` or `none`"),
            )),
        }
    }
}

/// Removes [`POOLER_PARAM`] from a URL's query and returns the mode it named (`None` when the
/// URL has no such parameter). The rest of the URL is left byte for byte.
///
/// # Errors
/// [`Error::InvalidInput`] for an unknown value or a repeated parameter (never echoing either).
pub(crate) fn split_pooler(url: &str) -> Result<(String, Option<Pooler>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut mode = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((POOLER_PARAM, value)) => {
                if mode.is_some() {
                    return Err(Error::invalid(
                        "postgres connection options",
                        format!("`{POOLER_PARAM}` is given more than once"),
                    ));
                }
                mode = Some(Pooler::parse(value)?);
            }
            _ if pair == POOLER_PARAM => {
                return Err(Error::invalid(
                    "postgres connection options",
                    format!("`{POOLER_PARAM}` needs a value: `{POOLER_PARAM}=transaction`"),
                ))
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, mode))
}

/// What a checkout sends first, as one simple query: drops every prepared statement left on the
/// server connection, opens the transaction and sets the store's settings until it ends.
/// `schema` is a validated identifier and `lock_timeout_ms` a number: neither can carry SQL.
pub(crate) fn begin_sql(schema: &str, lock_timeout_ms: &str) -> String {
    format!(
        "DEALLOCATE ALL; BEGIN ISOLATION LEVEL READ COMMITTED; \
         SET LOCAL client_min_messages = error; \
         SELECT pg_catalog.set_config('search_path', '{schema}', true), \
         pg_catalog.set_config('lock_timeout', '{lock_timeout_ms}', true), \
         pg_catalog.set_config('enable_bitmapscan', 'off', true)"
    )
}

/// What a checkout sends last: commits what is still open (no warning when the operation
/// ended the transaction itself: the implicit block of this query carries the setting).
pub(crate) const END: &str = "SET LOCAL client_min_messages = error; COMMIT";

/// Ends an aborted checkout transaction (where [`END`] fails).
pub(crate) const ABORT: &str = "ROLLBACK";

/// Opens a checkout's transaction on `conn` (see [`begin_sql`]).
pub(crate) async fn begin(
    conn: &mut sqlx::PgConnection,
    begin: &str,
) -> std::result::Result<(), sqlx::Error> {
    use sqlx::Executor;
    conn.execute(sqlx::raw_sql(begin)).await.map(|_| ())
}

/// Ends a checkout's transaction on `conn`: commits it, or rolls it back when it was aborted.
pub(crate) async fn end(conn: &mut sqlx::PgConnection) -> std::result::Result<(), sqlx::Error> {
    use sqlx::Executor;
    if conn.execute(sqlx::raw_sql(END)).await.is_err() {
        conn.execute(sqlx::raw_sql(ABORT)).await?;
    }
    Ok(())
}

/// The checkouts of a pool with checkout transactions that are out (begun, not yet given
/// back), so closing can wait for their commits.
///
/// The driver gives a connection back to a closed pool without `after_release`: it closes it,
/// which rolls the checkout's transaction back. A statement an operation ran on the pool
/// without a transaction of its own (an enqueue, a heartbeat) commits only when its connection
/// is given back, after the operation answered; so a store behind a pooler lets every checkout
/// end ([`Checkouts::drain`]) before it closes its pool, and takes no new one meanwhile.
#[derive(Debug, Default)]
pub(crate) struct Checkouts {
    out: std::sync::atomic::AtomicUsize,
    closing: std::sync::atomic::AtomicBool,
    /// A drain reached its bound: later drains (the spool's close, then the store's, on one
    /// pool) do not wait for the same checkouts again.
    gave_up: std::sync::atomic::AtomicBool,
    ended: tokio::sync::Notify,
}

impl Checkouts {
    /// Refuses new checkouts, then waits until every checkout that is out has been given back
    /// (and so committed), for at most `bound`: how many were still out then (0: all given
    /// back). A checkout can be counted out and never come back (its connection closed by the
    /// driver without `after_release`, a task holding it past the close): closing must not
    /// wait for it forever; the pool's close then rolls back what is still open. Once a drain
    /// reached its bound, later ones return at once.
    pub(crate) async fn drain(&self, bound: std::time::Duration) -> usize {
        use std::sync::atomic::Ordering;
        self.closing.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let ended = self.ended.notified();
            let out = self.out.load(Ordering::SeqCst);
            if out == 0 || self.gave_up.load(Ordering::SeqCst) {
                return out;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                self.gave_up.store(true, Ordering::SeqCst);
                return self.out.load(Ordering::SeqCst);
            }
        }
    }

    fn begun(&self) {
        self.out.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Counts one checkout given back. Never below zero: a connection given back that no
    /// checkout hook began (the driver's `try_acquire` skips `before_acquire`) must not make
    /// the count wrap around to "out forever".
    fn given_back(&self) {
        use std::sync::atomic::Ordering;
        let _ = self
            .out
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        self.ended.notify_waiters();
    }

    fn refused(&self) -> Option<sqlx::Error> {
        self.closing
            .load(std::sync::atomic::Ordering::SeqCst)
            .then_some(sqlx::Error::PoolClosed)
    }
}

/// `pool` with a checkout transaction around every use (see the module docs): opened when a
/// connection is made or taken from the pool, committed when it is given back; `checkouts`
/// counts them.
pub(crate) fn with_checkout_transactions(
    pool: sqlx::postgres::PgPoolOptions,
    schema: &str,
    lock_timeout_ms: &str,
    checkouts: std::sync::Arc<Checkouts>,
) -> sqlx::postgres::PgPoolOptions {
    let sql: std::sync::Arc<str> = begin_sql(schema, lock_timeout_ms).into();
    let (on_connect, on_acquire, on_release) = (checkouts.clone(), checkouts.clone(), checkouts);
    let connect_sql = sql.clone();
    // No lifetime: the driver closes a connection past it when it is given back, before
    // `after_release`, so its checkout would stay counted out (and its transaction would end
    // in a rollback). The pooler recycles its server connections itself (`server_lifetime`).
    pool.test_before_acquire(false)
        .max_lifetime(None)
        .after_connect(move |conn, _meta| {
            let (sql, checkouts) = (connect_sql.clone(), on_connect.clone());
            Box::pin(async move {
                if let Some(closed) = checkouts.refused() {
                    return Err(closed);
                }
                begin(conn, &sql).await?;
                checkouts.begun();
                Ok(())
            })
        })
        .before_acquire(move |conn, _meta| {
            let (sql, checkouts) = (sql.clone(), on_acquire.clone());
            // The BEGIN is the liveness check too: a dead connection fails it and is dropped.
            Box::pin(async move {
                if let Some(closed) = checkouts.refused() {
                    return Err(closed);
                }
                begin(conn, &sql).await?;
                checkouts.begun();
                Ok(true)
            })
        })
        .after_release(move |conn, _meta| {
            let checkouts = on_release.clone();
            Box::pin(async move {
                let ended = end(conn).await;
                checkouts.given_back();
                ended.map(|()| true)
            })
        })
}

/// Builds a pool with checkout transactions ([`with_checkout_transactions`]) and checks that it
/// connects, as `PgPoolOptions::connect_with` does, but gives the first connection back the way
/// every checkout is given back. (The driver's `connect_with` puts it into the pool without
/// `after_release`: it would sit there in its open checkout transaction, holding a server
/// connection of the pooler and counted out, so closing the store would wait forever.)
pub(crate) async fn connect(
    pool: sqlx::postgres::PgPoolOptions,
    options: sqlx::postgres::PgConnectOptions,
) -> std::result::Result<sqlx::PgPool, sqlx::Error> {
    let pool = pool.connect_lazy_with(options);
    // Given back through `after_release`, which commits its checkout transaction.
    drop(pool.acquire().await?);
    Ok(pool)
}

/// Whether two connections to `options`' server, open at once, are served by one server
/// session: never so on a server or a session-mode pooler, usually so behind a
/// transaction-mode pooler, which hands the second client the server session the first one
/// just gave back (PgBouncer reuses its most recently used one). A store not declared to be
/// behind a pooler checks this before it sends anything else, so the usual case of a
/// forgotten declaration is refused with what to do, before any session state of cairn's
/// could land on a pooled server connection. Costs two short connections per open, no
/// operation.
pub(crate) async fn sessions_are_shared(
    options: &sqlx::postgres::PgConnectOptions,
) -> std::result::Result<bool, sqlx::Error> {
    use sqlx::{Connection, Executor, Row};
    // Simple queries: no prepared statement is left anywhere.
    const PID: &str = "SELECT pg_catalog.pg_backend_pid()";
    // Named apart from the store's connections in `pg_stat_activity` while they close.
    let options = &options.clone().application_name("cairn pooler check");
    let mut first = sqlx::PgConnection::connect_with(options).await?;
    let a: i32 = first.fetch_one(sqlx::raw_sql(PID)).await?.try_get(0)?;
    let mut second = sqlx::PgConnection::connect_with(options).await?;
    let b: i32 = second.fetch_one(sqlx::raw_sql(PID)).await?.try_get(0)?;
    let _ = second.close().await;
    let _ = first.close().await;
    Ok(a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_waits_for_checkouts_given_back_and_no_longer_than_its_bound() {
        use std::time::Duration;
        let checkouts = std::sync::Arc::new(Checkouts::default());
        checkouts.begun();
        let back = checkouts.clone();
        let giver = tokio::spawn(async move {
            tokio::task::yield_now().await;
            back.given_back();
        });
        let left = tokio::time::timeout(
            Duration::from_secs(30),
            checkouts.drain(Duration::from_secs(30)),
        )
        .await
        .expect("a drain ends once its checkout is given back");
        assert_eq!(left, 0);
        giver.await.unwrap();
        assert!(checkouts.refused().is_some(), "no checkout after a drain");

        // One checkout that never comes back (its connection closed without `after_release`).
        let stuck = Checkouts::default();
        stuck.begun();
        let left = tokio::time::timeout(
            Duration::from_secs(30),
            stuck.drain(Duration::from_millis(50)),
        )
        .await
        .expect("a drain ends at its bound");
        assert_eq!(left, 1, "the checkout still out is reported");
        // The store's close drains again after the spool's: it does not wait a second time.
        let again = tokio::time::timeout(
            Duration::from_secs(1),
            stuck.drain(Duration::from_secs(3600)),
        )
        .await
        .expect("a drain after one that gave up returns at once");
        assert_eq!(again, 1);
    }

    #[tokio::test]
    async fn a_connection_given_back_without_a_checkout_does_not_wrap_the_count() {
        let checkouts = Checkouts::default();
        // `try_acquire` skips `before_acquire`; `after_release` still runs.
        checkouts.given_back();
        assert_eq!(
            tokio::time::timeout(
                std::time::Duration::from_secs(30),
                checkouts.drain(std::time::Duration::from_secs(30)),
            )
            .await
            .expect("nothing is out"),
            0
        );
    }

    #[test]
    fn the_parameter_is_removed_and_read() {
        let (url, mode) =
            split_pooler("postgres://u@h:6432/db?sslmode=disable&cairn_pooler=transaction&x=1")
                .unwrap();
        assert_eq!(url, "postgres://u@h:6432/db?sslmode=disable&x=1");
        assert_eq!(mode, Some(Pooler::Transaction));
        let (url, mode) = split_pooler("postgres://u@h/db?cairn_pooler=none").unwrap();
        assert_eq!(
            (url.as_str(), mode),
            ("postgres://u@h/db", Some(Pooler::None))
        );
        let (url, mode) = split_pooler("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(
            (url.as_str(), mode),
            ("postgres://u@h/db?sslmode=disable", None)
        );
    }

    #[test]
    fn bad_or_repeated_values_are_refused_without_echoing_them() {
        for url in [
            "postgres://u@h/db?cairn_pooler=hunter2",
            "postgres://u@h/db?cairn_pooler=transaction&cairn_pooler=none",
            "postgres://u@h/db?cairn_pooler",
        ] {
            let err = split_pooler(url).unwrap_err();
            assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }
}
