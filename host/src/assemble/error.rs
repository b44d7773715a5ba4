//! Why the flags cannot make a server ([`ConfigError`]), and the authorization
//! they chose ([`Authorization`]): what every assembly file returns.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use codemode_server::authz::oauth::UrlError;
use codemode_server::authz::{Authorizer, RegoError, Replaceable, TokensError};
use codemode_server::files::FileError;

/// Why the flags cannot make a server. A cause is a `reason` (part of the message),
/// not an error `source`, so that a printer of error chains says it once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A policy file could not be read.
    #[error("policy file `{path}`: {reason}")]
    PolicyFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        reason: FileError,
    },
    /// The policy does not compile.
    #[error(transparent)]
    Policy(#[from] RegoError),
    /// The HTTP listener was asked for without an authorization decision.
    #[error(
        "the HTTP listener needs an authorization decision: pass --policy FILE.rego (repeatable) or --allow-all"
    )]
    NoAuthorization,
    /// The tokens file could not be read.
    #[error("tokens file `{path}`: {reason}")]
    TokensFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        reason: FileError,
    },
    /// The tokens file is malformed.
    #[error("tokens file `{path}`: {reason}")]
    Tokens {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: TokensError,
    },
    /// A non-loopback address without authentication.
    #[error(
        "refusing to serve {0} without authentication: pass --tokens FILE or --oauth-issuer URL, or --insecure if the network is trusted"
    )]
    Exposed(SocketAddr),
    /// An OAuth flag's URL is refused.
    #[error(transparent)]
    OAuthUrl(#[from] UrlError),
    /// `--oauth-issuer` without `--resource-url`.
    #[error(
        "--oauth-issuer needs --resource-url: this server's canonical URL (e.g. https://mcp.example.com/mcp), which tokens must name as their audience"
    )]
    NoResourceUrl,
    /// The OAuth resource server could not be set up.
    #[error("--oauth-issuer: {0}")]
    OAuth(String),
    /// Token exchange cannot be set up.
    #[error("{0}")]
    Exchange(String),
    /// The audit log file could not be opened.
    #[error("audit log `{path}`: {reason}")]
    AuditLog {
        /// The file.
        path: PathBuf,
        /// Why it could not be opened.
        reason: std::io::Error,
    },
}

/// How native calls are decided, and why (for the startup log).
#[derive(Debug, Clone)]
pub struct Authorization {
    /// The authorizer.
    pub authorizer: Arc<dyn Authorizer>,
    /// One line for the startup log saying what decides.
    pub summary: String,
    /// With --policy: where a reloaded policy goes (the authorizer above is it).
    pub policy: Option<Arc<Replaceable>>,
}
