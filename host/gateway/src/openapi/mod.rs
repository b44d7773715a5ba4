//! Services described by OpenAPI as a capability source: each operation of a
//! spec is a capability `<name>.<operation>`, its parameters and JSON body
//! keyword arguments, its 2xx answer the result, called over HTTP at the base
//! URL alone.
//!
//! The third adapter of the capability-source port ([`crate::source`]): execute
//! binds, authorizes, audits and budgets an operation's call as every other
//! capability's; only the call differs. A spec is untrusted input, as an
//! upstream's tool list is: its size, its operations, its `$ref`s and the types
//! they describe are bounded, and a spec that does not load is named in
//! `/readyz` while the rest serves.
//!
//! `config.rs` holds a service's settings (`[[openapi]]`); `spec.rs` reads a spec (a file or an HTTPS URL, JSON or YAML, OpenAPI 3.x);
//! `operations.rs` turns its operations into capabilities; `call.rs` makes a
//! call's request and reads its answer; `provider.rs` loads a spec in the
//! background and offers what it became.

mod call;
mod config;
mod operations;
mod provider;
mod spec;

pub use config::{OpenApiAuth, OpenApiConfig, SpecLocation};
pub use provider::OpenApiProvider;

use std::collections::BTreeMap;

/// The signatures of the capabilities a spec's `text` becomes (as a service
/// named `fz` at `https://fuzz.example`): the fuzz target's entry
/// (the host's `fuzzing::openapi_spec`). Always built: one feature set for the
/// host's build and its tests.
///
/// # Errors
///
/// Why the spec serves nothing.
#[doc(hidden)]
pub fn signatures_of(text: &str) -> Result<Vec<String>, String> {
    let document = spec::parse(text)?;
    let config = OpenApiConfig {
        name: "fz".to_owned(),
        spec: SpecLocation::File("fuzz.json".into()),
        base_url: Some("https://fuzz.example".to_owned()),
        include: Vec::new(),
        exclude: Vec::new(),
        timeout: None,
        auth: OpenApiAuth::None,
        headers: BTreeMap::new(),
    };
    let built = operations::operations(&config, &document, &crate::json::schema::Stop::default())?;
    Ok(built
        .operations
        .iter()
        .map(|operation| operation.capability.signature.clone())
        .collect())
}
