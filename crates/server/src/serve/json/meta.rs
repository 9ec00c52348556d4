//! The bodies every route shares: the health answer and the error body.

use serde::Serialize;
use utoipa::ToSchema;

/// `GET /healthz` and `GET /readyz`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok`.
    pub(crate) status: String,
}

/// The body of every error response.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// The error.
    pub(crate) error: ErrorDetail,
}

/// What went wrong.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// A stable, machine-readable code (`invalid_input`, `invalid_batch_item`, `bad_cursor`,
    /// `reserved`, `unauthorized`, `forbidden`, `not_found`, `unknown_run`, `conflict`,
    /// `lease_lost`, `fact_conflict`, `invalid_transition`, `run_closed`, `body_too_large`,
    /// `hash_mismatch`, `unknown_parent`, `retryable`, `unavailable`, `store_replaced`,
    /// `timeout`, `too_many_waiters`, `method_not_allowed`, `internal`).
    pub(crate) code: String,
    /// What happened and what to do, for people.
    pub(crate) message: String,
    /// For an error about one item of a batch (`invalid_batch_item`, or an op of
    /// `POST /v1/batch` the store refused): the item's position in the batch, from 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) index: Option<usize>,
}
