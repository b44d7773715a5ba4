//! The values that cross between an agent's program, the host and plugins.
//!
//! Three places exchange values: the sandboxed interpreter (`host/runner`) sends a
//! native call's keyword arguments and `main`'s result to the host, and the host sends
//! capability results back. All of them use [`Value`], which keeps what JSON loses: an
//! int stays an int, `1.0` stays a float, `-0.0` keeps its sign, and an integer too
//! large for 64 bits is still recognisable as one (so binding can say "overflows
//! int64" instead of "must be an integer").
//!
//! The crate has no dependencies because it is compiled twice: into the host, and
//! into the runner for `wasm32-wasip2`. [`encode`]/[`decode`] are the wire form
//! between the two (compact, exact, bounded on decode); [`json_len`] is the size the
//! budgets are defined by (the seed's type-preserving JSON with Go escaping).

/// One value crossing the sandbox boundary.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None` / JSON `null`.
    None,
    /// A boolean.
    Bool(bool),
    /// An integer that fits 64 signed bits.
    Int(i64),
    /// An integer outside the signed 64-bit range (only its sign is kept: nothing may
    /// accept it, but errors must say it overflowed).
    BigInt {
        /// Whether it is below `i64::MIN` (rather than above `i64::MAX`).
        negative: bool,
    },
    /// A float (finite or not: binding and conversion decide what to accept).
    Float(f64),
    /// A string.
    Str(String),
    /// A list or tuple.
    List(Vec<Value>),
    /// A dict with string keys, in iteration order.
    Dict(Vec<(String, Value)>),
    /// A dict with at least one key that is not a string (binding reports "keys must
    /// be strings").
    NonStringKeys,
    /// Anything else a program can hold (a function, bytes, a module...), by its
    /// Starlark type name.
    Unsupported(String),
}

impl Value {
    /// The Starlark type name, for diagnostics.
    pub fn type_name(&self) -> &str {
        match self {
            Value::None => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt { .. } => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Dict(_) | Value::NonStringKeys => "dict",
            Value::Unsupported(name) => name,
        }
    }
}

const TAG_NONE: u8 = 0;
const TAG_FALSE: u8 = 1;
const TAG_TRUE: u8 = 2;
const TAG_INT: u8 = 3;
const TAG_BIG_POSITIVE: u8 = 4;
const TAG_BIG_NEGATIVE: u8 = 5;
const TAG_FLOAT: u8 = 6;
const TAG_STR: u8 = 7;
const TAG_LIST: u8 = 8;
const TAG_DICT: u8 = 9;
const TAG_NON_STRING_KEYS: u8 = 10;
const TAG_UNSUPPORTED: u8 = 11;

/// Appends the wire form of `value` to `out`.
///
/// The form is a tag byte followed by the payload: 8 little-endian bytes for ints and
/// floats, a 4-byte length and the bytes for strings, a 4-byte count and the items for
/// lists and dicts (each dict entry is a string key and a value).
pub fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::None => out.push(TAG_NONE),
        Value::Bool(false) => out.push(TAG_FALSE),
        Value::Bool(true) => out.push(TAG_TRUE),
        Value::Int(i) => {
            out.push(TAG_INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::BigInt { negative: false } => out.push(TAG_BIG_POSITIVE),
        Value::BigInt { negative: true } => out.push(TAG_BIG_NEGATIVE),
        Value::Float(f) => {
            out.push(TAG_FLOAT);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Str(s) => {
            out.push(TAG_STR);
            encode_str(s, out);
        }
        Value::List(items) => {
            out.push(TAG_LIST);
            encode_len(items.len(), out);
            for item in items {
                encode(item, out);
            }
        }
        Value::Dict(entries) => {
            out.push(TAG_DICT);
            encode_len(entries.len(), out);
            for (key, item) in entries {
                encode_str(key, out);
                encode(item, out);
            }
        }
        Value::NonStringKeys => out.push(TAG_NON_STRING_KEYS),
        Value::Unsupported(name) => {
            out.push(TAG_UNSUPPORTED);
            encode_str(name, out);
        }
    }
}

/// Lengths are u32 on the wire; the encoders only see values bounded far below that by
/// the byte budgets, and a longer one saturates (and then fails to decode) rather than
/// wrapping into a different valid value.
fn encode_len(len: usize, out: &mut Vec<u8>) {
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
}

fn encode_str(s: &str, out: &mut Vec<u8>) {
    encode_len(s.len(), out);
    out.extend_from_slice(s.as_bytes());
}

/// Why bytes could not be decoded into a [`Value`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The value nests deeper than the decoder's limit.
    TooDeep,
    /// Truncated input, an unknown tag, invalid UTF-8 or trailing bytes.
    Malformed,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecodeError::TooDeep => "value nests too deeply",
            DecodeError::Malformed => "malformed value encoding",
        })
    }
}

impl std::error::Error for DecodeError {}

/// Decodes one value that must span all of `bytes`, nesting at most `max_depth` levels
/// (a scalar is depth 1, each container adds one: the seed's depth rule).
///
/// # Errors
///
/// [`DecodeError::TooDeep`] past `max_depth`; [`DecodeError::Malformed`] otherwise.
pub fn decode(bytes: &[u8], max_depth: usize) -> Result<Value, DecodeError> {
    let mut reader = Reader { bytes, pos: 0 };
    let value = reader.value(max_depth)?;
    if reader.pos != bytes.len() {
        return Err(DecodeError::Malformed);
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Malformed)?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or(DecodeError::Malformed)?;
        self.pos = end;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut raw = [0; 8];
        raw.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(raw))
    }

    fn len(&mut self) -> Result<usize, DecodeError> {
        let mut raw = [0; 4];
        raw.copy_from_slice(self.take(4)?);
        let len = u32::from_le_bytes(raw) as usize;
        // Every item takes at least one byte: a count beyond the remaining bytes is a
        // lie, and rejecting it here keeps allocations bounded by the input.
        if len > self.bytes.len() - self.pos {
            return Err(DecodeError::Malformed);
        }
        Ok(len)
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let len = self.len()?;
        let raw = self.take(len)?;
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::Malformed)
    }

    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        if depth == 0 {
            return Err(DecodeError::TooDeep);
        }
        Ok(match self.u8()? {
            TAG_NONE => Value::None,
            TAG_FALSE => Value::Bool(false),
            TAG_TRUE => Value::Bool(true),
            TAG_INT => Value::Int(self.u64()? as i64),
            TAG_BIG_POSITIVE => Value::BigInt { negative: false },
            TAG_BIG_NEGATIVE => Value::BigInt { negative: true },
            TAG_FLOAT => Value::Float(f64::from_bits(self.u64()?)),
            TAG_STR => Value::Str(self.string()?),
            TAG_LIST => {
                let len = self.len()?;
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    items.push(self.value(depth - 1)?);
                }
                Value::List(items)
            }
            TAG_DICT => {
                let len = self.len()?;
                let mut entries = Vec::with_capacity(len);
                for _ in 0..len {
                    let key = self.string()?;
                    entries.push((key, self.value(depth - 1)?));
                }
                Value::Dict(entries)
            }
            TAG_NON_STRING_KEYS => Value::NonStringKeys,
            TAG_UNSUPPORTED => Value::Unsupported(self.string()?),
            _ => return Err(DecodeError::Malformed),
        })
    }
}

/// The number of bytes of `value`'s type-preserving JSON encoding: object keys sorted,
/// strings with Go escaping, floats in shortest round-trip form keeping a `.0` or an
/// exponent. This is the size `MaxValueBytes` and `MaxIntermediateValueBytes` count.
/// Values JSON cannot carry (non-finite floats, big ints, unsupported values) count
/// as their closest textual size; conversion rejects them separately.
pub fn json_len(value: &Value) -> usize {
    match value {
        Value::None => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Int(i) => int_len(*i),
        Value::BigInt { negative } => 20 + usize::from(*negative),
        Value::Float(f) => float_json(*f).len(),
        Value::Str(s) => json_string_len(s),
        Value::List(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len).sum::<usize>()
        }
        Value::Dict(entries) => {
            2 + entries.len().saturating_sub(1)
                + entries
                    .iter()
                    .map(|(k, v)| json_string_len(k) + 1 + json_len(v))
                    .sum::<usize>()
        }
        Value::NonStringKeys => 2,
        Value::Unsupported(name) => name.len(),
    }
}

fn int_len(i: i64) -> usize {
    let mut digits = 1;
    let mut rest = i.unsigned_abs();
    while rest >= 10 {
        rest /= 10;
        digits += 1;
    }
    digits + usize::from(i < 0)
}

/// A float as the type-preserving JSON encoding writes it: Go's `encoding/json` form
/// (positional between 1e-6 and 1e21, else exponent) with `.0` appended when the text
/// would otherwise read as an integer, so `1.0` and `-0.0` stay floats.
pub fn float_json(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        let mut text = format!("{f}");
        if !text.contains('.') {
            text.push_str(".0");
        }
        text
    } else {
        // Rust writes `1e300` / `1.5e-7`; Go writes `1e+300` / `1.5e-07`, then its
        // JSON encoder trims the exponent's leading zero back to `e-7`.
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => text,
        }
    }
}

/// Length of `s` as a Go `encoding/json` string literal, quotes included: `<`, `>`,
/// `&`, U+2028 and U+2029 become `\uXXXX`; `\b \f \n \r \t " \\` two bytes; other
/// control characters six.
pub fn json_string_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        Value::Dict(vec![
            ("a".into(), Value::Int(-7)),
            ("b".into(), Value::Float(-0.0)),
            ("c".into(), Value::Float(1.0)),
            (
                "d".into(),
                Value::List(vec![
                    Value::None,
                    Value::Bool(true),
                    Value::Str("é\n".into()),
                    Value::BigInt { negative: true },
                ]),
            ),
            ("e".into(), Value::NonStringKeys),
            ("f".into(), Value::Unsupported("function".into())),
        ])
    }

    #[test]
    fn encoding_round_trips_every_variant_exactly() {
        let mut bytes = Vec::new();
        encode(&sample(), &mut bytes);
        let back = decode(&bytes, 3).unwrap();
        assert_eq!(back, sample());
        let Value::Dict(entries) = back else { panic!() };
        let Value::Float(zero) = entries[1].1 else {
            panic!()
        };
        assert!(zero.is_sign_negative(), "-0.0 keeps its sign");
    }

    #[test]
    fn decoding_enforces_depth_and_rejects_malformed_input() {
        let mut bytes = Vec::new();
        encode(&sample(), &mut bytes);
        assert_eq!(decode(&bytes, 2), Err(DecodeError::TooDeep));
        assert_eq!(
            decode(&bytes[..bytes.len() - 1], 3),
            Err(DecodeError::Malformed)
        );
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(decode(&trailing, 3), Err(DecodeError::Malformed));
        assert_eq!(decode(&[99], 3), Err(DecodeError::Malformed));
        // A count larger than the input is rejected before allocating.
        assert_eq!(
            decode(&[TAG_LIST, 0xff, 0xff, 0xff, 0xff], 3),
            Err(DecodeError::Malformed)
        );
        assert_eq!(
            decode(&[TAG_STR, 1, 0, 0, 0, 0xff], 3),
            Err(DecodeError::Malformed)
        );
    }

    #[test]
    fn json_len_matches_the_type_preserving_text() {
        let cases = [
            (Value::None, "null"),
            (Value::Bool(false), "false"),
            (Value::Int(0), "0"),
            (Value::Int(-120), "-120"),
            (Value::Int(i64::MIN), "-9223372036854775808"),
            (Value::Float(1.0), "1.0"),
            (Value::Float(-0.0), "-0.0"),
            (Value::Float(0.25), "0.25"),
            (Value::Float(1e21), "1e+21"),
            (Value::Float(1.5e-7), "1.5e-7"),
            (Value::Str("a<\"".into()), r#""a\u003c\"""#),
            (
                Value::List(vec![Value::Int(1), Value::Str("x".into())]),
                r#"[1,"x"]"#,
            ),
            (Value::List(vec![]), "[]"),
            (
                Value::Dict(vec![
                    ("k".into(), Value::Int(1)),
                    ("l".into(), Value::Dict(vec![])),
                ]),
                r#"{"k":1,"l":{}}"#,
            ),
        ];
        for (value, text) in cases {
            assert_eq!(json_len(&value), text.len(), "{value:?} as {text}");
        }
        assert_eq!(float_json(1e21), "1e+21");
        assert_eq!(float_json(123.0), "123.0");
    }
}
