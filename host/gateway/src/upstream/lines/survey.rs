//! What one whole line from an upstream holds, read by serde before rmcp parses
//! it: how many values, how deep, and the ID of the request it answers. Values
//! deeper than [`MAX_MESSAGE_DEPTH`] are skipped by serde's own iterative skip, so
//! neither serde's recursion limit nor the stack is ever reached.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value as Json};

use crate::upstream::bounds::MAX_MESSAGE_DEPTH;

/// What a line holds (see the module's documentation).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Survey {
    /// The top-level `id`, as JSON text, when it is a number or a string (an
    /// integral float as the integer rmcp reads it as).
    pub id: Option<String>,
    /// The top-level members a JSON-RPC message is told by: `jsonrpc`, `method`
    /// (a request or notification), `result` or `error` (an answer).
    pub members: Members,
    /// Every value: each object, array, string, number, boolean and null (those
    /// below [`MAX_MESSAGE_DEPTH`] objects and arrays are not counted; they are
    /// never parsed as they are).
    pub values: usize,
    /// The deepest nesting of objects and arrays, counted up to one more than
    /// [`MAX_MESSAGE_DEPTH`].
    pub deepest: usize,
}

/// Which of the members a JSON-RPC message is told by a line's top-level object
/// has.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct Members {
    pub jsonrpc: bool,
    pub method: bool,
    pub answer: bool,
}

impl Survey {
    /// Whether the line looks like a JSON-RPC message: anything else (a JSON log
    /// line, a bare value) rmcp would answer with an error written to the
    /// child's stdin, unasked.
    pub fn is_message(&self) -> bool {
        self.members.jsonrpc && (self.members.method || self.members.answer)
    }

    /// Whether the line answers a request (rather than being one, or a
    /// notification): only an answer's ID names a request of ours.
    pub fn is_answer(&self) -> bool {
        self.members.answer && !self.members.method
    }

    /// The survey of `line`, one JSON value.
    ///
    /// # Errors
    ///
    /// `line` is not one JSON value.
    pub fn of(line: &[u8]) -> Result<Self, serde_json::Error> {
        let mut survey = Self::default();
        let mut reader = serde_json::Deserializer::from_slice(line);
        Count {
            survey: &mut survey,
            depth: 0,
        }
        .deserialize(&mut reader)?;
        reader.end()?;
        Ok(survey)
    }
}

/// `line` with every object and array nested deeper than `max` replaced by
/// `null`, the rest as it was.
///
/// # Errors
///
/// `line` is not one JSON value.
pub fn pruned(line: &[u8], max: usize) -> Result<Json, serde_json::Error> {
    let mut reader = serde_json::Deserializer::from_slice(line);
    let value = Prune { depth: 0, max }.deserialize(&mut reader)?;
    reader.end()?;
    Ok(value)
}

/// The visits of a scalar (boolean, number, string, null), each answering
/// `$value`: what a visitor reading only the shape of a value says of them.
macro_rules! scalars_are {
    ($value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Counts one value, `depth` objects and arrays down.
struct Count<'a> {
    survey: &'a mut Survey,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<(), D::Error> {
        self.survey.values += 1;
        if self.depth < MAX_MESSAGE_DEPTH {
            return reader.deserialize_any(self);
        }
        // An object or array here is one level too deep: skipped, not counted.
        if reader.deserialize_any(Nested)? {
            self.survey.deepest = MAX_MESSAGE_DEPTH + 1;
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    scalars_are!(());

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        let depth = self.depth + 1;
        self.survey.deepest = self.survey.deepest.max(depth);
        while items
            .next_element_seed(Count {
                survey: self.survey,
                depth,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<(), A::Error> {
        let depth = self.depth + 1;
        self.survey.deepest = self.survey.deepest.max(depth);
        while let Some(key) = members.next_key_seed(Key)? {
            if depth == 1 {
                match key {
                    TopKey::Id => {
                        self.survey.id = members.next_value_seed(IdText {
                            survey: self.survey,
                        })?;
                        continue;
                    }
                    TopKey::JsonRpc => self.survey.members.jsonrpc = true,
                    TopKey::Method => self.survey.members.method = true,
                    TopKey::Answer => self.survey.members.answer = true,
                    TopKey::Other => {}
                }
            }
            members.next_value_seed(Count {
                survey: self.survey,
                depth,
            })?;
        }
        Ok(())
    }
}

/// Whether a value is an object or an array, skipping it.
struct Nested;

impl<'de> Visitor<'de> for Nested {
    type Value = bool;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    scalars_are!(false);

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<bool, A::Error> {
        while items.next_element::<IgnoredAny>()?.is_some() {}
        Ok(true)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<bool, A::Error> {
        while members.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(true)
    }
}

/// A top-level key, as far as telling a JSON-RPC message goes.
enum TopKey {
    Id,
    JsonRpc,
    Method,
    /// `result` or `error`.
    Answer,
    Other,
}

/// Reads a key as a [`TopKey`].
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = TopKey;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<TopKey, D::Error> {
        reader.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = TopKey;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a key")
    }

    fn visit_str<E>(self, key: &str) -> Result<TopKey, E> {
        Ok(match key {
            "id" => TopKey::Id,
            "jsonrpc" => TopKey::JsonRpc,
            "method" => TopKey::Method,
            "result" | "error" => TopKey::Answer,
            _ => TopKey::Other,
        })
    }
}

/// The most an integral float ID may be to be read as the integer it equals
/// (as rmcp reads it): 2^53, past which floats skip integers.
const MAX_FLOAT_ID: f64 = 9_007_199_254_740_992.0;

/// A request ID as JSON text: a number or a string. Anything else is no ID, but
/// is counted like any value (an array as ID is still 8 million values).
struct IdText<'a> {
    survey: &'a mut Survey,
}

impl<'de> DeserializeSeed<'de> for IdText<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Option<String>, D::Error> {
        self.survey.values += 1;
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IdText<'_> {
    type Value = Option<String>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a request ID")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, id: i64) -> Result<Self::Value, E> {
        Ok(Some(id.to_string()))
    }

    fn visit_u64<E>(self, id: u64) -> Result<Self::Value, E> {
        Ok(Some(id.to_string()))
    }

    #[allow(clippy::cast_possible_truncation)] // integral and within 2^53
    fn visit_f64<E>(self, id: f64) -> Result<Self::Value, E> {
        let integral = id.fract() == 0.0 && id.abs() <= MAX_FLOAT_ID;
        Ok(integral.then(|| (id as i64).to_string()))
    }

    fn visit_str<E>(self, id: &str) -> Result<Self::Value, E> {
        Ok(serde_json::to_string(id).ok())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Self::Value, A::Error> {
        Count {
            survey: self.survey,
            depth: 1,
        }
        .visit_seq(items)
        .map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, members: A) -> Result<Self::Value, A::Error> {
        Count {
            survey: self.survey,
            depth: 1,
        }
        .visit_map(members)
        .map(|()| None)
    }
}

/// One value as JSON, `depth` objects and arrays down, with those deeper than
/// `max` made `null`.
struct Prune {
    depth: usize,
    max: usize,
}

impl<'de> DeserializeSeed<'de> for Prune {
    type Value = Json;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Json, D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Prune {
    type Value = Json;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Json, E> {
        Ok(Json::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Json, E> {
        Ok(Json::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Json, E> {
        Ok(Json::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Json, E> {
        Ok(Number::from_f64(value).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Json, E> {
        Ok(Json::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Json, E> {
        Ok(Json::String(value))
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Json, A::Error> {
        let depth = self.depth + 1;
        if depth > self.max {
            Nested.visit_seq(items)?;
            return Ok(Json::Null);
        }
        let mut array = Vec::new();
        while let Some(item) = items.next_element_seed(Prune {
            depth,
            max: self.max,
        })? {
            array.push(item);
        }
        Ok(Json::Array(array))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Json, A::Error> {
        let depth = self.depth + 1;
        if depth > self.max {
            Nested.visit_map(members)?;
            return Ok(Json::Null);
        }
        let mut object = Map::new();
        while let Some(key) = members.next_key::<String>()? {
            let value = members.next_value_seed(Prune {
                depth,
                max: self.max,
            })?;
            object.insert(key, value);
        }
        Ok(Json::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn survey(line: &str) -> Survey {
        Survey::of(line.as_bytes()).unwrap_or_else(|error| panic!("{line}: {error}"))
    }

    #[test]
    fn values_and_depth_are_counted() {
        assert_eq!(
            survey(r#"[{"a":0},{"a":0},{"a":"x,y"}]"#),
            Survey {
                id: None,
                members: Members::default(),
                values: 7,
                deepest: 2
            }
        );
        assert_eq!(survey(r#"{"a":[[["x",{"b":"]}"}]]],"c":1}"#).deepest, 5);
        assert_eq!(survey(r#""just a string""#).deepest, 0);
    }

    #[test]
    fn nesting_past_the_limit_is_skipped_not_followed() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let surveyed = survey(&deep);
        assert_eq!(surveyed.deepest, MAX_MESSAGE_DEPTH + 1);
        assert_eq!(surveyed.values, MAX_MESSAGE_DEPTH + 1);
        let exactly = format!(
            "{}{}",
            "[".repeat(MAX_MESSAGE_DEPTH),
            "]".repeat(MAX_MESSAGE_DEPTH)
        );
        assert_eq!(survey(&exactly).deepest, MAX_MESSAGE_DEPTH);
    }

    #[test]
    fn values_too_deep_become_null_and_the_rest_stays() {
        let line = br#"{"a":[[["x",{"b":"]}"}]]],"c":1}"#;
        let text = |value: Json| serde_json::to_string(&value).unwrap_or_default();
        assert_eq!(
            pruned(line, 3).map(text).ok().as_deref(),
            Some(r#"{"a":[[null]],"c":1}"#)
        );
        assert_eq!(
            pruned(line, 5).map(text).ok().as_deref(),
            Some(r#"{"a":[[["x",{"b":"]}"}]]],"c":1}"#),
            "nothing deeper than 5"
        );
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let pruned = pruned(deep.as_bytes(), MAX_MESSAGE_DEPTH).map(text);
        let pruned = pruned.unwrap_or_default();
        assert_eq!(survey(&pruned).deepest, MAX_MESSAGE_DEPTH);
    }

    #[test]
    fn a_number_out_of_range_is_no_value() {
        assert!(Survey::of(br#"{"jsonrpc":"2.0","id":6,"result":{"n":1e400}}"#).is_err());
        let long = format!(r#"{{"result":{{"n":1{}}}}}"#, "0".repeat(400));
        assert!(Survey::of(long.as_bytes()).is_err(), "a 401-digit integer");
    }

    #[test]
    fn an_id_is_a_number_or_a_string_and_counts_whatever_it_is() {
        let id = |line: &str| survey(line).id;
        assert_eq!(id(r#"{"id":5.0}"#).as_deref(), Some("5"));
        assert_eq!(id(r#"{"id":5.5}"#), None);
        assert_eq!(id(r#"{"id":1e300}"#), None);
        let array = survey(r#"{"id":[0,0,[0]],"result":{}}"#);
        assert_eq!((array.id, array.values, array.deepest), (None, 7, 3));
        assert!(
            Survey::of(br#"{"id":[1e400]}"#).is_err(),
            "checked as any value"
        );
        let deep = format!(r#"{{"id":{}{}}}"#, "[".repeat(150), "]".repeat(150));
        assert_eq!(survey(&deep).deepest, MAX_MESSAGE_DEPTH + 1);
    }

    #[test]
    fn a_message_is_told_by_its_members() {
        let answer = survey(r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#);
        assert!(answer.is_message() && answer.is_answer());
        let request = survey(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        assert!(request.is_message() && !request.is_answer());
        let log = survey(r#"{"level":30,"msg":"listening","id":1}"#);
        assert!(!log.is_message());
        assert!(!survey("42").is_message());
        assert!(!survey(r#"{"a":{"jsonrpc":"2.0","result":{}}}"#).is_message());
    }
}
