//! The capability-source port: what the executor needs from whatever serves
//! capabilities — WebAssembly plugins today, upstream MCP servers next.
//!
//! A source offers capabilities (their [`CapabilitySpec`]s: names, IDs, texts,
//! shapes) and opens a [`Session`] per execution that uses it. A session's
//! [`Session::call`] takes arguments already bound against the capability's shapes
//! and a [`CallBudget`], and is asynchronous: the executor races it against the
//! execution's deadline and cancellation and drops it when it loses, so a source
//! blocked outside WebAssembly (a host call, a socket, a remote server) never holds
//! an execution past its budget. Nothing here knows wasmtime, MCP or the executor.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use codemode_value::Value;

use crate::budget::Budget;
use crate::catalog::{CapabilitySpec, is_printable};
use crate::wait::Cancel;

/// A set of capabilities served from one place (one plugin file, one upstream).
pub(crate) trait CapabilitySource: Send + Sync {
    /// The name messages about this source use (a plugin's file name).
    fn label(&self) -> &str;

    /// The capabilities it offers, in its own order: a call names one by its index
    /// in this list.
    fn capabilities(&self) -> Vec<&CapabilitySpec>;

    /// A session for execution number `execution` (the audit log's): whatever
    /// state calls of that execution share (a plugin's instance), made fresh for
    /// each execution.
    fn session(self: Arc<Self>, execution: u64) -> Box<dyn Session>;
}

/// One execution's use of one source.
pub(crate) trait Session: Send {
    /// Calls capability `index` of the source with `arguments` (one per parameter,
    /// as binding returned them), within `budget`. The returned future may be
    /// dropped at any await point (the deadline passed, the request was cancelled);
    /// the session is not called again after that.
    fn call(&mut self, index: usize, arguments: Vec<Value>, budget: CallBudget) -> CallFuture<'_>;
}

/// The future of one call.
pub(crate) type CallFuture<'a> = Pin<Box<dyn Future<Output = CallOutcome> + Send + 'a>>;

/// What one call may spend: the execution's deadline and cancellation, the room
/// its result has, and the execution's [`Meter`].
#[derive(Debug, Clone)]
pub(crate) struct CallBudget {
    /// When the execution's time budget runs out.
    pub deadline: Instant,
    /// The request's cancellation.
    pub cancel: Arc<Cancel>,
    /// Depth the result may have (the result record is depth 1).
    pub max_depth: usize,
    /// Nodes the result may have: each value takes one, as binding charges them.
    pub max_nodes: usize,
    /// The execution's work allowance, for a source that meters its work.
    pub meter: Meter,
}

/// The execution's remaining work allowance, lent to one call. A source that
/// meters its work (the plugin source, in WebAssembly fuel, the unit the
/// interpreter spends too) sizes the call by [`Meter::remaining`] and charges what
/// it spent; a source that does not (an upstream, bounded by time) leaves it alone.
#[derive(Debug, Clone)]
pub(crate) struct Meter(Arc<AtomicU64>);

impl Meter {
    /// An allowance of `remaining` units.
    pub(crate) fn new(remaining: u64) -> Self {
        Self(Arc::new(AtomicU64::new(remaining)))
    }

    /// The units left.
    pub(crate) fn remaining(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Takes `spent` units (all that is left, if more).
    pub(crate) fn charge(&self, spent: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                Some(left.saturating_sub(spent))
            });
    }
}

/// How one call ended: the result record as a dict, or why there is none.
pub(crate) type CallOutcome = Result<Value, CallFailure>;

/// Why a call has no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallFailure {
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
pub(crate) fn sanitize_message(message: &str) -> Option<String> {
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
