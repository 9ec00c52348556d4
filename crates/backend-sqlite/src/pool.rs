//! The read connections: a fixed set, one handed out per read, so that concurrent reads run in
//! parallel (WAL lets every one of them read while a writer commits).

use std::ops::Deref;
use std::sync::{Arc, Mutex};

use cairn_core::{Error, Result};
use rusqlite::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::db::lock;

/// The store's read connections.
///
/// Invariant: the semaphore has exactly as many free permits as `idle` holds connections, so a
/// checkout that holds a permit always finds a connection. A [`Checkout`] puts its connection
/// back before it releases its permit.
pub(crate) struct ReadPool {
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    /// A pool over `conns` (at least one).
    pub(crate) fn new(conns: Vec<Connection>) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(conns.len())),
            idle: Mutex::new(conns),
        })
    }

    /// Waits (asynchronously, holding no thread) for a free connection.
    pub(crate) async fn checkout(self: &Arc<Self>) -> Result<Checkout> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::backend("sqlite", "the read connections are closed"))?;
        let conn = lock(&self.idle).pop().ok_or_else(|| {
            Error::backend("sqlite", "no idle read connection behind a free permit")
        })?;
        Ok(Checkout {
            pool: self.clone(),
            conn: Some(conn),
            _permit: permit,
        })
    }
}

/// One read connection, out of the pool until dropped (a panic included).
pub(crate) struct Checkout {
    pool: Arc<ReadPool>,
    conn: Option<Connection>,
    // Dropped after `drop` below has put the connection back (fields drop after the body).
    _permit: OwnedSemaphorePermit,
}

impl Deref for Checkout {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        // Only `drop` takes the connection out.
        self.conn.as_ref().expect("a checked-out connection")
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            lock(&self.pool.idle).push(conn);
        }
    }
}
