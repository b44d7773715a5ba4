//! One upstream MCP server as the operator configured it (`[[upstream]]`):
//! what every other file of the folder reads, so it imports none of them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::catalog::DottedName;
use crate::secret::Secret;

/// One upstream MCP server as the operator configured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// The root of its capability names (`git` → `git.git_log`), and its name in
    /// logs and messages.
    pub name: String,
    /// How to reach it.
    pub transport: UpstreamTransport,
    /// Wall time one call may take (also capped by the execution's remaining time);
    /// `None` is the execution's remaining time.
    pub timeout: Option<Duration>,
    /// The tools offered (by their upstream names); `None` offers all.
    pub tools: Option<Vec<String>>,
}

/// Checks that `name` can be the root of capability names: a Starlark identifier,
/// not a keyword, not a builtin's name (`json`, `len`, ...).
///
/// # Errors
///
/// What is wrong with it.
pub fn check_name(name: &str) -> Result<(), String> {
    DottedName::parse(&format!("{name}.tool"))
        .map(drop)
        .map_err(|_| {
            format!(
                "`{name}` cannot be the root of capability names: it must be an identifier (letters, digits, `_`), not a Starlark keyword or builtin"
            )
        })
}

/// How to reach an upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Command {
        /// The program and its arguments.
        command: Vec<String>,
        /// The child's environment: these variables plus the host's `PATH` and
        /// `HOME`, nothing else of the host's.
        env: BTreeMap<String, String>,
        /// The child's working folder; `None` is the server's.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint (`https://…/mcp`; TLS with the WebPKI roots).
    Http {
        /// The endpoint.
        url: String,
        /// Whose credential its requests carry.
        auth: UpstreamAuth,
        /// Sent with every request.
        headers: BTreeMap<String, String>,
    },
}

/// Whose credential an HTTP upstream's requests carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamAuth {
    /// None.
    #[default]
    None,
    /// The operator's token (`bearer-token-env`), as `Authorization: Bearer …`
    /// on every request.
    Bearer(Secret),
    /// Each call carries its caller's access token, unchanged (`auth =
    /// "forward"`): the upstream sees who calls. The session's own requests
    /// (`initialize`, `tools/list`) carry the operator's token when one is given
    /// (`bearer-token-env`), else none; a caller without an access token (a
    /// `--tokens` subject, stdio) cannot call it.
    Forward(Option<Secret>),
    /// Each call carries a token the issuer made for `audience` in exchange
    /// for its caller's (`auth = "token-exchange"`, RFC 8693): the upstream
    /// sees who calls, with a token meant for it alone. The session's own
    /// requests carry the operator's token when one is given.
    TokenExchange {
        /// The audience asked for: the upstream's resource identifier.
        audience: String,
        /// The session's own token (`bearer-token-env`).
        session: Option<Secret>,
    },
}

/// How long starting an upstream, its `initialize` and its `tools/list` may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
