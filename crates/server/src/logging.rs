//! `cairn serve`'s log lines: tracing events written to stderr by tracing-subscriber, as text
//! or as one JSON object per line (`[log] format`), filtered by `[log] level`.
//!
//! What is logged is chosen where it is emitted: request lines carry the method's and the
//! route's metric labels (an unmatched path is never logged), the status, the latency, the user
//! agent and a made-up method as sent, each client-chosen value clipped to [`FIELD_MAX`] bytes by
//! [`clip`]; the backfill, the retention pass and the delivery worker log counts, outcomes and
//! error codes. No event carries another header, a token, a URL, a payload or a space id.

use std::borrow::Cow;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

mod watched;

/// The most bytes of a client-chosen value (a user agent, an invented method) a log line
/// carries; longer values are clipped and end with `…`.
pub(crate) const FIELD_MAX: usize = 64;

/// `value` clipped to [`FIELD_MAX`] bytes (at a character boundary, then `…`), so that a client
/// cannot make a log line longer than the fields' sum.
pub(crate) fn clip(value: &str) -> Cow<'_, str> {
    if value.len() <= FIELD_MAX {
        return Cow::Borrowed(value);
    }
    let mut end = FIELD_MAX;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…", &value[..end]))
}

/// Checks a level or filter directive; the problem as a line naming the key.
///
/// Field values in span filters (`target[span{field=value}]`) match literally, never as
/// regular expressions: tracing-subscriber compiles such a regex into a dense DFA, and a
/// directive like `x[{f=(a|b)*a(a|b)(a|b)…}]` then takes minutes and gigabytes to parse (found
/// by the `config` fuzz target).
///
/// Each comma-separated directive is trimmed before tracing-subscriber sees it: its parser (0.3)
/// walks a directive trimmed but slices it untrimmed, so a space after a comma shifted every
/// index (`info, cairn::http=warn` was refused) and a space before a multi-byte character
/// panicked (found by the `config` fuzz target).
pub(crate) fn check_level(level: &str) -> Result<EnvFilter, String> {
    let directives = level
        .split(',')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(",");
    EnvFilter::builder()
        .with_regex(false)
        .parse(&directives)
        .map_err(|_| "log.level: expected a level (error, warn, info, debug, trace) or a tracing filter directive".to_owned())
}

/// Where `cairn serve` sends spans over OTLP (`[otel]`).
#[derive(Clone, Debug)]
pub(crate) struct OtelSettings {
    /// The collector's OTLP/HTTP traces endpoint.
    pub(crate) endpoint: String,
    /// The `service.name` of every span.
    pub(crate) service_name: String,
}

/// Longest `otel.service_name`, in bytes.
const MAX_SERVICE_NAME: usize = 128;

/// Checks `[otel]`: no endpoint is no export; an endpoint is an `http` or `https` URL without
/// credentials in it (a collector's token belongs in a header, which cairn does not send).
pub(crate) fn check_otel(
    section: &crate::config::OtelSection,
) -> Result<Option<OtelSettings>, String> {
    let name = &section.service_name;
    if name.is_empty() || name.len() > MAX_SERVICE_NAME || name.chars().any(char::is_control) {
        return Err(format!(
            "otel.service_name: 1 to {MAX_SERVICE_NAME} bytes without control characters"
        ));
    }
    let Some(endpoint) = &section.endpoint else {
        return Ok(None);
    };
    let url = reqwest::Url::parse(endpoint)
        .map_err(|_| "otel.endpoint: expected a URL such as http://127.0.0.1:4318/v1/traces")?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err("otel.endpoint: expected an http:// or https:// URL with a host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("otel.endpoint: must not hold a user name or password".to_owned());
    }
    Ok(Some(OtelSettings {
        endpoint: endpoint.clone(),
        service_name: name.clone(),
    }))
}

/// What must be flushed before the process exits: the span exporter, when one runs.
pub(crate) struct Installed {
    tracer: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Installed {
    /// Exports the spans still buffered (bounded by the exporter's own timeout).
    pub(crate) fn flush(self) {
        if let Some(provider) = self.tracer {
            if let Err(e) = provider.shutdown() {
                tracing::warn!(target: "cairn::serve", error = %e, "spans not all exported");
            }
        }
    }
}

/// Installs the subscriber for the rest of the process: log lines on stderr, and with
/// `otel`, the spans of the `cairn` targets at `info` and above exported over OTLP/HTTP
/// (JSON) in batches, continuing a run's enqueuer trace where the run carries one. A second
/// call (never made by the binary) leaves the first in place.
pub(crate) fn init(filter: EnvFilter, format: LogFormat, otel: Option<&OtelSettings>) -> Installed {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .boxed(),
    };
    let (tracer, otel_layer) = match otel.map(exporter) {
        Some(Ok(provider)) => {
            use opentelemetry::trace::TracerProvider as _;
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("cairn"))
                .with_filter(
                    tracing_subscriber::filter::Targets::new()
                        .with_target("cairn", tracing::Level::INFO),
                );
            (Some(provider), Some(layer))
        }
        Some(Err(e)) => {
            eprintln!("otel: the exporter cannot start, no spans are exported: {e}");
            (None, None)
        }
        None => (None, None),
    };
    let _ = tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel_layer)
        .try_init();
    Installed { tracer }
}

/// The OTLP/HTTP exporter, watched for failed exports ([`watched::Watched`]: a warning in the
/// log, at most one a minute), and its batching tracer provider.
fn exporter(
    otel: &OtelSettings,
) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(&otel.endpoint)
        .with_headers(std::collections::HashMap::new())
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(otel.service_name.clone())
        .build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(watched::Watched::new(exporter))
        .with_resource(resource)
        .build())
}

#[cfg(test)]
mod tests {
    use super::{check_level, clip, FIELD_MAX};

    #[test]
    fn client_values_are_clipped_at_a_character_boundary() {
        assert_eq!(clip("curl/8"), "curl/8");
        let long = "é".repeat(100);
        let clipped = clip(&long);
        assert!(clipped.len() <= FIELD_MAX + '…'.len_utf8(), "{clipped}");
        assert!(clipped.ends_with('…'));
        assert!(long.starts_with(clipped.trim_end_matches('…')));
    }

    #[test]
    fn a_space_after_a_comma_leaves_the_directive_intact() {
        let filter = check_level("info, cairn::http=warn").unwrap().to_string();
        assert!(
            filter.split(',').any(|d| d == "cairn::http=warn"),
            "{filter}"
        );
    }

    #[test]
    fn a_space_before_a_multi_byte_character_neither_panics_nor_shifts_the_target() {
        let filter = check_level("info, \u{78a}=debug").unwrap().to_string();
        assert!(filter.split(',').any(|d| d == "\u{78a}=debug"), "{filter}");
        assert!(check_level(" \u{78a}=========8914143662319").is_err());
    }
}
