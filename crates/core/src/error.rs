//! The error type shared by every cairn store.

use crate::types::EpochId;

/// Result alias with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a cairn store operation can fail with, by meaning.
///
/// Backends map their driver errors into these variants; callers match on variants, never on
/// message text. Messages say what happened and what to do; they never include a connection
/// string, a secret or an event payload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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

    /// A feed cursor was malformed or belongs to another space. Restart from the beginning of
    /// the feed (no cursor) or pass a cursor this space's feed returned.
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
        /// Which constraint, in the backend's words (no row data).
        detail: String,
    },

    /// The store was busy or a serialization/deadlock/lock-timeout error aborted the
    /// transaction. Nothing was written; retrying the whole operation is safe.
    #[error("store busy ({detail}); nothing was written, retry the operation")]
    Retryable {
        /// The backend's code (SQLSTATE or SQLite code).
        detail: String,
    },

    /// The store could not be reached (connection refused, pool closed).
    #[error("store unavailable: {detail}")]
    Unavailable {
        /// What failed, without connection strings.
        detail: String,
    },

    /// The store's file or schema is not a cairn store or is damaged.
    #[error("store is corrupt or not a cairn store: {detail}; run `cairn doctor` for details")]
    Corrupt {
        /// What was found.
        detail: String,
    },

    /// The store's schema is at a revision this build must not use (a diverged or unrelated
    /// migration history, or one revision recorded with other content). Nothing was changed;
    /// open it with a build whose history contains the store's revision.
    #[error("incompatible store schema: {detail}")]
    Incompatible {
        /// Which revisions, and why.
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

    /// File-system error around the store.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// Any other backend error, with its code. Report it; it is not expected.
    #[error("{backend} error: {detail}")]
    Backend {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The driver's message and code.
        detail: String,
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

    /// [`Error::NotFound`] for a space that has no epoch.
    pub fn space_not_found(space: &crate::SpaceId) -> Self {
        Self::NotFound {
            what: format!("space {space}"),
        }
    }

    /// Whether retrying the whole operation may succeed (busy, serialization failure, deadlock,
    /// lock timeout).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Retryable { .. })
    }

    /// Whether this is a uniqueness conflict.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }
}
