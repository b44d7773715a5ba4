//! Values across an upstream call: bound arguments into a tool's JSON `arguments`,
//! and a tool's JSON result into the value a program gets.

use codemode_value::Value;
use serde_json::{Map, Value as Json};

use crate::budget::{Budget, Nodes, OutOfNodes};
use crate::catalog::{Field, Shape};

/// The `arguments` object of a tools/call: one member per parameter, in order, an
/// optional parameter (or record member) that is `None` left out, as JSON Schema's
/// `required` means. `bound` holds one value per parameter, as binding returned them.
pub(crate) fn arguments(params: &[Field], bound: Vec<Value>) -> Map<String, Json> {
    let mut out = Map::new();
    for (field, value) in params.iter().zip(bound) {
        if field.is_optional() && matches!(value, Value::None) {
            continue;
        }
        out.insert(field.name.clone(), to_json(&field.ty, value));
    }
    out
}

/// One bound value as JSON, walking its shape for records' optional members.
fn to_json(shape: &Shape, value: Value) -> Json {
    match (shape, value) {
        (Shape::Option(inner), value) => to_json(inner, value),
        (Shape::Record(fields), Value::Dict(entries)) => {
            let mut out = Map::new();
            for (key, value) in entries {
                let field = fields.iter().find(|f| f.name == key);
                match field {
                    Some(field) if field.is_optional() && matches!(value, Value::None) => {}
                    Some(field) => {
                        out.insert(key, to_json(&field.ty, value));
                    }
                    None => {
                        out.insert(key, plain(value));
                    }
                }
            }
            Json::Object(out)
        }
        (Shape::List(elem), Value::List(items)) => {
            Json::Array(items.into_iter().map(|v| to_json(elem, v)).collect())
        }
        (Shape::Dict(elem), Value::Dict(entries)) => Json::Object(
            entries
                .into_iter()
                .map(|(k, v)| (k, to_json(elem, v)))
                .collect(),
        ),
        (_, value) => plain(value),
    }
}

/// A value as JSON without a shape. Binding let through only what JSON can carry;
/// anything else (which it never lets through) becomes `null`.
fn plain(value: Value) -> Json {
    match value {
        Value::None => Json::Null,
        Value::Bool(b) => Json::Bool(b),
        Value::Int(i) => Json::from(i),
        Value::Float(f) => serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number),
        Value::Str(s) => Json::String(s),
        Value::List(items) => Json::Array(items.into_iter().map(plain).collect()),
        Value::Dict(entries) => {
            Json::Object(entries.into_iter().map(|(k, v)| (k, plain(v))).collect())
        }
        Value::BigInt { .. } | Value::NonStringKeys | Value::Unsupported(_) => Json::Null,
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

/// The result of a tool without structured output: `{"text": ...}`.
pub(crate) fn text_result(text: String, max_nodes: usize) -> Result<Value, Budget> {
    Nodes::new(max_nodes)
        .charge(2)
        .map_err(|OutOfNodes| Budget::ValueBytes)?;
    Ok(Value::Dict(vec![("text".to_owned(), Value::Str(text))]))
}

/// One JSON value at `depth` (the result dict is 1). A number that fits 64 signed
/// bits is an int, any other a float.
fn from_json(
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
        ];
        let bound = vec![
            Value::Str("UTC".into()),
            Value::None,
            Value::Dict(vec![("x".into(), Value::None), ("y".into(), Value::None)]),
        ];
        assert_eq!(
            Json::Object(arguments(&params, bound)),
            json!({"zone": "UTC", "where": {"x": null}})
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
        assert_eq!(
            text_result("hi".into(), 2),
            Ok(Value::Dict(vec![("text".into(), Value::Str("hi".into()))]))
        );
        assert_eq!(text_result("hi".into(), 1), Err(Budget::ValueBytes));
    }
}
