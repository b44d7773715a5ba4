//! The fixed language surface of the seed: starlark-rust's standard globals plus
//! `json` (decode, encode, indent), `math`, `sum` and a `print` that discards; its
//! `range` is starlark-rust's with a message that says what an argument past 32
//! bits is.

use starlark::environment::{Globals, GlobalsBuilder};
use starlark::values::none::NoneType;
use starlark::values::range::Range;
use starlark::values::tuple::UnpackTuple;
use starlark::values::{Heap, UnpackValue, Value};
use starlark_derive::starlark_module;

/// A program run once inside `init`, touching the common paths (comprehensions,
/// dicts, strings, sorting, json, math, sum) so their lazy setup lands in the snapshot.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) const WARM_UP: &str = r#"
def helper(item):
    return {"id": "x%d" % item, "score": item * 1.5, "tags": ["a", "b"]}

def main():
    items = [helper(i) for i in range(20)]
    ranked = sorted(items, key = lambda item: -item["score"])
    text = json.encode({"items": ranked[:3]})
    back = json.decode(text)
    pretty = json.indent(text, indent = "  ")
    words = " ".join([str(i) for i in range(5)]).split(" ")
    return {
        "n": len(back["items"]) + len(words) + len(pretty),
        "total": sum([item["score"] for item in items]) + math.sqrt(2.0) + math.floor(1.5),
        "ok": all([True]) and any([1]) and hasattr(items, "append"),
    }
"#;

/// Builds the globals every program sees.
pub(crate) fn globals() -> Globals {
    let mut builder = GlobalsBuilder::standard();
    surface_functions(&mut builder);
    builder.namespace("json", json_members);
    builder.namespace("math", math_members);
    builder.build()
}

/// The surface as the seed prints it: `top-level: ...`, `json: ...`, `math: ...`, each
/// sorted the way the seed sorts (ASCII, so `False None True` come first).
pub(crate) fn listing(globals: &Globals) -> String {
    let mut top: Vec<String> = globals.names().map(|n| n.as_str().to_owned()).collect();
    top.sort();
    let members = |name: &str| -> String {
        let mut names = globals
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value.to_value().dir_attr())
            .unwrap_or_default();
        names.sort();
        names.join(", ")
    };
    format!(
        "top-level: {}\njson: {}\nmath: {}",
        top.join(", "),
        members("json"),
        members("math")
    )
}

fn error(message: String) -> starlark::Error {
    starlark::Error::new_other(Message(message))
}

#[derive(Debug)]
struct Message(String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

/// An int or float argument of a math function, as a float.
fn number(function: &str, value: Value<'_>) -> starlark::Result<f64> {
    match value.get_type() {
        "float" => Ok(starlark::values::float::StarlarkFloat::unpack_value(value)
            .ok()
            .flatten()
            .map_or(f64::NAN, |f| f.0)),
        "int" => match i64::unpack_value(value) {
            Ok(Some(i)) => Ok(i as f64),
            _ => value.to_repr().parse::<f64>().map_err(|_| {
                error(format!(
                    "math.{function}: int too large to convert to float"
                ))
            }),
        },
        other => Err(error(format!(
            "math.{function}: got {other}, want float or int"
        ))),
    }
}

/// The ints a `range()` holds: starlark-rust's ranges are of 32-bit ints.
const RANGE_BOUNDS: &str = "-2147483648 to 2147483647";

/// Argument `position` (1-based) of `range()` as the 32-bit int starlark-rust's
/// range holds, or why it is not one.
fn range_argument(position: usize, value: Value<'_>) -> starlark::Result<i32> {
    if let Ok(Some(int)) = i32::unpack_value(value) {
        return Ok(int);
    }
    Err(error(match value.get_type() {
        "int" => format!(
            "range: argument {position} is {}, outside the ints a range holds ({RANGE_BOUNDS})",
            value.to_repr()
        ),
        other => format!("range: argument {position} must be an int, not {other}"),
    }))
}

#[starlark_module]
fn surface_functions(builder: &mut GlobalsBuilder) {
    /// `range(stop)`, `range(start, stop)`, `range(start, stop, step)`: as
    /// starlark-rust's, which takes 32-bit ints only and otherwise says nothing
    /// clearer than "Error unpacking value for parameter `a1` of type `int`".
    #[starlark(as_type = Range, speculative_exec_safe)]
    fn range<'v>(
        #[starlark(require = pos)] a1: Value<'v>,
        #[starlark(require = pos)] a2: Option<Value<'v>>,
        #[starlark(require = pos)] step: Option<Value<'v>>,
    ) -> starlark::Result<Range> {
        let first = range_argument(1, a1)?;
        let (start, stop) = match a2 {
            Some(a2) => (first, range_argument(2, a2)?),
            None => (0, first),
        };
        let step = match step {
            Some(step) => range_argument(3, step)?,
            None => 1,
        };
        match std::num::NonZeroI32::new(step) {
            Some(step) => Ok(Range::new(start, stop, step)),
            // starlark-rust's own text.
            None => Err(error(
                "Third argument of range (step) cannot be zero".to_owned(),
            )),
        }
    }

    /// Discards its arguments: program output is not part of a result.
    fn print(#[starlark(args)] args: UnpackTuple<Value>) -> starlark::Result<NoneType> {
        let _ = args;
        Ok(NoneType)
    }

    /// `sum(iterable)`: ints add as ints until the first float, then everything is
    /// float; anything but int and float is rejected with its index.
    fn sum<'v>(
        #[starlark(require = pos)] iterable: Value<'v>,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let mut total = heap.alloc(0);
        for (index, item) in iterable.iterate(heap)?.enumerate() {
            let kind = item.get_type();
            if kind != "int" && kind != "float" {
                return Err(error(format!(
                    "sum: at index {index}, got {kind}, want int or float"
                )));
            }
            total = total
                .add(item, heap)
                .map_err(|_| error("sum: int too large to convert to float".into()))?;
        }
        Ok(total)
    }
}

#[starlark_module]
fn json_members(builder: &mut GlobalsBuilder) {
    /// `json.encode(x)`: compact JSON of a value.
    fn encode(#[starlark(require = pos)] x: Value) -> starlark::Result<String> {
        x.to_json().map_err(|e| error(format!("json.encode: {e}")))
    }

    /// `json.decode(x)`: the value of a JSON text (object keys keep their order).
    fn decode<'v>(
        #[starlark(require = pos)] x: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        Ok(heap.alloc(decode_json(x).map_err(error)?))
    }

    /// `json.indent(str, *, prefix="", indent="\t")`: the JSON text re-indented.
    fn indent(
        #[starlark(require = pos)] x: &str,
        #[starlark(require = named, default = "")] prefix: &str,
        #[starlark(require = named, default = "\t")] indent: &str,
    ) -> starlark::Result<String> {
        serde_json::from_str::<serde_json::Value>(x)
            .map_err(|e| error(format!("json.indent: {e}")))?;
        Ok(reindent(x, prefix, indent))
    }
}

/// `json.decode`'s parse: the JSON value of `text`, or the message the program
/// gets (`json.decode: ...`).
pub(crate) fn decode_json(text: &str) -> Result<serde_json::Value, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("json.decode: {e}"))?;
    check_numbers(&value).map_err(|()| "json.decode: number out of range".to_owned())?;
    Ok(value)
}

/// Refuses a number no int or float can hold (`1e400`), which a program could not
/// represent.
fn check_numbers(value: &serde_json::Value) -> Result<(), ()> {
    match value {
        serde_json::Value::Number(number) => {
            let fits =
                number.is_i64() || number.is_u64() || number.as_f64().is_some_and(f64::is_finite);
            if fits { Ok(()) } else { Err(()) }
        }
        serde_json::Value::Array(items) => items.iter().try_for_each(check_numbers),
        serde_json::Value::Object(entries) => entries.values().try_for_each(check_numbers),
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::String(_) => {
            Ok(())
        }
    }
}

/// Go's `json.Indent`: every element on its own line, `prefix` then `indent` repeated
/// per level at the start of each new line, empty containers kept as `[]` / `{}`.
pub(crate) fn reindent(text: &str, prefix: &str, indent: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut pending_open = false;
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(prefix);
        for _ in 0..depth {
            out.push_str(indent);
        }
    };
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        if c.is_ascii_whitespace() {
            continue;
        }
        if pending_open {
            pending_open = false;
            if c == ']' || c == '}' {
                depth -= 1;
                out.push(c);
                continue;
            }
            newline(&mut out, depth);
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '[' | '{' => {
                out.push(c);
                depth += 1;
                pending_open = true;
            }
            ']' | '}' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c => out.push(c),
        }
    }
    out
}

/// Lanczos approximation (g = 7, n = 9) of the gamma function, with the reflection
/// formula below 0.5; accurate to ~15 digits, matching Go's `math.Gamma` closely.
fn lanczos_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x.is_nan() {
        return f64::NAN;
    }
    if x == x.floor() && x <= 0.0 {
        return f64::NAN;
    }
    if x < 0.5 {
        return std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * lanczos_gamma(1.0 - x));
    }
    if x == x.floor() && x <= 171.0 {
        let mut product = 1.0;
        let mut k = 2.0;
        while k < x {
            product *= k;
            k += 1.0;
        }
        return product;
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * sum
}

/// A float that must be an integer to become one (`math.ceil`, `math.floor`).
fn to_int<'v>(function: &str, f: f64, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
    if f.is_finite() && f.abs() < 9.2e18 {
        Ok(heap.alloc(f as i64))
    } else {
        Err(error(format!("math.{function}: cannot convert {f} to int")))
    }
}

#[starlark_module]
fn math_members(builder: &mut GlobalsBuilder) {
    const e: f64 = std::f64::consts::E;
    const pi: f64 = std::f64::consts::PI;

    fn acos(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("acos", x)?.acos())
    }
    fn acosh(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("acosh", x)?.acosh())
    }
    fn asin(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("asin", x)?.asin())
    }
    fn asinh(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("asinh", x)?.asinh())
    }
    fn atan(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("atan", x)?.atan())
    }
    fn atan2(
        #[starlark(require = pos)] y: Value,
        #[starlark(require = pos)] x: Value,
    ) -> starlark::Result<f64> {
        Ok(number("atan2", y)?.atan2(number("atan2", x)?))
    }
    fn atanh(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("atanh", x)?.atanh())
    }
    fn ceil<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        if x.get_type() == "int" {
            return Ok(x);
        }
        to_int("ceil", number("ceil", x)?.ceil(), heap)
    }
    fn copysign(
        #[starlark(require = pos)] x: Value,
        #[starlark(require = pos)] y: Value,
    ) -> starlark::Result<f64> {
        Ok(number("copysign", x)?.copysign(number("copysign", y)?))
    }
    fn cos(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("cos", x)?.cos())
    }
    fn cosh(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("cosh", x)?.cosh())
    }
    fn degrees(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("degrees", x)?.to_degrees())
    }
    fn exp(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("exp", x)?.exp())
    }
    fn fabs(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("fabs", x)?.abs())
    }
    fn floor<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        if x.get_type() == "int" {
            return Ok(x);
        }
        to_int("floor", number("floor", x)?.floor(), heap)
    }
    fn gamma(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(lanczos_gamma(number("gamma", x)?))
    }
    fn hypot(
        #[starlark(require = pos)] x: Value,
        #[starlark(require = pos)] y: Value,
    ) -> starlark::Result<f64> {
        Ok(number("hypot", x)?.hypot(number("hypot", y)?))
    }
    fn log(
        #[starlark(require = pos)] x: Value,
        #[starlark(require = pos)] base: Option<Value>,
    ) -> starlark::Result<f64> {
        let x = number("log", x)?;
        Ok(match base {
            None => x.ln(),
            Some(base) => x.ln() / number("log", base)?.ln(),
        })
    }
    fn r#mod(
        #[starlark(require = pos)] x: Value,
        #[starlark(require = pos)] y: Value,
    ) -> starlark::Result<f64> {
        Ok(number("mod", x)? % number("mod", y)?)
    }
    fn pow(
        #[starlark(require = pos)] x: Value,
        #[starlark(require = pos)] y: Value,
    ) -> starlark::Result<f64> {
        Ok(number("pow", x)?.powf(number("pow", y)?))
    }
    fn radians(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("radians", x)?.to_radians())
    }
    fn remainder(
        #[starlark(require = pos)] x: Value,
        #[starlark(require = pos)] y: Value,
    ) -> starlark::Result<f64> {
        let (x, y) = (number("remainder", x)?, number("remainder", y)?);
        Ok(x - (x / y).round_ties_even() * y)
    }
    fn round(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("round", x)?.round())
    }
    fn sin(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("sin", x)?.sin())
    }
    fn sinh(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("sinh", x)?.sinh())
    }
    fn sqrt(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("sqrt", x)?.sqrt())
    }
    fn tan(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("tan", x)?.tan())
    }
    fn tanh(#[starlark(require = pos)] x: Value) -> starlark::Result<f64> {
        Ok(number("tanh", x)?.tanh())
    }
}

#[cfg(test)]
mod tests {
    use starlark::environment::Module;
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};

    /// `expression` evaluated with the surface's globals: its repr, or the error's
    /// own text.
    fn eval(expression: &str) -> Result<String, String> {
        let ast = AstModule::parse("t", expression.to_owned(), &Dialect::Standard)
            .map_err(|e| e.to_string())?;
        let globals = super::globals();
        Module::with_temp_heap(|module| {
            let mut eval = Evaluator::new(&module);
            eval.eval_module(ast, &globals)
                .map(|value| value.to_repr())
                .map_err(|error| error.without_diagnostic().to_string())
        })
    }

    #[test]
    fn range_is_starlarks_with_a_message_past_32_bits() {
        assert_eq!(eval("list(range(3))"), Ok("[0, 1, 2]".to_owned()));
        assert_eq!(eval("list(range(3, 10, 2))"), Ok("[3, 5, 7, 9]".to_owned()));
        assert_eq!(eval("list(range(10, 3, -3))"), Ok("[10, 7, 4]".to_owned()));
        assert_eq!(eval("type(range(1))"), Ok("\"range\"".to_owned()));
        assert_eq!(
            eval("range(2147483647)"),
            Ok("range(2147483647)".to_owned())
        );
        assert_eq!(
            eval("range(1 << 62)"),
            Err("range: argument 1 is 4611686018427387904, outside the ints a range holds (-2147483648 to 2147483647)".to_owned())
        );
        assert_eq!(
            eval("range(0, -2147483649)"),
            Err("range: argument 2 is -2147483649, outside the ints a range holds (-2147483648 to 2147483647)".to_owned())
        );
        assert_eq!(
            eval("range(0, 10, 1 << 32)"),
            Err("range: argument 3 is 4294967296, outside the ints a range holds (-2147483648 to 2147483647)".to_owned())
        );
        assert_eq!(
            eval("range(1, 'x')"),
            Err("range: argument 2 must be an int, not string".to_owned())
        );
        assert_eq!(
            eval("range(0, 3, 0)"),
            Err("Third argument of range (step) cannot be zero".to_owned())
        );
    }
}
