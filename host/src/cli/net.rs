//! The HTTP listener and its authentication (`--listen`, `--tokens`,
//! `--oauth-issuer`, ...).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::values::{keys_refresh, leeway, listen_address};

/// The HTTP listener (`--listen`), its authentication (tokens or OAuth) and
/// what it allows.
#[derive(Debug, clap::Args)]
pub struct NetFlags {
    /// Serve Streamable HTTP on ADDR instead of stdio, e.g. 127.0.0.1:8080
    ///
    /// A port alone, or localhost:PORT, means 127.0.0.1 (this machine only).
    /// MCP is at /mcp (stateless: replicas need no session affinity); /healthz,
    /// /readyz (200 once plugins are loaded) and /metrics (Prometheus) beside it.
    /// Needs --policy or --allow-all. A non-loopback address needs --tokens or
    /// --oauth-issuer, or --insecure. SIGTERM stops accepting and lets executions in flight finish.
    #[arg(long, value_name = "ADDR", value_parser = listen_address)]
    pub listen: Option<SocketAddr>,

    /// Bearer tokens for HTTP: one `subject-id sha256-hex-of-token` per line
    ///
    /// A request's `Authorization: Bearer TOKEN` is hashed and looked up; its
    /// subject is what the policy sees. No token or an unknown one is a 401.
    /// Without --tokens every HTTP request acts for --subject. The file is read
    /// again when it changes and on SIGHUP; a version that does not parse is
    /// logged and the tokens in force stay.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub tokens: Option<PathBuf>,

    /// Allow --listen on a non-loopback address without --tokens
    #[arg(long, requires = "listen")]
    pub insecure: bool,

    /// Accept access tokens of this OAuth 2.1 authorization server (its issuer URL)
    ///
    /// Its metadata is discovered (/.well-known/oauth-authorization-server,
    /// else /.well-known/openid-configuration) and its JWKS fetched when the
    /// first token comes, and again for a key it does not hold, at most once
    /// per --oauth-keys-refresh. A bearer token is accepted when it is a JWT
    /// signed by one of those keys (RS256, ES256 or EdDSA), its iss is this URL,
    /// its aud contains --resource-url, exp and nbf hold (within --oauth-leeway)
    /// and it carries
    /// every --required-scope; its subject is --subject-claim. Served beside:
    /// /.well-known/oauth-protected-resource (RFC 9728), and a 401 names it in
    /// WWW-Authenticate. --tokens may be given too: its tokens are looked up
    /// first. https only, except on a loopback host.
    #[arg(long, value_name = "URL", requires = "listen")]
    pub oauth_issuer: Option<String>,

    /// This server's canonical URL (e.g. https://mcp.example.com/mcp)
    ///
    /// What an access token's audience must contain, and the resource named in
    /// the protected resource metadata. Needed with --oauth-issuer.
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    pub resource_url: Option<String>,

    /// A scope every access token must carry (repeatable)
    ///
    /// A token without one gets 403 insufficient_scope, its WWW-Authenticate
    /// naming the scopes to ask for.
    #[arg(
        long = "required-scope",
        value_name = "SCOPE",
        requires = "oauth_issuer"
    )]
    pub required_scopes: Vec<String>,

    /// The access token claim that names the subject [default: sub]
    ///
    /// Choose a claim users cannot change (sub, oid), not a name or an email:
    /// the subject is what policies, tasks and approvals are bound to. A
    /// subject of --tokens with the same ID is the same subject.
    #[arg(long, value_name = "CLAIM", requires = "oauth_issuer")]
    pub subject_claim: Option<String>,

    /// The shortest time between two fetches of the issuer's keys [default: 1m]
    ///
    /// A token naming a key the server does not hold makes it fetch the keys
    /// again, at most this often (at least 1s): an issuer that rotated its key is
    /// followed within it, and tokens naming made-up keys cannot make the server
    /// fetch on every request.
    #[arg(long, value_name = "DURATION", requires = "oauth_issuer", value_parser = keys_refresh)]
    pub oauth_keys_refresh: Option<Duration>,

    /// The clock skew allowed to a token's exp and nbf [default: 60s]
    ///
    /// Whole seconds, at most 10m: an access token is taken until this long
    /// after it expired, and from this long before it becomes valid.
    #[arg(long, value_name = "DURATION", requires = "oauth_issuer", value_parser = leeway)]
    pub oauth_leeway: Option<Duration>,

    /// This server's client ID at --oauth-issuer, for token exchange
    ///
    /// An upstream with auth = "token-exchange" gets, for each caller, a token
    /// the issuer makes for the upstream's audience in exchange for the
    /// caller's (RFC 8693), asked for with this client ID and the secret of
    /// --oauth-client-secret-file (HTTP Basic).
    #[arg(
        long,
        value_name = "ID",
        requires = "oauth_issuer",
        requires = "oauth_client_secret_file"
    )]
    pub oauth_client_id: Option<String>,

    /// The file holding --oauth-client-id's secret (read at start)
    #[arg(long, value_name = "FILE", requires = "oauth_client_id")]
    pub oauth_client_secret_file: Option<PathBuf>,

    /// Also accept this Host header over HTTP (repeatable)
    ///
    /// Requests naming any other host are refused (DNS-rebinding protection);
    /// localhost, 127.0.0.1 and ::1 are always accepted.
    #[arg(long = "allowed-host", value_name = "HOST", requires = "listen")]
    pub allowed_hosts: Vec<String>,

    /// HTTP connections open at once [default: 1024]
    ///
    /// More wait in the kernel's backlog without using a file descriptor. A
    /// client must send a request's headers within 10 s (also the idle time
    /// of a keep-alive connection) and its body within 30 s.
    #[arg(long, value_name = "N", requires = "listen")]
    pub max_connections: Option<std::num::NonZeroUsize>,

    /// Serve /healthz, /readyz, /metrics on ADDR too, with no Host check
    ///
    /// On --listen every path checks the Host header (DNS-rebinding
    /// protection), so probes that name the pod's address as the host (as
    /// Kubernetes' do) fail there: point them at this address instead.
    #[arg(long, value_name = "ADDR", requires = "listen", value_parser = listen_address)]
    pub metrics_listen: Option<SocketAddr>,

    /// Give HTTP clients before 2026-07-28 sessions, so they can be asked
    ///
    /// Without it /mcp is stateless: a client before 2026-07-28 cannot be
    /// asked to approve a call over HTTP (its answer would be a new request,
    /// which could reach another replica), so such a call is denied. With it,
    /// such a client's initialize opens a session (the Mcp-Session-Id header),
    /// the question rides its tools/call's SSE response and the answer comes
    /// back to the call waiting for it. Each session is recorded in --store:
    /// replicas sharing a Redis store serve each other's sessions (an answer
    /// reaching another replica is forwarded to the one that asked), and the
    /// file store keeps them across a restart. A session belongs to the subject that opened it; at
    /// most 64 per subject and 4096 in all are open, and one ends when idle
    /// longer than an execution and an approval (at least 5 minutes).
    /// 2026-07-28 clients are always served statelessly.
    #[arg(long, requires = "listen")]
    pub http_sessions: bool,
}
