//! A client of one registry's HTTP API (the OCI distribution spec), written for a
//! registry that may be hostile: every body is capped before it is read (by its
//! `Content-Length`) and while it is read, every blob and every manifest asked for
//! by digest is checked against its digest, a redirect is followed only within
//! the registry's origin (a blob's also to another HTTPS origin: its bytes are
//! checked, and reqwest sends no credentials across origins), and each read of the
//! connection waits at most [`Limits::read_timeout`] (the caller bounds the
//! whole pull in time).
//!
//! Authentication as registries do it: anonymous first; a 401 with a `Bearer`
//! challenge is answered by asking the challenge's realm for a token (with the
//! configured user and password, when there are some), a `Basic` challenge with
//! the user and password; a configured token is sent as it is.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE,
};
use reqwest::{Method, StatusCode};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;
use url::Url;

use crate::artifact::{
    DOCKER_LIST, DOCKER_MANIFEST, Descriptor, Index, OCI_INDEX, OCI_MANIFEST, printable,
    printable_within,
};
use crate::reference::Digest;

/// The largest manifest read (the size the distribution spec says registries
/// should accept at least, and clients need not read more of).
pub const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;
/// The largest token answer, error body or signature payload read.
const MAX_SMALL_BYTES: u64 = 64 * 1024;
/// How much of an HTTP client's error chain a message quotes (the cause is
/// at its end: "invalid peer certificate: UnknownIssuer").
const MAX_REASON_CHARS: usize = 400;
/// How much of an error body a message quotes.
const QUOTED_BYTES: usize = 200;
/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 5;
/// The manifest types asked for.
const MANIFEST_TYPES: [&str; 4] = [OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST];

/// What a client may spend.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest blob read or written.
    pub max_blob_bytes: u64,
    /// The longest wait for the next bytes of an answer, and for a connection.
    pub read_timeout: Duration,
}

/// Credentials for a registry.
#[derive(Clone)]
pub enum Credentials {
    /// A user and password (a Docker `config.json` entry): sent to a `Basic`
    /// challenge, or to a `Bearer` challenge's realm to get a token.
    Basic {
        /// The user.
        username: String,
        /// The password or access token.
        password: String,
    },
    /// A token sent as `Authorization: Bearer` from the first request (a
    /// registry token from a token file).
    Bearer(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Basic { username, .. } => write!(f, "Basic({username}, <hidden>)"),
            Self::Bearer(_) => f.write_str("Bearer(<hidden>)"),
        }
    }
}

/// What went wrong talking to a registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The request did not get an answer (connection, TLS, timeout).
    #[error("cannot reach the registry {registry}: {reason}")]
    Unreachable {
        /// The registry.
        registry: String,
        /// What the HTTP client said.
        reason: String,
    },
    /// A redirect the policy does not follow.
    #[error("the registry redirected {what} to {to}, outside its origin: refused")]
    Redirect {
        /// What was asked.
        what: String,
        /// Where it was sent.
        to: String,
    },
    /// Nothing there.
    #[error("the registry has no {what}")]
    NotFound {
        /// What was asked.
        what: String,
    },
    /// The credentials were refused, or none were given where needed.
    #[error("the registry refused access to {what}: {reason}")]
    Denied {
        /// What was asked.
        what: String,
        /// Why.
        reason: String,
    },
    /// Another status.
    #[error("the registry answered {status} to {what}: {body}")]
    Status {
        /// What was asked.
        what: String,
        /// The status line.
        status: String,
        /// The first bytes of its body, printable.
        body: String,
    },
    /// A body over its cap.
    #[error("the registry's {what} is over {limit} bytes: refused")]
    TooLarge {
        /// What was read.
        what: String,
        /// The cap.
        limit: u64,
    },
    /// A body whose digest or length is not what was asked for.
    #[error("the registry's {what} does not match its digest: expected {expected}, got {actual}")]
    Mismatch {
        /// What was read.
        what: String,
        /// The digest or size asked for.
        expected: String,
        /// What the bytes are.
        actual: String,
    },
    /// An answer that does not make sense.
    #[error("the registry's {what} is malformed: {reason}")]
    Malformed {
        /// What was read.
        what: String,
        /// Why.
        reason: String,
    },
    /// The client could not be set up.
    #[error("cannot set up a client of the registry: {0}")]
    Setup(String),
    /// The file a blob goes to could not be written.
    #[error("cannot write into the plugins folder: {0}")]
    Write(String),
}

/// A manifest as read.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Its bytes, exactly as served (what its digest is of).
    pub bytes: Bytes,
    /// Their digest.
    pub digest: Digest,
    /// The media type it was served as.
    pub media_type: String,
}

/// How a registry is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// HTTPS, with the system's roots.
    Https,
    /// Plain HTTP (a registry marked `insecure`).
    Http,
    /// HTTPS, and plain HTTP when the registry does not speak TLS at all (a
    /// registry on this machine, as docker does): a certificate that does not
    /// verify is an error, never a reason to fall back.
    HttpsOrHttp,
}

/// A client of one registry.
pub struct Client {
    http: reqwest::Client,
    registry: String,
    /// The registry's origin; for [`Transport::HttpsOrHttp`], `https` until the
    /// first request found that it does not speak TLS.
    base: std::sync::Mutex<Url>,
    /// Whether the scheme is settled (the first request of `HttpsOrHttp`).
    settled: tokio::sync::OnceCell<()>,
    transport: Transport,
    credentials: Option<Credentials>,
    token: tokio::sync::Mutex<Option<String>>,
    limits: Limits,
}

impl std::fmt::Debug for Client {
    // Not derived: the token it holds is a credential.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("registry", &self.registry)
            .field("base", &self.base().as_str())
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

/// The error a redirect policy stops a redirect with.
#[derive(Debug)]
struct OffOrigin(String);

impl std::fmt::Display for OffOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redirect to {} refused", self.0)
    }
}

impl std::error::Error for OffOrigin {}

impl Client {
    /// A client of `registry` (`host[:port]`) over `transport`.
    ///
    /// # Errors
    ///
    /// No TLS configuration or HTTP client could be made.
    pub fn new(
        registry: &str,
        transport: Transport,
        credentials: Option<Credentials>,
        limits: Limits,
    ) -> Result<Self, RegistryError> {
        let scheme = match transport {
            Transport::Http => "http",
            Transport::Https | Transport::HttpsOrHttp => "https",
        };
        let base = Url::parse(&format!("{scheme}://{registry}"))
            .map_err(|e| RegistryError::Setup(format!("registry `{registry}`: {e}")))?;
        let policy = reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                let to = format!("{} (more than {MAX_REDIRECTS} redirects)", attempt.url());
                return attempt.error(OffOrigin(to));
            }
            let first = attempt.previous().first();
            let same_origin = first.is_some_and(|first| first.origin() == attempt.url().origin());
            let blob = first.is_some_and(|first| is_blob_path(first.path()));
            if same_origin || (blob && attempt.url().scheme() == "https") {
                attempt.follow()
            } else {
                let to = attempt.url().to_string();
                attempt.error(OffOrigin(to))
            }
        });
        let mut builder = reqwest::Client::builder();
        if transport == Transport::HttpsOrHttp {
            // A registry on this machine is reached directly: a proxy cannot
            // reach this machine's loopback, and its answer must not decide
            // the scheme.
            builder = builder.no_proxy();
        }
        let http = builder
            .tls_backend_preconfigured(tls_config()?)
            .redirect(policy)
            .connect_timeout(limits.read_timeout)
            .read_timeout(limits.read_timeout)
            .user_agent(concat!("codemode-host/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RegistryError::Setup(e.to_string()))?;
        Ok(Self {
            http,
            registry: registry.to_owned(),
            base: std::sync::Mutex::new(base),
            settled: tokio::sync::OnceCell::new(),
            transport,
            credentials,
            token: tokio::sync::Mutex::new(None),
            limits,
        })
    }

    /// The registry this client speaks to.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The registry's origin as it is spoken to now.
    fn base(&self) -> Url {
        self.base
            .lock()
            .map(|base| base.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// For [`Transport::HttpsOrHttp`], once: asks `/v2/` over HTTPS, and speaks
    /// plain HTTP from then on when the answer was not TLS at all.
    async fn settle(&self) {
        if self.transport != Transport::HttpsOrHttp {
            return;
        }
        self.settled
            .get_or_init(|| async {
                let probe = self.base().join("/v2/");
                let Ok(probe) = probe else { return };
                if let Err(error) = self.http.get(probe).send().await
                    && not_tls(&error)
                    && let Ok(mut base) = self.base.lock()
                {
                    let _ = base.set_scheme("http");
                }
            })
            .await;
    }

    /// The manifest `target` (a tag or digest) of `repository`. When `target` is
    /// a digest, the bytes are checked against it.
    ///
    /// # Errors
    ///
    /// See [`RegistryError`]; a manifest that is not there is `NotFound`.
    pub async fn manifest(&self, repository: &str, target: &str) -> Result<Fetched, RegistryError> {
        let what = manifest_name(repository, target);
        let path = format!("/v2/{repository}/manifests/{target}");
        let response = self
            .send(Method::GET, &path, &MANIFEST_TYPES.join(", "), None, &what)
            .await?;
        let media_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_owned())
            .unwrap_or_default();
        let announced = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = read_capped(&self.registry, response, MAX_MANIFEST_BYTES, &what).await?;
        let digest = Digest::of(&bytes);
        let expected = match Digest::parse(target) {
            Ok(asked) => Some(asked.to_string()),
            Err(_) => announced.filter(|a| a.starts_with("sha256:")),
        };
        if let Some(expected) = expected
            && expected != digest.as_str()
        {
            return Err(RegistryError::Mismatch {
                what,
                expected: printable(&expected),
                actual: digest.to_string(),
            });
        }
        // A manifest without a media type in its answer says it in its body.
        let media_type = if media_type.is_empty() || media_type == "application/json" {
            serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("mediaType")?.as_str().map(str::to_owned))
                .unwrap_or_else(|| OCI_MANIFEST.to_owned())
        } else {
            media_type
        };
        Ok(Fetched {
            bytes,
            digest,
            media_type,
        })
    }

    /// The digest `tag` of `repository` names now (a `HEAD`, whose
    /// `Docker-Content-Digest` says it; a registry that does not say it is asked
    /// for the manifest itself).
    ///
    /// # Errors
    ///
    /// See [`RegistryError`].
    pub async fn resolve(&self, repository: &str, tag: &str) -> Result<Digest, RegistryError> {
        let what = manifest_name(repository, tag);
        let path = format!("/v2/{repository}/manifests/{tag}");
        let response = self
            .send(Method::HEAD, &path, &MANIFEST_TYPES.join(", "), None, &what)
            .await?;
        let announced = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| Digest::parse(v).ok());
        match announced {
            Some(digest) => Ok(digest),
            None => Ok(self.manifest(repository, tag).await?.digest),
        }
    }

    /// The bytes of a small blob (a signature payload), at most `max`.
    ///
    /// # Errors
    ///
    /// See [`RegistryError`].
    pub async fn blob(
        &self,
        repository: &str,
        descriptor: &Descriptor,
        max: u64,
    ) -> Result<Bytes, RegistryError> {
        let what = format!("blob {}", printable(&descriptor.digest));
        let expected = Digest::parse(&descriptor.digest).map_err(|e| RegistryError::Malformed {
            what: what.clone(),
            reason: e.to_string(),
        })?;
        if descriptor.size > max {
            return Err(RegistryError::TooLarge { what, limit: max });
        }
        let path = format!("/v2/{repository}/blobs/{expected}");
        let response = self.send(Method::GET, &path, "*/*", None, &what).await?;
        let bytes = read_capped(&self.registry, response, descriptor.size, &what).await?;
        check_blob(
            &what,
            &expected,
            descriptor.size,
            bytes.len() as u64,
            &Digest::of(&bytes),
        )?;
        Ok(bytes)
    }

    /// Writes the blob `descriptor` names into `file`, checking its size before
    /// and while reading and its digest at the end.
    ///
    /// # Errors
    ///
    /// See [`RegistryError`]; a failed write is `Unreachable` naming the file's
    /// error.
    pub async fn blob_to_file(
        &self,
        repository: &str,
        descriptor: &Descriptor,
        file: &mut tokio::fs::File,
    ) -> Result<(), RegistryError> {
        let what = format!("blob {}", printable(&descriptor.digest));
        let expected = Digest::parse(&descriptor.digest).map_err(|e| RegistryError::Malformed {
            what: what.clone(),
            reason: e.to_string(),
        })?;
        let limit = self.limits.max_blob_bytes;
        if descriptor.size > limit {
            return Err(RegistryError::TooLarge { what, limit });
        }
        let path = format!("/v2/{repository}/blobs/{expected}");
        let response = self.send(Method::GET, &path, "*/*", None, &what).await?;
        if content_length(&response).is_some_and(|length| length > descriptor.size) {
            return Err(RegistryError::TooLarge {
                what,
                limit: descriptor.size,
            });
        }
        let mut hash = Sha256::new();
        let mut written = 0u64;
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.unreachable(&e))?;
            written += chunk.len() as u64;
            if written > descriptor.size {
                return Err(RegistryError::TooLarge {
                    what,
                    limit: descriptor.size,
                });
            }
            hash.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| RegistryError::Write(e.to_string()))?;
        }
        let actual = Digest::from_hash(hash.finalize().as_slice());
        check_blob(&what, &expected, descriptor.size, written, &actual)
    }

    /// The manifests referring to `digest` with `artifact_type`, through the
    /// OCI 1.1 referrers API; `None` when the registry does not offer it.
    ///
    /// # Errors
    ///
    /// See [`RegistryError`].
    pub async fn referrers(
        &self,
        repository: &str,
        digest: &Digest,
        artifact_type: &str,
    ) -> Result<Option<Vec<Descriptor>>, RegistryError> {
        let what = format!("referrers of {digest}");
        let path = format!("/v2/{repository}/referrers/{digest}");
        let response = match self.send(Method::GET, &path, OCI_INDEX, None, &what).await {
            Ok(response) => response,
            // Registries before OCI 1.1 have no such route.
            Err(RegistryError::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let bytes = read_capped(&self.registry, response, MAX_MANIFEST_BYTES, &what).await?;
        let index: Index =
            serde_json::from_slice(&bytes).map_err(|e| RegistryError::Malformed {
                what,
                reason: e.to_string(),
            })?;
        // The filter is optional for a registry: applied again here.
        Ok(Some(
            index
                .manifests
                .into_iter()
                .filter(|m| m.artifact_type.as_deref() == Some(artifact_type))
                .collect(),
        ))
    }

    /// Uploads `bytes` as a blob (one monolithic `POST` then `PUT`), unless the
    /// registry has it already.
    ///
    /// # Errors
    ///
    /// See [`RegistryError`].
    pub async fn push_blob(
        &self,
        repository: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<Descriptor, RegistryError> {
        let digest = Digest::of(&bytes);
        let descriptor = Descriptor {
            media_type: media_type.to_owned(),
            digest: digest.to_string(),
            size: bytes.len() as u64,
            artifact_type: None,
            annotations: Default::default(),
        };
        let what = format!("blob {digest}");
        let path = format!("/v2/{repository}/blobs/{digest}");
        match self.send(Method::HEAD, &path, "*/*", None, &what).await {
            Ok(_) => return Ok(descriptor),
            Err(RegistryError::NotFound { .. }) => {}
            Err(error) => return Err(error),
        }
        let upload = format!("upload of {what}");
        let response = self
            .send(
                Method::POST,
                &format!("/v2/{repository}/blobs/uploads/"),
                "*/*",
                None,
                &upload,
            )
            .await?;
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| RegistryError::Malformed {
                what: upload.clone(),
                reason: "no Location for the upload".to_owned(),
            })?;
        let mut target = self
            .base()
            .join(location)
            .map_err(|e| RegistryError::Malformed {
                what: upload.clone(),
                reason: format!("Location `{}`: {e}", printable(location)),
            })?;
        if target.origin() != self.base().origin() {
            return Err(RegistryError::Redirect {
                what: upload,
                to: printable(target.as_str()),
            });
        }
        target
            .query_pairs_mut()
            .append_pair("digest", digest.as_str());
        let path = match target.query() {
            Some(query) => format!("{}?{query}", target.path()),
            None => target.path().to_owned(),
        };
        self.send(
            Method::PUT,
            &path,
            "*/*",
            Some(("application/octet-stream", bytes)),
            &upload,
        )
        .await?;
        Ok(descriptor)
    }

    /// Puts a manifest under `target` (a tag, or its digest).
    ///
    /// # Errors
    ///
    /// See [`RegistryError`].
    pub async fn push_manifest(
        &self,
        repository: &str,
        target: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<Digest, RegistryError> {
        let digest = Digest::of(&bytes);
        let what = manifest_name(repository, target);
        self.send(
            Method::PUT,
            &format!("/v2/{repository}/manifests/{target}"),
            "*/*",
            Some((media_type, bytes)),
            &what,
        )
        .await?;
        Ok(digest)
    }

    /// Sends a request, answering an authentication challenge once; a success
    /// (2xx) is returned, anything else is an error.
    async fn send(
        &self,
        method: Method,
        path: &str,
        accept: &str,
        body: Option<(&str, Bytes)>,
        what: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        self.settle().await;
        let base = self.base();
        let url = base.join(path).map_err(|e| RegistryError::Malformed {
            what: what.to_owned(),
            reason: e.to_string(),
        })?;
        let mut challenged = false;
        loop {
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .header(ACCEPT, accept);
            if let Some(authorization) = self.authorization().await {
                request = request.header(AUTHORIZATION, authorization);
            }
            if let Some((content_type, bytes)) = &body {
                request = request
                    .header(CONTENT_TYPE, *content_type)
                    .header(CONTENT_LENGTH, bytes.len())
                    .body(bytes.clone());
            }
            let response = request.send().await.map_err(|e| self.failed(&e, what))?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            if status == StatusCode::UNAUTHORIZED
                && matches!(self.credentials, Some(Credentials::Bearer(_)))
            {
                // A configured token is the credential: no other is fetched.
                return Err(RegistryError::Denied {
                    what: what.to_owned(),
                    reason: "it refused the token of the token file (401)".to_owned(),
                });
            }
            if status == StatusCode::UNAUTHORIZED && !challenged {
                challenged = true;
                let challenge = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                self.answer(&challenge, what).await?;
                continue;
            }
            return Err(self.refusal(response, what).await);
        }
    }

    /// The `Authorization` header to send: a token got from a challenge, else a
    /// configured token.
    async fn authorization(&self) -> Option<String> {
        if let Some(token) = self.token.lock().await.as_ref() {
            return Some(token.clone());
        }
        match &self.credentials {
            Some(Credentials::Bearer(token)) => Some(format!("Bearer {token}")),
            _ => None,
        }
    }

    /// Answers a `WWW-Authenticate` challenge: keeps the header the next request
    /// sends.
    async fn answer(&self, challenge: &str, what: &str) -> Result<(), RegistryError> {
        let denied = |reason: &str| RegistryError::Denied {
            what: what.to_owned(),
            reason: reason.to_owned(),
        };
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        let params = challenge_params(params);
        match scheme.to_ascii_lowercase().as_str() {
            "basic" => match &self.credentials {
                Some(Credentials::Basic { username, password }) => {
                    use base64::Engine as _;
                    let encoded = base64::engine::general_purpose::STANDARD
                        .encode(format!("{username}:{password}"));
                    *self.token.lock().await = Some(format!("Basic {encoded}"));
                    Ok(())
                }
                _ => Err(denied(
                    "it asks for a user and password: give them in a Docker config.json (auths)",
                )),
            },
            "bearer" => {
                let realm = params
                    .iter()
                    .find(|(k, _)| k == "realm")
                    .map(|(_, v)| v.as_str())
                    .ok_or_else(|| denied("its Bearer challenge names no realm"))?;
                let mut realm = Url::parse(realm).map_err(|_| {
                    denied(&format!(
                        "its token realm `{}` is not a URL",
                        printable(realm)
                    ))
                })?;
                // Credentials go to an HTTPS realm (as docker sends them: the
                // token service is often another host), or in plain HTTP only to
                // the registry's own host when the registry itself is spoken to
                // in plain HTTP (a loopback or `insecure` one).
                let base = self.base();
                let same_host = realm.host_str() == base.host_str();
                let plain_allowed =
                    realm.scheme() == "http" && base.scheme() == "http" && same_host;
                if realm.scheme() != "https" && !plain_allowed {
                    return Err(denied(&format!(
                        "its token realm `{}` is neither HTTPS nor on the registry's own host: no credentials are sent there",
                        printable(realm.as_str())
                    )));
                }
                for (key, value) in &params {
                    if key == "service" || key == "scope" {
                        realm.query_pairs_mut().append_pair(key, value);
                    }
                }
                let mut request = self.http.get(realm);
                if let Some(Credentials::Basic { username, password }) = &self.credentials {
                    request = request.basic_auth(username, Some(password));
                }
                let response = request
                    .send()
                    .await
                    .map_err(|e| self.failed(&e, "its token service"))?;
                if !response.status().is_success() {
                    let status = response.status();
                    return Err(denied(&format!(
                        "its token service answered {status}{}",
                        if self.credentials.is_none() {
                            " (no credentials are configured for this registry)"
                        } else {
                            ""
                        }
                    )));
                }
                let bytes =
                    read_capped(&self.registry, response, MAX_SMALL_BYTES, "token answer").await?;
                let answer: serde_json::Value = serde_json::from_slice(&bytes)
                    .map_err(|_| denied("its token service answered something other than JSON"))?;
                let token = answer
                    .get("token")
                    .or_else(|| answer.get("access_token"))
                    .and_then(serde_json::Value::as_str)
                    .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
                    .ok_or_else(|| denied("its token service answered no token"))?;
                *self.token.lock().await = Some(format!("Bearer {token}"));
                Ok(())
            }
            _ => Err(denied(&if challenge.is_empty() {
                "it answered 401 without a challenge".to_owned()
            } else {
                format!(
                    "its challenge `{}` is of no known scheme",
                    printable(challenge)
                )
            })),
        }
    }

    /// The error for a response that is not a success.
    async fn refusal(&self, response: reqwest::Response, what: &str) -> RegistryError {
        let status = response.status();
        let body = read_capped(&self.registry, response, MAX_SMALL_BYTES, what)
            .await
            .map(|bytes| {
                let text =
                    String::from_utf8_lossy(&bytes[..bytes.len().min(QUOTED_BYTES)]).into_owned();
                printable(&text)
            })
            .unwrap_or_default();
        match status {
            StatusCode::NOT_FOUND => RegistryError::NotFound {
                what: what.to_owned(),
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => RegistryError::Denied {
                what: what.to_owned(),
                reason: format!("{status}: {body}"),
            },
            _ => RegistryError::Status {
                what: what.to_owned(),
                status: status.to_string(),
                body,
            },
        }
    }

    /// The error for a request that got no answer.
    fn failed(&self, error: &reqwest::Error, what: &str) -> RegistryError {
        let mut source: Option<&dyn std::error::Error> = Some(error);
        while let Some(inner) = source {
            if let Some(OffOrigin(to)) = inner.downcast_ref::<OffOrigin>() {
                return RegistryError::Redirect {
                    what: what.to_owned(),
                    to: printable(to),
                };
            }
            source = inner.source();
        }
        self.unreachable(error)
    }

    fn unreachable(&self, error: &reqwest::Error) -> RegistryError {
        // The chain of causes says what happened (refused, reset, timed out);
        // the URL is left out (it is the registry's, named already).
        let mut reason = without_url(error);
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            reason.push_str(": ");
            reason.push_str(&inner.to_string());
            source = inner.source();
        }
        RegistryError::Unreachable {
            registry: self.registry.clone(),
            reason: printable_within(&reason, MAX_REASON_CHARS),
        }
    }
}

/// What a reqwest error says, without the URL (the registry's, named already).
fn without_url(error: &reqwest::Error) -> String {
    let text = error.to_string();
    match error.url() {
        Some(url) => text
            .replace(&format!(" ({url})"), "")
            .replace(url.as_str(), "the registry"),
        None => text,
    }
}

/// The TLS settings: the system's roots (organizations' registries run under
/// their own CAs), the ring provider the build already has.
fn tls_config() -> Result<rustls::ClientConfig, RegistryError> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        tracing::debug!("no system root certificates: HTTPS registries will not verify");
    }
    #[allow(deprecated)]
    let provider = rustls::crypto::ring::default_provider();
    Ok(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| RegistryError::Setup(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// `key="value", key=value` pairs of a challenge.
fn challenge_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            },
            None => match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        params.push((key, value.to_owned()));
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    params
}

/// Whether `error` shows that the other side does not speak TLS: rustls read
/// something that is no TLS record (a plain-HTTP server's answer), or the
/// connection ended in the handshake. Nothing else (a timeout, a reset, an
/// alert, a certificate, a proxy) is a reason to speak plain HTTP.
fn not_tls(error: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(inner) = source {
        if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
            return matches!(tls, rustls::Error::InvalidMessage(_));
        }
        // An I/O error may wrap another (hyper's around rustls'), whose
        // `source` does not lead in.
        let mut io = inner.downcast_ref::<std::io::Error>();
        while let Some(error) = io {
            let wrapped = error.get_ref();
            if let Some(tls) = wrapped.and_then(|e| e.downcast_ref::<rustls::Error>()) {
                return matches!(tls, rustls::Error::InvalidMessage(_));
            }
            // The connection ended in the handshake ("tls handshake eof"): a
            // plain server that closed on bytes it could not read.
            if error.kind() == std::io::ErrorKind::UnexpectedEof {
                return true;
            }
            io = wrapped.and_then(|e| e.downcast_ref::<std::io::Error>());
        }
        source = inner.source();
    }
    false
}

/// Whether `path` asks for a blob by digest (`/v2/<name>/blobs/sha256:<hex>`):
/// what only may be redirected to another origin (its bytes are checked).
fn is_blob_path(path: &str) -> bool {
    path.rsplit_once("/blobs/")
        .is_some_and(|(_, digest)| Digest::parse(digest).is_ok())
}

/// `manifest namespace/name:tag`, or `...@sha256:<hex>` for a digest.
fn manifest_name(repository: &str, target: &str) -> String {
    let separator = if target.starts_with("sha256:") {
        '@'
    } else {
        ':'
    };
    format!("manifest {repository}{separator}{target}")
}

fn content_length(response: &reqwest::Response) -> Option<u64> {
    response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// The body of `response`, refused when its `Content-Length` says it is over
/// `limit` or once more than `limit` bytes arrived.
async fn read_capped(
    registry: &str,
    response: reqwest::Response,
    limit: u64,
    what: &str,
) -> Result<Bytes, RegistryError> {
    let too_large = || RegistryError::TooLarge {
        what: what.to_owned(),
        limit,
    };
    if content_length(&response).is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| RegistryError::Unreachable {
            registry: registry.to_owned(),
            reason: printable_within(&without_url(&e), MAX_REASON_CHARS),
        })?;
        if body.len() as u64 + chunk.len() as u64 > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

fn check_blob(
    what: &str,
    expected: &Digest,
    size: u64,
    read: u64,
    actual: &Digest,
) -> Result<(), RegistryError> {
    if read != size {
        return Err(RegistryError::Mismatch {
            what: what.to_owned(),
            expected: format!("{size} bytes"),
            actual: format!("{read} bytes"),
        });
    }
    if actual != expected {
        return Err(RegistryError::Mismatch {
            what: what.to_owned(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_read_as_registries_write_them() {
        assert_eq!(
            challenge_params(
                r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#
            ),
            vec![
                ("realm".to_owned(), "https://auth.example/token".to_owned()),
                ("service".to_owned(), "registry.example".to_owned()),
                ("scope".to_owned(), "repository:a/b:pull".to_owned()),
            ]
        );
        assert_eq!(
            challenge_params(r#"realm=x, service="s""#),
            vec![
                ("realm".to_owned(), "x".to_owned()),
                ("service".to_owned(), "s".to_owned())
            ]
        );
        assert_eq!(challenge_params(""), vec![]);
    }
}
