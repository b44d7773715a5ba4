//! A plugin's WIT documentation, carried in its component's `package-docs` custom
//! section.
//!
//! WebAssembly components keep a plugin's WIT types but not its doc comments: no
//! component toolchain keeps them in the binary it builds. The `package-docs`
//! section is the WIT tools' own format for them (a version byte, then JSON: the
//! package's interfaces, their functions' and types' docs, a record's field
//! docs). The codemode SDK's `generate!` and the Python and JavaScript build
//! scripts write it ([`encode`], [`embed`]); the host reads it back ([`find`],
//! [`decode`]) to tell the model what each parameter means.
//!
//! WIT has no doc comments on a function's parameters, so a parameter is
//! documented by a line of its function's doc comment that starts with its name
//! and a colon ([`parameter_lines`]); a record parameter's fields by the record's
//! field docs.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The custom section's name.
pub const SECTION_NAME: &str = "package-docs";

/// Most bytes of one section the host decodes: far more than any real package's
/// docs, small enough that a hostile file costs nothing to refuse.
pub const MAX_SECTION_BYTES: usize = 1024 * 1024;

/// Most nested modules and components [`find`] descends into.
const MAX_DEPTH: usize = 8;

/// The section versions [`decode`] reads (0: the original format; 1: with
/// stability, what the WIT tools write today).
const VERSIONS: [u8; 2] = [0, 1];

/// The preamble of a core module and of a component: magic, then a version and a
/// layer (the layer tells them apart; [`find`] and [`embed`] only need the length).
const PREAMBLE_LEN: usize = 8;
/// `\0asm`.
const MAGIC: [u8; 4] = *b"\0asm";
/// Section IDs: custom sections share 0 in modules and components; in a component
/// 1 holds a core module and 4 a nested component.
const CUSTOM: u8 = 0;
const CORE_MODULE: u8 = 1;
const COMPONENT: u8 = 4;
/// The layer field of a component's preamble (bytes 6..8).
const COMPONENT_LAYER: [u8; 2] = [1, 0];

/// Why docs could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The WIT folder or file did not parse.
    #[error("cannot read the WIT at {path}: {reason}")]
    Wit {
        /// What was read.
        path: String,
        /// wit-parser's explanation.
        reason: String,
    },
    /// The bytes are not a WebAssembly binary, or a section runs past the end.
    #[error("not a well-formed WebAssembly binary ({0})")]
    Binary(&'static str),
    /// [`embed`] was given a core module.
    #[error("not a component (a core module): build the component first")]
    CoreModule,
    /// A section is larger than [`MAX_SECTION_BYTES`].
    #[error("the {SECTION_NAME} section has {0} bytes, more than the {MAX_SECTION_BYTES} read")]
    TooLarge(usize),
    /// An unknown format version.
    #[error("the {SECTION_NAME} section has version {0:?}, not 0 or 1")]
    Version(Option<u8>),
    /// The component file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        reason: std::io::Error,
    },
    /// The JSON does not have the section's structure.
    #[error("the {SECTION_NAME} section does not decode: {0}")]
    Json(#[from] serde_json::Error),
}

/// The `package-docs` section of the WIT package at `wit` (a folder with its
/// `deps/`, or one file): the package's docs as the WIT tools encode them.
///
/// # Errors
///
/// [`Error::Wit`] when the WIT does not parse.
pub fn encode(wit: &Path) -> Result<Vec<u8>, Error> {
    let wit_error = |reason: &dyn std::fmt::Display| Error::Wit {
        path: wit.display().to_string(),
        reason: format!("{reason:#}"),
    };
    let mut resolve = wit_parser::Resolve::new();
    let (package, _) = resolve.push_path(wit).map_err(|e| wit_error(&e))?;
    wit_parser::PackageMetadata::extract(&resolve, package)
        .encode()
        .map_err(|e| wit_error(&e))
}

/// `component` with `payload` as its top-level `package-docs` section, in place
/// of any it had (so that building twice does not stack two).
///
/// # Errors
///
/// [`Error::CoreModule`] for a core module, [`Error::Binary`] for bytes that are
/// not a well-formed binary.
pub fn embed(component: &[u8], payload: &[u8]) -> Result<Vec<u8>, Error> {
    let sections = sections(component)?;
    if component.get(6..PREAMBLE_LEN) != Some(&COMPONENT_LAYER[..]) {
        return Err(Error::CoreModule);
    }
    let mut out = Vec::with_capacity(component.len() + payload.len() + 32);
    out.extend_from_slice(&component[..PREAMBLE_LEN]);
    for section in sections {
        if section.id == CUSTOM
            && custom_name(section.body).map(|(name, _)| name) == Some(SECTION_NAME)
        {
            continue;
        }
        out.extend_from_slice(section.whole);
    }
    let mut body = Vec::with_capacity(payload.len() + SECTION_NAME.len() + 5);
    write_leb(&mut body, SECTION_NAME.len());
    body.extend_from_slice(SECTION_NAME.as_bytes());
    body.extend_from_slice(payload);
    out.push(CUSTOM);
    write_leb(&mut out, body.len());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Writes the docs of the WIT at `wit` into the component file at `component`
/// (replacing the file whole, through a file beside it), what a plugin's build
/// does after the component toolchain ran. Returns the section's size.
///
/// # Errors
///
/// [`Error::Wit`], [`Error::Io`], or the errors of [`embed`] for a file that is
/// no component.
pub fn embed_file(wit: &Path, component: &Path) -> Result<usize, Error> {
    let io = |reason| Error::Io {
        path: component.display().to_string(),
        reason,
    };
    let payload = encode(wit)?;
    let bytes = std::fs::read(component).map_err(io)?;
    let embedded = embed(&bytes, &payload)?;
    let mut partial = component.as_os_str().to_owned();
    partial.push(".docs-partial");
    let partial = std::path::PathBuf::from(partial);
    std::fs::write(&partial, &embedded).map_err(io)?;
    std::fs::rename(&partial, component).map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        io(e)
    })?;
    Ok(payload.len())
}

/// The payloads of every `package-docs` section in `binary`, the component's own
/// first, then those of its core modules and nested components in order (the
/// SDK's section sits in the plugin's core module). Malformed parts end the
/// search quietly: the host loads a plugin whose docs cannot be read without them.
pub fn find(binary: &[u8]) -> Vec<&[u8]> {
    let mut found = Vec::new();
    collect(binary, 0, &mut found);
    found
}

fn collect<'a>(binary: &'a [u8], depth: usize, found: &mut Vec<&'a [u8]>) {
    let Ok(sections) = sections(binary) else {
        return;
    };
    let mut nested = Vec::new();
    for section in sections {
        match section.id {
            CUSTOM => {
                if let Some((SECTION_NAME, payload)) = custom_name(section.body) {
                    found.push(payload);
                }
            }
            CORE_MODULE | COMPONENT => nested.push(section.body),
            _ => {}
        }
    }
    if depth < MAX_DEPTH {
        for inner in nested {
            collect(inner, depth + 1, found);
        }
    }
}

/// One section of a binary: its ID, its body, and its bytes with the header.
struct Section<'a> {
    id: u8,
    body: &'a [u8],
    whole: &'a [u8],
}

/// The top-level sections of a module or component.
fn sections(binary: &[u8]) -> Result<Vec<Section<'_>>, Error> {
    if binary.get(..4) != Some(&MAGIC[..]) || binary.len() < PREAMBLE_LEN {
        return Err(Error::Binary("no WebAssembly preamble"));
    }
    let mut sections = Vec::new();
    let mut at = PREAMBLE_LEN;
    while at < binary.len() {
        let start = at;
        let id = binary[at];
        at += 1;
        let (len, used) = read_leb(&binary[at..]).ok_or(Error::Binary("bad section size"))?;
        at += used;
        let end = at
            .checked_add(len)
            .filter(|end| *end <= binary.len())
            .ok_or(Error::Binary("a section runs past the end"))?;
        sections.push(Section {
            id,
            body: &binary[at..end],
            whole: &binary[start..end],
        });
        at = end;
    }
    Ok(sections)
}

/// A custom section body's name and payload.
fn custom_name(body: &[u8]) -> Option<(&str, &[u8])> {
    let (len, used) = read_leb(body)?;
    let end = used.checked_add(len).filter(|end| *end <= body.len())?;
    let name = std::str::from_utf8(&body[used..end]).ok()?;
    Some((name, &body[end..]))
}

/// An unsigned LEB128 of at most 5 bytes (a u32, as section sizes are), and the
/// bytes it took.
fn read_leb(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut value: u64 = 0;
    for (i, byte) in bytes.iter().take(5).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let value = u32::try_from(value).ok()?;
            return Some((usize::try_from(value).ok()?, i + 1));
        }
    }
    None
}

fn write_leb(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// What a `package-docs` section says, as far as the host uses it: the docs of
/// the functions and types of each interface, by name.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
pub struct PackageDocs {
    #[serde(default)]
    interfaces: BTreeMap<String, InterfaceDocs>,
    #[serde(default)]
    worlds: BTreeMap<String, WorldDocs>,
}

/// One world's inline interfaces (`export name: interface { ... }`).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
struct WorldDocs {
    /// Imports, and exports named unlike any import (the format's v0 name).
    #[serde(default)]
    interfaces: BTreeMap<String, InterfaceDocs>,
    /// Exports named like an import.
    #[serde(default)]
    interface_exports: BTreeMap<String, InterfaceDocs>,
}

/// One interface's function and type docs.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
struct InterfaceDocs {
    #[serde(default)]
    funcs: BTreeMap<String, FunctionDocs>,
    #[serde(default)]
    types: BTreeMap<String, TypeDocs>,
}

/// A function's docs: a bare string in version 0, an object in version 1.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
enum FunctionDocs {
    Text(Option<String>),
    Object {
        #[serde(default)]
        docs: Option<String>,
    },
}

/// A type's docs and its items' (a record's fields, a variant's cases).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
struct TypeDocs {
    #[serde(default)]
    items: BTreeMap<String, String>,
}

/// Decodes a `package-docs` payload.
///
/// # Errors
///
/// [`Error::TooLarge`], [`Error::Version`], or [`Error::Json`] for a payload not
/// in the format.
pub fn decode(payload: &[u8]) -> Result<PackageDocs, Error> {
    if payload.len() > MAX_SECTION_BYTES {
        return Err(Error::TooLarge(payload.len()));
    }
    match payload.split_first() {
        Some((version, json)) if VERSIONS.contains(version) => Ok(serde_json::from_slice(json)?),
        Some((version, _)) => Err(Error::Version(Some(*version))),
        None => Err(Error::Version(None)),
    }
}

impl PackageDocs {
    /// The interface named `interface` (its short name, e.g. `geo`): the
    /// package's own, else a world's inline one.
    fn interface(&self, interface: &str) -> Option<&InterfaceDocs> {
        self.interfaces.get(interface).or_else(|| {
            self.worlds.values().find_map(|world| {
                world
                    .interface_exports
                    .get(interface)
                    .or_else(|| world.interfaces.get(interface))
            })
        })
    }

    /// The doc comment of `function` in `interface`.
    pub fn function(&self, interface: &str, function: &str) -> Option<&str> {
        match self.interface(interface)?.funcs.get(function)? {
            FunctionDocs::Text(docs) | FunctionDocs::Object { docs } => docs.as_deref(),
        }
    }

    /// The doc comment of the item (record field) `item` of type `ty` in
    /// `interface`, by their WIT names.
    pub fn item(&self, interface: &str, ty: &str, item: &str) -> Option<&str> {
        self.interface(interface)?
            .types
            .get(ty)?
            .items
            .get(item)
            .map(String::as_str)
    }
}

/// The lines of a function's doc comment that document its parameters: a line
/// `name: text` (or `- name: text`, `* name: text`, with the name in backticks or
/// not) whose name is one of `params` (WIT names; the `_` spelling matches too).
/// Returns `(index into params, text)` in the order of the lines; a parameter's
/// first line wins.
pub fn parameter_lines<'a>(docs: &'a str, params: &[&str]) -> Vec<(usize, &'a str)> {
    let mut found: Vec<(usize, &str)> = Vec::new();
    for line in docs.lines() {
        let line = line.trim();
        let line = line
            .strip_prefix("- ")
            .or_else(|| line.strip_prefix("* "))
            .unwrap_or(line)
            .trim_start();
        let Some((name, text)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim().trim_matches('`');
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let Some(index) = params
            .iter()
            .position(|p| *p == name || p.replace('-', "_") == name)
        else {
            continue;
        };
        if found.iter().all(|(seen, _)| *seen != index) {
            found.push((index, text));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal component: the preamble and nothing else.
    const EMPTY_COMPONENT: [u8; 8] = [0, b'a', b's', b'm', 0x0d, 0, 1, 0];
    const EMPTY_MODULE: [u8; 8] = [0, b'a', b's', b'm', 1, 0, 0, 0];

    fn custom(name: &str, payload: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        write_leb(&mut body, name.len());
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(payload);
        let mut out = vec![CUSTOM];
        write_leb(&mut out, body.len());
        out.extend_from_slice(&body);
        out
    }

    fn wit_folder(text: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("wit-docs-{}-{}", std::process::id(), text.len()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("world.wit"), text).unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    const WIT: &str = r#"package example:geo@0.1.0;

interface geo {
  /// A place on Earth.
  record point {
    /// Degrees north, -90 to 90.
    lat: f64,
    lon: f64,
  }

  /// Distance between two points.
  ///
  /// - a: where to start
  /// - `b`: where to end
  /// not-a-param: ignored
  distance: func(a: point, b: point, max-km: option<f64>) -> f64;
}

world plugin {
  export geo;
  export inline: interface {
    /// Says hello.
    /// who-to-greet: a name
    hello: func(who-to-greet: string) -> string;
  }
}
"#;

    #[test]
    fn what_encode_writes_decode_reads() {
        let dir = wit_folder(WIT);
        let payload = encode(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(payload[0], 1);
        let docs = decode(&payload).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            docs.function("geo", "distance"),
            Some(
                "Distance between two points.\n\n- a: where to start\n- `b`: where to end\nnot-a-param: ignored"
            )
        );
        assert_eq!(
            docs.item("geo", "point", "lat"),
            Some("Degrees north, -90 to 90.")
        );
        assert_eq!(docs.item("geo", "point", "lon"), None);
        assert_eq!(
            docs.function("inline", "hello"),
            Some("Says hello.\nwho-to-greet: a name")
        );
        assert_eq!(docs.function("geo", "nearest"), None);
        assert_eq!(docs.function("other", "distance"), None);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_bad_wit_names_the_path_and_the_reason() {
        let dir = wit_folder("package a:b;\ninterface i { f: func(x: nope); }\n");
        let error = encode(&dir)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.starts_with(&format!("cannot read the WIT at {}: ", dir.display())),
            "{error}"
        );
        assert!(error.contains("nope"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn parameter_lines_match_names_in_either_spelling_once_each() {
        let docs =
            "Summary.\n\n- a: first\n* `max_km`: most\nmax-km: again\nb:\nz: none\n  b : second";
        assert_eq!(
            parameter_lines(docs, &["a", "b", "max-km"]),
            vec![(0, "first"), (2, "most"), (1, "second")]
        );
        assert_eq!(parameter_lines("no params here", &["a"]), vec![]);
    }

    #[test]
    fn embed_replaces_the_top_level_section_and_find_reaches_nested_modules() {
        let mut module = EMPTY_MODULE.to_vec();
        module.extend(custom(SECTION_NAME, b"\x01inner"));
        let mut component = EMPTY_COMPONENT.to_vec();
        component.extend(custom(SECTION_NAME, b"\x01old"));
        component.push(CORE_MODULE);
        write_leb(&mut component, module.len());
        component.extend(&module);
        component.extend(custom("name", b"x"));
        let embedded = embed(&component, b"\x01new").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(find(&embedded), vec![&b"\x01new"[..], &b"\x01inner"[..]]);
        let twice = embed(&embedded, b"\x01newer").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(find(&twice), vec![&b"\x01newer"[..], &b"\x01inner"[..]]);
        assert_eq!(twice.len(), embedded.len() + 2);
        assert!(matches!(
            embed(&EMPTY_MODULE, b"\x01"),
            Err(Error::CoreModule)
        ));
        assert!(matches!(embed(b"nope", b"\x01"), Err(Error::Binary(_))));
    }

    #[test]
    fn malformed_binaries_and_payloads_are_refused_not_panicked_on() {
        let mut cut = EMPTY_COMPONENT.to_vec();
        cut.extend([CUSTOM, 0x80, 0x80, 0x80, 0x80, 0x0f]);
        assert_eq!(find(&cut), Vec::<&[u8]>::new());
        let mut past = EMPTY_COMPONENT.to_vec();
        past.extend([CUSTOM, 10, 1]);
        assert_eq!(find(&past), Vec::<&[u8]>::new());
        assert!(matches!(decode(b""), Err(Error::Version(None))));
        assert!(matches!(decode(b"\x02{}"), Err(Error::Version(Some(2)))));
        assert!(matches!(decode(b"\x01[1]"), Err(Error::Json(_))));
        assert_eq!(decode(b"\x00{}").ok(), Some(PackageDocs::default()));
        let big = vec![1u8; MAX_SECTION_BYTES + 1];
        assert!(matches!(decode(&big), Err(Error::TooLarge(_))));
        // Version 0 wrote a function's docs as a bare string.
        let v0 = decode(br#"{"interfaces":{"i":{"funcs":{"f":"Docs."}}}}"#.as_slice());
        assert!(v0.is_err(), "no version byte");
        let v0 = decode(b"\x00{\"interfaces\":{\"i\":{\"funcs\":{\"f\":\"Docs.\"}}}}")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v0.function("i", "f"), Some("Docs."));
    }

    #[test]
    fn nesting_deeper_than_the_bound_is_not_searched() {
        let mut inner = EMPTY_COMPONENT.to_vec();
        inner.extend(custom(SECTION_NAME, b"\x01deep"));
        for _ in 0..=MAX_DEPTH {
            let mut outer = EMPTY_COMPONENT.to_vec();
            outer.push(COMPONENT);
            write_leb(&mut outer, inner.len());
            outer.extend(&inner);
            inner = outer;
        }
        assert_eq!(find(&inner), Vec::<&[u8]>::new());
    }
}
