//! The compiled binder of one capability: binds a program's keyword arguments to
//! the capability's parameters with the seed's diagnostics, lowers them into the
//! source's wire form and, when authorization wants it, builds their canonical form,
//! all in one walk over the arguments.
//!
//! A [`Binder`] is compiled once, when the capability is validated, from its
//! parameters' [`Shape`]s into a flat table of nodes; a call walks the arguments
//! guided by that table and nothing else. Binding is the authority on arguments (the
//! interpreter only forwards them) and is the same for every source: what a source
//! gets is already in the form the capability receives (an int given for a float is
//! a float, an omitted optional is absent, flags are deduplicated), built by the
//! source's own [`Lowering`] (component values for a plugin, JSON for an upstream,
//! plain [`Value`]s for [`Values`]). Diagnostics name the argument by path —
//! `filter.owner`, `tags[1]`, `labels['env']` — rendered only when something is
//! wrong, so success stays linear.

use codemode_value::Value;

use super::quote::{go_quote, is_printable};
use super::shape::{Field, FloatKind, IntKind, Shape};
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

/// What one binding may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindLimits {
    /// Depth the arguments may have: the argument map is depth 1 and each container
    /// adds one (options add none).
    pub max_depth: usize,
    /// Values the arguments may have: each takes one node, a container's length is
    /// charged before its items are visited.
    pub max_nodes: usize,
    /// Whether to build the canonical form (authorization wants the arguments).
    pub canonical: bool,
}

/// Arguments bound for one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound<A> {
    /// In the source's wire form.
    pub arguments: A,
    /// The canonical form, as authorization sees it, when it was asked for: a
    /// dict of the parameters in name order, values as the capability receives
    /// them, optional fields given as `None` or not at all left out at every
    /// level, the keys of every dict in order (an `any` value's too).
    pub canonical: Option<Value>,
}

impl<A> Bound<A> {
    /// The same binding with its arguments turned into `B` (the canonical form
    /// kept).
    pub fn map<B>(self, f: impl FnOnce(A) -> B) -> Bound<B> {
        Bound {
            arguments: f(self.arguments),
            canonical: self.canonical,
        }
    }
}

/// How a source receives bound values: each method builds one value of its wire
/// form from parts binding has already checked (an integer is within its kind's
/// range, a float is finite and, for `f32`, rounded to it; a char is one; an enum
/// case or flag is one of the shape's).
pub trait Lowering {
    /// One value in the wire form.
    type Out;
    /// All arguments of one call in the wire form.
    type Arguments;

    /// `None` where the shape allows it (an option, or `any`).
    fn none(&self) -> Self::Out;
    /// A present option's value.
    fn some(&self, value: Self::Out) -> Self::Out;
    /// A bool.
    fn bool(&self, value: bool) -> Self::Out;
    /// An integer of `kind` (`s64` for an `any` value).
    fn int(&self, kind: IntKind, value: i64) -> Self::Out;
    /// A float of `kind` (`f64` for an `any` value).
    fn float(&self, kind: FloatKind, value: f64) -> Self::Out;
    /// A char.
    fn char(&self, value: char) -> Self::Out;
    /// A string.
    fn str(&self, value: &str) -> Self::Out;
    /// One of an enum's cases.
    fn enum_case(&self, case: &str) -> Self::Out;
    /// A set of flags, each once, in the order given.
    fn flags(&self, set: Vec<String>) -> Self::Out;
    /// A list.
    fn list(&self, items: Vec<Self::Out>) -> Self::Out;
    /// A dict ([`Shape::Dict`], or an `any` value), entries in the order given.
    fn dict(&self, entries: Vec<(String, Self::Out)>) -> Self::Out;
    /// A map ([`Shape::Map`]), entries in the order given.
    fn map(&self, entries: Vec<(String, Self::Out)>) -> Self::Out {
        self.dict(entries)
    }
    /// A record: one value per member in declaration order, `None` for an optional
    /// member given as `None` or not at all.
    fn record(&self, members: &[Member], values: Vec<Option<Self::Out>>) -> Self::Out;
    /// The arguments of a call, as [`Lowering::record`] gets a record's members.
    fn arguments(&self, params: &[Member], values: Vec<Option<Self::Out>>) -> Self::Arguments;
}

/// The catalog's own lowering: bound arguments as plain [`Value`]s, one per
/// parameter in order (`None` for an omitted optional one), a record as a dict of
/// every member in declaration order (omitted optional members `None`). What a
/// source that does not lower into a wire form of its own receives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Values;

impl Lowering for Values {
    type Out = Value;
    type Arguments = Vec<Value>;

    fn none(&self) -> Value {
        Value::None
    }
    fn some(&self, value: Value) -> Value {
        value
    }
    fn bool(&self, value: bool) -> Value {
        Value::Bool(value)
    }
    fn int(&self, _: IntKind, value: i64) -> Value {
        Value::Int(value)
    }
    fn float(&self, _: FloatKind, value: f64) -> Value {
        Value::Float(value)
    }
    fn char(&self, value: char) -> Value {
        Value::Str(value.to_string())
    }
    fn str(&self, value: &str) -> Value {
        Value::Str(value.to_owned())
    }
    fn enum_case(&self, case: &str) -> Value {
        Value::Str(case.to_owned())
    }
    fn flags(&self, set: Vec<String>) -> Value {
        Value::List(set.into_iter().map(Value::Str).collect())
    }
    fn list(&self, items: Vec<Value>) -> Value {
        Value::List(items)
    }
    fn dict(&self, entries: Vec<(String, Value)>) -> Value {
        Value::Dict(entries)
    }
    fn record(&self, members: &[Member], values: Vec<Option<Value>>) -> Value {
        Value::Dict(
            members
                .iter()
                .zip(values)
                .map(|(member, value)| (member.name.clone(), value.unwrap_or(Value::None)))
                .collect(),
        )
    }
    fn arguments(&self, _: &[Member], values: Vec<Option<Value>>) -> Vec<Value> {
        values
            .into_iter()
            .map(|value| value.unwrap_or(Value::None))
            .collect()
    }
}

/// One parameter of a capability, or one member of a record, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The name programs use.
    pub name: String,
    /// Whether a program may omit it (its shape is an option).
    pub optional: bool,
    /// Its node in the binder's table.
    node: usize,
}

/// One shape, compiled: children are indices into the binder's table.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Str,
    Char,
    Bool,
    Int(IntKind, i64, i64),
    Float(FloatKind),
    Enum(Vec<String>),
    Flags(Vec<String>),
    List(usize),
    Dict(usize),
    Map(usize),
    Record(Vec<Member>),
    Option(usize),
    Any,
}

/// The compiled binder of one capability's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Binder {
    params: Vec<Member>,
    nodes: Vec<Node>,
}

impl Binder {
    /// Compiles the binder of `params`.
    pub fn compile(params: &[Field]) -> Self {
        let mut binder = Binder {
            params: Vec::new(),
            nodes: Vec::new(),
        };
        binder.params = binder.members(params);
        binder
    }

    fn members(&mut self, fields: &[Field]) -> Vec<Member> {
        fields
            .iter()
            .map(|field| Member {
                name: field.name.clone(),
                optional: field.is_optional(),
                node: self.node(&field.ty),
            })
            .collect()
    }

    fn node(&mut self, shape: &Shape) -> usize {
        let node = match shape {
            Shape::Str => Node::Str,
            Shape::Char => Node::Char,
            Shape::Bool => Node::Bool,
            Shape::Int(kind) => {
                let (min, max) = kind.range();
                Node::Int(*kind, min, max)
            }
            Shape::Float(kind) => Node::Float(*kind),
            Shape::Enum(cases) => Node::Enum(cases.clone()),
            Shape::Flags(flags) => Node::Flags(flags.clone()),
            Shape::List(elem) => Node::List(self.node(elem)),
            Shape::Dict(elem) => Node::Dict(self.node(elem)),
            Shape::Map(elem) => Node::Map(self.node(elem)),
            Shape::Record(fields) => Node::Record(self.members(fields)),
            Shape::Option(inner) => Node::Option(self.node(inner)),
            Shape::Any => Node::Any,
        };
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// The parameters, in declaration order.
    pub fn params(&self) -> &[Member] {
        &self.params
    }

    /// Binds `arguments` (the program's keyword arguments as a dict, or a list when
    /// it passed positional ones) and lowers them with `lowering`, within `limits`.
    ///
    /// # Errors
    ///
    /// [`BindError::Invalid`] with the seed's diagnostic, [`BindError::TooDeep`] or
    /// [`BindError::TooBig`].
    pub fn bind<L: Lowering>(
        &self,
        arguments: &Value,
        lowering: &L,
        limits: BindLimits,
    ) -> Result<Bound<L::Arguments>, BindError> {
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
        let mut walk = Walk {
            binder: self,
            lowering,
            path: Vec::new(),
            nodes: Nodes::new(limits.max_nodes),
            canonical: limits.canonical,
        };
        walk.nodes.charge(entries.len() + 1)?;
        for (name, _) in entries {
            if !self.params.iter().any(|p| p.name == *name) {
                return Err(BindError::Invalid(format!(
                    "unknown argument {}",
                    go_quote(&render(&[Segment::Root(name)]))
                )));
            }
        }
        for param in &self.params {
            if !param.optional && !entries.iter().any(|(n, _)| *n == param.name) {
                return Err(BindError::Invalid(format!(
                    "missing required argument {}",
                    go_quote(&render(&[Segment::Root(&param.name)]))
                )));
            }
        }
        let depth = limits.max_depth.saturating_sub(1);
        let (values, canonical) = walk.members(&self.params, entries, depth, Segment::Root)?;
        Ok(Bound {
            arguments: lowering.arguments(&self.params, values),
            canonical,
        })
    }
}

/// One step of the path to the value being bound.
#[derive(Debug, Clone)]
enum Segment<'a> {
    Root(&'a str),
    Member(&'a str),
    Key(&'a str),
    Index(usize),
}

/// One binding under way.
struct Walk<'a, L> {
    binder: &'a Binder,
    lowering: &'a L,
    path: Vec<Segment<'a>>,
    nodes: Nodes,
    canonical: bool,
}

/// A lowered value and, when asked for, its canonical form.
type Pair<T> = (T, Option<Value>);

/// A dict's entries, lowered, and when asked for the canonical dict.
type Entries<T> = Pair<Vec<(String, T)>>;

/// What kind of value a node wants, for "must be ..." messages.
fn wanted(nodes: &[Node], node: &Node) -> &'static str {
    match node {
        Node::Str | Node::Char | Node::Enum(_) => "a string",
        Node::Bool => "a bool",
        Node::Int(..) => "an integer",
        Node::Float(_) => "a float",
        Node::List(_) | Node::Flags(_) => "a list",
        Node::Dict(_) | Node::Map(_) | Node::Record(_) => "a dict",
        Node::Option(inner) => nodes.get(*inner).map_or("a value", |n| wanted(nodes, n)),
        Node::Any => "a supported value",
    }
}

/// The cases of an enum or flags, as "must be one of" lists them.
fn one_of(names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|c| format!("{c:?}")).collect();
    format!("must be one of {}", names.join(", "))
}

/// Dict entries in key order, for the canonical form.
fn sorted(mut entries: Vec<(String, Value)>) -> Value {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Value::Dict(entries)
}

impl<'a, L: Lowering> Walk<'a, L> {
    fn fail(&self, message: &str) -> BindError {
        BindError::Invalid(format!(
            "argument {} {message}",
            go_quote(&render(&self.path))
        ))
    }

    fn mismatch(&self, node: &Node, optional: bool) -> BindError {
        let suffix = if optional { " or None" } else { "" };
        self.fail(&format!(
            "must be {}{suffix}",
            wanted(&self.binder.nodes, node)
        ))
    }

    /// The canonical form of a scalar, when asked for.
    fn canon(&self, value: impl FnOnce() -> Value) -> Option<Value> {
        self.canonical.then(value)
    }

    /// Binds the members of a record (or the parameters, `segment` being
    /// [`Segment::Root`]) from `entries`, which hold no unknown name, in
    /// declaration order: one value per member, `None` for an optional one given
    /// as `None` or not at all; a required one missing is found when its turn
    /// comes (the seed's order: an earlier member's mistake is reported first).
    fn members(
        &mut self,
        members: &'a [Member],
        entries: &'a [(String, Value)],
        depth: usize,
        segment: fn(&'a str) -> Segment<'a>,
    ) -> Result<Pair<Vec<Option<L::Out>>>, BindError> {
        let mut values = Vec::with_capacity(members.len());
        let mut canonical = Vec::new();
        for member in members {
            let value = entries
                .iter()
                .find(|(n, _)| *n == member.name)
                .map(|(_, v)| v);
            match value {
                None if member.optional => values.push(None),
                // A record's: the parameters were checked before any was bound.
                None => {
                    self.path.push(segment(&member.name));
                    let path = go_quote(&render(&self.path));
                    return Err(BindError::Invalid(format!(
                        "missing required argument {path}"
                    )));
                }
                Some(Value::None) if member.optional => values.push(None),
                Some(value) => {
                    self.path.push(segment(&member.name));
                    let (out, canon) = self.value(member.node, value, depth, false)?;
                    self.path.pop();
                    values.push(Some(out));
                    if let Some(canon) = canon
                        && !matches!(canon, Value::None)
                    {
                        canonical.push((member.name.clone(), canon));
                    }
                }
            }
        }
        Ok((values, self.canonical.then(|| sorted(canonical))))
    }

    fn value(
        &mut self,
        node: usize,
        value: &'a Value,
        depth: usize,
        optional: bool,
    ) -> Result<Pair<L::Out>, BindError> {
        let binder = self.binder;
        let Some(shape) = binder.nodes.get(node) else {
            // Unreachable: compilation made every index it stores.
            return Err(self.fail("has no shape"));
        };
        if let Node::Option(inner) = shape {
            if matches!(value, Value::None) {
                return Ok((self.lowering.none(), self.canon(|| Value::None)));
            }
            let (out, canon) = self.value(*inner, value, depth, true)?;
            return Ok((self.lowering.some(out), canon));
        }
        if depth == 0 {
            return Err(BindError::TooDeep);
        }
        self.nodes.charge(1)?;
        let lowering = self.lowering;
        match (shape, value) {
            (Node::Str, Value::Str(s)) => Ok((lowering.str(s), self.canon(|| value.clone()))),
            (Node::Char, Value::Str(s)) => {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Ok((lowering.char(c), self.canon(|| value.clone()))),
                    _ => Err(self.fail("must be a single character")),
                }
            }
            (Node::Bool, Value::Bool(b)) => Ok((lowering.bool(*b), self.canon(|| value.clone()))),
            (Node::Enum(cases), Value::Str(s)) => {
                if cases.contains(s) {
                    Ok((lowering.enum_case(s), self.canon(|| value.clone())))
                } else {
                    Err(self.fail(&one_of(cases)))
                }
            }
            (Node::Float(kind), Value::Int(i)) => Ok(self.float(*kind, *i as f64)),
            (Node::Float(kind), Value::Float(f)) => {
                if !f.is_finite() {
                    return Err(self.fail("is not finite"));
                }
                if *kind == FloatKind::F32 && f.abs() > f64::from(f32::MAX) {
                    return Err(self.fail("overflows float32"));
                }
                Ok(self.float(*kind, *f))
            }
            (Node::Int(..) | Node::Float(_) | Node::Any, Value::BigInt { .. }) => {
                Err(self.fail("overflows int64"))
            }
            (Node::Int(kind, min, max), Value::Int(i)) => {
                if *i < *min || *i > *max {
                    return Err(self.fail(&format!("must be between {min} and {max}")));
                }
                Ok((lowering.int(*kind, *i), self.canon(|| value.clone())))
            }
            (Node::Flags(flags), Value::List(items)) => {
                self.nodes.charge(items.len())?;
                let mut set: Vec<String> = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    self.path.push(Segment::Index(i));
                    let Value::Str(name) = item else {
                        return Err(self.fail("must be a string"));
                    };
                    if !flags.contains(name) {
                        return Err(self.fail(&one_of(flags)));
                    }
                    self.path.pop();
                    if !set.contains(name) {
                        set.push(name.clone());
                    }
                }
                let canon =
                    self.canon(|| Value::List(set.iter().cloned().map(Value::Str).collect()));
                Ok((lowering.flags(set), canon))
            }
            (Node::List(elem), Value::List(items)) => self.list(*elem, items, depth),
            (
                Node::List(_) | Node::Dict(_) | Node::Map(_) | Node::Record(_) | Node::Any,
                Value::NonStringKeys,
            ) => Err(self.fail("keys must be strings")),
            (Node::Dict(elem), Value::Dict(entries)) => {
                let (entries, canon) = self.entries(*elem, entries, depth)?;
                Ok((lowering.dict(entries), canon))
            }
            (Node::Map(elem), Value::Dict(entries)) => {
                let (entries, canon) = self.entries(*elem, entries, depth)?;
                Ok((lowering.map(entries), canon))
            }
            (Node::Record(members), Value::Dict(entries)) => {
                self.nodes.charge(entries.len())?;
                for (key, _) in entries {
                    if !members.iter().any(|m| m.name == *key) {
                        self.path.push(Segment::Member(key));
                        let path = go_quote(&render(&self.path));
                        return Err(BindError::Invalid(format!("unknown argument {path}")));
                    }
                }
                let (values, canon) = self.members(members, entries, depth - 1, Segment::Member)?;
                Ok((lowering.record(members, values), canon))
            }
            (Node::Any, value) => self.any(node, value, depth, optional),
            (
                Node::Str
                | Node::Char
                | Node::Bool
                | Node::Enum(_)
                | Node::Int(..)
                | Node::Float(_)
                | Node::Flags(_)
                | Node::List(_)
                | Node::Dict(_)
                | Node::Map(_)
                | Node::Record(_),
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
            (Node::Option(_), _) => Err(self.mismatch(shape, optional)),
        }
    }

    /// A float of `kind`: an `f32` parameter receives the value rounded to `f32`, so
    /// that what authorization sees is what the capability gets.
    fn float(&self, kind: FloatKind, f: f64) -> Pair<L::Out> {
        let f = match kind {
            FloatKind::F32 => f64::from(f as f32),
            FloatKind::F64 => f,
        };
        (self.lowering.float(kind, f), self.canon(|| Value::Float(f)))
    }

    /// A list's items, each of node `elem`.
    fn list(
        &mut self,
        elem: usize,
        items: &'a [Value],
        depth: usize,
    ) -> Result<Pair<L::Out>, BindError> {
        self.nodes.charge(items.len())?;
        let mut out = Vec::with_capacity(items.len());
        let mut canonical = Vec::with_capacity(if self.canonical { items.len() } else { 0 });
        for (i, item) in items.iter().enumerate() {
            self.path.push(Segment::Index(i));
            let (item, canon) = self.value(elem, item, depth - 1, false)?;
            self.path.pop();
            out.push(item);
            canonical.extend(canon);
        }
        Ok((
            self.lowering.list(out),
            self.canon(|| Value::List(canonical)),
        ))
    }

    /// A dict's entries, each value of node `elem`, in the order given.
    fn entries(
        &mut self,
        elem: usize,
        entries: &'a [(String, Value)],
        depth: usize,
    ) -> Result<Entries<L::Out>, BindError> {
        self.nodes.charge(entries.len())?;
        let mut out = Vec::with_capacity(entries.len());
        let mut canonical = Vec::with_capacity(if self.canonical { entries.len() } else { 0 });
        for (key, item) in entries {
            self.path.push(Segment::Key(key));
            let (item, canon) = self.value(elem, item, depth - 1, false)?;
            self.path.pop();
            out.push((key.clone(), item));
            if let Some(canon) = canon {
                canonical.push((key.clone(), canon));
            }
        }
        Ok((out, self.canonical.then(|| sorted(canonical))))
    }

    /// An `any` value (its node, `node`, is charged): everything a JSON value can
    /// be; its items are `any` too.
    fn any(
        &mut self,
        node: usize,
        value: &'a Value,
        depth: usize,
        optional: bool,
    ) -> Result<Pair<L::Out>, BindError> {
        let lowering = self.lowering;
        match value {
            Value::None => Ok((lowering.none(), self.canon(|| Value::None))),
            Value::Bool(b) => Ok((lowering.bool(*b), self.canon(|| value.clone()))),
            Value::Int(i) => Ok((lowering.int(IntKind::S64, *i), self.canon(|| value.clone()))),
            Value::Float(f) if f.is_finite() => Ok((
                lowering.float(FloatKind::F64, *f),
                self.canon(|| value.clone()),
            )),
            Value::Float(_) => Err(self.fail("is not finite")),
            Value::Str(s) => Ok((lowering.str(s), self.canon(|| value.clone()))),
            Value::List(items) => self.list(node, items, depth),
            Value::Dict(entries) => {
                let (entries, canon) = self.entries(node, entries, depth)?;
                Ok((lowering.dict(entries), canon))
            }
            Value::BigInt { .. } => Err(self.fail("overflows int64")),
            Value::NonStringKeys => Err(self.fail("keys must be strings")),
            Value::Unsupported(_) => Err(self.mismatch(&Node::Any, optional)),
        }
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
            Segment::Member(key) | Segment::Key(key) => push_key(&mut out, key),
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

    /// Binds into plain values, without the canonical form.
    fn bind(
        params: &[Field],
        arguments: &Value,
        max_depth: usize,
        max_nodes: usize,
    ) -> Result<Vec<Value>, BindError> {
        let limits = BindLimits {
            max_depth,
            max_nodes,
            canonical: false,
        };
        let bound = Binder::compile(params).bind(arguments, &Values, limits)?;
        assert_eq!(bound.canonical, None, "not asked for");
        Ok(bound.arguments)
    }

    /// The canonical form of `arguments`, bound with every other limit generous.
    fn canonical(params: &[Field], arguments: &Value) -> Result<Value, BindError> {
        let limits = BindLimits {
            max_depth: 64,
            max_nodes: 10_000,
            canonical: true,
        };
        let bound = Binder::compile(params).bind(arguments, &Values, limits)?;
        // The wire form is the same with or without the canonical one.
        assert_eq!(Ok(bound.arguments), bind(params, arguments, 64, 10_000));
        bound.canonical.ok_or(BindError::TooBig)
    }

    #[test]
    fn paths_render_like_the_seed() {
        let cases: [(&[Segment<'_>], &str); 6] = [
            (
                &[Segment::Root("filter"), Segment::Member("owner")],
                "filter.owner",
            ),
            (&[Segment::Root("tags"), Segment::Index(1)], "tags[1]"),
            (
                &[Segment::Root("labels"), Segment::Key("env")],
                "labels['env']",
            ),
            (
                &[Segment::Root("window"), Segment::Member("until-day")],
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
    fn a_records_members_are_checked_in_declaration_order() {
        let params = [Field::new(
            "f",
            Shape::Record(vec![
                Field::new("a", Shape::Int(IntKind::S64)),
                Field::new("b", Shape::Str),
            ]),
        )];
        // `a` comes before the missing `b`: its mistake is the one reported.
        assert_eq!(
            bind(&params, &dict(&[("f", dict(&[("a", s("x"))]))]), 64, 100),
            Err(BindError::Invalid(
                r#"argument "f.a" must be an integer"#.into()
            ))
        );
        assert_eq!(
            bind(
                &params,
                &dict(&[("f", dict(&[("a", Value::Int(1))]))]),
                64,
                100
            ),
            Err(BindError::Invalid(
                r#"missing required argument "f.b""#.into()
            ))
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
        let arguments = dict(&[
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
            ("ratio", Value::Float(0.1)),
            (
                "perms",
                Value::List(vec![s("write"), s("read"), s("write")]),
            ),
            (
                "extra",
                dict(&[("z", Value::None), ("a", Value::List(vec![Value::None]))]),
            ),
        ]);
        assert_eq!(
            canonical(&params(), &arguments)?,
            dict(&[
                (
                    "extra",
                    dict(&[("a", Value::List(vec![Value::None])), ("z", Value::None)])
                ),
                ("filter", dict(&[("owner", s("ana"))])),
                (
                    "labels",
                    dict(&[("a", Value::Int(2)), ("z", Value::Int(1))])
                ),
                ("name", s("x")),
                ("perms", Value::List(vec![s("write"), s("read")])),
                ("ratio", Value::Float(f64::from(0.1_f32))),
                ("tags", Value::List(vec![s("b"), s("a")])),
            ])
        );
        Ok(())
    }

    /// Records what a source is handed, to show which method built what.
    struct Tagged;

    impl Lowering for Tagged {
        type Out = String;
        type Arguments = Vec<String>;

        fn none(&self) -> String {
            "none".into()
        }
        fn some(&self, value: String) -> String {
            format!("some({value})")
        }
        fn bool(&self, value: bool) -> String {
            format!("bool({value})")
        }
        fn int(&self, kind: IntKind, value: i64) -> String {
            format!("int({kind:?}, {value})")
        }
        fn float(&self, kind: FloatKind, value: f64) -> String {
            format!("float({kind:?}, {value})")
        }
        fn char(&self, value: char) -> String {
            format!("char({value})")
        }
        fn str(&self, value: &str) -> String {
            format!("str({value})")
        }
        fn enum_case(&self, case: &str) -> String {
            format!("enum({case})")
        }
        fn flags(&self, set: Vec<String>) -> String {
            format!("flags({})", set.join(" "))
        }
        fn list(&self, items: Vec<String>) -> String {
            format!("list({})", items.join(" "))
        }
        fn dict(&self, entries: Vec<(String, String)>) -> String {
            let entries: Vec<String> = entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("dict({})", entries.join(" "))
        }
        fn map(&self, entries: Vec<(String, String)>) -> String {
            let entries: Vec<String> = entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("map({})", entries.join(" "))
        }
        fn record(&self, members: &[Member], values: Vec<Option<String>>) -> String {
            let members: Vec<String> = members
                .iter()
                .zip(values)
                .map(|(m, v)| format!("{}={}", m.name, v.unwrap_or_else(|| "-".into())))
                .collect();
            format!("record({})", members.join(" "))
        }
        fn arguments(&self, params: &[Member], values: Vec<Option<String>>) -> Vec<String> {
            params
                .iter()
                .zip(values)
                .map(|(p, v)| format!("{}={}", p.name, v.unwrap_or_else(|| "-".into())))
                .collect()
        }
    }

    #[test]
    fn a_source_lowering_gets_every_value_in_one_walk() -> Result<(), BindError> {
        let params = vec![
            Field::new("name", Shape::Char),
            Field::new("small", opt(Shape::Int(IntKind::U8))),
            Field::new("ratio", Shape::Float(FloatKind::F32)),
            Field::new("genre", Shape::Enum(vec!["a-b".into()])),
            Field::new("perms", Shape::Flags(vec!["r".into(), "w".into()])),
            Field::new("labels", Shape::Map(Box::new(opt(Shape::Bool)))),
            Field::new(
                "filter",
                Shape::Record(vec![
                    Field::new("owner", Shape::Str),
                    Field::new("until_day", opt(Shape::Int(IntKind::S32))),
                    Field::new("tags", Shape::Dict(Box::new(Shape::Any))),
                ]),
            ),
            Field::new("skipped", opt(Shape::Str)),
        ];
        let arguments = dict(&[
            ("name", s("é")),
            ("small", Value::Int(7)),
            ("ratio", Value::Int(2)),
            ("genre", s("a-b")),
            ("perms", Value::List(vec![s("w"), s("w"), s("r")])),
            (
                "labels",
                dict(&[("y", Value::Bool(true)), ("n", Value::None)]),
            ),
            (
                "filter",
                dict(&[
                    (
                        "tags",
                        dict(&[(
                            "k",
                            Value::List(vec![Value::Int(1), Value::Float(0.5), Value::None]),
                        )]),
                    ),
                    ("owner", s("ana")),
                ]),
            ),
            ("skipped", Value::None),
        ]);
        let limits = BindLimits {
            max_depth: 8,
            max_nodes: 100,
            canonical: false,
        };
        let bound = Binder::compile(&params).bind(&arguments, &Tagged, limits)?;
        assert_eq!(
            bound.arguments,
            [
                "name=char(é)",
                "small=some(int(U8, 7))",
                "ratio=float(F32, 2)",
                "genre=enum(a-b)",
                "perms=flags(w r)",
                "labels=map(y=some(bool(true)) n=none)",
                "filter=record(owner=str(ana) until_day=- tags=dict(k=list(int(S64, 1) float(F64, 0.5) none)))",
                "skipped=-",
            ]
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
