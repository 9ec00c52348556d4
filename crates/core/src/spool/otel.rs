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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Keeps every span the provider exports, to compare with what `current` returned.
    #[derive(Clone, Debug, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    /// Runs `f` under a subscriber with a tracing-opentelemetry layer over a tracer provider
    /// that exports each ended span at once; returns `f`'s answer and the exported spans.
    fn traced<T>(f: impl FnOnce() -> T) -> (T, Vec<SpanData>) {
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let out = tracing::subscriber::with_default(subscriber, f);
        provider.force_flush().unwrap();
        let spans = kept.0.lock().unwrap().clone();
        (out, spans)
    }

    #[test]
    fn inside_a_span_it_is_that_spans_trace_and_span_id() {
        let (tp, spans) = traced(|| {
            let span = tracing::info_span!("enqueuer");
            let inside = span.in_scope(TraceParent::current);
            drop(span);
            inside
        });
        let tp = tp.expect("a span under the OpenTelemetry layer has a context");
        let [span] = spans.as_slice() else {
            panic!("one span exported: {spans:?}");
        };
        assert_eq!(span.name, "enqueuer");
        let sc = &span.span_context;
        assert_eq!(tp.trace_id(), sc.trace_id().to_string());
        assert_eq!(
            tp.parent_id(),
            sc.span_id().to_string(),
            "the span's own id"
        );
        assert!(tp.sampled(), "sampled by the default sampler");
        assert!(sc.is_sampled());
        assert_eq!(
            tp.as_str(),
            format!("00-{}-{}-01", sc.trace_id(), sc.span_id())
        );
    }

    #[test]
    fn a_span_continuing_a_trace_gives_its_trace_id_its_own_span_id_and_the_sampled_flag() {
        for (flags, sampled) in [("01", true), ("00", false)] {
            let parent = TraceParent::parse(&format!(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}"
            ))
            .unwrap();
            let (tp, _) = traced(|| {
                let span = tracing::info_span!("run");
                continue_trace(&span, &parent);
                span.in_scope(TraceParent::current)
            });
            let tp = tp.expect("a context");
            assert_eq!(tp.trace_id(), parent.trace_id(), "{flags}");
            assert_ne!(tp.parent_id(), parent.parent_id(), "a span of its own");
            assert_eq!(tp.sampled(), sampled, "{flags}");
        }
    }

    #[test]
    fn outside_any_span_or_without_the_layer_it_is_none() {
        let (outside, spans) = traced(TraceParent::current);
        assert_eq!(outside, None);
        assert!(spans.is_empty());
        // A span, but no OpenTelemetry layer: no context either.
        let plain = tracing_subscriber::registry();
        let without = tracing::subscriber::with_default(plain, || {
            tracing::info_span!("plain").in_scope(TraceParent::current)
        });
        assert_eq!(without, None);
    }
}
