//! A tool's JSON Schemas as the catalog's shapes: `inputSchema` gives the
//! parameters, `outputSchema` the result fields, so an upstream tool is described and
//! bound exactly like a WebAssembly capability (one notation, one binder).
//!
//! The mapping: string → `str`, integer → `int`, number → `float`, boolean → `bool`,
//! array → `list[T]`, object with properties → `{a: T, b: U}` (a property not in
//! `required` is `T | None`), object with only `additionalProperties` →
//! `dict[str, T]`, a string `enum` (or `const`) → its values, `anyOf`/`oneOf`/a type
//! list with `null` → `T | None`, a local `$ref` into `$defs`/`definitions`
//! followed (a cycle is `any`), anything else → `any`.
//!
//! A schema comes from an upstream server, so nothing about its size is trusted: a
//! walk stops below [`MAX_SCHEMA_DEPTH`] (the rest is `any`), and one tool's
//! schemas may become at most [`MAX_SCHEMA_NODES`] shapes, every `$ref` followed
//! counted again (a 10 KB schema whose 31 definitions each reference the next one 8
//! times would otherwise expand to 8^31 shapes). A walk also stops when its
//! [`Stop`] flag is set (the connection it serves timed out).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value as Json};

use crate::catalog::{
    Field, FloatKind, IntKind, MAX_ARGUMENT_DOCS, Shape, argument_block, one_line,
};

/// Deepest schema nesting followed; below it a shape is `any`. A schema comes from an
/// upstream server, so its depth is not trusted.
const MAX_SCHEMA_DEPTH: usize = 32;

/// Most shapes one tool's schemas (input and output together) may become. The
/// largest real tool seen (a cloud API's, 40 KB of schema) needs about 2,000.
pub const MAX_SCHEMA_NODES: usize = 10_000;

/// Most bytes of text (names, `enum` and `const` values) one tool's shapes may
/// copy: each `$ref` followed copies its target's texts again, so 5,000
/// references to one 8 MiB `const` would copy 40 GB.
pub const MAX_SCHEMA_TEXT: usize = 1 << 20;

/// Why a tool's schemas were not converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// They describe more than [`MAX_SCHEMA_NODES`] shapes, or more than
    /// [`MAX_SCHEMA_TEXT`] bytes of names and values.
    #[error(
        "its schemas describe more than {MAX_SCHEMA_NODES} types or 1 MiB of names and values (every $ref followed counted), the most a tool may have"
    )]
    TooLarge,
    /// The walk's [`Stop`] was set.
    #[error("the conversion was stopped")]
    Stopped,
}

/// What one tool's conversion may still spend, and the flag that stops it.
pub struct Budget<'s> {
    nodes_left: usize,
    text_left: usize,
    stop: &'s Stop,
}

impl<'s> Budget<'s> {
    /// A budget of [`MAX_SCHEMA_NODES`] shapes, stopped by `stop`.
    pub fn new(stop: &'s Stop) -> Self {
        Self {
            nodes_left: MAX_SCHEMA_NODES,
            text_left: MAX_SCHEMA_TEXT,
            stop,
        }
    }

    /// Shapes spent so far.
    pub fn nodes_spent(&self) -> usize {
        MAX_SCHEMA_NODES - self.nodes_left
    }

    /// Spends `bytes` of copied text.
    fn copy(&mut self, bytes: usize) -> Result<(), SchemaError> {
        self.text_left = self
            .text_left
            .checked_sub(bytes)
            .ok_or(SchemaError::TooLarge)?;
        Ok(())
    }

    /// Spends one shape.
    fn charge(&mut self) -> Result<(), SchemaError> {
        self.charge_many(1)
    }

    /// Spends `count` shapes (or the branches of a union, scanned as many).
    fn charge_many(&mut self, count: usize) -> Result<(), SchemaError> {
        if self.stop.is_set() {
            return Err(SchemaError::Stopped);
        }
        self.nodes_left = self
            .nodes_left
            .checked_sub(count)
            .ok_or(SchemaError::TooLarge)?;
        Ok(())
    }
}

/// A flag that stops every walk reading it: set when the work it serves was
/// abandoned (a connection past its timeout), so conversion on another thread does
/// not go on for nobody.
#[derive(Debug, Default)]
pub struct Stop(AtomicBool);

impl Stop {
    /// Stops the walks.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the walks were stopped.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The parameters an `inputSchema` describes: its properties in the schema's order
/// (JSON objects are read with their order kept: `serde_json`'s `preserve_order`),
/// optional when not `required`. A schema that
/// is not an object with properties has none.
///
/// # Errors
///
/// [`SchemaError`]: the budget ran out or the walk was stopped.
pub fn parameters(
    input_schema: &Map<String, Json>,
    budget: &mut Budget<'_>,
) -> Result<Vec<Field>, SchemaError> {
    parameters_in(input_schema, input_schema, budget)
}

/// [`parameters`] of a schema whose `$ref`s point into `document`, the whole
/// description it is part of (an OpenAPI operation's parameters, made into one
/// object schema, refer to `#/components/schemas/...` of their spec).
///
/// # Errors
///
/// [`SchemaError`]: the budget ran out or the walk was stopped.
pub fn parameters_in<'a>(
    input_schema: &'a Map<String, Json>,
    document: &'a Map<String, Json>,
    budget: &mut Budget<'_>,
) -> Result<Vec<Field>, SchemaError> {
    let mut walk = Walk::new(document, budget);
    walk.fields(input_schema, 0)
}

/// The shape of one `schema` whose `$ref`s point into `document` (an OpenAPI
/// response's body, which may be any JSON type).
///
/// # Errors
///
/// [`SchemaError`]: the budget ran out or the walk was stopped.
pub fn shape_in<'a>(
    schema: &'a Json,
    document: &'a Map<String, Json>,
    budget: &mut Budget<'_>,
) -> Result<Shape, SchemaError> {
    let mut walk = Walk::new(document, budget);
    walk.shape(schema, 0)
}

/// Most bytes one keyword's value (a `default`, an example) takes in that block.
const MAX_DOC_VALUE: usize = 200;

/// What an `inputSchema` says about its parameters beyond their types, as the
/// lines of an `Arguments:` block: one per documented parameter in the schema's
/// order, `- name: description (default: 10; format: date-time; examples: "a";
/// minimum: 1; maximum: 5; pattern: "^x$"; also: "v33", ...)` (`also`: enum
/// values past the [`MAX_LITERALS_SHOWN`](crate::catalog::MAX_LITERALS_SHOWN) the
/// notation shows). A property that is a local `$ref`, or a union with `null`,
/// is read through to what it names for what it does not say itself. Text is
/// made one printable line; the block stops at [`MAX_ARGUMENT_DOCS`] bytes.
/// `None` when no parameter is documented.
pub fn argument_docs(input_schema: &Map<String, Json>) -> Option<String> {
    argument_docs_in(input_schema, input_schema)
}

/// [`argument_docs`] of a schema whose `$ref`s point into `document`.
pub fn argument_docs_in(
    input_schema: &Map<String, Json>,
    document: &Map<String, Json>,
) -> Option<String> {
    let Some(Json::Object(properties)) = input_schema.get("properties") else {
        return None;
    };
    argument_block(
        properties
            .iter()
            .filter_map(|(name, property)| doc_line(document, name, property)),
    )
}

/// The line of one parameter, when its schema documents it.
fn doc_line(root: &Map<String, Json>, name: &str, property: &Json) -> Option<String> {
    let layers = doc_layers(root, property);
    let find = |key: &str| layers.iter().find_map(|layer| layer.get(key));
    let mut extras = Vec::new();
    // A `null` default says only that the parameter is optional, which its type
    // already does.
    if let Some(default) = find("default").filter(|d| !d.is_null()) {
        extras.push(format!("default: {}", brief(default)));
    }
    if let Some(Json::String(format)) = find("format") {
        extras.push(format!("format: {}", one_line(format, MAX_DOC_VALUE)));
    }
    if let Some(Json::Array(examples)) = find("examples") {
        let shown: Vec<String> = examples.iter().take(3).map(brief).collect();
        if !shown.is_empty() {
            extras.push(format!("examples: {}", shown.join(", ")));
        }
    }
    for key in ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"] {
        if let Some(bound @ Json::Number(_)) = find(key) {
            extras.push(format!("{key}: {bound}"));
        }
    }
    if let Some(Json::String(pattern)) = find("pattern") {
        extras.push(format!(
            "pattern: {}",
            brief(&Json::String(pattern.clone()))
        ));
    }
    if let Some(Json::Array(values)) = find("enum")
        && values.len() > crate::catalog::MAX_LITERALS_SHOWN
    {
        let rest: Vec<String> = values
            .iter()
            .skip(crate::catalog::MAX_LITERALS_SHOWN)
            .take(64)
            .map(brief)
            .collect();
        extras.push(format!("also: {}", rest.join(", ")));
    }
    let description = match find("description") {
        Some(Json::String(text)) => Some(one_line(text, MAX_ARGUMENT_DOCS)),
        _ => None,
    }
    .filter(|d| !d.is_empty());
    match (description, extras.is_empty()) {
        (None, true) => None,
        (None, false) => Some(format!("- {name}: {}", extras.join("; "))),
        (Some(description), true) => Some(format!("- {name}: {description}")),
        (Some(description), false) => {
            Some(format!("- {name}: {description} ({})", extras.join("; ")))
        }
    }
}

/// The schemas a property's documentation is read from, in order: the property,
/// what its local `$ref` names, and the one branch of a union with `null` (and
/// what that branch's `$ref` names).
fn doc_layers<'a>(root: &'a Map<String, Json>, property: &'a Json) -> Vec<&'a Map<String, Json>> {
    let mut layers = Vec::new();
    let mut next = property.as_object();
    // Bounded: a property, its reference, a branch and the branch's reference.
    for _ in 0..4 {
        let Some(schema) = next else { break };
        layers.push(schema);
        next = if let Some(Json::String(reference)) = schema.get("$ref") {
            local_target(root, reference).and_then(Json::as_object)
        } else {
            ["anyOf", "oneOf"].iter().find_map(|key| {
                let Some(Json::Array(branches)) = schema.get(*key) else {
                    return None;
                };
                // The one branch besides `null`; a second one ends the scan.
                let mut others = branches
                    .iter()
                    .filter(|b| b.get("type").and_then(Json::as_str) != Some("null"));
                match (others.next(), others.next()) {
                    (Some(one), None) => one.as_object(),
                    _ => None,
                }
            })
        };
    }
    layers
}

/// Most segments of a local `$ref`'s JSON pointer followed (`#/components/schemas/X`
/// has three): a longer one points nowhere.
const MAX_POINTER_SEGMENTS: usize = 16;

/// Where a local `$ref` points: a JSON pointer into `root` (`#/$defs/X`,
/// `#/definitions/X`, an OpenAPI spec's `#/components/schemas/X`), through
/// objects and arrays, `~1` and `~0` unescaped. Any other reference (a file, a
/// URL) points nowhere.
pub fn local_target<'a>(root: &'a Map<String, Json>, reference: &str) -> Option<&'a Json> {
    let pointer = reference.strip_prefix("#/")?;
    let mut segments = pointer.split('/');
    let first = unescape(segments.next()?);
    let mut at = root.get(first.as_str())?;
    for (count, segment) in segments.enumerate() {
        if count + 2 > MAX_POINTER_SEGMENTS {
            return None;
        }
        let segment = unescape(segment);
        at = match at {
            Json::Object(members) => members.get(segment.as_str())?,
            Json::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// A JSON pointer segment unescaped (RFC 6901: `~1` is `/`, `~0` is `~`).
fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// A JSON value as compact text, at most [`MAX_DOC_VALUE`] bytes (then `...`),
/// made one printable line. Serialization stops at the limit: a huge `default`
/// costs no more than a small one.
fn brief(value: &Json) -> String {
    struct Bounded(Vec<u8>);
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = (MAX_DOC_VALUE + 4).saturating_sub(self.0.len());
            if room == 0 {
                return Err(std::io::Error::other("full"));
            }
            let taken = buf.len().min(room);
            self.0.extend_from_slice(&buf[..taken]);
            Ok(taken)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new());
    // An error only says the text was cut.
    let _ = serde_json::to_writer(&mut out, value);
    one_line(&String::from_utf8_lossy(&out.0), MAX_DOC_VALUE)
}

/// The result fields an `outputSchema` describes, or `None` when it does not
/// describe an object with properties (the result is then the tool's text).
///
/// # Errors
///
/// [`SchemaError`]: the budget ran out or the walk was stopped.
pub fn output_fields(
    output_schema: &Map<String, Json>,
    budget: &mut Budget<'_>,
) -> Result<Option<Vec<Field>>, SchemaError> {
    let mut walk = Walk::new(output_schema, budget);
    let fields = walk.fields(output_schema, 0)?;
    Ok((!fields.is_empty()).then_some(fields))
}

/// One walk over a schema: its root (for `$ref`), the references being followed
/// (for cycles), and the budget it spends.
struct Walk<'a, 'b, 's> {
    root: &'a Map<String, Json>,
    following: Vec<&'a str>,
    budget: &'b mut Budget<'s>,
}

impl<'a, 'b, 's> Walk<'a, 'b, 's> {
    fn new(root: &'a Map<String, Json>, budget: &'b mut Budget<'s>) -> Self {
        Self {
            root,
            following: Vec::new(),
            budget,
        }
    }

    /// The fields of an object schema's `properties`.
    fn fields(
        &mut self,
        schema: &'a Map<String, Json>,
        depth: usize,
    ) -> Result<Vec<Field>, SchemaError> {
        let Some(Json::Object(properties)) = schema.get("properties") else {
            return Ok(Vec::new());
        };
        // A set: a tool listing 60,000 required names made a linear search of them
        // for each property cost 26 s.
        let required: BTreeSet<&str> = match schema.get("required") {
            Some(Json::Array(names)) => {
                // Built again on each visit through a `$ref`: charged as text.
                self.budget.copy(names.len().saturating_mul(8))?;
                names.iter().filter_map(Json::as_str).collect()
            }
            _ => BTreeSet::new(),
        };
        let mut fields = Vec::with_capacity(properties.len().min(MAX_SCHEMA_NODES));
        for (name, property) in properties {
            let shape = self.shape(property, depth + 1)?;
            let shape = if required.contains(name.as_str()) {
                shape
            } else {
                optional(shape)
            };
            self.budget.copy(name.len())?;
            fields.push(Field::new(name.clone(), shape));
        }
        Ok(fields)
    }

    /// The shape of one schema; OpenAPI 3.0's `nullable: true` makes it
    /// optional.
    fn shape(&mut self, schema: &'a Json, depth: usize) -> Result<Shape, SchemaError> {
        let shape = self.plain_shape(schema, depth)?;
        Ok(match schema.get("nullable") {
            Some(Json::Bool(true)) => optional(shape),
            _ => shape,
        })
    }

    /// The shape of one schema, `nullable` aside.
    fn plain_shape(&mut self, schema: &'a Json, depth: usize) -> Result<Shape, SchemaError> {
        self.budget.charge()?;
        let schema = match schema {
            Json::Object(schema) if depth < MAX_SCHEMA_DEPTH => schema,
            // `true`, `false`, a malformed schema, or one too deep.
            _ => return Ok(Shape::Any),
        };
        if let Some(Json::String(reference)) = schema.get("$ref") {
            return self.reference(reference, depth);
        }
        if let Some(Json::Array(values)) = schema.get("enum") {
            let text: usize = values.iter().filter_map(Json::as_str).map(str::len).sum();
            self.budget.copy(text)?;
            return Ok(literals(values));
        }
        if let Some(Json::String(value)) = schema.get("const") {
            self.budget.copy(value.len())?;
            return Ok(Shape::Enum(vec![value.clone()]));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Json::Array(branches)) = schema.get(key) {
                return self.union(branches, depth);
            }
        }
        if let Some(Json::Array(all)) = schema.get("allOf") {
            return self.all_of(all, depth);
        }
        Ok(match schema.get("type") {
            Some(Json::String(name)) => self.typed(name, schema, depth)?,
            Some(Json::Array(names)) => {
                let nullable = names.iter().any(|n| n.as_str() == Some("null"));
                let others: Vec<&str> = names
                    .iter()
                    .filter_map(Json::as_str)
                    .filter(|n| *n != "null")
                    .collect();
                match (others.as_slice(), nullable) {
                    ([one], true) => optional(self.typed(one, schema, depth)?),
                    ([one], false) => self.typed(one, schema, depth)?,
                    _ => Shape::Any,
                }
            }
            // No type: the keywords present say what it is.
            _ if schema.contains_key("properties") => self.typed("object", schema, depth)?,
            _ if schema.contains_key("items") => self.typed("array", schema, depth)?,
            _ => Shape::Any,
        })
    }

    /// The shape of a schema of JSON type `name`.
    fn typed(
        &mut self,
        name: &str,
        schema: &'a Map<String, Json>,
        depth: usize,
    ) -> Result<Shape, SchemaError> {
        Ok(match name {
            "string" => Shape::Str,
            "integer" => Shape::Int(IntKind::S64),
            "number" => Shape::Float(FloatKind::F64),
            "boolean" => Shape::Bool,
            "array" => match schema.get("items") {
                Some(items) => Shape::List(Box::new(self.shape(items, depth + 1)?)),
                None => Shape::List(Box::new(Shape::Any)),
            },
            "object" => {
                if matches!(schema.get("properties"), Some(Json::Object(p)) if !p.is_empty()) {
                    return Ok(Shape::Record(self.fields(schema, depth)?));
                }
                match schema.get("additionalProperties") {
                    Some(Json::Bool(false)) => Shape::Record(Vec::new()),
                    Some(values @ Json::Object(_)) => {
                        Shape::Dict(Box::new(self.shape(values, depth + 1)?))
                    }
                    _ => Shape::Dict(Box::new(Shape::Any)),
                }
            }
            // "null" alone, or a name JSON Schema does not have.
            _ => Shape::Any,
        })
    }

    /// `anyOf`/`oneOf`: one branch besides `null` is that branch, optional if `null`
    /// is a branch; several are `any`.
    fn union(&mut self, branches: &'a [Json], depth: usize) -> Result<Shape, SchemaError> {
        // Scanned on every visit (through each `$ref` to it): 4 million branches
        // behind 5,000 references would be 2×10^10 steps uncharged.
        self.budget.charge_many(branches.len())?;
        let is_null = |b: &Json| b.get("type").and_then(Json::as_str) == Some("null");
        let nullable = branches.iter().any(is_null);
        let others: Vec<&Json> = branches.iter().filter(|b| !is_null(b)).collect();
        Ok(match (others.as_slice(), nullable) {
            ([one], true) => optional(self.shape(one, depth + 1)?),
            ([one], false) => self.shape(one, depth + 1)?,
            _ => Shape::Any,
        })
    }

    /// `allOf`: one branch is that branch; several that are all records are one
    /// record of their fields (the first of two fields of one name kept: an
    /// OpenAPI schema extending another); anything else is `any`. Each branch is
    /// walked on every visit, so a fan-out of `allOf`s through `$ref`s is charged
    /// in full.
    fn all_of(&mut self, branches: &'a [Json], depth: usize) -> Result<Shape, SchemaError> {
        if let [only] = branches {
            return self.shape(only, depth + 1);
        }
        self.budget.charge_many(branches.len())?;
        let mut fields: Vec<Field> = Vec::new();
        for branch in branches {
            match self.shape(branch, depth + 1)? {
                Shape::Record(more) => {
                    for field in more {
                        if !fields.iter().any(|f| f.name == field.name) {
                            fields.push(field);
                        }
                    }
                }
                _ => return Ok(Shape::Any),
            }
        }
        Ok(Shape::Record(fields))
    }

    /// A `$ref`: only local ones (a JSON pointer into the document); one already
    /// being followed (a recursive type) is `any`.
    fn reference(&mut self, reference: &'a str, depth: usize) -> Result<Shape, SchemaError> {
        let Some(target) = local_target(self.root, reference) else {
            return Ok(Shape::Any);
        };
        if self.following.contains(&reference) {
            return Ok(Shape::Any);
        }
        self.following.push(reference);
        let shape = self.shape(target, depth + 1);
        self.following.pop();
        shape
    }
}

/// `enum`: string values are the literal values, optional when `null` is one of
/// them; any other value makes it `any`.
fn literals(values: &[Json]) -> Shape {
    let mut strings = Vec::with_capacity(values.len());
    let mut nullable = false;
    for value in values {
        match value {
            Json::String(s) => strings.push(s.clone()),
            Json::Null => nullable = true,
            Json::Bool(_) | Json::Number(_) | Json::Array(_) | Json::Object(_) => {
                return Shape::Any;
            }
        }
    }
    match (strings.is_empty(), nullable) {
        (true, _) => Shape::Any,
        (false, true) => optional(Shape::Enum(strings)),
        (false, false) => Shape::Enum(strings),
    }
}

/// `shape | None`, once.
fn optional(shape: Shape) -> Shape {
    match shape {
        Shape::Option(_) => shape,
        other => Shape::Option(Box::new(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::signature;
    use serde_json::json;

    fn object(value: Json) -> Map<String, Json> {
        match value {
            Json::Object(map) => map,
            _ => Map::new(),
        }
    }

    /// The parameters `schema` describes, with a fresh budget.
    fn params(schema: &Map<String, Json>) -> Vec<Field> {
        parameters(schema, &mut Budget::new(&Stop::default())).expect("within the budget")
    }

    /// The result fields `schema` describes, with a fresh budget.
    fn outputs(schema: &Map<String, Json>) -> Option<Vec<Field>> {
        output_fields(schema, &mut Budget::new(&Stop::default())).expect("within the budget")
    }

    fn sig(schema: Json) -> String {
        signature("t.tool", &params(&object(schema)))
    }

    #[test]
    fn every_json_type_has_its_notation() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "format": "uri"},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "flag": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "rows": {"type": "array"},
                "point": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                    "required": ["x"]
                },
                "labels": {"type": "object", "additionalProperties": {"type": "integer"}},
                "meta": {"type": "object"},
                "closed": {"type": "object", "additionalProperties": false},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "fixed": {"const": "v1"},
                "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                "pair": {"type": ["integer", "null"]},
                "whatever": {},
                "numbers": {"enum": [1, 2]}
            },
            "required": ["name", "count", "ratio", "flag", "tags", "rows", "point", "labels",
                         "meta", "closed", "mode", "fixed", "maybe", "either", "pair",
                         "whatever", "numbers"]
        });
        assert_eq!(
            sig(schema),
            "t.tool(*, name: str, count: int, ratio: float, flag: bool, tags: list[str], \
             rows: list[any], point: {x: float, y: float | None}, labels: dict[str, int], \
             meta: dict[str, any], closed: {}, mode: \"fast\" | \"slow\", fixed: \"v1\", \
             maybe: str | None, either: any, pair: int | None, whatever: any, numbers: any)"
        );
    }

    #[test]
    fn properties_not_required_are_optional_in_the_schemas_order() {
        let params = params(&object(json!({
            "type": "object",
            "properties": {
                "zone": {"type": "string"},
                "at": {"type": "string"},
                "extra": {}
            },
            "required": ["zone"]
        })));
        let names: Vec<(&str, bool)> = params
            .iter()
            .map(|p| (p.name.as_str(), p.is_optional()))
            .collect();
        assert_eq!(names, [("zone", false), ("at", true), ("extra", true)]);
        assert_eq!(
            signature("t.tool", &params),
            "t.tool(*, zone: str, at: str | None, extra: any | None)"
        );
        assert_eq!(
            params.first().map(|p| &p.ty),
            Some(&Shape::Str),
            "required stays plain"
        );
    }

    #[test]
    fn enums_keep_their_values_for_binding() {
        let params = params(&object(json!({
            "properties": {
                "mode": {"enum": ["a", "b", null]},
                "kind": {"type": "string", "enum": ["x"]}
            },
            "required": ["mode", "kind"]
        })));
        let shapes: Vec<&Shape> = params.iter().map(|p| &p.ty).collect();
        assert_eq!(
            shapes,
            [
                &Shape::Option(Box::new(Shape::Enum(vec!["a".into(), "b".into()]))),
                &Shape::Enum(vec!["x".into()]),
            ]
        );
    }

    #[test]
    fn local_references_are_followed_and_cycles_are_any() {
        let schema = json!({
            "type": "object",
            "properties": {
                "owner": {"$ref": "#/$defs/Person"},
                "old": {"$ref": "#/definitions/Legacy"},
                "remote": {"$ref": "https://example.com/schema.json"},
                "missing": {"$ref": "#/$defs/Nobody"}
            },
            "required": ["owner", "old", "remote", "missing"],
            "$defs": {
                "Person": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "friends": {"type": "array", "items": {"$ref": "#/$defs/Person"}}
                    },
                    "required": ["name", "friends"]
                }
            },
            "definitions": {"Legacy": {"type": "integer"}}
        });
        assert_eq!(
            sig(schema),
            "t.tool(*, owner: {name: str, friends: list[any]}, old: int, remote: any, missing: any)"
        );
    }

    #[test]
    fn parameters_are_documented_in_the_schemas_order() {
        let many: Vec<String> = (0..35).map(|i| format!("v{i}")).collect();
        let schema = object(json!({
            "type": "object",
            "properties": {
                "repo_path": {"type": "string", "title": "Repo Path"},
                "time": {"type": "string", "description": "Time to convert in\n24-hour format (HH:MM)"},
                "max_count": {"default": 10, "title": "Max Count", "type": "integer"},
                "since": {"anyOf": [{"type": "string", "format": "date-time", "examples": ["2026-01-01T00:00:00Z"]}, {"type": "null"}], "default": null, "description": "Only after\u{1b}[2J this."},
                "owner": {"$ref": "#/$defs/Owner"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "exclusiveMaximum": 101},
                "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "level": {"type": "string", "enum": many}
            },
            "$defs": {"Owner": {"type": "string", "description": "Who owns it."}}
        }));
        assert_eq!(
            argument_docs(&schema).as_deref(),
            Some(
                "- time: Time to convert in 24-hour format (HH:MM)\n\
                 - max_count: default: 10\n\
                 - since: Only after [2J this. (format: date-time; examples: \"2026-01-01T00:00:00Z\")\n\
                 - owner: Who owns it.\n\
                 - limit: minimum: 1; maximum: 100; exclusiveMaximum: 101\n\
                 - code: pattern: \"^[A-Z]{3}$\"\n\
                 - level: also: \"v32\", \"v33\", \"v34\""
            )
        );
        assert_eq!(
            argument_docs(&object(json!({"properties": {"a": {"type": "string"}}}))),
            None
        );
        assert_eq!(argument_docs(&object(json!({"type": "object"}))), None);
    }

    #[test]
    fn a_unions_branches_are_charged_each_time_it_is_visited() {
        let branches: Vec<Json> = (0..3_000).map(|_| json!({})).collect();
        let mut properties = Map::new();
        for i in 0..4 {
            properties.insert(format!("p{i}"), json!({"$ref": "#/$defs/Wide"}));
        }
        let schema = object(json!({
            "properties": properties,
            "$defs": {"Wide": {"anyOf": branches}}
        }));
        // 4 visits of 3,000 branches: past the 10,000 shapes a tool may have.
        assert_eq!(
            parameters(&schema, &mut Budget::new(&Stop::default())),
            Err(SchemaError::TooLarge)
        );
    }

    #[test]
    fn the_documentation_of_a_tool_is_bounded() {
        let long = "word ".repeat(1000);
        let huge: Vec<u32> = (0..100_000).collect();
        let mut properties = Map::new();
        for i in 0..100 {
            properties.insert(
                format!("p{i}"),
                json!({"description": long, "default": huge}),
            );
        }
        let schema = object(json!({"properties": properties}));
        let docs = argument_docs(&schema).expect("documented");
        assert_eq!(docs.len(), MAX_ARGUMENT_DOCS, "{docs}");
        assert!(docs.ends_with("..."), "{docs}");
        assert_eq!(brief(&json!(huge)).len(), MAX_DOC_VALUE);
        assert!(brief(&json!(huge)).starts_with("[0,1,2,"));
    }

    #[test]
    fn a_schema_too_deep_ends_in_any() {
        let mut inner = json!({"type": "string"});
        for _ in 0..200 {
            inner = json!({"type": "array", "items": inner});
        }
        let params = params(&object(json!({
            "properties": {"deep": inner},
            "required": ["deep"]
        })));
        let notation = params.first().map(|p| p.ty.notation()).unwrap_or_default();
        assert!(notation.contains("list[any]]"), "{notation}");
        assert!(!notation.contains("str"), "{notation}");
        assert_eq!(notation.matches("list[").count(), MAX_SCHEMA_DEPTH - 1);
    }

    #[test]
    fn output_fields_only_for_an_object_with_properties() {
        let fields = outputs(&object(json!({
            "type": "object",
            "properties": {"time": {"type": "string"}, "dst": {"type": "boolean"}},
            "required": ["time"]
        })));
        assert_eq!(
            fields,
            Some(vec![
                Field::new("time", Shape::Str),
                Field::new("dst", Shape::Option(Box::new(Shape::Bool))),
            ])
        );
        assert_eq!(outputs(&object(json!({"type": "object"}))), None);
        assert_eq!(outputs(&object(json!({"type": "array"}))), None);
        assert!(params(&object(json!({"type": "object"}))).is_empty());
    }

    /// `$defs` o0..o30, each with 8 properties referencing the next: about 10 KB
    /// that a walk copying every reference expands to 8^31 shapes.
    fn reference_bomb() -> Json {
        let mut defs = Map::new();
        for level in 0..31 {
            let next = format!("#/$defs/o{}", level + 1);
            let properties: Map<String, Json> = (0..8)
                .map(|p| (format!("p{p}"), json!({"$ref": next})))
                .collect();
            defs.insert(
                format!("o{level}"),
                json!({"type": "object", "properties": properties}),
            );
        }
        defs.insert("o31".into(), json!({"type": "string"}));
        json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/o0"}},
            "$defs": defs
        })
    }

    #[test]
    fn a_reference_bomb_runs_out_of_its_budget_at_once() {
        let bomb = object(reference_bomb());
        assert!(serde_json::to_string(&bomb).map_or(0, |t| t.len()) < 12_000);
        let stop = Stop::default();
        let mut budget = Budget::new(&stop);
        assert_eq!(parameters(&bomb, &mut budget), Err(SchemaError::TooLarge));
        assert_eq!(budget.nodes_left, 0, "it spent exactly the budget");
        assert_eq!(
            SchemaError::TooLarge.to_string(),
            "its schemas describe more than 10000 types or 1 MiB of names and values (every $ref followed counted), the most a tool may have"
        );
    }

    #[test]
    fn input_and_output_share_one_budget() {
        let wide = |n: usize| {
            let properties: Map<String, Json> = (0..n)
                .map(|p| (format!("p{p}"), json!({"type": "string"})))
                .collect();
            object(json!({"type": "object", "properties": properties}))
        };
        let stop = Stop::default();
        let mut budget = Budget::new(&stop);
        assert_eq!(
            parameters(&wide(6_000), &mut budget).map(|f| f.len()),
            Ok(6_000)
        );
        assert_eq!(
            output_fields(&wide(6_000), &mut budget).map(|f| f.map(|f| f.len())),
            Err(SchemaError::TooLarge)
        );
        let mut fresh = Budget::new(&stop);
        assert_eq!(
            parameters(&wide(MAX_SCHEMA_NODES), &mut fresh).map(|f| f.len()),
            Ok(MAX_SCHEMA_NODES),
            "exactly the budget is allowed"
        );
    }

    #[test]
    fn many_required_names_cost_a_set_lookup_each() {
        // 60,000 properties, all required: refused by the budget after 10,000
        // lookups; each lookup is a set's, not a scan of 60,000 names.
        let properties: Map<String, Json> = (0..60_000)
            .map(|p| (format!("p{p:05}"), json!({"type": "integer"})))
            .collect();
        let required: Vec<Json> = properties.keys().map(|k| json!(k)).collect();
        let schema = object(json!({"properties": properties, "required": required}));
        let stop = Stop::default();
        assert_eq!(
            parameters(&schema, &mut Budget::new(&stop)),
            Err(SchemaError::TooLarge)
        );
    }

    #[test]
    fn copied_text_is_charged_too() {
        // One 8 MiB const referenced 4,999 times: 9,998 shapes, within the node
        // budget, but 40 GB of copies.
        let long = "x".repeat(8 << 20);
        let properties: Map<String, Json> = (0..4_999)
            .map(|p| (format!("p{p}"), json!({"$ref": "#/$defs/C"})))
            .collect();
        let schema = object(json!({
            "type": "object",
            "properties": properties,
            "$defs": {"C": {"const": long}}
        }));
        let stop = Stop::default();
        assert_eq!(
            parameters(&schema, &mut Budget::new(&stop)),
            Err(SchemaError::TooLarge)
        );
        let short = object(json!({"properties": {"mode": {"enum": ["a", "b"]}}}));
        let mut budget = Budget::new(&stop);
        assert!(parameters(&short, &mut budget).is_ok());
        assert_eq!(
            budget.text_left,
            MAX_SCHEMA_TEXT - 2 - 4,
            "two values and a name"
        );
    }

    #[test]
    fn a_stopped_walk_ends_at_its_next_shape() {
        let stop = Stop::default();
        stop.set();
        let schema = object(json!({"properties": {"a": {"type": "string"}}}));
        assert_eq!(
            parameters(&schema, &mut Budget::new(&stop)),
            Err(SchemaError::Stopped)
        );
        assert_eq!(
            parameters(&object(json!({"type": "object"})), &mut Budget::new(&stop)),
            Ok(Vec::new()),
            "no property, no shape walked"
        );
    }
}
