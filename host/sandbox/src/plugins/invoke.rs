//! Calling a capability's export: where it is, and what its result means — a value a
//! program can hold, or the capability's failure with a message a model may see.
//!
//! Arguments arrive lowered by binding ([`super::wire::Wit`]); the result is lifted
//! by the capability's output shapes. Nothing here looks at a wasmtime `Type`.

use codemode_value::Value;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, Val};

use super::wire::{ErrorKind, LiftError, lift_record};
use crate::budget::{Budget, Nodes};
use crate::catalog::Field;
use crate::source::sanitize_message;

/// Where and how to call one capability's export.
#[derive(Debug, Clone)]
pub struct CallTarget {
    /// The export, resolvable on any instance of the component.
    pub index: ComponentExportIndex,
    /// How the result reports a failure.
    pub error: ErrorKind,
}

impl CallTarget {
    /// Resolves `instance`#`function` of `component`, whose signature the loader has
    /// already accepted.
    pub fn resolve(
        component: &Component,
        instance: &str,
        function: &str,
        error: ErrorKind,
    ) -> Option<Self> {
        let (_, parent) = component.get_export(None, instance)?;
        let (item, index) = component.get_export(Some(&parent), function)?;
        match item {
            ComponentItem::ComponentFunc(_) => Some(Self { index, error }),
            ComponentItem::CoreFunc(_)
            | ComponentItem::Module(_)
            | ComponentItem::Component(_)
            | ComponentItem::ComponentInstance(_)
            | ComponentItem::Type(_)
            | ComponentItem::Resource(_) => None,
        }
    }

    /// A placeholder for the result slot of a call.
    pub fn result_slot() -> Val {
        Val::Bool(false)
    }
}

/// Why a result could not become a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputError {
    /// `capability failed`, with the capability's own sanitized message if it gave one.
    Failed(Option<String>),
    /// A budget ran out: the result's depth or its size.
    Exhausted(Budget),
}

/// Converts the export's result: a record becomes a dict with keys in sorted order;
/// `result::err` becomes [`OutputError::Failed`]; a `u64` above `i64::MAX` or a
/// non-finite float is a failure without detail. The record is depth 1.
pub fn output(
    target: &CallTarget,
    fields: &[Field],
    result: Val,
    max_depth: usize,
    max_nodes: usize,
) -> Result<Value, OutputError> {
    let record = match (&target.error, result) {
        (ErrorKind::None, record) => record,
        (
            ErrorKind::Bare | ErrorKind::Message | ErrorKind::RecordMessage,
            Val::Result(Ok(Some(record))),
        ) => *record,
        (
            ErrorKind::Bare | ErrorKind::Message | ErrorKind::RecordMessage,
            Val::Result(Err(payload)),
        ) => {
            return Err(OutputError::Failed(failure_message(&target.error, payload)));
        }
        (ErrorKind::Bare | ErrorKind::Message | ErrorKind::RecordMessage, _) => {
            return Err(OutputError::Failed(None));
        }
    };
    let mut nodes = Nodes::new(max_nodes);
    lift_record(fields, record, max_depth, &mut nodes).map_err(|error| match error {
        LiftError::Failed => OutputError::Failed(None),
        LiftError::TooDeep => OutputError::Exhausted(Budget::ValueDepth),
        LiftError::TooBig => OutputError::Exhausted(Budget::ValueBytes),
    })
}

fn failure_message(kind: &ErrorKind, payload: Option<Box<Val>>) -> Option<String> {
    let message = match (kind, payload.map(|b| *b)) {
        (ErrorKind::Message, Some(Val::String(message))) => message,
        (ErrorKind::RecordMessage, Some(Val::Record(fields))) => {
            fields.into_iter().find_map(|(name, value)| match value {
                Val::String(message) if name == "message" => Some(message),
                _ => None,
            })?
        }
        _ => return None,
    };
    sanitize_message(&message)
}
