//! The interpreter's imports: resolving capability names and dispatching native calls.
//!
//! A native call is, in order: counted (before anything can fail, so failed calls
//! count too), looked up, decoded within the depth budget, bound by its source
//! (the capability's compiled binder lowering into the source's wire form, with
//! the canonical form when the authorizer wants it, in one walk), authorized, run
//! on its source's session for this execution
//! (raced against the deadline), and its result charged. Every budget is charged in
//! the execution's [`Ledger`](super::ledger::Ledger). Any failure is kept in the
//! store as the execution's error and the call answers `err`: the interpreter
//! unwinds the program from the call (a Starlark program cannot catch an error, so
//! it runs no further line) and reports where the call was.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, WasmList};

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::approval::Outcome;
use super::asking;
use super::state::{ExecState, OK, Route};
use crate::audit::{AuditRecord, Decision, rfc3339};
use crate::authz::{AuthorizationInput, AuthzError, Verdict};
use crate::budget::Budget;
use crate::catalog::{self, BindError, BindLimits};
use crate::error::ToolError;
use crate::quota::CallCharge;
use crate::source::{
    Arguments, CallBudget, CallFailure, Caller, CapabilitySource, Meter, sanitize_message,
};
use crate::telemetry::CallSpan;
use crate::wait::{self, Abandoned};

/// Bytes reserved for a capability's encoded result: most results fit, so the buffer
/// is not grown step by step.
const WIRE_CAPACITY: usize = 256;

/// Fuel the interpreter is given, if it has less, to unwind the program after a
/// failed call and report where the call was.
const UNWIND_FUEL: u64 = 20_000_000;

/// The outcome of a call stopped to ask the client's user (a 2026-07-28
/// client's `input_required`), in the audit log and the metrics: not a denial,
/// its answer decides. Also the label of such an execution.
pub(super) const INPUT_REQUIRED: &str = "input required";

/// Links `codemode:runner/host`: `capabilities`, `suggest` and `call`.
pub(crate) fn add_to_linker(linker: &mut Linker<ExecState>) -> wasmtime::Result<()> {
    let mut host = linker.instance("codemode:runner/host@0.1.0")?;
    host.func_wrap(
        "capabilities",
        |mut store: StoreContextMut<'_, ExecState>, (roots,): (Vec<String>,)| {
            let state = store.data_mut();
            state.count_ok_calls();
            state.listed = capabilities(&state.dispatch.names, &roots);
            state.ok_calls = vec![0; state.listed.len()];
            let names = &state.dispatch.names;
            let listed = state.listed.iter().filter_map(|&i| names.get(i).cloned());
            Ok((listed.collect::<Vec<String>>(),))
        },
    )?;
    host.func_wrap(
        "suggest",
        |store: StoreContextMut<'_, ExecState>, (name,): (String,)| {
            Ok((catalog::suggest(&store.data().dispatch.names, &name),))
        },
    )?;
    host.func_wrap(
        "too-large",
        |mut store: StoreContextMut<'_, ExecState>, (): ()| {
            // The interpreter aborts next: its trap is this memory budget.
            store.data_mut().too_large = true;
            Ok(())
        },
    )?;
    host.func_wrap(
        "call",
        |mut store: StoreContextMut<'_, ExecState>,
         (capability, arguments): (u32, WasmList<u8>)| {
            // Only the audit log reads the call's duration.
            let started = store.data().audit.is_some().then(Instant::now);
            let mut trace = Trace::default();
            // The call's span (when tracing), and the context its source passes on.
            let state = store.data_mut();
            let span = match &state.calls {
                Some(calls) => {
                    let (span, context) = calls.start();
                    state.call_trace = Some(context);
                    span
                }
                None => None,
            };
            let outcome = call(&mut store, capability, &arguments, &mut trace);
            let state = store.data_mut();
            state.call_trace = None;
            audit(state, &trace, &outcome, started, span);
            match outcome {
                Ok(bytes) => Ok((Ok::<Vec<u8>, ()>(bytes),)),
                Err(error) => {
                    // A plugin may have burned the interpreter's last fuel: it gets
                    // a little to unwind and say where the call was (no line of the
                    // program runs on it).
                    let left = store.get_fuel().unwrap_or(0);
                    if left < UNWIND_FUEL && store.set_fuel(UNWIND_FUEL).is_ok() {
                        store.data_mut().unwind_fuel += UNWIND_FUEL - left;
                    }
                    let state = store.data_mut();
                    state.retained = Some(error);
                    state.failed_capability = trace
                        .route
                        .and_then(|(_, route)| state.dispatch.names.get(route).cloned());
                    // The interpreter unwinds the program from the call (Starlark
                    // cannot catch an error, so no line of it runs after this) and
                    // reports where the call was; the retained error is what the
                    // execution reports.
                    Ok((Err(()),))
                }
            }
        },
    )?;
    Ok(())
}

/// What one native call did, for the audit log.
struct Trace {
    /// The capability's position in the interpreter's list and in
    /// [`Dispatch::names`] and [`Dispatch::routes`](super::Dispatch::routes), once
    /// it resolved.
    route: Option<(usize, usize)>,
    /// What the policy said.
    decision: Decision,
    /// How asking a human ended, when the policy said to ask.
    approval: Option<Outcome>,
    /// Fuel the plugin burned (instantiation included).
    fuel: u64,
    /// The quota on the capability's calls that refused it, if one did.
    quota: Option<&'static str>,
}

impl Default for Trace {
    fn default() -> Self {
        Self {
            route: None,
            decision: Decision::NotEvaluated,
            approval: None,
            fuel: 0,
            quota: None,
        }
    }
}

/// Counts the call, ends its span (when tracing) and writes its audit line, if
/// this server keeps an audit log.
fn audit(
    state: &mut ExecState,
    trace: &Trace,
    outcome: &Result<Vec<u8>, ToolError>,
    started: Option<Instant>,
    span: Option<CallSpan>,
) {
    let dispatch = state.dispatch.clone();
    let (name, capability_id) = match trace.route {
        Some((_, route)) => (
            dispatch.names.get(route).map_or("", String::as_str),
            dispatch
                .routes
                .get(route)
                .map_or("", |r| r.capability.id.as_str()),
        ),
        None => ("", ""),
    };
    let bytes = outcome.as_ref().map_or(0, Vec::len);
    let outcome = match (outcome, trace.route) {
        (Ok(_), Some((listed, _))) => {
            if let Some(count) = state.ok_calls.get_mut(listed) {
                *count += 1;
            }
            state.calls_done += 1;
            if let Some(progress) = &state.progress {
                progress.call_done(state.calls_done, name);
            }
            OK
        }
        (Ok(_), None) => OK,
        // Stopped to ask the client's user: not denied, the answer decides.
        (Err(_), _) if trace.approval == Some(Outcome::Awaiting) => {
            state.metrics.native_call(name, INPUT_REQUIRED);
            INPUT_REQUIRED
        }
        (Err(error), _) => {
            state.metrics.native_call(name, error.fixed_text());
            error.fixed_text()
        }
    };
    if let Some(span) = span {
        span.finish(
            name,
            capability_id,
            outcome,
            outcome != OK,
            trace.fuel,
            bytes,
        );
    }
    let Some(log) = &state.audit else {
        return;
    };
    log.record(&AuditRecord {
        time: rfc3339(SystemTime::now()),
        execution: state.execution,
        subject: &state.subject.id,
        capability_id,
        capability: name,
        decision: trace.decision,
        approval: trace
            .approval
            .map(|outcome| outcome.audit(&state.subject.id)),
        outcome,
        fuel: trace.fuel,
        duration_us: started.map_or(0, |started| started.elapsed().as_micros() as u64),
        pulled: trace
            .route
            .and_then(|(_, route)| dispatch.routes.get(route))
            .and_then(|route| dispatch.sources.get(route.source))
            .and_then(|source| source.pulled()),
        quota: trace.quota,
    });
}

/// The positions in `names` of the capability names whose first segment is one of
/// `roots`, in name order.
fn capabilities(names: &[String], roots: &[String]) -> Vec<usize> {
    names
        .iter()
        .enumerate()
        .filter(|(_, name)| {
            let root = name.split('.').next().unwrap_or(name);
            roots.iter().any(|r| r == root)
        })
        .map(|(i, _)| i)
        .collect()
}

fn call(
    store: &mut StoreContextMut<'_, ExecState>,
    capability: u32,
    arguments: &WasmList<u8>,
    trace: &mut Trace,
) -> Result<Vec<u8>, ToolError> {
    let state = store.data_mut();
    let dispatch = state.dispatch.clone();
    let listed = usize::try_from(capability)
        .ok()
        .and_then(|i| state.listed.get(i).copied());
    let route = listed.and_then(|i| dispatch.routes.get(i));
    // Resolved first so that even a call refused for the call budget is counted and
    // audited under its capability's name; charged before anything can fail.
    if let Some(position) = listed
        && route.is_some()
    {
        trace.route = Some((capability as usize, position));
    }
    state.ledger.charge_call()?;
    let (Some(position), Some(route)) = (listed, route) else {
        // The interpreter only calls names the host listed; anything else means the
        // sandbox boundary is broken.
        tracing::error!(
            capability,
            "the interpreter called a capability the host never listed"
        );
        return Err(ToolError::Internal);
    };
    let name = dispatch.names.get(position).map_or("", String::as_str);
    state.ledger.check_encoded_arguments(arguments.len())?;
    let max_depth = state.ledger.limits().max_value_depth;
    let max_bytes = state.ledger.limits().max_value_bytes;
    // Decoded straight from the interpreter's memory: the arguments are not copied
    // first. One level more than the budget so that "too deep" is told apart from
    // garbage.
    let decoded = codemode_value::decode(arguments.as_le_slice(&*store), max_depth + 1);
    let state = store.data_mut();
    let arguments = match decoded {
        Ok(arguments) => arguments,
        Err(codemode_value::DecodeError::TooDeep) => {
            return Err(state.ledger.exhaust(Budget::ValueDepth));
        }
        Err(codemode_value::DecodeError::Malformed) => return Err(ToolError::Internal),
    };
    let Some(source) = dispatch.sources.get(route.source) else {
        tracing::error!(capability_id = %route.capability.id, "a route names a source that is not there");
        return Err(ToolError::Internal);
    };
    let limits = BindLimits {
        max_depth,
        max_nodes: max_bytes,
        canonical: state.authorizer.wants_arguments(),
    };
    let bound = match source.bind(&route.capability, &arguments, limits) {
        Ok(bound) => bound,
        Err(BindError::Invalid(detail)) => return Err(ToolError::InvalidArguments(Some(detail))),
        Err(BindError::TooDeep) => return Err(state.ledger.exhaust(Budget::ValueDepth)),
        Err(BindError::TooBig) => return Err(state.ledger.exhaust(Budget::ValueBytes)),
    };
    state
        .ledger
        .check_arguments(codemode_value::json_len(&arguments))?;
    drop(arguments);
    let canonical = match bound.canonical {
        Some(canonical) => canonical,
        None if !limits.canonical => codemode_value::Value::Dict(Vec::new()),
        // A source's own `bind` left out what the policy decides on: never
        // decide on less than the arguments.
        None => {
            tracing::error!(capability_id = %route.capability.id, source = %source.label(), "the source bound the arguments without their canonical form");
            return Err(ToolError::Internal);
        }
    };
    // A replay answers the calls made before from its record (authorized again:
    // a policy reloaded since may deny them; one that asks was answered).
    let step = if state.approvals.active() {
        Some(asking::next_call(
            state,
            route.capability.id.as_str(),
            &canonical,
        )?)
    } else {
        None
    };
    let input = AuthorizationInput {
        subject: &state.subject,
        capability_id: route.capability.id.as_str(),
        capability_name: name,
        arguments: &canonical,
        annotations: &route.capability.annotations,
    };
    let verdict = match state.authorizer.authorize(&input) {
        Ok(verdict) => verdict,
        Err(AuthzError::Denied) => {
            trace.decision = Decision::Deny;
            return Err(ToolError::PermissionDenied);
        }
        Err(AuthzError::Failure(reason)) => {
            trace.decision = Decision::Failure;
            tracing::warn!(capability = %name, reason = %reason, "authorization policy failure");
            return Err(ToolError::PolicyFailure);
        }
    };
    let digest = match step {
        Some(asking::Step::Replayed(bytes)) => {
            trace.decision = Decision::Replayed;
            state.ledger.charge_result(
                codemode_value::decode(&bytes, max_depth + 1)
                    .map(|value| codemode_value::json_len(&value))
                    .unwrap_or(usize::MAX),
            )?;
            return Ok(bytes);
        }
        Some(asking::Step::Live(digest)) => digest,
        None => None,
    };
    match verdict {
        Verdict::Allow => trace.decision = Decision::Allow,
        Verdict::Ask(question) => {
            trace.decision = Decision::Asked;
            // Nobody is asked to approve a call its quota would refuse.
            if let Some(quotas) = &state.call_quotas
                && let Some(hit) = quotas.peek(
                    route.capability.id.as_str(),
                    name,
                    state.stop.deadline(),
                    state.stop.cancel(),
                )
            {
                trace.quota = Some(hit.name);
                state.quota_hit = Some(hit);
                return Err(ToolError::ResourceLimit);
            }
            let (outcome, approved) = asking::approve(
                state,
                route.capability.id.as_str(),
                name,
                &canonical,
                question,
            );
            trace.approval = Some(outcome);
            approved?;
        }
    }
    // Counted just before it runs: a call the policy denied or a human
    // declined, or one replayed from the record, is not.
    if let Some(quotas) = &state.call_quotas {
        let deadline = state.stop.deadline();
        let cancel = state.stop.cancel();
        match quotas.charge(route.capability.id.as_str(), name, deadline, cancel) {
            CallCharge::Runs => {}
            CallCharge::Refused(hit) => {
                trace.quota = Some(hit.name);
                state.quota_hit = Some(hit);
                return Err(ToolError::ResourceLimit);
            }
            CallCharge::Unavailable if cancel.is_cancelled() => return Err(ToolError::Canceled),
            CallCharge::Unavailable if Instant::now() >= deadline => {
                return Err(state.ledger.exhaust(Budget::ExecutionTime));
            }
            CallCharge::Unavailable => return Err(ToolError::Internal),
        }
    }
    let value = invoke(store, source, route, bound.arguments, trace)?;
    let state = store.data_mut();
    // One walk encodes the result and counts its JSON size; past the room the
    // ledger has for it, the walk only counts (no copy of a result that is refused).
    let mut bytes = Vec::with_capacity(WIRE_CAPACITY);
    let mut out = codemode_value::Writer::counting_within(&mut bytes, state.ledger.result_room());
    out.value(&value);
    state
        .ledger
        .charge_result(out.json_len().unwrap_or(usize::MAX))?;
    asking::record(state, route.capability.id.as_str(), digest, &bytes);
    Ok(bytes)
}

/// Calls the capability on its source's session for this execution (opened on
/// first use) with the interpreter's remaining fuel, racing the call against the
/// execution's deadline and the request's cancellation ([`wait::until`]): a call
/// waiting outside WebAssembly is abandoned at the deadline. What the call burned is
/// taken from the interpreter's fuel.
fn invoke(
    store: &mut StoreContextMut<'_, ExecState>,
    source: &Arc<dyn CapabilitySource>,
    route: &Route,
    arguments: Arguments,
    trace: &mut Trace,
) -> Result<codemode_value::Value, ToolError> {
    let remaining = store.get_fuel().map_err(|_| ToolError::Internal)?;
    let state = store.data_mut();
    let meter = Meter::new(remaining);
    let budget = CallBudget {
        deadline: state.stop.deadline(),
        cancel: state.stop.cancel().clone(),
        max_depth: state.ledger.limits().max_value_depth,
        max_nodes: state.ledger.result_room(),
        meter: meter.clone(),
        trace: state.call_trace.take(),
        subject: state.owner.clone(),
        caller: state.subject.access_token().map(|token| Caller {
            token: token.clone(),
            exchange: state.token_exchange.clone(),
        }),
    };
    let deadline = budget.deadline;
    let execution = state.execution;
    let session = state
        .sessions
        .entry(route.source)
        .or_insert_with(|| source.clone().session(execution));
    let waited = wait::until(
        deadline,
        Some(state.stop.cancel()),
        session.call(route.index, arguments, budget),
    );
    let outcome = match waited {
        Ok(outcome) => outcome,
        Err(Abandoned::Deadline) => {
            tracing::info!(capability_id = %route.capability.id, source = %source.label(), "call abandoned at the execution's deadline");
            // The session's state went with the abandoned call.
            state.sessions.remove(&route.source);
            return Err(state.ledger.exhaust(Budget::ExecutionTime));
        }
        Err(Abandoned::Cancelled) => return Err(ToolError::Canceled),
        Err(Abandoned::NoRuntime) => return Err(ToolError::Internal),
    };
    let left = meter.remaining();
    trace.fuel = remaining.saturating_sub(left);
    store.set_fuel(left).map_err(|_| ToolError::Internal)?;
    let state = store.data_mut();
    let value = match outcome {
        Ok(value) => value,
        // Sanitized again here: a source of a library user's own may not have.
        Err(CallFailure::Failed(detail)) => {
            let detail = detail.and_then(|detail| sanitize_message(&detail));
            return Err(ToolError::CapabilityFailed(detail));
        }
        Err(CallFailure::Exhausted(Budget::ValueBytes)) => {
            let budget = state.ledger.result_budget();
            return Err(state.ledger.exhaust(budget));
        }
        Err(CallFailure::Exhausted(budget)) => return Err(state.ledger.exhaust(budget)),
        Err(CallFailure::Canceled) => return Err(ToolError::Canceled),
        Err(CallFailure::Internal) => return Err(ToolError::Internal),
    };
    if Instant::now() >= deadline {
        // The execution's budget ran out while the call waited outside WebAssembly;
        // its result comes too late to matter.
        return Err(state.ledger.exhaust(Budget::ExecutionTime));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four capabilities of three roots.
    fn names() -> Vec<String> {
        "records.lookup records.query stats.summary text.word_counts"
            .split(' ')
            .map(String::from)
            .collect()
    }

    #[test]
    fn capabilities_lists_names_under_the_given_roots() {
        assert_eq!(
            capabilities(&names(), &["records".into(), "main".into()]),
            vec![0, 1]
        );
        assert_eq!(capabilities(&names(), &["text".into()]), vec![3]);
        assert!(capabilities(&names(), &["main".into()]).is_empty());
    }

    #[test]
    fn no_value_encodes_to_more_than_nine_bytes_per_json_byte() {
        use super::super::ledger::MAX_ENCODED_PER_JSON_BYTE;
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
