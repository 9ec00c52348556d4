//! The request extractors whose rejections take the API's error shape: a JSON body
//! ([`Body`], read the same way by [`decode_body`]), a query string ([`Params`]) and path
//! parameters ([`PathArgs`]).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::body::BodyError;
use super::error::ApiError;

/// A JSON request body. Unlike `axum::Json` it ignores `Content-Type` and answers every
/// rejection (too large, unreadable, malformed, wrong shape) in the API's error shape.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if let Some(e) = BodyError::find(&rejection) {
                e.answer(None)
            } else if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    "the request body is over the server's limit (--max-body-bytes); nothing was written",
                )
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    format!("cannot read the request body: {}", rejection.body_text()),
                )
            }
        })?;
        decode_body(&bytes).map(Body)
    }
}

/// Reads a request body as `T`: what [`Body`] does once the bytes are in (400 `invalid_input`
/// for anything that is not a JSON object of `T`'s shape). Every body of the API is an object:
/// serde would also read a struct from a JSON array of its fields in order, which the document
/// does not allow (and `[]` would then be a valid body of all-optional fields).
pub(crate) fn decode_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|b| *b != b'{') {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "the body must be a JSON object; nothing was written",
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("malformed JSON body: {e}; nothing was written"),
        )
    })
}

/// A query string, rejected in the API's error shape.
pub(crate) struct Params<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Params(q.0))
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    format!("bad query string: {}", e.body_text()),
                )
            })
    }
}

/// Path parameters, rejected in the API's error shape.
pub(crate) struct PathArgs<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathArgs<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathArgs(p.0))
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    format!("bad path: {}", e.body_text()),
                )
            })
    }
}
