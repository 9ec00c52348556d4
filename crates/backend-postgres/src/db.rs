//! [`Db`]: one connection, or one open transaction, of a store, counting the statements sent
//! through it — what every step of the epoch log ([`crate::store`]) and the transactional
//! append ([`crate::tx`]) runs on.

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgConnection;

/// One connection, or one open transaction, of a store: every statement sent through
/// [`Db::conn`] is counted.
pub(crate) struct Db<'c> {
    conn: &'c mut PgConnection,
    statements: &'c AtomicU64,
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c mut PgConnection, statements: &'c AtomicU64) -> Self {
        Self { conn, statements }
    }

    /// The connection, for sending exactly one statement.
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.conn
    }
}
