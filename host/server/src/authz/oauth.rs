//! The OAuth 2.1 resource server (`--oauth-issuer`, `--resource-url`): a bearer
//! token is accepted when it is a JWT the issuer signed for this server.
//!
//! The issuer's metadata is discovered (RFC 8414's
//! `/.well-known/oauth-authorization-server`, else OpenID Connect's
//! `/.well-known/openid-configuration`), its JWKS fetched and cached; a token
//! naming a key the cache does not hold makes it fetch again, at most once per
//! [`OAuthConfig::keys_refresh`] (`--oauth-keys-refresh`, [`DEFAULT_KEYS_REFRESH`]:
//! keys rotate; a flood of made-up key IDs must not become a flood of fetches). Every fetch has a timeout and a size cap. A token is
//! accepted when its algorithm is RS256, ES256 or EdDSA (`none` and HMAC never:
//! the key would be whatever the token says), its signature verifies with the
//! named key of the matching type, `iss` is the issuer, `aud` contains the
//! resource URL, `exp` and `nbf` hold within [`OAuthConfig::leeway`]
//! (`--oauth-leeway`, [`DEFAULT_LEEWAY`]), and it carries every
//! `--required-scope`. Its subject is the claim `--subject-claim` (`sub`).
//! Tokens and claims are never logged: a refusal's reason names what failed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::subject::Subject;
use crate::secret::Secret;

/// How long a metadata or JWKS fetch may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes of a metadata document or JWKS read.
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// The shortest time between two fetches of the JWKS for an unknown key ID, by
/// default.
pub const DEFAULT_KEYS_REFRESH: Duration = Duration::from_secs(60);
/// The shortest `--oauth-keys-refresh`: below it, made-up key IDs could make
/// the server fetch the keys many times a second.
pub const MIN_KEYS_REFRESH: Duration = Duration::from_secs(1);
/// The shortest time between two fetches while no key is known (the issuer was
/// not reachable yet).
pub const RETRY_INTERVAL: Duration = Duration::from_secs(5);
/// How long a request waits for a key fetch already under way.
pub const LOCK_WAIT: Duration = Duration::from_secs(2);
/// The clock skew `exp` and `nbf` allow, by default.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// The most clock skew `--oauth-leeway` may allow (an expired token would be
/// taken for longer than that).
pub const MAX_LEEWAY: Duration = Duration::from_secs(600);
/// The most entries of an issuer's JWKS looked at (the first ones).
pub const MAX_KEYS: usize = 64;
/// The longest bearer token looked at.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The subject claim by default.
pub const DEFAULT_SUBJECT_CLAIM: &str = "sub";

/// What `--oauth-issuer` and its flags say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConfig {
    /// The authorization server's issuer identifier.
    pub issuer: String,
    /// This server's canonical URI: what `aud` must contain.
    pub resource: String,
    /// Scopes every token must carry (`--required-scope`).
    pub required_scopes: Vec<String>,
    /// The claim that names the subject (`--subject-claim`).
    pub subject_claim: String,
    /// The shortest time between two fetches of the keys for a key ID not held
    /// (`--oauth-keys-refresh`, [`DEFAULT_KEYS_REFRESH`]).
    pub keys_refresh: Duration,
    /// The clock skew `exp` and `nbf` allow, in whole seconds (`--oauth-leeway`,
    /// [`DEFAULT_LEEWAY`]).
    pub leeway: Duration,
}

pub use codemode_runtime::url::{UrlError, check_url};

pub use super::bearer::{PROTECTED_RESOURCE_PATH, Rejection};

/// The issuer's metadata and keys, as last fetched.
#[derive(Default)]
struct Keys {
    jwks_uri: Option<String>,
    keys: Vec<Jwk>,
    fetched: Option<Instant>,
}

/// Verifies bearer tokens against the issuer's keys.
pub struct Verifier {
    config: OAuthConfig,
    http: reqwest::Client,
    keys: tokio::sync::Mutex<Keys>,
    /// The keys as last fetched, read without waiting for a fetch.
    current: arc_swap::ArcSwap<Vec<Jwk>>,
    /// The metadata's `token_endpoint`, found with the keys' `jwks_uri`; read
    /// without waiting for a fetch.
    token_endpoint: arc_swap::ArcSwapOption<String>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.config.issuer)
            .field("resource", &self.config.resource)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for `config`. Nothing is fetched until the first token.
    ///
    /// # Errors
    ///
    /// The HTTP client cannot be built (no TLS protocol version).
    pub fn new(config: OAuthConfig) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(crate::tls::client_config()?)
            // The metadata names the JWKS; nothing else is followed.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| format!("HTTP client: {error}"))?;
        Ok(Self {
            config,
            http,
            keys: tokio::sync::Mutex::new(Keys::default()),
            current: arc_swap::ArcSwap::from_pointee(Vec::new()),
            token_endpoint: arc_swap::ArcSwapOption::empty(),
        })
    }

    /// Holds `keys` as if just fetched (the tests reach no issuer).
    #[cfg(test)]
    fn preload(&self, keys: Vec<Jwk>) {
        if let Ok(mut held) = self.keys.try_lock() {
            held.keys = keys.clone();
            held.fetched = Some(Instant::now());
        }
        self.current.store(Arc::new(keys));
    }

    /// What it was made with.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// The subject `token` names, with its claims and scopes, carrying the token.
    ///
    /// # Errors
    ///
    /// [`Rejection`] saying why it is not accepted.
    pub async fn verify(&self, token: &str) -> Result<Subject, Rejection> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Rejection::Invalid(format!(
                "the token is longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| Rejection::Invalid("not a JWT with a supported algorithm".to_owned()))?;
        let alg = match header.alg {
            Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA => header.alg,
            other => {
                return Err(Rejection::Invalid(format!(
                    "algorithm {other:?} is not accepted (RS256, ES256, EdDSA)"
                )));
            }
        };
        let kid = header.kid.as_deref();
        let key = match find_key(&self.current.load(), kid, alg) {
            Some(key) => key,
            None => {
                self.refresh().await?;
                find_key(&self.current.load(), kid, alg).ok_or_else(|| {
                    Rejection::Invalid(match kid {
                        Some(_) => "the token names a key the issuer does not publish".to_owned(),
                        None => {
                            "the token names no key and the issuer publishes several".to_owned()
                        }
                    })
                })?
            }
        };
        let claims = self.decode(token, alg, &key)?;
        let scopes = scopes(&claims);
        if !self
            .config
            .required_scopes
            .iter()
            .all(|required| scopes.contains(required))
        {
            return Err(Rejection::InsufficientScope);
        }
        let id = match claims.get(&self.config.subject_claim) {
            Some(Value::String(id)) if is_subject_id(id) => id.clone(),
            _ => {
                return Err(Rejection::Invalid(format!(
                    "the token's claim `{}` is no subject ID (a string of 1 to {MAX_SUBJECT_BYTES} bytes, no spaces, control or invisible characters)",
                    self.config.subject_claim
                )));
            }
        };
        // Kept for an upstream that acts for the subject (`auth = "forward"`).
        Ok(Subject::with_claims(id, claims, scopes).with_access_token(Secret::new(token)))
    }

    /// The claims of `token`, checked as the module says, with `key`.
    fn decode(
        &self,
        token: &str,
        alg: Algorithm,
        key: &DecodingKey,
    ) -> Result<Map<String, Value>, Rejection> {
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation)
            .map(|data| data.claims)
            .map_err(|error| {
                use jsonwebtoken::errors::ErrorKind;
                let reason = match error.kind() {
                    ErrorKind::InvalidSignature => "the signature does not verify",
                    ErrorKind::ExpiredSignature => "the token expired",
                    ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)",
                    ErrorKind::InvalidIssuer => "the token's issuer is not the configured one",
                    ErrorKind::InvalidAudience => "the token's audience is not this server",
                    ErrorKind::MissingRequiredClaim(_) => "the token lacks exp, iss or aud",
                    _ => "the token does not decode",
                };
                Rejection::Invalid(reason.to_owned())
            })
    }

    /// Fetches the metadata (once) and the JWKS, unless fetched within
    /// [`OAuthConfig::keys_refresh`] ([`RETRY_INTERVAL`] while no key is known).
    async fn refresh(&self) -> Result<(), Rejection> {
        // One fetch at a time; a request that finds one under way waits for
        // it at most `LOCK_WAIT` (a local issuer answers well within it), then
        // is refused (503, try again), so a slow issuer holds few requests
        // and for little time.
        let Ok(mut keys) = tokio::time::timeout(LOCK_WAIT, self.keys.lock()).await else {
            return Err(Rejection::KeysUnavailable(
                "the issuer's keys are being fetched".to_owned(),
            ));
        };
        let wait = if keys.keys.is_empty() {
            RETRY_INTERVAL.min(self.config.keys_refresh)
        } else {
            self.config.keys_refresh
        };
        if keys.fetched.is_some_and(|at| at.elapsed() < wait) {
            return if keys.keys.is_empty() {
                Err(Rejection::KeysUnavailable(
                    "the issuer's keys could not be fetched; retried shortly".to_owned(),
                ))
            } else {
                Ok(())
            };
        }
        keys.fetched = Some(Instant::now());
        let fetched = async {
            let jwks_uri = match &keys.jwks_uri {
                Some(uri) => uri.clone(),
                None => {
                    let (uri, token_endpoint) = self.discover().await?;
                    keys.jwks_uri = Some(uri.clone());
                    self.token_endpoint.store(token_endpoint.map(Arc::new));
                    uri
                }
            };
            parse_jwks(&self.fetch(&jwks_uri).await?)
        }
        .await;
        // The interval counts from the end of a fetch too: a slow one is not
        // followed at once by the next.
        keys.fetched = Some(Instant::now());
        let fetched = match fetched {
            Ok(fetched) => fetched,
            Err(reason) => {
                tracing::warn!(
                    issuer = %self.config.issuer,
                    %reason,
                    "OAuth issuer keys could not be fetched: access tokens are refused until they are"
                );
                return Err(Rejection::KeysUnavailable(reason));
            }
        };
        tracing::info!(
            issuer = %self.config.issuer,
            keys = fetched.len(),
            "OAuth issuer keys fetched"
        );
        keys.keys = fetched.clone();
        self.current.store(Arc::new(fetched));
        Ok(())
    }

    /// Fetches the issuer's keys now (at start, so that a wrong issuer URL is
    /// logged at once rather than at the first token); a failure is logged.
    pub async fn prefetch(&self) {
        let _ = self.refresh().await;
    }

    /// The issuer's `token_endpoint`, from its metadata (discovered with its
    /// keys, at most as often).
    ///
    /// # Errors
    ///
    /// The metadata could not be had, or names none.
    pub async fn token_endpoint(&self) -> Result<String, String> {
        if let Some(endpoint) = self.token_endpoint.load_full() {
            return Ok(endpoint.as_ref().clone());
        }
        if let Err(rejection) = self.refresh().await {
            return Err(match rejection {
                Rejection::KeysUnavailable(reason) | Rejection::Invalid(reason) => reason,
                Rejection::InsufficientScope => "the issuer's metadata could not be had".to_owned(),
            });
        }
        self.token_endpoint
            .load_full()
            .map(|endpoint| endpoint.as_ref().clone())
            .ok_or_else(|| "the issuer's metadata names no usable token_endpoint".to_owned())
    }

    /// The issuer's `jwks_uri` and `token_endpoint`, from its metadata: RFC
    /// 8414's location first, then OpenID Connect's. The metadata's `issuer`
    /// must be the one configured; each URL is checked as the issuer's is.
    async fn discover(&self) -> Result<(String, Option<String>), String> {
        let mut reasons = Vec::new();
        for url in metadata_urls(&self.config.issuer) {
            let document = match self.fetch(&url).await {
                Ok(document) => document,
                Err(reason) => {
                    reasons.push(reason);
                    continue;
                }
            };
            let issuer = document.get("issuer").and_then(Value::as_str);
            if issuer != Some(self.config.issuer.as_str()) {
                return Err(format!(
                    "{url}: its issuer is not {} (RFC 8414 requires the same)",
                    self.config.issuer
                ));
            }
            // Only a token exchange needs the token endpoint: one that cannot
            // be used is a WARN, not a reason to refuse every access token.
            let token_endpoint = match document.get("token_endpoint").and_then(Value::as_str) {
                Some(endpoint) => match check_url("token_endpoint", endpoint) {
                    Ok(_) => Some(endpoint.to_owned()),
                    Err(error) => {
                        tracing::warn!(issuer = %self.config.issuer, reason = %error, "the issuer's token_endpoint is not used: no token exchange");
                        None
                    }
                },
                None => None,
            };
            return match document.get("jwks_uri").and_then(Value::as_str) {
                // Keys over plain HTTP could be anyone's.
                Some(uri) => check_url("jwks_uri", uri)
                    .map(|_| (uri.to_owned(), token_endpoint))
                    .map_err(|error| format!("{url}: {error}")),
                None => Err(format!("{url}: no jwks_uri")),
            };
        }
        Err(reasons.join("; "))
    }

    /// GETs `url` as JSON, within [`FETCH_TIMEOUT`] and [`MAX_DOCUMENT_BYTES`].
    async fn fetch(&self, url: &str) -> Result<Value, String> {
        let work = async {
            let response = self
                .http
                .get(url)
                .header("accept", "application/json")
                .send()
                .await
                .map_err(|error| format!("{url}: {}", error.without_url()))?;
            if !response.status().is_success() {
                return Err(format!("{url}: HTTP {}", response.status().as_u16()));
            }
            let body = read_body(response, url).await?;
            serde_json::from_slice(&body).map_err(|_| format!("{url}: not JSON"))
        };
        tokio::time::timeout(FETCH_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "{url}: no answer within {} s",
                    FETCH_TIMEOUT.as_secs()
                ))
            })
    }

    /// The client that reaches the issuer (no redirects followed).
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The protected resource metadata (RFC 9728) this server serves.
    pub fn resource_metadata(&self) -> Value {
        let mut metadata = serde_json::json!({
            "resource": self.config.resource,
            "authorization_servers": [self.config.issuer],
            "bearer_methods_supported": ["header"],
        });
        // None required: none named (an empty list reads as "ask for none").
        if !self.config.required_scopes.is_empty() {
            metadata["scopes_supported"] = serde_json::json!(self.config.required_scopes);
        }
        metadata
    }

    /// This server's canonical URI ([`OAuthConfig::resource`]).
    pub fn resource(&self) -> &str {
        &self.config.resource
    }

    /// Where [`Verifier::resource_metadata`] is served: the resource URL's
    /// origin, [`PROTECTED_RESOURCE_PATH`], then its path (RFC 9728 §3.1).
    pub fn resource_metadata_url(&self) -> String {
        resource_metadata_url(&self.config.resource)
    }

    /// The `WWW-Authenticate` value of a 401 (`error` set when a token was
    /// presented) or of a 403 for `insufficient_scope`.
    pub fn challenge(&self, error: Option<&str>) -> String {
        let mut value = format!(
            "Bearer resource_metadata=\"{}\"",
            self.resource_metadata_url()
        );
        if let Some(error) = error {
            value.push_str(&format!(", error=\"{error}\""));
        }
        if !self.config.required_scopes.is_empty() {
            value.push_str(&format!(
                ", scope=\"{}\"",
                self.config.required_scopes.join(" ")
            ));
        }
        value
    }
}

/// The longest subject ID a token may name.
pub const MAX_SUBJECT_BYTES: usize = 256;

/// The body of `response` from `url`, refused past [`MAX_DOCUMENT_BYTES`]
/// without reading the rest.
///
/// # Errors
///
/// The body is larger, or cannot be read.
pub(crate) async fn read_body(
    mut response: reqwest::Response,
    url: &str,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| format!("{url}: {}", error.without_url()))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("{url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Whether `id` can be a subject's ID: what a tokens file's could be (no
/// whitespace, no control characters), not empty, at most
/// [`MAX_SUBJECT_BYTES`].
fn is_subject_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SUBJECT_BYTES
        && !id
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || crate::hidden::hides(c))
}

/// Whether `scope` is a scope token (RFC 6749 §3.3: printable ASCII but
/// space, `"` and `\\`), which a required scope must be.
pub fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// RFC 9728 §3.1: `https://host/.well-known/oauth-protected-resource/mcp` for
/// `https://host/mcp`.
pub fn resource_metadata_url(resource: &str) -> String {
    match url::Url::parse(resource) {
        Ok(url) => {
            // RFC 9728 §3.1 keeps the path as it is, but a lone `/` is none.
            let path = match url.path() {
                "/" => "",
                path => path,
            };
            format!(
                "{}{PROTECTED_RESOURCE_PATH}{path}",
                url.origin().ascii_serialization()
            )
        }
        Err(_) => format!("{resource}{PROTECTED_RESOURCE_PATH}"),
    }
}

/// The metadata locations of `issuer`: RFC 8414 (the well-known segment
/// before the issuer's path), then OpenID Connect (after it).
fn metadata_urls(issuer: &str) -> Vec<String> {
    let Ok(url) = url::Url::parse(issuer) else {
        return Vec::new();
    };
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
    ]
}

/// The signing keys of a JWKS document; keys of other uses or types, or that
/// do not parse, are left out.
fn parse_jwks(document: &Value) -> Result<Vec<Jwk>, String> {
    let Some(keys) = document.get("keys").and_then(Value::as_array) else {
        return Err("the JWKS has no keys array".to_owned());
    };
    // At most MAX_KEYS entries are looked at: an issuer's set holds a few
    // signing keys, and a set of tens of thousands of junk entries must not be
    // parsed and held (issue 49, F11).
    if keys.len() > MAX_KEYS {
        tracing::warn!(
            keys = keys.len(),
            kept = MAX_KEYS,
            "the issuer's JWKS holds more keys than are looked at; the rest are ignored"
        );
    }
    Ok(keys
        .iter()
        .take(MAX_KEYS)
        .filter_map(|key| serde_json::from_value::<Jwk>(key.clone()).ok())
        .filter(|key| {
            !matches!(key.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature)
        })
        .filter(|key| !matches!(key.algorithm, AlgorithmParameters::OctetKey(_)))
        .collect())
}

/// The key of `keys` a token of `alg` naming `kid` verifies with: the one with
/// that ID (the only one fitting `alg` when the token names none), of the type
/// `alg` needs (RSA, EC P-256, OKP Ed25519) and, when the key says, the same
/// algorithm.
fn find_key(keys: &[Jwk], kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
    let fits = |key: &&Jwk| {
        let type_fits = match (&key.algorithm, alg) {
            (AlgorithmParameters::RSA(_), Algorithm::RS256) => true,
            (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => {
                ec.curve == EllipticCurve::P256
            }
            (AlgorithmParameters::OctetKeyPair(okp), Algorithm::EdDSA) => {
                okp.curve == EllipticCurve::Ed25519
            }
            _ => false,
        };
        let alg_fits = match key.common.key_algorithm {
            None => true,
            Some(declared) => matches!(
                (declared, alg),
                (KeyAlgorithm::RS256, Algorithm::RS256)
                    | (KeyAlgorithm::ES256, Algorithm::ES256)
                    | (KeyAlgorithm::EdDSA, Algorithm::EdDSA)
            ),
        };
        type_fits && alg_fits
    };
    let key = match kid {
        Some(kid) => keys
            .iter()
            .filter(|key| key.common.key_id.as_deref() == Some(kid))
            .find(fits)?,
        None => {
            let mut fitting = keys.iter().filter(fits);
            let only = fitting.next()?;
            if fitting.next().is_some() {
                return None;
            }
            only
        }
    };
    DecodingKey::from_jwk(key).ok()
}

/// The scopes a token carries: `scope` (space-separated, RFC 9068) or `scp`
/// (a list or a string).
fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    let split = |text: &str| {
        text.split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(text)), _) => split(text),
        (_, Some(Value::Array(list))) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        (_, Some(Value::String(text))) => split(text),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
