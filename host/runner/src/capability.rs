//! Capabilities as Starlark values: `records` is a namespace, `records.lookup` a
//! callable leaf whose call is forwarded to the host.
//!
//! Names are resolved per execution: the host lists the capability names under the
//! roots a program mentions, and only those roots are defined in the program's module.
//! An attribute that names no capability still resolves (to an unknown name) so that
//! calling it can fail with its full dotted name and the nearest catalog names.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use allocative::Allocative;
use starlark::environment::Module;
use starlark::eval::{Arguments, Evaluator};
use starlark::values::{
    Heap, NoSerialize, ProvidesStaticType, StarlarkPagable, StarlarkValue, Value,
};
use starlark::{starlark_simple_value, values::starlark_value};

use crate::convert;
use crate::{Exceeded, RunError};

/// A 1-based line and column in the program.
pub(crate) type Position = (u32, u32);

/// Where the run is: native calls are accepted only while `main()` runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Top-level statements.
    Loading,
    /// Inside `main()`.
    Running,
    /// After `main()` returned.
    Done,
}

thread_local! {
    static PHASE: Cell<Phase> = const { Cell::new(Phase::Done) };
    /// Set when a native call failed on the host side: the run must end with the
    /// host's reason, whatever error text Starlark wraps around it.
    static ABORTED: Cell<bool> = const { Cell::new(false) };
    /// Set when a value crossing to the host exceeded the depth or node budget.
    static LIMITED: Cell<Option<Exceeded>> = const { Cell::new(None) };
    /// The capability whose call ended the run, and where (once the error that
    /// unwound the program is seen).
    static FAILED_CALL: RefCell<Option<(String, Option<Position>)>> =
        const { RefCell::new(None) };
}

/// Moves the run to `phase`.
pub(crate) fn set_phase(phase: Phase) {
    PHASE.with(|p| p.set(phase));
    if phase == Phase::Loading {
        ABORTED.with(|a| a.set(false));
        LIMITED.with(|l| l.set(None));
        FAILED_CALL.with(|f| f.replace(None));
    }
}

/// Records that the call of `capability` ends the run.
fn call_failed(capability: &str) {
    FAILED_CALL.with(|f| f.replace(Some((capability.to_owned(), None))));
}

/// Records where the failed call was made (1-based line and column), from the
/// error that unwound the program.
pub(crate) fn failed_at(position: Option<Position>) {
    FAILED_CALL.with(|f| {
        if let Some((_, at)) = f.borrow_mut().as_mut()
            && at.is_none()
        {
            *at = position;
        }
    });
}

/// The capability whose call ended the run, and where it was called, if known.
pub(crate) fn failed_call() -> Option<(String, Option<Position>)> {
    FAILED_CALL.with(|f| f.borrow().clone())
}

/// What ended the run from inside a native call, if anything did.
pub(crate) fn native_outcome() -> Option<RunError> {
    if ABORTED.with(Cell::get) {
        Some(RunError::Aborted)
    } else {
        LIMITED.with(Cell::get).map(RunError::Limit)
    }
}

thread_local! {
    /// The depth and node budgets arguments are converted under (set per run).
    static ARGUMENT_LIMITS: Cell<(usize, usize)> = const { Cell::new((32, 1 << 20)) };
}

/// Sets the depth and node budgets for native-call arguments.
pub(crate) fn set_argument_limits(depth: usize, nodes: usize) {
    ARGUMENT_LIMITS.with(|l| l.set((depth, nodes)));
}

/// Bytes reserved for a call's encoded arguments: most calls fit, so the buffer is
/// not grown step by step.
const ARGUMENTS_CAPACITY: usize = 256;

/// Unknown names longer than this get no suggestions (the host is not asked): no
/// capability name comes near it.
const MAX_SUGGESTED_NAME_BYTES: usize = 1024;

/// Characters of an unknown name quoted in its message; the rest is elided.
const MAX_SHOWN_NAME_CHARS: usize = 80;

/// `name` as an error message quotes it: whole, or its first
/// [`MAX_SHOWN_NAME_CHARS`] characters and `…`.
fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    match name.char_indices().nth(MAX_SHOWN_NAME_CHARS) {
        None => name.into(),
        Some((end, _)) => format!("{}…", &name[..end]).into(),
    }
}

/// The names known in this run: every capability name and every proper prefix of one.
#[derive(Debug, Default, Allocative)]
struct Known {
    leaves: BTreeSet<String>,
    namespaces: BTreeSet<String>,
}

/// A dotted name in a program: a namespace, a capability, or a name that is neither.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub(crate) struct Capability {
    path: String,
    #[allocative(skip)]
    #[starlark_pagable(skip)]
    known: Arc<Known>,
}

starlark_simple_value!(Capability);

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<capability {}>", self.path)
    }
}

impl Capability {
    fn is_leaf(&self) -> bool {
        self.known.leaves.contains(&self.path)
    }

    fn exists(&self) -> bool {
        self.is_leaf() || self.known.namespaces.contains(&self.path)
    }
}

#[starlark_value(type = "capability")]
impl<'v> StarlarkValue<'v> for Capability {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        Some(heap.alloc(Capability {
            path: format!("{}.{attribute}", self.path),
            known: self.known.clone(),
        }))
    }

    fn has_attr(&self, attribute: &str, _heap: Heap<'v>) -> bool {
        let path = format!("{}.{attribute}", self.path);
        self.known.leaves.contains(&path) || self.known.namespaces.contains(&path)
    }

    fn dir_attr(&self) -> Vec<String> {
        let prefix = format!("{}.", self.path);
        let mut names: Vec<String> = self
            .known
            .leaves
            .iter()
            .chain(self.known.namespaces.iter())
            .filter_map(|name| name.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('.'))
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if !self.exists() {
            // A name built at run time (`getattr(records, 'a' * 20000000)`) can be
            // as large as the sandbox's memory: past a plausible length it neither
            // crosses into the host for suggestions nor goes whole into the message,
            // where the host would have to hold it.
            let hint = if self.path.len() <= MAX_SUGGESTED_NAME_BYTES {
                crate::bindings::codemode::runner::host::suggest(&self.path)
            } else {
                Vec::new()
            };
            let hint = if hint.is_empty() {
                String::new()
            } else {
                format!("; did you mean {}?", hint.join(" or "))
            };
            return Err(fail(format!(
                "unknown capability `{}`{hint} (find names with search_api)",
                shown(&self.path)
            )));
        }
        if !self.is_leaf() {
            return Err(fail(format!(
                "`{}` is a namespace, not a capability; call one of its capabilities",
                self.path
            )));
        }
        if PHASE.with(Cell::get) != Phase::Running {
            return Err(fail(format!(
                "`{}` called outside main(): capabilities can only be called while main() runs",
                self.path
            )));
        }
        let (depth, nodes) = ARGUMENT_LIMITS.with(Cell::get);
        let mut arguments = Vec::with_capacity(ARGUMENTS_CAPACITY);
        let mut out = codemode_value::Writer::new(&mut arguments);
        match convert::arguments(args, eval.heap(), depth, nodes, &mut out) {
            Ok(()) => {}
            Err(convert::ConvertError::TooDeep) => {
                LIMITED.with(|l| l.set(Some(Exceeded::ValueDepth)));
                call_failed(&self.path);
                return Err(fail("value budget exceeded".into()));
            }
            Err(convert::ConvertError::TooBig) => {
                LIMITED.with(|l| l.set(Some(Exceeded::ValueBytes)));
                call_failed(&self.path);
                return Err(fail("value budget exceeded".into()));
            }
            Err(convert::ConvertError::Invalid(message)) => return Err(fail(message)),
        };
        match crate::call_host(&self.path, &arguments, eval.heap()) {
            Ok(result) => Ok(result),
            Err(RunError::Limit(exceeded)) => {
                LIMITED.with(|l| l.set(Some(exceeded)));
                call_failed(&self.path);
                Err(fail("value budget exceeded".into()))
            }
            Err(_) => {
                ABORTED.with(|a| a.set(true));
                call_failed(&self.path);
                Err(fail("capability call failed".into()))
            }
        }
    }
}

fn fail(message: String) -> starlark::Error {
    starlark::Error::new_other(anyhow_message(message))
}

/// starlark-rust errors are built from `anyhow`-compatible errors; a plain message
/// is all these need.
fn anyhow_message(message: String) -> impl std::error::Error + Send + Sync + 'static {
    #[derive(Debug)]
    struct Message(String);
    impl fmt::Display for Message {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl std::error::Error for Message {}
    Message(message)
}

/// Defines one module variable per root of `names` (the host's answer for the roots
/// the program mentions).
pub(crate) fn define_roots(module: &Module<'_>, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let mut known = Known::default();
    for name in names {
        let mut end = 0;
        while let Some(dot) = name[end..].find('.') {
            end += dot;
            known.namespaces.insert(name[..end].to_owned());
            end += 1;
        }
        known.leaves.insert(name.clone());
    }
    let known = Arc::new(known);
    let roots: BTreeSet<&str> = names
        .iter()
        .map(|name| name.split('.').next().unwrap_or(name))
        .collect();
    for root in roots {
        let value = module.heap().alloc(Capability {
            path: root.to_owned(),
            known: known.clone(),
        });
        module.set(root, value);
    }
}
