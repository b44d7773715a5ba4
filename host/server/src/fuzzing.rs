//! Entry points for the fuzz targets (`fuzz/`, `cargo xtask fuzz`): each takes
//! arbitrary bytes, feeds them to one parser or checker that reads untrusted input,
//! and panics only when an invariant breaks. The test suite replays the checked-in
//! corpora through the same functions (`fuzz/corpus/<target>/`), so every input a
//! fuzzer once found stays a regression test on stable.
//!
//! Public only with the `fuzzing` feature (the fuzz crate's); not an API.

use std::path::Path;

use codemode_value::Value;

use crate::authz::Tokens;
use crate::catalog::{
    BindLimits, Binder, CapabilitySpec, CatalogBuilder, Field, FloatKind, IntKind,
    MAX_SEARCH_RESULTS, Shape, Values,
};
use crate::plugins::{Grants, HostPattern};

/// A fuzz target: its name and its entry point.
pub type Target = (&'static str, fn(&[u8]));

/// The fuzz targets, by name: what `cargo xtask fuzz` runs and the corpus folders
/// the tests replay.
pub const TARGETS: [Target; 9] = [
    ("value_decode", value_decode),
    ("bind", bind_arguments),
    ("catalog", catalog),
    ("sidecar", sidecar),
    ("host_pattern", host_pattern),
    ("tokens", tokens),
    ("plugin_docs", plugin_docs),
    ("openapi_spec", openapi_spec),
    ("upstream_line", upstream_line),
];

/// An OpenAPI spec (JSON or YAML text, untrusted: a service's or a registry's)
/// turned into capabilities: it is refused or converted, within its bounds,
/// and every capability it becomes is a valid one of the service `fz`.
pub fn openapi_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(signatures) = crate::openapi::signatures_of(text) {
        assert!(
            signatures.len() <= crate::catalog::MAX_CAPABILITIES,
            "no more operations than a catalog holds"
        );
        for signature in signatures {
            assert!(signature.starts_with("fz."), "{signature}");
        }
    }
}

/// A line from a stdio upstream (untrusted: any child's stdout) through the
/// framing layer under rmcp: what rmcp is handed is one JSON value, no deeper
/// and with no more values than the bounds, and no longer than twice the limit
/// (a pruned tool list may grow a little).
pub fn upstream_line(data: &[u8]) {
    use crate::upstream::{MAX_MESSAGE_BYTES, MAX_MESSAGE_DEPTH, MAX_MESSAGE_VALUES};
    if data.contains(&b'\n') {
        return; // never a line: the framing layer splits there
    }
    let Ok(Some(line)) = crate::upstream::framed(data) else {
        return;
    };
    assert!(line.len() <= 2 * MAX_MESSAGE_BYTES);
    assert!(!line.contains(&b'\n'), "one line");
    let value: serde_json::Value = match serde_json::from_slice(&line) {
        Ok(value) => value,
        Err(error) => panic!("not one JSON value: {error}"),
    };
    let (depth, values) = depth_and_values(&value);
    assert!(depth <= MAX_MESSAGE_DEPTH, "{depth} levels");
    assert!(values <= MAX_MESSAGE_VALUES, "{values} values");
}

/// The deepest nesting of objects and arrays in `value`, and its values.
fn depth_and_values(value: &serde_json::Value) -> (usize, usize) {
    let children: Vec<&serde_json::Value> = match value {
        serde_json::Value::Array(items) => items.iter().collect(),
        serde_json::Value::Object(members) => members.values().collect(),
        _ => return (0, 1),
    };
    children
        .into_iter()
        .map(depth_and_values)
        .fold((1, 1), |(depth, values), (d, v)| {
            (depth.max(d + 1), values + v)
        })
}

/// Depth allowed when decoding and binding.
const MAX_DEPTH: usize = 16;

/// The wire encoding of values (what the interpreter sends the host): whatever
/// decodes encodes back to the same bytes.
pub fn value_decode(data: &[u8]) {
    if let Ok(value) = codemode_value::decode(data, MAX_DEPTH) {
        let mut encoded = Vec::new();
        codemode_value::encode(&value, &mut encoded);
        assert_eq!(encoded, data, "decode then encode changed the bytes");
    }
}

/// Binding program arguments against capability shapes: the first bytes describe
/// parameters (see [`shapes`]), the rest is an encoded argument value. A bound call
/// has one value per parameter and a canonical view that is a dict; binding with
/// or without the canonical view decides and lowers alike.
pub fn bind_arguments(data: &[u8]) {
    let mut reader = ShapeReader { data, pos: 0 };
    let params = reader.fields(3);
    let Ok(arguments) = codemode_value::decode(&data[reader.pos..], MAX_DEPTH) else {
        return;
    };
    let binder = Binder::compile(&params);
    let mut limits = BindLimits {
        max_depth: MAX_DEPTH,
        max_nodes: 10_000,
        canonical: true,
    };
    let with_view = binder.bind(&arguments, &Values, limits);
    limits.canonical = false;
    let without = binder.bind(&arguments, &Values, limits);
    match (with_view, without) {
        (Ok(with_view), Ok(without)) => {
            assert_eq!(without.canonical, None, "a view only when asked for");
            assert_eq!(with_view.arguments, without.arguments, "the same values");
            assert_eq!(
                with_view.arguments.len(),
                params.len(),
                "one value per parameter"
            );
            assert!(
                matches!(with_view.canonical, Some(Value::Dict(_))),
                "the canonical view is a dict"
            );
        }
        (Err(with_view), Err(without)) => assert_eq!(with_view, without, "the same error"),
        (with_view, without) => panic!("the view changed the outcome: {with_view:?} / {without:?}"),
    }
}

/// A catalog built from text and searched: the first line is a query, every other
/// line a capability `name<TAB>summary<TAB>search terms`. Whatever the catalog
/// accepts, a search answers at most [`MAX_SEARCH_RESULTS`] capabilities it has.
pub fn catalog(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let query = lines.next().unwrap_or_default();
    let specs: Vec<CapabilitySpec> = lines
        .map(|line| {
            let mut parts = line.split('\t');
            CapabilitySpec {
                name: parts.next().unwrap_or_default().to_owned(),
                id: None,
                summary: parts.next().unwrap_or_default().to_owned(),
                description: None,
                search_terms: parts.map(str::to_owned).collect(),
                params: vec![Field::new("q", Shape::Str)],
                output: vec![],
            }
        })
        .collect();
    let mut builder = CatalogBuilder::new();
    for spec in specs {
        let _ = builder.add_group(std::slice::from_ref(&spec));
    }
    let Ok(catalog) = builder.build(&[]) else {
        return;
    };
    if let Ok(response) = catalog.search(query) {
        assert!(response.results.len() <= MAX_SEARCH_RESULTS);
        for result in &response.results {
            assert!(
                catalog.get(&result.name).is_some(),
                "{} is not in the catalog",
                result.name
            );
        }
    }
    let _ = catalog.describe(query);
}

/// A plugin's sidecar (`<plugin>.toml`): parsed or refused with a message.
pub fn sidecar(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Grants::parse(text, Path::new("/nonexistent/codemode-fuzz"));
    }
}

/// An `allowed_outbound_hosts` pattern, and matching against it.
pub fn host_pattern(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (pattern, host) = text.split_once('\n').unwrap_or((&text, "example.com"));
    if let Ok(pattern) = HostPattern::parse(pattern) {
        for scheme in ["http", "https"] {
            let _ = pattern.matches(scheme, host, 443);
        }
    }
}

/// A `--tokens` file: parsed or refused with a message; a parsed file resolves
/// every token it lists.
pub fn tokens(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(tokens) = Tokens::parse(text)
    {
        let _ = tokens.resolve(text);
    }
}

/// A plugin file's WIT docs, as the loader reads them: the bytes as a component
/// (its `codemode-docs` sections found and decoded; a section embedded into it
/// found first) and as one section's payload,
/// whose `Arguments:` block for a fixed function stays within its cap and is
/// printable lines.
pub fn plugin_docs(data: &[u8]) {
    let _ = crate::plugins::docs_read("fuzz.wasm", data);
    // What embedding writes, finding reads back first.
    if let Ok(embedded) = codemode_wit_docs::embed(data, b"\x01{}") {
        assert_eq!(
            codemode_wit_docs::find(&embedded).first(),
            Some(&&b"\x01{}"[..])
        );
    }
    if let Ok(docs) = codemode_wit_docs::decode(data)
        && let Some(block) = crate::plugins::docs_probe(&docs)
    {
        assert!(block.len() <= crate::catalog::MAX_ARGUMENT_DOCS, "{block}");
        assert!(
            block.split('\n').all(
                |line| line.starts_with("- ") && line.chars().all(crate::catalog::is_printable)
            ),
            "{block:?}"
        );
    }
}

/// Reads parameter shapes from bytes: one byte per decision, and an exhausted input
/// ends every list (so every input is some list of fields).
struct ShapeReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl ShapeReader<'_> {
    fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = (self.pos + 1).min(self.data.len());
        byte
    }

    /// Up to four fields named `a`, `b`, ... (a zero byte ends the list).
    fn fields(&mut self, depth: usize) -> Vec<Field> {
        let mut fields = Vec::new();
        for name in ["a", "b", "c", "d"] {
            if self.byte() == 0 {
                break;
            }
            fields.push(Field::new(name, self.shape(depth)));
        }
        fields
    }

    fn shape(&mut self, depth: usize) -> Shape {
        let nested = depth > 0;
        match self.byte() % 16 {
            0 => Shape::Str,
            1 => Shape::Char,
            2 => Shape::Bool,
            3 => Shape::Int(IntKind::S64),
            4 => Shape::Int(IntKind::U8),
            5 => Shape::Int(IntKind::U64),
            6 => Shape::Int(IntKind::S32),
            7 => Shape::Float(FloatKind::F64),
            8 => Shape::Float(FloatKind::F32),
            9 => Shape::Enum(vec!["red".into(), "in-progress".into()]),
            10 => Shape::Flags(vec!["x".into(), "y-z".into()]),
            11 if nested => Shape::List(Box::new(self.shape(depth - 1))),
            12 if nested => Shape::Dict(Box::new(self.shape(depth - 1))),
            13 if nested => Shape::Record(self.fields(depth - 1)),
            14 if nested => Shape::Option(Box::new(self.shape(depth - 1))),
            15 if nested => Shape::Map(Box::new(self.shape(depth - 1))),
            _ => Shape::Any,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every checked-in input of every target, replayed: what a fuzzer found once
    /// stays fixed.
    #[test]
    fn the_fuzz_corpora_replay_without_a_failure() {
        let corpora = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        for (target, run) in TARGETS {
            let dir = corpora.join(target);
            let mut inputs: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .flatten()
                .map(|entry| entry.path())
                .collect();
            inputs.sort();
            assert!(!inputs.is_empty(), "no corpus for {target}");
            for input in inputs {
                let data =
                    std::fs::read(&input).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
                let replayed = std::panic::catch_unwind(|| run(&data));
                assert!(replayed.is_ok(), "{target} fails on {}", input.display());
            }
        }
    }
}
