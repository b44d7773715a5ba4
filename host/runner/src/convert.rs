//! Starlark values to and from the wire form the host understands.
//!
//! Conversion out of Starlark is bounded before it allocates: every container's length
//! is charged against a node budget before its items are visited, so an alias bomb
//! (`[[[0] * 300] * 300] * 300`, a few KB of heap that would expand to 27 M nodes)
//! stops at the budget instead of materialising, and nesting past the depth budget
//! (including a list that contains itself) stops at the depth budget.

use codemode_value::Value as WireValue;
use starlark::eval::Arguments;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::float::StarlarkFloat;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, Value};

use crate::{Exceeded, FILE_NAME, RunError};

/// Why a value could not be converted.
#[derive(Debug)]
pub(crate) enum ConvertError {
    /// Nested deeper than the depth budget.
    TooDeep,
    /// More values than the node budget.
    TooBig,
    /// The value cannot cross (detail for the program's author).
    Invalid(String),
}

impl ConvertError {
    /// The run error for a failed conversion of `main()`'s value.
    pub(crate) fn into_result_error(self) -> RunError {
        match self {
            ConvertError::TooDeep => RunError::Limit(Exceeded::ValueDepth),
            ConvertError::TooBig => RunError::Limit(Exceeded::ValueBytes),
            ConvertError::Invalid(message) => {
                RunError::Invalid(format!("{FILE_NAME}: main() returned {message}"))
            }
        }
    }
}

/// A call's arguments: the dict of keyword arguments, or, when any positional argument
/// was passed, the list of positional ones (the host rejects it with the seed's
/// diagnostic). The dict itself is depth 1.
pub(crate) fn arguments<'v>(
    args: &Arguments<'v, '_>,
    heap: Heap<'v>,
    depth: usize,
    mut nodes: usize,
) -> Result<WireValue, ConvertError> {
    let positional = args.positions(heap).map(Iterator::count).unwrap_or(1);
    if positional > 0 {
        return Ok(WireValue::List(vec![WireValue::None; positional]));
    }
    let named = args
        .names_map()
        .map_err(|_| ConvertError::Invalid("malformed keyword arguments".into()))?;
    charge(&mut nodes, named.len() + 1)?;
    let mut entries = Vec::with_capacity(named.len());
    for (name, value) in named.iter() {
        let item = to_wire_inner(*value, depth.saturating_sub(1), &mut nodes, false)?;
        entries.push((name.as_str().to_owned(), item));
    }
    Ok(WireValue::Dict(entries))
}

/// Converts `main()`'s value: only None, bools, ints that fit 64 bits, finite floats,
/// strings, lists, tuples and dicts with string keys may cross.
pub(crate) fn to_wire(
    value: Value<'_>,
    depth: usize,
    nodes: &mut usize,
) -> Result<WireValue, ConvertError> {
    to_wire_inner(value, depth, nodes, true)
}

fn charge(nodes: &mut usize, count: usize) -> Result<(), ConvertError> {
    *nodes = nodes.checked_sub(count).ok_or(ConvertError::TooBig)?;
    Ok(())
}

/// `strict`: reject what cannot be JSON (the final value). Arguments are not strict:
/// the host binds them against the capability's types and names the argument at fault,
/// so unsupported values travel as their type name.
fn to_wire_inner(
    value: Value<'_>,
    depth: usize,
    nodes: &mut usize,
    strict: bool,
) -> Result<WireValue, ConvertError> {
    if depth == 0 {
        return Err(ConvertError::TooDeep);
    }
    if value.is_none() {
        return Ok(WireValue::None);
    }
    if let Some(b) = value.unpack_bool() {
        return Ok(WireValue::Bool(b));
    }
    if let Some(s) = value.unpack_str() {
        return Ok(WireValue::Str(s.to_owned()));
    }
    match value.get_type() {
        "int" => {
            return match i64::unpack_value(value) {
                Ok(Some(i)) => Ok(WireValue::Int(i)),
                _ if strict => Err(ConvertError::Invalid(
                    "an int that does not fit in 64 bits".into(),
                )),
                _ => Ok(WireValue::BigInt {
                    negative: value.to_repr().starts_with('-'),
                }),
            };
        }
        "float" => {
            let f = StarlarkFloat::unpack_value(value)
                .ok()
                .flatten()
                .map_or(f64::NAN, |f| f.0);
            if strict && !f.is_finite() {
                return Err(ConvertError::Invalid(format!(
                    "a float that is not finite ({})",
                    value.to_repr()
                )));
            }
            return Ok(WireValue::Float(f));
        }
        _ => {}
    }
    let items: Option<&[Value<'_>]> = if let Some(list) = ListRef::from_value(value) {
        Some(list.content())
    } else {
        TupleRef::from_value(value).map(|t| t.content())
    };
    if let Some(items) = items {
        charge(nodes, items.len())?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(to_wire_inner(*item, depth - 1, nodes, strict)?);
        }
        return Ok(WireValue::List(out));
    }
    if let Some(dict) = DictRef::from_value(value) {
        charge(nodes, dict.len())?;
        let mut out = Vec::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let Some(key) = key.unpack_str() else {
                if strict {
                    return Err(ConvertError::Invalid(format!(
                        "a dict with a key of type {}; keys must be strings",
                        key.get_type()
                    )));
                }
                return Ok(WireValue::NonStringKeys);
            };
            out.push((
                key.to_owned(),
                to_wire_inner(item, depth - 1, nodes, strict)?,
            ));
        }
        return Ok(WireValue::Dict(out));
    }
    if strict {
        return Err(ConvertError::Invalid(format!(
            "a value of type {}; return None, bool, int, float, str, list, tuple or dict",
            value.get_type()
        )));
    }
    Ok(WireValue::Unsupported(value.get_type().to_owned()))
}

/// Builds the Starlark value of a capability result. Dict keys keep the host's order
/// (sorted), which is the order a program iterates them in.
pub(crate) fn from_wire<'v>(value: &WireValue, heap: Heap<'v>) -> Value<'v> {
    match value {
        WireValue::None => Value::new_none(),
        WireValue::Bool(b) => Value::new_bool(*b),
        WireValue::Int(i) => heap.alloc(*i),
        WireValue::Float(f) => heap.alloc(*f),
        WireValue::Str(s) => heap.alloc(s.as_str()),
        WireValue::List(items) => heap.alloc(AllocList(items.iter().map(|i| from_wire(i, heap)))),
        WireValue::Dict(entries) => heap.alloc(AllocDict(
            entries
                .iter()
                .map(|(k, v)| (heap.alloc(k.as_str()), from_wire(v, heap))),
        )),
        // The host never sends these; None is the harmless reading.
        WireValue::BigInt { .. } | WireValue::NonStringKeys | WireValue::Unsupported(_) => {
            Value::new_none()
        }
    }
}
