//! One check of the report ([`Check`], its [`Level`]) and the limits the checks judge by.

use serde::Serialize;

/// How much a check's finding matters.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Level {
    /// Nothing to do.
    Ok,
    /// Something wants an operator's look, but the store is healthy (parked runs up to
    /// `doctor.parked_threshold`).
    Warning,
    /// The store is unhealthy: `cairn doctor` exits 1, `/v1/doctor` answers 503.
    Problem,
}

/// One check's result.
#[derive(Serialize, Debug)]
pub(crate) struct Check {
    /// What was checked (`integrity`, `migrations:cairn`, `storage`, `ready`, `spool`,
    /// `head_caches`, `retention`).
    pub(crate) name: String,
    /// Whether it found no problem (a warning is ok: the store is healthy).
    pub(crate) ok: bool,
    /// `ok`, `warning` or `problem`: what `ok` says, with warnings told apart.
    pub(crate) level: Level,
    /// What was found, without URLs, payloads or space ids.
    pub(crate) detail: String,
    /// The command that repairs the problem, when one exists.
    pub(crate) repair: Option<String>,
}

impl Check {
    pub(super) fn ok(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ok: true,
            level: Level::Ok,
            detail: detail.into(),
            repair: None,
        }
    }
    pub(super) fn warning(
        name: impl Into<String>,
        detail: impl Into<String>,
        repair: &str,
    ) -> Self {
        Self {
            name: name.into(),
            ok: true,
            level: Level::Warning,
            detail: detail.into(),
            repair: Some(repair.to_owned()),
        }
    }
    pub(super) fn problem(
        name: impl Into<String>,
        detail: impl Into<String>,
        repair: Option<&str>,
    ) -> Self {
        Self {
            name: name.into(),
            ok: false,
            level: Level::Problem,
            detail: detail.into(),
            repair: repair.map(str::to_owned),
        }
    }
}

/// What the configuration says is too much.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// `spool.retention_max_bytes`: the cap on run-event bytes.
    pub(crate) retention_cap: u64,
    /// `doctor.parked_threshold`: more parked runs than this are a problem (none: never).
    pub(crate) parked_threshold: Option<u64>,
}

pub(super) fn one(s: &str) -> String {
    crate::error::one_line(s)
}
