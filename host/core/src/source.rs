//! The capability-source port: what the executor needs from whatever serves
//! capabilities (WebAssembly plugins, upstream MCP servers, or a source of a
//! library user's own, given to the host's `ServiceConfig::providers`).
//!
//! A source offers capabilities (validated [`Capability`]s: names, IDs, texts,
//! shapes, each one `Arc` that the catalog and the routes share) and opens a
//! [`Session`] per execution that uses it. A session's
//! [`Session::call`] takes arguments already bound against the capability's shapes
//! and a [`CallBudget`], and is asynchronous: the executor races it against the
//! execution's deadline and cancellation and drops it when it loses, so a source
//! blocked outside WebAssembly (a host call, a socket, a remote server) never holds
//! an execution past its budget. Nothing here knows wasmtime, MCP or the executor.
//!
//! Sources come from a [`Provider`] (the plugins folder, one upstream MCP server),
//! which the registry starts and stops, and which offers its sources through a
//! [`Publisher`] whenever they change. Whatever a source does, the executor binds,
//! authorizes, audits and budgets its calls as every other's.
//!
//! The types a source deals in are re-exported here: [`Capability`] (made with
//! [`validate_spec`] from a [`CapabilitySpec`]), the [`Shape`]s of its fields, the
//! [`Value`]s of its arguments and results, the [`Budget`] that ran out.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub use crate::budget::Budget;
pub use crate::cancel::Cancel;
pub use crate::catalog::{
    BindError, BindLimits, Binder, Bound, Capability, CapabilityId, CapabilitySpec, DottedName,
    Field, FloatKind, IntKind, Lowering, Member, NameError, Shape, SpecError, Values,
    validate_spec,
};
pub use codemode_value::Value;

use crate::catalog::is_printable;
use crate::exchange::TokenExchange;
use crate::secret::Secret;

/// Where a source's code was pulled from (a plugin from an OCI registry): named
/// in the audit line of each of its calls.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Pulled {
    /// The reference it was pulled by.
    pub reference: String,
    /// The artifact's digest.
    pub digest: String,
    /// The key whose signature verified, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// A set of capabilities served from one place (one plugin file, one upstream).
pub trait CapabilitySource: Send + Sync {
    /// The name messages about this source use (a plugin's file name).
    fn label(&self) -> &str;

    /// Where its code was pulled from, when it came from a registry.
    fn pulled(&self) -> Option<&Pulled> {
        None
    }

    /// The capabilities it offers, in its own order: a call names one by its index
    /// in this list.
    fn capabilities(&self) -> &[Arc<Capability>];

    /// Binds a program's `arguments` to `capability` (one of this source's) within
    /// `limits`, lowered into the wire form its [`Session::call`] takes: one walk
    /// with the capability's [`Binder`] and the source's own [`Lowering`]. By
    /// default, the [`Values`] lowering: a `Vec<Value>`, one per parameter.
    ///
    /// # Errors
    ///
    /// What [`Binder::bind`] finds.
    fn bind(
        &self,
        capability: &Capability,
        arguments: &Value,
        limits: BindLimits,
    ) -> Result<Bound<Arguments>, BindError> {
        let bound = capability.binder().bind(arguments, &Values, limits)?;
        Ok(bound.map(Arguments::new))
    }

    /// A session for execution number `execution` (the audit log's): whatever
    /// state calls of that execution share (a plugin's instance), made fresh for
    /// each execution.
    fn session(self: Arc<Self>, execution: u64) -> Box<dyn Session>;
}

/// What supplies capability sources over time, and its lifecycle: the registry
/// [`starts`](Provider::start) it once and [`stops`](Provider::stop) it at the
/// end of serving. In between it refreshes itself (the plugins folder when a file
/// changes or the operator reloads, an upstream when its tools change or its
/// child restarts) and offers each new set of sources through the [`Publisher`]
/// it got.
pub trait Provider: Send + Sync + 'static {
    /// Its name in logs (`plugins folder`, `upstream git`).
    fn name(&self) -> &str;

    /// What only this provider's sources may claim, even while it serves none.
    fn reserved(&self) -> Reserved {
        Reserved::default()
    }

    /// Starts it. It must offer its first sources through `publisher` (none, if
    /// it has none yet) within a bounded time, from here or from a thread or task
    /// it starts: the catalog is first built when every provider has. The
    /// registry starts providers last first, so that one working on the calling
    /// thread (the plugins folder, first in the catalog) runs while the others'
    /// background work (an upstream's connection) is under way.
    fn start(self: Arc<Self>, publisher: Publisher);

    /// Hears what became of its sources in a catalog now serving: after its own
    /// offer (`own`, and the first catalog), or another provider's. Called while
    /// the registry rebuilds: it must not offer from here.
    fn served(&self, assembly: &Assembly, own: bool) {
        let _ = (assembly, own);
    }

    /// Asks it to stop (close its sessions, end its children) and waits until
    /// `deadline` at most; a `deadline` already past only asks.
    fn stop(&self, deadline: Instant);
}

/// The namespace of the stable IDs of upstream MCP servers' tools
/// (`mcp:<upstream>/<tool>`): a plugin's ID may not start with it, so that a
/// policy naming an upstream tool's ID never allows a plugin.
pub const UPSTREAM_ID_PREFIX: &str = "mcp:";

/// Capability names and IDs a provider keeps for its own sources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Roots of capability names (`git` of `git.git_log`): an upstream's name.
    pub roots: Vec<String>,
    /// Prefixes of stable IDs (`mcp:git/`).
    pub id_prefixes: Vec<String>,
}

impl Reserved {
    /// The reservation of a source named `name` that serves its capabilities
    /// under the root `name` and its IDs under `<id_prefix><name>/` (an
    /// upstream's `mcp:git/`, a service's `openapi:github/`).
    pub fn named(name: &str, id_prefix: &str) -> Self {
        Self {
            roots: vec![name.to_owned()],
            id_prefixes: vec![format!("{id_prefix}{name}/")],
        }
    }
}

/// What a provider offers at one moment.
#[derive(Clone, Default)]
pub struct Offer {
    /// Its sources serving now, in its own order.
    pub sources: Vec<Arc<dyn CapabilitySource>>,
    /// What it could not serve (plugin files that failed to load), by name.
    pub failures: Vec<Skipped>,
    /// Whether it is still starting (an upstream connecting for the first time):
    /// what it will serve is not known yet, so a program naming one of its
    /// [`Reserved::roots`] waits for its next offer (at most the service's
    /// `startup_wait`, not counted against the program's time), and so do
    /// searches. An offer that is not starting ends the wait, whatever it holds.
    pub starting: bool,
}

impl Offer {
    /// The offer of a provider still starting: nothing yet
    /// ([`Offer::starting`]).
    pub fn starting() -> Self {
        Self {
            starting: true,
            ..Self::default()
        }
    }
}

/// A source left out of the catalog, and why: what `/readyz` lists and
/// `--require-all-plugins` refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The source's label: a plugin's file name in the plugins folder.
    pub plugin: String,
    /// Why it does not serve (or, when `earlier_serves`, why its new version does
    /// not).
    pub reason: String,
    /// Whether an earlier version of it still serves.
    pub earlier_serves: bool,
}

/// What the registry did with an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// Kept for the first catalog, which waits for every provider's first offer;
    /// or a starting offer of a provider that replaced another, whose sources
    /// serve until the new one knows its own.
    Held,
    /// A new catalog serves.
    Serving(Assembly),
    /// The registry is gone (the service stopped): offer nothing more.
    Gone,
}

/// What became of one provider's sources in a catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assembly {
    /// Of its sources, how many serve.
    pub serving: usize,
    /// Of its sources, those refused (a claim lost, or they do not fit the
    /// catalog), by label.
    pub refused: Vec<String>,
    /// Capabilities serving in all.
    pub capabilities: usize,
}

/// Where one provider offers its sources: each offer replaces its previous one and
/// rebuilds the catalog.
#[derive(Clone)]
pub struct Publisher(Arc<dyn Fn(Offer) -> Result<Accepted, SpecError> + Send + Sync>);

impl Publisher {
    /// A publisher that hands each offer to `accept` (the registry's; a test of a
    /// provider may give its own).
    pub fn new(
        accept: impl Fn(Offer) -> Result<Accepted, SpecError> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(accept))
    }

    /// Offers `offer`. It may block (it rebuilds the catalog).
    ///
    /// # Errors
    ///
    /// When the catalog cannot be rebuilt (the last one keeps serving).
    pub fn offer(&self, offer: Offer) -> Result<Accepted, SpecError> {
        (self.0)(offer)
    }
}

/// Bound arguments in a source's own wire form, on their way from its
/// [`CapabilitySource::bind`] to its [`Session::call`]: the executor holds them
/// in between (authorization runs there) without knowing the form.
pub struct Arguments(Box<dyn Any + Send>);

impl Arguments {
    /// Wraps arguments of wire form `T`.
    pub fn new<T: Any + Send>(arguments: T) -> Self {
        Self(Box::new(arguments))
    }

    /// The arguments, when they are of wire form `T` (what the same source's
    /// `bind` made); `None` otherwise, a defect of the source.
    pub fn take<T: Any>(self) -> Option<T> {
        let arguments: Box<dyn Any> = self.0;
        arguments.downcast().ok().map(|b| *b)
    }
}

impl std::fmt::Debug for Arguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Arguments(..)")
    }
}

/// One execution's use of one source.
pub trait Session: Send {
    /// Calls capability `index` of the source with `arguments` (as the source's
    /// [`CapabilitySource::bind`] lowered them), within `budget`. The returned future may be
    /// dropped at any await point (the deadline passed, the request was cancelled);
    /// the session is not called again after that.
    fn call(&mut self, index: usize, arguments: Arguments, budget: CallBudget) -> CallFuture<'_>;
}

/// The future of one call.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = CallOutcome> + Send + 'a>>;

/// What one call may spend: the execution's deadline and cancellation, the room
/// its result has, and the execution's [`Meter`].
#[derive(Debug, Clone)]
pub struct CallBudget {
    /// When the execution's time budget runs out.
    pub deadline: Instant,
    /// The request's cancellation.
    pub cancel: Arc<Cancel>,
    /// Depth the result may have (the result record is depth 1). The source
    /// enforces it (and `max_nodes`) while it builds the result, so that an
    /// oversized one is refused before it is whole: the executor checks only the
    /// result's encoded size afterwards.
    pub max_depth: usize,
    /// Nodes the result may have: each value takes one, as binding charges them.
    pub max_nodes: usize,
    /// The execution's work allowance, for a source that meters its work.
    pub meter: Meter,
    /// The trace context the call continues, when the execution is traced (or its
    /// request carried one): a source that calls another service passes it on, so
    /// that the other's work joins the trace.
    pub trace: Option<TraceContext>,
    /// Whom the call is for, as the owner of what a source keeps per subject
    /// (the state store files it under this): the subject's ID, after its
    /// token's issuer when the token names one.
    pub subject: Arc<str>,
    /// Who the call acts for, when its request came with an access token: for
    /// a source that acts for its caller (an upstream with `auth = "forward"`
    /// or `"token-exchange"`).
    pub caller: Option<Caller>,
}

/// The caller of a native call, as a source acting for it needs it.
#[derive(Clone)]
pub struct Caller {
    /// The access token its request came with (never logged).
    pub token: Secret,
    /// What trades that token for one meant for another audience
    /// (`--oauth-client-id`); `None` without.
    pub exchange: Option<Arc<dyn TokenExchange>>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("token", &self.token)
            .field("exchange", &self.exchange.is_some())
            .finish()
    }
}

/// A position in a distributed trace, in W3C Trace Context form: what a call
/// passes on to the service it calls (an upstream's request `_meta`, an HTTP
/// header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `version-traceid-parentid-flags`, e.g.
    /// `00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01`.
    pub traceparent: String,
    /// Vendors' data that travels with it, when there is some.
    pub tracestate: Option<String>,
}

/// The execution's remaining work allowance, lent to one call. A source that
/// meters its work (the plugin source, in WebAssembly fuel, the unit the
/// interpreter spends too) sizes the call by [`Meter::remaining`] and charges what
/// it spent; a source that does not (an upstream, bounded by time) leaves it alone.
#[derive(Debug, Clone)]
pub struct Meter(Arc<AtomicU64>);

impl Meter {
    /// An allowance of `remaining` units.
    pub fn new(remaining: u64) -> Self {
        Self(Arc::new(AtomicU64::new(remaining)))
    }

    /// The units left.
    pub fn remaining(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Takes `spent` units (all that is left, if more).
    pub fn charge(&self, spent: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                Some(left.saturating_sub(spent))
            });
    }
}

/// How one call ended: the result record as a dict, or why there is none.
pub type CallOutcome = Result<Value, CallFailure>;

/// Why a call has no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFailure {
    /// The capability failed, with a message a model may see if there is one.
    Failed(Option<String>),
    /// A budget of the execution ran out during the call.
    Exhausted(Budget),
    /// The request was cancelled.
    Canceled,
    /// A defect of the host (already logged).
    Internal,
}

/// Longest capability failure message passed on, in bytes, `...` included.
pub const MAX_FAILURE_MESSAGE_BYTES: usize = 256;

/// A capability's failure message as a model may see it, whichever source it came
/// from: non-printable characters become spaces; longer than
/// [`MAX_FAILURE_MESSAGE_BYTES`] it is cut on a character boundary and ends in `...`;
/// empty means no detail.
pub fn sanitize_message(message: &str) -> Option<String> {
    let clean: String = message
        .chars()
        .map(|c| if is_printable(c) { c } else { ' ' })
        .collect();
    if clean.is_empty() {
        return None;
    }
    if clean.len() <= MAX_FAILURE_MESSAGE_BYTES {
        return Some(clean);
    }
    let mut end = MAX_FAILURE_MESSAGE_BYTES - 3;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}...", &clean[..end]))
}

/// The W3C header and `_meta` key of the trace's position.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C header and `_meta` key of vendors' trace data.
pub const TRACESTATE: &str = "tracestate";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_messages_are_sanitized_and_bounded() {
        assert_eq!(sanitize_message("no\tbook\n"), Some("no book ".into()));
        assert_eq!(sanitize_message(""), None);
        let long = "é".repeat(200);
        let cut = sanitize_message(&long).unwrap();
        assert!(cut.len() <= MAX_FAILURE_MESSAGE_BYTES, "{}", cut.len());
        assert!(cut.ends_with("..."));
        assert_eq!(
            cut.len(),
            253 + 3 - 1,
            "cut on a char boundary: 126 × 2 bytes + ..."
        );
        let exact = "a".repeat(256);
        assert_eq!(sanitize_message(&exact), Some(exact.clone()));
        let over = "a".repeat(257);
        assert_eq!(
            sanitize_message(&over),
            Some(format!("{}...", "a".repeat(253)))
        );
    }
}
