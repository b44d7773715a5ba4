//! Values across an upstream call: bound arguments lowered into a tool's JSON
//! `arguments` (the upstream source's [`Lowering`]), and a tool's JSON result into
//! the value a program gets.

use codemode_value::Value;
use serde_json::{Map, Value as Json};

use rmcp::model::{ContentBlock, ResourceContents};

use crate::budget::{Budget, Nodes, OutOfNodes};
use crate::catalog::{Field, FloatKind, IntKind, Lowering, Member, Shape};

/// The upstream source's lowering: the `arguments` object of a tools/call, one
/// member per parameter in order, an optional parameter (or record member) given
/// as `None` or not at all left out, as JSON Schema's `required` means.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ToolArguments;

impl Lowering for ToolArguments {
    type Out = Json;
    type Arguments = Map<String, Json>;

    fn none(&self) -> Json {
        Json::Null
    }
    fn some(&self, value: Json) -> Json {
        value
    }
    fn bool(&self, value: bool) -> Json {
        Json::Bool(value)
    }
    fn int(&self, _: IntKind, value: i64) -> Json {
        Json::from(value)
    }
    /// Binding let through only finite floats; anything else would be `null`.
    fn float(&self, _: FloatKind, value: f64) -> Json {
        serde_json::Number::from_f64(value).map_or(Json::Null, Json::Number)
    }
    fn char(&self, value: char) -> Json {
        Json::String(value.to_string())
    }
    fn str(&self, value: &str) -> Json {
        Json::String(value.to_owned())
    }
    fn enum_case(&self, case: &str) -> Json {
        Json::String(case.to_owned())
    }
    fn flags(&self, set: Vec<String>) -> Json {
        Json::Array(set.into_iter().map(Json::String).collect())
    }
    fn list(&self, items: Vec<Json>) -> Json {
        Json::Array(items)
    }
    fn dict(&self, entries: Vec<(String, Json)>) -> Json {
        Json::Object(entries.into_iter().collect())
    }
    fn record(&self, members: &[Member], values: Vec<Option<Json>>) -> Json {
        Json::Object(self.arguments(members, values))
    }
    fn arguments(&self, params: &[Member], values: Vec<Option<Json>>) -> Map<String, Json> {
        params
            .iter()
            .zip(values)
            .filter_map(|(param, value)| Some((param.name.clone(), value?)))
            .collect()
    }
}

/// A tool's structured result as the program's dict: every declared field present
/// (`None` when the upstream left it out), the upstream's other members kept, keys
/// sorted. The dict is depth 1; `max_nodes` bounds the values, as for plugins.
///
/// # Errors
///
/// The budget that ran out: the result's depth or its size.
pub(crate) fn result(
    output: &[Field],
    structured: Map<String, Json>,
    max_depth: usize,
    max_nodes: usize,
) -> Result<Value, Budget> {
    let mut nodes = Nodes::new(max_nodes);
    let mut entries = Vec::with_capacity(structured.len().max(output.len()));
    for (key, value) in structured {
        entries.push((key, from_json(value, max_depth, 2, &mut nodes)?));
    }
    for field in output {
        if !entries.iter().any(|(k, _)| *k == field.name) {
            entries.push((field.name.clone(), Value::None));
        }
    }
    nodes.charge(1).map_err(|OutOfNodes| Budget::ValueBytes)?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Value::Dict(entries))
}

/// The name of the result field holding a tool's content other than text.
pub(crate) const CONTENT_FIELD: &str = "content";
/// The name of the result field holding a tool's text content.
pub(crate) const TEXT_FIELD: &str = "text";

/// The result fields of a tool without structured output: `content`, its
/// content other than text, one dict of strings per block in order
/// (`{"type": "image"|"audio", "mime_type", "data"}` with the data in base64,
/// `{"type": "resource", "uri", "mime_type", "text"|"data"}` for an embedded
/// resource, `{"type": "resource_link", "uri", "name", "mime_type"}`), and
/// `text`, its text blocks joined with newlines. Left out: annotations and
/// `_meta` of every block, a link's title, description and size, where the text
/// sat among the other blocks, and kinds of block newer than this host.
pub(crate) fn content_fields() -> Vec<Field> {
    let entry = Shape::Dict(Box::new(Shape::Str));
    vec![
        Field::new(CONTENT_FIELD, Shape::List(Box::new(entry))),
        Field::new(TEXT_FIELD, Shape::Str),
    ]
}

/// The result of a tool without structured output (see [`content_fields`]), its
/// depth and nodes charged as any result's.
///
/// # Errors
///
/// The budget that ran out: the result's depth or its size.
pub(crate) fn content_result(
    content: Vec<ContentBlock>,
    max_depth: usize,
    max_nodes: usize,
) -> Result<Value, Budget> {
    let mut texts = Vec::new();
    let mut others = Vec::new();
    for block in content {
        let entry: Vec<(&str, Option<String>)> = match block {
            ContentBlock::Text(text) => {
                texts.push(text.text);
                continue;
            }
            ContentBlock::Image(image) => vec![
                ("data", Some(image.data)),
                ("mime_type", Some(image.mime_type)),
                ("type", Some("image".to_owned())),
            ],
            ContentBlock::Audio(audio) => vec![
                ("data", Some(audio.data)),
                ("mime_type", Some(audio.mime_type)),
                ("type", Some("audio".to_owned())),
            ],
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => vec![
                    ("mime_type", mime_type),
                    ("text", Some(text)),
                    ("type", Some("resource".to_owned())),
                    ("uri", Some(uri)),
                ],
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => vec![
                    ("data", Some(blob)),
                    ("mime_type", mime_type),
                    ("type", Some("resource".to_owned())),
                    ("uri", Some(uri)),
                ],
                // A kind of resource newer than this host: left out, as the
                // SDKs leave out what they do not know.
                _ => continue,
            },
            ContentBlock::ResourceLink(link) => vec![
                ("mime_type", link.mime_type),
                ("name", Some(link.name)),
                ("type", Some("resource_link".to_owned())),
                ("uri", Some(link.uri)),
            ],
            _ => continue,
        };
        let members = entry
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_owned(), Json::String(value?))))
            .collect();
        others.push(Json::Object(members));
    }
    let mut nodes = Nodes::new(max_nodes);
    nodes.charge(2).map_err(|OutOfNodes| Budget::ValueBytes)?;
    let content = from_json(Json::Array(others), max_depth, 2, &mut nodes)?;
    Ok(Value::Dict(vec![
        (CONTENT_FIELD.to_owned(), content),
        (TEXT_FIELD.to_owned(), Value::Str(texts.join("\n"))),
    ]))
}

/// One JSON value at `depth` (the result dict is 1). A number that fits 64 signed
/// bits is an int, any other a float.
pub(crate) fn from_json(
    json: Json,
    max_depth: usize,
    depth: usize,
    nodes: &mut Nodes,
) -> Result<Value, Budget> {
    if depth > max_depth {
        return Err(Budget::ValueDepth);
    }
    nodes.charge(1).map_err(|OutOfNodes| Budget::ValueBytes)?;
    Ok(match json {
        Json::Null => Value::None,
        Json::Bool(b) => Value::Bool(b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Str(s),
        Json::Array(items) => Value::List(
            items
                .into_iter()
                .map(|item| from_json(item, max_depth, depth + 1, nodes))
                .collect::<Result<_, _>>()?,
        ),
        Json::Object(members) => {
            let mut entries = members
                .into_iter()
                .map(|(k, v)| Ok((k, from_json(v, max_depth, depth + 1, nodes)?)))
                .collect::<Result<Vec<_>, Budget>>()?;
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Dict(entries)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{BindLimits, Binder, Shape};
    use serde_json::json;

    fn opt(shape: Shape) -> Shape {
        Shape::Option(Box::new(shape))
    }

    #[test]
    fn optional_none_is_left_out_and_order_kept() {
        let params = vec![
            Field::new("zone", Shape::Str),
            Field::new("at", opt(Shape::Str)),
            Field::new(
                "where",
                Shape::Record(vec![
                    Field::new("x", Shape::Any),
                    Field::new("y", opt(Shape::Int(crate::catalog::IntKind::S64))),
                ]),
            ),
            Field::new("tags", opt(Shape::Dict(Box::new(Shape::Any)))),
        ];
        let arguments = Value::Dict(vec![
            (
                "where".into(),
                Value::Dict(vec![("x".into(), Value::None), ("y".into(), Value::None)]),
            ),
            ("at".into(), Value::None),
            ("zone".into(), Value::Str("UTC".into())),
            (
                "tags".into(),
                Value::Dict(vec![
                    (
                        "b".into(),
                        Value::List(vec![Value::Float(1.5), Value::Str("s".into()), Value::None]),
                    ),
                    ("a".into(), Value::Bool(true)),
                ]),
            ),
        ]);
        let limits = BindLimits {
            max_depth: 8,
            max_nodes: 100,
            canonical: false,
        };
        let bound = Binder::compile(&params)
            .bind(&arguments, &ToolArguments, limits)
            .expect("bound");
        assert_eq!(
            Json::Object(bound.arguments),
            json!({"zone": "UTC", "where": {"x": null}, "tags": {"b": [1.5, "s", null], "a": true}})
        );
    }

    #[test]
    fn results_fill_declared_fields_and_respect_budgets() {
        let output = vec![
            Field::new("time", Shape::Str),
            Field::new("dst", opt(Shape::Bool)),
        ];
        let structured = json!({"time": "12:00", "zone": {"name": "UTC", "offset": 0}, "n": 1.5});
        let Json::Object(structured) = structured else {
            panic!("an object")
        };
        assert_eq!(
            result(&output, structured.clone(), 8, 100),
            Ok(Value::Dict(vec![
                ("dst".into(), Value::None),
                ("n".into(), Value::Float(1.5)),
                ("time".into(), Value::Str("12:00".into())),
                (
                    "zone".into(),
                    Value::Dict(vec![
                        ("name".into(), Value::Str("UTC".into())),
                        ("offset".into(), Value::Int(0)),
                    ])
                ),
            ]))
        );
        assert_eq!(
            result(&output, structured.clone(), 2, 100),
            Err(Budget::ValueDepth)
        );
        assert_eq!(result(&output, structured, 8, 4), Err(Budget::ValueBytes));
    }

    #[test]
    fn content_other_than_text_is_listed_in_order() {
        let content: Vec<ContentBlock> = serde_json::from_value(json!([
            {"type": "text", "text": "one"},
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A"}},
            {"type": "text", "text": "two"},
            {"type": "audio", "data": "AAA=", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///b", "mimeType": "application/octet-stream", "blob": "Ag=="}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"},
        ]))
        .expect("content blocks");
        let entry = |members: &[(&str, &str)]| {
            Value::Dict(
                members
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Value::Str((*v).to_owned())))
                    .collect(),
            )
        };
        let want = Value::Dict(vec![
            (
                "content".into(),
                Value::List(vec![
                    entry(&[
                        ("data", "aGk="),
                        ("mime_type", "image/png"),
                        ("type", "image"),
                    ]),
                    entry(&[
                        ("text", "A"),
                        ("type", "resource"),
                        ("uri", "file:///a.txt"),
                    ]),
                    entry(&[
                        ("data", "AAA="),
                        ("mime_type", "audio/wav"),
                        ("type", "audio"),
                    ]),
                    entry(&[
                        ("data", "Ag=="),
                        ("mime_type", "application/octet-stream"),
                        ("type", "resource"),
                        ("uri", "file:///b"),
                    ]),
                    entry(&[
                        ("name", "c"),
                        ("type", "resource_link"),
                        ("uri", "file:///c"),
                    ]),
                ]),
            ),
            ("text".into(), Value::Str("one\ntwo".into())),
        ]);
        assert_eq!(content_result(content.clone(), 8, 100), Ok(want));
        // The dict and its text (2), the list, 5 entries and their 16 strings.
        assert!(content_result(content.clone(), 8, 24).is_ok());
        assert_eq!(
            content_result(content.clone(), 8, 23),
            Err(Budget::ValueBytes)
        );
        assert_eq!(content_result(content, 2, 100), Err(Budget::ValueDepth));
        assert_eq!(
            content_result(Vec::new(), 8, 3),
            Ok(Value::Dict(vec![
                ("content".into(), Value::List(Vec::new())),
                ("text".into(), Value::Str(String::new())),
            ]))
        );
    }
}
