//! The API's JSON bodies, and the one rule for bytes.
//!
//! Bytes rule: a byte field `x` travels as `x` (a JSON string holding the bytes as UTF-8 text)
//! or as `x_b64` (standard base64 with padding), never both. Requests may use either form;
//! responses use `x` when the bytes are valid UTF-8 and `x_b64` otherwise. Times are
//! microseconds since the Unix epoch (`*_us`), as the spool stores them.
//!
//! The rules the handlers enforce are stated in the OpenAPI document (issue 21, item 11):
//! patterns and counts here, on the fields; byte limits, the one-of rules of the bytes rule and
//! what a pattern cannot say are added to the document by `openapi::rules`, from the core
//! constants. The conversions beside each body are what the handlers call, after decoding, to
//! turn a body into the core types they hand to the store (and `crate::fuzzing` calls the same
//! ones).

mod bytes;
mod epochs;
mod flow;
mod lease;
mod meta;
mod paths;
mod runs;
mod sync;

pub(crate) use self::bytes::{bytes_in, bytes_out};
pub(crate) use self::epochs::*;
pub(crate) use self::flow::*;
pub(crate) use self::lease::*;
pub(crate) use self::meta::{ErrorBody, ErrorDetail, Health};
pub(crate) use self::paths::{
    FactPath, QueuePath, RunPath, SchedulePath, SpacePath, TraceParentHeader,
};
pub(crate) use self::runs::*;
pub(crate) use self::sync::*;
