//! Write [codemode-host] plugins in Rust with the least ceremony.
//!
//! A plugin is a WebAssembly component that exports its own WIT interfaces (the
//! capabilities) plus `codemode:plugin/metadata@0.1.0`, which tells the host the
//! summary, description and search terms of each exported function. This crate:
//!
//! - exports the metadata interface for you, written once as the doc comments of
//!   your functions with [`capabilities`] (or listed by hand with [`metadata!`]);
//! - re-exports [`wit_bindgen`] and offers [`generate!`], so your own interface's
//!   bindings need no extra dependency.
//!
//! # Example
//!
//! `wit/world.wit` of your plugin:
//!
//! ```wit
//! package acme:greetings@0.1.0;
//!
//! interface greet {
//!   record greeting { text: string }
//!   hello: func(name: string, shout: option<bool>) -> result<greeting, string>;
//! }
//!
//! world plugin {
//!   export greet;
//! }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```ignore
//! codemode_sdk::generate!({ world: "plugin", path: "wit" });
//!
//! use exports::acme::greetings::greet::{self, Greeting};
//!
//! struct Plugin;
//!
//! #[codemode_sdk::capabilities]
//! impl greet::Guest for Plugin {
//!     /// Greet someone by name.
//!     ///
//!     /// Returns "Hello, <name>!"; shout=True upper-cases it.
//!     #[capability(search_terms = ["greeting", "say hello"])]
//!     fn hello(name: String, shout: Option<bool>) -> Result<Greeting, String> {
//!         if name.is_empty() {
//!             return Err("name must not be empty".into());
//!         }
//!         let text = format!("Hello, {name}!");
//!         Ok(Greeting { text: if shout == Some(true) { text.to_uppercase() } else { text } })
//!     }
//! }
//!
//! export!(Plugin);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2` (crate type `cdylib`)
//! and drop the `.wasm` into the host's plugins folder. Agents then call
//! `greet.hello(name="Ada")`, find it by "Greet someone by name." and read the
//! second paragraph in `describe_api`.
//!
//! # Types
//!
//! Parameters and results use plain WIT data: strings, integers, floats, bools,
//! `list<T>`, `list<tuple<string, T>>` (a dict), records, options, enums, flags. A
//! function returns a record or `result<record, string>`; the `Err` string reaches
//! the agent as `capability failed: <message>`.
//!
//! [codemode-host]: https://github.com/codemode-host

#[doc(hidden)]
pub use codemode_sdk_macros::package_docs as __package_docs;
pub use wit_bindgen;

/// Capability metadata from the doc comments of an `impl <interface>::Guest` block.
///
/// The first paragraph of each function's doc comment is the summary `search_api`
/// shows; later paragraphs are the description `describe_api` adds. On a function,
/// `#[capability(name = "...", id = "...", search_terms = ["...", ...])]` sets the
/// rest, and `#[capability(skip)]` keeps an export from being a capability. A
/// function with neither a doc comment nor `skip` is a compile error.
///
/// Without arguments the attribute exports the metadata, so a plugin with one
/// interface needs nothing else. A plugin exports its metadata once: with several
/// interfaces, give each block `list = NAME`, which defines `fn NAME() ->
/// Vec<Capability>` instead, and export them together with
/// `codemode_sdk::metadata![greet_capabilities(), admin_capabilities()]`. When the
/// trait is imported as plain `Guest`, name its interface: `interface = "greet"`.
/// The generated code refers to this crate as `::codemode_sdk`.
pub use codemode_sdk_macros::capabilities;

/// Bindings of the `codemode:plugin` world; used by [`metadata!`].
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit/plugin",
        world: "codemode:plugin/plugin",
        pub_export_macro: true,
        export_macro_name: "__export_codemode_metadata",
        default_bindings_module: "codemode_sdk::bindings",
    });
}

/// Bindings of the `codemode:plugin/plugin-annotations` world; used by
/// [`annotations!`].
#[doc(hidden)]
pub mod annotation_bindings {
    wit_bindgen::generate!({
        path: "../wit/plugin",
        world: "codemode:plugin/plugin-annotations",
        pub_export_macro: true,
        export_macro_name: "__export_codemode_annotations",
        default_bindings_module: "codemode_sdk::annotation_bindings",
    });
}

/// One capability's metadata: which export it describes and the text agents see.
pub use bindings::exports::codemode::plugin::metadata::Capability;

/// What one capability says of its effects: the hints a policy reads as
/// `input.capability.annotations` (MCP's tool annotations).
pub use annotation_bindings::exports::codemode::plugin::annotations::{Annotated, Hints};

impl Annotated {
    /// No hints yet for the export `export_name` (as [`Capability::new`] names it).
    pub fn new(export_name: impl Into<String>) -> Self {
        Self {
            export_name: export_name.into(),
            hints: Hints {
                read_only: None,
                destructive: None,
                idempotent: None,
                open_world: None,
            },
        }
    }

    /// Whether it leaves its environment unchanged (`readOnlyHint`).
    pub fn read_only(mut self, value: bool) -> Self {
        self.hints.read_only = Some(value);
        self
    }

    /// Whether it may destroy or overwrite (`destructiveHint`).
    pub fn destructive(mut self, value: bool) -> Self {
        self.hints.destructive = Some(value);
        self
    }

    /// Whether calling it again with the same arguments changes nothing more
    /// (`idempotentHint`).
    pub fn idempotent(mut self, value: bool) -> Self {
        self.hints.idempotent = Some(value);
        self
    }

    /// Whether it reaches an open world of entities, such as the web
    /// (`openWorldHint`).
    pub fn open_world(mut self, value: bool) -> Self {
        self.hints.open_world = Some(value);
        self
    }
}

impl Capability {
    /// Metadata for the export `export_name` (`"<interface>.<function>"` in WIT names,
    /// e.g. `"records.lookup"` or `"text.word-counts"`), with its one-line summary.
    ///
    /// The agent-facing name defaults to the export name in snake_case
    /// (`text.word_counts`), the ID to that name, the description to the summary.
    pub fn new(export_name: impl Into<String>, summary: impl Into<String>) -> Self {
        Self {
            export_name: export_name.into(),
            name: None,
            id: None,
            summary: summary.into(),
            description: None,
            search_terms: Vec::new(),
        }
    }

    /// Sets a dotted name other than the default (e.g. `github.pulls.create_review`).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets a stable ID other than the name, for policies and `--disable`.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets the longer description `describe_api` shows.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets discovery-only phrases (at most 16, 1 KiB in total) that `search_api`
    /// matches besides the name, summary and description.
    pub fn with_search_terms<I, S>(mut self, terms: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.search_terms = terms.into_iter().map(Into::into).collect();
        self
    }
}

/// Generates bindings for your plugin's own world, like `wit_bindgen::generate!`,
/// without a direct `wit-bindgen` dependency.
///
/// It also keeps the WIT's doc comments in the component (its `codemode-docs`
/// section, read from `path`, default `wit`), which components otherwise lose:
/// `describe_api` shows a parameter's docs from its function's doc comment (a
/// line `name: what it means`) and a record parameter's field docs (`///` on the
/// fields).
#[macro_export]
macro_rules! generate {
    ({ $($body:tt)* }) => {
        // Generated bindings carry no docs of their own.
        #[allow(missing_docs)]
        $crate::wit_bindgen::generate!({
            runtime_path: "codemode_sdk::wit_bindgen::rt",
            $($body)*
        });
        // The WIT's doc comments, which no component keeps, as the component's
        // `codemode-docs` section: the host shows them as parameter docs.
        $crate::__package_docs!({ $($body)* });
    };
}

/// One [`Capability`] or a list of them: what [`metadata!`] takes.
pub trait Capabilities {
    /// Appends these capabilities to `list`, in order.
    fn append_to(self, list: &mut Vec<Capability>);
}

impl Capabilities for Capability {
    fn append_to(self, list: &mut Vec<Capability>) {
        list.push(self);
    }
}

impl Capabilities for Vec<Capability> {
    fn append_to(mut self, list: &mut Vec<Capability>) {
        list.append(&mut self);
    }
}

/// Exports `codemode:plugin/metadata@0.1.0` describing the given capabilities.
///
/// Use it once per plugin, at the crate root, with one [`Capability`] expression per
/// exported function agents may call, or a `Vec<Capability>` (such as the function
/// `#[capabilities(list = NAME)]` defines). Exports you do not list are not
/// capabilities.
#[macro_export]
macro_rules! metadata {
    ($($capabilities:expr),* $(,)?) => {
        #[doc(hidden)]
        struct __CodemodeMetadata;

        impl $crate::bindings::exports::codemode::plugin::metadata::Guest for __CodemodeMetadata {
            fn describe() -> ::std::vec::Vec<$crate::Capability> {
                #[allow(unused_mut)]
                let mut list = ::std::vec::Vec::new();
                $($crate::Capabilities::append_to($capabilities, &mut list);)*
                list
            }
        }

        $crate::bindings::__export_codemode_metadata!(__CodemodeMetadata with_types_in $crate::bindings);
    };
}

/// Exports `codemode:plugin/annotations@0.1.0`: what the listed capabilities
/// say of their effects (optional; a policy reads them as
/// `input.capability.annotations`, e.g. to ask a human before a destructive
/// call). Use it once per plugin, beside [`metadata!`], with one [`Annotated`]
/// per capability that declares hints; each names an export the metadata lists.
#[macro_export]
macro_rules! annotations {
    ($($annotated:expr),* $(,)?) => {
        #[doc(hidden)]
        struct __CodemodeAnnotations;

        impl $crate::annotation_bindings::exports::codemode::plugin::annotations::Guest for __CodemodeAnnotations {
            fn annotate() -> ::std::vec::Vec<$crate::Annotated> {
                ::std::vec![$($annotated),*]
            }
        }

        $crate::annotation_bindings::__export_codemode_annotations!(__CodemodeAnnotations with_types_in $crate::annotation_bindings);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_sets_every_field() {
        let c = Capability::new("text.word-counts", "Count words.")
            .with_name("text.counts")
            .with_id("text.v1.counts")
            .with_description("Counts each word.")
            .with_search_terms(["frequency", "tally"]);
        assert_eq!(c.export_name, "text.word-counts");
        assert_eq!(c.name.as_deref(), Some("text.counts"));
        assert_eq!(c.id.as_deref(), Some("text.v1.counts"));
        assert_eq!(c.summary, "Count words.");
        assert_eq!(c.description.as_deref(), Some("Counts each word."));
        assert_eq!(
            c.search_terms,
            vec!["frequency".to_string(), "tally".to_string()]
        );
    }

    #[test]
    fn single_capabilities_and_lists_append_in_order() {
        let mut list = Vec::new();
        Capability::new("a.one", "One.").append_to(&mut list);
        vec![
            Capability::new("b.two", "Two."),
            Capability::new("b.three", "Three."),
        ]
        .append_to(&mut list);
        let names: Vec<_> = list.iter().map(|c| c.export_name.as_str()).collect();
        assert_eq!(names, ["a.one", "b.two", "b.three"]);
    }

    #[test]
    fn annotated_sets_only_the_hints_given() {
        let a = Annotated::new("records.erase")
            .read_only(false)
            .destructive(true);
        assert_eq!(a.export_name, "records.erase");
        assert_eq!(
            (
                a.hints.read_only,
                a.hints.destructive,
                a.hints.idempotent,
                a.hints.open_world
            ),
            (Some(false), Some(true), None, None)
        );
    }

    #[test]
    fn defaults_leave_name_id_and_description_to_the_host() {
        let c = Capability::new("records.lookup", "Look up a book.");
        assert_eq!((c.name, c.id, c.description), (None, None, None));
        assert!(c.search_terms.is_empty());
    }
}
