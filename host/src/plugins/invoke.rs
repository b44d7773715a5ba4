//! Calling a capability's export dynamically: binding a program's keyword arguments
//! against the export's WIT types, with the seed's diagnostics, and converting the
//! result back into a value a program can hold.
//!
//! Binding is the authority on arguments (the interpreter only forwards them). Its
//! diagnostics name the argument by path — `filter.owner`, `tags[1]`,
//! `labels['env']` — rendered only when something is wrong, so success stays linear.

use std::borrow::Cow;

use codemode_value::Value;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, Type, Val};

use super::reflect::ErrorKind;
use crate::catalog::snake_case;

/// Longest capability failure message passed on, in bytes, `...` included.
pub const MAX_FAILURE_MESSAGE_BYTES: usize = 256;

/// Where and how to call one capability's export.
#[derive(Debug, Clone)]
pub(crate) struct CallTarget {
    /// The export, resolvable on any instance of the component.
    pub index: ComponentExportIndex,
    params: Vec<(String, Type)>,
    result: Type,
    error: ErrorKind,
}

impl CallTarget {
    /// Resolves `instance`#`function` of `component`, whose signature the loader has
    /// already accepted.
    pub(crate) fn resolve(
        component: &Component,
        instance: &str,
        function: &str,
        error: ErrorKind,
    ) -> Option<Self> {
        let (_, parent) = component.get_export(None, instance)?;
        let (item, index) = component.get_export(Some(&parent), function)?;
        let ComponentItem::ComponentFunc(func) = item else {
            return None;
        };
        let params = func
            .params()
            .map(|(name, ty)| (snake_case(name), ty))
            .collect();
        let result = func.results().next()?;
        Some(Self {
            index,
            params,
            result,
            error,
        })
    }

    /// A placeholder for the result slot of a call.
    pub(crate) fn result_slot() -> Val {
        Val::Bool(false)
    }
}

/// Why arguments could not be bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BindError {
    /// The detail after `invalid capability arguments: `.
    Invalid(String),
    /// The depth or node budget ran out.
    Limit,
}

/// One step of the path to the value being bound.
#[derive(Debug, Clone)]
enum Segment<'a> {
    Root(&'a str),
    Member(Cow<'a, str>),
    Key(&'a str),
    Index(usize),
}

struct Binder<'a> {
    path: Vec<Segment<'a>>,
    nodes: usize,
}

/// What kind of value a slot wants, for "must be ..." messages.
fn wanted(ty: &Type) -> &'static str {
    match ty {
        Type::String | Type::Char | Type::Enum(_) => "a string",
        Type::Bool => "a bool",
        Type::S8
        | Type::U8
        | Type::S16
        | Type::U16
        | Type::S32
        | Type::U32
        | Type::S64
        | Type::U64 => "an integer",
        Type::Float32 | Type::Float64 => "a float",
        Type::List(list) if is_dict_list(&list.ty()) => "a dict",
        Type::List(_) | Type::Flags(_) => "a list",
        Type::Map(_) | Type::Record(_) => "a dict",
        Type::Option(option) => wanted(&option.ty()),
        _ => "a supported value",
    }
}

/// `list<tuple<string, T>>` is a dict (DESIGN §3).
fn is_dict_list(elem: &Type) -> bool {
    matches!(elem, Type::Tuple(t) if {
        let types: Vec<Type> = t.types().collect();
        types.len() == 2 && matches!(types[0], Type::String)
    })
}

fn int_range(ty: &Type) -> Option<(i64, i64)> {
    Some(match ty {
        Type::S8 => (i8::MIN.into(), i8::MAX.into()),
        Type::U8 => (0, u8::MAX.into()),
        Type::S16 => (i16::MIN.into(), i16::MAX.into()),
        Type::U16 => (0, u16::MAX.into()),
        Type::S32 => (i32::MIN.into(), i32::MAX.into()),
        Type::U32 => (0, u32::MAX.into()),
        Type::S64 => (i64::MIN, i64::MAX),
        Type::U64 => (0, i64::MAX),
        _ => return None,
    })
}

fn int_val(ty: &Type, i: i64) -> Val {
    // Callers checked `i` against `int_range(ty)`, so the casts are exact.
    match ty {
        Type::S8 => Val::S8(i as i8),
        Type::U8 => Val::U8(i as u8),
        Type::S16 => Val::S16(i as i16),
        Type::U16 => Val::U16(i as u16),
        Type::S32 => Val::S32(i as i32),
        Type::U32 => Val::U32(i as u32),
        Type::U64 => Val::U64(i as u64),
        _ => Val::S64(i),
    }
}

/// Binds `arguments` (the program's keyword arguments as a dict, or a list when it
/// passed positional ones) to the export's parameters.
///
/// The argument map is depth 1 and each container adds one (options add none); every
/// value takes one node of `max_nodes`, a container's length is charged before its
/// items are visited.
///
/// # Errors
///
/// [`BindError::Invalid`] with the seed's diagnostic, or [`BindError::Limit`].
pub(crate) fn bind<'a>(
    target: &'a CallTarget,
    arguments: &'a Value,
    max_depth: usize,
    max_nodes: usize,
) -> Result<Vec<Val>, BindError> {
    let entries = match arguments {
        Value::Dict(entries) => entries,
        Value::List(_) => {
            return Err(BindError::Invalid(
                "positional arguments are not accepted".into(),
            ));
        }
        _ => return Err(BindError::Invalid("malformed keyword argument".into())),
    };
    let mut binder = Binder {
        path: Vec::new(),
        nodes: max_nodes,
    };
    binder.charge(entries.len() + 1)?;
    for (name, _) in entries {
        if !target.params.iter().any(|(p, _)| p == name) {
            return Err(BindError::Invalid(format!(
                "unknown argument {}",
                go_quote(&render(&[Segment::Root(name)]))
            )));
        }
    }
    for (name, ty) in &target.params {
        let present = entries.iter().any(|(n, _)| n == name);
        if !present && !matches!(ty, Type::Option(_)) {
            return Err(BindError::Invalid(format!(
                "missing required argument {}",
                go_quote(&render(&[Segment::Root(name)]))
            )));
        }
    }
    let depth = max_depth.saturating_sub(1);
    let mut vals = Vec::with_capacity(target.params.len());
    for (name, ty) in &target.params {
        let value = entries.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        binder.path.push(Segment::Root(name));
        let val = match value {
            Some(value) => binder.bind(value, ty, depth, false)?,
            None => Val::Option(None),
        };
        binder.path.pop();
        vals.push(val);
    }
    Ok(vals)
}

impl<'a> Binder<'a> {
    fn charge(&mut self, count: usize) -> Result<(), BindError> {
        self.nodes = self.nodes.checked_sub(count).ok_or(BindError::Limit)?;
        Ok(())
    }

    fn fail(&self, message: &str) -> BindError {
        BindError::Invalid(format!(
            "argument {} {message}",
            go_quote(&render(&self.path))
        ))
    }

    fn mismatch(&self, ty: &Type, optional: bool) -> BindError {
        let suffix = if optional { " or None" } else { "" };
        self.fail(&format!("must be {}{suffix}", wanted(ty)))
    }

    fn bind(
        &mut self,
        value: &'a Value,
        ty: &Type,
        depth: usize,
        optional: bool,
    ) -> Result<Val, BindError> {
        if let Type::Option(option) = ty {
            if matches!(value, Value::None) {
                return Ok(Val::Option(None));
            }
            let inner = self.bind(value, &option.ty(), depth, true)?;
            return Ok(Val::Option(Some(Box::new(inner))));
        }
        if depth == 0 {
            return Err(BindError::Limit);
        }
        self.charge(1)?;
        match (ty, value) {
            (Type::String, Value::Str(s)) => Ok(Val::String(s.clone())),
            (Type::Char, Value::Str(s)) => {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Ok(Val::Char(c)),
                    _ => Err(self.fail("must be a single character")),
                }
            }
            (Type::Bool, Value::Bool(b)) => Ok(Val::Bool(*b)),
            (Type::Enum(cases), Value::Str(s)) => {
                if cases.names().any(|c| c == s) {
                    Ok(Val::Enum(s.clone()))
                } else {
                    let names: Vec<String> = cases.names().map(|c| format!("{c:?}")).collect();
                    Err(self.fail(&format!("must be one of {}", names.join(", "))))
                }
            }
            (Type::Float32 | Type::Float64, Value::Int(i)) => Ok(float_val(ty, *i as f64)),
            (Type::Float32 | Type::Float64, Value::Float(f)) => {
                if !f.is_finite() {
                    return Err(self.fail("is not finite"));
                }
                if matches!(ty, Type::Float32) && f.abs() > f64::from(f32::MAX) {
                    return Err(self.fail("overflows float32"));
                }
                Ok(float_val(ty, *f))
            }
            (_, Value::BigInt { .. }) if int_range(ty).is_some() || is_float(ty) => {
                Err(self.fail("overflows int64"))
            }
            (_, Value::Int(i)) if int_range(ty).is_some() => {
                let (min, max) = int_range(ty).unwrap_or((i64::MIN, i64::MAX));
                if *i < min || *i > max {
                    return Err(self.fail(&format!("must be between {min} and {max}")));
                }
                Ok(int_val(ty, *i))
            }
            (Type::Flags(flags), Value::List(items)) => {
                self.charge(items.len())?;
                let mut set = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    self.path.push(Segment::Index(i));
                    let Value::Str(name) = item else {
                        return Err(self.fail("must be a string"));
                    };
                    if !flags.names().any(|f| f == name) {
                        let names: Vec<String> = flags.names().map(|c| format!("{c:?}")).collect();
                        return Err(self.fail(&format!("must be one of {}", names.join(", "))));
                    }
                    self.path.pop();
                    if !set.contains(name) {
                        set.push(name.clone());
                    }
                }
                Ok(Val::Flags(set))
            }
            (Type::List(list), Value::List(items)) if !is_dict_list(&list.ty()) => {
                let elem = list.ty();
                self.charge(items.len())?;
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    self.path.push(Segment::Index(i));
                    out.push(self.bind(item, &elem, depth - 1, false)?);
                    self.path.pop();
                }
                Ok(Val::List(out))
            }
            (Type::List(_) | Type::Map(_) | Type::Record(_), Value::NonStringKeys) => {
                Err(self.fail("keys must be strings"))
            }
            (Type::List(list), Value::Dict(entries)) if is_dict_list(&list.ty()) => {
                let Type::Tuple(tuple) = list.ty() else {
                    return Err(self.mismatch(ty, optional));
                };
                let elem = tuple.types().nth(1).ok_or(BindError::Limit)?;
                self.charge(entries.len())?;
                let mut out = Vec::with_capacity(entries.len());
                for (key, item) in entries {
                    self.path.push(Segment::Key(key));
                    let item = self.bind(item, &elem, depth - 1, false)?;
                    self.path.pop();
                    out.push(Val::Tuple(vec![Val::String(key.clone()), item]));
                }
                Ok(Val::List(out))
            }
            (Type::Map(map), Value::Dict(entries)) if matches!(map.key(), Type::String) => {
                let elem = map.value();
                self.charge(entries.len())?;
                let mut out = Vec::with_capacity(entries.len());
                for (key, item) in entries {
                    self.path.push(Segment::Key(key));
                    let item = self.bind(item, &elem, depth - 1, false)?;
                    self.path.pop();
                    out.push((Val::String(key.clone()), item));
                }
                Ok(Val::Map(out))
            }
            (Type::Record(record), Value::Dict(entries)) => {
                self.charge(entries.len())?;
                let fields: Vec<(String, String, Type)> = record
                    .fields()
                    .map(|f| (snake_case(f.name), f.name.to_owned(), f.ty))
                    .collect();
                for (key, _) in entries {
                    if !fields.iter().any(|(name, _, _)| name == key) {
                        self.path.push(Segment::Member(Cow::Borrowed(key)));
                        let path = go_quote(&render(&self.path));
                        return Err(BindError::Invalid(format!("unknown argument {path}")));
                    }
                }
                let mut out = Vec::with_capacity(fields.len());
                for (name, wit_name, field_ty) in &fields {
                    let value = entries.iter().find(|(k, _)| k == name).map(|(_, v)| v);
                    self.path.push(Segment::Member(Cow::Owned(name.clone())));
                    let val = match value {
                        Some(value) => self.bind(value, field_ty, depth - 1, false)?,
                        None if matches!(field_ty, Type::Option(_)) => Val::Option(None),
                        None => {
                            let path = go_quote(&render(&self.path));
                            return Err(BindError::Invalid(format!(
                                "missing required argument {path}"
                            )));
                        }
                    };
                    self.path.pop();
                    out.push((wit_name.clone(), val));
                }
                Ok(Val::Record(out))
            }
            _ => Err(self.mismatch(ty, optional)),
        }
    }
}

fn is_float(ty: &Type) -> bool {
    matches!(ty, Type::Float32 | Type::Float64)
}

fn float_val(ty: &Type, f: f64) -> Val {
    match ty {
        Type::Float32 => Val::Float32(f as f32),
        _ => Val::Float64(f),
    }
}

/// The path as the seed prints it: root bare, `.member` for identifier-like members,
/// `['key']` for dict keys and other members (`["key"]`, Go-quoted, when the key has a
/// quote, a backslash or a non-printable character), `[i]` for list items.
fn render(path: &[Segment<'_>]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Root(name) => out.push_str(name),
            Segment::Member(name) if is_plain(name) => {
                out.push('.');
                out.push_str(name);
            }
            Segment::Member(Cow::Borrowed(key)) | Segment::Key(key) => {
                push_key(&mut out, key);
            }
            Segment::Member(Cow::Owned(key)) => push_key(&mut out, key),
            Segment::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}

fn push_key(out: &mut String, key: &str) {
    if key
        .chars()
        .any(|c| c == '\'' || c == '\\' || !is_printable(c))
    {
        out.push('[');
        out.push_str(&go_quote(key));
        out.push(']');
    } else {
        out.push_str("['");
        out.push_str(key);
        out.push_str("']");
    }
}

fn is_plain(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn is_printable(c: char) -> bool {
    !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// Go's `%q`: double quotes, `\"` and `\\`, `\n \r \t`, other non-printables as
/// `\xNN` / `\uNNNN` / `\UNNNNNNNN`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if is_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Why a result could not become a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutputError {
    /// `capability failed`, with the capability's own sanitized message if it gave one.
    Failed(Option<String>),
    /// The depth or node budget ran out.
    Limit,
}

/// Converts the export's result: a record becomes a dict with keys in sorted order;
/// `result::err` becomes [`OutputError::Failed`]; a `u64` above `i64::MAX` or a
/// non-finite float is a failure without detail. The record is depth 1.
pub(crate) fn output(
    target: &CallTarget,
    result: Val,
    max_depth: usize,
    max_nodes: usize,
) -> Result<Value, OutputError> {
    let mut nodes = max_nodes;
    let record = match (result, &target.result) {
        (Val::Result(Ok(Some(record))), Type::Result(r)) => {
            let ty = r.ok().ok_or(OutputError::Failed(None))?;
            return convert(*record, &ty, max_depth, &mut nodes, Absent::AsNone);
        }
        (Val::Result(Err(payload)), _) => {
            return Err(OutputError::Failed(failure_message(&target.error, payload)));
        }
        (record @ Val::Record(_), _) => record,
        _ => return Err(OutputError::Failed(None)),
    };
    convert(
        record,
        &target.result,
        max_depth,
        &mut nodes,
        Absent::AsNone,
    )
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

/// A capability's failure message as a model may see it: non-printable characters
/// become spaces; longer than [`MAX_FAILURE_MESSAGE_BYTES`] it is cut on a character
/// boundary and ends in `...`; empty means no detail.
pub(crate) fn sanitize_message(message: &str) -> Option<String> {
    let clean: String = message
        .chars()
        .map(|c| if is_printable(c) { c } else { ' ' })
        .collect();
    if clean.is_empty() {
        return None;
    }
    if clean.len() <= MAX_FAILURE_MESSAGE_BYTES {
        return Some(clean);
    }
    let mut end = MAX_FAILURE_MESSAGE_BYTES - 3;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}...", &clean[..end]))
}

/// How a conversion treats absent optional record fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Absent {
    /// As `None` (results: every declared field is present).
    AsNone,
    /// Left out (canonical arguments: an optional field given as `None` or not at all
    /// is absent at every level).
    Omitted,
}

fn convert(
    val: Val,
    ty: &Type,
    depth: usize,
    nodes: &mut usize,
    absent: Absent,
) -> Result<Value, OutputError> {
    if let Type::Option(option) = ty {
        return match val {
            Val::Option(None) => Ok(Value::None),
            Val::Option(Some(inner)) => convert(*inner, &option.ty(), depth, nodes, absent),
            _ => Err(OutputError::Failed(None)),
        };
    }
    if depth == 0 {
        return Err(OutputError::Limit);
    }
    *nodes = nodes.checked_sub(1).ok_or(OutputError::Limit)?;
    let charge = |nodes: &mut usize, n: usize| -> Result<(), OutputError> {
        *nodes = nodes.checked_sub(n).ok_or(OutputError::Limit)?;
        Ok(())
    };
    Ok(match val {
        Val::Bool(b) => Value::Bool(b),
        Val::S8(i) => Value::Int(i.into()),
        Val::U8(i) => Value::Int(i.into()),
        Val::S16(i) => Value::Int(i.into()),
        Val::U16(i) => Value::Int(i.into()),
        Val::S32(i) => Value::Int(i.into()),
        Val::U32(i) => Value::Int(i.into()),
        Val::S64(i) => Value::Int(i),
        Val::U64(i) => Value::Int(i64::try_from(i).map_err(|_| OutputError::Failed(None))?),
        Val::Float32(f) if f.is_finite() => Value::Float(f.into()),
        Val::Float64(f) if f.is_finite() => Value::Float(f),
        Val::Float32(_) | Val::Float64(_) => return Err(OutputError::Failed(None)),
        Val::Char(c) => Value::Str(c.to_string()),
        Val::String(s) | Val::Enum(s) => Value::Str(s),
        Val::Flags(flags) => {
            charge(nodes, flags.len())?;
            Value::List(flags.into_iter().map(Value::Str).collect())
        }
        Val::List(items) => {
            let Type::List(list) = ty else {
                return Err(OutputError::Failed(None));
            };
            let elem = list.ty();
            charge(nodes, items.len())?;
            if is_dict_list(&elem) {
                let Type::Tuple(tuple) = &elem else {
                    return Err(OutputError::Failed(None));
                };
                let value_ty = tuple.types().nth(1).ok_or(OutputError::Failed(None))?;
                let mut entries = Vec::with_capacity(items.len());
                for item in items {
                    let Val::Tuple(mut pair) = item else {
                        return Err(OutputError::Failed(None));
                    };
                    let (Some(value), Some(Val::String(key))) = (pair.pop(), pair.pop()) else {
                        return Err(OutputError::Failed(None));
                    };
                    entries.push((key, convert(value, &value_ty, depth - 1, nodes, absent)?));
                }
                Value::Dict(sorted_last_wins(entries))
            } else {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(convert(item, &elem, depth - 1, nodes, absent)?);
                }
                Value::List(out)
            }
        }
        Val::Map(pairs) => {
            let Type::Map(map) = ty else {
                return Err(OutputError::Failed(None));
            };
            let value_ty = map.value();
            charge(nodes, pairs.len())?;
            let mut entries = Vec::with_capacity(pairs.len());
            for (key, value) in pairs {
                let Val::String(key) = key else {
                    return Err(OutputError::Failed(None));
                };
                entries.push((key, convert(value, &value_ty, depth - 1, nodes, absent)?));
            }
            Value::Dict(sorted_last_wins(entries))
        }
        Val::Record(fields) => {
            let Type::Record(record) = ty else {
                return Err(OutputError::Failed(None));
            };
            charge(nodes, fields.len())?;
            let types: Vec<Type> = record.fields().map(|f| f.ty).collect();
            let mut entries = Vec::with_capacity(fields.len());
            for ((name, value), field_ty) in fields.into_iter().zip(types) {
                if absent == Absent::Omitted && matches!(value, Val::Option(None)) {
                    continue;
                }
                entries.push((
                    snake_case(&name),
                    convert(value, &field_ty, depth - 1, nodes, absent)?,
                ));
            }
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Dict(entries)
        }
        _ => return Err(OutputError::Failed(None)),
    })
}

/// The canonical form of bound arguments, as authorization sees them: a dict of the
/// parameters in name order, values as the capability receives them (an int given
/// for a float parameter is a float), optional fields given as `None` or not at all
/// left out at every level.
pub(crate) fn canonical(target: &CallTarget, params: &[Val]) -> Value {
    let mut entries = Vec::with_capacity(params.len());
    for ((name, ty), val) in target.params.iter().zip(params) {
        if matches!(val, Val::Option(None)) {
            continue;
        }
        // Binding built `val` within the budgets; the conversion cannot run out.
        let mut nodes = usize::MAX;
        if let Ok(value) = convert(val.clone(), ty, usize::MAX, &mut nodes, Absent::Omitted) {
            entries.push((name.clone(), value));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Value::Dict(entries)
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

    #[test]
    fn paths_render_like_the_seed() {
        let cases: [(&[Segment<'_>], &str); 6] = [
            (
                &[Segment::Root("filter"), Segment::Member("owner".into())],
                "filter.owner",
            ),
            (&[Segment::Root("tags"), Segment::Index(1)], "tags[1]"),
            (
                &[Segment::Root("labels"), Segment::Key("env")],
                "labels['env']",
            ),
            (
                &[Segment::Root("window"), Segment::Member("until-day".into())],
                "window['until-day']",
            ),
            (&[Segment::Root("m"), Segment::Key("it's")], r#"m["it's"]"#),
            (&[Segment::Root("m"), Segment::Key("a\nb")], r#"m["a\nb"]"#),
        ];
        for (path, text) in cases {
            assert_eq!(render(path), text);
        }
        assert_eq!(go_quote("labels['env']"), r#""labels['env']""#);
        assert_eq!(go_quote("m[\"a\"]"), r#""m[\"a\"]""#);
        assert_eq!(go_quote("\u{1}"), r#""\x01""#);
    }

    #[test]
    fn failure_messages_are_sanitized_and_bounded() {
        assert_eq!(sanitize_message("no\tbook\n"), Some("no book ".into()));
        assert_eq!(sanitize_message(""), None);
        let long = "é".repeat(200);
        let cut = sanitize_message(&long).unwrap();
        assert!(cut.len() <= MAX_FAILURE_MESSAGE_BYTES, "{}", cut.len());
        assert!(cut.ends_with("..."));
        assert_eq!(
            cut.len(),
            253 + 3 - 1,
            "cut on a char boundary: 126 × 2 bytes + ..."
        );
        let exact = "a".repeat(256);
        assert_eq!(sanitize_message(&exact), Some(exact.clone()));
        let over = "a".repeat(257);
        assert_eq!(
            sanitize_message(&over),
            Some(format!("{}...", "a".repeat(253)))
        );
    }
}
