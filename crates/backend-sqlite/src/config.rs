//! Options for opening a SQLite store.

use std::time::Duration;

use cairn_core::{Error, Result};

/// How a [`crate::SqliteStore`] opens its file.
///
/// Start from [`SqliteOptions::default`] and chain the setters; the fields are public for
/// reading (the struct is `#[non_exhaustive]`, so it cannot be built literally outside this
/// crate, and new options can be added without breaking callers):
///
/// ```
/// use std::time::Duration;
/// let opts = cairn_sqlite::SqliteOptions::default()
///     .busy_timeout(Duration::from_secs(2))
///     .read_connections(8)
///     .create_if_missing(false);
/// assert_eq!(opts.read_connections, 8);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How long a statement waits for another connection's lock (another writer, a WAL
    /// checkpoint) before failing with [`cairn_core::Error::Retryable`]. Default 5 s.
    pub busy_timeout: Duration,
    /// How many connections serve reads (`heads`, the feed, `epoch`, …) in parallel; WAL lets
    /// them read while a writer commits. At least 1; default 4.
    pub read_connections: usize,
    /// Whether opening a path where no file exists creates the store. Default `true`; when
    /// `false`, opening a missing store fails with [`cairn_core::Error::NotFound`] and creates
    /// nothing (neither the file nor its directory); so does a file that holds no stamp of
    /// cairn's set (an empty SQLite database, or a store older than the migration runner:
    /// `cairn migrate up` adopts it).
    pub create_if_missing: bool,
    /// Whether cairn may put its tables into a database file that already holds the
    /// application's own tables. Default `false`: such a file is refused, so that a mistyped
    /// path never grafts a store onto someone else's database. When `true`, cairn's tables
    /// (and its migration bookkeeping) are created beside the application's and the file is
    /// switched to WAL mode for good, as every cairn store is; the application's tables are
    /// never touched. Once cairn's stamp is in the file, it opens without the opt-in too.
    pub share_file_with_application: bool,
}

impl SqliteOptions {
    /// The default busy timeout.
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default number of read connections.
    pub const DEFAULT_READ_CONNECTIONS: usize = 4;

    /// Sets [`SqliteOptions::busy_timeout`].
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets [`SqliteOptions::read_connections`]; 0 is refused when the store is opened.
    #[must_use]
    pub fn read_connections(mut self, n: usize) -> Self {
        self.read_connections = n;
        self
    }

    /// Sets [`SqliteOptions::create_if_missing`].
    #[must_use]
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// Sets [`SqliteOptions::share_file_with_application`].
    #[must_use]
    pub fn share_file_with_application(mut self, share: bool) -> Self {
        self.share_file_with_application = share;
        self
    }

    /// Refuses options no store can be opened with.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.read_connections == 0 {
            return Err(Error::invalid(
                "read_connections",
                "a store needs at least one read connection; pass 1 or more",
            ));
        }
        Ok(())
    }
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Self::DEFAULT_BUSY_TIMEOUT,
            read_connections: Self::DEFAULT_READ_CONNECTIONS,
            create_if_missing: true,
            share_file_with_application: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_setters() {
        let d = SqliteOptions::default();
        assert_eq!(d.busy_timeout, Duration::from_secs(5));
        assert_eq!(d.read_connections, 4);
        assert!(d.create_if_missing);
        assert!(!d.share_file_with_application);
        let o = d
            .busy_timeout(Duration::from_millis(10))
            .read_connections(2)
            .create_if_missing(false)
            .share_file_with_application(true);
        assert_eq!(o.busy_timeout, Duration::from_millis(10));
        assert_eq!(o.read_connections, 2);
        assert!(!o.create_if_missing);
        assert!(o.share_file_with_application);
    }

    #[test]
    fn zero_read_connections_is_invalid_input() {
        let err = SqliteOptions::default()
            .read_connections(0)
            .validate()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        assert!(SqliteOptions::default().validate().is_ok());
    }
}
