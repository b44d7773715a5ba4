//! Traces of executions, exported with OpenTelemetry over OTLP (http/protobuf).
//!
//! One span per `execute` (a child of the client's span when the request carried
//! W3C trace context) with a child span per native call; a call's own context is
//! what its source passes on (an upstream puts it in its request's `_meta` and, over
//! HTTP, the `traceparent` header), so the upstream's work joins the trace. Spans
//! carry what an execution cost and how it ended, never arguments or results.
//!
//! The exporter is the feature `otel` (the binary has it). Exported only when an
//! endpoint is set (`--otlp-endpoint`, or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): otherwise
//! no span is made, and a request's trace context is passed on to upstreams
//! unchanged.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
#[cfg(feature = "otel")]
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};

use crate::source::TraceContext;

pub use codemode_core::source::{TRACEPARENT, TRACESTATE};
/// Most bytes of a `tracestate` passed on; a longer one is dropped (W3C: 512).
const MAX_TRACESTATE: usize = 512;
/// Most bytes of a `traceparent` read: version 00 is exactly 55; a later
/// version may add fields, but not kilobytes of them.
const MAX_TRACEPARENT: usize = 128;
#[cfg(feature = "otel")]
/// The path OTLP/HTTP receivers take traces at, after `--otlp-endpoint`.
const TRACES_PATH: &str = "/v1/traces";
#[cfg(feature = "otel")]
/// The service name spans are reported under, unless `OTEL_SERVICE_NAME` says.
const SERVICE_NAME: &str = "codemode-host";
#[cfg(feature = "otel")]
/// How long one export may take before it is given up (its spans are dropped).
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
/// How long exiting waits for the last spans to be exported.
const SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
#[cfg(feature = "otel")]
/// The only OTLP protocol this build exports with.
const PROTOCOL: &str = "http/protobuf";

#[cfg(feature = "otel")]
/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// An `OTEL_EXPORTER_OTLP_*PROTOCOL` other than http/protobuf.
    #[error("{variable}={value:?}: only {PROTOCOL} is supported")]
    Protocol {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// The exporter refused its settings (an endpoint that is no URL).
    #[error("cannot set up the OTLP exporter: {0}")]
    Exporter(String),
}

/// The trace exporter of this server: built once at start, flushed at exit.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

#[cfg(feature = "otel")]
/// Whether the environment names an OTLP endpoint for traces.
fn endpoint_in_environment() -> bool {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

impl Telemetry {
    /// The exporter (feature `otel`), when an endpoint is set: `endpoint` (`--otlp-endpoint`, the
    /// receiver's base URL) or the standard variables; `None` otherwise, or when
    /// `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Spans are sent in
    /// batches from a thread of its own (`OTEL_BSP_*` tune it). Call it outside an
    /// async runtime (the exporter's HTTP client has one of its own).
    ///
    /// # Errors
    ///
    /// [`TelemetryError`]: a protocol other than http/protobuf, or an endpoint
    /// the exporter refuses.
    #[cfg(feature = "otel")]
    pub fn start(endpoint: Option<&str>) -> Result<Option<Self>, TelemetryError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
            || (endpoint.is_none() && !endpoint_in_environment())
        {
            return Ok(None);
        }
        for variable in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(value) = env(variable).filter(|v| !v.eq_ignore_ascii_case(PROTOCOL)) {
                return Err(TelemetryError::Protocol { variable, value });
            }
        }
        use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
        // TLS as the upstreams' clients have it (no process-wide provider).
        let tls = crate::tls::client_config().map_err(TelemetryError::Exporter)?;
        let client = reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Exporter(format!("HTTP client: {e}")))?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(EXPORT_TIMEOUT);
        if let Some(endpoint) = endpoint {
            exporter =
                exporter.with_endpoint(format!("{}{TRACES_PATH}", endpoint.trim_end_matches('/')));
        }
        let exporter = exporter
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        let named_in_attributes = env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
            a.split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
        if env("OTEL_SERVICE_NAME").is_none() && !named_in_attributes {
            resource = resource.with_service_name(SERVICE_NAME);
        }
        let mut provider = SdkTracerProvider::builder()
            .with_resource(resource.build())
            .with_batch_exporter(exporter);
        // The operator decides what is recorded, not the client's sampled flag
        // (the default sampler follows the parent's).
        if env("OTEL_TRACES_SAMPLER").is_none() {
            provider = provider.with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn);
        }
        let provider = provider.build();
        let tracer = provider.tracer(SERVICE_NAME);
        Ok(Some(Self { provider, tracer }))
    }

    /// Sends what is left and stops the exporter's thread. Call it outside an
    /// async runtime, once serving ended.
    pub fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(reason = %error, "the last spans could not be exported");
        }
    }

    /// The span of one execution of `subject`, a child of `parent` (the request's
    /// trace context) when there is one, else a trace's root.
    pub(crate) fn execution(&self, parent: Option<&TraceContext>, subject: &str) -> ExecutionSpan {
        let parent = parent.map_or_else(Context::new, remote_context);
        let span = self
            .tracer
            .span_builder("execute")
            .with_kind(SpanKind::Server)
            .with_attributes([KeyValue::new("codemode.subject", subject.to_owned())])
            .start_with_context(&self.tracer, &parent);
        let calls = CallTracer::Recording {
            tracer: self.tracer.clone(),
            parent: Context::new().with_remote_span_context(span.span_context().clone()),
        };
        ExecutionSpan {
            span: Some(span),
            calls,
        }
    }
}

/// The request's trace context, when `traceparent` is well-formed (W3C; an
/// unknown version's first four fields are read, as the spec says) and at most
/// 128 bytes; a `tracestate` longer than 512 bytes is left out.
pub(crate) fn incoming(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
    if traceparent.len() > MAX_TRACEPARENT {
        return None;
    }
    let mut carrier = HashMap::new();
    carrier.insert(TRACEPARENT.to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate.filter(|s| s.len() <= MAX_TRACESTATE) {
        carrier.insert(TRACESTATE.to_owned(), state.to_owned());
    }
    let context = TraceContextPropagator::new().extract(&carrier);
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| context_of(span_context))
}

/// The W3C form of `span_context`.
fn context_of(span_context: &opentelemetry::trace::SpanContext) -> TraceContext {
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(
        &Context::new().with_remote_span_context(span_context.clone()),
        &mut carrier,
    );
    TraceContext {
        traceparent: carrier.remove(TRACEPARENT).unwrap_or_default(),
        tracestate: carrier.remove(TRACESTATE).filter(|s| !s.is_empty()),
    }
}

/// `context` as a parent for spans.
fn remote_context(context: &TraceContext) -> Context {
    let mut carrier = HashMap::new();
    carrier.insert(TRACEPARENT.to_owned(), context.traceparent.clone());
    if let Some(state) = &context.tracestate {
        carrier.insert(TRACESTATE.to_owned(), state.clone());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// The span of one execution: its native calls' spans are its children. Dropped
/// unfinished (the request was cancelled and its future dropped), it ends as
/// `canceled`.
pub(crate) struct ExecutionSpan {
    span: Option<Span>,
    calls: CallTracer,
}

impl Drop for ExecutionSpan {
    fn drop(&mut self) {
        if let Some(mut span) = self.span.take() {
            let canceled = crate::error::ToolError::Canceled.fixed_text();
            span.set_attribute(KeyValue::new("codemode.outcome", canceled));
            span.set_status(Status::error(canceled));
            span.end();
        }
    }
}

impl ExecutionSpan {
    /// What the execution's calls make their spans with.
    pub(crate) fn calls(&self) -> CallTracer {
        self.calls.clone()
    }

    /// Ends the span with how the execution ended and what it cost.
    pub(crate) fn finish(mut self, summary: &ExecutionSummary<'_>) {
        let Some(mut span) = self.span.take() else {
            return;
        };
        span.set_attribute(KeyValue::new(
            "codemode.outcome",
            summary.outcome.to_owned(),
        ));
        span.set_attributes(
            summary
                .stats
                .iter()
                .map(|(key, value)| KeyValue::new(*key, saturating_i64(*value))),
        );
        if let Some(limit) = summary.limit {
            span.set_attribute(KeyValue::new("codemode.limit", limit.to_owned()));
        }
        if summary.failed {
            span.set_status(Status::error(summary.outcome.to_owned()));
        }
        span.end();
    }
}

/// How an execution ended, for its span.
pub(crate) struct ExecutionSummary<'a> {
    /// `ok`, or the error's fixed text.
    pub outcome: &'a str,
    /// Whether it failed.
    pub failed: bool,
    /// What it cost: attribute name and value (fuel, steps, calls, bytes, time).
    pub stats: &'a [(&'static str, u64)],
    /// The flag of the budget that ran out, on a resource limit.
    pub limit: Option<&'a str>,
}

/// OTLP integers are signed.
fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// How an execution's native calls join its trace: as spans of their own
/// (exporting), or by passing the request's context on unchanged (not exporting).
#[derive(Clone)]
pub(crate) enum CallTracer {
    /// Each call gets a span, a child of the execution's.
    Recording {
        /// The exporter's tracer.
        tracer: SdkTracer,
        /// The execution's span, as a parent.
        parent: Context,
    },
    /// The request's context, passed on as it came.
    Forward(TraceContext),
}

impl CallTracer {
    /// Starts one call: its span when recording, and the context its source
    /// passes on.
    pub(crate) fn start(&self) -> (Option<CallSpan>, TraceContext) {
        match self {
            Self::Recording { tracer, parent } => {
                let span = tracer
                    .span_builder("call")
                    .with_kind(SpanKind::Client)
                    .start_with_context(tracer, parent);
                let context = context_of(span.span_context());
                (Some(CallSpan { span }), context)
            }
            Self::Forward(context) => (None, context.clone()),
        }
    }
}

/// The span of one native call.
pub(crate) struct CallSpan {
    span: Span,
}

impl CallSpan {
    /// Ends the span: the capability (empty when the call named none), how the call
    /// ended (`ok` or the error's fixed text; `failed` for an error), the fuel it
    /// burned and the bytes of its encoded result.
    pub(crate) fn finish(
        mut self,
        capability: &str,
        id: &str,
        outcome: &str,
        failed: bool,
        fuel: u64,
        bytes: usize,
    ) {
        if !capability.is_empty() {
            self.span.update_name(format!("call {capability}"));
        }
        self.span.set_attributes([
            KeyValue::new("codemode.capability", capability.to_owned()),
            KeyValue::new("codemode.capability_id", id.to_owned()),
            KeyValue::new("codemode.outcome", outcome.to_owned()),
            KeyValue::new("codemode.fuel", saturating_i64(fuel)),
            KeyValue::new("codemode.bytes", saturating_i64(bytes as u64)),
        ]);
        if failed {
            self.span.set_status(Status::error(outcome.to_owned()));
        }
        self.span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn incoming_context_is_read_only_when_well_formed() {
        assert_eq!(
            incoming(PARENT, Some("congo=t61rcWkgMzE")),
            Some(TraceContext {
                traceparent: PARENT.to_owned(),
                tracestate: Some("congo=t61rcWkgMzE".to_owned()),
            })
        );
        let long = format!("a={}", "x".repeat(MAX_TRACESTATE));
        let huge = format!(
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01{}",
            "-".repeat(200)
        );
        assert_eq!(incoming(&huge, None), None);
        assert_eq!(
            incoming(PARENT, Some(&long)).map(|c| c.tracestate),
            Some(None)
        );
        for bad in [
            "",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "not a traceparent",
        ] {
            assert_eq!(incoming(bad, None), None, "{bad:?}");
        }
    }

    #[test]
    fn forwarding_passes_the_context_on_unchanged() {
        let context = incoming(PARENT, None).unwrap();
        let (span, passed) = CallTracer::Forward(context.clone()).start();
        assert!(span.is_none());
        assert_eq!(passed, context);
    }

    #[test]
    #[cfg(feature = "otel")]
    fn no_endpoint_is_no_exporter() {
        // The test process sets no OTEL_* variables.
        if !endpoint_in_environment() {
            assert!(matches!(Telemetry::start(None), Ok(None)));
        }
    }
}
