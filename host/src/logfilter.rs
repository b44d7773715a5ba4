//! The operator log's filters: rmcp's per-session lines quieted, its "client hung
//! up" ERROR lines dropped ([`ClientGone`]), and its DEBUG and TRACE events, which
//! carry whole requests and results, never written ([`NoValues`]).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{self, Filter};

/// rmcp's per-session lines (`Service initialized as server peer_info=…`, `input
/// stream terminated`, `serve finished`) at WARN, unless the filter names rmcp:
/// over HTTP every request is a session of its own, so at INFO they were three
/// lines, one of them a whole Debug dump of the client's parameters, per request.
pub(crate) fn quiet_sessions(filter: EnvFilter) -> EnvFilter {
    if filter.to_string().contains("rmcp") {
        return filter;
    }
    match RMCP_SESSIONS.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// The directive [`quiet_sessions`] adds.
const RMCP_SESSIONS: &str = "rmcp::service=warn";

/// What rmcp logs, at ERROR, when it cannot deliver an answer because the HTTP
/// client hung up first: the message, and the error it carries.
const RMCP_CLIENT_GONE: [&str; 2] = [
    "fail to response message",
    "failed to send pending response during drain",
];
/// The error of a send to a connection that is gone.
const CHANNEL_CLOSED: &str = "channel closed";

/// Drops rmcp's ERROR lines for a client that hung up before its answer: the client
/// chose to go away, the server did nothing wrong, and an operator paged for every
/// closed connection would learn to ignore ERROR. The execution's own outcome is
/// still counted and audited.
pub(crate) struct ClientGone;

impl<S> Filter<S> for ClientGone {
    fn enabled(&self, _: &tracing::Metadata<'_>, _: &layer::Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, _: &layer::Context<'_, S>) -> bool {
        let meta = event.metadata();
        if *meta.level() != tracing::Level::ERROR || !meta.target().starts_with("rmcp::") {
            return true;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        !(RMCP_CLIENT_GONE.contains(&fields.message.as_str()) && fields.error == CHANNEL_CLOSED)
    }
}

/// Drops rmcp's DEBUG and TRACE events, whatever the filter: they carry whole
/// requests, results and messages (`?request`, `?result`, `?message`), so
/// `RUST_LOG=trace` wrote every program, its arguments and its results into the
/// log. A log is read by more people than the agent's data is meant for.
pub(crate) struct NoValues;

impl<S> Filter<S> for NoValues {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &layer::Context<'_, S>) -> bool {
        !(meta.target().starts_with("rmcp") && *meta.level() > tracing::Level::INFO)
    }
}

/// The `message` and `error` fields of an event, as text.
#[derive(Default)]
struct Fields {
    message: String,
    error: String,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "error" => self.error = format!("{value:?}"),
            _ => {}
        }
    }
}
