//! An OpenAPI service as the operator configured it (`[[openapi]]`), and the
//! prefix of its capabilities' stable IDs: what every other file of the folder
//! reads, so it imports none of them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::secret::Secret;

/// The prefix of every OpenAPI capability's stable ID:
/// `openapi:<name>/<operationId>` (or `openapi:<name>/<METHOD> <path>` for an
/// operation without one).
pub const ID_PREFIX: &str = "openapi:";

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
