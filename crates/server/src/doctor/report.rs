//! The report: every check in order, on a store named by URL or the one a server serves.

use cairn::migrate::Diagnostics;
use cairn::migrate::{MigrationSet, Migrations};
use cairn::DatabaseUrl;
use serde::Serialize;

use super::check::{Check, Limits};
use super::migrations::migrations;
use super::spool::store_checks;
use super::store::{indexes, integrity, ready, scratch, storage};
use crate::open::{open, IfMissing};

/// The whole report.
#[derive(Serialize, Debug)]
pub(crate) struct Report {
    /// No check found a problem.
    pub(crate) healthy: bool,
    /// The checks, in the order they ran.
    pub(crate) checks: Vec<Check>,
}

/// What a running server hands doctor: its own handles on the open store.
pub(crate) struct Serving<'a> {
    /// The store's spool.
    pub(crate) spool: &'a dyn cairn::Spool,
    /// The store's epoch-log diagnostics.
    pub(crate) diagnostics: &'a dyn cairn::EpochDiagnostics,
    /// The store's own diagnostics (integrity, scratch leftovers), on its connections.
    pub(crate) store: &'a dyn Diagnostics,
    /// The store's migration state, on its own connections (no connection of its own per
    /// request).
    pub(crate) migrations: &'a Migrations,
    /// Writes the server saw refused because the store's storage is full, since the last
    /// write that stored something.
    pub(crate) storage: Option<crate::serve::storage::Refusals>,
}

/// Runs every check against `target`. `app` is an application's set to report on as well.
/// With `serving`, the store checks use a running server's handles instead of opening the
/// store again.
pub(crate) async fn report(
    target: &DatabaseUrl,
    app: Option<MigrationSet>,
    limits: Limits,
    serving: Option<Serving<'_>>,
) -> Report {
    let mut checks = Vec::new();
    let own = serving.as_ref().map(|s| s.store);
    let integrity = integrity(target, own).await;
    let intact = integrity.ok;
    checks.push(integrity);
    checks.push(scratch(target, own).await);
    let mut openable = false;
    if intact {
        checks.push(indexes(target, own).await);
        let mut sets = vec![cairn::migrate::cairn_set()];
        sets.extend(app);
        for (i, set) in sets.into_iter().enumerate() {
            let served = serving.as_ref().map(|s| s.migrations);
            let (check, serves) = migrations(target, served, set).await;
            if i == 0 {
                openable = serves;
            }
            checks.push(check);
        }
    }
    let refused = serving.as_ref().and_then(|s| s.storage.as_ref());
    checks.extend(storage(target, own, refused).await);
    if let Some(serving) = serving {
        checks.push(ready(serving.diagnostics).await);
        checks.extend(store_checks(serving.spool, serving.diagnostics, limits).await);
    } else if openable {
        match open(target, IfMissing::Refuse).await {
            Ok(store) => {
                let (spool, diag) = (store.spool(), store.diagnostics());
                checks.extend(store_checks(spool.as_ref(), diag.as_ref(), limits).await);
                let _ = store.close().await;
            }
            Err(e) => checks.push(Check::problem(
                "open",
                crate::error::one_line(&e.to_string()),
                None,
            )),
        }
    }
    Report {
        healthy: checks.iter().all(|c| c.ok),
        checks,
    }
}
