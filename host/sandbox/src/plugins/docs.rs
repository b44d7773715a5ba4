//! What a plugin's WIT says about its parameters: its component's `codemode-docs`
//! section (written by the SDK's `generate!` and by `codemode-host wit-docs`),
//! read once at load into the `Arguments:` block of each capability's
//! description.
//!
//! WIT has no doc comments on parameters: a parameter's docs are the line of its
//! function's doc comment that starts with its name and a colon; a record
//! parameter's (or a list's or option's of records) are also its record's field
//! docs. Rendered like an upstream tool's: `- a: where to start (lat: degrees
//! north; lon: degrees east)`.

use codemode_wit_docs::{InterfaceDocs, PackageDocs};

use super::reflect::ExportedFunc;
use crate::catalog::{Field, MAX_ARGUMENT_DOCS, Shape, argument_block, one_line};

/// The docs of the component `bytes`: the first `codemode-docs` section that
/// decodes. When none does, one WARN naming the plugin and the first reason,
/// and the plugin loads without them.
pub fn read(plugin: &str, bytes: &[u8]) -> Option<PackageDocs> {
    let mut failed = Vec::new();
    for payload in codemode_wit_docs::find(bytes) {
        match codemode_wit_docs::decode(payload) {
            Ok(docs) => return Some(docs),
            Err(error) => failed.push(error),
        }
    }
    if let Some(first) = failed.first() {
        tracing::warn!(
            plugin,
            sections = failed.len(),
            reason = %first,
            "the plugin's WIT docs do not decode: its parameters are shown without them"
        );
    }
    None
}

/// The `Arguments:` block of `func` (whose parameters map to `params`), from
/// `docs`; `None` when no parameter is documented.
pub fn argument_docs(docs: &PackageDocs, func: &ExportedFunc, params: &[Field]) -> Option<String> {
    // Looked up once: every field below reads the same interface.
    let interface = docs.interface(&func.interface)?;
    let function_docs = interface.function(&func.function).unwrap_or("");
    let wit_names: Vec<&str> = func.params.iter().map(|(name, _)| name.as_str()).collect();
    let described = codemode_wit_docs::parameter_lines(function_docs, &wit_names);
    let lines = params.iter().enumerate().filter_map(|(index, param)| {
        let text = described
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, text)| one_line(text, MAX_ARGUMENT_DOCS))
            .filter(|text| !text.is_empty());
        let record = func
            .params
            .get(index)
            .and_then(|(_, record)| record.as_deref());
        let fields = record
            .map(|record| field_docs(docs, interface, record, &param.ty))
            .unwrap_or_default();
        match (text, fields.is_empty()) {
            (None, true) => None,
            (Some(text), true) => Some(format!("- {}: {text}", param.name)),
            (None, false) => Some(format!("- {}: ({})", param.name, fields.join("; "))),
            (Some(text), false) => {
                Some(format!("- {}: {text} ({})", param.name, fields.join("; ")))
            }
        }
    });
    argument_block(lines)
}

/// The block `docs` give a fixed function `i.f(a: r, b-c: list<r>, d: string)`
/// with `r { x, y-z }`: what the `plugin_docs` fuzz target checks.
pub fn probe(docs: &PackageDocs) -> Option<String> {
    let record = Shape::Record(vec![
        Field::new("x", Shape::Str),
        Field::new("y_z", Shape::Str),
    ]);
    let func = ExportedFunc {
        instance: "p:q/i@0.1.0".to_owned(),
        interface: "i".to_owned(),
        function: "f".to_owned(),
        params: vec![
            ("a".to_owned(), Some("r".to_owned())),
            ("b-c".to_owned(), Some("r".to_owned())),
            ("d".to_owned(), None),
        ],
        signature: Err(super::reflect::TypeError::Result {
            found: "nothing".to_owned(),
        }),
    };
    let params = [
        Field::new("a", record.clone()),
        Field::new("b_c", Shape::List(Box::new(record))),
        Field::new("d", Shape::Str),
    ];
    argument_docs(docs, &func, &params)
}

/// `field: docs` for each documented field of the record `shape` is (or holds),
/// in the record's order: from `interface`, else (a record it `use`s from
/// another) the first interface that documents a type of that name. WIT names
/// fields with `-` where agents write `_`.
fn field_docs(
    docs: &PackageDocs,
    interface: &InterfaceDocs,
    record: &str,
    shape: &Shape,
) -> Vec<String> {
    let fields = match shape {
        Shape::Record(fields) => fields,
        Shape::Option(inner) | Shape::List(inner) => match inner.as_ref() {
            Shape::Record(fields) => fields,
            _ => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    fields
        .iter()
        .filter_map(|field| {
            let wit_name = field.name.replace('_', "-");
            let text = interface
                .item(record, &wit_name)
                .or_else(|| docs.item_anywhere(record, &wit_name))?;
            let text = one_line(text, MAX_ARGUMENT_DOCS);
            // A sentence's period would end up before the `;` that follows.
            let text = text.strip_suffix('.').unwrap_or(&text);
            (!text.is_empty()).then(|| format!("{}: {text}", field.name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::reflect::Signature;
    use crate::plugins::wire::ErrorKind;

    fn docs() -> PackageDocs {
        let json = br#"{"interfaces": {"geo": {
            "funcs": {
                "nearest": {"docs": "The nearest place.\n\n- origin: where to measure from\n- `max_km`: farthest, in km.\nplaces - not this form"},
                "bare": {"docs": "No parameter lines."}
            },
            "types": {
                "point": {"items": {"lat": "Degrees\nnorth.", "lon": "Degrees east."}},
                "place": {"items": {"min-size": "Smallest \u0007size."}}
            }
        }}}"#;
        let mut payload = vec![1];
        payload.extend_from_slice(json);
        codemode_wit_docs::decode(&payload).unwrap()
    }

    fn point() -> Shape {
        Shape::Record(vec![
            Field::new("lat", Shape::Float(crate::catalog::FloatKind::F64)),
            Field::new("lon", Shape::Float(crate::catalog::FloatKind::F64)),
        ])
    }

    fn nearest(params: Vec<(&str, Option<&str>)>) -> ExportedFunc {
        ExportedFunc {
            instance: "example:geo/geo@0.1.0".to_owned(),
            interface: "geo".to_owned(),
            function: "nearest".to_owned(),
            params: params
                .into_iter()
                .map(|(name, record)| (name.to_owned(), record.map(str::to_owned)))
                .collect(),
            signature: Ok(Signature {
                params: vec![],
                output: vec![],
                error: ErrorKind::None,
            }),
        }
    }

    #[test]
    fn parameters_get_their_function_lines_and_record_field_docs_in_order() {
        let func = nearest(vec![
            ("origin", Some("point")),
            ("places", Some("place")),
            ("max-km", None),
            ("undocumented", None),
        ]);
        let params = vec![
            Field::new("origin", point()),
            Field::new(
                "places",
                Shape::List(Box::new(Shape::Record(vec![
                    Field::new("name", Shape::Str),
                    Field::new("min_size", Shape::Str),
                ]))),
            ),
            Field::new("max_km", Shape::Option(Box::new(Shape::Str))),
            Field::new("undocumented", Shape::Str),
        ];
        assert_eq!(
            argument_docs(&docs(), &func, &params).as_deref(),
            Some(
                "- origin: where to measure from (lat: Degrees north; lon: Degrees east)\n\
                 - places: (min_size: Smallest size)\n\
                 - max_km: farthest, in km."
            )
        );
    }

    #[test]
    fn nothing_documented_is_no_block() {
        let mut func = nearest(vec![("a", None)]);
        func.function = "bare".to_owned();
        assert_eq!(
            argument_docs(&docs(), &func, &[Field::new("a", Shape::Str)]),
            None
        );
        func.interface = "other".to_owned();
        assert_eq!(
            argument_docs(&docs(), &func, &[Field::new("a", Shape::Str)]),
            None
        );
    }

    #[test]
    fn an_undecodable_section_is_skipped_for_the_next() {
        let section = |payload: &[u8]| {
            let mut body = vec![12];
            body.extend_from_slice(b"package-docs");
            body.extend_from_slice(payload);
            let mut out = vec![0, body.len() as u8];
            out.extend(body);
            out
        };
        let mut component = vec![0, b'a', b's', b'm', 0x0d, 0, 1, 0];
        component.extend(section(b"\x01not json"));
        component.extend(section(
            b"\x01{\"interfaces\":{\"i\":{\"funcs\":{\"f\":{\"docs\":\"x\"}}}}}",
        ));
        let docs = read("p.wasm", &component).unwrap();
        assert_eq!(docs.function("i", "f"), Some("x"));
        assert_eq!(read("p.wasm", b"\0asm\x0d\0\x01\0"), None);
    }
}
