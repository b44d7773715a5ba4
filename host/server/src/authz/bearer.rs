//! What the HTTP layer shares with the OAuth resource server, built with the
//! feature `oauth` or without it: why a bearer token was refused, and where
//! protected resource metadata is served.

/// Where protected resource metadata is served (RFC 9728), before the
/// resource URL's path.
pub const PROTECTED_RESOURCE_PATH: &str = "/.well-known/oauth-protected-resource";

/// Why a bearer token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Not a token of the issuer for this server (401 `invalid_token`); the
    /// reason is for the log.
    Invalid(String),
    /// A valid token without every required scope (403 `insufficient_scope`).
    InsufficientScope,
    /// The issuer's keys could not be fetched (401; the log says why).
    KeysUnavailable(String),
}
