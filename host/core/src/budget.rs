//! The budgets of an execution by name: which one ran out.
//!
//! Every layer that can exhaust a budget (the executor's ledger, a capability
//! source, the interpreter) names it with a [`Budget`], so that operators (and, with
//! the integrity issue, agents) learn *which* limit fired, by the flag that sets it.

/// One budget of an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Budget {
    /// Bytes of program source.
    SourceBytes,
    /// Starlark ticks.
    ExecutionSteps,
    /// Wall time, a wait for a slot and waits outside WebAssembly included.
    ExecutionTime,
    /// Native calls attempted.
    NativeCalls,
    /// Depth of one value crossing the sandbox.
    ValueDepth,
    /// Size of one value crossing the sandbox.
    ValueBytes,
    /// Sum of the sizes of native results.
    IntermediateValueBytes,
    /// Fuel of the interpreter and the plugins together.
    Fuel,
    /// Linear memory of the interpreter or a plugin instance.
    Memory,
    /// Linear memory of every sandbox of the process together.
    TotalMemory,
    /// A plugin's own fuel per call (its sidecar's `max_fuel_per_call`), where it is
    /// below what the execution had left.
    PluginFuel,
    /// A plugin's own memory cap (its sidecar's `max_memory`), where it is below
    /// `--max-memory`.
    PluginMemory,
    /// Capacity of the server (every instance slot of the pool taken), not a budget
    /// an execution can be given more of.
    Capacity,
    /// The interpreter's stack: a program (or a value it builds) nested too deeply
    /// for it. Fixed; no flag raises it.
    Stack,
    /// Keys one subject keeps in the state store.
    StateKeys,
    /// Bytes of keys and values one subject keeps in the state store.
    StateBytes,
    /// Bytes of one value kept in the state store.
    StateValueBytes,
}

/// What is left of one value's node budget, shared by everything that walks a value
/// crossing the sandbox (binding arguments, lifting a plugin's result, projecting
/// an upstream's): every value takes one node, and a container's length is
/// charged before its items are visited, so a huge container is refused before
/// any of it is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nodes(usize);

/// A value has more nodes than its budget ([`Budget::ValueBytes`], or the room
/// left for results).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfNodes;

impl Nodes {
    /// A budget of `max` nodes.
    pub fn new(max: usize) -> Self {
        Self(max)
    }

    /// Takes `count` nodes.
    ///
    /// # Errors
    ///
    /// [`OutOfNodes`] when fewer are left (nothing is taken then).
    pub fn charge(&mut self, count: usize) -> Result<(), OutOfNodes> {
        self.0 = self.0.checked_sub(count).ok_or(OutOfNodes)?;
        Ok(())
    }

    /// The nodes left (for tests).
    #[doc(hidden)]
    pub fn left(self) -> usize {
        self.0
    }
}

/// How [`Budget::Stack`] is named where the other budgets name their flag.
pub const STACK_LIMIT: &str = "interpreter stack";

impl Budget {
    /// The flag that sets this budget, as operators write it (a sidecar setting for
    /// a plugin's own caps).
    pub fn flag(self) -> &'static str {
        match self {
            Budget::SourceBytes => "--max-source-bytes",
            Budget::ExecutionSteps => "--max-execution-steps",
            Budget::ExecutionTime => "--max-execution-time",
            Budget::NativeCalls => "--max-native-calls",
            Budget::ValueDepth => "--max-value-depth",
            Budget::ValueBytes => "--max-value-bytes",
            Budget::IntermediateValueBytes => "--max-intermediate-value-bytes",
            Budget::Fuel => "--max-fuel",
            Budget::Memory => "--max-memory",
            Budget::TotalMemory => "--max-total-memory",
            Budget::PluginFuel => "max_fuel_per_call",
            Budget::PluginMemory => "max_memory",
            Budget::Capacity => "--max-concurrent-executions",
            Budget::Stack => STACK_LIMIT,
            Budget::StateKeys => "--max-state-keys",
            Budget::StateBytes => "--max-state-bytes",
            Budget::StateValueBytes => "--max-state-value-bytes",
        }
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.flag())
    }
}
