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

mod dispatch;
mod limits;
mod runner;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use codemode_value::Value;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub use limits::{DEFAULT_MAX_FUEL, LimitError, Limits};
pub use runner::{RunnerError, default_cache_dir};

use crate::audit::AuditLog;
use crate::authz::{Authorizer, Subject};
use crate::cache::ArtifactCache;
use crate::error::ToolError;
use crate::metrics::Metrics;
use crate::plugins::{CallTarget, LoadedPlugin, MemoryCap};
use crate::wait::Cancel;
use dispatch::PluginInstance;
use runner::{Failure, RunnerLimits, RunnerPre};

/// Longest invalid-program detail passed on; a longer one is dropped (bare text).
pub const MAX_PROGRAM_DETAIL_BYTES: usize = 4096;

/// How often the epoch advances: the resolution of the time budget and of noticing a
/// cancelled request.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Where each enabled capability is served.
pub(crate) struct Route {
    /// Index into the plugin list.
    pub plugin: usize,
    /// The capability's stable ID (for authorization).
    pub id: String,
    /// The export to call.
    pub target: CallTarget,
}

/// The catalog as the executor sees it: names, routes and the plugins behind them.
#[derive(Default)]
pub(crate) struct Dispatch {
    /// Every enabled capability name, sorted.
    pub names: Vec<String>,
    /// Name → route.
    pub routes: HashMap<String, Route>,
    /// The loaded plugins (shared with the next catalog when unchanged).
    pub plugins: Vec<Arc<LoadedPlugin>>,
}

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
    limits: Limits,
    permits: Arc<tokio::sync::Semaphore>,
    authorizer: Arc<dyn Authorizer>,
    audit: Option<Arc<AuditLog>>,
    metrics: Arc<Metrics>,
    stop_ticker: Arc<AtomicBool>,
    started: Arc<AtomicU64>,
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// Why the interrupt callback stopped a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupted {
    /// The request was cancelled.
    Cancelled,
    /// The time budget ran out.
    Deadline,
    /// A plugin call ran past its plugin's `timeout` grant.
    CallTimeout,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Interrupted::Cancelled => "execution cancelled",
            Interrupted::Deadline => "execution time budget exhausted",
            Interrupted::CallTimeout => "the plugin's timeout ran out",
        })
    }
}

impl std::error::Error for Interrupted {}

/// When an execution must stop: its deadline and its request's cancellation; for a
/// plugin call, also the call's own deadline (its plugin's `timeout`).
#[derive(Debug, Clone)]
pub(crate) struct Stop {
    deadline: Instant,
    cancel: Arc<Cancel>,
    call_deadline: Option<Instant>,
}

impl Stop {
    /// A new execution's stop.
    fn new(deadline: Instant, cancel: Arc<Cancel>) -> Self {
        Self {
            deadline,
            cancel,
            call_deadline: None,
        }
    }

    /// The stop of one plugin call that must also end by `call_deadline`.
    pub(crate) fn for_call(&self, call_deadline: Option<Instant>) -> Self {
        Self {
            call_deadline,
            ..self.clone()
        }
    }

    /// When the execution's time budget runs out.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// When the current wait must end: the call's own deadline if it has one (it is
    /// never later than the execution's), else the execution's.
    pub(crate) fn wait_deadline(&self) -> Instant {
        self.call_deadline.unwrap_or(self.deadline)
    }

    /// The request's cancellation.
    pub(crate) fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Installs the check on `store`: at every epoch tick, stop if cancelled or late.
    pub(crate) fn install<T: 'static>(&self, store: &mut Store<T>) {
        let stop = self.clone();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if stop.cancel.is_cancelled() {
                return Err(wasmtime::Error::new(Interrupted::Cancelled));
            }
            let now = Instant::now();
            if now >= stop.deadline {
                return Err(wasmtime::Error::new(Interrupted::Deadline));
            }
            if stop.call_deadline.is_some_and(|d| now >= d) {
                return Err(wasmtime::Error::new(Interrupted::CallTimeout));
            }
            Ok(UpdateDeadline::Continue(1))
        });
    }
}

/// The data of one execution's interpreter store.
pub(crate) struct ExecState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryCap,
    engine: Engine,
    dispatch: Arc<Dispatch>,
    limits: Limits,
    subject: Subject,
    authorizer: Arc<dyn Authorizer>,
    audit: Option<Arc<AuditLog>>,
    metrics: Arc<Metrics>,
    /// This execution's number, for the audit log.
    execution: u64,
    stop: Stop,
    /// One instance per plugin used, created on first use.
    instances: HashMap<usize, PluginInstance>,
    /// The failure of a native call: it decides the execution's error.
    retained: Option<ToolError>,
    native_calls: u64,
    intermediate_bytes: usize,
}

impl WasiView for ExecState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// What the executor is built from.
pub(crate) struct ExecutorConfig<'a> {
    pub engine: &'a Engine,
    pub limits: Limits,
    pub authorizer: Arc<dyn Authorizer>,
    pub audit: Option<Arc<AuditLog>>,
    pub metrics: Arc<Metrics>,
    pub cache: Option<&'a ArtifactCache>,
}

/// Cancels when dropped: a request future dropped before its execution ended
/// (cancelled) stops that execution at the next epoch tick, or at once when it waits
/// on a plugin blocked in a host call.
struct CancelOnDrop(Arc<Cancel>);

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
        Ok(Self {
            engine: config.engine.clone(),
            pre,
            permits: Arc::new(tokio::sync::Semaphore::new(
                config.limits.max_concurrent_executions,
            )),
            limits: config.limits,
            authorizer: config.authorizer,
            audit: config.audit,
            metrics: config.metrics,
            stop_ticker,
            started: Arc::new(AtomicU64::new(0)),
        })
    }

    /// How many executions got a slot and started running (queued ones that were
    /// cancelled or timed out never count).
    pub fn executions_started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// The budgets in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Runs `source` for `subject` with the capabilities of `dispatch` (the plugin
    /// set it keeps to the end, whatever a reload does meanwhile). Dropping the
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
    ) -> Result<Executed, ToolError> {
        let started = Instant::now();
        let outcome = self.execute_timed(dispatch, subject, source, started).await;
        let label = match &outcome {
            Ok(_) => "ok",
            Err(error) => error.fixed_text(),
        };
        self.metrics.execute(label, started.elapsed());
        outcome
    }

    /// The metrics this executor records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    async fn execute_timed(
        &self,
        dispatch: Arc<Dispatch>,
        subject: &Subject,
        source: &str,
        started: Instant,
    ) -> Result<Executed, ToolError> {
        if source.len() > self.limits.max_source_bytes {
            return Err(ToolError::ResourceLimit);
        }
        let deadline = started + self.limits.max_execution_time;
        let permit = tokio::time::timeout_at(
            tokio::time::Instant::from_std(deadline),
            self.permits.clone().acquire_owned(),
        )
        .await
        .map_err(|_| ToolError::ResourceLimit)?
        .map_err(|_| ToolError::Internal)?;
        let execution = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        let cancel = Arc::new(Cancel::default());
        let _cancel_on_drop = CancelOnDrop(cancel.clone());
        let job = Job {
            engine: self.engine.clone(),
            pre: self.pre.clone(),
            dispatch,
            limits: self.limits.clone(),
            authorizer: self.authorizer.clone(),
            audit: self.audit.clone(),
            metrics: self.metrics.clone(),
            execution,
            subject: subject.clone(),
            source: source.to_owned(),
            stop: Stop::new(deadline, cancel),
        };
        let outcome = tokio::task::spawn_blocking(move || {
            let outcome = job.run();
            drop(permit);
            outcome
        })
        .await
        .map_err(|error| {
            tracing::error!(reason = %error, "execution task failed");
            ToolError::Internal
        })?;
        let (value, mut stats) = outcome?;
        stats.elapsed_us = started.elapsed().as_micros() as u64;
        Ok(Executed { value, stats })
    }

    /// The language surface the interpreter actually provides, as the seed prints it.
    ///
    /// # Errors
    ///
    /// When the interpreter cannot be instantiated.
    pub fn surface(&self) -> wasmtime::Result<String> {
        let job = Job {
            engine: self.engine.clone(),
            pre: self.pre.clone(),
            // The surface is read from the interpreter alone: no capabilities.
            dispatch: Arc::new(Dispatch::default()),
            limits: self.limits.clone(),
            authorizer: self.authorizer.clone(),
            audit: None,
            metrics: Arc::new(Metrics::default()),
            execution: 0,
            subject: Subject {
                id: "surface".into(),
            },
            source: String::new(),
            stop: Stop::new(
                Instant::now() + self.limits.max_execution_time,
                Arc::new(Cancel::default()),
            ),
        };
        let mut store = job.store()?;
        let runner = job.pre.instantiate(&mut store)?;
        runner.codemode_runner_program().call_surface(&mut store)
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
    audit: Option<Arc<AuditLog>>,
    metrics: Arc<Metrics>,
    execution: u64,
    subject: Subject,
    source: String,
    stop: Stop,
}

impl Job {
    fn store(&self) -> wasmtime::Result<Store<ExecState>> {
        let state = ExecState {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            memory: MemoryCap::new(self.limits.max_memory_bytes),
            engine: self.engine.clone(),
            dispatch: self.dispatch.clone(),
            limits: self.limits.clone(),
            subject: self.subject.clone(),
            authorizer: self.authorizer.clone(),
            audit: self.audit.clone(),
            metrics: self.metrics.clone(),
            execution: self.execution,
            stop: self.stop.clone(),
            instances: HashMap::new(),
            retained: None,
            native_calls: 0,
            intermediate_bytes: 0,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.memory);
        store.set_fuel(self.limits.max_fuel)?;
        self.stop.install(&mut store);
        Ok(store)
    }

    fn run(self) -> Result<(serde_json::Value, Stats), ToolError> {
        let mut store = self.store().map_err(|error| {
            tracing::error!(reason = %format!("{error:#}"), "cannot create the interpreter store");
            ToolError::Internal
        })?;
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
        let fuel = self.limits.max_fuel - store.get_fuel().unwrap_or(0);
        self.metrics.fuel(fuel);
        let state = store.data_mut();
        let mut stats = Stats {
            fuel,
            native_calls: state.native_calls,
            intermediate_bytes: state.intermediate_bytes,
            ..Stats::default()
        };
        let retained = state.retained.take();
        let memory_hit = state.memory.hit;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                return Err(retained.unwrap_or_else(|| classify_trap(&error, memory_hit)));
            }
        };
        stats.steps = outcome.steps;
        let bytes = match (outcome.value, retained) {
            (_, Some(error)) => return Err(error),
            (Ok(bytes), None) => bytes,
            (Err(Failure::InvalidProgram(detail)), None) => {
                let detail = (detail.len() <= MAX_PROGRAM_DETAIL_BYTES).then_some(detail);
                return Err(ToolError::InvalidProgram(detail));
            }
            (Err(Failure::ResourceLimit), None) => return Err(ToolError::ResourceLimit),
            (Err(Failure::Aborted), None) => {
                tracing::error!(
                    "the interpreter reported a failed native call the host did not see"
                );
                return Err(ToolError::Internal);
            }
        };
        let value = codemode_value::decode(&bytes, self.limits.max_value_depth)
            .map_err(|_| ToolError::ResourceLimit)?;
        stats.result_bytes = codemode_value::json_len(&value);
        if stats.result_bytes > self.limits.max_value_bytes {
            return Err(ToolError::ResourceLimit);
        }
        let json = to_json(value).ok_or(ToolError::InvalidProgram(None))?;
        Ok((json, stats))
    }
}

/// Classifies a trap of the interpreter (or a plugin) that no native call explained.
pub(crate) fn classify_trap(error: &wasmtime::Error, memory_hit: bool) -> ToolError {
    if let Some(interrupted) = error.downcast_ref::<Interrupted>() {
        return match interrupted {
            Interrupted::Cancelled => ToolError::Canceled,
            Interrupted::Deadline | Interrupted::CallTimeout => ToolError::ResourceLimit,
        };
    }
    if memory_hit {
        return ToolError::ResourceLimit;
    }
    if error
        .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
    {
        tracing::warn!(reason = %format!("{error:#}"), "instance pool exhausted");
        return ToolError::ResourceLimit;
    }
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel | wasmtime::Trap::StackOverflow) => ToolError::ResourceLimit,
        // The interpreter is stack-first: overflowing its 8 MiB stack (a program
        // nested too deeply for the parser) is an access below address 0.
        Some(wasmtime::Trap::MemoryOutOfBounds) => ToolError::ResourceLimit,
        _ => {
            tracing::error!(reason = %format!("{error:#}"), "the interpreter trapped");
            ToolError::Internal
        }
    }
}

/// The final value as JSON (object keys sorted). `None` for what JSON cannot carry;
/// the interpreter rejects those before, so this is a second line.
fn to_json(value: Value) -> Option<serde_json::Value> {
    Some(match value {
        Value::None => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(b),
        Value::Int(i) => serde_json::Value::from(i),
        Value::Float(f) => serde_json::Value::Number(serde_json::Number::from_f64(f)?),
        Value::Str(s) => serde_json::Value::String(s),
        Value::List(items) => {
            serde_json::Value::Array(items.into_iter().map(to_json).collect::<Option<_>>()?)
        }
        Value::Dict(entries) => serde_json::Value::Object(
            entries
                .into_iter()
                .map(|(k, v)| Some((k, to_json(v)?)))
                .collect::<Option<_>>()?,
        ),
        Value::BigInt { .. } | Value::NonStringKeys | Value::Unsupported(_) => return None,
    })
}
