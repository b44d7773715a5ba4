//! Starlark values to and from the wire form the host understands.
//!
//! Conversion out of Starlark is bounded before it allocates: every container's length
//! is charged against a node budget before its items are visited, so an alias bomb
//! (`[[[0] * 300] * 300] * 300`, a few KB of heap that would expand to 27 M nodes)
//! stops at the budget instead of materialising, and nesting past the depth budget
//! (including a list that contains itself) stops at the depth budget.

use codemode_value::{Build, Writer};
use starlark::collections::SmallMap;
use starlark::eval::Arguments;
use starlark::values::dict::{Dict, DictRef};
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

/// Writes a call's arguments: the dict of keyword arguments, or, when any positional
/// argument was passed, a list of as many `None`s (the host rejects it with the seed's
/// diagnostic). The dict itself is depth 1.
pub(crate) fn arguments<'v>(
    args: &Arguments<'v, '_>,
    heap: Heap<'v>,
    depth: usize,
    mut nodes: usize,
    out: &mut Writer<'_>,
) -> Result<(), ConvertError> {
    let positional = args.positions(heap).map(Iterator::count).unwrap_or(1);
    if positional > 0 {
        out.list(positional);
        for _ in 0..positional {
            out.none();
        }
        return Ok(());
    }
    let named = args
        .names_map()
        .map_err(|_| ConvertError::Invalid("malformed keyword arguments".into()))?;
    charge(&mut nodes, named.len() + 1)?;
    out.dict(named.len());
    for (name, value) in named.iter() {
        out.key(name.as_str());
        write(*value, depth.saturating_sub(1), &mut nodes, false, out)?;
    }
    Ok(())
}

/// Writes `main()`'s value: only None, bools, ints that fit 64 bits, finite floats,
/// strings, lists, tuples and dicts with string keys may cross.
pub(crate) fn to_wire(
    value: Value<'_>,
    depth: usize,
    nodes: &mut usize,
    out: &mut Writer<'_>,
) -> Result<(), ConvertError> {
    write(value, depth, nodes, true, out)
}

fn charge(nodes: &mut usize, count: usize) -> Result<(), ConvertError> {
    *nodes = nodes.checked_sub(count).ok_or(ConvertError::TooBig)?;
    Ok(())
}

/// `strict`: reject what cannot be JSON (the final value). Arguments are not strict:
/// the host binds them against the capability's types and names the argument at fault,
/// so unsupported values travel as their type name.
fn write(
    value: Value<'_>,
    depth: usize,
    nodes: &mut usize,
    strict: bool,
    out: &mut Writer<'_>,
) -> Result<(), ConvertError> {
    if depth == 0 {
        return Err(ConvertError::TooDeep);
    }
    if value.is_none() {
        out.none();
        return Ok(());
    }
    if let Some(b) = value.unpack_bool() {
        out.bool(b);
        return Ok(());
    }
    if let Some(s) = value.unpack_str() {
        out.str(s);
        return Ok(());
    }
    match value.get_type() {
        "int" => {
            match i64::unpack_value(value) {
                Ok(Some(i)) => out.int(i),
                _ if strict => {
                    return Err(ConvertError::Invalid(
                        "an int that does not fit in 64 bits".into(),
                    ));
                }
                _ => out.big_int(value.to_repr().starts_with('-')),
            }
            return Ok(());
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
            out.float(f);
            return Ok(());
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
        out.list(items.len());
        for item in items {
            write(*item, depth - 1, nodes, strict, out)?;
        }
        return Ok(());
    }
    if let Some(dict) = DictRef::from_value(value) {
        charge(nodes, dict.len())?;
        let start = out.mark();
        out.dict(dict.len());
        for (key, item) in dict.iter() {
            let Some(key) = key.unpack_str() else {
                if strict {
                    return Err(ConvertError::Invalid(format!(
                        "a dict with a key of type {}; keys must be strings",
                        key.get_type()
                    )));
                }
                out.rewind(start);
                out.non_string_keys();
                return Ok(());
            };
            out.key(key);
            write(item, depth - 1, nodes, strict, out)?;
        }
        return Ok(());
    }
    if strict {
        return Err(ConvertError::Invalid(format!(
            "a value of type {}; return None, bool, int, float, str, list, tuple or dict",
            value.get_type()
        )));
    }
    out.unsupported(value.get_type());
    Ok(())
}

/// Builds the Starlark values of a capability result straight from the wire. Dict
/// keys keep the host's order (sorted), which is the order a program iterates them
/// in.
pub(crate) struct FromWire<'v> {
    pub(crate) heap: Heap<'v>,
}

impl<'v> Build for FromWire<'v> {
    type Out = Value<'v>;
    type Entries = SmallMap<Value<'v>, Value<'v>>;
    fn none(&mut self) -> Value<'v> {
        Value::new_none()
    }
    fn bool(&mut self, b: bool) -> Value<'v> {
        Value::new_bool(b)
    }
    fn int(&mut self, i: i64) -> Value<'v> {
        self.heap.alloc(i)
    }
    fn float(&mut self, f: f64) -> Value<'v> {
        self.heap.alloc(f)
    }
    fn str(&mut self, s: &str) -> Value<'v> {
        self.heap.alloc(s)
    }
    fn list(&mut self, items: Vec<Value<'v>>) -> Value<'v> {
        self.heap.alloc(AllocList(items))
    }
    fn dict_start(&mut self, len: usize) -> Self::Entries {
        SmallMap::with_capacity(len)
    }
    fn dict_entry(&mut self, entries: &mut Self::Entries, key: &str, value: Value<'v>) {
        // A string always hashes; the host sends each key once (a repeated key would
        // keep its last value, as a dict literal does).
        if let Ok(key) = self.heap.alloc_str(key).to_value().get_hashed() {
            entries.insert_hashed(key, value);
        }
    }
    fn dict(&mut self, entries: Self::Entries) -> Value<'v> {
        self.heap.alloc(Dict::new(entries))
    }
    // The host never sends these; None is the harmless reading.
    fn big_int(&mut self, _negative: bool) -> Value<'v> {
        Value::new_none()
    }
    fn non_string_keys(&mut self) -> Value<'v> {
        Value::new_none()
    }
    fn unsupported(&mut self, _name: &str) -> Value<'v> {
        Value::new_none()
    }
}
