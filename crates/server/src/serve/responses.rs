//! The error answers many routes document alike, written once for their OpenAPI annotations:
//! a route lists the type (`responses((status = 200, …), NoToken, ReadOnly)`) and the document
//! states the same response as the tuple `(status = 401, description = "No valid token", body =
//! ErrorBody)` would. A leaf: the types are never built, only their responses are read.

// Each type is a tuple struct over the body so that `IntoResponses` documents the body by
// reference to the `ErrorBody` schema, as `body = ErrorBody` does; nothing constructs them.
#![allow(dead_code)]

use utoipa::IntoResponses;

use super::json::ErrorBody;

/// 401: the request carries no valid bearer token.
#[derive(IntoResponses)]
#[response(status = 401, description = "No valid token")]
pub(crate) struct NoToken(ErrorBody);

/// 403: a read-only token asked to change the store.
#[derive(IntoResponses)]
#[response(status = 403, description = "Read-only token")]
pub(crate) struct ReadOnly(ErrorBody);

/// 404: the run named by the path does not exist.
#[derive(IntoResponses)]
#[response(status = 404, description = "No such run")]
pub(crate) struct NoSuchRun(ErrorBody);

/// 400: the body, path or query does not read.
#[derive(IntoResponses)]
#[response(status = 400, description = "Invalid input")]
pub(crate) struct InvalidInput(ErrorBody);

/// 400: a space route's body does not read, or names a reserved space.
#[derive(IntoResponses)]
#[response(
    status = 400,
    description = "Invalid input, or a reserved space id (`reserved`)"
)]
pub(crate) struct InvalidInputOrReserved(ErrorBody);

/// 400: the run id in the path is not one.
#[derive(IntoResponses)]
#[response(status = 400, description = "Malformed id")]
pub(crate) struct MalformedId(ErrorBody);

/// 404: the space has no epoch.
#[derive(IntoResponses)]
#[response(status = 404, description = "The space has no epoch")]
pub(crate) struct NoEpoch(ErrorBody);

/// 409: the lease the request names is no longer the run's.
#[derive(IntoResponses)]
#[response(status = 409, description = "Lease lost or run not claimed")]
pub(crate) struct LeaseLost(ErrorBody);

/// 409: a retry of a run that is not parked.
#[derive(IntoResponses)]
#[response(
    status = 409,
    description = "The run is not parked (`invalid_transition`, naming its state); nothing was changed"
)]
pub(crate) struct NotParked(ErrorBody);

/// 413: the body is over `--max-body-bytes`.
#[derive(IntoResponses)]
#[response(status = 413, description = "Body too large")]
pub(crate) struct TooLarge(ErrorBody);

/// 413: a write's body is over `--max-body-bytes`; nothing was written.
#[derive(IntoResponses)]
#[response(status = 413, description = "Body too large; nothing was written")]
pub(crate) struct TooLargeNothingWritten(ErrorBody);

/// 503: a single write or read the store could not do now.
#[derive(IntoResponses)]
#[response(
    status = 503,
    description = "Busy or unavailable; retry (`unavailable` on a write: the connection to the store broke and the write may or may not have taken effect)"
)]
pub(crate) struct Busy(ErrorBody);

/// 503: a batch the store could not do now.
#[derive(IntoResponses)]
#[response(
    status = 503,
    description = "Busy or unavailable; retry (`retryable`, `storage_full`: nothing was written; `unavailable`: the connection to the store broke and the batch may or may not have committed)"
)]
pub(crate) struct BatchBusy(ErrorBody);

/// 404: the schedule named by the path does not exist.
#[derive(IntoResponses)]
#[response(status = 404, description = "No such schedule")]
pub(crate) struct NoSuchSchedule(ErrorBody);

/// 422: a cron expression or time zone the scheduler cannot read.
#[derive(IntoResponses)]
#[response(
    status = 422,
    description = "The cron expression or time zone does not parse (`invalid_schedule`, naming which); nothing was stored"
)]
pub(crate) struct InvalidSchedule(ErrorBody);
