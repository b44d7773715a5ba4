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
//! `spec.rs` reads a spec (a file or an HTTPS URL, JSON or YAML, OpenAPI 3.x);
//! `operations.rs` turns its operations into capabilities; `call.rs` makes a
//! call's request and reads its answer; `provider.rs` loads a spec in the
//! background and offers what it became.

mod call;
mod operations;
mod provider;
mod spec;

pub(crate) use provider::OpenApiProvider;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::secret::Secret;

/// The prefix of every OpenAPI capability's stable ID:
/// `openapi:<name>/<operationId>` (or `openapi:<name>/<METHOD> <path>` for an
/// operation without one).
pub(crate) const ID_PREFIX: &str = "openapi:";

/// The signatures of the capabilities a spec's `text` becomes (as a service
/// named `fz` at `https://fuzz.example`): the fuzz target's entry
/// (`fuzzing::openapi_spec`).
///
/// # Errors
///
/// Why the spec serves nothing.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn signatures_of(text: &str) -> Result<Vec<String>, String> {
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

/// One OpenAPI-described service as the operator configured it (`[[openapi]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenApiConfig {
    /// The root of its capability names (`github` → `github.repos_get`), and its
    /// name in logs and messages.
    pub name: String,
    /// Where its description is read from.
    pub spec: SpecLocation,
    /// Where its requests go; `None`: the spec's first server. Requests never go
    /// to another origin, whatever the spec's operations name.
    pub base_url: Option<String>,
    /// The operations served, by tag or `operationId`; empty serves all.
    pub include: Vec<String>,
    /// Operations left out, by tag or `operationId`.
    pub exclude: Vec<String>,
    /// Wall time one call may take (also capped by the execution's remaining
    /// time); `None` is the execution's remaining time.
    pub timeout: Option<Duration>,
    /// Whose credential its requests carry.
    pub auth: OpenApiAuth,
    /// Sent with every request.
    pub headers: BTreeMap<String, String>,
}

/// Where a spec is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecLocation {
    /// A file on this machine, read again at each reload.
    File(PathBuf),
    /// An `https://` URL (`http://` on a loopback host), fetched at each reload.
    Url(String),
}

impl std::fmt::Display for SpecLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Url(url) => f.write_str(url),
        }
    }
}

/// Whose credential an OpenAPI service's requests carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenApiAuth {
    /// None.
    #[default]
    None,
    /// The operator's token, as `Authorization: Bearer …`.
    Bearer(Secret),
    /// The operator's key, in the header named.
    ApiKey {
        /// The header's name (`X-API-Key`).
        header: String,
        /// Its value.
        key: Secret,
    },
    /// Each call carries its caller's access token, unchanged (`auth =
    /// "forward"`); a caller without one cannot call it.
    Forward,
    /// Each call carries a token the issuer made for `audience` in exchange for
    /// its caller's (`auth = "token-exchange"`, RFC 8693).
    TokenExchange {
        /// The audience asked for: the service's resource identifier.
        audience: String,
    },
}
