//! The legacy format's names and limits (`docs/LEGACY_FORMAT.md`): its files and the longest
//! record line. A leaf module.

/// The installed checkpoint.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// A checkpoint being written when the daemon stopped; never read, only backed up.
pub const CHECKPOINT_TMP_FILE: &str = "checkpoint.tmp";
/// The run log.
pub const WAL_FILE: &str = "runs.wal";
/// The submission spool the offline hook appends to.
pub const SPOOL_FILE: &str = "gate.spool";
/// Longest record line, in bytes without its newline (8 MiB: a 1 MiB payload escaped by
/// JSON, with room to spare).
pub const MAX_LEGACY_LINE: usize = 8 * 1024 * 1024;
