//! What the state capabilities say of themselves: names, signatures, result
//! fields and the texts a model reads in search and describe.

use std::sync::Arc;

use crate::catalog::{
    Annotations, Capability, CapabilitySpec, Field, IntKind, Shape, validate_spec,
};
use crate::store::StateLimits;
use crate::units::format_bytes;

/// The root of the state capabilities' names (and of their IDs).
pub const STATE_ROOT: &str = "state";

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// The longest time to live, in seconds: ten years.
pub const MAX_TTL_SECONDS: i64 = 10 * 365 * 24 * 3600;

/// `state.get`'s result: whether the key has a value.
pub(super) const FOUND: &str = "found";
/// `state.get`'s result: the value, `None` without one.
pub(super) const VALUE: &str = "value";
/// `state.put`'s result: whether a value was replaced.
pub(super) const REPLACED: &str = "replaced";
/// `state.delete`'s result: whether there was a value.
pub(super) const DELETED: &str = "deleted";
/// `state.list`'s result: the keys.
pub(super) const KEYS: &str = "keys";

/// The state capabilities, in the order of [`Op::at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Get,
    Put,
    Delete,
    List,
}

impl Op {
    const ALL: [Op; 4] = [Op::Get, Op::Put, Op::Delete, Op::List];

    /// The capability at `index` of the source's list.
    pub(super) fn at(index: usize) -> Option<Op> {
        Self::ALL.get(index).copied()
    }
}

/// The shared sentence on who sees a key.
const WHOSE: &str = "Keys are this subject's own: another subject (another token, another user) neither sees nor changes them.";

/// The capabilities, their descriptions naming `limits`.
pub fn capabilities(limits: StateLimits) -> Vec<Arc<Capability>> {
    Op::ALL
        .iter()
        .map(|op| {
            let (spec, annotations) = spec(*op, limits);
            // Fixed texts of this crate: a failure is a defect, caught by the
            // tests (`every_spec_is_valid`).
            let mut capability = validate_spec(&spec).unwrap_or_else(|error| {
                panic!("state capability {}: {error}", spec.name);
            });
            capability.annotations = annotations;
            Arc::new(capability)
        })
        .collect()
}

fn key_param() -> Field {
    Field::new("key", Shape::Str)
}

fn spec(op: Op, limits: StateLimits) -> (CapabilitySpec, Annotations) {
    let optional = |shape: Shape| Shape::Option(Box::new(shape));
    let spec = |name: &str, summary: &str, description: String, params, output| CapabilitySpec {
        name: format!("{STATE_ROOT}.{name}"),
        id: None,
        summary: summary.to_owned(),
        description: Some(description),
        search_terms: vec![
            "state".to_owned(),
            "remember".to_owned(),
            "memory".to_owned(),
            "persist".to_owned(),
            "key value store".to_owned(),
        ],
        params,
        output,
    };
    match op {
        Op::Get => (
            spec(
                "get",
                "Read a value kept by an earlier execution, by its key",
                format!(
                    "Reads the value kept under `key` by `state.put` (in this execution or an earlier one). `found` is False, and `value` None, when the key has no value or its ttl ran out. {WHOSE}"
                ),
                vec![key_param()],
                vec![
                    Field::new(FOUND, Shape::Bool),
                    Field::new(VALUE, Shape::Any),
                ],
            ),
            Annotations {
                read_only: Some(true),
                open_world: Some(false),
                ..Annotations::default()
            },
        ),
        Op::Put => (
            spec(
                "put",
                "Keep a value under a key for later executions",
                format!(
                    "Keeps `value` (None, a bool, int, float or str, or lists and dicts of them) under `key` ({MAX_KEY_BYTES} bytes at most), replacing its value, until `ttl` seconds from now (1 to {MAX_TTL_SECONDS}; None keeps it until deleted). The value is kept as soon as the call returns, even when the execution fails afterwards. `replaced` says whether the key had a value. A subject keeps at most {} keys and {} of keys and values (as JSON), and one value is at most {}: past one of these the execution ends with `resource limit exceeded`. {WHOSE}",
                    limits.max_keys,
                    format_bytes(limits.max_bytes),
                    format_bytes(limits.max_value_bytes),
                ),
                vec![
                    key_param(),
                    Field::new(VALUE, Shape::Any),
                    Field::new("ttl", optional(Shape::Int(IntKind::S64))),
                ],
                vec![Field::new(REPLACED, Shape::Bool)],
            ),
            Annotations {
                read_only: Some(false),
                destructive: Some(true),
                idempotent: Some(true),
                open_world: Some(false),
            },
        ),
        Op::Delete => (
            spec(
                "delete",
                "Delete the value kept under a key",
                format!(
                    "Deletes the value kept under `key`; `deleted` says whether it had one. {WHOSE}"
                ),
                vec![key_param()],
                vec![Field::new(DELETED, Shape::Bool)],
            ),
            Annotations {
                read_only: Some(false),
                destructive: Some(true),
                idempotent: Some(true),
                open_world: Some(false),
            },
        ),
        Op::List => (
            spec(
                "list",
                "List the keys that have a value, by prefix",
                format!(
                    "The keys that have a value and start with `prefix` (every key when None), in order. {WHOSE}"
                ),
                vec![Field::new("prefix", optional(Shape::Str))],
                vec![Field::new(KEYS, Shape::List(Box::new(Shape::Str)))],
            ),
            Annotations {
                read_only: Some(true),
                open_world: Some(false),
                ..Annotations::default()
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_is_valid_and_in_the_order_calls_name() {
        let capabilities = capabilities(StateLimits::default());
        let names: Vec<&str> = capabilities.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["state.get", "state.put", "state.delete", "state.list"]
        );
        let signatures: Vec<&str> = capabilities.iter().map(|c| c.signature.as_str()).collect();
        assert_eq!(
            signatures,
            [
                "state.get(*, key: str)",
                "state.put(*, key: str, value: any, ttl: int | None)",
                "state.delete(*, key: str)",
                "state.list(*, prefix: str | None)",
            ]
        );
        for (index, capability) in capabilities.iter().enumerate() {
            assert_eq!(
                Op::at(index).map(|op| spec(op, StateLimits::default()).0.name),
                Some(capability.name.to_string())
            );
        }
    }

    #[test]
    fn put_names_the_limits_it_was_given() {
        let limits = StateLimits {
            max_keys: 7,
            max_bytes: 2 << 20,
            max_value_bytes: 4096,
        };
        let description = &capabilities(limits)[1].description;
        assert!(
            description.contains("at most 7 keys and 2 MiB of keys and values (as JSON), and one value is at most 4 KiB"),
            "{description}"
        );
    }
}
