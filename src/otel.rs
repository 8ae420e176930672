//! Optional OTLP export of Courier's delivery spans (`[tracing] otlp_endpoint`).
//!
//! Off by default, and then nothing here runs per event. On, each delivery gets
//! a span (`deliver`, target `courier::otel`) that is a child of the event's
//! trace context (CloudEvents `traceparent` attribute or Kafka header) or the
//! root of a new trace, sampled parent-based with `tracing.sample_ratio` for new
//! traces; the request to the API then carries Courier's span as its parent.
//! Spans go out in batches over OTLP/HTTP (protobuf) from the SDK's own thread.

use crate::config::TracingConfig;
use crate::core::trace::TraceContext;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{Layer, Registry};

/// The layer exporting Courier's spans, over the subscriber's registry.
pub type OtelLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// The target of the spans exported (the OTLP layer sees only these).
pub(crate) const TARGET: &str = "courier::otel";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether OTLP export is on (set once at start).
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

#[derive(Debug, thiserror::Error)]
#[error("cannot set up OTLP export to tracing.otlp_endpoint: {0}")]
pub struct OtelError(String);

/// Flushes and stops the exporter when dropped (at the end of `courier run`).
pub struct Otel {
    provider: SdkTracerProvider,
}

impl Drop for Otel {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("OTLP export: flushing the last spans failed: {e}");
        }
    }
}

/// The layer that exports `courier::otel` spans, and its guard; `None` when
/// `tracing.otlp_endpoint` is unset.
pub fn init(cfg: &TracingConfig) -> Result<Option<(Otel, OtelLayer)>, OtelError> {
    let Some(endpoint) = &cfg.otlp_endpoint else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint.clone())
        .with_timeout(std::time::Duration::from_secs(5))
        .build()
        .map_err(|e| OtelError(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            cfg.sample_ratio,
        ))))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(cfg.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("courier");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() == TARGET
        }));
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some((Otel { provider }, Box::new(layer))))
}

/// The delivery span of an event (call only when [`enabled`]): a child of the
/// event's trace context when it has one.
pub(crate) fn delivery_span(id: &str, parent: Option<&TraceContext>) -> tracing::Span {
    let span = tracing::info_span!(target: TARGET, parent: None, "deliver", event_id = id);
    if let Some(p) = parent {
        let mut carrier = HashMap::new();
        carrier.insert("traceparent".to_string(), p.traceparent.clone());
        if let Some(ts) = &p.tracestate {
            carrier.insert("tracestate".to_string(), ts.clone());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        // Fails only for a span the layer does not know (filtered out).
        let _ = span.set_parent(cx);
    }
    span
}

/// The W3C headers naming `span` as the parent (for the request to the API).
pub(crate) fn headers_of(span: &tracing::Span) -> Option<TraceContext> {
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    let traceparent = carrier.remove("traceparent")?;
    Some(TraceContext {
        traceparent,
        tracestate: carrier.remove("tracestate").filter(|s| !s.is_empty()),
    })
}
