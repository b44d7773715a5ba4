//! Bounded versions of the Rego builtins whose allocation an agent's arguments can
//! size without bound.
//!
//! A decision sees the call's arguments (`input.arguments`), which the agent
//! chooses. Most builtins allocate in proportion to their inputs, which the value
//! budgets bound, and the decision's time limit bounds how long it can keep
//! allocating. A few allocate by an argument's *value* or by a product of argument
//! sizes, all at once: `numbers.range(1, input.arguments.limit)` with a limit of 2e9
//! asked for 48 GB in one allocation, which aborts the process (Rust aborts on a
//! failed allocation, no error can be returned) and with it every client's session.
//! A cap inside the evaluation cannot help once the allocation is asked for, so
//! these builtins are replaced (regorus looks up extensions before builtins) by
//! versions that compute the size of their result first and fail the evaluation —
//! a policy failure, which denies — when it is over [`MAX_ELEMENTS`] or
//! [`MAX_STRING_BYTES`]. Same results otherwise.
//!
//! `sprintf` pads to widths read from its format string: a format that is not a
//! string literal in the policy is refused when the policy loads (see
//! `rego::refuse_builtins`).

use anyhow::{Result, bail};
use regorus::Value;

/// Most elements `numbers.range` and `numbers.range_step` may produce: far above
/// what an authorization decision ranges over, far below what hurts the server.
pub const MAX_ELEMENTS: u64 = 100_000;

/// Longest string `replace` may produce.
pub const MAX_STRING_BYTES: usize = 16 << 20;

/// Registers the bounded builtins on `engine`, before any policy is added.
///
/// # Errors
///
/// When an extension of the same name was registered already.
pub(crate) fn install(engine: &mut regorus::Engine) -> Result<()> {
    engine.add_extension("numbers.range".to_owned(), 2, Box::new(range))?;
    engine.add_extension("numbers.range_step".to_owned(), 3, Box::new(range_step))?;
    engine.add_extension("replace".to_owned(), 3, Box::new(replace))?;
    Ok(())
}

/// An integer operand of `builtin` (strict, like the builtin with strict errors).
fn integer(builtin: &str, operand: &str, value: &Value) -> Result<i64> {
    match value {
        Value::Number(_) => match value.as_i64() {
            Ok(n) => Ok(n),
            Err(_) => bail!("{builtin}: {operand} must be an integer"),
        },
        _ => bail!("{builtin}: {operand} must be a number"),
    }
}

/// The `count` values `from`, `from + step`, ... (`step` may be negative).
fn progression(builtin: &str, from: i64, step: i64, count: u64) -> Result<Value> {
    if count > MAX_ELEMENTS {
        bail!("{builtin}: {count} elements are more than the {MAX_ELEMENTS} a policy may build");
    }
    let values = (0..count as i64)
        .map(|i| Value::from(from + i * step))
        .collect::<Vec<_>>();
    Ok(Value::from(values))
}

/// `numbers.range(a, b)`: the integers from `a` to `b`, both included, ascending or
/// descending.
fn range(args: Vec<Value>) -> Result<Value> {
    const NAME: &str = "numbers.range";
    let [a, b] = args.as_slice() else {
        bail!("{NAME}: expects 2 arguments");
    };
    let a = integer(NAME, "the first operand", a)?;
    let b = integer(NAME, "the second operand", b)?;
    let step = if b >= a { 1 } else { -1 };
    progression(NAME, a, step, a.abs_diff(b).saturating_add(1))
}

/// `numbers.range_step(a, b, step)`: from `a` towards `b` by the positive `step`,
/// `b` included when reached.
fn range_step(args: Vec<Value>) -> Result<Value> {
    const NAME: &str = "numbers.range_step";
    let [a, b, step] = args.as_slice() else {
        bail!("{NAME}: expects 3 arguments");
    };
    let a = integer(NAME, "the first operand", a)?;
    let b = integer(NAME, "the second operand", b)?;
    let step = integer(NAME, "the step", step)?;
    if step <= 0 {
        bail!("{NAME}: step must be a positive integer");
    }
    let count = (a.abs_diff(b) / step.unsigned_abs()).saturating_add(1);
    progression(NAME, a, if b >= a { step } else { -step }, count)
}

/// `replace(s, old, new)`: every `old` in `s` replaced by `new` (an empty `old`
/// matches before every character and at the end, as Go's `strings.ReplaceAll`).
fn replace(args: Vec<Value>) -> Result<Value> {
    const NAME: &str = "replace";
    let [Value::String(s), Value::String(old), Value::String(new)] = args.as_slice() else {
        bail!("{NAME}: expects three strings");
    };
    let matches = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old.as_ref()).count()
    };
    let length = (s.len() - matches * old.len()).saturating_add(matches.saturating_mul(new.len()));
    if length > MAX_STRING_BYTES {
        bail!(
            "{NAME}: a result of {length} bytes is more than the {MAX_STRING_BYTES} a policy may build"
        );
    }
    Ok(Value::String(s.replace(old.as_ref(), new.as_ref()).into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &Value) -> Vec<i64> {
        values
            .as_array()
            .expect("an array")
            .iter()
            .map(|v| v.as_i64().expect("an integer"))
            .collect()
    }

    #[test]
    fn ranges_are_the_builtins_results() {
        let range_of = |a: i64, b: i64| ints(&range(vec![a.into(), b.into()]).expect("range"));
        assert_eq!(range_of(1, 4), vec![1, 2, 3, 4]);
        assert_eq!(range_of(2, -1), vec![2, 1, 0, -1]);
        assert_eq!(range_of(5, 5), vec![5]);
        let step_of = |a: i64, b: i64, s: i64| {
            ints(&range_step(vec![a.into(), b.into(), s.into()]).expect("range_step"))
        };
        assert_eq!(step_of(0, 10, 3), vec![0, 3, 6, 9]);
        assert_eq!(step_of(0, 9, 3), vec![0, 3, 6, 9]);
        assert_eq!(step_of(10, 0, 4), vec![10, 6, 2]);
        assert!(range_step(vec![0.into(), 4.into(), 0.into()]).is_err());
        assert!(range(vec![Value::from(1.5), 4.into()]).is_err());
        assert!(range(vec![Value::from("1"), 4.into()]).is_err());
    }

    #[test]
    fn ranges_past_the_cap_fail_before_allocating() {
        let error = range(vec![1.into(), 2_000_000_000i64.into()])
            .expect_err("too many elements")
            .to_string();
        assert_eq!(
            error,
            "numbers.range: 2000000000 elements are more than the 100000 a policy may build"
        );
        assert!(range(vec![i64::MIN.into(), i64::MAX.into()]).is_err());
        assert!(range_step(vec![i64::MIN.into(), i64::MAX.into(), 1.into()]).is_err());
        let at_cap = range(vec![1.into(), (MAX_ELEMENTS as i64).into()]).expect("at the cap");
        assert_eq!(
            at_cap.as_array().expect("array").len(),
            MAX_ELEMENTS as usize
        );
    }

    #[test]
    fn replace_is_go_replace_all_within_the_cap() {
        let replaced = |s: &str, old: &str, new: &str| {
            replace(vec![s.into(), old.into(), new.into()])
                .map(|v| v.as_string().expect("a string").to_string())
        };
        assert_eq!(replaced("a.b.c", ".", "::").expect("ok"), "a::b::c");
        assert_eq!(replaced("ab", "", "-").expect("ok"), "-a-b-");
        assert_eq!(replaced("aaa", "aa", "b").expect("ok"), "ba");
        assert_eq!(replaced("é", "", "-").expect("ok"), "-é-");
        let big = "x".repeat(1 << 20);
        let error = replaced(&"a".repeat(1 << 20), "", &big).expect_err("too long");
        assert_eq!(
            error.to_string(),
            "replace: a result of 1099513724928 bytes is more than the 16777216 a policy may build"
        );
        assert!(replace(vec![1.into(), "".into(), "".into()]).is_err());
    }
}
