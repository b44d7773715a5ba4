//! Entry points for the interpreter's fuzz targets (`fuzz/`, `cargo xtask fuzz`),
//! run natively: each takes arbitrary bytes, feeds them to a check or parser the
//! interpreter runs on a program's source or on a JSON text, and panics only when an
//! invariant breaks. The crate's tests replay the checked-in corpora
//! (`fuzz/corpus/<target>/`) through the same functions, so every input a fuzzer
//! once found stays a regression test on stable.
//!
//! Public only with the `fuzzing` feature (the fuzz crate's); not an API.

use starlark::environment::Module;
use starlark::syntax::AstModule;

use crate::{FILE_NAME, RunError, checks, convert, surface};

/// A fuzz target: its name and its entry point.
pub type Target = (&'static str, fn(&[u8]));

/// The interpreter's fuzz targets, by name: what `cargo xtask fuzz` runs beside the
/// host's and the corpus folders the tests replay.
pub const TARGETS: [Target; 2] = [
    ("source_checks", source_checks),
    ("json_decode", json_decode),
];

/// The checks a program's source passes before it runs, in the order the runner
/// applies them: the bracket scan, the parser, the depth check, the recursion and
/// `main` checks, the free identifiers. Each either passes or refuses with
/// `<codemode>:line:col: message`; none overflows the stack, which the depth check
/// exists to guarantee for the recursive walks after it.
pub fn source_checks(data: &[u8]) {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(error) = checks::nesting(source) {
        assert_positioned(error);
        return;
    }
    let Ok(ast) = AstModule::parse(FILE_NAME, source.to_owned(), &crate::dialect()) else {
        return;
    };
    if let Err(error) = checks::depth(&ast) {
        // The runner forgets a tree this deep rather than drop it; here it is
        // dropped, which the parser that built it had more stack for.
        assert_positioned(error);
        return;
    }
    for checked in [checks::no_recursion(&ast), checks::main_signature(&ast)] {
        if let Err(error) = checked {
            assert_positioned(error);
        }
    }
    let free = checks::free_identifiers(&ast, crate::globals());
    assert!(free.is_sorted(), "free identifiers come out sorted");
}

/// A refusal names its position in the program.
fn assert_positioned(error: RunError) {
    match error {
        RunError::Invalid(message) => {
            let rest = message
                .strip_prefix(FILE_NAME)
                .and_then(|rest| rest.strip_prefix(':'));
            let position = rest.and_then(|rest| {
                let mut parts = rest.splitn(3, ':');
                let line: u32 = parts.next()?.parse().ok()?;
                let column: u32 = parts.next()?.parse().ok()?;
                Some((line, column))
            });
            assert!(
                position.is_some_and(|(line, column)| line > 0 && column > 0),
                "a refusal without a position: {message:?}"
            );
        }
        RunError::Limit(_) | RunError::Aborted => panic!("a check refused with {error:?}"),
    }
}

/// `json.decode` and `json.indent` on a text: decoding succeeds or answers
/// `json.decode: ...`; a decoded value becomes a Starlark value and crosses back to
/// the wire form or is refused with a reason; re-indenting valid JSON (with
/// whitespace) gives JSON of the same value.
pub fn json_decode(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let value = match surface::decode_json(text) {
        Ok(value) => value,
        Err(message) => {
            assert!(message.starts_with("json.decode: "), "{message:?}");
            return;
        }
    };
    let indented = surface::reindent(text, " ", "\t");
    let again: serde_json::Value = match serde_json::from_str(&indented) {
        Ok(again) => again,
        Err(error) => panic!("json.indent gave invalid JSON ({error}): {indented:?}"),
    };
    assert_eq!(again, value, "json.indent changed the value");
    Module::with_temp_heap(|module| {
        let allocated = module.heap().alloc(value);
        let mut nodes = 1 << 20;
        // Refusals (an int past 64 bits, too deep) are answers too; a panic is not.
        let mut bytes = Vec::new();
        let _ = convert::to_wire(
            allocated,
            64,
            &mut nodes,
            &mut codemode_value::Writer::new(&mut bytes),
        );
    });
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::TARGETS;

    #[test]
    fn the_fuzz_corpora_replay_without_a_failure() {
        let corpora = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        for (target, run) in TARGETS {
            let dir = corpora.join(target);
            let inputs: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
                .map(|entry| entry.map(|e| e.path()))
                .collect::<Result<_, _>>()
                .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()));
            assert!(!inputs.is_empty(), "no corpus for {target}");
            for input in inputs {
                let data = std::fs::read(&input)
                    .unwrap_or_else(|e| panic!("read {}: {e}", input.display()));
                run(&data);
            }
        }
    }
}
