//! One tracing subscriber: pretty logs for people, JSON for machines
//! (`BATON_LOG_FORMAT=json`), filtered by `RUST_LOG`; and OpenTelemetry
//! spans, exported over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set
//! (the standard `OTEL_*` variables apply). Without it spans still carry a
//! W3C trace context from hop to hop, and nothing is exported.

use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

pub fn init(default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let fmt = tracing_subscriber::fmt::layer().with_target(false);
    let fmt = if std::env::var("BATON_LOG_FORMAT").as_deref() == Ok("json") { fmt.json().boxed() } else { fmt.boxed() };
    let provider = provider();
    let tracer = provider.tracer("baton");
    // Spans reach OpenTelemetry whatever RUST_LOG says of logs.
    let otel = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(withheld());
    if registry.with(fmt.with_filter(filter)).with(otel).try_init().is_ok() {
        let _ = PROVIDER.set(provider);
        baton_store::outbox::set_trace_source(current_trace);
    }
}

/// Drops, whatever `RUST_LOG` says, the events of the AMQP library that
/// carry a message's bytes (see [`baton_bus::carries_message_bytes`]). A
/// return is logged by Baton itself instead, with the queue and the
/// broker's reason and without the body.
pub fn withheld() -> FilterFn<fn(&tracing::Metadata<'_>) -> bool> {
    FilterFn::new(|meta| !baton_bus::carries_message_bytes(meta.target(), *meta.level(), meta.is_event()))
}

/// The tracer provider: OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
/// its traces variant) is set, else none that exports.
fn provider() -> SdkTracerProvider {
    let builder = SdkTracerProvider::builder()
        .with_resource(opentelemetry_sdk::Resource::builder().with_service_name(service_name()).build());
    let wanted = ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|e| !e.trim().is_empty()));
    if !wanted {
        return builder.build();
    }
    match exporter() {
        Ok(exporter) => builder.with_batch_exporter(exporter).build(),
        Err(e) => {
            eprintln!("baton: traces are not exported: {e}");
            builder.build()
        }
    }
}

fn exporter() -> Result<opentelemetry_otlp::SpanExporter, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Ok("http/protobuf") => Protocol::HttpBinary,
        _ => Protocol::HttpJson,
    };
    opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(protocol).build()
}

fn service_name() -> String {
    std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "baton".into())
}

/// Sends the spans still buffered; call before the process exits.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.force_flush();
        let _ = provider.shutdown();
    }
}

/// Calls [`shutdown`] when dropped, at the end of `main` whatever its outcome.
pub struct FlushOnExit;

impl Drop for FlushOnExit {
    fn drop(&mut self) {
        shutdown();
    }
}

/// The current span's W3C context (`traceparent`, `tracestate`), if it has one.
pub fn current_trace() -> Option<(String, Option<String>)> {
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    let parent = carrier.remove("traceparent")?;
    Some((parent, carrier.remove("tracestate").filter(|s| !s.is_empty())))
}

/// Makes `span` a child of the W3C context in `traceparent`/`tracestate`
/// (a message's headers), or the root of a new trace when there is none:
/// a hop never joins its process's long-lived `role` span.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<String>, tracestate: Option<String>) {
    let mut carrier = HashMap::new();
    carrier.extend(traceparent.map(|v| ("traceparent".to_string(), v)));
    carrier.extend(tracestate.map(|v| ("tracestate".to_string(), v)));
    let context = TraceContextPropagator::new().extract_with_context(&Context::new(), &carrier);
    span.set_parent(context);
}

/// [`continue_trace`] of a stored request's run (a bridge's answer or cancel
/// joins the trace of the request it is about), else of the delivery's headers.
pub async fn continue_request(
    span: &tracing::Span,
    pool: &baton_store::Pool,
    handoff_id: &str,
    delivery: &baton_bus::Delivery,
) {
    let stored = match pool.get().await {
        Ok(client) => baton_store::requests::trace(&client, handoff_id).await.ok().flatten(),
        Err(_) => None,
    };
    match stored {
        Some((parent, state)) => continue_trace(span, Some(parent), state),
        None => continue_from(span, delivery),
    }
}

/// [`continue_trace`] from a delivery's headers.
pub fn continue_from(span: &tracing::Span, delivery: &baton_bus::Delivery) {
    continue_trace(span, delivery.header("traceparent"), delivery.header("tracestate"));
}
