//! Upstream MCP servers as a capability source: every tool of an upstream is a
//! capability `<upstream>.<tool>`, described from its JSON Schemas in the notation of
//! WIT-derived signatures, and called with `tools/call` over one MCP session that all
//! executions share.
//!
//! This is the second adapter of the capability-source port ([`crate::source`]):
//! execute binds, authorizes, audits and budgets an upstream call exactly as a
//! plugin call; only the call itself differs. A call is a future that waits on the
//! upstream's answer, so the executor abandons it at the execution's deadline (and
//! dropping it sends `notifications/cancelled` upstream); no fuel burns meanwhile.
//!
//! `config.rs`: an upstream as configured; `client.rs`: [`Upstream`], the
//! connection to one (started, listed, called); `provider.rs` and `supervise.rs`:
//! its lifecycle; `http.rs` and `lines/`: the bounded transports, and `bounds.rs`
//! what they bound an answer to.

mod bounds;
mod client;
mod config;
mod content;
mod credentials;
mod gate;
mod http;
mod lines;
pub mod names;
mod provider;
mod supervise;

pub use crate::secret::Secret;
pub use bounds::{MAX_MESSAGE_BYTES, MAX_MESSAGE_DEPTH, MAX_MESSAGE_VALUES};
pub use config::{UpstreamAuth, UpstreamConfig, UpstreamTransport, check_name};
pub use gate::UpstreamGate;
#[doc(hidden)]
pub use lines::framed;
pub use provider::UpstreamProvider;
pub use supervise::STOP_GRACE;
