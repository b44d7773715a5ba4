//! Loads one plugin file: compile, link, reflect the exports, ask `describe()`, and
//! pair every metadata entry with the export it names.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_wit_docs::PackageDocs;

use wasmtime::Engine;
use wasmtime::component::{Component, InstancePre};

use super::compile::{self, CompileError, Compiler};
use super::grants::Grants;
use super::invoke::CallTarget;
use super::listing::file_label;
use super::metadata::{self, ANNOTATIONS_INTERFACE, Annotated, METADATA_INTERFACE, MetadataEntry};
use super::reflect::{self, ExportedFunc, TypeError};
use super::sandbox::{self, PluginState};
use super::spare::{Spares, Template};
use super::wire::ErrorKind;
use crate::cache::{ArtifactCache, Origin};
use crate::catalog::{
    Annotations, Capability, CapabilitySpec, CatalogBuilder, snake_case, validate_spec,
    with_arguments,
};
use crate::files::{FileError, read_regular};
use crate::source::UPSTREAM_ID_PREFIX;

/// The name of plugins' cache entries.
pub const PLUGIN_PREFIX: &str = "plugin";

/// `\0asm`: every WebAssembly binary starts with it.
const WASM_MAGIC: [u8; 4] = *b"\0asm";
/// Bytes 6..8 of the header: 0 for a core module, 1 for a component.
const COMPONENT_LAYER: [u8; 2] = [1, 0];

/// What loading one plugin may cost: set by the operator, the same for every file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadLimits {
    /// Largest component file read (`--max-plugin-bytes`), checked from the file's
    /// metadata before a byte is read.
    pub max_plugin_bytes: u64,
    /// Wall time for compiling one plugin, and again for its `describe()`
    /// (`--load-timeout`): a plugin past it is skipped with the reason.
    pub load_timeout: Duration,
    /// Where plugins are compiled (the binary: a child process capped by
    /// `--max-compile-memory`).
    pub compiler: Compiler,
}

impl Default for LoadLimits {
    fn default() -> Self {
        Self {
            max_plugin_bytes: 256 << 20,
            // The Python and JavaScript examples (12-40 MB components) compile in
            // about 10 s on a busy 2-vCPU machine: a tighter default skipped them.
            load_timeout: Duration::from_secs(30),
            compiler: Compiler::InProcess,
        }
    }
}

/// Why one plugin file could not be loaded. The caller prefixes the file name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read, is not a regular file, or is too large.
    #[error("{0}")]
    Read(#[source] FileError),
    /// The sidecar `<plugin>.toml` is unreadable or wrong (the message names it).
    #[error("{0}")]
    Sidecar(String),
    /// The file is not WebAssembly at all.
    #[error("not a WebAssembly file (no `\\0asm` header); only components are loaded")]
    NotWasm,
    /// The file is a core module, not a component.
    #[error(
        "a core WebAssembly module, not a component: build it with a component toolchain (e.g. `cargo build --target wasm32-wasip2`)"
    )]
    CoreModule,
    /// wasmtime rejected the component.
    #[error("invalid component: {0:#}")]
    Compile(wasmtime::Error),
    /// Compiling took longer than `--load-timeout`.
    #[error("compiling took longer than {} ms (--load-timeout)", .0.as_millis())]
    CompileTimeout(Duration),
    /// Compiling needed more memory than `--max-compile-memory`.
    #[error("compiling needed more than {} of memory (--max-compile-memory)", crate::units::format_bytes(*.0))]
    CompileMemory(u64),
    /// Its imports could not be linked.
    #[error("cannot link the component's imports: {0:#}")]
    Link(wasmtime::Error),
    /// The component does not export the metadata interface.
    #[error(
        "does not export `{METADATA_INTERFACE}` (Rust plugins get it from codemode-sdk's `metadata!`; other toolchains must include the world `codemode:plugin/plugin@0.1.0`)"
    )]
    NoMetadata,
    /// `describe()` trapped or failed.
    #[error("`{METADATA_INTERFACE}#describe` failed: {0:#}")]
    Describe(wasmtime::Error),
    /// `annotate()` is mistyped, trapped or failed.
    #[error("`{ANNOTATIONS_INTERFACE}#annotate` failed: {0:#}")]
    Annotate(wasmtime::Error),
    /// An `annotate()` entry names an export no metadata entry describes.
    #[error("annotations entry `{0}` names no capability of the metadata")]
    UnknownAnnotated(String),
    /// `annotate()` returned more entries than the metadata has capabilities.
    #[error("annotate() returned {entries} entries for {capabilities} capabilities")]
    TooManyAnnotated {
        /// How many entries.
        entries: usize,
        /// How many capabilities.
        capabilities: usize,
    },
    /// Two `annotate()` entries name the same export.
    #[error("export `{0}`: annotated more than once")]
    DuplicateAnnotated(String),
    /// A metadata entry names an export the component does not have.
    #[error(
        "metadata entry `{export}` names no exported function (exported functions: {available})"
    )]
    UnknownExport {
        /// The `export-name` given.
        export: String,
        /// What the component does export, comma-separated.
        available: String,
    },
    /// Two metadata entries name the same export.
    #[error("export `{0}`: named by more than one metadata entry")]
    DuplicateEntry(String),
    /// Two exported interfaces share a short name, so `<interface>.<function>` is
    /// ambiguous.
    #[error("export `{0}`: exported by two interfaces with the same name")]
    AmbiguousExport(String),
    /// The export's WIT signature is outside the mapping.
    #[error("export `{export}`: {source}")]
    Type {
        /// The export, `<interface>.<function>`.
        export: String,
        /// What is wrong with its types.
        source: TypeError,
    },
    /// What the catalog refuses in a capability's metadata (a name, an ID, a text).
    #[error("export `{export}`: {reason}")]
    Spec {
        /// The export, `<interface>.<function>`.
        export: String,
        /// What is wrong.
        reason: String,
    },
    /// Several of the problems above at once: every export and metadata entry is
    /// checked, so one attempt names them all.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<LoadError>),
}

impl LoadError {
    /// Whether loading may succeed if simply tried again: the process or the system
    /// ran out of file descriptors or memory, or a thread could not be started.
    pub fn is_transient(&self) -> bool {
        match self {
            LoadError::Read(FileError::Io(error)) => transient_io(error),
            _ => false,
        }
    }

    /// One message per problem: [`LoadError::Several`] gives each of its own.
    pub fn messages(&self) -> Vec<String> {
        match self {
            LoadError::Several(errors) => errors.iter().flat_map(LoadError::messages).collect(),
            other => vec![other.to_string()],
        }
    }

    /// `errors` as one error: none is `Ok`, one is itself, more are
    /// [`LoadError::Several`].
    fn all(mut errors: Vec<LoadError>) -> Result<(), LoadError> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(LoadError::Several(errors)),
        }
    }
}

/// Validates `capabilities`' metadata into the capabilities the catalog takes,
/// every problem at once: each is checked alone (an ID in the upstream tools'
/// namespace included), then (when each passed) the group, for names and IDs the
/// plugin gives twice.
///
/// # Errors
///
/// Every problem, each naming its export.
pub fn check_specs(capabilities: &[PluginCapability]) -> Result<Vec<Arc<Capability>>, LoadError> {
    let mut errors = Vec::new();
    let mut valid = Vec::with_capacity(capabilities.len());
    for capability in capabilities {
        let spec = &capability.spec;
        let refusal = |reason: String| LoadError::Spec {
            export: capability.export.clone(),
            reason,
        };
        if let Some(id) = spec
            .id
            .as_deref()
            .filter(|id| id.starts_with(UPSTREAM_ID_PREFIX))
        {
            errors.push(refusal(format!(
                "capability ID `{id}` is in the `{UPSTREAM_ID_PREFIX}` namespace, which only upstream MCP servers' tools use"
            )));
            continue;
        }
        match validate_spec(spec) {
            Ok(mut valid_one) => {
                valid_one.annotations = capability.annotations;
                valid.push(Arc::new(valid_one));
            }
            Err(error) => errors.push(refusal(error.to_string())),
        }
    }
    if errors.is_empty()
        && let Err((index, error)) = CatalogBuilder::new().add(&valid)
    {
        errors.push(LoadError::Spec {
            export: capabilities[index].export.clone(),
            reason: error.to_string(),
        });
    }
    LoadError::all(errors)?;
    Ok(valid)
}

/// `EMFILE`, `ENFILE`, `ENOMEM`, `EAGAIN`, `EINTR`: errors of the moment, not of
/// the file.
fn transient_io(error: &std::io::Error) -> bool {
    #[cfg(unix)]
    if let Some(code) = error.raw_os_error() {
        return [
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOMEM,
            libc::EAGAIN,
            libc::EINTR,
        ]
        .contains(&code);
    }
    matches!(
        error.kind(),
        std::io::ErrorKind::Interrupted | std::io::ErrorKind::OutOfMemory
    )
}

/// A capability as one plugin declares it, while it loads: its metadata (not yet
/// validated) plus where to call it.
#[derive(Debug, Clone)]
pub struct PluginCapability {
    /// What the catalog needs, as declared.
    pub spec: CapabilitySpec,
    /// The export, `<interface>.<function>` in WIT names.
    pub export: String,
    /// Full name of the exported instance.
    pub instance: String,
    /// The function's WIT name.
    pub function: String,
    /// How its result reports a failure.
    pub error: ErrorKind,
    /// What it says of its effects (`annotate()`).
    pub annotations: Annotations,
}

/// A plugin file that compiled, linked and described itself.
pub struct LoadedPlugin {
    /// The file name, e.g. `records.wasm`, used in every message about it.
    pub file: String,
    /// Ready to instantiate: imports resolved once.
    pub pre: InstancePre<PluginState>,
    /// What its sidecar grants.
    pub grants: Arc<Grants>,
    /// Its capabilities, in metadata order, as the catalog and routes share them.
    pub capabilities: Vec<Arc<Capability>>,
    /// Where to call each capability (same order as `capabilities`), and how its
    /// arguments and result cross.
    pub targets: Vec<CallTarget>,
    /// Exports no metadata entry names (ignored; logged as a warning).
    pub ignored_exports: Vec<String>,
    /// Whether the compiled component came from the artifact cache.
    pub cached: bool,
    /// Its entry in the artifact cache (when there is a cache).
    pub cache_entry: Option<PathBuf>,
    /// Compile + link + describe time.
    pub load_time: Duration,
    /// Its next fresh instance, made ahead of time.
    pub spares: Spares,
    /// `--max-memory` as it was loaded with: what each linear memory of its
    /// instances may grow to, unless its own `max_memory` grant is lower.
    pub max_memory_bytes: usize,
    /// Where it was pulled from and who signed it, when its `<name>.oci.json`
    /// names this file's digest.
    pub provenance: Option<crate::source::Pulled>,
}

impl Template for LoadedPlugin {
    fn file(&self) -> &str {
        &self.file
    }

    fn pre(&self) -> &InstancePre<PluginState> {
        &self.pre
    }

    fn grants(&self) -> &Arc<Grants> {
        &self.grants
    }

    fn spares(&self) -> &Spares {
        &self.spares
    }
}

/// Loads the plugin at `path`, its instances to grow each linear memory to at most
/// `max_memory_bytes` (`--max-memory`; its own grant may be lower).
///
/// # Errors
///
/// Any [`LoadError`]; the file is then skipped by the caller.
pub fn load_file(
    engine: &Engine,
    path: &Path,
    cache: Option<&ArtifactCache>,
    limits: &LoadLimits,
    max_memory_bytes: usize,
) -> Result<LoadedPlugin, LoadError> {
    let started = Instant::now();
    let grants = Grants::for_plugin(path).map_err(LoadError::Sidecar)?;
    let bytes = read_regular(path, limits.max_plugin_bytes, "--max-plugin-bytes")
        .map_err(LoadError::Read)?;
    if bytes.get(..4) != Some(&WASM_MAGIC[..]) {
        return Err(LoadError::NotWasm);
    }
    if bytes.get(6..8) != Some(&COMPONENT_LAYER[..]) {
        return Err(LoadError::CoreModule);
    }
    let compile = || {
        compile::compile(engine, &bytes, &limits.compiler, limits.load_timeout)
            .map_err(wasmtime::Error::new)
    };
    let cache_entry = cache.map(|cache| cache.entry(engine, PLUGIN_PREFIX, &bytes));
    let (component, cached) = match (cache, &cache_entry) {
        (Some(cache), Some(entry)) => cache
            .component(engine, entry, compile)
            .map(|(c, origin)| (c, origin == Origin::Cached)),
        _ => compile().map(|c| (c, false)),
    }
    .map_err(|error| match error.downcast::<CompileError>() {
        Ok(CompileError::Timeout(limit)) => LoadError::CompileTimeout(limit),
        Ok(CompileError::Memory(max)) => LoadError::CompileMemory(max),
        Ok(CompileError::Invalid(error)) => LoadError::Compile(error),
        Err(error) => LoadError::Compile(error),
    })?;
    let docs = super::docs::read(&file_label(path), &bytes);
    let provenance = crate::oci::provenance_of(path, Some(&bytes)).map(|p| crate::source::Pulled {
        reference: p.reference,
        digest: p.digest,
        key_id: p.key_id,
    });
    let loaded = prepare(engine, path, &component, limits, docs.as_ref());
    // An entry this load wrote for a version that then failed would never serve,
    // and nothing would remove it: a plugin rebuilt broken twenty times would leave
    // twenty. (An entry that was there before may serve another version's load.)
    if loaded.is_err()
        && !cached
        && let (Some(cache), Some(entry)) = (cache, &cache_entry)
    {
        cache.remove(entry);
    }
    let Prepared {
        pre,
        capabilities,
        targets,
        ignored_exports,
    } = loaded?;
    Ok(LoadedPlugin {
        file: file_label(path),
        pre,
        grants: Arc::new(grants),
        capabilities,
        targets,
        ignored_exports,
        cached,
        cache_entry,
        load_time: started.elapsed(),
        spares: Spares::default(),
        max_memory_bytes,
        provenance,
    })
}

/// What loading makes of a compiled component.
struct Prepared {
    pre: InstancePre<PluginState>,
    capabilities: Vec<Arc<Capability>>,
    targets: Vec<CallTarget>,
    ignored_exports: Vec<String>,
}

/// Links `component`, asks its `describe()` and matches the metadata to the
/// exports.
fn prepare(
    engine: &Engine,
    path: &Path,
    component: &Component,
    limits: &LoadLimits,
    docs: Option<&PackageDocs>,
) -> Result<Prepared, LoadError> {
    let (funcs, _other) = reflect::exported_functions(engine, component, docs.is_some());
    if !funcs.iter().any(|f| f.instance == METADATA_INTERFACE) {
        return Err(LoadError::NoMetadata);
    }
    let pre = sandbox::pre_instantiate(engine, component).map_err(LoadError::Link)?;
    let described = metadata::describe(&file_label(path), engine, &pre, limits.load_timeout)
        .map_err(LoadError::Describe)?;
    // Every problem of what the plugin says of itself, in one error.
    let ((mut declared, ignored_exports), annotations) = match (
        assemble(funcs, described.entries, docs),
        described.annotations,
    ) {
        (Ok(assembled), Ok(annotations)) => (assembled, annotations),
        (Ok(_), Err(error)) => return Err(LoadError::Annotate(error)),
        (Err(error), Ok(_)) => return Err(error),
        (Err(error), Err(annotate_error)) => {
            return Err(LoadError::Several(vec![
                error,
                LoadError::Annotate(annotate_error),
            ]));
        }
    };
    if let Err(error) = annotate(&mut declared, annotations) {
        // With the metadata's own problems, if any.
        return Err(match check_specs(&declared) {
            Ok(_) => error,
            Err(checked) => LoadError::Several(vec![error, checked]),
        });
    }
    let capabilities = check_specs(&declared)?;
    let targets = declared
        .into_iter()
        .map(|c| {
            CallTarget::resolve(component, &c.instance, &c.function, c.error).ok_or_else(|| {
                LoadError::Link(wasmtime::Error::msg(format!(
                    "export `{}` cannot be resolved for calling",
                    c.export
                )))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Prepared {
        pre,
        capabilities,
        targets,
        ignored_exports,
    })
}

/// Whether `instance` is the annotations interface, of any 0.1.x version.
fn is_annotations(instance: &str) -> bool {
    instance
        .strip_prefix(ANNOTATIONS_INTERFACE.trim_end_matches("0.1.0"))
        .is_some_and(|version| version.starts_with("0.1."))
}

/// Gives each capability the hints its `annotate()` entry declares.
///
/// # Errors
///
/// [`LoadError::UnknownAnnotated`] or [`LoadError::DuplicateAnnotated`], all
/// of them at once.
pub fn annotate(
    capabilities: &mut [PluginCapability],
    annotations: Vec<Annotated>,
) -> Result<(), LoadError> {
    // Past one entry per capability, some entry is unknown or repeated: one
    // error, not one per entry of a list a plugin made as long as it liked.
    if annotations.len() > capabilities.len() {
        return Err(LoadError::TooManyAnnotated {
            entries: annotations.len(),
            capabilities: capabilities.len(),
        });
    }
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    for annotated in annotations {
        if !seen.insert(annotated.export_name.clone()) {
            errors.push(LoadError::DuplicateAnnotated(annotated.export_name));
            continue;
        }
        match capabilities
            .iter_mut()
            .find(|c| c.export == annotated.export_name)
        {
            Some(capability) => {
                let hints = annotated.hints;
                capability.annotations = Annotations {
                    read_only: hints.read_only,
                    destructive: hints.destructive,
                    idempotent: hints.idempotent,
                    open_world: hints.open_world,
                };
            }
            None => errors.push(LoadError::UnknownAnnotated(annotated.export_name)),
        }
    }
    LoadError::all(errors)
}

/// Pairs metadata entries with exported functions. Returns the capabilities in
/// metadata order and the exports nobody named. A description ends with the
/// `Arguments:` block of what `docs` (the component's WIT docs) say of the
/// parameters.
///
/// # Errors
///
/// [`LoadError::UnknownExport`], [`LoadError::DuplicateEntry`],
/// [`LoadError::AmbiguousExport`] or [`LoadError::Type`].
pub fn assemble(
    funcs: Vec<ExportedFunc>,
    entries: Vec<MetadataEntry>,
    docs: Option<&PackageDocs>,
) -> Result<(Vec<PluginCapability>, Vec<String>), LoadError> {
    let funcs: Vec<ExportedFunc> = funcs
        .into_iter()
        // Any 0.1.x of the annotations interface is what `describe()`'s
        // instance calls (wasmtime finds a compatible version), never a capability.
        .filter(|f| f.instance != METADATA_INTERFACE && !is_annotations(&f.instance))
        .collect();
    // Every problem is collected, so that one attempt names them all.
    let mut errors = Vec::new();
    let mut seen_exports = HashSet::new();
    for f in &funcs {
        if !seen_exports.insert(f.export_name()) {
            errors.push(LoadError::AmbiguousExport(f.export_name()));
        }
    }
    let mut named = HashSet::new();
    let mut capabilities = Vec::new();
    for entry in entries {
        let Some(func) = funcs.iter().find(|f| f.export_name() == entry.export_name) else {
            let mut available: Vec<String> = funcs.iter().map(ExportedFunc::export_name).collect();
            available.sort();
            let available = if available.is_empty() {
                "none".to_owned()
            } else {
                available.join(", ")
            };
            errors.push(LoadError::UnknownExport {
                export: entry.export_name,
                available,
            });
            continue;
        };
        if !named.insert(entry.export_name.clone()) {
            errors.push(LoadError::DuplicateEntry(entry.export_name));
            continue;
        }
        let signature = match func.signature.clone() {
            Ok(signature) => signature,
            Err(source) => {
                errors.push(LoadError::Type {
                    export: entry.export_name.clone(),
                    source,
                });
                continue;
            }
        };
        let default_name = format!(
            "{}.{}",
            snake_case(&func.interface),
            snake_case(&func.function)
        );
        let arguments =
            docs.and_then(|docs| super::docs::argument_docs(docs, func, &signature.params));
        let description = match (arguments, entry.description) {
            // A description the catalog refuses stays as it is, to be refused.
            (Some(block), Some(description))
                if !description.is_empty() && description.trim() == description =>
            {
                Some(with_arguments(&description, &block))
            }
            (Some(block), None) if !entry.summary.is_empty() => {
                Some(with_arguments(&entry.summary, &block))
            }
            (_, description) => description,
        };
        capabilities.push(PluginCapability {
            spec: CapabilitySpec {
                name: entry.name.unwrap_or(default_name),
                id: entry.id,
                summary: entry.summary,
                description,
                search_terms: entry.search_terms,
                params: signature.params,
                output: signature.output,
            },
            export: entry.export_name,
            instance: func.instance.clone(),
            function: func.function.clone(),
            error: signature.error,
            annotations: Annotations::default(),
        });
    }
    LoadError::all(errors)?;
    let ignored = funcs
        .iter()
        .map(ExportedFunc::export_name)
        .filter(|n| !named.contains(n))
        .collect();
    Ok((capabilities, ignored))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Field, Shape};
    use crate::plugins::reflect::Signature;

    fn func(
        interface: &str,
        function: &str,
        signature: Result<Signature, TypeError>,
    ) -> ExportedFunc {
        ExportedFunc {
            instance: format!("test:pkg/{interface}@0.1.0"),
            interface: interface.to_owned(),
            function: function.to_owned(),
            params: vec![("key".to_owned(), None)],
            signature,
        }
    }

    fn ok_sig() -> Result<Signature, TypeError> {
        Ok(Signature {
            params: vec![Field::new("key", Shape::Str)],
            output: vec![],
            error: ErrorKind::Message,
        })
    }

    fn entry(export: &str) -> MetadataEntry {
        MetadataEntry {
            export_name: export.to_owned(),
            name: None,
            id: None,
            summary: "S.".to_owned(),
            description: None,
            search_terms: vec![],
        }
    }

    #[test]
    fn entries_pair_with_exports_and_default_names_are_snake_case() {
        let funcs = vec![
            func("my-records", "look-up", ok_sig()),
            func("my-records", "extra", ok_sig()),
            func("metadata", "describe", ok_sig()),
        ];
        let (caps, ignored) = assemble(funcs, vec![entry("my-records.look-up")], None)
            .map_err(|e| e.to_string())
            .unwrap();
        assert_eq!(caps.len(), 1);
        assert_eq!(caps[0].spec.name, "my_records.look_up");
        assert_eq!(caps[0].export, "my-records.look-up");
        assert_eq!(caps[0].function, "look-up");
        assert_eq!(
            ignored,
            vec![
                "my-records.extra".to_string(),
                "metadata.describe".to_string()
            ]
        );
    }

    #[test]
    fn metadata_errors_name_the_export() {
        let cases: Vec<(&str, Vec<ExportedFunc>, Vec<MetadataEntry>, &str)> = vec![
            (
                "unknown export",
                vec![
                    func("records", "lookup", ok_sig()),
                    func("records", "query", ok_sig()),
                ],
                vec![entry("records.find")],
                "metadata entry `records.find` names no exported function (exported functions: records.lookup, records.query)",
            ),
            (
                "no exports",
                vec![],
                vec![entry("records.find")],
                "metadata entry `records.find` names no exported function (exported functions: none)",
            ),
            (
                "duplicate entry",
                vec![func("records", "lookup", ok_sig())],
                vec![entry("records.lookup"), entry("records.lookup")],
                "export `records.lookup`: named by more than one metadata entry",
            ),
            (
                "bad type",
                vec![func(
                    "records",
                    "lookup",
                    Err(TypeError::Result {
                        found: "u32".into(),
                    }),
                )],
                vec![entry("records.lookup")],
                "export `records.lookup`: the result must be a record or result<record, E>, found u32",
            ),
            (
                "ambiguous interface name",
                vec![
                    func("records", "lookup", ok_sig()),
                    ExportedFunc {
                        instance: "other:pkg/records@1.0.0".into(),
                        ..func("records", "lookup", ok_sig())
                    },
                ],
                vec![entry("records.lookup")],
                "export `records.lookup`: exported by two interfaces with the same name",
            ),
        ];
        for (case, funcs, entries, want) in cases {
            let got = assemble(funcs, entries, None)
                .map(|_| ())
                .map_err(|e| e.to_string());
            assert_eq!(got, Err(want.to_owned()), "{case}");
        }
    }

    #[test]
    fn every_metadata_problem_is_named_at_once() {
        let funcs = vec![
            func("records", "lookup", ok_sig()),
            func(
                "records",
                "query",
                Err(TypeError::Result {
                    found: "u32".into(),
                }),
            ),
        ];
        let entries = vec![
            entry("records.query"),
            entry("records.find"),
            entry("records.lookup"),
            entry("records.lookup"),
        ];
        let error = assemble(funcs, entries, None).map(|_| ()).err();
        assert_eq!(
            error.as_ref().map(LoadError::messages),
            Some(vec![
                "export `records.query`: the result must be a record or result<record, E>, found u32".to_owned(),
                "metadata entry `records.find` names no exported function (exported functions: records.lookup, records.query)".to_owned(),
                "export `records.lookup`: named by more than one metadata entry".to_owned(),
            ])
        );
        // In the log, one line: the same messages joined.
        assert_eq!(error.map(|e| e.to_string().matches("; ").count()), Some(2));
    }

    #[test]
    fn wit_docs_end_the_description_or_the_summary_and_a_refused_one_stays() {
        let docs = codemode_wit_docs::decode(
            b"\x01{\"interfaces\":{\"records\":{\"funcs\":{\"lookup\":{\"docs\":\"- key: the key\"}}}}}",
        )
        .unwrap();
        let described = |description: Option<&str>| {
            let mut entry = entry("records.lookup");
            entry.description = description.map(str::to_owned);
            let (caps, _) = assemble(
                vec![func("records", "lookup", ok_sig())],
                vec![entry],
                Some(&docs),
            )
            .unwrap();
            caps[0].spec.description.clone()
        };
        assert_eq!(
            described(None).as_deref(),
            Some("S.\n\nArguments:\n- key: the key")
        );
        assert_eq!(
            described(Some("Long.")).as_deref(),
            Some("Long.\n\nArguments:\n- key: the key")
        );
        assert_eq!(described(Some(" padded")).as_deref(), Some(" padded"));
    }

    #[test]
    fn annotations_reach_the_capability_they_name_and_strays_are_refused() {
        let funcs = vec![
            func("records", "lookup", ok_sig()),
            func("records", "erase", ok_sig()),
            func("annotations", "annotate", ok_sig()),
        ];
        let mut funcs = funcs;
        funcs[2].instance = ANNOTATIONS_INTERFACE.to_owned();
        let (mut declared, ignored) = assemble(
            funcs,
            vec![entry("records.lookup"), entry("records.erase")],
            None,
        )
        .expect("assembles");
        // The annotations export is the host's, not a capability left out.
        assert_eq!(ignored, Vec::<String>::new());
        let hints = |read_only, destructive| metadata::Hints {
            read_only,
            destructive,
            ..metadata::Hints::default()
        };
        let annotated = |export: &str, hints| Annotated {
            export_name: export.to_owned(),
            hints,
        };
        annotate(
            &mut declared,
            vec![annotated("records.erase", hints(Some(false), Some(true)))],
        )
        .expect("annotates");
        let capabilities = check_specs(&declared).expect("valid");
        assert_eq!(capabilities[0].annotations, Annotations::default());
        assert_eq!(
            capabilities[1].annotations,
            Annotations {
                read_only: Some(false),
                destructive: Some(true),
                idempotent: None,
                open_world: None,
            }
        );
        let error = annotate(
            &mut declared,
            vec![
                annotated("records.gone", hints(None, None)),
                annotated("records.gone", hints(None, None)),
            ],
        )
        .err();
        assert_eq!(
            annotate(
                &mut declared,
                vec![annotated("records.lookup", hints(None, None)); 3]
            )
            .err()
            .map(|e| e.to_string()),
            Some("annotate() returned 3 entries for 2 capabilities".to_owned())
        );
        assert!(is_annotations("codemode:plugin/annotations@0.1.7"));
        assert!(!is_annotations("codemode:plugin/annotations@0.2.0"));
        assert_eq!(
            error.as_ref().map(LoadError::messages),
            Some(vec![
                "annotations entry `records.gone` names no capability of the metadata".to_owned(),
                "export `records.gone`: annotated more than once".to_owned(),
            ])
        );
    }

    #[test]
    fn every_catalog_problem_of_the_metadata_is_named_at_once() {
        let capability = |export: &str, name: &str, summary: &str| PluginCapability {
            spec: CapabilitySpec {
                name: name.to_owned(),
                id: None,
                summary: summary.to_owned(),
                description: None,
                search_terms: vec![],
                params: vec![],
                output: vec![],
            },
            export: export.to_owned(),
            instance: "test:pkg/records@0.1.0".to_owned(),
            function: "f".to_owned(),
            error: ErrorKind::Message,
            annotations: Annotations::default(),
        };
        let messages = check_specs(&[
            capability("records.a", "json.a", "A."),
            capability("records.b", "records.b", " "),
            capability("records.c", "records.c", "C."),
        ])
        .err()
        .map(|e| e.messages())
        .unwrap_or_default();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages[0].starts_with("export `records.a`: "),
            "{messages:?}"
        );
        assert!(
            messages[1].starts_with("export `records.b`: "),
            "{messages:?}"
        );
        // Each passes alone, but not together: the group check names the second.
        let twice = check_specs(&[
            capability("records.a", "records.a", "A."),
            capability("records.b", "records.a", "B."),
        ])
        .err()
        .map(|e| e.messages())
        .unwrap_or_default();
        assert_eq!(twice.len(), 1, "{twice:?}");
        assert!(twice[0].starts_with("export `records.b`: "), "{twice:?}");
    }

    #[test]
    fn running_out_of_descriptors_or_memory_is_transient_a_bad_file_is_not() {
        let io = |code| LoadError::Read(FileError::Io(std::io::Error::from_raw_os_error(code)));
        assert!(io(libc::EMFILE).is_transient());
        assert!(io(libc::ENFILE).is_transient());
        assert!(io(libc::ENOMEM).is_transient());
        assert!(!io(libc::ENOENT).is_transient());
        assert!(!io(libc::EACCES).is_transient());
        assert!(!LoadError::Read(FileError::NotRegular("a FIFO")).is_transient());
        assert!(!LoadError::NotWasm.is_transient());
    }
}
