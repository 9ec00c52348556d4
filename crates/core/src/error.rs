//! The error type shared by every cairn store.

use crate::ids::EpochId;

/// Result alias with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The driver error behind a cairn error, kept so that [`std::error::Error::source`] reaches it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything a cairn store operation can fail with, by meaning.
///
/// Backends map their driver errors into these variants; callers match on variants, never on
/// message text. Messages say what happened and what to do; they never include a connection
/// string, a secret or an event payload.
///
/// A variant's message never repeats its cause: the error behind it is its
/// [`source`](std::error::Error::source), and [`Error::report`] prints the message with every
/// cause, each once. So the `detail` of [`Error::Conflict`], [`Error::Retryable`],
/// [`Error::Unavailable`], [`Error::Corrupt`], [`Error::StorageFull`] and [`Error::Backend`] says what cairn knows (the
/// engine's code or SQLSTATE, the constraint, what failed) and leaves the driver's own message
/// to the driver error kept as the source. A backend keeps a driver error as the source only
/// when its text cannot hold a secret or a stored value (a connection string, a password, a
/// payload): otherwise it keeps no source and says in the detail what failed (the Postgres
/// backend does so for URL errors, both backends for value conversions).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// One item of a batch (a bulk enqueue, an HTTP batch) was rejected before anything of
    /// the batch was written.
    #[error("batch item {index}: {error}")]
    InvalidBatchItem {
        /// The item's position in the batch, from 0.
        index: usize,
        /// Why it was rejected (an [`Error::InvalidInput`] or [`Error::Reserved`]).
        error: Box<Error>,
    },
    /// Input was rejected before anything was written (empty epoch, oversized payload, …).
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// What was invalid.
        what: &'static str,
        /// Why.
        reason: String,
    },

    /// The named thing does not exist (e.g. a space with no epochs).
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },

    /// A feed cursor was malformed or belongs to another space (restart from the beginning of
    /// the feed, no cursor, or pass a cursor this space's feed returned); or a sync cursor
    /// named an epoch the space does not hold (nothing was written).
    #[error("bad feed cursor: {reason}")]
    BadCursor {
        /// Why it was refused.
        reason: String,
    },

    /// An imported epoch's id does not recompute from its content.
    #[error("epoch id {claimed} does not match its content (recomputed {actual})")]
    HashMismatch {
        /// The id the epoch claimed.
        claimed: EpochId,
        /// The id its content hashes to.
        actual: EpochId,
    },

    /// A sync's receiving store refused an epoch its sending store gave (its id does not
    /// recompute, a parent is in neither store, …): nothing of the batch it was in was
    /// imported, and the sync stopped there. The cause is the
    /// [`source`](std::error::Error::source).
    #[error("epoch {epoch} from {from} was refused; nothing of its batch was imported")]
    EpochRefused {
        /// The refused epoch's claimed id.
        epoch: EpochId,
        /// The sending side, as the sync names it.
        from: String,
        /// Why the receiving store refused it.
        #[source]
        error: Box<Error>,
    },

    /// An imported epoch names a parent this space does not have; import the parent first.
    #[error("parent epoch {parent} is not in this space; import it first")]
    UnknownParent {
        /// The missing parent.
        parent: EpochId,
    },

    /// A uniqueness constraint refused the write (e.g. two writers claimed one seq — a bug or a
    /// writer that ignores the space lock).
    #[error("uniqueness conflict: {detail}")]
    Conflict {
        /// Which constraint or engine code (no row data; the driver's message is the source).
        detail: String,
        /// The driver error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// The store was busy or a serialization/deadlock/lock-timeout error aborted the
    /// transaction. Nothing was written; retrying the whole operation is safe.
    #[error("store busy ({detail}); nothing was written, retry the operation")]
    Retryable {
        /// The backend's code (SQLSTATE or SQLite code; the driver's message is the source).
        detail: String,
        /// The driver error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// The store could not be reached (connection refused, pool closed).
    #[error("store unavailable: {detail}")]
    Unavailable {
        /// What failed, without connection strings (the driver's message is the source).
        detail: String,
        /// The driver error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// The store ran out of space: the disk or file system holding it is full (SQLite's
    /// `SQLITE_FULL`, Postgres's SQLSTATE 53100 `disk_full`). Nothing was written (the
    /// transaction was rolled back); free space or grow the volume, then retry the operation.
    /// Not [`Error::is_retryable`]: an immediate retry meets the same full disk, so a caller
    /// retries after a delay, or after an operator freed space.
    #[error("the store's storage is full ({detail}); nothing was written, free disk space or grow the volume, then retry")]
    StorageFull {
        /// The engine's code (SQLite result code or SQLSTATE; the driver's message is the
        /// source).
        detail: String,
        /// The driver error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// The store's file or schema is not a cairn store or is damaged.
    #[error("store is corrupt or not a cairn store: {detail}; run `cairn doctor` for details")]
    Corrupt {
        /// What was found (the driver's message, when there is one, is the source).
        detail: String,
        /// The driver error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// The store's schema is at a revision this build must not use (a diverged or unrelated
    /// migration history, or one revision recorded with other content), or a contract revision
    /// was not applied because live builds lack it. Nothing was changed; open it with a build
    /// whose history contains the store's revision, or stop the builds in
    /// [`Error::Incompatible::blockers`].
    #[error("incompatible store schema: {detail}")]
    Incompatible {
        /// Which revisions, and why.
        detail: String,
        /// For a contract revision refused because live builds in the store's fleet registry
        /// lack it: those builds (empty for every other refusal).
        blockers: Vec<Blocker>,
    },

    /// A migration revision failed and its upgrade was rolled back: nothing was changed. The
    /// cause is the [`source`](std::error::Error::source) ([`Error::report`] prints both).
    #[error("revision {revision} failed and the upgrade was rolled back")]
    Migration {
        /// The revision whose statement failed.
        revision: String,
        /// The store error that stopped it.
        #[source]
        source: Box<Error>,
    },

    /// A migration revision failed after its upgrade had committed part of its work: a
    /// no-transaction revision commits what ran before it, and runs outside any transaction.
    /// The store stays at `stamp` (`None`: no revision of its set). The cause is the
    /// [`source`](std::error::Error::source).
    #[error("revision {revision} failed; the store stays at {} (no-transaction revisions commit what ran before them), so fix the cause and run the upgrade again", .stamp.as_deref().unwrap_or("no revision"))]
    MigrationPartly {
        /// The revision whose statement failed.
        revision: String,
        /// The stamp the store stays at.
        stamp: Option<String>,
        /// The store error that stopped it.
        #[source]
        source: Box<Error>,
    },

    /// A stored down statement of a revision failed and the whole down was rolled back:
    /// nothing was changed (the store is still at the revision it had). The cause is the
    /// [`source`](std::error::Error::source) ([`Error::report`] prints both).
    #[error("the down SQL of revision {revision} failed and the down was rolled back (nothing was changed)")]
    MigrationDown {
        /// The revision whose down statement failed.
        revision: String,
        /// The store error that stopped it.
        #[source]
        source: Box<Error>,
    },

    /// A name cairn reserves for its own records was given (a space id starting with
    /// [`crate::RESERVED_SPACE_PREFIX`], where the backfill keeps its completion marker; a
    /// producer's run event id starting with [`crate::spool::OPERATOR_EVENT_PREFIX`], the
    /// spool's own events). Nothing was read or written; choose another name.
    #[error("{what} {name} is reserved for cairn's own records; nothing was read or written, choose another name")]
    Reserved {
        /// What kind of name (`space id`, `run event id`).
        what: &'static str,
        /// The name, printable (non-text bytes as `0x…` hex).
        name: String,
    },

    /// The store's file was replaced, moved or removed under this process (another file now
    /// sits at its path, or its `-wal` file is gone or another file). Nothing was written:
    /// writing on would mix this process's writes into the other file. Restart the process to
    /// serve the file now at the path, or put the original file back.
    #[error("the store file {path} is not the file this process opened ({detail}); nothing was written, restart the process or put the original file back")]
    StoreReplaced {
        /// The store's path.
        path: String,
        /// What changed (which file, which identity).
        detail: String,
    },

    /// A store path was refused for safety (symlink, bad permissions).
    #[error("refusing store path {path}: {reason}")]
    UnsafePath {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },

    /// File-system error around the store. The OS error is the
    /// [`source`](std::error::Error::source) ([`Error::report`] prints both).
    #[error("I/O error on {path}")]
    Io {
        /// The path involved.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// Any other backend error, with its code; the driver's message is the
    /// [`source`](std::error::Error::source) ([`Error::report`] prints both). Report it; it is
    /// not expected.
    #[error("{backend} error: {detail}")]
    Backend {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The engine's code or SQLSTATE, and what failed (the driver's message is the source).
        detail: String,
        /// The driver error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    // Spool errors.
    /// No run has this id in this store: it was never enqueued here, or retention removed it
    /// after it finished.
    #[error(
        "run {run} does not exist (never enqueued in this store, or removed by retention after \
         it finished); check the id, or enqueue the work again"
    )]
    UnknownRun {
        /// The id asked for.
        run: crate::spool::RunId,
    },

    /// The lease token is not the run's current one: the lease expired and another claim took
    /// the run (or the run is no longer claimed), or the token was never this run's, so the
    /// presenter does not hold it. Stop working on the run; its holder, if any, owns it.
    #[error(
        "the lease token presented for run {run} is not its current one (the lease expired \
         and the run was claimed again or given back, or the token is another run's); stop \
         working on it and leave it to its holder"
    )]
    LeaseLost {
        /// The run.
        run: crate::spool::RunId,
    },

    /// The run's state does not allow the action (ack of a canceled run, cancel of a finished
    /// one, …). Nothing was written; read the run's state and act on it.
    #[error("cannot {action} a run that is {from}; nothing was changed, read the run's state and act on it")]
    InvalidTransition {
        /// The run's state.
        from: crate::spool::RunState,
        /// What was refused.
        action: crate::spool::Action,
    },

    /// A run fact is already set to a different value. The first writer wins; act on the
    /// existing value instead.
    #[error("fact {name} is already set to a different value; the first writer wins, act on the existing value")]
    FactConflict {
        /// The fact.
        name: crate::spool::FactName,
        /// The value it holds.
        existing: Vec<u8>,
    },

    /// The run takes no more events: its producer closed it ([`crate::Spool::close_run`]) or
    /// it finished (a terminal state). Nothing was appended — the event is refused, never
    /// accepted and dropped; report it to a new run.
    #[error("run {run} takes no more events ({}); nothing was appended, report to a new run", crate::spool::closed_reason(*.state, *.closed))]
    RunClosed {
        /// The run.
        run: crate::spool::RunId,
        /// Its state when the append was refused.
        state: crate::spool::RunState,
        /// Whether it was closed (false: it finished while open).
        closed: bool,
    },
}

impl Error {
    /// Shorthand for [`Error::InvalidInput`].
    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            what,
            reason: reason.into(),
        }
    }

    /// [`Error::Retryable`] without a driver error.
    pub fn retryable(detail: impl Into<String>) -> Self {
        Self::Retryable {
            detail: detail.into(),
            source: None,
        }
    }

    /// [`Error::Conflict`] without a driver error.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::Conflict {
            detail: detail.into(),
            source: None,
        }
    }

    /// [`Error::Unavailable`] without a driver error.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::Unavailable {
            detail: detail.into(),
            source: None,
        }
    }

    /// [`Error::StorageFull`] without a driver error.
    pub fn storage_full(detail: impl Into<String>) -> Self {
        Self::StorageFull {
            detail: detail.into(),
            source: None,
        }
    }

    /// [`Error::Corrupt`] without a driver error.
    pub fn corrupt(detail: impl Into<String>) -> Self {
        Self::Corrupt {
            detail: detail.into(),
            source: None,
        }
    }

    /// [`Error::Backend`] without a driver error.
    pub fn backend(backend: &'static str, detail: impl Into<String>) -> Self {
        Self::Backend {
            backend,
            detail: detail.into(),
            source: None,
        }
    }

    /// Attaches the driver error behind this one (for the variants that carry one:
    /// [`Error::Retryable`], [`Error::Conflict`], [`Error::Unavailable`], [`Error::Corrupt`],
    /// [`Error::StorageFull`], [`Error::Backend`]); other variants are returned unchanged.
    #[must_use]
    pub fn with_source(mut self, err: impl Into<BoxError>) -> Self {
        match &mut self {
            Self::Retryable { source, .. }
            | Self::Conflict { source, .. }
            | Self::Unavailable { source, .. }
            | Self::Corrupt { source, .. }
            | Self::StorageFull { source, .. }
            | Self::Backend { source, .. } => *source = Some(err.into()),
            _ => {}
        }
        self
    }

    /// Whether retrying the whole operation may succeed (busy, serialization failure, deadlock,
    /// lock timeout), including a migration that failed for such a reason.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Retryable { .. } => true,
            Self::Migration { source, .. }
            | Self::MigrationPartly { source, .. }
            | Self::MigrationDown { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// Whether the store refused a write because its storage is full ([`Error::StorageFull`]),
    /// including a migration that failed for that reason.
    pub fn is_storage_full(&self) -> bool {
        match self {
            Self::StorageFull { .. } => true,
            Self::Migration { source, .. }
            | Self::MigrationPartly { source, .. }
            | Self::MigrationDown { source, .. } => source.is_storage_full(),
            _ => false,
        }
    }

    /// Whether this is a uniqueness conflict.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// This error on one line with its causes: what to print for an operator or in a log
    /// (see [`Report`]).
    pub fn report(&self) -> Report<'_> {
        Report::new(self)
    }
}

/// An error and its causes on one line: `message: cause: cause…`.
///
/// A cairn error's `Display` is its own message only; the error behind it (a failed
/// revision's store error, an OS error, a driver's error) is its
/// [`source`](std::error::Error::source), as the standard library's convention asks, so that
/// a reporter does not print a cause twice. This reporter follows the whole chain, so a driver
/// error kept by [`Error::Backend`], [`Error::Conflict`], … appears once, after the detail
/// cairn gives:
///
/// - a cause whose text the line already holds is not printed again (drivers often repeat
///   their inner error in their own message, as sqlx's `error returned from database: …`
///   does), and the chain goes on past it; a driver's cause that repeats the driver error
///   just printed with more words takes its place;
/// - a cause that is not a cairn error is printed with [`escape_control`], so a driver's text
///   that spans lines (SQLite quotes the statement of a syntax error) stays on this one line.
///
/// The chain holds no secret because a backend keeps no driver error whose text could hold one
/// (see [`Error`]).
///
/// ```
/// use cairn::Error;
/// let e = Error::Migration {
///     revision: "0002_spool".into(),
///     source: Box::new(Error::retryable("SQLITE_BUSY")),
/// };
/// assert_eq!(e.to_string(), "revision 0002_spool failed and the upgrade was rolled back");
/// assert_eq!(
///     e.report().to_string(),
///     "revision 0002_spool failed and the upgrade was rolled back: \
///      store busy (SQLITE_BUSY); nothing was written, retry the operation"
/// );
/// let driver = std::io::Error::other("disk I/O error");
/// let e = Error::backend("sqlite", "SQLITE_IOERR (code 10)").with_source(driver);
/// assert_eq!(e.to_string(), "sqlite error: SQLITE_IOERR (code 10)");
/// assert_eq!(e.report().to_string(), "sqlite error: SQLITE_IOERR (code 10): disk I/O error");
/// ```
#[derive(Clone, Copy)]
pub struct Report<'a>(&'a (dyn std::error::Error + 'static));

impl<'a> Report<'a> {
    /// A report of `error` and its causes (any error type: the runner's errors use it too).
    pub fn new(error: &'a (dyn std::error::Error + 'static)) -> Self {
        Self(error)
    }
}

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut line = self.0.to_string();
        // Where the last printed cause starts, when it is a driver's (not cairn's).
        let mut last_foreign: Option<usize> = None;
        let mut next = self.0.source();
        while let Some(cause) = next {
            next = cause.source();
            let ours = cause.is::<Error>() || cause.is::<Box<Error>>();
            let mut text = cause.to_string();
            if !ours {
                text = escape_control(&text).into_owned();
            }
            if line.contains(&text) {
                continue;
            }
            match last_foreign {
                // The driver's inner error repeats the outer one with more words (SQLite's
                // `Error code 11: database disk image is malformed` under its message).
                Some(start) if !ours && text.contains(&line[start..]) => line.truncate(start),
                _ => line.push_str(": "),
            }
            last_foreign = (!ours).then_some(line.len());
            line.push_str(&text);
        }
        f.write_str(&line)
    }
}

impl std::fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A live build that lacks a contract revision: applying the revision would break it (see
/// [`Error::Incompatible::blockers`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Blocker {
    /// The build id.
    pub build: String,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its instance id.
    pub instance: String,
    /// The newest revision of the set it knows.
    pub knows: String,
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field but the pid comes from the store: escaped, so it cannot forge lines.
        write!(
            f,
            "build {} on {} pid {} (knows {})",
            escape_control(&self.build),
            escape_control(&self.host),
            self.pid,
            escape_control(&self.knows)
        )
    }
}

/// `text` with every character that could change how a terminal or a log shows the output
/// escaped as Rust writes it in a string literal — control characters (`\n`, `\r`, `\u{1b}`,
/// …), other characters that do not print (bidirectional overrides, line separators) and the
/// backslash itself (`\\`) — and everything else, quotes included, as it is.
///
/// Build ids, hosts and revision ids come from the store, where any program that can write
/// the store can put anything: printed through this function, an escape sequence followed by
/// a newline stays visibly part of its one field instead of forging output lines. Text with
/// nothing to escape is returned as is.
///
/// ```
/// use cairn::migrate::escape_control;
/// assert_eq!(escape_control("svc-v1"), "svc-v1");
/// assert_eq!(escape_control("a\u{1b}[2K\nb\\"), "a\\u{1b}[2K\\nb\\\\");
/// ```
pub fn escape_control(text: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| c == '"' || c == '\'' || c.escape_debug().len() == 1;
    if text.chars().all(plain) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if plain(c) {
            out.push(c);
        } else {
            out.extend(c.escape_debug());
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn with_source_keeps_the_driver_error_reachable() {
        let io = std::io::Error::other("disk on fire");
        let e = Error::backend("sqlite", "write failed").with_source(io);
        let source = e.source().expect("a source");
        assert_eq!(source.to_string(), "disk on fire");
        // Variants without a source slot are left as they are.
        let e = Error::invalid("x", "y").with_source(std::io::Error::other("z"));
        assert!(e.source().is_none());
    }

    /// Every variant that returns a cause from `source()`, with that cause.
    fn with_causes() -> Vec<(Error, String)> {
        let busy = || Error::retryable("SQLITE_BUSY");
        vec![
            (
                Error::Migration {
                    revision: "0002_spool".into(),
                    source: Box::new(busy()),
                },
                busy().to_string(),
            ),
            (
                Error::MigrationDown {
                    revision: "0003_extra".into(),
                    source: Box::new(busy()),
                },
                busy().to_string(),
            ),
            (
                Error::Io {
                    path: "/var/lib/cairn/store.db".into(),
                    source: std::io::Error::other("disk on fire"),
                },
                "disk on fire".into(),
            ),
        ]
    }

    #[test]
    fn a_cause_is_the_source_and_not_also_in_the_message() {
        for (e, cause) in with_causes() {
            let source = e.source().expect("a source").to_string();
            assert_eq!(source, cause);
            let text = e.to_string();
            assert!(!text.contains(&cause), "{text}");
            // The report prints it once, after the message.
            assert_eq!(e.report().to_string(), format!("{text}: {cause}"));
        }
    }

    #[test]
    fn the_report_prints_a_driver_error_once_and_on_one_line() {
        // A driver error that repeats its inner error in its own message, as sqlx's does.
        let inner = std::io::Error::other("near \"SELEC\": syntax error\n  SELEC 1");
        let driver = Wrapped(format!("error returned from database: {inner}"), inner);
        let e = Error::Migration {
            revision: "0002_spool".into(),
            source: Box::new(
                Error::backend("sqlite", "SQLITE_ERROR (code 1)")
                    .with_source(Box::new(driver) as BoxError),
            ),
        };
        assert_eq!(
            e.report().to_string(),
            "revision 0002_spool failed and the upgrade was rolled back: sqlite error: \
             SQLITE_ERROR (code 1): error returned from database: near \"SELEC\": syntax \
             error\\n  SELEC 1"
        );
        // A driver error whose inner error repeats it with more words, as SQLite's does.
        let inner = std::io::Error::other("Error code 11: database disk image is malformed");
        let driver = Wrapped("database disk image is malformed".into(), inner);
        let e = Error::corrupt("the database file is damaged (SQLITE_CORRUPT, code 11)")
            .with_source(driver);
        assert_eq!(
            e.report().to_string(),
            format!("{e}: Error code 11: database disk image is malformed")
        );
        for variant in [
            Error::conflict("SQLITE_CONSTRAINT_UNIQUE (code 2067)"),
            Error::retryable("SQLSTATE 40001"),
            Error::unavailable("I/O error talking to the server"),
            Error::corrupt("the database file is damaged (SQLITE_CORRUPT, code 11)"),
            Error::storage_full("SQLITE_FULL (code 13)"),
            Error::backend("postgres", "SQLSTATE 42P01"),
        ] {
            let e = variant.with_source(std::io::Error::other("the driver's words"));
            let text = e.to_string();
            assert!(!text.contains("the driver's words"), "{text}");
            assert_eq!(
                e.report().to_string(),
                format!("{text}: the driver's words")
            );
        }
    }

    /// A driver's error type (neither cairn's nor an OS error): its message, and its source.
    #[derive(Debug)]
    struct Wrapped(String, std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    #[test]
    fn a_failed_revision_keeps_its_id_and_cause() {
        let e = Error::Migration {
            revision: "0002_spool".into(),
            source: Box::new(Error::retryable("SQLITE_BUSY")),
        };
        assert!(e.to_string().contains("0002_spool"));
        assert!(matches!(
            e.source()
                .and_then(|s| s.downcast_ref::<Box<Error>>())
                .map(|b| &**b),
            Some(Error::Retryable { .. })
        ));
        // Retrying the open may succeed when the revision failed on a busy store.
        assert!(e.is_retryable());
    }

    #[test]
    fn a_failed_down_says_the_down_was_rolled_back() {
        let e = Error::MigrationDown {
            revision: "0003_extra".into(),
            source: Box::new(Error::retryable("SQLITE_BUSY")),
        };
        let text = e.to_string();
        assert!(text.contains("0003_extra"), "{text}");
        assert!(text.contains("the down was rolled back"), "{text}");
        assert!(!text.contains("upgrade"), "{text}");
        assert!(e.is_retryable());
    }

    #[test]
    fn a_full_store_is_its_own_kind_and_not_retried_at_once() {
        let e = Error::storage_full("SQLSTATE 53100");
        assert!(e.is_storage_full());
        assert!(
            !e.is_retryable(),
            "an immediate retry meets the same full disk"
        );
        let text = e.to_string();
        assert!(text.contains("nothing was written"), "{text}");
        assert!(text.contains("free disk space"), "{text}");
        let failed = Error::Migration {
            revision: "0002_spool".into(),
            source: Box::new(Error::storage_full("SQLITE_FULL (code 13)")),
        };
        assert!(failed.is_storage_full());
        assert!(!Error::retryable("SQLITE_BUSY").is_storage_full());
    }
}
