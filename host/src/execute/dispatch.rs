//! The interpreter's imports: resolving capability names and dispatching native calls.
//!
//! A native call is, in order: counted (before anything can fail, so failed calls
//! count too), looked up, decoded within the depth budget, bound against the export's
//! WIT types, authorized, run on the plugin's instance for this execution, converted,
//! and accounted against the per-value and aggregate byte budgets. Any failure is kept
//! in the store as the execution's error and the interpreter is trapped: it cannot
//! run another line of the program after a failed call.

use wasmtime::component::{Instance, Linker, Val};
use wasmtime::{Store, StoreContextMut};

use std::time::{Instant, SystemTime};

use super::{ExecState, Interrupted, Stop};
use crate::audit::{AuditRecord, Decision, rfc3339};
use crate::authz::{AuthorizationInput, AuthzError};
use crate::error::{ToolError, timed_out_detail};
use crate::plugins::{self, BindError, LoadedPlugin, OutputError, PluginState, Unprovided};
use crate::wait::{self, Abandoned};

/// Most bytes of the interpreter's encoding per byte of type-preserving JSON: an
/// integer takes 9 encoded bytes and at least 1 in JSON; every other kind of value
/// takes fewer per JSON byte.
const MAX_ENCODED_PER_JSON_BYTE: usize = 9;

/// Nearest names offered by `suggest`.
const MAX_SUGGESTIONS: usize = 3;

/// A plugin's instance for one execution.
pub(crate) struct PluginInstance {
    store: Store<PluginState>,
    instance: Instance,
}

/// Links `codemode:runner/host`: `capabilities`, `suggest` and `call`.
pub(crate) fn add_to_linker(linker: &mut Linker<ExecState>) -> wasmtime::Result<()> {
    let mut host = linker.instance("codemode:runner/host@0.1.0")?;
    host.func_wrap(
        "capabilities",
        |store: StoreContextMut<'_, ExecState>, (roots,): (Vec<String>,)| {
            Ok((capabilities(&store.data().dispatch.names, &roots),))
        },
    )?;
    host.func_wrap(
        "suggest",
        |store: StoreContextMut<'_, ExecState>, (name,): (String,)| {
            Ok((suggest(&store.data().dispatch.names, &name),))
        },
    )?;
    host.func_wrap(
        "call",
        |mut store: StoreContextMut<'_, ExecState>, (name, arguments): (String, Vec<u8>)| {
            let started = Instant::now();
            let mut trace = Trace::default();
            let outcome = call(&mut store, &name, &arguments, &mut trace);
            audit(store.data(), &name, &trace, &outcome, started);
            match outcome {
                Ok(bytes) => Ok((Ok::<Vec<u8>, ()>(bytes),)),
                Err(error) => {
                    store.data_mut().retained = Some(error.clone());
                    // Trapping the interpreter ends the program here; the retained
                    // error is what the execution reports.
                    Err(wasmtime::Error::msg(format!("native call failed: {error}")))
                }
            }
        },
    )?;
    Ok(())
}

/// What one native call did, for the audit log.
struct Trace {
    /// The capability's stable ID, once the name resolved.
    capability_id: String,
    /// What the policy said.
    decision: Decision,
    /// Fuel the plugin burned (instantiation included).
    fuel: u64,
}

impl Default for Trace {
    fn default() -> Self {
        Self {
            capability_id: String::new(),
            decision: Decision::NotEvaluated,
            fuel: 0,
        }
    }
}

/// Counts the call and writes its audit line, if this server keeps an audit log.
fn audit(
    state: &ExecState,
    name: &str,
    trace: &Trace,
    outcome: &Result<Vec<u8>, ToolError>,
    started: Instant,
) {
    let outcome = match outcome {
        Ok(_) => "ok",
        Err(error) => error.fixed_text(),
    };
    state.metrics.native_call(name, outcome);
    let Some(log) = &state.audit else {
        return;
    };
    log.record(&AuditRecord {
        time: rfc3339(SystemTime::now()),
        execution: state.execution,
        subject: &state.subject.id,
        capability_id: &trace.capability_id,
        capability: name,
        decision: trace.decision,
        outcome,
        fuel: trace.fuel,
        duration_us: started.elapsed().as_micros() as u64,
    });
}

/// The capability names whose first segment is one of `roots`, in name order.
fn capabilities(names: &[String], roots: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|name| {
            let root = name.split('.').next().unwrap_or(name);
            roots.iter().any(|r| r == root)
        })
        .cloned()
        .collect()
}

/// The most edits a suggestion may be away from the name asked for.
const MAX_SUGGESTION_DISTANCE: usize = 3;

/// Up to [`MAX_SUGGESTIONS`] names close to `name`: each catalog name is compared
/// over as many segments as `name` has, so `recods` finds the root `records` and
/// `records.lokup` finds `records.lookup`.
///
/// `name` comes from the program and may be of any size: the work is bounded by the
/// catalog's names, not by it. A name too long to be within
/// [`MAX_SUGGESTION_DISTANCE`] edits of any catalog name is not looked at further,
/// and only candidates of a plausible length are compared.
fn suggest(names: &[String], name: &str) -> Vec<String> {
    // A character is at most 4 bytes: a name this long has more characters than any
    // catalog name plus the distance allowed.
    let longest = names.iter().map(String::len).max().unwrap_or(0);
    if name.len() > (longest + MAX_SUGGESTION_DISTANCE) * 4 {
        return Vec::new();
    }
    let length = name.chars().count();
    let allowed = (length / 3).clamp(1, MAX_SUGGESTION_DISTANCE);
    let segments = name.split('.').count();
    let mut scored: Vec<(usize, String)> = Vec::new();
    for candidate in names {
        let prefix: String = candidate
            .split('.')
            .take(segments)
            .collect::<Vec<_>>()
            .join(".");
        // The distance is at least the difference in length.
        if prefix.chars().count().abs_diff(length) > allowed {
            continue;
        }
        let distance = strsim::levenshtein(name, &prefix);
        if distance <= allowed && !scored.iter().any(|(_, n)| *n == prefix) {
            scored.push((distance, prefix));
        }
    }
    scored.sort();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, n)| n)
        .collect()
}

fn call(
    store: &mut StoreContextMut<'_, ExecState>,
    name: &str,
    arguments: &[u8],
    trace: &mut Trace,
) -> Result<Vec<u8>, ToolError> {
    let state = store.data_mut();
    state.native_calls += 1;
    if state.native_calls > state.limits.max_native_calls {
        return Err(ToolError::ResourceLimit);
    }
    let dispatch = state.dispatch.clone();
    let Some(route) = dispatch.routes.get(name) else {
        // The interpreter only calls names the host listed; anything else means the
        // sandbox boundary is broken.
        tracing::error!(capability = %name, "the interpreter called a name the host never listed");
        return Err(ToolError::Internal);
    };
    trace.capability_id.clone_from(&route.id);
    let limits = state.limits.clone();
    // Checked before decoding, so that decoding costs no more than the budget allows:
    // no value whose type-preserving JSON fits `max_value_bytes` encodes to more
    // than this (an integer is 9 bytes encoded and 1 in JSON, the widest ratio).
    if arguments.len()
        > limits
            .max_value_bytes
            .saturating_mul(MAX_ENCODED_PER_JSON_BYTE)
    {
        return Err(ToolError::ResourceLimit);
    }
    // One level more than the budget so that "too deep" is told apart from garbage.
    let arguments = codemode_value::decode(arguments, limits.max_value_depth + 1).map_err(
        |error| match error {
            codemode_value::DecodeError::TooDeep => ToolError::ResourceLimit,
            codemode_value::DecodeError::Malformed => ToolError::Internal,
        },
    )?;
    let params = plugins::bind(
        &route.target,
        &arguments,
        limits.max_value_depth,
        limits.max_value_bytes,
    )
    .map_err(|error| match error {
        BindError::Invalid(detail) => ToolError::InvalidArguments(Some(detail)),
        BindError::Limit => ToolError::ResourceLimit,
    })?;
    if codemode_value::json_len(&arguments) > limits.max_value_bytes {
        return Err(ToolError::ResourceLimit);
    }
    let canonical = if state.authorizer.wants_arguments() {
        plugins::canonical(&route.target, &params)
    } else {
        codemode_value::Value::Dict(Vec::new())
    };
    let input = AuthorizationInput {
        subject: &state.subject,
        capability_id: &route.id,
        capability_name: name,
        arguments: &canonical,
    };
    match state.authorizer.authorize(&input) {
        Ok(()) => trace.decision = Decision::Allow,
        Err(AuthzError::Denied) => {
            trace.decision = Decision::Deny;
            return Err(ToolError::PermissionDenied);
        }
        Err(AuthzError::Failure(reason)) => {
            trace.decision = Decision::Failure;
            tracing::warn!(capability = %name, reason = %reason, "authorization policy failure");
            return Err(ToolError::PolicyFailure);
        }
    }
    let (result, explanation) = invoke(
        store,
        route.plugin,
        &route.target,
        &params,
        name,
        &mut trace.fuel,
    )?;
    let state = store.data_mut();
    let remaining = limits
        .max_intermediate_value_bytes
        .saturating_sub(state.intermediate_bytes);
    let value = plugins::output(
        &route.target,
        result,
        limits.max_value_depth,
        limits.max_value_bytes.min(remaining),
    )
    .map_err(|error| match error {
        OutputError::Failed(detail) => ToolError::CapabilityFailed(explanation.or(detail)),
        OutputError::Limit => ToolError::ResourceLimit,
    })?;
    let size = codemode_value::json_len(&value);
    if size > limits.max_value_bytes || size > remaining {
        return Err(ToolError::ResourceLimit);
    }
    state.intermediate_bytes += size;
    let mut bytes = Vec::with_capacity(size);
    codemode_value::encode(&value, &mut bytes);
    Ok(bytes)
}

/// Calls the export on the plugin's instance for this execution (created on first
/// use). The call gets the interpreter's remaining fuel (at most the plugin's
/// `max_fuel_per_call`) and time (at most its `timeout`); what the plugin burns is
/// taken from the interpreter's store. Returns the result and, when the call went
/// wrong in a way the plugin cannot describe well (a refused outbound host, its
/// timeout), the host's own message for a failed result.
///
/// Instantiation and the call are asynchronous and raced against the deadline and
/// the request's cancellation ([`wait::until`]): a plugin waiting in a host call
/// (a clock, a socket, outbound HTTP) is abandoned at the deadline, where the epoch
/// deadline could not stop it because no wasm runs.
fn invoke(
    store: &mut StoreContextMut<'_, ExecState>,
    plugin: usize,
    target: &plugins::CallTarget,
    params: &[Val],
    name: &str,
    burned: &mut u64,
) -> Result<(Val, Option<String>), ToolError> {
    let remaining = store.get_fuel().map_err(|_| ToolError::Internal)?;
    let state = store.data_mut();
    let loaded = state.dispatch.plugins[plugin].clone();
    let fuel = loaded
        .grants
        .max_fuel_per_call
        .map_or(remaining, |cap| cap.min(remaining));
    let call_deadline = loaded
        .grants
        .timeout
        .map(|t| Instant::now() + t)
        .filter(|d| *d < state.stop.deadline());
    let stop = state.stop.for_call(call_deadline);
    let (mut plugin_store, instance) = match state.instances.remove(&plugin) {
        Some(PluginInstance {
            mut store,
            instance,
        }) => {
            store.set_fuel(fuel).map_err(|_| ToolError::Internal)?;
            stop.install(&mut store);
            (store, Some(instance))
        }
        None => (new_store(state, &loaded, fuel, &stop)?, None),
    };
    let outbound = &mut plugin_store.data_mut().outbound;
    outbound.deadline = stop.wait_deadline();
    outbound.denied = None;
    let mut results = [plugins::CallTarget::result_slot()];
    let waited = wait::until(stop.wait_deadline(), Some(stop.cancel()), async {
        let instance = match instance {
            Some(instance) => instance,
            None => loaded.pre.instantiate_async(&mut plugin_store).await?,
        };
        let func = instance
            .get_func(&mut plugin_store, target.index)
            .ok_or_else(|| wasmtime::Error::msg(format!("the export of {name} is missing")))?;
        func.call_async(&mut plugin_store, params, &mut results)
            .await?;
        Ok::<_, wasmtime::Error>(instance)
    });
    let left = plugin_store.get_fuel().unwrap_or(0);
    *burned = fuel.saturating_sub(left);
    store
        .set_fuel(remaining.saturating_sub(*burned))
        .map_err(|_| ToolError::Internal)?;
    let timed_out = call_deadline.is_some_and(|d| Instant::now() >= d);
    if timed_out {
        tracing::warn!(
            capability = %name,
            plugin = %loaded.file,
            timeout_ms = loaded.grants.timeout.unwrap_or_default().as_millis() as u64,
            "capability call ran past its plugin's timeout"
        );
    }
    let explanation = match plugin_store.data_mut().outbound.denied.take() {
        Some(denied) => Some(denied),
        None if timed_out => Some(timed_out_detail(name)),
        None => None,
    };
    // An abandoned or trapped instance is not reused; the execution ends here anyway.
    let instance = match waited {
        Ok(Ok(instance)) => instance,
        Ok(Err(error)) => {
            let memory_hit = plugin_store.data().limits.hit;
            return Err(classify_plugin_trap(&error, memory_hit, name, explanation));
        }
        Err(Abandoned::Cancelled) => return Err(ToolError::Canceled),
        // Only the plugin's own timeout ends a wait before the execution's deadline.
        Err(Abandoned::Deadline) if timed_out => {
            return Err(ToolError::CapabilityFailed(explanation));
        }
        Err(Abandoned::Deadline) => return Err(ToolError::ResourceLimit),
        Err(Abandoned::NoRuntime) => return Err(ToolError::Internal),
    };
    if Instant::now() >= stop.deadline() {
        // The execution's budget ran out while the plugin waited in the host; its
        // result comes too late to matter.
        return Err(ToolError::ResourceLimit);
    }
    store.data_mut().instances.insert(
        plugin,
        PluginInstance {
            store: plugin_store,
            instance,
        },
    );
    let [result] = results;
    Ok((result, explanation))
}

/// A store for a new instance of `loaded` in this execution, with what its grants
/// give; the instance's start code will run on `fuel` and within `stop`, and what
/// is left is what the first call gets.
fn new_store(
    state: &mut ExecState,
    loaded: &LoadedPlugin,
    fuel: u64,
    stop: &Stop,
) -> Result<Store<PluginState>, ToolError> {
    let max_memory = loaded
        .grants
        .max_memory
        .map_or(state.limits.max_memory_bytes, |m| {
            m.min(state.limits.max_memory_bytes)
        });
    let plugin_state =
        PluginState::new(&loaded.file, &loaded.grants, max_memory).map_err(|reason| {
            tracing::warn!(plugin = %loaded.file, reason = %reason, "cannot prepare the plugin's instance");
            ToolError::CapabilityFailed(None)
        })?;
    let mut store = Store::new(&state.engine, plugin_state);
    store.limiter(|s| &mut s.limits);
    stop.install(&mut store);
    store.set_fuel(fuel).map_err(|_| ToolError::Internal)?;
    Ok(store)
}

/// A plugin's trap: budgets are resource limits, cancellation is cancellation, a
/// trap the host can explain (`explanation`) is the capability's failure with that
/// message; anything else is the capability's failure (logged, never shown).
fn classify_plugin_trap(
    error: &wasmtime::Error,
    memory_hit: bool,
    name: &str,
    explanation: Option<String>,
) -> ToolError {
    if let Some(interrupted) = error.downcast_ref::<Interrupted>() {
        return match interrupted {
            Interrupted::Cancelled => ToolError::Canceled,
            Interrupted::Deadline => ToolError::ResourceLimit,
            Interrupted::CallTimeout => ToolError::CapabilityFailed(explanation),
        };
    }
    if memory_hit
        || matches!(
            error.downcast_ref::<wasmtime::Trap>(),
            Some(wasmtime::Trap::OutOfFuel)
        )
    {
        return ToolError::ResourceLimit;
    }
    if error
        .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
        .is_some()
    {
        // Every instance slot (or fiber stack) of the pool is taken: the server's
        // capacity, not the plugin's fault.
        tracing::warn!(capability = %name, reason = %format!("{error:#}"), "instance pool exhausted");
        return ToolError::ResourceLimit;
    }
    if let Some(unprovided) = error.downcast_ref::<Unprovided>() {
        tracing::warn!(capability = %name, reason = %unprovided, "capability called an import the host does not provide");
        return ToolError::CapabilityFailed(Some(unprovided.to_string()));
    }
    tracing::warn!(capability = %name, reason = %format!("{error:#}"), "capability trapped");
    ToolError::CapabilityFailed(explanation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_instance_pool_is_a_resource_limit_never_the_capability_s_fault() {
        // A pool of one instance, taken: the next instantiation fails the way an
        // execution does when every slot of the real pool is in use.
        let engine = crate::plugins::engine(1).expect("engine");
        let binary = wat::parse_str("(component)").expect("valid WAT");
        let component = wasmtime::component::Component::new(&engine, binary).expect("component");
        let linker = wasmtime::component::Linker::<()>::new(&engine);
        let mut store = Store::new(&engine, ());
        let _held = linker
            .instantiate(&mut store, &component)
            .expect("the pool's one instance");
        let error = linker
            .instantiate(&mut store, &component)
            .expect_err("the pool is full");
        assert!(
            error
                .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some(),
            "{error:#}"
        );
        assert_eq!(
            classify_plugin_trap(&error, false, "records.lookup", None),
            ToolError::ResourceLimit
        );
        assert_eq!(
            crate::execute::classify_trap(&error, false),
            ToolError::ResourceLimit
        );
    }

    fn names() -> Vec<String> {
        [
            "records.lookup",
            "records.query",
            "stats.summary",
            "text.word_counts",
        ]
        .into_iter()
        .map(String::from)
        .collect()
    }

    #[test]
    fn capabilities_lists_names_under_the_given_roots() {
        assert_eq!(
            capabilities(&names(), &["records".into(), "main".into()]),
            vec!["records.lookup".to_owned(), "records.query".to_owned()]
        );
        assert!(capabilities(&names(), &["main".into()]).is_empty());
    }

    #[test]
    fn suggestions_compare_as_many_segments_as_the_name_has() {
        assert_eq!(suggest(&names(), "records.lokup"), vec!["records.lookup"]);
        assert_eq!(suggest(&names(), "recods"), vec!["records"]);
        assert_eq!(suggest(&names(), "stats.summry"), vec!["stats.summary"]);
        assert!(suggest(&names(), "weather.today").is_empty());
    }

    #[test]
    fn names_of_implausible_length_get_no_suggestions_and_cost_no_comparison() {
        // Before the length bound, a 100 MB name kept a core busy for 23 s.
        let huge = "a".repeat(50_000_000);
        assert!(suggest(&names(), &huge).is_empty());
        let long = format!("records.{}", "x".repeat(40));
        assert!(suggest(&names(), &long).is_empty());
        // Within the bound, one edit away still finds its name.
        assert_eq!(
            suggest(&names(), "text.word_count"),
            vec!["text.word_counts"]
        );
        assert!(suggest(&[], "records").is_empty());
    }

    #[test]
    fn no_value_encodes_to_more_than_nine_bytes_per_json_byte() {
        use codemode_value::{Value, encode, json_len};
        let values = [
            Value::Int(0),
            Value::List(vec![Value::Int(7); 1000]),
            Value::Dict(
                (0..100)
                    .map(|i| (String::new(), Value::Int(i % 10)))
                    .collect(),
            ),
            Value::List(vec![Value::List(Vec::new()); 100]),
            Value::List(vec![Value::Float(0.0); 100]),
            Value::List(vec![Value::Str(String::new()); 100]),
            Value::List(vec![Value::None; 100]),
            Value::Dict(vec![("k".into(), Value::Bool(true))]),
        ];
        for value in values {
            let mut bytes = Vec::new();
            encode(&value, &mut bytes);
            assert!(
                bytes.len() <= json_len(&value) * MAX_ENCODED_PER_JSON_BYTE,
                "{value:?}: {} encoded, {} JSON",
                bytes.len(),
                json_len(&value)
            );
        }
    }
}
