//! The values that cross between an agent's program, the host and plugins.
//!
//! Three places exchange values: the sandboxed interpreter (`host/runner`) sends a
//! native call's keyword arguments and `main`'s result to the host, and the host sends
//! capability results back. All of them use [`Value`], which keeps what JSON loses: an
//! int stays an int, `1.0` stays a float, `-0.0` keeps its sign, and an integer too
//! large for 64 bits is still recognisable as one (so binding can say "overflows
//! int64" instead of "must be an integer").
//!
//! The crate is compiled twice, into the host and into the runner for
//! `wasm32-wasip2`, so its one dependency (`zmij`, shortest float digits) is
//! pure Rust without dependencies of its own. [`encode`]/[`decode`] are the wire form
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
    Writer::new(out).value(value);
}

/// Writes the wire form piece by piece (a container's header, then its items), so a
/// value held in another form (the interpreter's) is encoded without building a
/// [`Value`] first. A writer made with [`Writer::counting`] also counts the
/// [`json_len`] of what it wrote, in the same walk.
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
    /// The JSON length so far, when counted.
    json_len: Option<usize>,
    /// Past this JSON length nothing more is appended (see [`Writer::counting_within`]).
    limit: usize,
}

/// A point of a [`Writer`] to go back to ([`Writer::rewind`]).
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    bytes: usize,
    json_len: Option<usize>,
}

impl<'a> Writer<'a> {
    /// A writer appending to `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Self {
            out,
            json_len: None,
            limit: usize::MAX,
        }
    }

    /// A writer appending to `out` that counts the JSON length of what it writes
    /// (the size the value budgets are defined by).
    pub fn counting(out: &'a mut Vec<u8>) -> Self {
        Self::counting_within(out, usize::MAX)
    }

    /// A counting writer that stops appending once the count passes `limit` (it
    /// goes on counting). For a value the caller refuses past `limit`: a value far
    /// larger than its budget is counted, never copied.
    pub fn counting_within(out: &'a mut Vec<u8>, limit: usize) -> Self {
        Self {
            out,
            json_len: Some(0),
            limit,
        }
    }

    /// The [`json_len`] of everything written so far; `None` unless the writer was
    /// made with [`Writer::counting`] or [`Writer::counting_within`].
    pub fn json_len(&self) -> Option<usize> {
        self.json_len
    }

    /// Adds `len()` to the JSON length, when counted (a float's length is only
    /// worked out for a writer that counts), and says whether the bytes of the piece
    /// are to be appended: not once the count passed the limit.
    fn count(&mut self, len: impl FnOnce() -> usize) -> bool {
        match &mut self.json_len {
            Some(total) => {
                *total = total.saturating_add(len());
                *total <= self.limit
            }
            None => true,
        }
    }

    /// Where the writer is now.
    pub fn mark(&self) -> Mark {
        Mark {
            bytes: self.out.len(),
            json_len: self.json_len,
        }
    }

    /// Forgets everything written after `mark`.
    pub fn rewind(&mut self, mark: Mark) {
        self.out.truncate(mark.bytes);
        self.json_len = mark.json_len;
    }

    /// Writes `value` whole.
    pub fn value(&mut self, value: &Value) {
        match value {
            Value::None => self.none(),
            Value::Bool(b) => self.bool(*b),
            Value::Int(i) => self.int(*i),
            Value::BigInt { negative } => self.big_int(*negative),
            Value::Float(f) => self.float(*f),
            Value::Str(s) => self.str(s),
            Value::List(items) => {
                self.list(items.len());
                for item in items {
                    self.value(item);
                }
            }
            Value::Dict(entries) => {
                self.dict(entries.len());
                for (key, item) in entries {
                    self.key(key);
                    self.value(item);
                }
            }
            Value::NonStringKeys => self.non_string_keys(),
            Value::Unsupported(name) => self.unsupported(name),
        }
    }

    /// `None`.
    pub fn none(&mut self) {
        if self.count(|| 4) {
            self.out.push(TAG_NONE);
        }
    }

    /// A boolean.
    pub fn bool(&mut self, b: bool) {
        if self.count(|| if b { 4 } else { 5 }) {
            self.out.push(if b { TAG_TRUE } else { TAG_FALSE });
        }
    }

    /// An int of 64 bits.
    pub fn int(&mut self, i: i64) {
        if self.count(|| int_len(i)) {
            self.out.push(TAG_INT);
            self.out.extend_from_slice(&i.to_le_bytes());
        }
    }

    /// An int past 64 bits, by its sign.
    pub fn big_int(&mut self, negative: bool) {
        if self.count(|| 20 + usize::from(negative)) {
            self.out.push(if negative {
                TAG_BIG_NEGATIVE
            } else {
                TAG_BIG_POSITIVE
            });
        }
    }

    /// A float.
    pub fn float(&mut self, f: f64) {
        if self.count(|| float_json_len(f)) {
            self.out.push(TAG_FLOAT);
            self.out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
    }

    /// A string.
    pub fn str(&mut self, s: &str) {
        if self.count(|| json_string_len(s)) {
            self.out.push(TAG_STR);
            self.raw_str(s);
        }
    }

    /// The header of a list of `len` items; write the items next.
    pub fn list(&mut self, len: usize) {
        if self.count(|| 2 + len.saturating_sub(1)) {
            self.out.push(TAG_LIST);
            encode_len(len, self.out);
        }
    }

    /// The header of a dict of `len` entries; write each entry next, as
    /// [`Writer::key`] then its value.
    pub fn dict(&mut self, len: usize) {
        if self.count(|| 2 + len.saturating_sub(1)) {
            self.out.push(TAG_DICT);
            encode_len(len, self.out);
        }
    }

    /// A dict entry's key.
    pub fn key(&mut self, key: &str) {
        if self.count(|| json_string_len(key) + 1) {
            self.raw_str(key);
        }
    }

    /// A dict with a key that is not a string.
    pub fn non_string_keys(&mut self) {
        if self.count(|| 2) {
            self.out.push(TAG_NON_STRING_KEYS);
        }
    }

    /// A value of a type that cannot cross, by its type name.
    pub fn unsupported(&mut self, name: &str) {
        if self.count(|| name.len()) {
            self.out.push(TAG_UNSUPPORTED);
            self.raw_str(name);
        }
    }

    fn raw_str(&mut self, s: &str) {
        encode_len(s.len(), self.out);
        self.out.extend_from_slice(s.as_bytes());
    }
}

/// Lengths are u32 on the wire; the encoders only see values bounded far below that by
/// the byte budgets, and a longer one saturates (and then fails to decode) rather than
/// wrapping into a different valid value.
fn encode_len(len: usize, out: &mut Vec<u8>) {
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
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
    decode_with(bytes, max_depth, &mut Tree)
}

/// What [`decode_with`] builds each decoded piece with: a [`Value`] (as [`decode`]
/// does), or another form (the interpreter's values) without a [`Value`] in between.
pub trait Build {
    /// What a decoded value becomes.
    type Out;
    /// `None`.
    fn none(&mut self) -> Self::Out;
    /// A boolean.
    fn bool(&mut self, b: bool) -> Self::Out;
    /// An int of 64 bits.
    fn int(&mut self, i: i64) -> Self::Out;
    /// An int past 64 bits, by its sign.
    fn big_int(&mut self, negative: bool) -> Self::Out;
    /// A float.
    fn float(&mut self, f: f64) -> Self::Out;
    /// A string.
    fn str(&mut self, s: &str) -> Self::Out;
    /// A list of the items built so far.
    fn list(&mut self, items: Vec<Self::Out>) -> Self::Out;
    /// A dict's entries while they are decoded: each is added as it is read, so
    /// that no list of them is collected first.
    type Entries;
    /// The start of a dict of `len` entries.
    fn dict_start(&mut self, len: usize) -> Self::Entries;
    /// Adds one entry to a dict, in wire order.
    fn dict_entry(&mut self, entries: &mut Self::Entries, key: &str, value: Self::Out);
    /// The dict of `entries`.
    fn dict(&mut self, entries: Self::Entries) -> Self::Out;
    /// A dict with a key that is not a string.
    fn non_string_keys(&mut self) -> Self::Out;
    /// A value of a type that cannot cross, by its type name.
    fn unsupported(&mut self, name: &str) -> Self::Out;
}

/// Builds [`Value`]s: [`decode`]'s [`Build`].
struct Tree;

impl Build for Tree {
    type Out = Value;
    type Entries = Vec<(String, Value)>;
    fn none(&mut self) -> Value {
        Value::None
    }
    fn bool(&mut self, b: bool) -> Value {
        Value::Bool(b)
    }
    fn int(&mut self, i: i64) -> Value {
        Value::Int(i)
    }
    fn big_int(&mut self, negative: bool) -> Value {
        Value::BigInt { negative }
    }
    fn float(&mut self, f: f64) -> Value {
        Value::Float(f)
    }
    fn str(&mut self, s: &str) -> Value {
        Value::Str(s.to_owned())
    }
    fn list(&mut self, items: Vec<Value>) -> Value {
        Value::List(items)
    }
    fn dict_start(&mut self, len: usize) -> Self::Entries {
        Vec::with_capacity(len)
    }
    fn dict_entry(&mut self, entries: &mut Self::Entries, key: &str, value: Value) {
        entries.push((key.to_owned(), value));
    }
    fn dict(&mut self, entries: Self::Entries) -> Value {
        Value::Dict(entries)
    }
    fn non_string_keys(&mut self) -> Value {
        Value::NonStringKeys
    }
    fn unsupported(&mut self, name: &str) -> Value {
        Value::Unsupported(name.to_owned())
    }
}

/// Decodes one value that must span all of `bytes` with `build`, nesting at most
/// `max_depth` levels, as [`decode`] does.
///
/// # Errors
///
/// [`DecodeError::TooDeep`] past `max_depth`; [`DecodeError::Malformed`] otherwise.
pub fn decode_with<B: Build>(
    bytes: &[u8],
    max_depth: usize,
    build: &mut B,
) -> Result<B::Out, DecodeError> {
    let mut reader = Reader { bytes, pos: 0 };
    let value = reader.value(max_depth, build)?;
    if reader.pos != bytes.len() {
        return Err(DecodeError::Malformed);
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

// The readers of single fields are inlined into `value` (which, being recursive,
// is not inlined itself): a call per byte read was a tenth of decoding a result.
impl<'a> Reader<'a> {
    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Malformed)?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or(DecodeError::Malformed)?;
        self.pos = end;
        Ok(slice)
    }

    #[inline(always)]
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    #[inline(always)]
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut raw = [0; 8];
        raw.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(raw))
    }

    #[inline(always)]
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

    #[inline(always)]
    fn string(&mut self) -> Result<&'a str, DecodeError> {
        let len = self.len()?;
        let raw = self.take(len)?;
        std::str::from_utf8(raw).map_err(|_| DecodeError::Malformed)
    }

    fn value<B: Build>(&mut self, depth: usize, build: &mut B) -> Result<B::Out, DecodeError> {
        if depth == 0 {
            return Err(DecodeError::TooDeep);
        }
        Ok(match self.u8()? {
            TAG_NONE => build.none(),
            TAG_FALSE => build.bool(false),
            TAG_TRUE => build.bool(true),
            TAG_INT => build.int(self.u64()? as i64),
            TAG_BIG_POSITIVE => build.big_int(false),
            TAG_BIG_NEGATIVE => build.big_int(true),
            TAG_FLOAT => build.float(f64::from_bits(self.u64()?)),
            TAG_STR => {
                let s = self.string()?;
                build.str(s)
            }
            TAG_LIST => {
                let len = self.len()?;
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    items.push(self.value(depth - 1, build)?);
                }
                build.list(items)
            }
            TAG_DICT => {
                let len = self.len()?;
                let mut entries = build.dict_start(len);
                for _ in 0..len {
                    let key = self.string()?;
                    let value = self.value(depth - 1, build)?;
                    build.dict_entry(&mut entries, key, value);
                }
                build.dict(entries)
            }
            TAG_NON_STRING_KEYS => build.non_string_keys(),
            TAG_UNSUPPORTED => {
                let name = self.string()?;
                build.unsupported(name)
            }
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
        Value::Float(f) => float_json_len(*f),
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

/// The length of [`float_json`]'s text, without building it: a float's length is
/// counted for every capability result, and formatting it costs more than the call
/// around it. zmij and Rust's formatting both find the shortest digits that read
/// back as the same float, so only where the decimal point goes differs; it is
/// placed here as [`float_json`] places it.
pub fn float_json_len(f: f64) -> usize {
    if !f.is_finite() {
        return if f.is_nan() { 3 } else { 4 };
    }
    let sign = usize::from(f.is_sign_negative());
    let abs = f.abs();
    if abs == 0.0 {
        return sign + 3;
    }
    // A whole number below 2^53 prints as its integer digits and `.0` (the common
    // case: counts, sizes and round values carried as floats).
    if abs < 9_007_199_254_740_992.0 && abs.fract() == 0.0 {
        return sign + int_len(abs as i64) + 2;
    }
    if let Some(places) = few_decimal_places(abs) {
        return sign + int_len(abs as i64) + 1 + places;
    }
    let mut buffer = zmij::Buffer::new();
    let (digits, exponent) = shortest_digits(buffer.format_finite(abs));
    if (1e-6..1e21).contains(&abs) {
        match usize::try_from(exponent) {
            // `ddd.0`, or digits around the point.
            Ok(whole) if digits <= whole + 1 => sign + whole + 3,
            Ok(_) => sign + digits + 1,
            // `0.000ddd`.
            Err(_) => sign + 1 + exponent.unsigned_abs() as usize + digits,
        }
    } else {
        // `d.ddde-7` or `de+21`.
        let mantissa = if digits > 1 { digits + 1 } else { 1 };
        sign + mantissa + 2 + int_len(i64::from(exponent.unsigned_abs()))
    }
}

/// How many digits after the point the shortest text of `abs` (positive, not whole)
/// has, when that is at most [`FEW_PLACES`] and `abs` is below 10^12: prices,
/// ratios and averages of small numbers, the usual floats of a result.
///
/// `n / 10^k` (both exact in a double, and the division correctly rounded) is the
/// double nearest to the decimal n·10^-k; when it is `abs`, that decimal reads back
/// as `abs`, and none with fewer places does (the smaller `k` were tried first). So
/// the shortest text has exactly `k` places. `n` is `abs · 10^k` rounded: below
/// 10^12 the product's error is far below one half, so no such decimal is missed.
/// Anything else is left to the full search.
fn few_decimal_places(abs: f64) -> Option<usize> {
    if abs >= 1e12 {
        return None;
    }
    let mut scale = 1.0;
    for places in 1..=FEW_PLACES {
        scale *= 10.0;
        let n = (abs * scale).round();
        if n / scale == abs {
            return Some(places);
        }
    }
    None
}

/// The most digits after the point [`few_decimal_places`] looks for.
const FEW_PLACES: usize = 3;

/// The number of significant digits of a positive float's shortest text (as zmij
/// writes it: `123.45`, `0.001`, `1e21`, `1.5e-7`) and the decimal exponent of the
/// first one.
fn shortest_digits(text: &str) -> (usize, i32) {
    let bytes = text.as_bytes();
    let (mantissa, exponent) = match bytes.iter().position(|&b| b == b'e') {
        Some(e) => (&bytes[..e], text[e + 1..].parse::<i32>().unwrap_or(0)),
        None => (bytes, 0),
    };
    let mut whole = mantissa.len();
    let mut digits = 0;
    let mut leading: usize = 0;
    let mut last_nonzero: usize = 0;
    for (i, &b) in mantissa.iter().enumerate() {
        if b == b'.' {
            whole = i;
            continue;
        }
        digits += 1;
        if b != b'0' {
            last_nonzero = digits;
        } else if last_nonzero == 0 {
            leading += 1;
        }
    }
    // The text of a positive float has a digit other than 0.
    let significant = last_nonzero.saturating_sub(leading).max(1);
    let point = i32::try_from(whole).unwrap_or(0) - i32::try_from(leading).unwrap_or(0);
    (significant, point + exponent - 1)
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
    fn a_rewound_writer_forgets_what_it_wrote_after_the_mark() {
        let mut bytes = Vec::new();
        let mut writer = Writer::counting(&mut bytes);
        writer.list(2);
        writer.int(7);
        let mark = writer.mark();
        writer.dict(1);
        writer.key("k");
        writer.str("v");
        writer.rewind(mark);
        writer.non_string_keys();
        assert_eq!(writer.json_len(), Some("[7,{}]".len()));
        let expected = Value::List(vec![Value::Int(7), Value::NonStringKeys]);
        assert_eq!(decode(&bytes, 8), Ok(expected));
    }

    #[test]
    fn a_writer_within_a_limit_counts_past_it_without_copying() {
        let big = "x".repeat(1 << 20);
        let mut bytes = Vec::new();
        let mut writer = Writer::counting_within(&mut bytes, 10);
        writer.list(2);
        writer.int(1);
        writer.str(&big);
        writer.int(2);
        assert_eq!(writer.json_len(), Some(2 + 1 + 1 + (big.len() + 2) + 1));
        // The list header and the first item (4 bytes of JSON so far), nothing of
        // the string or after it.
        assert_eq!(bytes.len(), 5 + 9);
    }

    #[test]
    fn float_json_len_is_the_length_of_float_json() {
        let mut floats = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.1,
            0.25,
            1e-6,
            1e-6_f64.next_down(),
            1e-7,
            1.5e-7,
            1e21,
            1e21_f64.next_down(),
            1e20,
            123456789012345680000.0,
            1e15,
            1e16,
            1e17,
            5e-324,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            f64::EPSILON,
            100.0,
            1234.5,
            0.000123,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for exponent in -330..=310 {
            let power = format!("1e{exponent}").parse::<f64>().unwrap_or(0.0);
            floats.extend([power, -power, power * 1.5, power * 3.25, power.next_up()]);
        }
        // Every exponent and plenty of mantissas: a fixed xorshift over the bits.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            floats.push(f64::from_bits(state));
            floats.push((state % 1_000_000) as f64 / 1000.0);
        }
        // Decimals with one to four places (four is past the shortcut), their
        // neighbours, and the shortcut's upper bound.
        for places in 1..=4 {
            let scale = 10f64.powi(places);
            let bound = 10_i64.pow(12 + places as u32);
            for n in (0..20_000).chain(bound - 10_000..bound + 10_000) {
                let f = n as f64 / scale;
                floats.extend([f, -f, f.next_up(), f.next_down()]);
            }
        }
        for f in floats {
            assert_eq!(
                float_json_len(f),
                float_json(f).len(),
                "{f:e} as {}",
                float_json(f)
            );
        }
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
            let mut bytes = Vec::new();
            let mut writer = Writer::counting(&mut bytes);
            writer.value(&value);
            assert_eq!(writer.json_len(), Some(text.len()), "{value:?} written");
            assert_eq!(Writer::new(&mut Vec::new()).json_len(), None);
        }
        assert_eq!(float_json(1e21), "1e+21");
        assert_eq!(float_json(123.0), "123.0");
    }
}
