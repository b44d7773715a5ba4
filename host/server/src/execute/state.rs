//! What one execution's interpreter store holds ([`ExecState`]) and the catalog
//! as the executor sees it ([`Dispatch`], its [`Route`]s): the data the
//! executor, the dispatcher and the approval steps share, so this file imports
//! none of them.

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::approval::{Approvals, Approver, Waiting};
use super::ledger::Ledger;
use crate::audit::AuditLog;
use crate::authz::{Authorizer, Subject};
use crate::catalog::Capability;
use crate::error::ToolError;
use crate::metrics::Metrics;
use crate::plugins::MemoryCap;
use crate::source::{CapabilitySource, Session, TraceContext};
use crate::telemetry::CallTracer;
use crate::wait::Stop;
use codemode_core::exchange::TokenExchange;

/// The outcome of a successful call, in the audit log and the metrics.
pub(super) const OK: &str = "ok";

/// Where each enabled capability is served. Built by the registry with
/// [`Route::new`]; only the executor reads its parts.
#[derive(Clone)]
pub(crate) struct Route {
    /// Index into [`Dispatch::sources`].
    pub(super) source: usize,
    /// The capability's index among its source's capabilities.
    pub(super) index: usize,
    /// The capability, as its source and the catalog hold it: its stable ID (for
    /// authorization) and the parameters binding checks arguments against.
    pub(super) capability: Arc<Capability>,
}

impl Route {
    /// The capability `capability`, the `index`-th of the `source`-th source of
    /// its [`Dispatch`].
    pub(crate) fn new(source: usize, index: usize, capability: Arc<Capability>) -> Self {
        Self {
            source,
            index,
            capability,
        }
    }
}

/// The catalog as the executor sees it: names, routes and the sources behind them.
/// Built with [`Dispatch::new`]; only the executor reads its parts.
#[derive(Default)]
pub(crate) struct Dispatch {
    /// Every enabled capability name, sorted.
    pub(super) names: Vec<String>,
    /// The route of each name in [`Dispatch::names`], at the same position.
    pub(super) routes: Vec<Route>,
    /// The capability sources (shared with the next catalog when unchanged).
    pub(super) sources: Vec<Arc<dyn CapabilitySource>>,
}

impl Dispatch {
    /// The capabilities `names` (sorted, each once), served as `routes` says
    /// (one per name, at the same position) by `sources`.
    pub(crate) fn new(
        names: Vec<String>,
        routes: Vec<Route>,
        sources: Vec<Arc<dyn CapabilitySource>>,
    ) -> Self {
        debug_assert_eq!(names.len(), routes.len());
        Self {
            names,
            routes,
            sources,
        }
    }

    /// Every enabled capability name, sorted (what the tests compare).
    #[cfg(test)]
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The capability of each name, in the order of [`Dispatch::names`].
    pub(crate) fn capabilities(&self) -> impl Iterator<Item = &Arc<Capability>> {
        self.routes.iter().map(|route| &route.capability)
    }

    /// The sources serving them.
    pub(crate) fn sources(&self) -> &[Arc<dyn CapabilitySource>] {
        &self.sources
    }

    /// Only the capabilities `keep` says yes to, served by the same sources:
    /// for an execution, the others are as if disabled (not listed, never
    /// suggested, never called).
    pub(crate) fn subset(&self, keep: impl Fn(&Capability) -> bool) -> Dispatch {
        let (names, routes) = self
            .names
            .iter()
            .zip(&self.routes)
            .filter(|(_, route)| keep(&route.capability))
            .map(|(name, route)| (name.clone(), route.clone()))
            .unzip();
        Dispatch {
            names,
            routes,
            sources: self.sources.clone(),
        }
    }
}

/// The data of one execution's interpreter store.
pub(crate) struct ExecState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) memory: MemoryCap,
    pub(super) dispatch: Arc<Dispatch>,
    /// Every budget this execution has charged.
    pub(super) ledger: Ledger,
    pub(super) subject: Subject,
    /// The subject as the owner of what sources keep for it
    /// (`Subject::owner`), made once for every call's budget.
    pub(super) owner: Arc<str>,
    pub(super) authorizer: Arc<dyn Authorizer>,
    /// Trades a caller's access token for an upstream's (`--oauth-client-id`).
    pub(super) token_exchange: Option<Arc<dyn TokenExchange>>,
    pub(super) audit: Option<Arc<AuditLog>>,
    pub(super) metrics: Arc<Metrics>,
    /// This execution's number, for the audit log.
    pub(super) execution: u64,
    pub(super) stop: Stop,
    /// The capabilities the interpreter was told of, as positions in
    /// [`Dispatch::names`]: a call names one by its position in this list.
    pub(super) listed: Vec<usize>,
    /// Successful calls of each capability in `listed`, at the same position: added
    /// to the metrics once, when the execution ends, instead of a locked update per
    /// call. (A failed call ends the execution and is counted at once.)
    pub(super) ok_calls: Vec<u64>,
    /// Successful native calls so far, and who hears of each.
    pub(super) calls_done: u64,
    pub(super) progress: Option<Arc<dyn Progress>>,
    /// Who is asked when the policy says to ask, and what was approved.
    pub(super) approver: Option<Arc<dyn Approver>>,
    pub(super) approvals: Approvals,
    /// Executions waiting for a human, per subject (shared by all).
    pub(super) waiting: Arc<Waiting>,
    /// How calls join the execution's trace, when it is traced or its request
    /// carried a trace context.
    pub(super) calls: Option<CallTracer>,
    /// The trace context of the call being made, for its source.
    pub(super) call_trace: Option<TraceContext>,
    /// One session per source used (index into [`Dispatch::sources`]), opened on
    /// first use.
    pub(super) sessions: HashMap<usize, Box<dyn Session>>,
    /// The failure of a native call: it decides the execution's error.
    pub(super) retained: Option<ToolError>,
    /// The capability whose call failed, when one did.
    pub(super) failed_capability: Option<String>,
    /// Fuel granted past the budget to unwind after a failed call (not counted).
    pub(super) unwind_fuel: u64,
    /// The interpreter reported a value too large to hold; its abort follows.
    pub(super) too_large: bool,
    /// Its lease on its subject's quotas, made to last a wait for a human.
    pub(super) quota: Option<(Arc<crate::quota::QuotaGate>, crate::quota::Lease)>,
    /// Its subject's quotas on capabilities' calls, when it has any.
    pub(super) call_quotas: Option<Arc<crate::quota::CallQuotas>>,
    /// The quota that refused a call, which stopped the execution.
    pub(super) quota_hit: Option<crate::quota::QuotaHit>,
}

/// Counts what was not counted yet, whatever ended the execution (a panic that
/// unwinds its thread included).
impl Drop for ExecState {
    fn drop(&mut self) {
        self.count_ok_calls();
    }
}

impl ExecState {
    /// Adds this execution's successful native calls to the metrics (and zeroes
    /// them, so a second count adds nothing).
    pub(super) fn count_ok_calls(&mut self) {
        for (&position, count) in self.listed.iter().zip(&mut self.ok_calls) {
            if *count > 0
                && let Some(name) = self.dispatch.names.get(position)
            {
                self.metrics.native_calls(name, OK, *count);
            }
            *count = 0;
        }
    }
}

impl WasiView for ExecState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Told as an execution advances, for a client that asked for progress: after
/// each successful native call, how many succeeded so far and the capability's
/// name (never arguments or results). Called on the execution's thread, between
/// calls: it must not block.
pub trait Progress: Send + Sync {
    /// `calls` native calls succeeded so far, the latest one of `capability`.
    fn call_done(&self, calls: u64, capability: &str);
}
