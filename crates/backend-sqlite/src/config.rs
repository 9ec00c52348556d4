//! Options for opening a SQLite store.

use std::time::Duration;

/// How a [`crate::SqliteStore`] opens its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    /// How long a statement waits for another connection's lock (another writer, a WAL
    /// checkpoint) before failing with [`cairn_core::Error::Retryable`]. Default 5 s.
    pub busy_timeout: Duration,
}

impl SqliteOptions {
    /// The default busy timeout.
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Self::DEFAULT_BUSY_TIMEOUT,
        }
    }
}
