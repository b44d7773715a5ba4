//! The model-facing contract of the MCP tools: names, descriptions, input and output
//! schemas, and the server instructions. Every text here is fixed by the seed and
//! tested for exact equality.

use serde_json::{Value, json};

/// Tool name of ranked discovery.
pub const SEARCH_API: &str = "search_api";
/// Tool name of exact description.
pub const DESCRIBE_API: &str = "describe_api";
/// Tool name of program execution.
pub const EXECUTE: &str = "execute";

/// The seed's `search_api` description, byte for byte.
pub const SEARCH_API_DESCRIPTION: &str = "Search enabled capabilities using task, resource, or exact-name vocabulary. Results are relevance-ranked. Pass the exact returned name to describe_api. If truncated is true and no result fits, submit a more specific task/resource query.";
/// The seed's `describe_api` description, byte for byte.
pub const DESCRIBE_API_DESCRIPTION: &str = "Describe one enabled capability by the exact name returned by search_api, without whitespace or case changes.";

/// The seed's `execute` description, byte for byte.
pub const EXECUTE_DESCRIPTION: &str = "Execute one Starlark program that defines def main(): with zero arguments, calls only names confirmed through search_api and describe_api inside main, and returns main's final result. Standard Starlark builtins plus sum(iterable), json.decode/encode/indent, and math.* are directly available without import. import, while, f-strings, filter, and map are unavailable; load is disabled; print is discarded.";

/// The seed's "Language surface" block: the exact fixed names a program can use
/// without import. A test checks the interpreter provides exactly these.
pub const LANGUAGE_SURFACE: &str = "top-level: False, None, True, abs, all, any, bool, bytes, chr, dict, dir, enumerate, fail, float, getattr, hasattr, hash, int, json, len, list, math, max, min, ord, print, range, repr, reversed, sorted, str, sum, tuple, type, zip
json: decode, encode, indent
math: acos, acosh, asin, asinh, atan, atan2, atanh, ceil, copysign, cos, cosh, degrees, e, exp, fabs, floor, gamma, hypot, log, mod, pi, pow, radians, remainder, round, sin, sinh, sqrt, tan, tanh";

/// Sent at initialize: the workflow in three sentences.
pub const INSTRUCTIONS: &str = "Find capabilities with search_api using task or resource words. Call describe_api with an exact returned name to get its keyword signature and result fields. Then run one Starlark program with execute whose main() calls those capabilities and returns one value.";

/// The single required string property of a tool's input.
pub(crate) fn input_property(tool: &str) -> Option<&'static str> {
    match tool {
        SEARCH_API => Some("query"),
        DESCRIBE_API => Some("name"),
        EXECUTE => Some("source"),
        _ => None,
    }
}

/// Input schema: an object with exactly one required string property.
pub(crate) fn input_schema(property: &str) -> Value {
    json!({
        "type": "object",
        "required": [property],
        "additionalProperties": false,
        "properties": { property: { "type": "string" } }
    })
}

/// The flat field-shape item schema shared by `describe_api`'s `input` and `output`.
fn field_shape_items() -> Value {
    json!({
        "type": "object",
        "required": ["name", "type", "required"],
        "additionalProperties": false,
        "properties": {
            "name": { "type": "string" },
            "type": { "type": "string" },
            "required": { "type": "boolean" }
        }
    })
}

/// `search_api`'s output schema, as the seed prints it.
pub(crate) fn search_output_schema() -> Value {
    json!({
        "type": "object",
        "required": ["results", "truncated"],
        "additionalProperties": false,
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "signature", "summary"],
                    "additionalProperties": false,
                    "properties": {
                        "name": { "type": "string" },
                        "signature": { "type": "string" },
                        "summary": { "type": "string" }
                    }
                }
            },
            "truncated": { "type": "boolean" }
        }
    })
}

/// `describe_api`'s output schema, as the seed prints it.
pub(crate) fn describe_output_schema() -> Value {
    json!({
        "type": "object",
        "required": ["name", "signature", "summary", "description", "input", "output"],
        "additionalProperties": false,
        "properties": {
            "name": { "type": "string" },
            "signature": { "type": "string" },
            "summary": { "type": "string" },
            "description": { "type": "string" },
            "input": { "type": "array", "items": field_shape_items() },
            "output": { "type": "array", "items": field_shape_items() }
        }
    })
}

/// `execute`'s output schema: `result` may be any JSON value. The seed writes that
/// as the boolean subschema `true`; we write the empty schema `{}`, which means the
/// same and which clients' schema checks accept (the conformance suite's tools-list
/// check rejects a boolean subschema there).
pub(crate) fn execute_output_schema() -> Value {
    json!({
        "type": "object",
        "required": ["result"],
        "additionalProperties": false,
        "properties": { "result": {} }
    })
}

/// Why a tool call's arguments were rejected before any service work (the schema
/// check the seed says the SDK performs). These name client-owned fields only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ArgumentsError {
    /// The required property is absent.
    #[error("{tool}: missing required property \"{property}\"")]
    Missing {
        /// Tool name.
        tool: &'static str,
        /// Property name.
        property: &'static str,
    },
    /// A property other than the declared one.
    #[error("{tool}: unexpected property {property:?} (additionalProperties is false)")]
    Unexpected {
        /// Tool name.
        tool: &'static str,
        /// The extra property.
        property: String,
    },
    /// The property is not a string.
    #[error("{tool}: property \"{property}\" must be a string")]
    NotString {
        /// Tool name.
        tool: &'static str,
        /// Property name.
        property: &'static str,
    },
}

/// Checks `arguments` against the tool's input schema and returns the one string.
///
/// # Errors
///
/// [`ArgumentsError`] naming the offending property.
pub(crate) fn single_string<'a>(
    tool: &'static str,
    property: &'static str,
    arguments: Option<&'a serde_json::Map<String, Value>>,
) -> Result<&'a str, ArgumentsError> {
    let Some(arguments) = arguments else {
        return Err(ArgumentsError::Missing { tool, property });
    };
    let mut extra: Vec<&String> = arguments
        .keys()
        .filter(|k| k.as_str() != property)
        .collect();
    extra.sort();
    if let Some(extra) = extra.first() {
        return Err(ArgumentsError::Unexpected {
            tool,
            property: (*extra).clone(),
        });
    }
    match arguments.get(property) {
        None => Err(ArgumentsError::Missing { tool, property }),
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(_) => Err(ArgumentsError::NotString { tool, property }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_are_the_seed_texts() {
        assert_eq!(
            SEARCH_API_DESCRIPTION,
            "Search enabled capabilities using task, resource, or exact-name vocabulary. Results are relevance-ranked. Pass the exact returned name to describe_api. If truncated is true and no result fits, submit a more specific task/resource query."
        );
        assert_eq!(
            DESCRIBE_API_DESCRIPTION,
            "Describe one enabled capability by the exact name returned by search_api, without whitespace or case changes."
        );
        assert_eq!(
            EXECUTE_DESCRIPTION,
            "Execute one Starlark program that defines def main(): with zero arguments, calls only names confirmed through search_api and describe_api inside main, and returns main's final result. Standard Starlark builtins plus sum(iterable), json.decode/encode/indent, and math.* are directly available without import. import, while, f-strings, filter, and map are unavailable; load is disabled; print is discarded."
        );
        assert_eq!(
            INSTRUCTIONS,
            "Find capabilities with search_api using task or resource words. Call describe_api with an exact returned name to get its keyword signature and result fields. Then run one Starlark program with execute whose main() calls those capabilities and returns one value."
        );
    }

    #[test]
    fn input_schema_is_one_required_string_without_extras() {
        assert_eq!(
            input_schema("query").to_string(),
            r#"{"type":"object","required":["query"],"additionalProperties":false,"properties":{"query":{"type":"string"}}}"#
        );
    }

    #[test]
    fn output_schemas_match_the_seed() {
        assert_eq!(
            search_output_schema().to_string(),
            r#"{"type":"object","required":["results","truncated"],"additionalProperties":false,"properties":{"results":{"type":"array","items":{"type":"object","required":["name","signature","summary"],"additionalProperties":false,"properties":{"name":{"type":"string"},"signature":{"type":"string"},"summary":{"type":"string"}}}},"truncated":{"type":"boolean"}}}"#
        );
        let shape = r#"{"type":"array","items":{"type":"object","required":["name","type","required"],"additionalProperties":false,"properties":{"name":{"type":"string"},"type":{"type":"string"},"required":{"type":"boolean"}}}}"#;
        assert_eq!(
            describe_output_schema().to_string(),
            format!(
                r#"{{"type":"object","required":["name","signature","summary","description","input","output"],"additionalProperties":false,"properties":{{"name":{{"type":"string"}},"signature":{{"type":"string"}},"summary":{{"type":"string"}},"description":{{"type":"string"}},"input":{shape},"output":{shape}}}}}"#
            )
        );
    }

    #[test]
    fn execute_schemas_match_the_seed() {
        assert_eq!(
            input_schema(input_property(EXECUTE).unwrap()).to_string(),
            r#"{"type":"object","required":["source"],"additionalProperties":false,"properties":{"source":{"type":"string"}}}"#
        );
        assert_eq!(
            execute_output_schema().to_string(),
            r#"{"type":"object","required":["result"],"additionalProperties":false,"properties":{"result":{}}}"#
        );
    }

    #[test]
    fn arguments_are_checked_against_the_schema() {
        let obj = |v: Value| v.as_object().cloned();
        type Case = (
            &'static str,
            Option<serde_json::Map<String, Value>>,
            Result<&'static str, &'static str>,
        );
        let cases: Vec<Case> = vec![
            ("ok", obj(json!({"query": "x"})), Ok("x")),
            ("empty string ok", obj(json!({"query": ""})), Ok("")),
            (
                "absent arguments",
                None,
                Err("search_api: missing required property \"query\""),
            ),
            (
                "missing",
                obj(json!({})),
                Err("search_api: missing required property \"query\""),
            ),
            (
                "extra",
                obj(json!({"query": "x", "limit": 3})),
                Err("search_api: unexpected property \"limit\" (additionalProperties is false)"),
            ),
            (
                "number",
                obj(json!({"query": 3})),
                Err("search_api: property \"query\" must be a string"),
            ),
            (
                "null",
                obj(json!({"query": null})),
                Err("search_api: property \"query\" must be a string"),
            ),
        ];
        for (case, args, want) in cases {
            let got = single_string(SEARCH_API, "query", args.as_ref()).map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_owned), "{case}");
        }
    }
}
