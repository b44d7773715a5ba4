//! An upstream tool's result without structured output: its content blocks as
//! the `{text, content}` the program gets.

use codemode_value::Value;
use serde_json::Value as Json;

use rmcp::model::{ContentBlock, ResourceContents};

use crate::budget::{Budget, Nodes, OutOfNodes};
use crate::catalog::{Field, Shape};
use crate::json::values::from_json;

/// The name of the result field holding a tool's content other than text.
pub const CONTENT_FIELD: &str = "content";
/// The name of the result field holding a tool's text content.
pub const TEXT_FIELD: &str = "text";

/// The result fields of a tool without structured output: `content`, its
/// content other than text, one dict of strings per block in order
/// (`{"type": "image"|"audio", "mime_type", "data"}` with the data in base64,
/// `{"type": "resource", "uri", "mime_type", "text"|"data"}` for an embedded
/// resource, `{"type": "resource_link", "uri", "name", "mime_type"}`), and
/// `text`, its text blocks joined with newlines. Left out: annotations and
/// `_meta` of every block, a link's title, description and size, where the text
/// sat among the other blocks, and kinds of block newer than this host.
pub fn content_fields() -> Vec<Field> {
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
pub fn content_result(
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
