//! The call plan of one capability: how its bound arguments become component values
//! (lowering) and how its result becomes a value a program can hold (lifting).
//!
//! Reflection compiles a [`Plan`] once at load, in the same walk over the WIT types
//! that produces the catalog's [`Shape`](crate::catalog::Shape)s, so a call never
//! looks at a wasmtime `Type`: lowering and lifting follow the plan, matching every
//! case explicitly.

use codemode_value::Value;
use wasmtime::component::Val;

use crate::budget::{Nodes, OutOfNodes};
use crate::catalog::{FloatKind, IntKind};

/// How one WIT type crosses the boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// `bool`
    Bool,
    /// An integer of this width and signedness.
    Int(IntKind),
    /// A float of this precision.
    Float(FloatKind),
    /// `char`
    Char,
    /// `string`
    Str,
    /// `enum`: a string that binding checked against the cases.
    Enum,
    /// `flags`: a list of strings that binding checked and deduplicated.
    Flags,
    /// `list<T>`
    List(Box<Plan>),
    /// `list<tuple<string, T>>`: a dict.
    PairList(Box<Plan>),
    /// `map<string, T>`: a dict.
    Map(Box<Plan>),
    /// `record`: its fields in declaration order.
    Record(Vec<FieldPlan>),
    /// `option<T>`
    Option(Box<Plan>),
}

/// One field of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldPlan {
    /// The WIT name, which component values carry.
    pub wit_name: String,
    /// The name programs use (the catalog field's name).
    pub name: String,
    /// How the field crosses.
    pub plan: Plan,
}

/// How a capability's failure is reported by its result type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The result is a bare record: the capability cannot report a failure.
    None,
    /// `result<record>`: a failure without a message.
    Bare,
    /// `result<record, string>`.
    Message,
    /// `result<record, R>` where record `R` has a `message: string` field.
    RecordMessage,
}

/// The whole plan of one export: parameters in order, the result record, and how
/// the result reports a failure (a bare record when [`ErrorKind::None`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallPlan {
    /// One plan per parameter.
    pub params: Vec<Plan>,
    /// The result record (the `ok` type of a `result`).
    pub output: Plan,
    /// How failures are reported.
    pub error: ErrorKind,
}

/// A bound value did not have the form its plan expects. Binding checked every value
/// against the shape the plan was compiled with, so this means the two disagree: a
/// defect of the host, never of the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mismatch;

/// Lowers bound arguments (one per parameter, as binding returned them).
pub(crate) fn lower_all(plan: &CallPlan, bound: Vec<Value>) -> Result<Vec<Val>, Mismatch> {
    if bound.len() != plan.params.len() {
        return Err(Mismatch);
    }
    plan.params
        .iter()
        .zip(bound)
        .map(|(plan, value)| lower(plan, value))
        .collect()
}

/// Lowers one bound value. Integers are in range and floats finite (binding checked).
fn lower(plan: &Plan, value: Value) -> Result<Val, Mismatch> {
    Ok(match plan {
        Plan::Option(inner) => match value {
            Value::None => Val::Option(None),
            value => Val::Option(Some(Box::new(lower(inner, value)?))),
        },
        Plan::Bool => Val::Bool(bool_of(value)?),
        Plan::Int(kind) => int_val(*kind, int_of(value)?)?,
        // Binding rounded an f32 argument to an f32 value: the cast is exact.
        Plan::Float(FloatKind::F32) => Val::Float32(float_of(value)? as f32),
        Plan::Float(FloatKind::F64) => Val::Float64(float_of(value)?),
        Plan::Char => {
            let text = str_of(value)?;
            let mut chars = text.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => return Err(Mismatch),
            }
        }
        Plan::Str => Val::String(str_of(value)?),
        Plan::Enum => Val::Enum(str_of(value)?),
        Plan::Flags => Val::Flags(
            list_of(value)?
                .into_iter()
                .map(str_of)
                .collect::<Result<_, _>>()?,
        ),
        Plan::List(elem) => Val::List(
            list_of(value)?
                .into_iter()
                .map(|item| lower(elem, item))
                .collect::<Result<_, _>>()?,
        ),
        Plan::PairList(elem) => Val::List(
            dict_of(value)?
                .into_iter()
                .map(|(key, item)| Ok(Val::Tuple(vec![Val::String(key), lower(elem, item)?])))
                .collect::<Result<_, _>>()?,
        ),
        Plan::Map(elem) => Val::Map(
            dict_of(value)?
                .into_iter()
                .map(|(key, item)| Ok((Val::String(key), lower(elem, item)?)))
                .collect::<Result<_, _>>()?,
        ),
        Plan::Record(fields) => {
            // Binding returns every field, in declaration order.
            let entries = dict_of(value)?;
            if entries.len() != fields.len() {
                return Err(Mismatch);
            }
            Val::Record(
                fields
                    .iter()
                    .zip(entries)
                    .map(|(field, (_, item))| {
                        Ok((field.wit_name.clone(), lower(&field.plan, item)?))
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
    })
}

/// An integer of `kind`; binding checked the range, so a value outside it is a
/// mismatch.
fn int_val(kind: IntKind, i: i64) -> Result<Val, Mismatch> {
    let out = |_| Mismatch;
    Ok(match kind {
        IntKind::S8 => Val::S8(i.try_into().map_err(out)?),
        IntKind::U8 => Val::U8(i.try_into().map_err(out)?),
        IntKind::S16 => Val::S16(i.try_into().map_err(out)?),
        IntKind::U16 => Val::U16(i.try_into().map_err(out)?),
        IntKind::S32 => Val::S32(i.try_into().map_err(out)?),
        IntKind::U32 => Val::U32(i.try_into().map_err(out)?),
        IntKind::S64 => Val::S64(i),
        IntKind::U64 => Val::U64(i.try_into().map_err(out)?),
    })
}

fn bool_of(value: Value) -> Result<bool, Mismatch> {
    match value {
        Value::Bool(b) => Ok(b),
        _ => Err(Mismatch),
    }
}

fn int_of(value: Value) -> Result<i64, Mismatch> {
    match value {
        Value::Int(i) => Ok(i),
        _ => Err(Mismatch),
    }
}

fn float_of(value: Value) -> Result<f64, Mismatch> {
    match value {
        Value::Float(f) => Ok(f),
        _ => Err(Mismatch),
    }
}

fn str_of(value: Value) -> Result<String, Mismatch> {
    match value {
        Value::Str(s) => Ok(s),
        _ => Err(Mismatch),
    }
}

fn list_of(value: Value) -> Result<Vec<Value>, Mismatch> {
    match value {
        Value::List(items) => Ok(items),
        _ => Err(Mismatch),
    }
}

fn dict_of(value: Value) -> Result<Vec<(String, Value)>, Mismatch> {
    match value {
        Value::Dict(entries) => Ok(entries),
        _ => Err(Mismatch),
    }
}

/// Why a result could not become a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LiftError {
    /// The value is outside what a program can hold (a `u64` above `i64::MAX`, a
    /// non-finite float) or not of the planned form: the capability failed.
    Failed,
    /// The result is nested deeper than the depth budget.
    TooDeep,
    /// The result has more values than the node budget.
    TooBig,
}

/// Lifts a result value: a record becomes a dict with keys in sorted order, a dict
/// keeps the last of duplicate keys, in key order. Every value takes one node of
/// `nodes` and a container's length is charged before its items; each container is
/// one level of `depth` (options add none).
pub(crate) fn lift(
    plan: &Plan,
    val: Val,
    depth: usize,
    nodes: &mut Nodes,
) -> Result<Value, LiftError> {
    if let Plan::Option(inner) = plan {
        return match val {
            Val::Option(None) => Ok(Value::None),
            Val::Option(Some(inner_val)) => lift(inner, *inner_val, depth, nodes),
            _ => Err(LiftError::Failed),
        };
    }
    if depth == 0 {
        return Err(LiftError::TooDeep);
    }
    nodes.charge(1)?;
    Ok(match (plan, val) {
        (Plan::Bool, Val::Bool(b)) => Value::Bool(b),
        (Plan::Int(IntKind::S8), Val::S8(i)) => Value::Int(i.into()),
        (Plan::Int(IntKind::U8), Val::U8(i)) => Value::Int(i.into()),
        (Plan::Int(IntKind::S16), Val::S16(i)) => Value::Int(i.into()),
        (Plan::Int(IntKind::U16), Val::U16(i)) => Value::Int(i.into()),
        (Plan::Int(IntKind::S32), Val::S32(i)) => Value::Int(i.into()),
        (Plan::Int(IntKind::U32), Val::U32(i)) => Value::Int(i.into()),
        (Plan::Int(IntKind::S64), Val::S64(i)) => Value::Int(i),
        (Plan::Int(IntKind::U64), Val::U64(i)) => {
            Value::Int(i64::try_from(i).map_err(|_| LiftError::Failed)?)
        }
        (Plan::Float(FloatKind::F32), Val::Float32(f)) if f.is_finite() => Value::Float(f.into()),
        (Plan::Float(FloatKind::F64), Val::Float64(f)) if f.is_finite() => Value::Float(f),
        (Plan::Char, Val::Char(c)) => Value::Str(c.to_string()),
        (Plan::Str, Val::String(s)) | (Plan::Enum, Val::Enum(s)) => Value::Str(s),
        (Plan::Flags, Val::Flags(flags)) => {
            nodes.charge(flags.len())?;
            Value::List(flags.into_iter().map(Value::Str).collect())
        }
        (Plan::List(elem), Val::List(items)) => {
            nodes.charge(items.len())?;
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(lift(elem, item, depth - 1, nodes)?);
            }
            Value::List(out)
        }
        (Plan::PairList(elem), Val::List(items)) => {
            nodes.charge(items.len())?;
            let mut entries = Vec::with_capacity(items.len());
            for item in items {
                let Val::Tuple(mut pair) = item else {
                    return Err(LiftError::Failed);
                };
                let (Some(value), Some(Val::String(key)), None) =
                    (pair.pop(), pair.pop(), pair.pop())
                else {
                    return Err(LiftError::Failed);
                };
                entries.push((key, lift(elem, value, depth - 1, nodes)?));
            }
            Value::Dict(sorted_last_wins(entries))
        }
        (Plan::Map(elem), Val::Map(pairs)) => {
            nodes.charge(pairs.len())?;
            let mut entries = Vec::with_capacity(pairs.len());
            for (key, value) in pairs {
                let Val::String(key) = key else {
                    return Err(LiftError::Failed);
                };
                entries.push((key, lift(elem, value, depth - 1, nodes)?));
            }
            Value::Dict(sorted_last_wins(entries))
        }
        (Plan::Record(fields), Val::Record(values)) => {
            if values.len() != fields.len() {
                return Err(LiftError::Failed);
            }
            nodes.charge(values.len())?;
            let mut entries = Vec::with_capacity(values.len());
            for (field, (wit_name, value)) in fields.iter().zip(values) {
                // The value's own copy of the name serves when the names agree (a
                // name without `-`): one allocation fewer per field and call.
                let name = if wit_name == field.name {
                    wit_name
                } else {
                    field.name.clone()
                };
                entries.push((name, lift(&field.plan, value, depth - 1, nodes)?));
            }
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Dict(entries)
        }
        (
            Plan::Bool
            | Plan::Int(_)
            | Plan::Float(_)
            | Plan::Char
            | Plan::Str
            | Plan::Enum
            | Plan::Flags
            | Plan::List(_)
            | Plan::PairList(_)
            | Plan::Map(_)
            | Plan::Record(_)
            | Plan::Option(_),
            _,
        ) => return Err(LiftError::Failed),
    })
}

impl From<OutOfNodes> for LiftError {
    fn from(OutOfNodes: OutOfNodes) -> Self {
        LiftError::TooBig
    }
}

/// Dict entries in key order; of duplicate keys the last one wins (a WIT map or a
/// list of pairs may repeat a key).
fn sorted_last_wins(entries: Vec<(String, Value)>) -> Vec<(String, Value)> {
    let mut map = std::collections::BTreeMap::new();
    for (key, value) in entries {
        map.insert(key, value);
    }
    map.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Plan {
        Plan::Record(vec![
            FieldPlan {
                wit_name: "until-day".into(),
                name: "until_day".into(),
                plan: Plan::Option(Box::new(Plan::Int(IntKind::U8))),
            },
            FieldPlan {
                wit_name: "labels".into(),
                name: "labels".into(),
                plan: Plan::PairList(Box::new(Plan::Float(FloatKind::F32))),
            },
        ])
    }

    #[test]
    fn lowering_follows_the_plan_and_lifting_returns_the_value() {
        let bound = Value::Dict(vec![
            ("until_day".into(), Value::Int(7)),
            (
                "labels".into(),
                Value::Dict(vec![
                    ("b".into(), Value::Float(0.5)),
                    ("a".into(), Value::Float(1.0)),
                ]),
            ),
        ]);
        let val = lower(&record(), bound).expect("lowered");
        assert_eq!(
            val,
            Val::Record(vec![
                ("until-day".into(), Val::Option(Some(Box::new(Val::U8(7))))),
                (
                    "labels".into(),
                    Val::List(vec![
                        Val::Tuple(vec![Val::String("b".into()), Val::Float32(0.5)]),
                        Val::Tuple(vec![Val::String("a".into()), Val::Float32(1.0)]),
                    ])
                ),
            ])
        );
        let mut nodes = Nodes::new(100);
        let value = lift(&record(), val, 8, &mut nodes).expect("lifted");
        assert_eq!(
            value,
            Value::Dict(vec![
                (
                    "labels".into(),
                    Value::Dict(vec![
                        ("a".into(), Value::Float(1.0)),
                        ("b".into(), Value::Float(0.5))
                    ])
                ),
                ("until_day".into(), Value::Int(7)),
            ])
        );
        // The record and its 2 fields, the u8, the pair list and its 2 entries, 2 floats.
        assert_eq!(nodes.left(), 100 - 9);
    }

    #[test]
    fn values_a_program_cannot_hold_fail_the_capability() {
        let mut nodes = Nodes::new(10);
        assert_eq!(
            lift(&Plan::Int(IntKind::U64), Val::U64(u64::MAX), 4, &mut nodes),
            Err(LiftError::Failed)
        );
        assert_eq!(
            lift(
                &Plan::Float(FloatKind::F64),
                Val::Float64(f64::NAN),
                4,
                &mut nodes
            ),
            Err(LiftError::Failed)
        );
        assert_eq!(
            lift(&Plan::Str, Val::Bool(true), 4, &mut nodes),
            Err(LiftError::Failed)
        );
        assert_eq!(
            lift(&Plan::Str, Val::String("x".into()), 0, &mut nodes),
            Err(LiftError::TooDeep)
        );
        let mut none = Nodes::new(0);
        assert_eq!(
            lift(&Plan::Str, Val::String("x".into()), 4, &mut none),
            Err(LiftError::TooBig)
        );
    }

    #[test]
    fn a_bound_value_of_another_form_is_a_mismatch() {
        assert_eq!(
            lower(&Plan::Int(IntKind::U8), Value::Int(256)),
            Err(Mismatch)
        );
        assert_eq!(lower(&Plan::Str, Value::Int(1)), Err(Mismatch));
        assert_eq!(lower(&record(), Value::Dict(Vec::new())), Err(Mismatch));
    }
}
