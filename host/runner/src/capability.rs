//! Capabilities as Starlark values: `records` is a namespace, `records.lookup` a
//! callable leaf whose call is forwarded to the host.
//!
//! Names are resolved per execution: the host lists the capability names under the
//! roots a program mentions, and only those roots are defined in the program's module.
//! The listed names become a tree of nodes built once per run, so that `records.lookup`
//! in a loop is a child lookup, not a string built and searched for on every pass, and
//! a call names its capability to the host by its position in the host's list.
//! An attribute that names no capability still resolves (to an unknown name) so that
//! calling it can fail with its full dotted name and the nearest catalog names.

use std::cell::{Cell, RefCell};
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
    /// The buffer a call's arguments are written into, kept between calls so that a
    /// call allocates none.
    static ARGUMENTS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Sets the depth and node budgets for native-call arguments.
pub(crate) fn set_argument_limits(depth: usize, nodes: usize) {
    ARGUMENT_LIMITS.with(|l| l.set((depth, nodes)));
}

/// Bytes reserved for a call's encoded arguments: most calls fit, so the buffer is
/// not grown step by step.
const ARGUMENTS_CAPACITY: usize = 256;

/// The largest argument buffer kept for the next call.
const MAX_KEPT_ARGUMENTS_CAPACITY: usize = 64 << 10;

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

/// One dotted name known in this run: a capability, a namespace (a proper prefix of
/// a capability name), or both.
#[derive(Debug, Allocative)]
struct Node {
    /// The full dotted name.
    path: String,
    /// The capability's position in the host's list of names, when this name is a
    /// capability: what a call names it by.
    capability: Option<u32>,
    /// The next segments below this name and their nodes, sorted by segment.
    children: Vec<(String, usize)>,
}

impl Node {
    fn child(&self, segment: &str) -> Option<usize> {
        self.children
            .binary_search_by(|(s, _)| s.as_str().cmp(segment))
            .ok()
            .and_then(|i| self.children.get(i))
            .map(|&(_, node)| node)
    }
}

/// The names known in this run, as a tree of [`Node`]s.
#[derive(Debug, Default, Allocative)]
struct Known {
    nodes: Vec<Node>,
}

impl Known {
    /// The tree of `names` (the host's list, whose positions calls name) and the
    /// nodes of their roots, by root segment.
    fn new(names: &[String]) -> (Self, Vec<(String, usize)>) {
        let mut known = Known::default();
        let mut roots: Vec<(String, usize)> = Vec::new();
        for (position, name) in names.iter().enumerate() {
            let mut node: Option<usize> = None;
            let mut end = 0;
            for segment in name.split('.') {
                end += segment.len();
                let siblings = match node {
                    Some(parent) => &known.nodes[parent].children,
                    None => &roots,
                };
                let found = siblings.iter().find(|(s, _)| s == segment).map(|&(_, n)| n);
                let next = match found {
                    Some(next) => next,
                    None => {
                        let next = known.nodes.len();
                        known.nodes.push(Node {
                            path: name[..end].to_owned(),
                            capability: None,
                            children: Vec::new(),
                        });
                        match node {
                            Some(parent) => known.nodes[parent]
                                .children
                                .push((segment.to_owned(), next)),
                            None => roots.push((segment.to_owned(), next)),
                        }
                        next
                    }
                };
                node = Some(next);
                end += 1;
            }
            if let Some(leaf) = node {
                known.nodes[leaf].capability = u32::try_from(position).ok();
            }
        }
        for node in &mut known.nodes {
            node.children.sort();
        }
        (known, roots)
    }
}

/// Which name a [`Capability`] value stands for.
#[derive(Debug, Allocative)]
enum Name {
    /// A node of the run's [`Known`] tree.
    Known(usize),
    /// A dotted name that is neither a capability nor a namespace.
    Unknown(String),
}

/// Only for starlark-rust's paging, which a run never uses (capability values are
/// not paged out).
impl Default for Name {
    fn default() -> Self {
        Name::Unknown(String::new())
    }
}

/// A dotted name in a program: a namespace, a capability, or a name that is neither.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub(crate) struct Capability {
    #[starlark_pagable(skip)]
    name: Name,
    #[allocative(skip)]
    #[starlark_pagable(skip)]
    known: Arc<Known>,
}

starlark_simple_value!(Capability);

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<capability {}>", self.path())
    }
}

impl Capability {
    fn node(&self) -> Option<&Node> {
        match &self.name {
            Name::Known(node) => self.known.nodes.get(*node),
            Name::Unknown(_) => None,
        }
    }

    /// The node `attribute` names below this one. An attribute is one segment when
    /// written `a.b`, but `getattr(a, "b.c")` passes several, which name the node
    /// `a.b.c` as the dotted name does.
    fn descend(&self, attribute: &str) -> Option<usize> {
        let Name::Known(mut node) = self.name else {
            return None;
        };
        for segment in attribute.split('.') {
            node = self.known.nodes.get(node)?.child(segment)?;
        }
        Some(node)
    }

    fn path(&self) -> &str {
        match (&self.name, self.node()) {
            (Name::Unknown(path), _) => path,
            (Name::Known(_), Some(node)) => &node.path,
            (Name::Known(_), None) => "",
        }
    }
}

#[starlark_value(type = "capability")]
impl<'v> StarlarkValue<'v> for Capability {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        let name = match self.descend(attribute) {
            Some(child) => Name::Known(child),
            None => Name::Unknown(format!("{}.{attribute}", self.path())),
        };
        Some(heap.alloc(Capability {
            name,
            known: self.known.clone(),
        }))
    }

    fn has_attr(&self, attribute: &str, _heap: Heap<'v>) -> bool {
        self.descend(attribute).is_some()
    }

    fn dir_attr(&self) -> Vec<String> {
        self.node().map_or_else(Vec::new, |node| {
            node.children
                .iter()
                .map(|(segment, _)| segment.clone())
                .collect()
        })
    }

    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let Some(node) = self.node() else {
            let path = self.path();
            // A name built at run time (`getattr(records, 'a' * 20000000)`) can be
            // as large as the sandbox's memory: past a plausible length it neither
            // crosses into the host for suggestions nor goes whole into the message,
            // where the host would have to hold it.
            let hint = if path.len() <= MAX_SUGGESTED_NAME_BYTES {
                crate::bindings::codemode::runner::host::suggest(path)
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
                shown(path)
            )));
        };
        let Some(capability) = node.capability else {
            return Err(fail(format!(
                "`{}` is a namespace, not a capability; call one of its capabilities",
                node.path
            )));
        };
        if PHASE.with(Cell::get) != Phase::Running {
            return Err(fail(format!(
                "`{}` called outside main(): capabilities can only be called while main() runs",
                node.path
            )));
        }
        let (depth, nodes) = ARGUMENT_LIMITS.with(Cell::get);
        // Taken out of its cell (not borrowed) while in use: nothing a conversion or
        // a call runs can reach it then.
        let mut arguments = ARGUMENTS.with(|buffer| std::mem::take(&mut *buffer.borrow_mut()));
        arguments.clear();
        arguments.reserve(ARGUMENTS_CAPACITY);
        let mut out = codemode_value::Writer::new(&mut arguments);
        let converted = convert::arguments(args, eval.heap(), depth, nodes, &mut out);
        let outcome = match converted {
            Ok(()) => Ok(crate::call_host(capability, &arguments, eval.heap())),
            Err(error) => Err(error),
        };
        // A large buffer is not kept: its memory goes back to the program.
        if arguments.capacity() <= MAX_KEPT_ARGUMENTS_CAPACITY {
            ARGUMENTS.with(|buffer| *buffer.borrow_mut() = arguments);
        }
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Err(convert::ConvertError::TooDeep) => {
                LIMITED.with(|l| l.set(Some(Exceeded::ValueDepth)));
                call_failed(&node.path);
                Err(fail("value budget exceeded".into()))
            }
            Err(convert::ConvertError::TooBig) => {
                LIMITED.with(|l| l.set(Some(Exceeded::ValueBytes)));
                call_failed(&node.path);
                Err(fail("value budget exceeded".into()))
            }
            Err(convert::ConvertError::Invalid(message)) => Err(fail(message)),
            Ok(Err(RunError::Limit(exceeded))) => {
                LIMITED.with(|l| l.set(Some(exceeded)));
                call_failed(&node.path);
                Err(fail("value budget exceeded".into()))
            }
            Ok(Err(_)) => {
                ABORTED.with(|a| a.set(true));
                call_failed(&node.path);
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
/// the program mentions; a call names its capability by its position in it).
pub(crate) fn define_roots(module: &Module<'_>, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let (known, roots) = Known::new(names);
    let known = Arc::new(known);
    for (root, node) in roots {
        let value = module.heap().alloc(Capability {
            name: Name::Known(node),
            known: known.clone(),
        });
        module.set(&root, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    /// Every node as (path, position, child segments).
    fn nodes(known: &Known) -> Vec<(&str, Option<u32>, Vec<&str>)> {
        known
            .nodes
            .iter()
            .map(|node| {
                let children = node.children.iter().map(|(s, _)| s.as_str()).collect();
                (node.path.as_str(), node.capability, children)
            })
            .collect()
    }

    #[test]
    fn the_tree_holds_every_name_and_prefix_with_the_host_positions() {
        let (known, roots) = Known::new(&names(&[
            "geo.area",
            "records.lookup",
            "records.query",
            "records.v2.lookup",
        ]));
        assert_eq!(
            nodes(&known),
            vec![
                ("geo", None, vec!["area"]),
                ("geo.area", Some(0), vec![]),
                ("records", None, vec!["lookup", "query", "v2"]),
                ("records.lookup", Some(1), vec![]),
                ("records.query", Some(2), vec![]),
                ("records.v2", None, vec!["lookup"]),
                ("records.v2.lookup", Some(3), vec![]),
            ]
        );
        assert_eq!(
            roots,
            vec![("geo".to_owned(), 0), ("records".to_owned(), 2)]
        );
        let records = &known.nodes[2];
        assert_eq!(records.child("query"), Some(4));
        assert_eq!(records.child("v2"), Some(5));
        assert_eq!(records.child("nope"), None);
        assert_eq!(records.child("v"), None);
    }

    #[test]
    fn a_name_can_be_a_capability_and_a_namespace() {
        let (known, _) = Known::new(&names(&["a.b", "a.b.c"]));
        assert_eq!(
            nodes(&known),
            vec![
                ("a", None, vec!["b"]),
                ("a.b", Some(0), vec!["c"]),
                ("a.b.c", Some(1), vec![]),
            ]
        );
    }

    #[test]
    fn a_dotted_attribute_names_the_node_its_segments_lead_to() {
        let (known, roots) = Known::new(&names(&["records.lookup", "records.v2.lookup"]));
        let records = Capability {
            name: Name::Known(roots[0].1),
            known: Arc::new(known),
        };
        let path = |node: Option<usize>| node.map(|n| records.known.nodes[n].path.as_str());
        assert_eq!(
            path(records.descend("v2.lookup")),
            Some("records.v2.lookup")
        );
        assert_eq!(path(records.descend("v2")), Some("records.v2"));
        assert_eq!(path(records.descend("lookup")), Some("records.lookup"));
        for missing in ["v2..lookup", "v2.", "", "lookup.x", "v3.lookup"] {
            assert_eq!(records.descend(missing), None, "{missing:?}");
        }
        let unknown = Capability {
            name: Name::Unknown("records.nope".to_owned()),
            known: records.known.clone(),
        };
        assert_eq!(unknown.descend("lookup"), None);
    }

    #[test]
    fn children_are_sorted_whatever_the_order_of_the_names() {
        let (known, _) = Known::new(&names(&["t.zeta", "t.alpha", "t.mid"]));
        assert_eq!(nodes(&known)[0], ("t", None, vec!["alpha", "mid", "zeta"]));
        assert_eq!(known.nodes[0].child("alpha"), Some(2));
        assert_eq!(known.nodes[2].capability, Some(1));
    }
}
