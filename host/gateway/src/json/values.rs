//! JSON across a call, for the sources that speak it (upstream MCP servers,
//! OpenAPI services): bound arguments lowered into a JSON object
//! ([`ToolArguments`], a [`Lowering`]), and a JSON result into the value a
//! program gets ([`result`], [`from_json`]), its depth and nodes charged as any
//! result's.

use codemode_value::Value;
use serde_json::{Map, Value as Json};

use crate::budget::{Budget, Nodes, OutOfNodes};
use crate::catalog::{
    BindError, BindLimits, Bound, Capability, Field, FloatKind, IntKind, Lowering, Member,
};
use crate::source::Arguments;

/// The lowering of the JSON sources: the `arguments` object of a tools/call (or
/// an OpenAPI operation's arguments, before they are placed), one
/// member per parameter in order, an optional parameter (or record member) given
/// as `None` or not at all left out, as JSON Schema's `required` means.
#[derive(Debug, Clone, Copy)]
pub struct ToolArguments;

/// `arguments` bound to `capability`'s parameters as a JSON object of named
/// arguments ([`ToolArguments`]): what both JSON sources' `bind` is.
///
/// # Errors
///
/// Why the arguments do not fit the parameters, as binding words it.
pub fn bind(
    capability: &Capability,
    arguments: &Value,
    limits: BindLimits,
) -> Result<Bound<Arguments>, BindError> {
    let bound = capability
        .binder()
        .bind(arguments, &ToolArguments, limits)?;
    Ok(bound.map(Arguments::new))
}

/// `CapabilitySource` for `$source`, a JSON source whose one connection all
/// executions share (an upstream MCP server, an OpenAPI service): its fields
/// `label` and `capabilities`, arguments bound by [`bind`], and a session per
/// execution (`$session`, holding nothing of its own) whose calls are the
/// source's `async fn call(&self, index, arguments, budget) -> CallOutcome`.
macro_rules! shared_json_source {
    ($source:ty, $session:ident) => {
        impl $crate::source::CapabilitySource for $source {
            fn label(&self) -> &str {
                &self.label
            }

            fn capabilities(&self) -> &[::std::sync::Arc<$crate::catalog::Capability>] {
                &self.capabilities
            }

            fn bind(
                &self,
                capability: &$crate::catalog::Capability,
                arguments: &::codemode_value::Value,
                limits: $crate::catalog::BindLimits,
            ) -> Result<$crate::catalog::Bound<$crate::source::Arguments>, $crate::catalog::BindError>
            {
                $crate::json::values::bind(capability, arguments, limits)
            }

            fn session(
                self: ::std::sync::Arc<Self>,
                _execution: u64,
            ) -> Box<dyn $crate::source::Session> {
                Box::new($session(self))
            }
        }

        /// One execution's use of the source: the shared connection, nothing of
        /// its own.
        struct $session(::std::sync::Arc<$source>);

        impl $crate::source::Session for $session {
            fn call(
                &mut self,
                index: usize,
                arguments: $crate::source::Arguments,
                budget: $crate::source::CallBudget,
            ) -> $crate::source::CallFuture<'_> {
                Box::pin(self.0.call(index, arguments, budget))
            }
        }
    };
}
pub(crate) use shared_json_source;

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
pub fn result(
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

/// One JSON value at `depth` (the result dict is 1). A number that fits 64 signed
/// bits is an int, any other a float.
pub fn from_json(
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

/// A value as JSON (object keys sorted): a program's answer, arguments shown to
/// a human. `None` for what JSON cannot carry;
/// the interpreter rejects those before, so this is a second line.
pub fn to_json(value: Value) -> Option<serde_json::Value> {
    Some(match value {
        Value::None => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(b),
        Value::Int(i) => serde_json::Value::from(i),
        Value::Float(f) => serde_json::Value::Number(serde_json::Number::from_f64(f)?),
        Value::Str(s) => serde_json::Value::String(s),
        Value::List(items) => {
            serde_json::Value::Array(items.into_iter().map(to_json).collect::<Option<_>>()?)
        }
        Value::Dict(mut entries) => {
            // JSON objects keep their order here (`preserve_order`, for upstream
            // schemas): the answer's keys are sorted by hand.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| Some((k, to_json(v)?)))
                    .collect::<Option<_>>()?,
            )
        }
        Value::BigInt { .. } | Value::NonStringKeys | Value::Unsupported(_) => return None,
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
}
