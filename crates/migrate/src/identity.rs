//! How cairn's own migration set is told apart from an application's: its name, and the
//! revisions it released with the combined checksum.
//!
//! A leaf: the set's revisions ([`crate::cairn_set`]), the rules of every set
//! ([`crate::MigrationSet`]) and the refusals read these without depending on each other.

/// Name under which cairn's own schema is stamped.
pub const CAIRN_SET: &str = "cairn";

/// The revisions of cairn's set released with the combined checksum
/// ([`crate::ChecksumForm::Combined`]); they keep it for good. Never add to this list: a new
/// revision uses the per-dialect form.
pub(crate) const COMBINED_CHECKSUM_REVISIONS: [&str; 2] = ["0001_epoch_log", "0002_spool"];
