//! The sandboxed interpreter of codemode-host.
//!
//! This crate is starlark-rust with the seed's dialect and fixed language surface,
//! compiled to `wasm32-wasip2` and run by the host in a fuel-metered, memory-capped
//! store, one fresh instance per execution. It knows nothing about capabilities
//! beyond their dotted names: a call `a.b.c(k=v)` is forwarded to the host
//! (`codemode:runner/host#call`), which binds, authorizes and runs it. Everything
//! that can go wrong inside the interpreter (a parser stack overflow, a panic, an
//! allocation failure) traps and ends this instance only.
//!
//! `init` (run once by the host before it snapshots the instance) builds the globals
//! and runs a warm-up program, so the snapshot starts every execution with them
//! ready.

#![allow(unsafe_code, reason = "the code wit-bindgen generates for exports")]

mod capability;
mod checks;
mod convert;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod surface;

use std::sync::OnceLock;

use starlark::environment::{Globals, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect, DialectTypes};

/// Bindings of the `codemode:runner` world.
#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/runner",
        world: "runner",
    });
}

use bindings::Guest;
use bindings::codemode::runner::host;
use bindings::exports::codemode::runner::program::{
    Exceeded, FailedCall, Failure, Guest as ProgramGuest, Limits, Outcome,
};

/// The file name diagnostics use: `<codemode>:line:col: message`.
pub(crate) const FILE_NAME: &str = "<codemode>";

/// Calls deeper than this fail; recursion is rejected statically, this is the backstop
/// for recursion the static check cannot see (through lists of functions).
const MAX_CALL_DEPTH: usize = 40;

/// The globals, built once (in `init`, before the snapshot).
static GLOBALS: OnceLock<Globals> = OnceLock::new();

fn globals() -> &'static Globals {
    GLOBALS.get_or_init(surface::globals)
}

/// The seed's dialect: no `load`, no f-strings, no type annotations, no top-level
/// `if`/`for`; `while` is a reserved word in starlark-rust already.
fn dialect() -> Dialect {
    Dialect {
        enable_load: false,
        enable_f_strings: false,
        enable_top_level_stmt: false,
        enable_types: DialectTypes::Disable,
        ..Dialect::Standard
    }
}

/// A program run's failure, before it becomes the WIT `failure`.
#[derive(Debug)]
pub(crate) enum RunError {
    /// `<codemode>:line:col: message` (or `<codemode>: message` without a position).
    Invalid(String),
    /// One of the interpreter's budgets ran out.
    Limit(Exceeded),
    /// A native call failed; the host holds the reason.
    Aborted,
}

/// The component's exports. Exported only on wasm: the symbols' names
/// (`codemode:runner/program@0.1.0#run`) are not valid in a native shared
/// library, which the fuzz crate's native build links.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
struct Runner;

impl Guest for Runner {
    fn init() {
        // A size past wasm32's address space (`'abc' * 1000000000`) panics with
        // "capacity overflow" before any allocation the memory cap could refuse: tell
        // the host it is the memory budget, not a defect, before the abort.
        std::panic::set_hook(Box::new(|info| {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
                .unwrap_or_default();
            if message.contains("capacity overflow") {
                host::too_large();
            }
        }));
        let _ = globals();
        // Lazily initialised interpreter state (string interning, type tables, the
        // first heap chunks) lands in the snapshot instead of costing every run.
        let limits = Limits {
            max_steps: 1_000_000,
            max_value_depth: 32,
            max_value_bytes: 1 << 20,
        };
        let _ = run_program(surface::WARM_UP, &limits);
    }
}

impl ProgramGuest for Runner {
    fn surface() -> String {
        surface::listing(globals())
    }

    fn run(source: String, limits: Limits) -> Outcome {
        let (result, steps) = run_program(&source, &limits);
        // A failed call is reported only when it is what ended the run.
        let failed_call = match &result {
            Err(RunError::Aborted | RunError::Limit(_)) => capability::failed_call(),
            Ok(_) | Err(RunError::Invalid(_)) => None,
        }
        .map(|(capability, at)| {
            let (line, column) = at.unwrap_or((0, 0));
            FailedCall {
                capability,
                line,
                column,
            }
        });
        Outcome {
            value: result.map_err(|error| match error {
                RunError::Invalid(detail) => Failure::InvalidProgram(detail),
                RunError::Limit(exceeded) => Failure::ResourceLimit(exceeded),
                RunError::Aborted => Failure::Aborted,
            }),
            steps,
            failed_call,
        }
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Runner with_types_in bindings);

/// Parses, checks and runs `source`; returns `main()`'s value in wire form and the
/// ticks spent.
fn run_program(source: &str, limits: &Limits) -> (Result<Vec<u8>, RunError>, u64) {
    if let Err(error) = checks::nesting(source) {
        return (Err(error), 0);
    }
    let ast = match AstModule::parse(FILE_NAME, source.to_owned(), &dialect()) {
        Ok(ast) => ast,
        Err(error) => return (Err(RunError::Invalid(checks::diagnostic(&error))), 0),
    };
    if let Err(error) = checks::depth(&ast) {
        // Dropping a tree too deep would recurse as deep as it is; the instance
        // ends with this run and its memory with it.
        std::mem::forget(ast);
        return (Err(error), 0);
    }
    if let Err(error) = checks::no_recursion(&ast).and_then(|()| checks::main_signature(&ast)) {
        return (Err(error), 0);
    }
    let roots = checks::free_identifiers(&ast, globals());
    Module::with_temp_heap(|module| {
        let names = if roots.is_empty() {
            Vec::new()
        } else {
            host::capabilities(&roots)
        };
        capability::define_roots(&module, &names);
        let mut eval = Evaluator::new(&module);
        capability::set_argument_limits(
            limits.max_value_depth as usize,
            limits.max_value_bytes as usize,
        );
        // Both setters only fail for values starlark-rust cannot represent; the
        // constants and u64 budgets here are fine.
        let _ = eval.set_max_tick_count(limits.max_steps);
        let _ = eval.set_max_callstack_size(MAX_CALL_DEPTH);
        capability::set_phase(capability::Phase::Loading);
        let result = run_module(&mut eval, &module, ast, limits);
        capability::set_phase(capability::Phase::Done);
        let steps = eval.get_total_tick_count();
        // Running out of ticks surfaces as whatever error Starlark raised there.
        let result = match result {
            Err(RunError::Invalid(_)) if steps >= limits.max_steps => {
                Err(RunError::Limit(Exceeded::Steps))
            }
            other => other,
        };
        (result, steps)
    })
}

fn run_module<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    module: &Module<'v>,
    ast: AstModule,
    limits: &Limits,
) -> Result<Vec<u8>, RunError> {
    eval.eval_module(ast, globals())
        .map_err(|error| checks::runtime_error(&error))?;
    let main = module.get("main").ok_or_else(|| {
        RunError::Invalid(format!(
            "{FILE_NAME}: `main` is not defined; define `def main():` with no parameters"
        ))
    })?;
    if main.get_type() != "function" {
        return Err(RunError::Invalid(format!(
            "{FILE_NAME}: `main` must be a function defined with `def main():`, not a {}",
            main.get_type()
        )));
    }
    capability::set_phase(capability::Phase::Running);
    let value = eval
        .eval_function(main, &[], &[])
        .map_err(|error| checks::runtime_error(&error))?;
    capability::set_phase(capability::Phase::Done);
    let mut nodes = limits.max_value_bytes as usize;
    let mut bytes = Vec::new();
    let mut out = codemode_value::Writer::counting(&mut bytes);
    convert::to_wire(value, limits.max_value_depth as usize, &mut nodes, &mut out)
        .map_err(|error| error.into_result_error())?;
    if out.json_len().unwrap_or(usize::MAX) > limits.max_value_bytes as usize {
        return Err(RunError::Limit(Exceeded::ValueBytes));
    }
    Ok(bytes)
}

/// Calls the capability at `capability` in the host's list of names with `arguments`
/// (in the wire form) and builds its result on `heap`, or says why the run must stop.
pub(crate) fn call_host<'v>(
    capability: u32,
    arguments: &[u8],
    heap: starlark::values::Heap<'v>,
) -> Result<starlark::values::Value<'v>, RunError> {
    let result = host::call(capability, arguments).map_err(|()| RunError::Aborted)?;
    // The host encodes results it already bounded by the depth budget; a value it
    // cannot have sent means the boundary is broken: the run ends, and the host,
    // which saw no failure, reports an internal one.
    codemode_value::decode_with(&result, usize::MAX, &mut convert::FromWire { heap })
        .map_err(|_| RunError::Aborted)
}
