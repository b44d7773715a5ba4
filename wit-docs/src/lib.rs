//! A plugin's WIT documentation, carried in its component's `codemode-docs` custom
//! section.
//!
//! WebAssembly components keep a plugin's WIT types but not its doc comments: no
//! component toolchain keeps them in the binary it builds. The WIT tools' own
//! `package-docs` format holds them (a version byte, then JSON: the package's
//! interfaces, their functions' and types' docs, a record's field docs), written
//! under a section name of this crate's ([`SECTION_NAME`]). The codemode SDK's `generate!` and the Python and JavaScript build
//! scripts write it ([`encode`], [`embed`]); the host reads it back ([`find`],
//! [`decode`]) to tell the model what each parameter means.
//!
//! WIT has no doc comments on a function's parameters, so a parameter is
//! documented by a line of its function's doc comment that starts with its name
//! and a colon ([`parameter_lines`]); a record parameter's fields by the record's
//! field docs.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

/// The custom section's name. Not the WIT tools' own `package-docs` (the format
/// is theirs): a component carrying `package-docs` is read by wit-component's
/// decoder as docs of the component's root package, which names none of the
/// plugin's interfaces, so `wasm-tools component wit`, `wkg oci push` and every
/// other tool decoding the component failed ("missing interface").
pub const SECTION_NAME: &str = "codemode-docs";

/// The name this crate wrote before [`SECTION_NAME`]: still read, in plugins
/// built then, and replaced by [`embed`].
pub const LEGACY_SECTION_NAME: &str = "package-docs";

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

/// Most docs sections [`find`] returns: a real component has one or two.
const MAX_FOUND: usize = 16;

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
    #[error("the {SECTION_NAME} section has version {0}, not 0 or 1")]
    Version(u8),
    /// A section with no bytes.
    #[error("the {SECTION_NAME} section is empty")]
    Empty,
    /// The component file could not be read or written.
    #[error("cannot {operation} it: {reason}")]
    Io {
        /// `read`, `write` or `replace`.
        operation: &'static str,
        /// Why.
        reason: std::io::Error,
    },
    /// The JSON does not have the section's structure.
    #[error("the {SECTION_NAME} section does not decode: {0}")]
    Json(#[from] serde_json::Error),
}

/// The docs section (the `package-docs` format) of the WIT package at `wit` (a folder with its
/// `deps/`, or one file): the package's docs as the WIT tools encode them. WIT
/// keeps no doc comments on a function's parameters; `///` lines before a
/// parameter are added to its function's docs as a line `- name: text`, the
/// form [`parameter_lines`] reads.
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
    add_parameter_docs(&mut resolve, package);
    wit_parser::PackageMetadata::extract(&resolve, package)
        .encode()
        .map_err(|e| wit_error(&e))
}

/// Appends the `///` comments written before each parameter of the package's
/// functions to the function's docs, read from the WIT source (wit-parser
/// drops them).
fn add_parameter_docs(resolve: &mut wit_parser::Resolve, package: wit_parser::PackageId) {
    let mut sources: HashMap<String, Option<String>> = HashMap::new();
    let source_map = &resolve.source_map;
    for (_, interface) in resolve.interfaces.iter_mut() {
        if interface.package != Some(package) {
            continue;
        }
        for function in interface.functions.values_mut() {
            let mut lines = Vec::new();
            for param in &function.params {
                let Some(location) = source_map.resolve_span(param.span) else {
                    continue;
                };
                let text = sources
                    .entry(location.path.to_owned())
                    .or_insert_with(|| std::fs::read_to_string(location.path).ok());
                let Some(before) = text.as_deref().and_then(|t| t.get(..location.range.start))
                else {
                    continue;
                };
                if let Some(docs) = comment_before(before) {
                    lines.push(format!("- {}: {docs}", param.name));
                }
            }
            if lines.is_empty() {
                continue;
            }
            let docs = function.docs.contents.get_or_insert_with(String::new);
            if !docs.is_empty() {
                docs.push_str("\n\n");
            }
            docs.push_str(&lines.join("\n"));
        }
    }
}

/// The `///` lines that end `before` (only whitespace after them), joined by
/// spaces; `None` when there are none.
fn comment_before(before: &str) -> Option<String> {
    let mut lines: Vec<&str> = Vec::new();
    for line in before.trim_end().lines().rev() {
        let Some(text) = line.trim().strip_prefix("///") else {
            break;
        };
        lines.push(text.trim());
    }
    lines.reverse();
    let joined = lines.join(" ");
    let joined = joined.trim();
    (!joined.is_empty()).then(|| joined.to_owned())
}

/// `component` with `payload` as its top-level `codemode-docs` section, in place
/// of any it had (so that building twice does not stack two).
///
/// # Errors
///
/// [`Error::CoreModule`] for a core module, [`Error::Binary`] for bytes that are
/// not a well-formed binary.
pub fn embed(component: &[u8], payload: &[u8]) -> Result<Vec<u8>, Error> {
    if component.get(..4) != Some(&MAGIC[..]) || component.len() < PREAMBLE_LEN {
        return Err(Error::Binary("no WebAssembly preamble"));
    }
    if component.get(6..PREAMBLE_LEN) != Some(&COMPONENT_LAYER[..]) {
        return Err(Error::CoreModule);
    }
    let mut out = Vec::with_capacity(component.len() + payload.len() + 32);
    out.extend_from_slice(&component[..PREAMBLE_LEN]);
    for section in sections(component) {
        let section = section?;
        if section.id == CUSTOM
            && custom_name(section.body)
                .is_some_and(|(name, _)| name == SECTION_NAME || name == LEGACY_SECTION_NAME)
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
    let io = |operation| move |reason| Error::Io { operation, reason };
    let payload = encode(wit)?;
    let bytes = std::fs::read(component).map_err(io("read"))?;
    let embedded = embed(&bytes, &payload)?;
    let mut partial = component.as_os_str().to_owned();
    partial.push(".docs-partial");
    let partial = std::path::PathBuf::from(partial);
    let written = std::fs::write(&partial, &embedded)
        .map_err(io("write"))
        .and_then(|()| std::fs::rename(&partial, component).map_err(io("replace")));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written.map(|()| payload.len())
}

/// The payloads of the docs sections (`codemode-docs`, or `package-docs` of a
/// plugin built before) in `binary` (at most 16), the
/// component's own first, then those of its core modules and nested components
/// in order (the SDK's section sits in the plugin's core module). Sections are
/// read lazily, without copying; a malformed header ends the search at its
/// level: the host loads a plugin whose docs cannot be read without them.
pub fn find(binary: &[u8]) -> Vec<&[u8]> {
    let mut found = Vec::new();
    collect(binary, 0, &mut found);
    found
}

fn collect<'a>(binary: &'a [u8], depth: usize, found: &mut Vec<&'a [u8]>) {
    for section in sections(binary).map_while(Result::ok) {
        if found.len() == MAX_FOUND {
            return;
        }
        if section.id == CUSTOM
            && let Some((name, payload)) = custom_name(section.body)
            && (name == SECTION_NAME || name == LEGACY_SECTION_NAME)
        {
            found.push(payload);
        }
    }
    // Only a component nests modules and components (in a core module, IDs 1
    // and 4 are its type and table sections).
    if depth >= MAX_DEPTH || binary.get(6..PREAMBLE_LEN) != Some(&COMPONENT_LAYER[..]) {
        return;
    }
    for section in sections(binary).map_while(Result::ok) {
        if found.len() == MAX_FOUND {
            return;
        }
        if matches!(section.id, CORE_MODULE | COMPONENT) {
            collect(section.body, depth + 1, found);
        }
    }
}

/// One section of a binary: its ID, its body, and its bytes with the header.
struct Section<'a> {
    id: u8,
    body: &'a [u8],
    whole: &'a [u8],
}

/// The top-level sections of a module or component, read one at a time; an
/// error ends them.
fn sections(binary: &[u8]) -> impl Iterator<Item = Result<Section<'_>, Error>> {
    let mut at = if binary.get(..4) == Some(&MAGIC[..]) && binary.len() >= PREAMBLE_LEN {
        Ok(PREAMBLE_LEN)
    } else {
        Err(Error::Binary("no WebAssembly preamble"))
    };
    std::iter::from_fn(move || {
        let start = match &at {
            Ok(start) if *start < binary.len() => *start,
            Ok(_) => return None,
            Err(_) => {
                let error = std::mem::replace(&mut at, Ok(binary.len()));
                return error.err().map(Err);
            }
        };
        let next = section_at(binary, start);
        at = match &next {
            Ok(section) => Ok(start + section.whole.len()),
            Err(_) => Ok(binary.len()),
        };
        Some(next)
    })
}

/// The section that starts at `start`.
fn section_at(binary: &[u8], start: usize) -> Result<Section<'_>, Error> {
    let id = binary[start];
    let (len, used) = read_leb(&binary[start + 1..]).ok_or(Error::Binary("bad section size"))?;
    let body_start = start + 1 + used;
    let end = body_start
        .checked_add(len)
        .filter(|end| *end <= binary.len())
        .ok_or(Error::Binary("a section runs past the end"))?;
    Ok(Section {
        id,
        body: &binary[body_start..end],
        whole: &binary[start..end],
    })
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

/// What docs sections say, as far as the host uses it: the docs of the
/// functions and types of each interface, by name (a package's interfaces and
/// its worlds' inline ones in one map), and every documented type by its name.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PackageDocs {
    interfaces: BTreeMap<String, InterfaceDocs>,
    /// Each type name's items, from the first interface that documents one: for
    /// a record a function's interface `use`s from another.
    types: BTreeMap<String, BTreeMap<String, String>>,
}

/// One record of the section, as the WIT tools write it.
#[derive(Deserialize)]
struct Wire {
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
pub struct InterfaceDocs {
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

/// Decodes a docs section's payload (the `package-docs` format): one record (a version byte, then JSON), or
/// several one after the other (what a linker makes of two crates' sections of
/// one name), merged with the first one's entries winning.
///
/// # Errors
///
/// [`Error::TooLarge`], [`Error::Empty`], [`Error::Version`], or
/// [`Error::Json`] for a payload not in the format.
pub fn decode(payload: &[u8]) -> Result<PackageDocs, Error> {
    if payload.len() > MAX_SECTION_BYTES {
        return Err(Error::TooLarge(payload.len()));
    }
    let mut docs = PackageDocs::default();
    let mut rest = payload;
    if rest.is_empty() {
        return Err(Error::Empty);
    }
    while let Some((version, json)) = rest.split_first() {
        if !VERSIONS.contains(version) {
            return Err(Error::Version(*version));
        }
        let mut records = serde_json::Deserializer::from_slice(json).into_iter::<Wire>();
        let wire = match records.next() {
            Some(record) => record?,
            None => return Err(Error::Empty),
        };
        rest = &json[records.byte_offset()..];
        docs.merge(wire);
    }
    Ok(docs)
}

impl PackageDocs {
    /// Adds `wire`'s interfaces (the package's, then its worlds' inline ones)
    /// that are not there yet.
    fn merge(&mut self, wire: Wire) {
        let inline = wire
            .worlds
            .into_values()
            .flat_map(|world| world.interface_exports.into_iter().chain(world.interfaces));
        for (name, interface) in wire.interfaces.into_iter().chain(inline) {
            for (ty, docs) in &interface.types {
                if !docs.items.is_empty() && !self.types.contains_key(ty) {
                    self.types.insert(ty.clone(), docs.items.clone());
                }
            }
            self.interfaces.entry(name).or_insert(interface);
        }
    }

    /// The interface named `interface` (its short name, e.g. `geo`).
    pub fn interface(&self, interface: &str) -> Option<&InterfaceDocs> {
        self.interfaces.get(interface)
    }

    /// The doc comment of the item (record field) `item` of the type named `ty`
    /// in whichever interface documents a type of that name first.
    pub fn item_anywhere(&self, ty: &str, item: &str) -> Option<&str> {
        self.types.get(ty)?.get(item).map(String::as_str)
    }

    /// The doc comment of `function` in `interface`.
    pub fn function(&self, interface: &str, function: &str) -> Option<&str> {
        self.interface(interface)?.function(function)
    }

    /// The doc comment of the item (record field) `item` of type `ty` in
    /// `interface`, by their WIT names.
    pub fn item(&self, interface: &str, ty: &str, item: &str) -> Option<&str> {
        self.interface(interface)?.item(ty, item)
    }
}

impl InterfaceDocs {
    /// The doc comment of `function`.
    pub fn function(&self, function: &str) -> Option<&str> {
        match self.funcs.get(function)? {
            FunctionDocs::Text(docs) | FunctionDocs::Object { docs } => docs.as_deref(),
        }
    }

    /// The doc comment of the item (record field) `item` of type `ty`.
    pub fn item(&self, ty: &str, item: &str) -> Option<&str> {
        self.types.get(ty)?.items.get(item).map(String::as_str)
    }
}

/// The lines of a function's doc comment that document its parameters: a line
/// `name: text` (or `- name: text`, `* name: text`, with the name in backticks or
/// not) whose name is one of `params` (WIT names; the `_` spelling matches too),
/// with the indented lines that follow it. Returns `(index into params, text)`
/// in the order of the lines; a parameter's first line wins.
pub fn parameter_lines(docs: &str, params: &[&str]) -> Vec<(usize, String)> {
    let mut names: HashMap<String, usize> = HashMap::with_capacity(params.len() * 2);
    for (index, param) in params.iter().enumerate() {
        names.entry((*param).to_owned()).or_insert(index);
        names.entry(param.replace('-', "_")).or_insert(index);
    }
    let mut found: Vec<(usize, String)> = Vec::new();
    // The parameter whose text the next indented line continues.
    let mut open: Option<usize> = None;
    for raw in docs.lines() {
        let line = raw.trim();
        if let (Some(at), true) = (open, raw.starts_with([' ', '\t']) && !line.is_empty()) {
            let bulleted = line.starts_with("- ") || line.starts_with("* ");
            if !bulleted {
                found[at].1.push(' ');
                found[at].1.push_str(line);
                continue;
            }
        }
        open = None;
        let item = line
            .strip_prefix("- ")
            .or_else(|| line.strip_prefix("* "))
            .unwrap_or(line)
            .trim_start();
        let Some((name, text)) = item.split_once(':') else {
            continue;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let Some(&index) = names.get(name.trim().trim_matches('`')) else {
            continue;
        };
        if found.iter().all(|(seen, _)| *seen != index) {
            found.push((index, text.to_owned()));
            open = Some(found.len() - 1);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    fn nested(id: u8, inner: &[u8]) -> Vec<u8> {
        let mut out = vec![id];
        write_leb(&mut out, inner.len());
        out.extend_from_slice(inner);
        out
    }

    /// A WIT folder of its own per call, removed when dropped.
    struct WitFolder(std::path::PathBuf);

    impl WitFolder {
        fn new(text: &str) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "wit-docs-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("world.wit"), text).unwrap();
            Self(dir)
        }
    }

    impl Drop for WitFolder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const WIT: &str = r#"package example:geo@0.1.0;

interface types {
  record place {
    /// Its name.
    name: string,
  }
}

interface geo {
  use types.{place};

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

  /// The nearest place.
  nearest: func(
    /// Where to measure from,
    /// in degrees.
    origin: point,
    // not a doc comment
    places: list<place>,
  ) -> place;
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
        let dir = WitFolder::new(WIT);
        let payload = encode(&dir.0).unwrap();
        assert_eq!(payload[0], 1);
        let docs = decode(&payload).unwrap();
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
        // A record another interface defines: found by its name.
        assert_eq!(docs.item("geo", "place", "name"), None);
        assert_eq!(docs.item_anywhere("place", "name"), Some("Its name."));
        assert_eq!(
            docs.function("inline", "hello"),
            Some("Says hello.\nwho-to-greet: a name")
        );
        assert_eq!(docs.function("geo", "nope"), None);
        assert_eq!(docs.function("other", "distance"), None);
    }

    #[test]
    fn doc_comments_on_parameters_join_the_function_docs() {
        let dir = WitFolder::new(WIT);
        let docs = decode(&encode(&dir.0).unwrap()).unwrap();
        let nearest = docs.function("geo", "nearest").unwrap();
        assert_eq!(
            nearest,
            "The nearest place.\n\n- origin: Where to measure from, in degrees."
        );
        assert_eq!(
            parameter_lines(nearest, &["origin", "places"]),
            vec![(0, "Where to measure from, in degrees.".to_owned())]
        );
    }

    #[test]
    fn a_bad_wit_names_the_path_and_the_reason() {
        let dir = WitFolder::new("package a:b;\ninterface i { f: func(x: nope); }\n");
        let error = encode(&dir.0)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.starts_with(&format!("cannot read the WIT at {}: ", dir.0.display())),
            "{error}"
        );
        assert!(error.contains("nope"), "{error}");
    }

    #[test]
    fn parameter_lines_match_names_in_either_spelling_once_each() {
        let docs = "Summary.\n\n- a: first\n  and more\n* `max_km`: most\nmax-km: again\nb:\nz: none\n  b : second\n  - not: continued";
        assert_eq!(
            parameter_lines(docs, &["a", "b", "max-km"]),
            vec![
                (0, "first and more".to_owned()),
                (2, "most".to_owned()),
                (1, "second".to_owned())
            ]
        );
        assert_eq!(parameter_lines("no params here", &["a"]), vec![]);
    }

    #[test]
    fn embed_replaces_the_top_level_section_and_find_reaches_nested_modules() {
        let mut module = EMPTY_MODULE.to_vec();
        module.extend(custom(SECTION_NAME, b"\x01inner"));
        let mut component = EMPTY_COMPONENT.to_vec();
        component.extend(custom(SECTION_NAME, b"\x01old"));
        component.extend(nested(CORE_MODULE, &module));
        component.extend(custom("name", b"x"));
        let embedded = embed(&component, b"\x01new").unwrap();
        assert_eq!(find(&embedded), vec![&b"\x01new"[..], &b"\x01inner"[..]]);
        let twice = embed(&embedded, b"\x01newer").unwrap();
        assert_eq!(find(&twice), vec![&b"\x01newer"[..], &b"\x01inner"[..]]);
        assert_eq!(twice.len(), embedded.len() + 2);
        assert!(matches!(
            embed(&EMPTY_MODULE, b"\x01"),
            Err(Error::CoreModule)
        ));
        assert!(matches!(embed(b"nope", b"\x01"), Err(Error::Binary(_))));
        let mut cut = component.clone();
        cut.truncate(cut.len() - 1);
        assert!(matches!(embed(&cut, b"\x01"), Err(Error::Binary(_))));
    }

    #[test]
    fn the_legacy_name_is_read_and_replaced_by_embed() -> Result<(), Error> {
        let mut old = EMPTY_COMPONENT.to_vec();
        old.extend(custom(LEGACY_SECTION_NAME, b"\x01old"));
        assert_eq!(find(&old), vec![&b"\x01old"[..]]);
        let out = embed(&old, b"\x01new")?;
        assert_eq!(find(&out), vec![&b"\x01new"[..]]);
        Ok(())
    }

    #[test]
    fn a_core_module_s_type_and_table_sections_are_not_searched_as_nested() {
        let mut inner = EMPTY_MODULE.to_vec();
        inner.extend(custom(SECTION_NAME, b"\x01x"));
        let mut module = EMPTY_MODULE.to_vec();
        module.extend(nested(CORE_MODULE, &inner));
        assert_eq!(find(&module), Vec::<&[u8]>::new());
    }

    #[test]
    fn malformed_binaries_and_payloads_are_refused_not_panicked_on() {
        let mut cut = EMPTY_COMPONENT.to_vec();
        cut.extend(custom(SECTION_NAME, b"\x01a"));
        cut.extend([CUSTOM, 0x80, 0x80, 0x80, 0x80, 0x0f]);
        // What came before the malformed header is found.
        assert_eq!(find(&cut), vec![&b"\x01a"[..]]);
        let mut past = EMPTY_COMPONENT.to_vec();
        past.extend([CUSTOM, 10, 1]);
        assert_eq!(find(&past), Vec::<&[u8]>::new());
        assert!(matches!(decode(b""), Err(Error::Empty)));
        assert_eq!(
            decode(b"\x02{}").err().map(|e| e.to_string()).as_deref(),
            Some("the codemode-docs section has version 2, not 0 or 1")
        );
        assert!(matches!(decode(b"\x01[1]"), Err(Error::Json(_))));
        assert!(matches!(decode(b"\x01{}\x07"), Err(Error::Version(7))));
        assert!(matches!(decode(b"\x01{}\x01"), Err(Error::Empty)));
        assert_eq!(decode(b"\x00{}").ok(), Some(PackageDocs::default()));
        let big = vec![1u8; MAX_SECTION_BYTES + 1];
        assert!(matches!(decode(&big), Err(Error::TooLarge(_))));
        // Version 0 wrote a function's docs as a bare string.
        let v0 = decode(b"\x00{\"interfaces\":{\"i\":{\"funcs\":{\"f\":\"Docs.\"}}}}").unwrap();
        assert_eq!(v0.function("i", "f"), Some("Docs."));
    }

    #[test]
    fn two_records_in_one_section_merge_the_first_winning() {
        let docs = decode(
            b"\x01{\"interfaces\":{\"i\":{\"funcs\":{\"f\":{\"docs\":\"First.\"}}}}}\
              \x01{\"interfaces\":{\"i\":{\"funcs\":{\"f\":{\"docs\":\"Second.\"}}},\"j\":{\"funcs\":{\"g\":{\"docs\":\"G.\"}}}}}",
        )
        .unwrap();
        assert_eq!(docs.function("i", "f"), Some("First."));
        assert_eq!(docs.function("j", "g"), Some("G."));
        // A world's inline interface, under its exports' name.
        let inline = decode(
            b"\x01{\"worlds\":{\"w\":{\"interface_exports\":{\"k\":{\"funcs\":{\"h\":{\"docs\":\"H.\"}}}}}}}",
        )
        .unwrap();
        assert_eq!(inline.function("k", "h"), Some("H."));
    }

    #[test]
    fn many_sections_are_walked_without_collecting_them_and_few_returned() {
        let mut component = EMPTY_COMPONENT.to_vec();
        for _ in 0..100_000 {
            component.extend([CUSTOM, 1, 0]);
        }
        for _ in 0..(MAX_FOUND + 5) {
            component.extend(custom(SECTION_NAME, b"\x02"));
        }
        assert_eq!(find(&component).len(), MAX_FOUND);
    }

    #[test]
    fn nesting_is_searched_to_the_bound_and_no_deeper() {
        let wrap = |levels: usize| {
            let mut inner = EMPTY_COMPONENT.to_vec();
            inner.extend(custom(SECTION_NAME, b"\x01deep"));
            for _ in 0..levels {
                let mut outer = EMPTY_COMPONENT.to_vec();
                outer.extend(nested(COMPONENT, &inner));
                inner = outer;
            }
            inner
        };
        assert_eq!(find(&wrap(MAX_DEPTH)), vec![&b"\x01deep"[..]]);
        assert_eq!(find(&wrap(MAX_DEPTH + 1)), Vec::<&[u8]>::new());
    }
}
