//! One execution of an agent's program: budgets, the sandboxed interpreter, and the
//! native calls it makes into plugins.
//!
//! Per execution (DESIGN §4): check the source size, wait for a slot (the wait counts
//! against the time budget), instantiate the pre-initialized interpreter in a fresh
//! store, run the program. Each native call arrives through the `call` import and is
//! dispatched here (`dispatch.rs`): counted, bound against the WIT types, authorized,
//! run on the plugin's per-execution instance, converted and accounted. Fuel is one
//! ledger: a plugin instance gets the interpreter's remaining fuel for its call and
//! what it burns is taken from the interpreter's store.

mod approval;
mod asking;
mod dispatch;
mod ledger;
mod limits;
mod runner;
mod state;
mod teardown;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::WasiCtx;

pub(crate) use approval::{
    Answer, ApprovalRequest, Approver, Asking, PendingCall, Recorded, Replay, Suspended,
    WITHDRAW_GRACE,
};
pub use limits::{LimitError, Limits, Retuned};
pub use runner::RunnerError;
use state::ExecState;
pub use state::Progress;
pub(crate) use state::{Dispatch, Route};

use crate::audit::AuditLog;
use crate::authz::{Authorizer, Subject};
use crate::budget::Budget;
use crate::cache::ArtifactCache;
use crate::error::ToolError;
use crate::metrics::Metrics;
use crate::plugins::{MemoryCap, MemoryHit};
use crate::quota::{Admission, QuotaGate, QuotaHit};
use crate::source::TraceContext;
use crate::telemetry::{CallTracer, ExecutionSummary, Telemetry};
use crate::wait::{Cancel, Interrupted, Stop};
use codemode_core::cancel::Canceller;
use codemode_core::exchange::TokenExchange;
use ledger::Ledger;
use runner::{Exceeded, Failure, RunnerLimits, RunnerPre};
use teardown::Leftovers;

/// Longest invalid-program detail passed on; a longer one is dropped (bare text).
pub const MAX_PROGRAM_DETAIL_BYTES: usize = 4096;

/// How often the epoch advances: the resolution of the time budget and of noticing a
/// cancelled request.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// What an execution cost, reported in the tool result's `_meta`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Fuel spent by the interpreter and plugins together.
    pub fuel: u64,
    /// Starlark ticks.
    pub steps: u64,
    /// Native calls attempted.
    pub native_calls: u64,
    /// Encoded bytes of successful native results.
    pub intermediate_bytes: usize,
    /// Encoded bytes of the final value.
    pub result_bytes: usize,
    /// Wall time, slot wait included, in microseconds.
    pub elapsed_us: u64,
    /// On `resource limit exceeded`: the flag of the budget that ran out
    /// (`--max-fuel`), or the sidecar setting (`max_fuel_per_call`); never its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<&'static str>,
    /// On `resource limit exceeded` because of a quota: which, and when it
    /// allows more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaHit>,
}

/// How an execution ended, and what it cost, whether it succeeded or not.
#[derive(Debug, Clone)]
pub struct Execution {
    /// `main()`'s value (already JSON), or the error the model sees.
    pub outcome: Result<serde_json::Value, ToolError>,
    /// What it cost; on a resource limit, which budget ran out.
    pub stats: Stats,
    /// When the error came from a native call: which capability, and where the
    /// program called it. Reported in the tool result's `_meta`.
    pub failed_call: Option<FailedCall>,
    /// When it stopped to ask a human (its approver suspends): what it did and
    /// asks. Its outcome is then `permission denied` until answered.
    pub suspended: Option<Suspended>,
}

/// The native call an execution failed on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FailedCall {
    /// The capability's dotted name.
    pub capability: String,
    /// The call's line in the program (1-based), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The call's column (1-based, in characters), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

impl Execution {
    /// The value and its cost, or the error alone.
    ///
    /// # Errors
    ///
    /// The execution's [`ToolError`].
    pub fn into_result(self) -> Result<Executed, ToolError> {
        let stats = self.stats;
        self.outcome.map(|value| Executed { value, stats })
    }

    /// An execution that ended before it ran, on `error`.
    pub(crate) fn refused(error: ToolError, limit: Option<Budget>) -> Self {
        Self {
            outcome: Err(error),
            stats: Stats {
                limit: limit.map(Budget::flag),
                ..Stats::default()
            },
            failed_call: None,
            suspended: None,
        }
    }
}

impl Execution {
    /// An execution a quota refused before it ran.
    pub(crate) fn over_quota(hit: QuotaHit) -> Self {
        let mut execution = Self::refused(ToolError::ResourceLimit, None);
        execution.stats.quota = Some(hit);
        execution
    }
}

/// A successful execution: `main()`'s value (already JSON) and its cost.
#[derive(Debug, Clone)]
pub struct Executed {
    /// The value, for `{"result": value}`.
    pub value: serde_json::Value,
    /// What it cost.
    pub stats: Stats,
}

/// Runs programs: owns the interpreter, the routes to plugins and the budgets.
pub struct Executor {
    engine: Engine,
    pre: RunnerPre<ExecState>,
    /// Replaced by [`Executor::retune`]; an execution keeps the limits it started
    /// with.
    limits: ArcSwap<Limits>,
    permits: Arc<tokio::sync::Semaphore>,
    authorizer: Arc<dyn Authorizer>,
    /// Trades a caller's access token for an upstream's (`--oauth-client-id`).
    token_exchange: Option<Arc<dyn TokenExchange>>,
    audit: Option<Arc<AuditLog>>,
    metrics: Arc<Metrics>,
    stop_ticker: Arc<AtomicBool>,
    started: Arc<AtomicU64>,
    /// The span exporter, when traces are exported.
    telemetry: Option<Arc<Telemetry>>,
    /// Executions waiting for a human, per subject.
    waiting: Arc<approval::Waiting>,
    /// The subjects' quotas, when any is set.
    quotas: Option<Arc<QuotaGate>>,
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// How one execution runs beyond its program: who hears of its progress, the
/// trace context its request carried (W3C; its span's parent when tracing,
/// passed on to upstreams either way), and a time budget of its own.
#[derive(Default, Clone)]
pub(crate) struct RunOptions {
    /// Told after each successful native call.
    pub progress: Option<Arc<dyn Progress>>,
    /// The request's trace context.
    pub trace: Option<TraceContext>,
    /// Its time budget in place of `--max-execution-time` (a task's
    /// `--max-task-time`, which is then the limit reported when it runs out).
    pub max_time: Option<Duration>,
    /// Who is asked when a policy says to ask a human; `None`: nobody can be,
    /// and such calls are denied.
    pub approver: Option<Arc<dyn Approver>>,
    /// The record of an earlier run that stopped to ask, and the answer.
    pub replay: Option<Replay>,
    /// A source the program names that did not start in time (`upstream git`):
    /// the execution fails at once with `capability failed: <source> is still
    /// starting`, logged, counted and traced as any failed execution.
    pub not_started: Option<String>,
}

/// What the executor is built from.
pub(crate) struct ExecutorConfig<'a> {
    pub engine: &'a Engine,
    pub limits: Limits,
    pub authorizer: Arc<dyn Authorizer>,
    pub token_exchange: Option<Arc<dyn TokenExchange>>,
    pub audit: Option<Arc<AuditLog>>,
    pub metrics: Arc<Metrics>,
    pub cache: Option<&'a ArtifactCache>,
    pub telemetry: Option<Arc<Telemetry>>,
    pub quotas: Option<Arc<QuotaGate>>,
}

/// Cancels when dropped: a request future dropped before its execution ended
/// (cancelled) stops that execution at the next epoch tick, or at once when it waits
/// on a plugin blocked in a host call.
struct CancelOnDrop(Canceller);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Executor {
    /// Prepares the interpreter (from the cache when possible), links its imports and
    /// starts the epoch ticker.
    ///
    /// # Errors
    ///
    /// [`RunnerError`] when the interpreter cannot be compiled or linked.
    pub(crate) fn new(config: ExecutorConfig<'_>) -> Result<Self, RunnerError> {
        let prepared = runner::prepare(config.engine, config.cache)?;
        tracing::info!(
            cached = prepared.cached,
            prepare_ms = prepared.elapsed.as_millis() as u64,
            "interpreter ready"
        );
        let mut linker: Linker<ExecState> = Linker::new(config.engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(RunnerError::Prepare)?;
        dispatch::add_to_linker(&mut linker).map_err(RunnerError::Prepare)?;
        let pre = linker
            .instantiate_pre(&prepared.component)
            .and_then(RunnerPre::new)
            .map_err(RunnerError::Prepare)?;
        let stop_ticker = Arc::new(AtomicBool::new(false));
        start_ticker(config.engine.clone(), stop_ticker.clone());
        crate::memory::TOTAL.set_max(config.limits.max_total_memory_bytes);
        let waiting = Arc::new(approval::Waiting::new(
            config.limits.max_concurrent_executions,
        ));
        Ok(Self {
            engine: config.engine.clone(),
            pre,
            permits: Arc::new(tokio::sync::Semaphore::new(
                config.limits.max_concurrent_executions,
            )),
            limits: ArcSwap::from_pointee(config.limits),
            authorizer: config.authorizer,
            token_exchange: config.token_exchange,
            audit: config.audit,
            metrics: config.metrics,
            stop_ticker,
            started: Arc::new(AtomicU64::new(0)),
            telemetry: config.telemetry,
            waiting,
            quotas: config.quotas,
        })
    }

    /// How many executions got a slot and started running (queued ones that were
    /// cancelled or timed out never count).
    pub fn executions_started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Runs `source` for `subject` with the capabilities of `dispatch` (the plugin
    /// set it keeps to the end, whatever a reload does meanwhile), its time budget
    /// counted from `started` (when its request arrived). Dropping the
    /// returned future cancels the execution: queued, it never starts; running, it
    /// stops at the next epoch tick and frees its slot.
    ///
    /// # Errors
    ///
    /// The [`ToolError`] the model sees.
    pub(crate) async fn execute(
        &self,
        dispatch: Arc<Dispatch>,
        subject: &Subject,
        source: &str,
        started: Instant,
        mut options: RunOptions,
    ) -> Execution {
        // No span, and nothing allocated, unless traces are exported.
        let span = self
            .telemetry
            .as_ref()
            .map(|telemetry| telemetry.execution(options.trace.as_ref(), &subject.id));
        let calls = match (&span, options.trace.take()) {
            (Some(span), _) => Some(span.calls()),
            (None, Some(trace)) => Some(CallTracer::Forward(trace)),
            (None, None) => None,
        };
        let max_time = options.max_time;
        let mut execution = self
            .execute_timed(dispatch, subject, source, started, options, calls)
            .await;
        if max_time.is_some() && execution.stats.limit == Some(Budget::ExecutionTime.flag()) {
            execution.stats.limit = Some(crate::tasks::TASK_TIME_FLAG);
        }
        execution.stats.elapsed_us = started.elapsed().as_micros() as u64;
        let label = match &execution.outcome {
            Ok(_) => "ok",
            Err(_) if execution.suspended.is_some() => {
                tracing::info!(
                    subject = %subject.id,
                    capability = execution
                        .failed_call
                        .as_ref()
                        .map_or("-", |call| call.capability.as_str()),
                    elapsed_ms = crate::units::millis(started.elapsed()),
                    "execution stopped to ask the client's user; it runs again with the answer"
                );
                dispatch::INPUT_REQUIRED
            }
            Err(error) => {
                tracing::info!(
                    subject = %subject.id,
                    outcome = error.fixed_text(),
                    limit = execution.stats.limit.unwrap_or("-"),
                    capability = execution
                        .failed_call
                        .as_ref()
                        .map_or("-", |call| call.capability.as_str()),
                    elapsed_ms = crate::units::millis(started.elapsed()),
                    quota = execution.stats.quota.as_ref().map_or("-", |hit| hit.name),
                    "execution failed"
                );
                error.fixed_text()
            }
        };
        self.metrics.execute(label, started.elapsed());
        if let Some(span) = span {
            let stats = &execution.stats;
            span.finish(&ExecutionSummary {
                outcome: label,
                failed: execution.outcome.is_err(),
                stats: &[
                    ("codemode.fuel", stats.fuel),
                    ("codemode.steps", stats.steps),
                    ("codemode.native_calls", stats.native_calls),
                    (
                        "codemode.intermediate_bytes",
                        stats.intermediate_bytes as u64,
                    ),
                    ("codemode.result_bytes", stats.result_bytes as u64),
                    ("codemode.elapsed_us", stats.elapsed_us),
                ],
                limit: stats.limit,
            });
        }
        execution
    }

    async fn execute_timed(
        &self,
        dispatch: Arc<Dispatch>,
        subject: &Subject,
        source: &str,
        started: Instant,
        options: RunOptions,
        calls: Option<CallTracer>,
    ) -> Execution {
        let limits = self.limits.load_full();
        if let Some(source) = options.not_started {
            return Execution::refused(
                ToolError::CapabilityFailed(Some(crate::error::still_starting_detail(&source))),
                None,
            );
        }
        if source.len() > limits.max_source_bytes {
            return Execution::refused(ToolError::ResourceLimit, Some(Budget::SourceBytes));
        }
        let deadline = started + options.max_time.unwrap_or(limits.max_execution_time);
        let progress = options.progress;
        let approver = options.approver;
        let replay = options.replay;
        // Its time went by before it could start (waiting for the load, over stdio).
        if Instant::now() >= deadline {
            return Execution::refused(ToolError::ResourceLimit, Some(Budget::ExecutionTime));
        }
        let held = match &self.quotas {
            None => None,
            Some(gate) => match gate
                .admit(
                    &self.authorizer,
                    subject,
                    limits.max_native_calls,
                    limits.max_fuel,
                    deadline,
                )
                .await
            {
                Admission::Unlimited => None,
                Admission::Admitted(lease) => Some(Held {
                    gate: gate.clone(),
                    lease: Some(lease),
                    ran: false,
                }),
                Admission::Refused(hit) => {
                    self.audit_refusal(subject, &hit);
                    return Execution::over_quota(hit);
                }
                Admission::Unavailable => return Execution::refused(ToolError::Internal, None),
                Admission::PolicyFailure => {
                    return Execution::refused(ToolError::PolicyFailure, None);
                }
            },
        };
        // The budgets the quotas reserved, where less than the flags'.
        let flags = limits.clone();
        let limits = match held.as_ref().and_then(|held| held.lease.as_ref()) {
            Some(lease) => Arc::new(Limits {
                max_native_calls: lease.calls.map_or(limits.max_native_calls, |calls| {
                    calls.min(limits.max_native_calls)
                }),
                max_fuel: lease
                    .fuel
                    .map_or(limits.max_fuel, |fuel| fuel.min(limits.max_fuel)),
                ..(*limits).clone()
            }),
            None => limits,
        };
        let permit = match tokio::time::timeout_at(
            tokio::time::Instant::from_std(deadline),
            self.permits.clone().acquire_owned(),
        )
        .await
        {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Execution::refused(ToolError::Internal, None),
            Err(_) => {
                return Execution::refused(ToolError::ResourceLimit, Some(Budget::ExecutionTime));
            }
        };
        let execution = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        let (cancel, canceller) = Cancel::with_canceller();
        let _cancel_on_drop = CancelOnDrop(canceller);
        let stop = Stop::new(deadline, cancel);
        let job = self.job(dispatch, &limits, subject, source, stop);
        let job = Job {
            execution,
            progress,
            approver,
            replay,
            calls,
            quota: held
                .as_ref()
                .and_then(|held| held.lease.clone().map(|lease| (held.gate.clone(), lease))),
            call_quotas: self
                .quotas
                .as_ref()
                .and_then(|gate| crate::quota::CallQuotas::of(gate, subject)),
            ..job
        };
        let audit = job.audit.clone();
        let mut held = held;
        let ran = tokio::task::spawn_blocking(move || {
            if let Some(held) = held.as_mut() {
                held.ran = true;
            }
            let (mut execution, store) = job.run();
            if let Some(held) = held {
                held.finish(&mut execution, &flags);
            }
            // The answer leaves after the execution's audit lines are written.
            if let Some(audit) = audit
                && !audit.sync(crate::audit::SYNC_TIMEOUT)
            {
                tracing::warn!(
                    "the audit log did not take the execution's lines within {:?}; answering without waiting longer",
                    crate::audit::SYNC_TIMEOUT
                );
            }
            match store {
                Some(store) => teardown::later(Leftovers {
                    work: Box::new(store),
                    permit,
                }),
                None => drop(permit),
            }
            execution
        })
        .await;
        ran.unwrap_or_else(|error| {
            tracing::error!(reason = %error, "execution task failed");
            Execution::refused(ToolError::Internal, None)
        })
    }

    /// The language surface the interpreter actually provides, as the seed prints it.
    ///
    /// # Errors
    ///
    /// When the interpreter cannot be instantiated.
    pub fn surface(&self) -> wasmtime::Result<String> {
        // The surface is read from the interpreter alone: no capabilities, no program.
        let limits = self.limits.load_full();
        let job = self.job(
            Arc::new(Dispatch::default()),
            &limits,
            &Subject::new("surface"),
            "",
            Stop::new(
                Instant::now() + limits.max_execution_time,
                Arc::new(Cancel::default()),
            ),
        );
        let mut store = job.store()?;
        let runner = job.pre.instantiate(&mut store)?;
        runner.codemode_runner_program().call_surface(&mut store)
    }
}

impl Executor {
    /// The limits in force: those of the executions that start now.
    pub fn limits(&self) -> Arc<Limits> {
        self.limits.load_full()
    }

    /// Applies `quotas` to the executions admitted after it.
    pub fn set_quotas(&self, quotas: crate::quota::Quotas) {
        if let Some(gate) = &self.quotas {
            gate.set_quotas(quotas);
        }
    }

    /// Applies `new` to the limits in force ([`Limits::retune`]) for the
    /// executions that start after it.
    ///
    /// # Errors
    ///
    /// [`LimitError`] when `new` is not valid; the limits in force stay.
    pub fn retune(&self, new: &Limits) -> Result<Retuned, LimitError> {
        new.validate()?;
        let retuned = self.limits.load().retune(new);
        self.limits.store(Arc::new(retuned.limits.clone()));
        Ok(retuned)
    }
}

impl Executor {
    /// A job running `source` for `subject` with the capabilities of `dispatch`
    /// within `limits`, stopped by `stop` (its execution number is 0 until the
    /// caller sets it).
    fn job(
        &self,
        dispatch: Arc<Dispatch>,
        limits: &Limits,
        subject: &Subject,
        source: &str,
        stop: Stop,
    ) -> Job {
        Job {
            engine: self.engine.clone(),
            pre: self.pre.clone(),
            dispatch,
            limits: limits.clone(),
            authorizer: self.authorizer.clone(),
            token_exchange: self.token_exchange.clone(),
            audit: self.audit.clone(),
            metrics: self.metrics.clone(),
            execution: 0,
            subject: subject.clone(),
            source: source.to_owned(),
            stop,
            progress: None,
            approver: None,
            replay: None,
            calls: None,
            waiting: self.waiting.clone(),
            quota: None,
            call_quotas: None,
        }
    }
}

impl Executor {
    /// The audit line of an execution `hit` refused: it made no call, so the
    /// line names no capability, and its execution number is 0.
    fn audit_refusal(&self, subject: &Subject, hit: &QuotaHit) {
        if let Some(audit) = &self.audit {
            audit.record(&crate::audit::AuditRecord {
                time: crate::audit::rfc3339(std::time::SystemTime::now()),
                execution: 0,
                subject: &subject.id,
                capability_id: "",
                capability: "",
                decision: crate::audit::Decision::NotEvaluated,
                approval: None,
                outcome: ToolError::ResourceLimit.fixed_text(),
                fuel: 0,
                duration_us: 0,
                pulled: None,
                quota: Some(hit.name),
            });
        }
    }
}

/// An admitted execution's lease on its subject's quotas: given back in full
/// if dropped before the execution ran (its request cancelled, or no slot in
/// time), by [`Held::finish`] with what it spent, and with nothing back if
/// dropped while it ran (a panic: what it spent is unknown).
struct Held {
    gate: Arc<QuotaGate>,
    lease: Option<crate::quota::Lease>,
    /// Whether its execution started running.
    ran: bool,
}

impl Held {
    /// Gives back what `execution` did not spend of its reservation; when it
    /// was stopped by a budget its quota lowered (`flags`: the flags' own),
    /// names the quota instead of the flag.
    fn finish(mut self, execution: &mut Execution, flags: &Limits) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let stats = &mut execution.stats;
        self.gate
            .release_blocking(&lease, stats.native_calls, stats.fuel);
        if let Some(hit) = stats
            .limit
            .and_then(|flag| lease.lowered(flag, flags.max_fuel, flags.max_native_calls))
        {
            stats.limit = None;
            stats.quota = Some(hit);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        match (self.lease.take(), self.ran) {
            (Some(lease), false) => self.gate.release_unused(lease),
            (Some(lease), true) => self.gate.release_spent(lease),
            (None, _) => {}
        }
    }
}

/// Prepares the interpreter into `cache` (for `precompile`): whether it was cached
/// already, and how long it took.
///
/// # Errors
///
/// [`RunnerError`] when it cannot be built.
pub fn prepare_runner(
    engine: &Engine,
    cache: &ArtifactCache,
) -> Result<(bool, Duration), RunnerError> {
    runner::prepare(engine, Some(cache)).map(|p| (p.cached, p.elapsed))
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until `stop` is set.
fn start_ticker(engine: Engine, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("codemode-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        });
    if let Err(error) = spawned {
        tracing::error!(reason = %error, "cannot start the epoch ticker; time budgets will not be enforced");
    }
}

/// Everything one execution needs on its blocking thread.
struct Job {
    engine: Engine,
    pre: RunnerPre<ExecState>,
    dispatch: Arc<Dispatch>,
    limits: Limits,
    authorizer: Arc<dyn Authorizer>,
    /// Trades a caller's access token for an upstream's (`--oauth-client-id`).
    token_exchange: Option<Arc<dyn TokenExchange>>,
    audit: Option<Arc<AuditLog>>,
    metrics: Arc<Metrics>,
    execution: u64,
    subject: Subject,
    source: String,
    stop: Stop,
    progress: Option<Arc<dyn Progress>>,
    approver: Option<Arc<dyn Approver>>,
    replay: Option<Replay>,
    calls: Option<CallTracer>,
    waiting: Arc<approval::Waiting>,
    /// Its lease on its subject's quotas, made to last a wait for a human.
    quota: Option<(Arc<QuotaGate>, crate::quota::Lease)>,
    /// Its subject's quotas on capabilities' calls, when it has any.
    call_quotas: Option<Arc<crate::quota::CallQuotas>>,
}

impl Job {
    fn store(&self) -> wasmtime::Result<Store<ExecState>> {
        let state = ExecState {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            memory: MemoryCap::new(self.limits.max_memory_bytes),
            dispatch: self.dispatch.clone(),
            ledger: Ledger::new(self.limits.clone()),
            subject: self.subject.clone(),
            owner: Arc::from(self.subject.owner()),
            authorizer: self.authorizer.clone(),
            token_exchange: self.token_exchange.clone(),
            audit: self.audit.clone(),
            metrics: self.metrics.clone(),
            execution: self.execution,
            stop: self.stop.clone(),
            listed: Vec::new(),
            ok_calls: Vec::new(),
            calls_done: 0,
            progress: self.progress.clone(),
            approver: self.approver.clone(),
            approvals: approval::Approvals::new(self.approver.as_ref(), self.replay.clone()),
            waiting: self.waiting.clone(),
            calls: self.calls.clone(),
            call_trace: None,
            sessions: HashMap::new(),
            retained: None,
            failed_capability: None,
            unwind_fuel: 0,
            too_large: false,
            quota: self.quota.clone(),
            call_quotas: self.call_quotas.clone(),
            quota_hit: None,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.memory);
        store.set_fuel(self.limits.max_fuel)?;
        self.stop.install(&mut store);
        Ok(store)
    }

    /// Runs the program: its outcome, and its cost with the budget that ran out, if
    /// one did; and its store, to be freed after the answer is sent ([`teardown`]).
    fn run(self) -> (Execution, Option<Store<ExecState>>) {
        let mut store = match self.store() {
            Ok(store) => store,
            Err(error) => {
                tracing::error!(reason = %format!("{error:#}"), "cannot create the interpreter store");
                return (Execution::refused(ToolError::Internal, None), None);
            }
        };
        let limits = RunnerLimits {
            max_steps: self.limits.max_execution_steps,
            max_value_depth: self.limits.max_value_depth as u32,
            max_value_bytes: self.limits.max_value_bytes as u32,
        };
        let outcome = self.pre.instantiate(&mut store).and_then(|runner| {
            runner
                .codemode_runner_program()
                .call_run(&mut store, &self.source, limits)
        });
        // What was spent, not counting what unwinding after a failed call was given
        // past the budget.
        let fuel = self
            .limits
            .max_fuel
            .saturating_add(store.data().unwind_fuel)
            .saturating_sub(store.get_fuel().unwrap_or(0))
            .min(self.limits.max_fuel);
        self.metrics.fuel(fuel);
        let state = store.data_mut();
        state.count_ok_calls();
        let mut stats = Stats {
            fuel,
            native_calls: state.ledger.native_calls(),
            intermediate_bytes: state.ledger.intermediate_bytes(),
            ..Stats::default()
        };
        let reported = outcome
            .as_ref()
            .ok()
            .and_then(|outcome| outcome.failed_call.clone());
        let failed_capability = state.failed_capability.take();
        let outcome = self.conclude(state, outcome, &mut stats);
        if outcome.is_err() {
            stats.limit = state.ledger.exhausted().map(Budget::flag);
            // A call a quota refused stopped it: the quota is named, no flag.
            if let Some(hit) = state.quota_hit.take() {
                stats.limit = None;
                stats.quota = Some(hit);
            }
        }
        let failed_call = match (&outcome, reported, failed_capability) {
            (Ok(_), _, _) => None,
            // Where the interpreter saw the call fail; a position of 0 is unknown.
            (Err(_), Some(call), _) => Some(FailedCall {
                capability: call.capability,
                line: (call.line > 0).then_some(call.line),
                column: (call.column > 0).then_some(call.column),
            }),
            // The interpreter was stopped before it could say where (the deadline
            // passed while it unwound): the host knows which call it was.
            (Err(_), None, Some(capability)) => Some(FailedCall {
                capability,
                line: None,
                column: None,
            }),
            (Err(_), None, None) => None,
        };
        let execution = Execution {
            outcome,
            stats,
            failed_call,
            suspended: store.data_mut().approvals.suspended.take(),
        };
        (execution, Some(store))
    }

    /// The execution's value, or its error: a native call's retained failure first,
    /// then a trap, then what the interpreter reported.
    fn conclude(
        &self,
        state: &mut ExecState,
        outcome: wasmtime::Result<runner::Outcome>,
        stats: &mut Stats,
    ) -> Result<serde_json::Value, ToolError> {
        let retained = state.retained.take();
        let outcome = match (outcome, retained) {
            (_, Some(error)) => return Err(error),
            (Ok(outcome), None) => outcome,
            (Err(error), None) => {
                let memory = match (state.memory.hit, state.too_large) {
                    (Some(MemoryHit::Total), _) => Some(MemoryHit::Total),
                    (Some(MemoryHit::Own), _) | (None, true) => Some(MemoryHit::Own),
                    (None, false) => None,
                };
                return Err(match classify_trap(&error, memory) {
                    Ok(budget) => state.ledger.exhaust(budget),
                    Err(error) => error,
                });
            }
        };
        stats.steps = outcome.steps;
        let bytes = match outcome.value {
            Ok(bytes) => bytes,
            Err(Failure::InvalidProgram(detail)) => {
                let detail = (detail.len() <= MAX_PROGRAM_DETAIL_BYTES).then_some(detail);
                return Err(ToolError::InvalidProgram(detail));
            }
            // The interpreter's own budgets.
            Err(Failure::ResourceLimit(exceeded)) => {
                return Err(state.ledger.exhaust(match exceeded {
                    Exceeded::Steps => Budget::ExecutionSteps,
                    Exceeded::ValueDepth => Budget::ValueDepth,
                    Exceeded::ValueBytes => Budget::ValueBytes,
                }));
            }
            Err(Failure::Aborted) => {
                tracing::error!(
                    "the interpreter reported a failed native call the host did not see"
                );
                return Err(ToolError::Internal);
            }
        };
        let value = codemode_value::decode(&bytes, self.limits.max_value_depth)
            .map_err(|_| state.ledger.exhaust(Budget::ValueDepth))?;
        stats.result_bytes = codemode_value::json_len(&value);
        state.ledger.check_final_value(stats.result_bytes)?;
        crate::json::values::to_json(value).ok_or(ToolError::InvalidProgram(None))
    }
}

/// Classifies a trap of the interpreter (or a plugin) that no native call explained:
/// the budget that ran out, or the error the agent sees.
pub(crate) fn classify_trap(
    error: &wasmtime::Error,
    memory: Option<MemoryHit>,
) -> Result<Budget, ToolError> {
    if let Some(interrupted) = error.downcast_ref::<Interrupted>() {
        return match interrupted {
            Interrupted::Cancelled => Err(ToolError::Canceled),
            Interrupted::Deadline | Interrupted::CallTimeout => Ok(Budget::ExecutionTime),
        };
    }
    match memory {
        Some(MemoryHit::Own) => return Ok(Budget::Memory),
        Some(MemoryHit::Total) => return Ok(Budget::TotalMemory),
        None => {}
    }
    if error
        .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
    {
        tracing::warn!(reason = %format!("{error:#}"), "instance pool exhausted");
        return Ok(Budget::Capacity);
    }
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => Ok(Budget::Fuel),
        // The interpreter's stack: a program nested too deeply for the parser (past
        // the depth check, which runs after parsing) overflows the host stack or,
        // the interpreter being stack-first, its 8 MiB stack (an access below
        // address 0). No flag raises it, and naming --max-memory would send the
        // operator raising the wrong budget.
        Some(wasmtime::Trap::StackOverflow | wasmtime::Trap::MemoryOutOfBounds) => {
            Ok(Budget::Stack)
        }
        _ => {
            tracing::error!(reason = %format!("{error:#}"), "the interpreter trapped");
            Err(ToolError::Internal)
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::AllowAll;
    use std::sync::OnceLock;

    /// The budgets of these tests: small enough to run out at once.
    fn limits() -> Limits {
        Limits {
            max_source_bytes: 200,
            max_execution_steps: 1000,
            max_value_depth: 4,
            max_value_bytes: 100,
            ..Limits::default()
        }
    }

    /// One executor for the tests of this module: preparing the interpreter takes
    /// seconds. Its compiled code is kept in the tests' cache, `target/test-cache`
    /// (where the test command precompiled it), so that the tests, run one
    /// process each (cargo-nextest; `.config/nextest.toml` runs them one after
    /// another), compile it once at most.
    fn executor() -> &'static Executor {
        static EXECUTOR: OnceLock<Executor> = OnceLock::new();
        EXECUTOR.get_or_init(|| {
            let engine =
                crate::plugins::engine(crate::plugins::pool_instances(2, 0)).expect("an engine");
            let cache = crate::cache::open_cache(Some(std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../target/test-cache"
            ))));
            Executor::new(ExecutorConfig {
                engine: &engine,
                limits: limits(),
                authorizer: Arc::new(AllowAll),
                token_exchange: None,
                audit: None,
                metrics: Arc::new(Metrics::default()),
                cache: cache.as_ref(),
                telemetry: None,
                quotas: None,
            })
            .expect("the interpreter")
        })
    }

    /// Runs `source` with no capabilities: its outcome and the budget that ran out.
    fn run(source: &str) -> (Result<serde_json::Value, ToolError>, Option<&'static str>) {
        let executor = executor();
        let stop = Stop::new(
            Instant::now() + Duration::from_secs(30),
            Arc::new(Cancel::default()),
        );
        let job = executor.job(
            Arc::new(Dispatch::default()),
            &executor.limits(),
            &Subject::new("test"),
            source,
            stop,
        );
        let (execution, _store) = job.run();
        (execution.outcome, execution.stats.limit)
    }

    #[test]
    fn a_program_s_value_comes_back_as_json() {
        assert_eq!(
            run("def main():\n    return {'b': [1, 2.5, None], 'a': 'x'}"),
            (Ok(serde_json::json!({"a": "x", "b": [1, 2.5, null]})), None)
        );
    }

    #[test]
    fn a_full_instance_pool_is_the_server_s_capacity() {
        // The next instantiation of a taken pool of one fails the way an
        // execution's does when every slot of the real pool is in use (the
        // plugin's side of it: the sandbox crate's session tests).
        let error = crate::plugins::full_pool_error().expect("a full pool");
        assert_eq!(classify_trap(&error, None), Ok(Budget::Capacity));
    }

    #[test]
    fn budgets_that_run_out_are_named() {
        assert_eq!(
            run(
                "def main():\n    t = 0\n    for i in range(100000):\n        t += i\n    return t"
            ),
            (Err(ToolError::ResourceLimit), Some("--max-execution-steps"))
        );
        assert_eq!(
            run("def main():\n    return [[[[[1]]]]]"),
            (Err(ToolError::ResourceLimit), Some("--max-value-depth"))
        );
        assert_eq!(
            run(&format!("def main():\n    return '{}'", "a".repeat(120))),
            (Err(ToolError::ResourceLimit), Some("--max-value-bytes"))
        );
    }

    #[test]
    fn the_program_s_own_failures_are_invalid_programs_not_budgets() {
        assert_eq!(
            run("def main():\n    return records.lookup(key='x')"),
            (
                Err(ToolError::InvalidProgram(Some(
                    "<codemode>:2:12: Variable `records` not found".into()
                ))),
                None
            )
        );
        assert_eq!(
            run("x = 1"),
            (
                Err(ToolError::InvalidProgram(Some(
                    "<codemode>: `main` is not defined; define `def main():` with no parameters"
                        .into()
                ))),
                None
            )
        );
    }

    #[test]
    fn a_source_over_its_budget_never_starts() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let source = format!("def main():\n    return '{}'", "a".repeat(200));
        let refused = runtime.block_on(executor().execute(
            Arc::new(Dispatch::default()),
            &Subject::new("test"),
            &source,
            Instant::now(),
            RunOptions::default(),
        ));
        assert_eq!(refused.outcome, Err(ToolError::ResourceLimit));
        assert_eq!(refused.stats.limit, Some("--max-source-bytes"));
        assert_eq!(refused.stats.steps, 0);
        let ran = runtime.block_on(executor().execute(
            Arc::new(Dispatch::default()),
            &Subject::new("test"),
            "def main():\n    return 1",
            Instant::now(),
            RunOptions::default(),
        ));
        assert_eq!(ran.outcome, Ok(serde_json::json!(1)));
        assert_eq!(ran.stats.limit, None);
    }

    /// The time budget runs from when the request arrived: one whose budget went
    /// by before it could start (waiting for the load) never starts.
    #[test]
    fn a_request_whose_time_went_by_never_starts() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let executor = executor();
        let arrived = Instant::now()
            .checked_sub(executor.limits().max_execution_time)
            .expect("an instant that long ago");
        let late = runtime.block_on(executor.execute(
            Arc::new(Dispatch::default()),
            &Subject::new("test"),
            "def main():\n    return 1",
            arrived,
            RunOptions::default(),
        ));
        assert_eq!(late.outcome, Err(ToolError::ResourceLimit));
        assert_eq!(late.stats.limit, Some("--max-execution-time"));
        assert_eq!(late.stats.steps, 0);
        assert!(late.stats.elapsed_us >= executor.limits().max_execution_time.as_micros() as u64);
    }
}
