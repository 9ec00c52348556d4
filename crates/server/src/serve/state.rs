//! The state every handler reads ([`AppState`]) and what doctor's report is about
//! ([`Target`]). A leaf: it names the shared values' types and no handler.

use std::sync::Arc;

use cairn::{DatabaseUrl, EpochDiagnostics, EpochStore, Spool};

use super::metrics::Metrics;
use super::storage::Watch;
use super::ui::Ui;
use super::wake::SyncHub;

/// What every handler reads: the store (for transactions) and its capabilities, the metrics
/// and what doctor needs.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) store: cairn::Store,
    pub(crate) epochs: Arc<dyn EpochStore>,
    pub(crate) spool: Arc<dyn Spool>,
    pub(crate) diagnostics: Arc<dyn EpochDiagnostics>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) doctor: Arc<Target>,
    /// The dashboard's sessions and rates, when `/ui` is served.
    pub(crate) ui: Option<Arc<Ui>>,
    /// Most bytes of JSON a feed or run-events page holds before it ends early
    /// (`limits.max_page_bytes`); its first item always goes out.
    pub(crate) page_bytes: usize,
    /// The sync routes' wake-up, long-poll bound and limits.
    pub(crate) sync: Arc<SyncHub>,
}

/// What the report is about: the store the server serves and the configured retention cap.
pub(crate) struct Target {
    /// The store's URL (never printed).
    pub(crate) url: DatabaseUrl,
    /// `spool.retention_max_bytes`.
    pub(crate) retention_max_bytes: u64,
    /// `doctor.parked_threshold`.
    pub(crate) parked_threshold: Option<u64>,
    /// The open store's own diagnostics (integrity, scratch leftovers).
    pub(crate) store: std::sync::Arc<dyn cairn::migrate::Diagnostics>,
    /// The open store's migration state, read through its own connections.
    pub(crate) migrations: cairn::migrate::Migrations,
    /// Writes refused because the store's storage is full.
    pub(crate) storage: Watch,
}
