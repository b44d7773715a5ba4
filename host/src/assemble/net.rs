//! The HTTP listener's settings from the flags: the address, who is
//! authenticated and how (a tokens file, an OAuth issuer, or the fixed subject
//! on loopback), the hosts allowed, the drain and the sessions.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use codemode_server::authz::Subject;
use codemode_server::authz::oauth::{
    DEFAULT_KEYS_REFRESH, DEFAULT_LEEWAY, DEFAULT_SUBJECT_CLAIM, OAuthConfig, Verifier, check_url,
    is_scope_token,
};
use codemode_server::mcp::DEFAULT_APPROVAL_TIMEOUT;
use codemode_server::mcp::http::{Authentication, ConnectionLimits, HttpConfig, LOOPBACK_HOSTS};

use super::access::read_tokens;
use super::error::ConfigError;
use crate::cli::Cli;

/// How long after the time budget in-flight requests may still finish at shutdown.
const HTTP_DRAIN_MARGIN: Duration = Duration::from_secs(1);

/// How much longer than an execution and an approval an HTTP session may stay
/// idle before it ends (`--http-sessions`).
const SESSION_IDLE_MARGIN: Duration = Duration::from_secs(60);

impl Cli {
    /// The HTTP listener's settings, when `--listen` is given.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the tokens file cannot be read or parsed, or a
    /// non-loopback address has neither --tokens nor --insecure.
    pub fn http(&self) -> Result<Option<(SocketAddr, HttpConfig)>, ConfigError> {
        let Some(address) = self.net.listen else {
            return Ok(None);
        };
        let tokens = match &self.net.tokens {
            Some(path) => Some(Arc::new(arc_swap::ArcSwap::from_pointee(read_tokens(
                path,
            )?))),
            None => None,
        };
        let mut resource_host = None;
        let oauth = match &self.net.oauth_issuer {
            Some(issuer) => {
                check_url("--oauth-issuer", issuer)?;
                let resource = self
                    .net
                    .resource_url
                    .as_ref()
                    .ok_or(ConfigError::NoResourceUrl)?;
                let parsed = check_url("--resource-url", resource)?;
                // Clients reach this server by the resource URL's name.
                resource_host = parsed.host_str().map(str::to_owned);
                if let Some(scope) = self.net.required_scopes.iter().find(|s| !is_scope_token(s)) {
                    return Err(ConfigError::OAuth(format!(
                        "--required-scope {scope:?} is not a scope (printable ASCII without spaces, quotes or backslashes)"
                    )));
                }
                if self.net.subject_claim.as_deref() == Some("") {
                    return Err(ConfigError::OAuth(
                        "--subject-claim must name a claim".to_owned(),
                    ));
                }
                let verifier = Verifier::new(OAuthConfig {
                    issuer: issuer.clone(),
                    resource: resource.clone(),
                    required_scopes: self.net.required_scopes.clone(),
                    subject_claim: self
                        .net
                        .subject_claim
                        .clone()
                        .unwrap_or_else(|| DEFAULT_SUBJECT_CLAIM.to_owned()),
                    keys_refresh: self.net.oauth_keys_refresh.unwrap_or(DEFAULT_KEYS_REFRESH),
                    leeway: self.net.oauth_leeway.unwrap_or(DEFAULT_LEEWAY),
                })
                .map_err(ConfigError::OAuth)?;
                Some(Arc::new(verifier))
            }
            None => None,
        };
        let authentication = match (tokens, oauth) {
            (None, None) if address.ip().is_loopback() || self.net.insecure => {
                Authentication::Fixed(Subject::new(self.access.subject.clone()))
            }
            (None, None) => return Err(ConfigError::Exposed(address)),
            (tokens, oauth) => Authentication::Bearer { tokens, oauth },
        };
        let mut allowed_hosts: Vec<String> =
            LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
        allowed_hosts.extend(self.net.allowed_hosts.iter().cloned());
        allowed_hosts.extend(resource_host);
        Ok(Some((
            address,
            HttpConfig {
                authentication,
                allowed_hosts,
                drain: self.limits().max_execution_time + HTTP_DRAIN_MARGIN,
                connections: ConnectionLimits {
                    max_connections: self
                        .net
                        .max_connections
                        .map_or(ConnectionLimits::default().max_connections, |n| n.get()),
                    ..ConnectionLimits::default()
                },
                metrics_listen: self.net.metrics_listen,
                metrics_for_subjects: self.access.visibility_decision.is_none(),
                stop: tokio_util::sync::CancellationToken::new(),
                sessions: self.net.http_sessions.then(|| {
                    self.limits().max_execution_time
                        + self
                            .access
                            .approval_timeout
                            .unwrap_or(DEFAULT_APPROVAL_TIMEOUT)
                        + SESSION_IDLE_MARGIN
                }),
                // Set once the store is made (`main`).
                session_store: None,
            },
        )))
    }
}
