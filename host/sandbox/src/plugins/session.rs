//! WebAssembly plugins as a capability source: one plugin file is a
//! [`CapabilitySource`], and an execution's [`Session`] with it owns that
//! execution's instance of the plugin (created on first use, never shared).
//!
//! Binding lowers a call's arguments into component values (the [`Wit`]
//! lowering) in the same walk that checks them; a call runs the export on the
//! instance with the fuel and memory the budget and the plugin's grants allow, and
//! lifts the result. Instantiation and the call are asynchronous: the executor races
//! them against the execution's deadline and cancellation, and this session races
//! them against the plugin's own `timeout` grant, so a plugin waiting in a host call
//! (a clock, a socket, outbound HTTP) is abandoned where the epoch deadline could not
//! stop it, because no wasm runs.

use std::sync::Arc;
use std::time::Instant;

use codemode_value::Value;
use wasmtime::Store;
use wasmtime::component::Instance;

use super::invoke::{CallTarget, OutputError, output};
use super::load::LoadedPlugin;
use super::output::Output;
use super::sandbox::{MemoryHit, PluginState, Unprovided};
use super::spare::{Spare, SpareTerms, Spares};
use super::wire::Wit;
use crate::budget::Budget;
use crate::catalog::{BindError, BindLimits, Bound, Capability};
use crate::error::timed_out_detail;
use crate::source::{
    Arguments, CallBudget, CallFailure, CallFuture, CallOutcome, CapabilitySource, Meter, Session,
};
use crate::wait::{Interrupted, Stop};

impl CapabilitySource for LoadedPlugin {
    fn label(&self) -> &str {
        &self.file
    }

    fn pulled(&self) -> Option<&crate::source::Pulled> {
        self.provenance.as_ref()
    }

    fn capabilities(&self) -> &[Arc<Capability>] {
        &self.capabilities
    }

    fn bind(
        &self,
        capability: &Capability,
        arguments: &Value,
        limits: BindLimits,
    ) -> Result<Bound<Arguments>, BindError> {
        let bound = capability.binder().bind(arguments, &Wit, limits)?;
        Ok(bound.map(Arguments::new))
    }

    fn session(self: Arc<Self>, execution: u64) -> Box<dyn Session> {
        Box::new(PluginSession {
            plugin: self,
            execution,
            instance: None,
            stop_has_call_deadline: false,
            stop_deadline: None,
            output: Output::default(),
            last: None,
        })
    }
}

/// One execution's use of one plugin.
struct PluginSession {
    plugin: Arc<LoadedPlugin>,
    /// The execution's number, for the log.
    execution: u64,
    /// The instance, once created and while it is fit for another call (an
    /// abandoned or trapped instance is dropped).
    instance: Option<(Store<PluginState>, Instance)>,
    /// Whether the stop installed in the instance's store has a call deadline (a
    /// `timeout` grant): without one, the next call can keep it as it is.
    stop_has_call_deadline: bool,
    /// The execution deadline of that stop: it moves when a human took time to
    /// approve a call (the time is not the program's), and the stop with it.
    stop_deadline: Option<Instant>,
    /// What the instances write to stdout and stderr.
    output: Output,
    /// The capability of the latest call, which any output left belongs to.
    last: Option<usize>,
}

impl Session for PluginSession {
    fn call(&mut self, index: usize, arguments: Arguments, budget: CallBudget) -> CallFuture<'_> {
        Box::pin(async move {
            self.last = Some(index);
            let outcome = self.run(index, arguments, budget).await;
            self.emit_output();
            outcome
        })
    }
}

impl Drop for PluginSession {
    /// Output of a call abandoned at the execution's deadline is still logged.
    fn drop(&mut self) {
        self.emit_output();
    }
}

impl PluginSession {
    /// Logs what the plugin wrote during the latest call.
    fn emit_output(&self) {
        let capability = self
            .last
            .and_then(|index| self.plugin.capabilities.get(index))
            .map_or("-", |c| c.name.as_str());
        self.output
            .emit(&self.plugin.file, capability, Some(self.execution));
    }

    async fn run(&mut self, index: usize, arguments: Arguments, budget: CallBudget) -> CallOutcome {
        let plugin = self.plugin.clone();
        let (Some(capability), Some(target)) =
            (plugin.capabilities.get(index), plugin.targets.get(index))
        else {
            tracing::error!(plugin = %plugin.file, index, "a call named a capability the plugin does not have");
            return Err(CallFailure::Internal);
        };
        let name = capability.name.as_str();
        let Some(params) = arguments.take::<Vec<wasmtime::component::Val>>() else {
            tracing::error!(capability = %name, "the arguments were not bound by the plugin source");
            return Err(CallFailure::Internal);
        };
        let grants = &plugin.grants;
        let left = budget.meter.remaining();
        let fuel = grants.max_fuel_per_call.map_or(left, |cap| cap.min(left));
        // Which budget a plugin that runs out answers to: its sidecar's, where that
        // is the tighter one.
        let caps = Caps {
            fuel: grants.max_fuel_per_call.is_some_and(|cap| cap < left),
            memory: grants
                .max_memory
                .is_some_and(|cap| cap < plugin.max_memory_bytes),
        };
        let call_deadline = grants
            .timeout
            .map(|t| Instant::now() + t)
            .filter(|d| *d < budget.deadline);
        let deadline = budget.deadline;
        let stop = Stop::new(deadline, budget.cancel).for_call(call_deadline);
        // Set when this call instantiates the plugin itself: a spare is made for the
        // next execution once that worked.
        let mut instantiated = None;
        let (mut store, instance) = match self.instance.take() {
            Some((mut store, instance)) => {
                if store.set_fuel(fuel).is_err() {
                    return Err(CallFailure::Internal);
                }
                // The execution's cancellation is the same for every call of a
                // session; a call deadline, or a deadline moved by an approval,
                // changes the stop.
                if call_deadline.is_some()
                    || self.stop_has_call_deadline
                    || self.stop_deadline != Some(deadline)
                {
                    stop.install(&mut store);
                } else {
                    stop.renew(&mut store);
                }
                (store, Some(instance))
            }
            None => {
                let terms = SpareTerms {
                    max_memory: max_memory(&plugin, plugin.max_memory_bytes),
                    fuel,
                };
                match plugin.spares.take(terms.max_memory) {
                    // Its start code burned less than this call may: the same
                    // outcome as instantiating it here, for the same fuel.
                    Some(spare) if spare.fuel < fuel => {
                        tracing::debug!(plugin = %plugin.file, execution = self.execution, "took a spare instance");
                        Spares::replenish(plugin.clone(), terms);
                        let Spare {
                            mut store,
                            instance,
                            output,
                            fuel: spent,
                        } = spare;
                        if store.set_fuel(fuel - spent).is_err() {
                            return Err(CallFailure::Internal);
                        }
                        stop.install(&mut store);
                        self.output = output;
                        (store, Some(instance))
                    }
                    _ => match new_store(&plugin, terms.max_memory, fuel, &stop, &self.output) {
                        Ok(store) => {
                            instantiated = Some(terms);
                            (store, None)
                        }
                        Err(failure) => return Err(failure),
                    },
                }
            }
        };
        // A grow refused in an earlier call (or in a spare's start code) that the
        // plugin got over says nothing about how this call ends.
        store.data_mut().limits.hit = None;
        let outbound = &mut store.data_mut().outbound;
        outbound.deadline = stop.wait_deadline();
        outbound.denied = None;
        let mut results = [CallTarget::result_slot()];
        let work = async {
            let instance = match instance {
                Some(instance) => instance,
                None => plugin.pre.instantiate_async(&mut store).await?,
            };
            let func = instance
                .get_func(&mut store, target.index)
                .ok_or_else(|| wasmtime::Error::msg(format!("the export of {name} is missing")))?;
            func.call_async(&mut store, &params, &mut results).await?;
            Ok::<_, wasmtime::Error>(instance)
        };
        // `None`: the plugin's own timeout ended a wait outside WebAssembly.
        let waited = match call_deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.into(), work).await.ok(),
            None => Some(work.await),
        };
        let burned = fuel.saturating_sub(store.get_fuel().unwrap_or(0));
        let timed_out = call_deadline.is_some_and(|d| Instant::now() >= d);
        if timed_out {
            tracing::warn!(
                capability = %name,
                plugin = %plugin.file,
                timeout_ms = grants.timeout.unwrap_or_default().as_millis() as u64,
                "capability call ran past its plugin's timeout"
            );
        }
        let explanation = match store.data_mut().outbound.denied.take() {
            Some(denied) => Some(denied),
            None if timed_out => Some(timed_out_detail(name)),
            None => None,
        };
        let instance = match waited {
            Some(Ok(instance)) => instance,
            Some(Err(error)) => {
                let memory = store.data().limits.hit;
                return failed(
                    &budget.meter,
                    classify_plugin_trap(&error, memory, caps, name, &plugin.file, explanation),
                    burned,
                );
            }
            None => return failed(&budget.meter, CallFailure::Failed(explanation), burned),
        };
        self.instance = Some((store, instance));
        self.stop_has_call_deadline = call_deadline.is_some();
        self.stop_deadline = Some(deadline);
        if let Some(terms) = instantiated {
            Spares::replenish(plugin.clone(), terms);
        }
        let [result] = results;
        let result = output(
            target,
            &capability.output,
            result,
            budget.max_depth,
            budget.max_nodes,
        )
        .map_err(|error| match error {
            OutputError::Failed(detail) => CallFailure::Failed(explanation.or(detail)),
            OutputError::Exhausted(budget) => CallFailure::Exhausted(budget),
        });
        budget.meter.charge(burned);
        result
    }
}

/// Whether the plugin's own sidecar caps, not the execution's budgets, bound a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Caps {
    /// `max_fuel_per_call` is below the execution's remaining fuel.
    fuel: bool,
    /// `max_memory` is below `--max-memory`.
    memory: bool,
}

/// A call that failed after burning `fuel`, charged to `meter`.
fn failed(meter: &Meter, failure: CallFailure, fuel: u64) -> CallOutcome {
    meter.charge(fuel);
    Err(failure)
}

/// The cap on each linear memory of an instance of `plugin`: its own `max_memory`
/// grant where that is below the execution's.
fn max_memory(plugin: &LoadedPlugin, max_memory_bytes: usize) -> usize {
    plugin
        .grants
        .max_memory
        .map_or(max_memory_bytes, |m| m.min(max_memory_bytes))
}

/// A store for a new instance of `plugin` in this execution, with what its grants
/// give; the instance's start code will run on `fuel` and within `stop`, and what
/// is left is what the first call gets.
fn new_store(
    plugin: &LoadedPlugin,
    max_memory: usize,
    fuel: u64,
    stop: &Stop,
    output: &Output,
) -> Result<Store<PluginState>, CallFailure> {
    let state = PluginState::new(&plugin.file, &plugin.grants, max_memory, output).map_err(|reason| {
        tracing::warn!(plugin = %plugin.file, reason = %reason, "cannot prepare the plugin's instance");
        CallFailure::Failed(None)
    })?;
    let mut store = Store::new(plugin.pre.engine(), state);
    store.limiter(|s| &mut s.limits);
    stop.install(&mut store);
    store.set_fuel(fuel).map_err(|_| CallFailure::Internal)?;
    Ok(store)
}

/// A plugin's trap: budgets are exhausted budgets, cancellation is cancellation, a
/// trap the host can explain (`explanation`) is the capability's failure with that
/// message; anything else is the capability's failure (logged, never shown).
fn classify_plugin_trap(
    error: &wasmtime::Error,
    memory: Option<MemoryHit>,
    caps: Caps,
    name: &str,
    plugin: &str,
    explanation: Option<String>,
) -> CallFailure {
    if let Some(interrupted) = error.downcast_ref::<Interrupted>() {
        return match interrupted {
            Interrupted::Cancelled => CallFailure::Canceled,
            Interrupted::Deadline => CallFailure::Exhausted(Budget::ExecutionTime),
            Interrupted::CallTimeout => CallFailure::Failed(explanation),
        };
    }
    match memory {
        Some(MemoryHit::Own) if caps.memory => return CallFailure::Exhausted(Budget::PluginMemory),
        Some(MemoryHit::Own) => return CallFailure::Exhausted(Budget::Memory),
        Some(MemoryHit::Total) => return CallFailure::Exhausted(Budget::TotalMemory),
        None => {}
    }
    if matches!(
        error.downcast_ref::<wasmtime::Trap>(),
        Some(wasmtime::Trap::OutOfFuel)
    ) {
        return CallFailure::Exhausted(if caps.fuel {
            Budget::PluginFuel
        } else {
            Budget::Fuel
        });
    }
    if error
        .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
    {
        // Every instance slot (or fiber stack) of the pool is taken: the server's
        // capacity, not the plugin's fault.
        tracing::warn!(capability = %name, reason = %format!("{error:#}"), "instance pool exhausted");
        return CallFailure::Exhausted(Budget::Capacity);
    }
    if let Some(unprovided) = error.downcast_ref::<Unprovided>() {
        tracing::warn!(capability = %name, plugin = %plugin, reason = %unprovided, "capability called an import the host does not provide");
        return CallFailure::Failed(Some(unprovided.to_string()));
    }
    tracing::warn!(capability = %name, reason = %format!("{error:#}"), "capability trapped");
    CallFailure::Failed(explanation)
}

/// The error an instantiation gets when every instance of the pool is taken,
/// made with a pool of one (its one instance held, an empty component asked for
/// again): what tells a full pool as the server's capacity is tested with, here
/// and beside the host's executor. Not an API.
///
/// # Errors
///
/// The pool or the component could not be made, or the second instantiation
/// did not fail.
#[doc(hidden)]
pub fn full_pool_error() -> Result<wasmtime::Error, wasmtime::Error> {
    // `(component)`: the magic, the component version and layer.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";
    let engine = crate::plugins::engine(1)?;
    let component = wasmtime::component::Component::new(&engine, EMPTY_COMPONENT)?;
    let linker = wasmtime::component::Linker::<()>::new(&engine);
    let mut store = Store::new(&engine, ());
    let _held = linker.instantiate(&mut store, &component)?;
    match linker.instantiate(&mut store, &component) {
        Ok(_) => Err(wasmtime::Error::msg("a pool of one gave a second instance")),
        Err(error) => Ok(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_instance_pool_is_the_server_s_capacity_never_the_capability_s_fault() {
        let error = full_pool_error().expect("a full pool");
        assert!(
            error
                .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some(),
            "{error:#}"
        );
        assert_eq!(
            classify_plugin_trap(
                &error,
                None,
                Caps::default(),
                "records.lookup",
                "records.wasm",
                None
            ),
            CallFailure::Exhausted(Budget::Capacity)
        );
    }

    #[test]
    fn budgets_that_stop_a_plugin_are_named() {
        let global = Caps::default();
        let own = Caps {
            fuel: true,
            memory: true,
        };
        let deadline = wasmtime::Error::new(Interrupted::Deadline);
        assert_eq!(
            classify_plugin_trap(&deadline, None, own, "n", "n.wasm", None),
            CallFailure::Exhausted(Budget::ExecutionTime)
        );
        let fuel = wasmtime::Error::new(wasmtime::Trap::OutOfFuel);
        assert_eq!(
            classify_plugin_trap(&fuel, None, global, "n", "n.wasm", None),
            CallFailure::Exhausted(Budget::Fuel)
        );
        assert_eq!(
            classify_plugin_trap(&fuel, None, own, "n", "n.wasm", None),
            CallFailure::Exhausted(Budget::PluginFuel)
        );
        let trap = wasmtime::Error::new(wasmtime::Trap::UnreachableCodeReached);
        assert_eq!(
            classify_plugin_trap(&trap, Some(MemoryHit::Own), global, "n", "n.wasm", None),
            CallFailure::Exhausted(Budget::Memory)
        );
        assert_eq!(
            classify_plugin_trap(&trap, Some(MemoryHit::Own), own, "n", "n.wasm", None),
            CallFailure::Exhausted(Budget::PluginMemory)
        );
        assert_eq!(
            classify_plugin_trap(&trap, Some(MemoryHit::Total), own, "n", "n.wasm", None),
            CallFailure::Exhausted(Budget::TotalMemory)
        );
        let timeout = wasmtime::Error::new(Interrupted::CallTimeout);
        assert_eq!(
            classify_plugin_trap(&timeout, None, global, "n", "n.wasm", Some("why".into())),
            CallFailure::Failed(Some("why".into()))
        );
        assert_eq!(
            classify_plugin_trap(&trap, None, global, "n", "n.wasm", None),
            CallFailure::Failed(None)
        );
    }
}
