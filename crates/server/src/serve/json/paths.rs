//! The path parameters of the routes: `{space}`, `{queue}`, `{id}`, `{name}`.

use serde::Deserialize;
use utoipa::IntoParams;

/// The `{space}` of the epoch routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct SpacePath {
    /// The space: 1 to 256 bytes of UTF-8 (`x-max-bytes`), any characters, but not starting
    /// with NUL + `cairn/` (reserved for cairn's own records: 400 `reserved`). Created by its
    /// first epoch.
    #[param(min_length = 1)]
    pub(crate) space: String,
}

/// The `{queue}` of the queue routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documentation only: the spool's handlers take the segments as strings.
pub(crate) struct QueuePath {
    /// The queue: 1 to 128 bytes of UTF-8 (`x-max-bytes`) without control characters.
    #[param(min_length = 1, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub(crate) queue: String,
}

/// The `{id}` of the run routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documentation only: the spool's handlers take the segments as strings.
pub(crate) struct RunPath {
    /// The run id: 32 hex digits, plain or as a UUID (8-4-4-4-12).
    #[param(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) id: String,
}

/// The `{id}` and `{name}` of a fact route.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documentation only: the spool's handlers take the segments as strings.
pub(crate) struct FactPath {
    /// The run id: 32 hex digits, plain or as a UUID (8-4-4-4-12).
    #[param(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) id: String,
    /// The fact's name: 1 to 128 bytes of UTF-8 (`x-max-bytes`) without control characters.
    #[param(min_length = 1, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub(crate) name: String,
}

/// The `{name}` of the schedule routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documentation only: the handlers take the segment as a string.
pub(crate) struct SchedulePath {
    /// The schedule's name: 1 to 128 bytes of UTF-8 (`x-max-bytes`) without control
    /// characters.
    #[param(min_length = 1, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub(crate) name: String,
}

/// The W3C trace-context header an enqueue may carry.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Documentation only: the handler reads the header itself.
pub(crate) struct TraceParentHeader {
    /// The enqueuer's trace context (W3C `traceparent`, version 00: `00-` then 32, 16 and 2
    /// lowercase hex digits joined by `-`; neither id all zeros), stored with the run so the
    /// consumer's span continues that trace.
    #[param(pattern = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")]
    pub(crate) traceparent: Option<String>,
}
