//! Typed error responses: `{"error": {"code", "message"}}` with the status the error's meaning
//! calls for (the extractors whose rejections take the same shape are in [`super::extract`]).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::json::{ErrorBody, ErrorDetail};
use super::storage::FullAnswer;
use crate::error::one_line;

/// The code of a write refused because the store's storage is full (503, retried after
/// `Retry-After`); the server remembers it for `/readyz` and `/v1/doctor`.
pub(crate) const STORAGE_FULL: &str = "storage_full";

/// An error answer: a status, a stable code and a one-line message.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// The position of the batch item the error is about, from 0.
    pub(crate) index: Option<usize>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: one_line(&message.into()),
            index: None,
        }
    }

    /// The store's refusal of op `index` of a batch, which was rolled back: the error's own
    /// status and code, the message naming the op and saying that nothing was written.
    pub(crate) fn in_op(self, index: usize) -> Self {
        Self {
            message: format!(
                "op {index}: {}; the batch was rolled back, nothing of it was written",
                self.message
            ),
            index: Some(index),
            ..self
        }
    }

    /// 400 `invalid_input`.
    pub(crate) fn invalid(what: &str, reason: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("invalid {what}: {reason}"),
        )
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid bearer token is required: send `Authorization: Bearer <token>`",
        )
    }

    pub(crate) fn forbidden() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this token is read-only; changing the store needs a full-access token",
        )
    }
}

/// What an `unavailable` answer adds to its message.
const UNAVAILABLE_WRITE: &str =
    "; a write may or may not have taken effect: check before retrying one that is not idempotent";

impl From<cairn::Error> for ApiError {
    fn from(e: cairn::Error) -> Self {
        use cairn::Error as E;
        let (status, code) = match &e {
            E::InvalidInput { .. } => (StatusCode::BAD_REQUEST, "invalid_input"),
            E::InvalidBatchItem { .. } => (StatusCode::BAD_REQUEST, "invalid_batch_item"),
            E::BadCursor { .. } => (StatusCode::BAD_REQUEST, "bad_cursor"),
            E::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
            E::UnknownRun { .. } => (StatusCode::NOT_FOUND, "unknown_run"),
            E::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
            E::LeaseLost { .. } => (StatusCode::CONFLICT, "lease_lost"),
            E::FactConflict { .. } => (StatusCode::CONFLICT, "fact_conflict"),
            E::InvalidTransition { .. } => (StatusCode::CONFLICT, "invalid_transition"),
            E::RunClosed { .. } => (StatusCode::CONFLICT, "run_closed"),
            E::HashMismatch { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "hash_mismatch"),
            E::UnknownParent { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "unknown_parent"),
            E::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            E::Reserved { .. } => (StatusCode::BAD_REQUEST, "reserved"),
            E::StoreReplaced { .. } => (StatusCode::SERVICE_UNAVAILABLE, "store_replaced"),
            _ if e.is_storage_full() => (StatusCode::SERVICE_UNAVAILABLE, STORAGE_FULL),
            _ if e.is_retryable() => (StatusCode::SERVICE_UNAVAILABLE, "retryable"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        let index = match &e {
            E::InvalidBatchItem { index, .. } => Some(*index),
            _ => None,
        };
        // With its causes (an OS error, a failed revision's store error), as the CLI prints it.
        let mut message = e.report().to_string();
        if matches!(e, E::Unavailable { .. }) {
            // The connection may have broken after the server committed (a lost answer to
            // COMMIT): a retried write without a dedup key could then be stored twice.
            message.push_str(UNAVAILABLE_WRITE);
        }
        Self {
            index,
            ..Self::new(status, code, message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry = self.status == StatusCode::SERVICE_UNAVAILABLE;
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
                index: self.index,
            },
        };
        let full = (self.code == STORAGE_FULL).then(|| body.error.message.clone());
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(message) = full {
            // For `storage::observe`, which remembers it for `/readyz` and doctor.
            response.extensions_mut().insert(FullAnswer(message));
        }
        if retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_their_status() {
        let run = cairn::RunId([7; 16]);
        for (err, status, code) in [
            (cairn::Error::invalid("x", "y"), 400, "invalid_input"),
            (
                cairn::Error::BadCursor { reason: "r".into() },
                400,
                "bad_cursor",
            ),
            (cairn::Error::UnknownRun { run }, 404, "unknown_run"),
            (cairn::Error::LeaseLost { run }, 409, "lease_lost"),
            (
                cairn::Error::RunClosed {
                    run,
                    state: cairn::RunState::Claimed,
                    closed: true,
                },
                409,
                "run_closed",
            ),
            (cairn::Error::conflict("c"), 409, "conflict"),
            (cairn::Error::retryable("busy"), 503, "retryable"),
            (cairn::Error::unavailable("down"), 503, "unavailable"),
            (cairn::Error::corrupt("bad"), 500, "internal"),
            (
                cairn::Error::storage_full("SQLITE_FULL (code 13)"),
                503,
                "storage_full",
            ),
            (
                cairn::Error::Reserved {
                    what: "space id",
                    name: "0x00".into(),
                },
                400,
                "reserved",
            ),
            (
                cairn::Error::StoreReplaced {
                    path: "p".into(),
                    detail: "d".into(),
                },
                503,
                "store_replaced",
            ),
        ] {
            let e = ApiError::from(err);
            assert_eq!((e.status.as_u16(), e.code), (status, code));
            assert_eq!(e.index, None);
        }
        // Only `unavailable` says a write may have taken effect: a broken connection can hide
        // a commit; the other refusals wrote nothing.
        let down = ApiError::from(cairn::Error::unavailable("down"));
        assert!(
            down.message.ends_with(UNAVAILABLE_WRITE),
            "{}",
            down.message
        );
        let busy = ApiError::from(cairn::Error::retryable("busy"));
        assert!(!busy.message.contains("may or may not"), "{}", busy.message);
        let item = ApiError::from(cairn::Error::InvalidBatchItem {
            index: 3,
            error: Box::new(cairn::Error::invalid("run payload", "too large")),
        });
        assert_eq!(
            (item.status.as_u16(), item.code, item.index),
            (400, "invalid_batch_item", Some(3))
        );
        assert!(
            item.message.starts_with("batch item 3: "),
            "{}",
            item.message
        );
        let op = ApiError::from(cairn::Error::UnknownRun { run }).in_op(2);
        assert_eq!(
            (op.status.as_u16(), op.code, op.index),
            (404, "unknown_run", Some(2))
        );
        assert!(op.message.starts_with("op 2: "), "{}", op.message);
    }
}
