//! Who may call what: the tokens file, the policy modules, the authorizer, the
//! token exchange for upstreams acting for their callers, and the audit log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use codemode_server::audit::AuditLog;
use codemode_server::authz::exchange::{ClientCredentials, Exchanger, TokenExchange};
use codemode_server::authz::{AllowAll, RegoAuthorizer, Replaceable, Tokens};
use codemode_server::files::read_text;
use codemode_server::mcp::http::{Authentication, HttpConfig};
use codemode_server::{Secret, UpstreamAuth, UpstreamTransport};

use super::error::{Authorization, ConfigError};
use crate::cli::Cli;

/// Largest tokens file read: a line per subject, so about 200,000 subjects.
const MAX_TOKENS_BYTES: u64 = 16 << 20;
/// What sets [`MAX_TOKENS_BYTES`], for the message.
const TOKENS_CAP: &str = "16 MiB, the most a tokens file may hold";
/// Largest policy module read.
const MAX_POLICY_BYTES: u64 = 16 << 20;
/// What sets [`MAX_POLICY_BYTES`], for the message.
const POLICY_CAP: &str = "16 MiB, the most a policy module may hold";

/// Largest client secret file read.
const MAX_SECRET_BYTES: u64 = 64 << 10;
/// What sets [`MAX_SECRET_BYTES`], for the message.
const SECRET_CAP: &str = "64 KiB, the most a client secret file may hold";

/// Reads and parses the tokens file at `path`: a regular file (a FIFO or a device
/// is refused at once, never waited on) of at most 16 MiB.
///
/// # Errors
///
/// [`ConfigError`] naming the file when it cannot be read or is malformed.
pub fn read_tokens(path: &Path) -> Result<Tokens, ConfigError> {
    let text = read_text(path, MAX_TOKENS_BYTES, TOKENS_CAP).map_err(|source| {
        ConfigError::TokensFile {
            path: path.to_owned(),
            reason: source,
        }
    })?;
    Tokens::parse(&text).map_err(|source| ConfigError::Tokens {
        path: path.to_owned(),
        reason: source,
    })
}

/// Reads the policy modules at `paths` (each a regular file of at most 16 MiB) and
/// compiles them for `decision` and, when given, the `visibility` decision and
/// the `quota` decision.
///
/// # Errors
///
/// [`ConfigError`] naming the file that cannot be read, or why the modules do not
/// compile.
pub fn compile_policy(
    paths: &[PathBuf],
    decision: &str,
    visibility: Option<&str>,
    quota: Option<&str>,
) -> Result<RegoAuthorizer, ConfigError> {
    let mut modules = Vec::with_capacity(paths.len());
    for path in paths {
        let source = read_text(path, MAX_POLICY_BYTES, POLICY_CAP).map_err(|source| {
            ConfigError::PolicyFile {
                path: path.clone(),
                reason: source,
            }
        })?;
        modules.push((path.display().to_string(), source));
    }
    let authorizer = RegoAuthorizer::new(decision, &modules)?;
    let authorizer = match visibility {
        Some(visibility) => authorizer.with_visibility(visibility, &modules)?,
        None => authorizer,
    };
    Ok(match quota {
        Some(quota) => authorizer.with_quota(quota, &modules)?,
        None => authorizer,
    })
}

impl Cli {
    /// The authorizer the flags ask for. Over HTTP (`http` true) one of --policy
    /// and --allow-all is required; over stdio, neither means allow-all for the
    /// single local subject (and the summary says so).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when a policy file cannot be read or compiled, or HTTP has no
    /// decision.
    pub fn authorization(&self, http: bool) -> Result<Authorization, ConfigError> {
        if !self.access.policy.is_empty() {
            let authorizer = compile_policy(
                &self.access.policy,
                &self.access.policy_decision,
                self.access.visibility_decision.as_deref(),
                self.access.quota_decision.as_deref(),
            )?;
            let policy = Arc::new(Replaceable::new(Box::new(authorizer)));
            let mut visibility = match &self.access.visibility_decision {
                Some(decision) => format!("; what each subject can find by {decision}"),
                None => String::new(),
            };
            if let Some(decision) = &self.access.quota_decision {
                visibility.push_str(&format!("; each subject's quotas by {decision}"));
            }
            return Ok(Authorization {
                authorizer: policy.clone(),
                summary: format!(
                    "native calls are decided by {} with {} policy module(s){visibility}",
                    self.access.policy_decision,
                    self.access.policy.len()
                ),
                policy: Some(policy),
            });
        }
        if self.access.allow_all {
            return Ok(Authorization {
                authorizer: Arc::new(AllowAll),
                summary: "every native call is allowed (--allow-all)".to_owned(),
                policy: None,
            });
        }
        if http {
            return Err(ConfigError::NoAuthorization);
        }
        Ok(Authorization {
            authorizer: Arc::new(AllowAll),
            summary: format!(
                "no --policy given: every native call is allowed for the single stdio subject {:?}",
                self.access.subject
            ),
            policy: None,
        })
    }

    /// What trades callers' tokens for upstreams' (`--oauth-client-id`), at
    /// the issuer of `http`'s authentication; `None` without the flag.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Exchange`] when the secret file cannot be read or is
    /// blank, or an upstream with `auth = "token-exchange"` has nothing to
    /// exchange with.
    pub fn token_exchange(
        &self,
        http: Option<&HttpConfig>,
    ) -> Result<Option<Arc<dyn TokenExchange>>, ConfigError> {
        let verifier = http.and_then(|http| match &http.authentication {
            Authentication::Bearer {
                oauth: Some(verifier),
                ..
            } => Some(verifier.clone()),
            Authentication::Bearer { oauth: None, .. } | Authentication::Fixed(_) => None,
        });
        let exchanger = match (
            &self.net.oauth_client_id,
            &self.net.oauth_client_secret_file,
            verifier,
        ) {
            (Some(id), Some(path), Some(verifier)) => {
                let secret = read_text(path, MAX_SECRET_BYTES, SECRET_CAP).map_err(|error| {
                    ConfigError::Exchange(format!(
                        "--oauth-client-secret-file {}: {error}",
                        path.display()
                    ))
                })?;
                let secret = secret.trim();
                if secret.is_empty() {
                    return Err(ConfigError::Exchange(format!(
                        "--oauth-client-secret-file {}: the file is blank",
                        path.display()
                    )));
                }
                let client = ClientCredentials {
                    id: id.clone(),
                    secret: Secret::new(secret),
                };
                let exchanger: Arc<dyn TokenExchange> = Arc::new(Exchanger::new(verifier, client));
                Some(exchanger)
            }
            _ => None,
        };
        if exchanger.is_none()
            && let Some(upstream) = self.upstreams.iter().find(|upstream| {
                matches!(
                    upstream.transport,
                    UpstreamTransport::Http {
                        auth: UpstreamAuth::TokenExchange { .. },
                        ..
                    }
                )
            })
        {
            return Err(ConfigError::Exchange(format!(
                "upstream `{}`: auth = \"token-exchange\" needs --oauth-issuer, --oauth-client-id and --oauth-client-secret-file",
                upstream.name
            )));
        }
        if exchanger.is_none()
            && let Some(service) = self.openapi.iter().find(|service| {
                matches!(
                    service.auth,
                    codemode_server::OpenApiAuth::TokenExchange { .. }
                )
            })
        {
            return Err(ConfigError::Exchange(format!(
                "openapi `{}`: auth = \"token-exchange\" needs --oauth-issuer, --oauth-client-id and --oauth-client-secret-file",
                service.name
            )));
        }
        Ok(exchanger)
    }

    /// The audit log: `--audit-log FILE`; by default stdout when serving HTTP (so
    /// that no other line shares its stream: the operator log is on stderr), and
    /// stderr over stdio, where stdout is the protocol.
    ///
    /// # Errors
    ///
    /// [`ConfigError::AuditLog`] when the file cannot be opened for appending.
    pub fn audit(&self) -> Result<AuditLog, ConfigError> {
        match &self.access.audit_log {
            Some(path) => AuditLog::file(path).map_err(|source| ConfigError::AuditLog {
                path: path.clone(),
                reason: source,
            }),
            None if self.net.listen.is_some() => Ok(AuditLog::stdout()),
            None => Ok(AuditLog::stderr()),
        }
    }
}
