//! A spec's operations as capabilities: `<name>.<operationId in snake_case>`
//! (without an ID, the method and the path: `get_items_item_id`), its path,
//! query and header parameters and its JSON body's top-level properties as
//! keyword arguments (a body that is not an object with properties is `body`),
//! typed by the upstream source's schema conversion with `$ref`s into the spec,
//! its texts and parameter docs in the description, and its annotations from
//! the method (GET, HEAD and OPTIONS read-only, DELETE destructive, PUT and
//! DELETE idempotent).
//!
//! The result of an operation whose first 2xx answer is JSON is that JSON: an
//! object schema with properties is the result record; any other JSON is the
//! record `{result: T}`. Other answers (text, binary, none) are `{status,
//! headers, text}`.
//!
//! A spec is untrusted: at most [`MAX_OPERATIONS`] operations, each converted
//! within the upstream source's per-tool budget (an input past it leaves the
//! operation out; an output past it keeps only its top-level fields, typed
//! `any`) and all within [`MAX_SPEC_NODES`]; a `$ref` chain is followed at most
//! [`MAX_REF_CHAIN`] steps. An operation that cannot be a capability is left out
//! with a reason naming its method and path.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value as Json};

use super::config::{ID_PREFIX, OpenApiConfig};
use crate::catalog::{
    Annotations, Capability, CapabilitySpec, Field, IntKind, Shape, check_parameter_name,
    validate_spec, with_arguments,
};
use crate::json::schema::{self, Budget, SchemaError, Stop, local_target};
use crate::upstream::names;

/// Most operations a spec may describe: as many as a catalog may hold. GitHub's
/// API has about 1,200; a larger spec serves a part (`include`/`exclude`).
pub const MAX_OPERATIONS: usize = crate::catalog::MAX_CAPABILITIES;

/// Most parameters one operation may have (GitHub's most is about 30).
pub const MAX_PARAMETERS: usize = 256;

/// Most top-level properties of a request body (or an answer) read.
const MAX_PROPERTIES: usize = 10_000;

/// Most bytes of an operation's description kept.
const MAX_DESCRIPTION_BYTES: usize = 8 << 10;

/// Most tags of an operation kept as search terms.
const MAX_TAGS: usize = 8;

/// Header parameters never sent from an argument: the connection's own
/// headers, those the body's framing or a proxy needs, and cookies. One that is
/// optional is left out; a required one leaves the operation out.
const RESERVED_HEADERS: [&str; 13] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "cookie",
    "expect",
    "forwarded",
];

/// Most types all of a spec's operations may describe together (each at most
/// the upstream source's per-tool budget).
pub const MAX_SPEC_NODES: usize = 4_000_000;

/// Most `$ref`s followed from one place before what it names is reached (a
/// parameter naming a parameter naming ...); a longer chain, or a cycle, names
/// nothing.
pub const MAX_REF_CHAIN: usize = 8;

/// The HTTP methods an OpenAPI path item may hold, in the order read.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The result field of an operation whose JSON answer is not an object with
/// properties: `{result: T}`.
pub const RESULT_FIELD: &str = "result";

/// The argument holding a request body that is not an object with properties.
pub const BODY_ARGUMENT: &str = "body";

/// One operation served as a capability, with what its call needs.
#[derive(Debug)]
pub struct Operation {
    /// Its method.
    pub method: reqwest::Method,
    /// Its path template (`/items/{item_id}`).
    pub path: String,
    /// Its path, query and header parameters, in the capability's order.
    pub params: Vec<Param>,
    /// Its request body.
    pub body: Option<Body>,
    /// What its answer becomes.
    pub output: Output,
    /// The capability it is.
    pub capability: Arc<Capability>,
}

/// One parameter of an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Its keyword argument.
    pub argument: String,
    /// Its name in the request.
    pub name: String,
    /// Where it goes.
    pub location: Location,
    /// How its value is written.
    pub style: Style,
    /// A list as repeated `name=v` query pairs, an object as one pair per
    /// member (`explode`, the default of the `form` style), else one value.
    pub explode: bool,
}

/// How a parameter's value is written (OpenAPI's `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Path and header parameters: a list joined with `,`.
    Simple,
    /// Query parameters: `name=a,b`, or `name=a&name=b` exploded.
    Form,
    /// A query list joined with spaces.
    SpaceDelimited,
    /// A query list joined with `|`.
    PipeDelimited,
    /// A query object as `name[key]=value` pairs.
    DeepObject,
}

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// A `{name}` of the path.
    Path,
    /// The query string.
    Query,
    /// A request header.
    Header,
}

/// An operation's request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// Its media type.
    pub media_type: String,
    /// Whether the operation needs one: `{}` is sent when no property is
    /// given.
    pub required: bool,
    /// How arguments make it.
    pub kind: BodyKind,
}

/// How an operation's arguments make its request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyKind {
    /// A JSON object of these properties: (argument, property) pairs.
    Properties(Vec<(String, String)>),
    /// The JSON value of the `body` argument.
    Json,
    /// The `body` argument's text as it is.
    Text,
}

/// What an operation's answer becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A JSON object: the result record (these fields declared).
    Record(Vec<Field>),
    /// Any other JSON: `{result: T}`.
    Wrapped,
    /// Not JSON: `{status, headers, text}`.
    Text,
}

/// The result fields of [`Output::Text`].
pub fn text_fields() -> Vec<Field> {
    vec![
        Field::new("status", Shape::Int(IntKind::S64)),
        Field::new("headers", Shape::Dict(Box::new(Shape::Str))),
        Field::new("text", Shape::Str),
    ]
}

/// What a spec's operations became.
#[derive(Debug, Default)]
pub struct Built {
    /// Those served, in the spec's order.
    pub operations: Vec<Operation>,
    /// Those left out, and why (`GET /items: ...`).
    pub left_out: Vec<String>,
}

/// The operations of `document` that `config` serves.
///
/// # Errors
///
/// Why the spec serves nothing: it has too many operations, or it was stopped.
pub fn operations(
    config: &OpenApiConfig,
    document: &Map<String, Json>,
    stop: &Stop,
) -> Result<Built, String> {
    let Some(Json::Object(paths)) = document.get("paths") else {
        return Ok(Built::default());
    };
    let count: usize = paths
        .values()
        .map(|item| match resolve(document, item) {
            Json::Object(item) => METHODS.iter().filter(|m| item.contains_key(**m)).count(),
            _ => 0,
        })
        .sum();
    if count > MAX_OPERATIONS {
        return Err(format!(
            "it describes {count} operations, more than the {MAX_OPERATIONS} a spec may have (serve a part of it with `include` or `exclude`)"
        ));
    }
    let mut built = Built::default();
    let mut spent = 0usize;
    for (path, item) in paths {
        let Json::Object(item) = resolve(document, item) else {
            continue;
        };
        for method in METHODS {
            let Some(Json::Object(operation)) = item.get(method) else {
                continue;
            };
            if stop.is_set() {
                return Err("the conversion was stopped".to_owned());
            }
            let place = format!("{} {path}", method.to_ascii_uppercase());
            if !selected(config, operation) {
                continue;
            }
            if spent >= MAX_SPEC_NODES {
                built.left_out.push(format!(
                    "{place}: the spec's operations already describe the most types a spec may have ({MAX_SPEC_NODES})"
                ));
                continue;
            }
            let converted = Converter {
                config,
                document,
                stop,
                spent: &mut spent,
            }
            .operation(method, path, item, operation, &built.operations);
            match converted {
                Ok(operation) => built.operations.push(operation),
                Err(Left::Stopped) => return Err("the conversion was stopped".to_owned()),
                Err(Left::Out(reason)) => built.left_out.push(format!("{place}: {reason}")),
            }
        }
    }
    Ok(built)
}

/// Whether `config`'s `include` and `exclude` select `operation`.
fn selected(config: &OpenApiConfig, operation: &Map<String, Json>) -> bool {
    let id = operation.get("operationId").and_then(Json::as_str);
    let tags: Vec<&str> = match operation.get("tags") {
        Some(Json::Array(tags)) => tags.iter().filter_map(Json::as_str).collect(),
        _ => Vec::new(),
    };
    let named = |list: &[String]| {
        list.iter()
            .any(|entry| Some(entry.as_str()) == id || tags.contains(&entry.as_str()))
    };
    (config.include.is_empty() || named(&config.include)) && !named(&config.exclude)
}

/// Why an operation was left out.
enum Left {
    /// Its reason.
    Out(String),
    /// The conversion was stopped.
    Stopped,
}

impl From<SchemaError> for Left {
    fn from(error: SchemaError) -> Self {
        match error {
            SchemaError::Stopped => Self::Stopped,
            SchemaError::TooLarge => Self::Out(error.to_string()),
        }
    }
}

/// What the conversion of one operation reads and spends.
struct Converter<'c> {
    config: &'c OpenApiConfig,
    document: &'c Map<String, Json>,
    stop: &'c Stop,
    /// Types described by the operations so far.
    spent: &'c mut usize,
}

impl Converter<'_> {
    /// The operation `method path`, unless it cannot be a capability or its name
    /// is one of `taken`'s.
    fn operation(
        mut self,
        method: &str,
        path: &str,
        item: &Map<String, Json>,
        operation: &Map<String, Json>,
        taken: &[Operation],
    ) -> Result<Operation, Left> {
        let document = self.document;
        let place = format!("{} {path}", method.to_ascii_uppercase());
        let id = operation.get("operationId").and_then(Json::as_str);
        let segment = match id {
            Some(id) => identifier(id),
            None => identifier(&format!("{method} {path}")),
        };
        let name = format!("{}.{segment}", self.config.name);
        if let Some(other) = taken.iter().find(|o| o.capability.name.as_str() == name) {
            return Err(Left::Out(format!(
                "its name `{name}` is taken by {} {}: give one of them another operationId, or exclude one",
                other.method, other.path
            )));
        }
        // The input schema: one object whose properties are the arguments.
        let mut properties = Map::new();
        let mut required = Vec::new();
        let mut params = Vec::new();
        for (location, parameter) in parameters(document, item, operation)? {
            let Some(Json::String(wire)) = parameter.get("name") else {
                continue;
            };
            let argument = free_argument(&identifier(wire), location, &properties);
            let mut schema = match parameter.get("schema") {
                Some(Json::Object(schema)) => schema.clone(),
                _ => Map::new(),
            };
            if let Some(description) = parameter.get("description")
                && !schema.contains_key("description")
            {
                schema.insert("description".to_owned(), description.clone());
            }
            let is_required =
                location == Location::Path || parameter.get("required") == Some(&Json::Bool(true));
            if is_required {
                required.push(Json::String(argument.clone()));
            }
            properties.insert(argument.clone(), Json::Object(schema));
            let style = match (location, parameter.get("style").and_then(Json::as_str)) {
                (Location::Query, None | Some("form")) => Style::Form,
                (Location::Query, Some("spaceDelimited")) => Style::SpaceDelimited,
                (Location::Query, Some("pipeDelimited")) => Style::PipeDelimited,
                (Location::Query, Some("deepObject")) => Style::DeepObject,
                (Location::Path | Location::Header, None | Some("simple")) => Style::Simple,
                (_, Some(other)) => {
                    return Err(Left::Out(format!(
                        "the style `{other}` of its parameter `{wire}` is not supported"
                    )));
                }
            };
            let explode = match parameter.get("explode") {
                Some(Json::Bool(explode)) => *explode,
                _ => style == Style::Form,
            };
            params.push(Param {
                argument,
                name: wire.clone(),
                location,
                style,
                explode,
            });
        }
        let body = match operation.get("requestBody") {
            Some(body) => self.body(body, &mut properties, &mut required)?,
            None => None,
        };
        let mut input = Map::new();
        input.insert("type".to_owned(), Json::from("object"));
        input.insert("properties".to_owned(), Json::Object(properties));
        input.insert("required".to_owned(), Json::Array(required));
        let mut budget = Budget::new(self.stop);
        let parameters = schema::parameters_in(&input, document, &mut budget);
        *self.spent += budget.nodes_spent();
        let parameters = parameters?;
        let (output, fields) = self.output(operation)?;
        let (summary, description) = texts(operation, &place);
        let description = match schema::argument_docs_in(&input, document) {
            Some(docs) => with_arguments(&description, &docs),
            None => description,
        };
        let mut search_terms = vec![place.clone()];
        search_terms.extend(id.map(str::to_owned));
        if let Some(Json::Array(tags)) = operation.get("tags") {
            for tag in tags.iter().filter_map(Json::as_str).map(str::trim) {
                if search_terms.len() > MAX_TAGS {
                    break;
                }
                if !tag.is_empty() && tag.len() <= 64 && !search_terms.iter().any(|t| t == tag) {
                    search_terms.push(tag.to_owned());
                }
            }
        }
        let spec = CapabilitySpec {
            name,
            id: Some(format!(
                "{ID_PREFIX}{}/{}",
                self.config.name,
                id.map_or_else(|| place.clone(), str::to_owned)
            )),
            summary,
            description: Some(description),
            search_terms,
            params: parameters,
            output: fields,
        };
        let mut capability = validate_spec(&spec).map_err(|error| Left::Out(error.to_string()))?;
        capability.annotations = annotations(method);
        let method = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| Left::Out("its method cannot be sent".to_owned()))?;
        Ok(Operation {
            method,
            path: path.to_owned(),
            params,
            body,
            output,
            capability: Arc::new(capability),
        })
    }

    /// The request body: a JSON object's properties as arguments (`properties`,
    /// `required`), any other JSON or text as `body`. A media type that is
    /// neither leaves the operation out when the body is required, else the
    /// operation is served without one.
    fn body(
        &self,
        body: &Json,
        properties: &mut Map<String, Json>,
        required: &mut Vec<Json>,
    ) -> Result<Option<Body>, Left> {
        let document = self.document;
        let Json::Object(body) = resolve(document, body) else {
            return Ok(None);
        };
        let body_required = body.get("required") == Some(&Json::Bool(true));
        let Some(Json::Object(content)) = body.get("content") else {
            return Ok(None);
        };
        let json = json_media(document, content);
        let text = content.iter().find(|(media, _)| media.starts_with("text/"));
        let Some((media_type, media)) = json.or(text) else {
            if body_required {
                return Err(Left::Out(format!(
                    "its request body is {}, which is not supported (JSON and text are)",
                    content.keys().next().map_or("empty", String::as_str)
                )));
            }
            return Ok(None);
        };
        let schema = media.get("schema").unwrap_or(&Json::Null);
        if json.is_none() {
            if properties.contains_key(BODY_ARGUMENT) {
                return Err(Left::Out(
                    "a parameter is named `body`, as its request body would be".to_owned(),
                ));
            }
            properties.insert(
                BODY_ARGUMENT.to_owned(),
                serde_json::json!({"type": "string"}),
            );
            if body_required {
                required.push(Json::from(BODY_ARGUMENT));
            }
            return Ok(Some(Body {
                media_type: media_type.clone(),
                required: body_required,
                kind: BodyKind::Text,
            }));
        }
        let kind = match object_properties(document, schema) {
            Some((members, member_required)) if !members.is_empty() => {
                let mut pairs = Vec::with_capacity(members.len());
                for (property, member) in members {
                    let argument = identifier(property);
                    let argument = if properties.contains_key(&argument) {
                        // A body property named like a parameter: `<name>_body`.
                        format!("{argument}_body")
                    } else {
                        argument
                    };
                    if properties.contains_key(&argument) {
                        return Err(Left::Out(format!(
                            "its body property `{property}` has no free argument name"
                        )));
                    }
                    if body_required && member_required.contains(property) {
                        required.push(Json::String(argument.clone()));
                    }
                    properties.insert(argument.clone(), member.clone());
                    pairs.push((argument, property.to_owned()));
                }
                BodyKind::Properties(pairs)
            }
            _ => {
                if properties.contains_key(BODY_ARGUMENT) {
                    return Err(Left::Out(
                        "a parameter is named `body`, as its request body would be".to_owned(),
                    ));
                }
                properties.insert(BODY_ARGUMENT.to_owned(), schema.clone());
                if body_required {
                    required.push(Json::from(BODY_ARGUMENT));
                }
                BodyKind::Json
            }
        };
        Ok(Some(Body {
            media_type: if media_type == "*/*" {
                "application/json".to_owned()
            } else {
                media_type.clone()
            },
            required: body_required,
            kind,
        }))
    }

    /// What the answer becomes, and the result fields it declares.
    fn output(&mut self, operation: &Map<String, Json>) -> Result<(Output, Vec<Field>), Left> {
        let document = self.document;
        let Some(Json::Object(responses)) = operation.get("responses") else {
            return Ok((Output::Text, text_fields()));
        };
        // The lowest 2xx status declared, else `2XX`, else `default`.
        let mut codes: Vec<(&String, &Json)> = responses
            .iter()
            .filter(|(code, _)| code.len() == 3 && code.starts_with('2'))
            .collect();
        codes.sort_by_key(|(code, _)| code.as_str());
        let chosen = codes.first().map(|(_, response)| *response).or_else(|| {
            responses
                .get("2XX")
                .or_else(|| responses.get("2xx"))
                .or_else(|| responses.get("default"))
        });
        let Some(Json::Object(response)) = chosen.map(|r| resolve(document, r)) else {
            return Ok((Output::Text, text_fields()));
        };
        let json = match response.get("content") {
            Some(Json::Object(content)) => json_media(document, content),
            _ => None,
        };
        let Some((_, media)) = json else {
            return Ok((Output::Text, text_fields()));
        };
        let schema = media.get("schema").unwrap_or(&Json::Null);
        let mut budget = Budget::new(self.stop);
        let shape = schema::shape_in(schema, document, &mut budget);
        *self.spent += budget.nodes_spent();
        let shape = match shape {
            Ok(shape) => shape,
            Err(SchemaError::Stopped) => return Err(Left::Stopped),
            // Too large to describe: its top-level fields, untyped.
            Err(SchemaError::TooLarge) => match object_properties(document, schema) {
                Some((members, _)) if !members.is_empty() => {
                    let fields: Vec<Field> = members
                        .into_iter()
                        .map(|(name, _)| Field::new(name, Shape::Option(Box::new(Shape::Any))))
                        .collect();
                    return Ok((Output::Record(fields.clone()), fields));
                }
                _ => Shape::Any,
            },
        };
        let record = match &shape {
            Shape::Record(fields) if !fields.is_empty() => Some(fields.clone()),
            Shape::Option(inner) => match &**inner {
                Shape::Record(fields) if !fields.is_empty() => Some(fields.clone()),
                _ => None,
            },
            // Objects of several kinds (`oneOf` a private and a public user):
            // still an object, each kind's fields present or not.
            _ => union_properties(document, schema).map(|names| {
                names
                    .into_iter()
                    .map(|name| Field::new(name, Shape::Option(Box::new(Shape::Any))))
                    .collect()
            }),
        };
        Ok(match record {
            Some(fields) => (Output::Record(fields.clone()), fields),
            None => (
                Output::Wrapped,
                vec![Field::new(RESULT_FIELD, Shape::Option(Box::new(shape)))],
            ),
        })
    }
}

/// A parameter and where it goes.
type Placed<'a> = (Location, &'a Map<String, Json>);

/// An object schema's properties (name, schema) and the names it requires.
type ObjectProperties<'a> = (Vec<(&'a str, &'a Json)>, BTreeSet<&'a str>);

/// The parameters of an operation: the path item's, then the operation's (which
/// replace a path item's of the same name and place), `$ref`s resolved;
/// cookies, and the headers OpenAPI says are ignored (`Accept`, `Content-Type`,
/// `Authorization`), left out. A required cookie leaves the operation out.
fn parameters<'a>(
    document: &'a Map<String, Json>,
    item: &'a Map<String, Json>,
    operation: &'a Map<String, Json>,
) -> Result<Vec<Placed<'a>>, Left> {
    let listed = |holder: &'a Map<String, Json>| -> Vec<&'a Map<String, Json>> {
        match holder.get("parameters") {
            Some(Json::Array(list)) => list
                .iter()
                .filter_map(|p| resolve(document, p).as_object())
                .collect(),
            _ => Vec::new(),
        }
    };
    let own = listed(operation);
    let shared = listed(item);
    if own.len() + shared.len() > MAX_PARAMETERS {
        return Err(Left::Out(format!(
            "it has more than {MAX_PARAMETERS} parameters"
        )));
    }
    let key = |p: &'a Map<String, Json>| {
        (
            p.get("name").and_then(Json::as_str).unwrap_or(""),
            p.get("in").and_then(Json::as_str).unwrap_or(""),
        )
    };
    let own_keys: BTreeSet<(&str, &str)> = own.iter().map(|p| key(p)).collect();
    let mut all: Vec<&Map<String, Json>> = shared
        .into_iter()
        .filter(|p| !own_keys.contains(&key(p)))
        .collect();
    all.extend(own);
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(all.len());
    for parameter in all {
        if !seen.insert(key(parameter)) {
            // The same parameter given twice: the first is the one.
            continue;
        }
        let name = parameter.get("name").and_then(Json::as_str).unwrap_or("");
        let location = match parameter.get("in").and_then(Json::as_str) {
            Some("path") => Location::Path,
            Some("query") => Location::Query,
            Some("header")
                if ["accept", "content-type", "authorization"]
                    .contains(&name.to_ascii_lowercase().as_str()) =>
            {
                continue;
            }
            Some("header")
                if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
                    || name.to_ascii_lowercase().starts_with("proxy-") =>
            {
                if parameter.get("required") == Some(&Json::Bool(true)) {
                    return Err(Left::Out(format!(
                        "its required header parameter `{name}` cannot be sent from an argument"
                    )));
                }
                continue;
            }
            Some("header") => Location::Header,
            Some("cookie") if parameter.get("required") == Some(&Json::Bool(true)) => {
                return Err(Left::Out(format!(
                    "its required cookie parameter `{name}` is not supported"
                )));
            }
            _ => continue,
        };
        out.push((location, parameter));
    }
    // Path parameters first, then the others in the order given.
    out.sort_by_key(|(location, _)| *location != Location::Path);
    Ok(out)
}

/// `value`, or what its local `$ref` names (followed at most [`MAX_REF_CHAIN`]
/// times; past that, or to nothing, `null`).
pub fn resolve<'a>(document: &'a Map<String, Json>, value: &'a Json) -> &'a Json {
    let mut at = value;
    for _ in 0..MAX_REF_CHAIN {
        match at.get("$ref") {
            Some(Json::String(reference)) => match local_target(document, reference) {
                Some(target) => at = target,
                None => return &Json::Null,
            },
            _ => return at,
        }
    }
    &Json::Null
}

/// The top-level properties of an object schema (through `$ref`s and `allOf`,
/// the first of one name kept) and the names it requires; `None` when it is
/// not an object with properties.
fn object_properties<'a>(
    document: &'a Map<String, Json>,
    schema: &'a Json,
) -> Option<ObjectProperties<'a>> {
    let mut members: Vec<(&'a str, &'a Json)> = Vec::new();
    let mut names: BTreeSet<&'a str> = BTreeSet::new();
    let mut required = BTreeSet::new();
    let mut pending = vec![(schema, 0usize)];
    // Bounded: each step is one schema of at most MAX_REF_CHAIN `allOf` levels,
    // and a fan-out stops at 256 schemas.
    let mut visited = 0usize;
    while let Some((schema, depth)) = pending.pop() {
        visited += 1;
        if visited > 256 || depth > MAX_REF_CHAIN {
            return None;
        }
        let Json::Object(schema) = resolve(document, schema) else {
            return None;
        };
        if let Some(Json::Array(all)) = schema.get("allOf") {
            pending.extend(all.iter().rev().map(|branch| (branch, depth + 1)));
        }
        if let Some(Json::Object(properties)) = schema.get("properties") {
            for (name, member) in properties {
                if names.insert(name.as_str()) {
                    if members.len() >= MAX_PROPERTIES {
                        return None;
                    }
                    members.push((name.as_str(), member));
                }
            }
        }
        if let Some(Json::Array(names)) = schema.get("required") {
            required.extend(names.iter().filter_map(Json::as_str));
        }
    }
    (!members.is_empty()).then_some((members, required))
}

/// The top-level property names of a `oneOf`/`anyOf` whose every branch
/// (besides `null`) is an object with properties, in first-seen order; `None`
/// otherwise.
fn union_properties<'a>(document: &'a Map<String, Json>, schema: &'a Json) -> Option<Vec<&'a str>> {
    let Json::Object(schema) = resolve(document, schema) else {
        return None;
    };
    let branches = ["oneOf", "anyOf"]
        .iter()
        .find_map(|key| schema.get(*key).and_then(Json::as_array))?;
    if branches.len() > 64 {
        return None;
    }
    let mut names: Vec<&str> = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for branch in branches {
        if resolve(document, branch).get("type").and_then(Json::as_str) == Some("null") {
            continue;
        }
        let (members, _) = object_properties(document, branch)?;
        for (name, _) in members {
            if seen.insert(name) {
                if names.len() >= MAX_PROPERTIES {
                    return None;
                }
                names.push(name);
            }
        }
    }
    (!names.is_empty()).then_some(names)
}

/// The JSON media type of a body's or an answer's `content`: a JSON one, else
/// `*/*` (springdoc's default) with a schema that is not a string, which is JSON
/// to the service.
fn json_media<'a>(
    document: &Map<String, Json>,
    content: &'a Map<String, Json>,
) -> Option<(&'a String, &'a Json)> {
    content
        .iter()
        .find(|(media, _)| is_json(media))
        .or_else(|| {
            content
                .get_key_value("*/*")
                .filter(|(_, media)| !schema_is_string(document, media))
        })
}

/// Whether a media type object's schema is a string (text or bytes, not
/// JSON), through its `$ref`s; no schema is not one.
fn schema_is_string(document: &Map<String, Json>, media: &Json) -> bool {
    let schema = media.get("schema").unwrap_or(&Json::Null);
    resolve(document, schema).get("type").and_then(Json::as_str) == Some("string")
}

/// Whether `media` is a JSON media type (`application/json`,
/// `application/vnd.github+json`, with or without parameters; not `*/*`,
/// which says nothing).
pub fn is_json(media: &str) -> bool {
    let essence = media
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// `text` as an identifier: snake_case, every run of other characters one `_`,
/// none at either end; a Starlark keyword gets a `_` after it.
pub fn identifier(text: &str) -> String {
    let mapped = names::segment(text);
    let mut out = String::with_capacity(mapped.len());
    for c in mapped.chars() {
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if check_parameter_name(&out).is_err() {
        out.push('_');
    }
    out
}

/// `argument`, or `<argument>_<location>` (then `..._<location>2`, ...) when
/// another parameter has it.
fn free_argument(argument: &str, location: Location, taken: &Map<String, Json>) -> String {
    if !taken.contains_key(argument) {
        return argument.to_owned();
    }
    let suffix = match location {
        Location::Path => "path",
        Location::Query => "query",
        Location::Header => "header",
    };
    let mut candidate = format!("{argument}_{suffix}");
    // Bounded by the parameters an operation may have.
    let mut count = 2;
    while taken.contains_key(&candidate) {
        candidate = format!("{argument}_{suffix}{count}");
        count += 1;
    }
    candidate
}

/// Summary and description: the `summary`, else the first sentence of the
/// `description`, else `METHOD /path`; the description is the rest of the
/// texts and ends with the method and path.
fn texts(operation: &Map<String, Json>, place: &str) -> (String, String) {
    let summary = operation
        .get("summary")
        .and_then(Json::as_str)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty());
    let description = operation.get("description").and_then(Json::as_str);
    let (summary, rest) = match (summary, description) {
        (Some(summary), description) => (summary, description.map(str::to_owned)),
        (None, description) => names::texts(place, None, description),
    };
    let description = match rest {
        Some(rest) if !rest.trim().is_empty() => {
            format!("{}\n\n{place}", cut(rest.trim(), MAX_DESCRIPTION_BYTES))
        }
        _ => place.to_owned(),
    };
    (cut(&summary, MAX_DESCRIPTION_BYTES / 8), description)
}

/// `text` cut at `max` bytes on a character boundary, with `...` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// The hints a method gives: GET, HEAD and OPTIONS change nothing; DELETE
/// destroys; PUT and DELETE may be repeated; every call reaches a service
/// outside this host.
fn annotations(method: &str) -> Annotations {
    let read_only = matches!(method, "get" | "head" | "options");
    Annotations {
        read_only: Some(read_only),
        destructive: (!read_only).then_some(method == "delete"),
        idempotent: Some(read_only || matches!(method, "put" | "delete")),
        open_world: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openapi::{OpenApiAuth, SpecLocation};
    use serde_json::json;

    fn config() -> OpenApiConfig {
        OpenApiConfig {
            name: "shop".to_owned(),
            spec: SpecLocation::File("unused.json".into()),
            base_url: None,
            include: Vec::new(),
            exclude: Vec::new(),
            timeout: None,
            auth: OpenApiAuth::None,
            headers: Default::default(),
        }
    }

    fn built(config: &OpenApiConfig, spec: Json) -> Built {
        let Json::Object(document) = spec else {
            panic!("a spec object")
        };
        operations(config, &document, &Stop::default()).expect("built")
    }

    fn spec() -> Json {
        json!({
            "openapi": "3.1.0",
            "paths": {
                "/items/{item_id}": {
                    "parameters": [{"$ref": "#/components/parameters/ItemId"}],
                    "get": {
                        "operationId": "readItem",
                        "tags": ["items"],
                        "summary": "Read an item",
                        "description": "Reads one item.  By its ID.",
                        "parameters": [
                            {"name": "q", "in": "query", "schema": {"type": "string"}, "description": "A filter."},
                            {"name": "X-Token", "in": "header", "required": true, "schema": {"type": "string"}},
                            {"name": "Accept", "in": "header", "schema": {"type": "string"}},
                        ],
                        "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Item"}}}}},
                    },
                    "delete": {
                        "responses": {"204": {"description": "gone"}},
                    },
                    "put": {
                        "operationId": "replace-item",
                        "tags": ["admin"],
                        "requestBody": {"required": true, "content": {"application/json": {"schema": {"allOf": [
                            {"$ref": "#/components/schemas/Item"},
                            {"type": "object", "properties": {"item_id": {"type": "integer"}}, "required": ["item_id"]},
                        ]}}}},
                        "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Item"}}}}}},
                    },
                },
            },
            "components": {
                "parameters": {"ItemId": {"name": "item_id", "in": "path", "required": true, "schema": {"type": "integer"}}},
                "schemas": {"Item": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "price": {"type": "number", "nullable": true}},
                }},
            },
        })
    }

    #[test]
    fn operations_become_capabilities_with_their_parameters_body_and_result() {
        let built = built(&config(), spec());
        assert_eq!(built.left_out, Vec::<String>::new());
        let seen: Vec<(String, String, String, String)> = built
            .operations
            .iter()
            .map(|o| {
                let c = &o.capability;
                let output: Vec<String> = c
                    .output
                    .iter()
                    .map(|f| format!("{}: {}", f.name, f.ty.notation()))
                    .collect();
                (
                    c.id.to_string(),
                    c.signature.clone(),
                    c.summary.clone(),
                    output.join(", "),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    "openapi:shop/readItem".to_owned(),
                    "shop.read_item(*, item_id: int, q: str | None, x_token: str)".to_owned(),
                    "Read an item".to_owned(),
                    "name: str, price: float | None".to_owned(),
                ),
                (
                    "openapi:shop/replace-item".to_owned(),
                    "shop.replace_item(*, item_id: int, name: str, price: float | None, item_id_body: int)".to_owned(),
                    "PUT /items/{item_id}".to_owned(),
                    "result: list[{name: str, price: float | None}] | None".to_owned(),
                ),
                (
                    "openapi:shop/DELETE /items/{item_id}".to_owned(),
                    "shop.delete_items_item_id(*, item_id: int)".to_owned(),
                    "DELETE /items/{item_id}".to_owned(),
                    "status: int, headers: dict[str, str], text: str".to_owned(),
                ),
            ]
        );
        let read = &built.operations[0];
        assert_eq!(
            read.capability.description,
            "Reads one item.  By its ID.\n\nGET /items/{item_id}\n\nArguments:\n- q: A filter."
        );
        assert_eq!(
            read.params,
            vec![
                Param {
                    argument: "item_id".to_owned(),
                    name: "item_id".to_owned(),
                    location: Location::Path,
                    style: Style::Simple,
                    explode: false
                },
                Param {
                    argument: "q".to_owned(),
                    name: "q".to_owned(),
                    location: Location::Query,
                    style: Style::Form,
                    explode: true
                },
                Param {
                    argument: "x_token".to_owned(),
                    name: "X-Token".to_owned(),
                    location: Location::Header,
                    style: Style::Simple,
                    explode: false
                },
            ]
        );
        assert_eq!(
            built.operations[1].body,
            Some(Body {
                media_type: "application/json".to_owned(),
                required: true,
                kind: BodyKind::Properties(vec![
                    ("name".to_owned(), "name".to_owned()),
                    ("price".to_owned(), "price".to_owned()),
                    ("item_id_body".to_owned(), "item_id".to_owned()),
                ])
            })
        );
        let hints: Vec<Vec<(&str, bool)>> = built
            .operations
            .iter()
            .map(|o| o.capability.annotations.declared().collect())
            .collect();
        assert_eq!(
            hints,
            vec![
                vec![
                    ("readOnlyHint", true),
                    ("idempotentHint", true),
                    ("openWorldHint", true)
                ],
                vec![
                    ("readOnlyHint", false),
                    ("destructiveHint", false),
                    ("idempotentHint", true),
                    ("openWorldHint", true)
                ],
                vec![
                    ("readOnlyHint", false),
                    ("destructiveHint", true),
                    ("idempotentHint", true),
                    ("openWorldHint", true)
                ],
            ]
        );
    }

    #[test]
    fn include_and_exclude_select_by_tag_or_operation_id() {
        let names = |config: &OpenApiConfig| -> Vec<String> {
            built(config, spec())
                .operations
                .iter()
                .map(|o| o.capability.name.to_string())
                .collect()
        };
        let mut only = config();
        only.include = vec!["items".to_owned(), "replace-item".to_owned()];
        assert_eq!(names(&only), vec!["shop.read_item", "shop.replace_item"]);
        let mut not = config();
        not.exclude = vec!["admin".to_owned()];
        assert_eq!(
            names(&not),
            vec!["shop.read_item", "shop.delete_items_item_id"]
        );
    }

    #[test]
    fn a_name_taken_twice_is_refused_naming_both_operations() {
        let built = built(
            &config(),
            json!({"openapi": "3.0.0", "paths": {
                "/a": {"get": {"operationId": "listThings", "responses": {}}},
                "/b": {"get": {"operationId": "list_things", "responses": {}}},
            }}),
        );
        assert_eq!(built.operations.len(), 1);
        assert_eq!(
            built.left_out,
            vec![
                "GET /b: its name `shop.list_things` is taken by GET /a: give one of them another operationId, or exclude one"
            ]
        );
    }

    #[test]
    fn hostile_specs_are_bounded() {
        // A cycle of `$ref`s, a parameter naming itself, and an exponential
        // `allOf` fan-out of records: 8^6 schemas if expanded. (A fan-out
        // deeper than the walk's depth limit is cheaper: `any` ends it.)
        let mut schemas = Map::new();
        schemas.insert(
            "Loop".to_owned(),
            json!({"$ref": "#/components/schemas/Loop"}),
        );
        for level in 0..6 {
            let next = format!("#/components/schemas/F{}", level + 1);
            schemas.insert(
                format!("F{level}"),
                json!({"allOf": vec![json!({"$ref": next}); 8]}),
            );
        }
        schemas.insert(
            "F6".to_owned(),
            json!({"type": "object", "properties": {"x": {"type": "string"}}}),
        );
        let built = built(
            &config(),
            json!({"openapi": "3.0.0",
                "paths": {
                    "/loop": {"get": {"operationId": "loop", "parameters": [
                        {"name": "l", "in": "query", "schema": {"$ref": "#/components/schemas/Loop"}},
                        {"$ref": "#/components/parameters/Self"},
                    ], "responses": {}}},
                    "/fan": {"post": {"operationId": "fan", "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {"f": {"$ref": "#/components/schemas/F0"}}}}}}, "responses": {}}},
                },
                "components": {"schemas": schemas, "parameters": {"Self": {"$ref": "#/components/parameters/Self"}}},
            }),
        );
        let signatures: Vec<&str> = built
            .operations
            .iter()
            .map(|o| o.capability.signature.as_str())
            .collect();
        assert_eq!(signatures, vec!["shop.loop(*, l: any | None)"]);
        assert_eq!(
            built.left_out,
            vec![
                "POST /fan: its schemas describe more than 10000 types or 1 MiB of names and values (every $ref followed counted), the most a tool may have"
            ]
        );
        let mut paths = Map::new();
        for n in 0..100_000 {
            paths.insert(format!("/p{n}"), json!({"get": {"responses": {}}}));
        }
        let Json::Object(document) = json!({"openapi": "3.0.0", "paths": paths}) else {
            unreachable!()
        };
        assert_eq!(
            operations(&config(), &document, &Stop::default())
                .err()
                .as_deref(),
            Some(
                "it describes 100000 operations, more than the 4096 a spec may have (serve a part of it with `include` or `exclude`)"
            )
        );
    }

    #[test]
    fn an_answer_of_several_kinds_of_object_is_a_record_of_all_their_fields() {
        let built = built(
            &config(),
            json!({"openapi": "3.0.0", "paths": {"/users/{u}": {"get": {
                "operationId": "getUser",
                "parameters": [{"name": "u", "in": "path", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"oneOf": [
                    {"$ref": "#/components/schemas/Private"},
                    {"type": "object", "properties": {"login": {"type": "string"}, "bio": {"type": "string"}}},
                ]}}}}},
            }}},
            "components": {"schemas": {"Private": {"type": "object", "properties": {
                "login": {"type": "string"}, "plan": {"type": "string"},
            }}}}}),
        );
        let operation = &built.operations[0];
        assert_eq!(
            operation
                .capability
                .output
                .iter()
                .map(|f| format!("{}: {}", f.name, f.ty.notation()))
                .collect::<Vec<_>>(),
            vec!["login: any | None", "plan: any | None", "bio: any | None"]
        );
        assert!(matches!(operation.output, Output::Record(_)));
    }

    #[test]
    fn identifiers_are_snake_case_and_never_keywords() {
        for (text, want) in [
            ("repos/get-content", "repos_get_content"),
            ("get /items/{item_id}", "get_items_item_id"),
            ("X-GitHub-Api-Version", "x_git_hub_api_version"),
            ("filter[status]", "filter_status"),
            ("for", "for_"),
            ("2fa", "_2fa"),
            ("", "_"),
        ] {
            assert_eq!(identifier(text), want, "{text}");
        }
    }
}
