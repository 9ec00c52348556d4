//! Feature `otel`: W3C trace context between an enqueue and the consumer that handles the run,
//! through tracing-opentelemetry. The enqueuer stores the current span's context with the run
//! ([`TraceParent::current`] into [`EnqueueOptions::traceparent`]
//! (super::EnqueueOptions::traceparent)); the consumer's `cairn.spool.run` span continues it
//! ([`continue_trace`]), so the handler's spans carry the enqueuer's trace id in whatever
//! exporter the service installed.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::ids::TraceParent;

impl TraceParent {
    /// The current `tracing` span's OpenTelemetry context as a `traceparent`, or `None` when
    /// there is no valid one (no span, or no OpenTelemetry layer installed).
    pub fn current() -> Option<Self> {
        let cx = tracing::Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        if !sc.is_valid() {
            return None;
        }
        let text = format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        );
        Self::parse(&text).ok()
    }
}

/// Makes `span` a child of the remote span `parent` names (before the span is entered).
pub(crate) fn continue_trace(span: &tracing::Span, parent: &TraceParent) {
    let (Ok(trace), Ok(id)) = (
        TraceId::from_hex(parent.trace_id()),
        SpanId::from_hex(parent.parent_id()),
    ) else {
        return;
    };
    let flags = if parent.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let remote = SpanContext::new(trace, id, flags, true, TraceState::default());
    let cx = opentelemetry::Context::new().with_remote_span_context(remote);
    let _ = span.set_parent(cx);
}
