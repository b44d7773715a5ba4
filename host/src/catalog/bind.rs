//! Binding a program's keyword arguments to a capability's parameters, by their
//! [`Shape`]s, with the seed's diagnostics; and the canonical form of bound arguments
//! that authorization sees.
//!
//! Binding is the authority on arguments (the interpreter only forwards them) and is
//! the same for every capability source: what it returns is plain [`Value`]s in
//! parameter order, already in the form the capability receives (an int given for a
//! float is a float, an omitted optional is `None`, flags are deduplicated), which a
//! source then lowers into its own representation. Diagnostics name the argument by
//! path — `filter.owner`, `tags[1]`, `labels['env']` — rendered only when something
//! is wrong, so success stays linear.

use std::borrow::Cow;

use codemode_value::Value;

use super::quote::{go_quote, is_printable};
use super::shape::{Field, FloatKind, Shape};
use crate::budget::{Nodes, OutOfNodes};

/// Why arguments could not be bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindError {
    /// The detail after `invalid capability arguments: `.
    Invalid(String),
    /// The arguments are nested deeper than the depth budget.
    TooDeep,
    /// The arguments have more values than the node budget.
    TooBig,
}

impl From<OutOfNodes> for BindError {
    fn from(OutOfNodes: OutOfNodes) -> Self {
        BindError::TooBig
    }
}

/// Binds `arguments` (the program's keyword arguments as a dict, or a list when it
/// passed positional ones) to `params`. Returns one value per parameter, in order;
/// an omitted optional parameter is `None`. A record argument becomes a dict of every
/// field in declaration order (omitted optional fields are `None`).
///
/// The argument map is depth 1 and each container adds one (options add none); every
/// value takes one node of `max_nodes`, a container's length is charged before its
/// items are visited.
///
/// # Errors
///
/// [`BindError::Invalid`] with the seed's diagnostic, [`BindError::TooDeep`] or
/// [`BindError::TooBig`].
pub fn bind(
    params: &[Field],
    arguments: &Value,
    max_depth: usize,
    max_nodes: usize,
) -> Result<Vec<Value>, BindError> {
    let entries = match arguments {
        Value::Dict(entries) => entries,
        Value::List(_) => {
            return Err(BindError::Invalid(
                "positional arguments are not accepted".into(),
            ));
        }
        Value::None
        | Value::Bool(_)
        | Value::Int(_)
        | Value::BigInt { .. }
        | Value::Float(_)
        | Value::Str(_)
        | Value::NonStringKeys
        | Value::Unsupported(_) => {
            return Err(BindError::Invalid("malformed keyword argument".into()));
        }
    };
    let mut binder = Binder {
        path: Vec::new(),
        nodes: Nodes::new(max_nodes),
    };
    binder.nodes.charge(entries.len() + 1)?;
    for (name, _) in entries {
        if !params.iter().any(|p| p.name == *name) {
            return Err(BindError::Invalid(format!(
                "unknown argument {}",
                go_quote(&render(&[Segment::Root(name)]))
            )));
        }
    }
    for param in params {
        if !param.is_optional() && !entries.iter().any(|(n, _)| *n == param.name) {
            return Err(BindError::Invalid(format!(
                "missing required argument {}",
                go_quote(&render(&[Segment::Root(&param.name)]))
            )));
        }
    }
    let depth = max_depth.saturating_sub(1);
    let mut values = Vec::with_capacity(params.len());
    for param in params {
        let value = entries
            .iter()
            .find(|(n, _)| *n == param.name)
            .map(|(_, v)| v);
        binder.path.push(Segment::Root(&param.name));
        let value = match value {
            Some(value) => binder.bind(value, &param.ty, depth, false)?,
            None => Value::None,
        };
        binder.path.pop();
        values.push(value);
    }
    Ok(values)
}

/// The canonical form of bound arguments, as authorization sees them: a dict of the
/// parameters in name order, values as the capability receives them, optional fields
/// given as `None` or not at all left out at every level, dict keys in order.
pub fn canonical(params: &[Field], bound: &[Value]) -> Value {
    let mut entries: Vec<(String, Value)> = params
        .iter()
        .zip(bound)
        .filter(|(_, value)| !matches!(value, Value::None))
        .map(|(param, value)| (param.name.clone(), canonical_value(&param.ty, value)))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Value::Dict(entries)
}

fn canonical_value(shape: &Shape, value: &Value) -> Value {
    match (shape, value) {
        (Shape::Option(inner), value) => canonical_value(inner, value),
        (Shape::List(elem), Value::List(items)) => {
            Value::List(items.iter().map(|i| canonical_value(elem, i)).collect())
        }
        (Shape::Dict(elem), Value::Dict(entries)) => {
            let mut entries: Vec<(String, Value)> = entries
                .iter()
                .map(|(k, v)| (k.clone(), canonical_value(elem, v)))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Dict(entries)
        }
        (Shape::Record(fields), Value::Dict(entries)) => {
            let mut entries: Vec<(String, Value)> = fields
                .iter()
                .zip(entries)
                .filter(|(_, (_, v))| !matches!(v, Value::None))
                .map(|(field, (k, v))| (k.clone(), canonical_value(&field.ty, v)))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Dict(entries)
        }
        // Scalars, and `any` values, are kept as bound.
        _ => value.clone(),
    }
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
    nodes: Nodes,
}

/// What kind of value a slot wants, for "must be ..." messages.
fn wanted(shape: &Shape) -> &'static str {
    match shape {
        Shape::Str | Shape::Char | Shape::Enum(_) => "a string",
        Shape::Bool => "a bool",
        Shape::Int(_) => "an integer",
        Shape::Float(_) => "a float",
        Shape::List(_) | Shape::Flags(_) => "a list",
        Shape::Dict(_) | Shape::Record(_) => "a dict",
        Shape::Option(inner) => wanted(inner),
        Shape::Any => "a supported value",
    }
}

/// The cases of an enum or flags, as "must be one of" lists them.
fn one_of(names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|c| format!("{c:?}")).collect();
    format!("must be one of {}", names.join(", "))
}

impl<'a> Binder<'a> {
    fn fail(&self, message: &str) -> BindError {
        BindError::Invalid(format!(
            "argument {} {message}",
            go_quote(&render(&self.path))
        ))
    }

    fn mismatch(&self, shape: &Shape, optional: bool) -> BindError {
        let suffix = if optional { " or None" } else { "" };
        self.fail(&format!("must be {}{suffix}", wanted(shape)))
    }

    fn bind(
        &mut self,
        value: &'a Value,
        shape: &Shape,
        depth: usize,
        optional: bool,
    ) -> Result<Value, BindError> {
        if let Shape::Option(inner) = shape {
            if matches!(value, Value::None) {
                return Ok(Value::None);
            }
            return self.bind(value, inner, depth, true);
        }
        if depth == 0 {
            return Err(BindError::TooDeep);
        }
        self.nodes.charge(1)?;
        match (shape, value) {
            (Shape::Str, Value::Str(s)) => Ok(Value::Str(s.clone())),
            (Shape::Char, Value::Str(s)) => {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(_), None) => Ok(Value::Str(s.clone())),
                    _ => Err(self.fail("must be a single character")),
                }
            }
            (Shape::Bool, Value::Bool(b)) => Ok(Value::Bool(*b)),
            (Shape::Enum(cases), Value::Str(s)) => {
                if cases.contains(s) {
                    Ok(Value::Str(s.clone()))
                } else {
                    Err(self.fail(&one_of(cases)))
                }
            }
            (Shape::Float(kind), Value::Int(i)) => Ok(float(*kind, *i as f64)),
            (Shape::Float(kind), Value::Float(f)) => {
                if !f.is_finite() {
                    return Err(self.fail("is not finite"));
                }
                if *kind == FloatKind::F32 && f.abs() > f64::from(f32::MAX) {
                    return Err(self.fail("overflows float32"));
                }
                Ok(float(*kind, *f))
            }
            (Shape::Int(_) | Shape::Float(_) | Shape::Any, Value::BigInt { .. }) => {
                Err(self.fail("overflows int64"))
            }
            (Shape::Int(kind), Value::Int(i)) => {
                let (min, max) = kind.range();
                if *i < min || *i > max {
                    return Err(self.fail(&format!("must be between {min} and {max}")));
                }
                Ok(Value::Int(*i))
            }
            (Shape::Flags(flags), Value::List(items)) => {
                self.nodes.charge(items.len())?;
                let mut set: Vec<Value> = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    self.path.push(Segment::Index(i));
                    let Value::Str(name) = item else {
                        return Err(self.fail("must be a string"));
                    };
                    if !flags.contains(name) {
                        return Err(self.fail(&one_of(flags)));
                    }
                    self.path.pop();
                    if !set.iter().any(|s| matches!(s, Value::Str(n) if n == name)) {
                        set.push(Value::Str(name.clone()));
                    }
                }
                Ok(Value::List(set))
            }
            (Shape::List(elem), Value::List(items)) => {
                self.nodes.charge(items.len())?;
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    self.path.push(Segment::Index(i));
                    out.push(self.bind(item, elem, depth - 1, false)?);
                    self.path.pop();
                }
                Ok(Value::List(out))
            }
            (
                Shape::List(_) | Shape::Dict(_) | Shape::Record(_) | Shape::Any,
                Value::NonStringKeys,
            ) => Err(self.fail("keys must be strings")),
            (Shape::Dict(elem), Value::Dict(entries)) => {
                self.nodes.charge(entries.len())?;
                let mut out = Vec::with_capacity(entries.len());
                for (key, item) in entries {
                    self.path.push(Segment::Key(key));
                    let item = self.bind(item, elem, depth - 1, false)?;
                    self.path.pop();
                    out.push((key.clone(), item));
                }
                Ok(Value::Dict(out))
            }
            (Shape::Record(fields), Value::Dict(entries)) => {
                self.nodes.charge(entries.len())?;
                for (key, _) in entries {
                    if !fields.iter().any(|f| f.name == *key) {
                        self.path.push(Segment::Member(Cow::Borrowed(key)));
                        let path = go_quote(&render(&self.path));
                        return Err(BindError::Invalid(format!("unknown argument {path}")));
                    }
                }
                let mut out = Vec::with_capacity(fields.len());
                for field in fields {
                    let value = entries
                        .iter()
                        .find(|(k, _)| *k == field.name)
                        .map(|(_, v)| v);
                    self.path
                        .push(Segment::Member(Cow::Owned(field.name.clone())));
                    let value = match value {
                        Some(value) => self.bind(value, &field.ty, depth - 1, false)?,
                        None if field.is_optional() => Value::None,
                        None => {
                            let path = go_quote(&render(&self.path));
                            return Err(BindError::Invalid(format!(
                                "missing required argument {path}"
                            )));
                        }
                    };
                    self.path.pop();
                    out.push((field.name.clone(), value));
                }
                Ok(Value::Dict(out))
            }
            (Shape::Any, value) => self.bind_any(value, depth, optional),
            (
                Shape::Str
                | Shape::Char
                | Shape::Bool
                | Shape::Enum(_)
                | Shape::Int(_)
                | Shape::Float(_)
                | Shape::Flags(_)
                | Shape::List(_)
                | Shape::Dict(_)
                | Shape::Record(_),
                Value::None
                | Value::Bool(_)
                | Value::Int(_)
                | Value::BigInt { .. }
                | Value::Float(_)
                | Value::Str(_)
                | Value::List(_)
                | Value::Dict(_)
                | Value::NonStringKeys
                | Value::Unsupported(_),
            ) => Err(self.mismatch(shape, optional)),
            // Unreachable: an option was unwrapped above. Kept apart from the
            // mismatches so that the list above stays exhaustive over real shapes.
            (Shape::Option(_), _) => Err(self.mismatch(shape, optional)),
        }
    }

    /// An `any` value (its node is charged): everything a JSON value can be.
    fn bind_any(
        &mut self,
        value: &'a Value,
        depth: usize,
        optional: bool,
    ) -> Result<Value, BindError> {
        match value {
            Value::None => Ok(Value::None),
            Value::Bool(b) => Ok(Value::Bool(*b)),
            Value::Int(i) => Ok(Value::Int(*i)),
            Value::Float(f) if f.is_finite() => Ok(Value::Float(*f)),
            Value::Float(_) => Err(self.fail("is not finite")),
            Value::Str(s) => Ok(Value::Str(s.clone())),
            Value::List(items) => {
                self.nodes.charge(items.len())?;
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    self.path.push(Segment::Index(i));
                    out.push(self.bind(item, &Shape::Any, depth - 1, false)?);
                    self.path.pop();
                }
                Ok(Value::List(out))
            }
            Value::Dict(entries) => {
                self.nodes.charge(entries.len())?;
                let mut out = Vec::with_capacity(entries.len());
                for (key, item) in entries {
                    self.path.push(Segment::Key(key));
                    out.push((key.clone(), self.bind(item, &Shape::Any, depth - 1, false)?));
                    self.path.pop();
                }
                Ok(Value::Dict(out))
            }
            Value::BigInt { .. } => Err(self.fail("overflows int64")),
            Value::NonStringKeys => Err(self.fail("keys must be strings")),
            Value::Unsupported(_) => Err(self.mismatch(&Shape::Any, optional)),
        }
    }
}

/// A float of `kind`: an `f32` parameter receives the value rounded to `f32`, so that
/// what authorization sees is what the capability gets.
fn float(kind: FloatKind, f: f64) -> Value {
    match kind {
        FloatKind::F32 => Value::Float(f64::from(f as f32)),
        FloatKind::F64 => Value::Float(f),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::shape::IntKind;

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
    }

    fn opt(shape: Shape) -> Shape {
        Shape::Option(Box::new(shape))
    }

    fn dict(entries: &[(&str, Value)]) -> Value {
        Value::Dict(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    fn s(text: &str) -> Value {
        Value::Str(text.into())
    }

    /// A parameter list with one of every shape.
    fn params() -> Vec<Field> {
        vec![
            Field::new("name", Shape::Str),
            Field::new("initial", opt(Shape::Char)),
            Field::new("small", opt(Shape::Int(IntKind::U8))),
            Field::new("ratio", opt(Shape::Float(FloatKind::F32))),
            Field::new("flag", opt(Shape::Bool)),
            Field::new(
                "genre",
                opt(Shape::Enum(vec![
                    "fiction".into(),
                    "science-fiction".into(),
                ])),
            ),
            Field::new(
                "perms",
                opt(Shape::Flags(vec!["read".into(), "write".into()])),
            ),
            Field::new("tags", opt(Shape::List(Box::new(Shape::Str)))),
            Field::new(
                "labels",
                opt(Shape::Dict(Box::new(Shape::Int(IntKind::S64)))),
            ),
            Field::new(
                "filter",
                opt(Shape::Record(vec![
                    Field::new("owner", Shape::Str),
                    Field::new("until_day", opt(Shape::Int(IntKind::S32))),
                ])),
            ),
            Field::new("extra", opt(Shape::Any)),
        ]
    }

    /// Binds `key = value` beside a valid `name` (or as it).
    fn bind_one(key: &str, value: Value) -> Result<Vec<Value>, BindError> {
        let arguments = if key == "name" {
            dict(&[(key, value)])
        } else {
            dict(&[("name", s("x")), (key, value)])
        };
        bind(&params(), &arguments, 64, 10_000)
    }

    fn invalid(key: &str, value: Value) -> String {
        match bind_one(key, value) {
            Err(BindError::Invalid(detail)) => detail,
            other => panic!("{key}: expected a diagnostic, got {other:?}"),
        }
    }

    #[test]
    fn every_diagnostic_comes_from_the_shapes() {
        let cases = [
            ("name", Value::Int(1), r#"argument "name" must be a string"#),
            (
                "initial",
                s("ab"),
                r#"argument "initial" must be a single character"#,
            ),
            (
                "small",
                Value::Int(256),
                r#"argument "small" must be between 0 and 255"#,
            ),
            (
                "small",
                s("1"),
                r#"argument "small" must be an integer or None"#,
            ),
            (
                "small",
                Value::BigInt { negative: false },
                r#"argument "small" overflows int64"#,
            ),
            (
                "ratio",
                Value::Float(f64::NAN),
                r#"argument "ratio" is not finite"#,
            ),
            (
                "ratio",
                Value::Float(1e39),
                r#"argument "ratio" overflows float32"#,
            ),
            (
                "flag",
                Value::Int(1),
                r#"argument "flag" must be a bool or None"#,
            ),
            (
                "genre",
                s("poetry"),
                r#"argument "genre" must be one of "fiction", "science-fiction""#,
            ),
            (
                "perms",
                Value::List(vec![s("read"), Value::Int(1)]),
                r#"argument "perms[1]" must be a string"#,
            ),
            (
                "perms",
                Value::List(vec![s("exec")]),
                r#"argument "perms[0]" must be one of "read", "write""#,
            ),
            (
                "tags",
                Value::List(vec![s("a"), Value::None]),
                r#"argument "tags[1]" must be a string"#,
            ),
            (
                "tags",
                Value::NonStringKeys,
                r#"argument "tags" keys must be strings"#,
            ),
            (
                "labels",
                dict(&[("env", s("prod"))]),
                r#"argument "labels['env']" must be an integer"#,
            ),
            (
                "labels",
                dict(&[("it's", s("prod"))]),
                r#"argument "labels[\"it's\"]" must be an integer"#,
            ),
            (
                "filter",
                dict(&[("owner", s("ana")), ("color", s("red"))]),
                r#"unknown argument "filter.color""#,
            ),
            (
                "filter",
                dict(&[("until_day", Value::Int(1))]),
                r#"missing required argument "filter.owner""#,
            ),
            (
                "filter",
                Value::List(Vec::new()),
                r#"argument "filter" must be a dict or None"#,
            ),
            (
                "extra",
                Value::Unsupported("function".into()),
                r#"argument "extra" must be a supported value or None"#,
            ),
            (
                "extra",
                Value::List(vec![Value::Float(f64::INFINITY)]),
                r#"argument "extra[0]" is not finite"#,
            ),
            ("color", s("red"), r#"unknown argument "color""#),
        ];
        for (key, value, want) in cases {
            assert_eq!(invalid(key, value.clone()), want, "{key} = {value:?}");
        }
        assert_eq!(
            bind(&params(), &dict(&[]), 64, 100),
            Err(BindError::Invalid(
                r#"missing required argument "name""#.into()
            ))
        );
        assert_eq!(
            bind(&params(), &Value::List(Vec::new()), 64, 100),
            Err(BindError::Invalid(
                "positional arguments are not accepted".into()
            ))
        );
        assert_eq!(
            bind(&params(), &Value::Int(1), 64, 100),
            Err(BindError::Invalid("malformed keyword argument".into()))
        );
    }

    #[test]
    fn bound_values_are_what_the_capability_receives() -> Result<(), BindError> {
        let bound = bind(
            &params(),
            &dict(&[
                ("name", s("x")),
                ("ratio", Value::Int(2)),
                (
                    "perms",
                    Value::List(vec![s("write"), s("read"), s("write")]),
                ),
                ("filter", dict(&[("owner", s("ana"))])),
                ("extra", dict(&[("k", Value::List(vec![Value::None]))])),
            ]),
            64,
            10_000,
        )?;
        assert_eq!(bound.len(), params().len());
        assert_eq!(bound[0], s("x"));
        assert_eq!(bound[1], Value::None, "omitted optional");
        assert_eq!(bound[3], Value::Float(2.0), "an int for a float");
        assert_eq!(bound[6], Value::List(vec![s("write"), s("read")]));
        assert_eq!(
            bound[9],
            dict(&[("owner", s("ana")), ("until_day", Value::None)]),
            "every field, in declaration order"
        );
        // f32 parameters receive the f32 value.
        let bound = bind(
            &params(),
            &dict(&[("name", s("x")), ("ratio", Value::Float(0.1))]),
            64,
            100,
        )?;
        assert_eq!(bound[3], Value::Float(f64::from(0.1_f32)));
        Ok(())
    }

    #[test]
    fn canonical_arguments_leave_out_absent_optionals_at_every_level() -> Result<(), BindError> {
        let bound = bind(
            &params(),
            &dict(&[
                ("tags", Value::List(vec![s("b"), s("a")])),
                ("name", s("x")),
                (
                    "labels",
                    dict(&[("z", Value::Int(1)), ("a", Value::Int(2))]),
                ),
                (
                    "filter",
                    dict(&[("owner", s("ana")), ("until_day", Value::None)]),
                ),
                ("flag", Value::None),
            ]),
            64,
            10_000,
        )?;
        assert_eq!(
            canonical(&params(), &bound),
            dict(&[
                ("filter", dict(&[("owner", s("ana"))])),
                (
                    "labels",
                    dict(&[("a", Value::Int(2)), ("z", Value::Int(1))])
                ),
                ("name", s("x")),
                ("tags", Value::List(vec![s("b"), s("a")])),
            ])
        );
        Ok(())
    }

    #[test]
    fn budgets_bound_depth_and_nodes() {
        let nested = Value::List(vec![Value::List(vec![s("a")])]);
        let params = [Field::new(
            "rows",
            Shape::List(Box::new(Shape::List(Box::new(Shape::Str)))),
        )];
        let args = dict(&[("rows", nested)]);
        assert!(bind(&params, &args, 4, 100).is_ok());
        assert_eq!(bind(&params, &args, 3, 100), Err(BindError::TooDeep));
        // The argument map (1 + 1 entry), each list (1 + 1 item), the string (1).
        assert!(bind(&params, &args, 4, 7).is_ok());
        assert_eq!(bind(&params, &args, 4, 6), Err(BindError::TooBig));
    }
}
