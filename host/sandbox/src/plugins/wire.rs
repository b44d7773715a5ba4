//! Values across the component boundary: bound arguments lowered into component
//! values (the plugin source's [`Lowering`]), and a result lifted into a value a
//! program can hold, both guided by the capability's [`Shape`]s.
//!
//! Reflection maps each WIT type to a shape once, at load (a `map<string, T>` to
//! [`Shape::Map`], a `list<tuple<string, T>>` to [`Shape::Dict`]), so a call never
//! looks at a wasmtime `Type`: a record member's WIT name is its name with `_`
//! turned back into `-` (WIT names have no `_`), everything else the shape says.

use codemode_value::Value;
use wasmtime::component::Val;

use crate::budget::{Nodes, OutOfNodes};
use crate::catalog::{Field, FloatKind, IntKind, Lowering, Member, Shape};

/// How a capability's failure is reported by its result type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The result is a bare record: the capability cannot report a failure.
    None,
    /// `result<record>`: a failure without a message.
    Bare,
    /// `result<record, string>`.
    Message,
    /// `result<record, R>` where record `R` has a `message: string` field.
    RecordMessage,
}

/// The plugin source's lowering: bound arguments as component values, one per
/// parameter. Binding checked every range, so the integer casts are exact.
#[derive(Debug, Clone, Copy)]
pub struct Wit;

/// The WIT name of a member or parameter named `name` (as programs write it).
fn wit_name(name: &str) -> String {
    name.replace('_', "-")
}

impl Lowering for Wit {
    type Out = Val;
    type Arguments = Vec<Val>;

    fn none(&self) -> Val {
        Val::Option(None)
    }
    fn some(&self, value: Val) -> Val {
        Val::Option(Some(Box::new(value)))
    }
    fn bool(&self, value: bool) -> Val {
        Val::Bool(value)
    }
    fn int(&self, kind: IntKind, value: i64) -> Val {
        match kind {
            IntKind::S8 => Val::S8(value as i8),
            IntKind::U8 => Val::U8(value as u8),
            IntKind::S16 => Val::S16(value as i16),
            IntKind::U16 => Val::U16(value as u16),
            IntKind::S32 => Val::S32(value as i32),
            IntKind::U32 => Val::U32(value as u32),
            IntKind::S64 => Val::S64(value),
            IntKind::U64 => Val::U64(value as u64),
        }
    }
    fn float(&self, kind: FloatKind, value: f64) -> Val {
        match kind {
            // Binding rounded an f32 argument to an f32 value: the cast is exact.
            FloatKind::F32 => Val::Float32(value as f32),
            FloatKind::F64 => Val::Float64(value),
        }
    }
    fn char(&self, value: char) -> Val {
        Val::Char(value)
    }
    fn str(&self, value: &str) -> Val {
        Val::String(value.to_owned())
    }
    fn enum_case(&self, case: &str) -> Val {
        Val::Enum(case.to_owned())
    }
    fn flags(&self, set: Vec<String>) -> Val {
        Val::Flags(set)
    }
    fn list(&self, items: Vec<Val>) -> Val {
        Val::List(items)
    }
    /// A `list<tuple<string, T>>`.
    fn dict(&self, entries: Vec<(String, Val)>) -> Val {
        Val::List(
            entries
                .into_iter()
                .map(|(key, value)| Val::Tuple(vec![Val::String(key), value]))
                .collect(),
        )
    }
    fn map(&self, entries: Vec<(String, Val)>) -> Val {
        Val::Map(
            entries
                .into_iter()
                .map(|(key, value)| (Val::String(key), value))
                .collect(),
        )
    }
    fn record(&self, members: &[Member], values: Vec<Option<Val>>) -> Val {
        Val::Record(
            members
                .iter()
                .zip(values)
                .map(|(member, value)| (wit_name(&member.name), value.unwrap_or(Val::Option(None))))
                .collect(),
        )
    }
    fn arguments(&self, _: &[Member], values: Vec<Option<Val>>) -> Vec<Val> {
        values
            .into_iter()
            .map(|value| value.unwrap_or(Val::Option(None)))
            .collect()
    }
}

/// Why a result could not become a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiftError {
    /// The value is outside what a program can hold (a `u64` above `i64::MAX`, a
    /// non-finite float) or not of its shape: the capability failed.
    Failed,
    /// The result is nested deeper than the depth budget.
    TooDeep,
    /// The result has more values than the node budget.
    TooBig,
}

/// Lifts a result value of `shape`: a record becomes a dict with keys in sorted
/// order, a dict keeps the last of duplicate keys, in key order. Every value takes
/// one node of `nodes` and a container's length is charged before its items; each
/// container is one level of `depth` (options add none).
pub fn lift(shape: &Shape, val: Val, depth: usize, nodes: &mut Nodes) -> Result<Value, LiftError> {
    if let Shape::Option(inner) = shape {
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
    Ok(match (shape, val) {
        (Shape::Bool, Val::Bool(b)) => Value::Bool(b),
        (Shape::Int(IntKind::S8), Val::S8(i)) => Value::Int(i.into()),
        (Shape::Int(IntKind::U8), Val::U8(i)) => Value::Int(i.into()),
        (Shape::Int(IntKind::S16), Val::S16(i)) => Value::Int(i.into()),
        (Shape::Int(IntKind::U16), Val::U16(i)) => Value::Int(i.into()),
        (Shape::Int(IntKind::S32), Val::S32(i)) => Value::Int(i.into()),
        (Shape::Int(IntKind::U32), Val::U32(i)) => Value::Int(i.into()),
        (Shape::Int(IntKind::S64), Val::S64(i)) => Value::Int(i),
        (Shape::Int(IntKind::U64), Val::U64(i)) => {
            Value::Int(i64::try_from(i).map_err(|_| LiftError::Failed)?)
        }
        (Shape::Float(FloatKind::F32), Val::Float32(f)) if f.is_finite() => Value::Float(f.into()),
        (Shape::Float(FloatKind::F64), Val::Float64(f)) if f.is_finite() => Value::Float(f),
        (Shape::Char, Val::Char(c)) => Value::Str(c.to_string()),
        (Shape::Str, Val::String(s)) | (Shape::Enum(_), Val::Enum(s)) => Value::Str(s),
        (Shape::Flags(_), Val::Flags(flags)) => {
            nodes.charge(flags.len())?;
            Value::List(flags.into_iter().map(Value::Str).collect())
        }
        (Shape::List(elem), Val::List(items)) => {
            nodes.charge(items.len())?;
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(lift(elem, item, depth - 1, nodes)?);
            }
            Value::List(out)
        }
        (Shape::Dict(elem), Val::List(items)) => {
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
        (Shape::Map(elem), Val::Map(pairs)) => {
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
        (Shape::Record(fields), Val::Record(values)) => {
            lift_members(fields, values, depth, nodes)?
        }
        (
            Shape::Bool
            | Shape::Int(_)
            | Shape::Float(_)
            | Shape::Char
            | Shape::Str
            | Shape::Enum(_)
            | Shape::Flags(_)
            | Shape::List(_)
            | Shape::Dict(_)
            | Shape::Map(_)
            | Shape::Record(_)
            | Shape::Option(_)
            // A plugin's shapes are never `any`.
            | Shape::Any,
            _,
        ) => return Err(LiftError::Failed),
    })
}

/// Lifts a result record whose fields are `fields` (the capability's output) at
/// depth 1.
pub fn lift_record(
    fields: &[Field],
    val: Val,
    depth: usize,
    nodes: &mut Nodes,
) -> Result<Value, LiftError> {
    if depth == 0 {
        return Err(LiftError::TooDeep);
    }
    nodes.charge(1)?;
    match val {
        Val::Record(values) => lift_members(fields, values, depth, nodes),
        _ => Err(LiftError::Failed),
    }
}

/// A record's members (its own node is charged), each one level below it.
fn lift_members(
    fields: &[Field],
    values: Vec<(String, Val)>,
    depth: usize,
    nodes: &mut Nodes,
) -> Result<Value, LiftError> {
    if values.len() != fields.len() {
        return Err(LiftError::Failed);
    }
    nodes.charge(values.len())?;
    let mut entries = Vec::with_capacity(values.len());
    for (field, (wit_name, value)) in fields.iter().zip(values) {
        // The value's own copy of the name serves when the names agree (a name
        // without `-`): one allocation fewer per field and call.
        let name = if wit_name == field.name {
            wit_name
        } else {
            field.name.clone()
        };
        entries.push((name, lift(&field.ty, value, depth - 1, nodes)?));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Value::Dict(entries))
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
    use crate::catalog::{BindLimits, Binder};

    fn record() -> Vec<Field> {
        vec![
            Field::new(
                "until_day",
                Shape::Option(Box::new(Shape::Int(IntKind::U8))),
            ),
            Field::new(
                "labels",
                Shape::Dict(Box::new(Shape::Float(FloatKind::F32))),
            ),
            Field::new("counts", Shape::Map(Box::new(Shape::Int(IntKind::S16)))),
            Field::new("note", Shape::Option(Box::new(Shape::Str))),
        ]
    }

    fn window() -> Vec<Field> {
        vec![Field::new("window", Shape::Record(record()))]
    }

    const LIMITS: BindLimits = BindLimits {
        max_depth: 8,
        max_nodes: 100,
        canonical: false,
    };

    #[test]
    fn lowering_follows_the_shapes_and_lifting_returns_the_value() {
        let arguments = Value::Dict(vec![(
            "window".into(),
            Value::Dict(vec![
                ("until_day".into(), Value::Int(7)),
                (
                    "labels".into(),
                    Value::Dict(vec![
                        ("b".into(), Value::Float(0.5)),
                        ("a".into(), Value::Int(1)),
                    ]),
                ),
                (
                    "counts".into(),
                    Value::Dict(vec![("x".into(), Value::Int(-3))]),
                ),
            ]),
        )]);
        let bound = Binder::compile(&window())
            .bind(&arguments, &Wit, LIMITS)
            .expect("bound");
        let val = Val::Record(vec![
            ("until-day".into(), Val::Option(Some(Box::new(Val::U8(7))))),
            (
                "labels".into(),
                Val::List(vec![
                    Val::Tuple(vec![Val::String("b".into()), Val::Float32(0.5)]),
                    Val::Tuple(vec![Val::String("a".into()), Val::Float32(1.0)]),
                ]),
            ),
            (
                "counts".into(),
                Val::Map(vec![(Val::String("x".into()), Val::S16(-3))]),
            ),
            ("note".into(), Val::Option(None)),
        ]);
        assert_eq!(bound.arguments, vec![val.clone()]);
        let mut nodes = Nodes::new(100);
        let value = lift_record(&record(), val, 8, &mut nodes).expect("lifted");
        assert_eq!(
            value,
            Value::Dict(vec![
                (
                    "counts".into(),
                    Value::Dict(vec![("x".into(), Value::Int(-3))])
                ),
                (
                    "labels".into(),
                    Value::Dict(vec![
                        ("a".into(), Value::Float(1.0)),
                        ("b".into(), Value::Float(0.5))
                    ])
                ),
                ("note".into(), Value::None),
                ("until_day".into(), Value::Int(7)),
            ])
        );
        // The record and its 4 fields (5), the u8, the pair list and its 2 entries
        // (3), 2 floats, the map and its entry (2), the s16; an absent option takes
        // none.
        assert_eq!(nodes.left(), 100 - 14);
    }

    #[test]
    fn every_integer_kind_lowers_to_its_own_value() {
        let kinds = [
            (IntKind::S8, -128, Val::S8(-128)),
            (IntKind::U8, 255, Val::U8(255)),
            (IntKind::S16, -32768, Val::S16(-32768)),
            (IntKind::U16, 65535, Val::U16(65535)),
            (IntKind::S32, i64::from(i32::MIN), Val::S32(i32::MIN)),
            (IntKind::U32, i64::from(u32::MAX), Val::U32(u32::MAX)),
            (IntKind::S64, i64::MIN, Val::S64(i64::MIN)),
            (IntKind::U64, i64::MAX, Val::U64(i64::MAX as u64)),
        ];
        for (kind, value, want) in kinds {
            let params = [Field::new("n", Shape::Int(kind))];
            let arguments = Value::Dict(vec![("n".into(), Value::Int(value))]);
            let bound = Binder::compile(&params)
                .bind(&arguments, &Wit, LIMITS)
                .expect("in range");
            assert_eq!(bound.arguments, vec![want.clone()], "{kind:?}");
            let mut nodes = Nodes::new(10);
            assert_eq!(
                lift(&Shape::Int(kind), want, 4, &mut nodes),
                Ok(Value::Int(value)),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn values_a_program_cannot_hold_fail_the_capability() {
        let mut nodes = Nodes::new(10);
        assert_eq!(
            lift(&Shape::Int(IntKind::U64), Val::U64(u64::MAX), 4, &mut nodes),
            Err(LiftError::Failed)
        );
        assert_eq!(
            lift(
                &Shape::Float(FloatKind::F64),
                Val::Float64(f64::NAN),
                4,
                &mut nodes
            ),
            Err(LiftError::Failed)
        );
        assert_eq!(
            lift(&Shape::Str, Val::Bool(true), 4, &mut nodes),
            Err(LiftError::Failed)
        );
        assert_eq!(
            lift(&Shape::Str, Val::String("x".into()), 0, &mut nodes),
            Err(LiftError::TooDeep)
        );
        assert_eq!(
            lift_record(&record(), Val::Record(Vec::new()), 4, &mut nodes),
            Err(LiftError::Failed)
        );
        let mut none = Nodes::new(0);
        assert_eq!(
            lift(&Shape::Str, Val::String("x".into()), 4, &mut none),
            Err(LiftError::TooBig)
        );
    }
}
