//! The immutable catalog of capabilities: identities, signatures, field shapes and the
//! search index.
//!
//! The catalog knows nothing of wasmtime, MCP or Rego. The plugin loader describes
//! each capability as a [`CapabilitySpec`] (plain data); [`CatalogBuilder`] validates
//! specs by the seed's registration rules and builds a [`Catalog`] that is never
//! mutated: a reload builds a new one and swaps it.

mod bind;
mod docs;
mod name;
mod quote;
mod search;
mod shape;
mod suggest;
mod tokenize;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub use bind::{BindError, BindLimits, Binder, Bound, Lowering, Member, Values};
pub use docs::{MAX_ARGUMENT_DOCS, argument_block, one_line, with_arguments};
pub use name::{CapabilityId, DottedName, NameError, check_parameter_name};
pub use quote::is_printable;
pub use search::{
    MAX_SEARCH_RESPONSE_BYTES, MAX_SEARCH_RESULTS, SearchError, SearchResponse, SearchResult,
};
#[doc(hidden)]
pub use shape::signature;
pub use shape::{Field, FieldShape, FloatKind, IntKind, MAX_LITERALS_SHOWN, Shape, snake_case};
pub use suggest::suggest;

use search::{Document, SearchIndex, fits_alone};

/// Most capabilities one catalog may hold (all plugins together).
pub const MAX_CAPABILITIES: usize = 4096;
/// Most raw bytes of searchable metadata (name, summary, description, search terms)
/// over all capabilities.
pub const MAX_METADATA_BYTES: usize = 32 * 1024 * 1024;
/// Most search-term phrases per capability.
pub const MAX_SEARCH_TERMS: usize = 16;
/// Most bytes of search terms per capability.
pub const MAX_SEARCH_TERM_BYTES: usize = 1024;

/// Everything the catalog needs to know about one capability, as a plugin declared it.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilitySpec {
    /// Dotted name agents call.
    pub name: String,
    /// Stable ID; `None` means the name.
    pub id: Option<String>,
    /// One-line summary shown by search.
    pub summary: String,
    /// Longer description; `None` means the summary.
    pub description: Option<String>,
    /// Discovery-only phrases.
    pub search_terms: Vec<String>,
    /// Parameters in declaration order (all keyword-only).
    pub params: Vec<Field>,
    /// Fields of the result record.
    pub output: Vec<Field>,
}

/// A validated capability: made once by its source ([`validate_spec`], the only
/// way to make one outside this crate) and shared, as one `Arc`, by the source,
/// the catalog and the routes executions call.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Capability {
    /// Dotted name agents call.
    pub name: DottedName,
    /// Stable ID for policies and `--disable`.
    pub id: CapabilityId,
    /// One-line summary.
    pub summary: String,
    /// Description (the summary when none was given).
    pub description: String,
    /// Keyword signature, e.g. `records.lookup(*, key: str)`.
    pub signature: String,
    /// Parameters in declaration order.
    pub params: Vec<Field>,
    /// Result record fields.
    pub output: Vec<Field>,
    /// Binds a call's arguments to `params`: compiled from them, once (not
    /// public, so that it cannot part from them; [`Capability::binder`] reads
    /// it).
    pub(crate) binder: Binder,
    /// Discovery-only phrases.
    pub search_terms: Vec<String>,
    /// Raw searchable bytes as declared, counted against [`MAX_METADATA_BYTES`].
    pub metadata_bytes: usize,
    /// What its source says of its effects (policies read them; none are
    /// assumed).
    pub annotations: Annotations,
}

/// What a capability's source says of its effects: MCP's tool annotations
/// (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`).
/// `None` is not said: the MCP defaults are not filled in, so that a policy
/// tells a declared hint from an absent one. Hints, not guarantees: they come
/// from the source, which a policy may or may not trust.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Annotations {
    /// It does not change its environment.
    pub read_only: Option<bool>,
    /// It may destroy or overwrite (meaningful when not read-only).
    pub destructive: Option<bool>,
    /// Calling it again with the same arguments changes nothing more.
    pub idempotent: Option<bool>,
    /// It reaches an open world of entities (the web, say), not a closed one.
    pub open_world: Option<bool>,
}

impl Annotations {
    /// The hints said, by their MCP names, in that order.
    pub fn declared(&self) -> impl Iterator<Item = (&'static str, bool)> {
        [
            ("readOnlyHint", self.read_only),
            ("destructiveHint", self.destructive),
            ("idempotentHint", self.idempotent),
            ("openWorldHint", self.open_world),
        ]
        .into_iter()
        .filter_map(|(name, hint)| hint.map(|hint| (name, hint)))
    }
}

/// The successful value of `describe_api`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Description {
    /// Exact dotted name.
    pub name: String,
    /// Keyword signature.
    pub signature: String,
    /// Summary.
    pub summary: String,
    /// Description.
    pub description: String,
    /// Input field shapes in declaration order (never null).
    pub input: Vec<FieldShape>,
    /// Output field shapes in declaration order (never null).
    pub output: Vec<FieldShape>,
}

/// Why a capability spec, or the set of them, was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The name or ID broke a naming rule.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A parameter cannot be a keyword argument.
    #[error(
        "parameter {0:?} is not usable as a keyword argument (an identifier that is not a Starlark keyword)"
    )]
    Parameter(String),
    /// The summary is empty or padded.
    #[error("summary must be non-empty without surrounding whitespace")]
    Summary,
    /// The description is empty or padded.
    #[error(
        "description must be non-empty without surrounding whitespace (or absent to reuse the summary)"
    )]
    Description,
    /// Too many search-term phrases.
    #[error("{count} search terms given, at most {MAX_SEARCH_TERMS} allowed")]
    TooManySearchTerms {
        /// Phrases given.
        count: usize,
    },
    /// A search-term phrase is empty or padded.
    #[error("search term {0:?} must be non-empty without surrounding whitespace")]
    SearchTerm(String),
    /// Search terms too long in total.
    #[error("search terms total {bytes} bytes, at most {MAX_SEARCH_TERM_BYTES} allowed")]
    SearchTermBytes {
        /// Bytes given.
        bytes: usize,
    },
    /// The search result alone would not fit a search response.
    #[error(
        "name, signature and summary together exceed the {MAX_SEARCH_RESPONSE_BYTES}-byte search response"
    )]
    ResultTooLarge,
    /// Two capabilities share a name.
    #[error("name {0:?} is already used by another capability")]
    DuplicateName(String),
    /// Two capabilities share an ID.
    #[error("ID {0:?} is already used by another capability")]
    DuplicateId(String),
    /// A name is also a namespace of another.
    #[error("name {name:?} is also a namespace of {other:?}")]
    NamespaceCollision {
        /// The shorter name.
        name: String,
        /// The name under it.
        other: String,
    },
    /// The catalog would hold more than [`MAX_CAPABILITIES`].
    #[error("more than {MAX_CAPABILITIES} capabilities")]
    TooManyCapabilities,
    /// The catalog's searchable text would exceed [`MAX_METADATA_BYTES`].
    #[error("searchable metadata exceeds {MAX_METADATA_BYTES} bytes")]
    MetadataBytes,
    /// A `--disable` ID names no capability.
    #[error("unknown disabled capability ID {0:?}")]
    UnknownDisabled(String),
}

/// Validates one spec on its own (names, texts, search terms), before it is checked
/// against others.
///
/// # Errors
///
/// Any [`SpecError`] that concerns a single capability.
pub fn validate_spec(spec: &CapabilitySpec) -> Result<Capability, SpecError> {
    let name = DottedName::parse(&spec.name)?;
    let id = CapabilityId::parse(spec.id.as_deref().unwrap_or(&spec.name))?;
    for param in &spec.params {
        check_parameter_name(&param.name).map_err(|_| SpecError::Parameter(param.name.clone()))?;
    }
    if spec.summary.is_empty() || spec.summary.trim() != spec.summary {
        return Err(SpecError::Summary);
    }
    let description = match &spec.description {
        None => spec.summary.clone(),
        Some(d) if d.is_empty() || d.trim() != d => return Err(SpecError::Description),
        Some(d) => d.clone(),
    };
    if spec.search_terms.len() > MAX_SEARCH_TERMS {
        return Err(SpecError::TooManySearchTerms {
            count: spec.search_terms.len(),
        });
    }
    if let Some(bad) = spec
        .search_terms
        .iter()
        .find(|t| t.is_empty() || t.trim() != t.as_str())
    {
        return Err(SpecError::SearchTerm(bad.clone()));
    }
    let term_bytes: usize = spec.search_terms.iter().map(String::len).sum();
    if term_bytes > MAX_SEARCH_TERM_BYTES {
        return Err(SpecError::SearchTermBytes { bytes: term_bytes });
    }
    let signature = shape::signature(name.as_str(), &spec.params);
    let result = SearchResult {
        name: name.to_string(),
        signature: signature.clone(),
        summary: spec.summary.clone(),
    };
    if !fits_alone(&result) {
        return Err(SpecError::ResultTooLarge);
    }
    Ok(Capability {
        name,
        id,
        summary: spec.summary.clone(),
        description,
        signature,
        binder: Binder::compile(&spec.params),
        params: spec.params.clone(),
        output: spec.output.clone(),
        search_terms: spec.search_terms.clone(),
        metadata_bytes: metadata_bytes(spec),
        annotations: Annotations::default(),
    })
}

impl Capability {
    /// The binder of its parameters, compiled when it was validated.
    pub fn binder(&self) -> &Binder {
        &self.binder
    }
}

/// Raw searchable bytes of one spec, counted against [`MAX_METADATA_BYTES`].
pub fn metadata_bytes(spec: &CapabilitySpec) -> usize {
    spec.name.len()
        + spec.summary.len()
        + spec.description.as_ref().map_or(0, String::len)
        + spec.search_terms.iter().map(String::len).sum::<usize>()
}

/// Collects validated capabilities and checks them against each other.
///
/// One-shot: [`CatalogBuilder::build`] consumes it.
#[derive(Default)]
pub struct CatalogBuilder {
    capabilities: Vec<Arc<Capability>>,
    names: HashMap<String, usize>,
    ids: HashMap<String, usize>,
    metadata_bytes: usize,
}

impl CatalogBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates a whole group of specs ([`validate_spec`]) and adds them as
    /// [`CatalogBuilder::add`] does: all or none. For tests, fuzz targets and
    /// library users, which start from specs.
    ///
    /// # Errors
    ///
    /// The first [`SpecError`] found, with the index of the spec it concerns.
    pub fn add_group(&mut self, specs: &[CapabilitySpec]) -> Result<(), (usize, SpecError)> {
        let group = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| validate_spec(spec).map(Arc::new).map_err(|e| (i, e)))
            .collect::<Result<Vec<_>, _>>()?;
        self.add(&group)
    }

    /// Checks a whole group of capabilities (one source's) against each other and
    /// against what was already added, and adds them all or none.
    ///
    /// # Errors
    ///
    /// The first [`SpecError`] found, with the index of the capability it concerns.
    pub fn add(&mut self, group: &[Arc<Capability>]) -> Result<(), (usize, SpecError)> {
        let mut bytes = 0;
        for (i, cap) in group.iter().enumerate() {
            let accepted = &group[..i];
            let clash_name = |n: &DottedName| {
                self.capabilities
                    .iter()
                    .chain(accepted)
                    .map(|c| &c.name)
                    .find_map(|other| {
                        if other == n {
                            Some(SpecError::DuplicateName(n.to_string()))
                        } else if n.is_namespace_of(other) {
                            Some(SpecError::NamespaceCollision {
                                name: n.to_string(),
                                other: other.to_string(),
                            })
                        } else if other.is_namespace_of(n) {
                            Some(SpecError::NamespaceCollision {
                                name: other.to_string(),
                                other: n.to_string(),
                            })
                        } else {
                            None
                        }
                    })
            };
            if let Some(err) = clash_name(&cap.name) {
                return Err((i, err));
            }
            if self.ids.contains_key(cap.id.as_str()) || accepted.iter().any(|c| c.id == cap.id) {
                return Err((i, SpecError::DuplicateId(cap.id.to_string())));
            }
            if self.capabilities.len() + i >= MAX_CAPABILITIES {
                return Err((i, SpecError::TooManyCapabilities));
            }
            bytes += cap.metadata_bytes;
            if self.metadata_bytes + bytes > MAX_METADATA_BYTES {
                return Err((i, SpecError::MetadataBytes));
            }
        }
        self.metadata_bytes += bytes;
        for cap in group {
            let index = self.capabilities.len();
            self.names.insert(cap.name.to_string(), index);
            self.ids.insert(cap.id.to_string(), index);
            self.capabilities.push(cap.clone());
        }
        Ok(())
    }

    /// Whether a capability added so far has the stable ID `id`.
    pub fn has_id(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    /// Removes the capabilities whose IDs are in `disabled` and builds the catalog.
    /// Every capability was validated before filtering, so a disabled entry cannot
    /// hide an invalid one.
    ///
    /// # Errors
    ///
    /// [`SpecError::UnknownDisabled`] for an ID that names no capability.
    pub fn build(self, disabled: &[String]) -> Result<Catalog, SpecError> {
        if let Some(unknown) = disabled
            .iter()
            .find(|id| !self.ids.contains_key(id.as_str()))
        {
            return Err(SpecError::UnknownDisabled(unknown.clone()));
        }
        let capabilities: Vec<Arc<Capability>> = self
            .capabilities
            .into_iter()
            .filter(|c| !disabled.iter().any(|d| d == c.id.as_str()))
            .collect();
        Ok(Catalog::of(capabilities))
    }
}

/// The immutable set of enabled capabilities with their search index.
pub struct Catalog {
    capabilities: Vec<Arc<Capability>>,
    by_name: BTreeMap<String, usize>,
    index: SearchIndex,
}

impl Catalog {
    /// The catalog of `capabilities`, already checked against each other, with
    /// their search index.
    fn of(capabilities: Vec<Arc<Capability>>) -> Self {
        let docs: Vec<Document<'_>> = capabilities
            .iter()
            .map(|c| Document {
                name: c.name.as_str(),
                signature: &c.signature,
                summary: &c.summary,
                description: &c.description,
                search_terms: &c.search_terms,
            })
            .collect();
        let index = SearchIndex::new(&docs);
        let mut by_name = BTreeMap::new();
        for (i, c) in capabilities.iter().enumerate() {
            by_name.insert(c.name.to_string(), i);
        }
        Catalog {
            capabilities,
            by_name,
            index,
        }
    }

    /// The catalog of only the capabilities `keep` says yes to, exactly as if
    /// the others had been disabled (its search index ranks with their words
    /// left out): one subject's view of what it can find.
    pub fn subset(&self, keep: impl Fn(&Capability) -> bool) -> Catalog {
        Catalog::of(
            self.capabilities
                .iter()
                .filter(|capability| keep(capability))
                .cloned()
                .collect(),
        )
    }

    /// Ranked search (see the module docs of `search`).
    ///
    /// # Errors
    ///
    /// [`SearchError::QueryLimit`] for an over-long query.
    pub fn search(&self, query: &str) -> Result<SearchResponse, SearchError> {
        self.index.search(query, MAX_SEARCH_RESULTS)
    }

    /// The exact capability named `name` (no trimming, no case folding).
    pub fn get(&self, name: &str) -> Option<&Arc<Capability>> {
        self.by_name.get(name).map(|&i| &self.capabilities[i])
    }

    /// `describe_api`'s value for the exact name `name`.
    pub fn describe(&self, name: &str) -> Option<Description> {
        self.get(name).map(|c| Description {
            name: c.name.to_string(),
            signature: c.signature.clone(),
            summary: c.summary.clone(),
            description: c.description.clone(),
            input: shape::input_shapes(&c.params),
            output: shape::output_shapes(&c.output),
        })
    }

    /// Number of enabled capabilities.
    pub fn len(&self) -> usize {
        self.capabilities.len()
    }

    /// Whether no capability is enabled.
    pub fn is_empty(&self) -> bool {
        self.capabilities.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> CapabilitySpec {
        CapabilitySpec {
            name: name.to_owned(),
            id: None,
            summary: "Do a thing.".to_owned(),
            description: None,
            search_terms: vec![],
            params: vec![],
            output: vec![],
        }
    }

    fn build(groups: &[Vec<CapabilitySpec>]) -> Result<Catalog, String> {
        let mut b = CatalogBuilder::new();
        for g in groups {
            b.add_group(g).map_err(|(i, e)| format!("{i}: {e}"))?;
        }
        b.build(&[]).map_err(|e| e.to_string())
    }

    #[test]
    fn single_spec_rules_reject_with_named_reasons() {
        let cases: Vec<(&str, CapabilitySpec, &str)> = vec![
            (
                "reserved root",
                spec("json.parse"),
                "name \"json.parse\": the first segment \"json\" is reserved by the language surface",
            ),
            (
                "one segment",
                spec("lookup"),
                "name \"lookup\" must have at least two dot-separated segments, like \"records.lookup\"",
            ),
            (
                "blank id",
                CapabilitySpec {
                    id: Some(" ".into()),
                    ..spec("a.b")
                },
                "ID \" \" must be non-empty without surrounding whitespace",
            ),
            (
                "padded summary",
                CapabilitySpec {
                    summary: " x".into(),
                    ..spec("a.b")
                },
                "summary must be non-empty without surrounding whitespace",
            ),
            (
                "empty summary",
                CapabilitySpec {
                    summary: String::new(),
                    ..spec("a.b")
                },
                "summary must be non-empty without surrounding whitespace",
            ),
            (
                "empty description",
                CapabilitySpec {
                    description: Some(String::new()),
                    ..spec("a.b")
                },
                "description must be non-empty without surrounding whitespace (or absent to reuse the summary)",
            ),
            (
                "17 terms",
                CapabilitySpec {
                    search_terms: (0..17).map(|i| format!("t{i}")).collect(),
                    ..spec("a.b")
                },
                "17 search terms given, at most 16 allowed",
            ),
            (
                "blank term",
                CapabilitySpec {
                    search_terms: vec!["ok".into(), "".into()],
                    ..spec("a.b")
                },
                "search term \"\" must be non-empty without surrounding whitespace",
            ),
            (
                "term bytes",
                CapabilitySpec {
                    search_terms: vec!["x".repeat(600), "y".repeat(425)],
                    ..spec("a.b")
                },
                "search terms total 1025 bytes, at most 1024 allowed",
            ),
            (
                "keyword parameter",
                CapabilitySpec {
                    params: vec![Field::new("from", Shape::Str)],
                    ..spec("a.b")
                },
                "parameter \"from\" is not usable as a keyword argument (an identifier that is not a Starlark keyword)",
            ),
            (
                "huge summary",
                CapabilitySpec {
                    summary: "s".repeat(65_500),
                    ..spec("a.b")
                },
                "name, signature and summary together exceed the 65536-byte search response",
            ),
        ];
        for (case, spec, want) in cases {
            assert_eq!(
                validate_spec(&spec).map(|_| ()).map_err(|e| e.to_string()),
                Err(want.to_owned()),
                "{case}"
            );
        }
    }

    #[test]
    fn search_term_ceilings_accept_the_boundary() {
        let s = CapabilitySpec {
            search_terms: vec!["x".repeat(512), "y".repeat(512)],
            ..spec("a.b")
        };
        assert!(validate_spec(&s).is_ok());
        let s = CapabilitySpec {
            search_terms: (0..16).map(|i| format!("t{i}")).collect(),
            ..spec("a.b")
        };
        assert!(validate_spec(&s).is_ok());
    }

    #[test]
    fn duplicates_and_namespace_collisions_are_rejected_across_groups() {
        assert_eq!(
            build(&[vec![spec("a.b")], vec![spec("a.b")]])
                .err()
                .as_deref(),
            Some("0: name \"a.b\" is already used by another capability")
        );
        assert_eq!(
            build(&[vec![spec("a.b")], vec![spec("a.b.c")]])
                .err()
                .as_deref(),
            Some("0: name \"a.b\" is also a namespace of \"a.b.c\"")
        );
        assert_eq!(
            build(&[vec![spec("x.y"), spec("a.b.c"), spec("a.b")]])
                .err()
                .as_deref(),
            Some("2: name \"a.b\" is also a namespace of \"a.b.c\"")
        );
        let with_id = |n: &str| CapabilitySpec {
            id: Some("same".into()),
            ..spec(n)
        };
        assert_eq!(
            build(&[vec![with_id("a.b")], vec![with_id("c.d")]])
                .err()
                .as_deref(),
            Some("0: ID \"same\" is already used by another capability")
        );
        // A name equal to another capability's ID is fine: they are different concepts.
        let odd = CapabilitySpec {
            id: Some("c.d".into()),
            ..spec("a.b")
        };
        assert!(
            build(&[
                vec![odd],
                vec![CapabilitySpec {
                    id: Some("other".into()),
                    ..spec("c.d")
                }]
            ])
            .is_ok()
        );
    }

    #[test]
    fn a_rejected_group_adds_nothing() {
        let mut b = CatalogBuilder::new();
        assert!(b.add_group(&[spec("a.ok"), spec("json.bad")]).is_err());
        assert!(
            b.add_group(&[spec("a.ok")]).is_ok(),
            "a.ok was not kept from the rejected group"
        );
    }

    #[test]
    fn capability_count_ceiling() {
        let mut b = CatalogBuilder::new();
        let specs: Vec<CapabilitySpec> = (0..MAX_CAPABILITIES)
            .map(|i| spec(&format!("n.c{i}")))
            .collect();
        assert!(b.add_group(&specs).is_ok());
        assert_eq!(
            b.add_group(&[spec("z.one")]).map_err(|(_, e)| e),
            Err(SpecError::TooManyCapabilities)
        );
    }

    #[test]
    fn a_subset_answers_exactly_as_a_catalog_with_the_rest_disabled() -> anyhow::Result<()> {
        let specs = [
            CapabilitySpec {
                summary: "Delete every record.".into(),
                ..spec("records.purge")
            },
            CapabilitySpec {
                summary: "Delete one record.".into(),
                ..spec("records.delete")
            },
            CapabilitySpec {
                summary: "Read one record.".into(),
                ..spec("records.lookup")
            },
            CapabilitySpec {
                summary: "Delete a note.".into(),
                ..spec("notes.delete")
            },
            CapabilitySpec {
                summary: "List the notes.".into(),
                ..spec("notes.list")
            },
        ];
        let hidden = ["records.purge", "notes.list"];
        let mut b = CatalogBuilder::new();
        b.add_group(&specs).map_err(|(_, e)| anyhow::anyhow!(e))?;
        let full = b.build(&[])?;
        let subset = full.subset(|c| !hidden.contains(&c.name.as_str()));
        let mut b = CatalogBuilder::new();
        b.add_group(&specs).map_err(|(_, e)| anyhow::anyhow!(e))?;
        let disabled = b.build(&hidden.map(str::to_owned))?;
        let names = |catalog: &Catalog, query: &str| -> anyhow::Result<Vec<String>> {
            Ok(catalog
                .search(query)?
                .results
                .into_iter()
                .map(|result| result.name)
                .collect())
        };
        for query in [
            "delete",
            "record",
            "delete record",
            "notes",
            "purge",
            "list",
        ] {
            assert_eq!(
                names(&subset, query)?,
                names(&disabled, query)?,
                "query {query:?}"
            );
        }
        assert_eq!(
            names(&subset, "delete")?,
            ["notes.delete", "records.delete"]
        );
        assert_eq!(names(&full, "purge")?, ["records.purge"]);
        assert_eq!(names(&subset, "purge")?, Vec::<String>::new());
        assert!(subset.describe("records.purge").is_none());
        assert!(subset.describe("records.lookup").is_some());
        assert_eq!((subset.len(), full.len()), (3, 5));
        Ok(())
    }

    #[test]
    fn disabled_ids_are_removed_after_validation_and_unknown_ids_fail() -> anyhow::Result<()> {
        let mut b = CatalogBuilder::new();
        b.add_group(&[
            CapabilitySpec {
                id: Some("records.entry.lookup".into()),
                ..spec("records.lookup")
            },
            spec("records.query"),
        ])
        .map_err(|(_, e)| anyhow::anyhow!(e))?;
        let catalog = b.build(&["records.entry.lookup".to_owned()])?;
        assert!(catalog.describe("records.lookup").is_none());
        assert!(catalog.describe("records.query").is_some());
        assert_eq!(catalog.search("lookup")?.results, vec![]);

        let mut b = CatalogBuilder::new();
        b.add_group(&[spec("records.lookup")])
            .map_err(|(_, e)| anyhow::anyhow!(e))?;
        assert_eq!(
            b.build(&["nope".to_owned()]).err(),
            Some(SpecError::UnknownDisabled("nope".into()))
        );
        Ok(())
    }

    #[test]
    fn describe_is_exact_and_ignores_search_terms() -> anyhow::Result<()> {
        let catalog = build(&[vec![CapabilitySpec {
            search_terms: vec!["finder".into()],
            params: vec![
                Field::new("key", Shape::Str),
                Field::new("limit", Shape::Option(Box::new(Shape::Int(IntKind::S64)))),
            ],
            output: vec![Field::new("found_count", Shape::Int(IntKind::U32))],
            ..spec("records.lookup")
        }]])
        .map_err(anyhow::Error::msg)?;
        for miss in [
            "Records.lookup",
            " records.lookup",
            "records.lookup ",
            "records",
            "finder",
            "records.look",
        ] {
            assert!(catalog.describe(miss).is_none(), "{miss:?}");
        }
        let d = catalog
            .describe("records.lookup")
            .ok_or_else(|| anyhow::anyhow!("missing"))?;
        assert_eq!(
            serde_json::to_value(&d)?,
            serde_json::json!({
                "name": "records.lookup",
                "signature": "records.lookup(*, key: str, limit: int | None)",
                "summary": "Do a thing.",
                "description": "Do a thing.",
                "input": [
                    {"name": "key", "type": "str", "required": true},
                    {"name": "limit", "type": "int | None", "required": false}
                ],
                "output": [{"name": "found_count", "type": "int", "required": true}]
            })
        );
        let empty = build(&[vec![spec("records.status")]]).map_err(anyhow::Error::msg)?;
        let d = empty
            .describe("records.status")
            .ok_or_else(|| anyhow::anyhow!("missing"))?;
        assert_eq!(serde_json::to_value(&d)?["input"], serde_json::json!([]));
        assert_eq!(serde_json::to_value(&d)?["output"], serde_json::json!([]));
        Ok(())
    }
}
