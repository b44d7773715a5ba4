//! Streamable HTTP: MCP at [`MCP_PATH`] in stateless mode, with the probes and
//! metrics an orchestrator needs.
//!
//! The listener is bound before plugins load, so a liveness probe passes while the
//! interpreter compiles; `/readyz` and `/mcp` answer 503 until the catalog is in
//! place. Every `/mcp` request is authenticated first: with a tokens file the bearer
//! token names the subject (no token or an unknown one is a 401 with
//! `WWW-Authenticate`); without one every request acts for the configured subject
//! (loopback, or `--insecure`). The subject travels in the request's extensions,
//! which only the host writes, to [`SubjectSource::Authenticated`]. No session state
//! is kept, so replicas can sit behind any load balancer; unless `--http-sessions`
//! gives clients before 2026-07-28 sessions ([`super::sessions`]), so that they can
//! be asked for approval. Those are recorded in the store, so replicas sharing a
//! Redis store still sit behind any load balancer (a session's requests and its
//! answers may each reach another replica).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::replica::ReplicaSessionManager;

pub use super::listener::ConnectionLimits;
use super::server::{McpServer, SubjectSource};
use super::sessions::{
    Access, MAX_FORWARDED_BYTES, MISDIRECTED, Route, SESSION_HEADER, SESSIONS_UNAVAILABLE,
    STREAM_OPEN, Sessions, StreamRefused, TOO_MANY_SESSIONS, TOO_MANY_STREAMS,
};
use crate::authz::{PROTECTED_RESOURCE_PATH, Rejection, Verifier};
use crate::authz::{Subject, Tokens};
use crate::error::UNAUTHENTICATED;
use crate::service::Service;
use crate::tasks::TaskStore;
use futures::StreamExt as _;

/// Where MCP is served.
pub const MCP_PATH: &str = "/mcp";
/// Liveness: 200 while the process serves HTTP.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Readiness: 200 once the catalog is loaded, 503 before.
pub const READYZ_PATH: &str = "/readyz";
/// Prometheus metrics.
pub const METRICS_PATH: &str = "/metrics";

/// How often a session's open SSE stream carries a ping (`--http-sessions`).
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The realm named in `WWW-Authenticate`.
const REALM: &str = "codemode-host";

/// Hosts accepted in the `Host` header when none are configured: loopback only,
/// which is what protects a local server from DNS rebinding.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// How the HTTP listener behaves.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Who `/mcp` requests act for: bearer tokens, or one fixed subject.
    pub authentication: Authentication,
    /// Accepted `Host` header values (name or `name:port`), beyond which requests
    /// are refused (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// How long in-flight requests may run after a shutdown signal.
    pub drain: Duration,
    /// How many connections at once, and how long a client may take to send a
    /// request.
    pub connections: ConnectionLimits,
    /// Where the probes and metrics are also served without the `Host` check
    /// (`--metrics-listen`).
    pub metrics_listen: Option<SocketAddr>,
    /// Sessions for clients before 2026-07-28 (`--http-sessions`), ending after
    /// this idle time; `None`: stateless.
    pub sessions: Option<Duration>,
    /// Where the sessions are recorded (`--store`), so that any replica
    /// sharing it, or this one after a restart, serves them; `None`: in this
    /// process only.
    pub session_store: Option<Arc<crate::store::Store>>,
    /// Cancelled when the server begins to stop ([`serve`] does): open session
    /// streams end then, so they do not hold the drain.
    pub stop: tokio_util::sync::CancellationToken,
    /// Whether `/metrics` is served on the MCP listener (to any subject's
    /// token): not when subjects see different catalogs (`--visibility-decision`),
    /// as the metrics name every capability; then only at `--metrics-listen`,
    /// the operator's address.
    pub metrics_for_subjects: bool,
}

/// What `/metrics` on the MCP listener answers when it is not served there.
pub const METRICS_ELSEWHERE: &str = "Not Found: with --visibility-decision the metrics, which name every capability, are served only at --metrics-listen\n";

/// How an HTTP request's subject is found.
#[derive(Debug, Clone)]
pub enum Authentication {
    /// `Authorization: Bearer <token>`: looked up in a tokens file (replaced
    /// whole when the file is reloaded; a request is resolved against the set
    /// in place when it arrives), else verified as an access token of the OAuth
    /// issuer. At least one of the two is set.
    Bearer {
        /// The tokens file's subjects (`--tokens`).
        tokens: Option<Arc<arc_swap::ArcSwap<Tokens>>>,
        /// The OAuth resource server (`--oauth-issuer`).
        oauth: Option<Arc<Verifier>>,
    },
    /// Every request acts for this subject (loopback or `--insecure`, no tokens).
    Fixed(Subject),
}

/// Why a bearer token did not name a subject.
enum Refused {
    /// No token, or one nobody knows (401).
    Unauthenticated(Option<&'static str>),
    /// An access token without a required scope (403).
    InsufficientScope,
    /// The issuer's keys could not be fetched (503: the token is not the
    /// problem, and a client told `invalid_token` would log in again).
    KeysUnavailable,
}

impl Authentication {
    /// The subject `token` names.
    async fn resolve(&self, token: Option<&str>) -> Result<Subject, Refused> {
        let (tokens, oauth) = match self {
            Authentication::Fixed(subject) => return Ok(subject.clone()),
            Authentication::Bearer { tokens, oauth } => (tokens, oauth),
        };
        let Some(token) = token else {
            return Err(Refused::Unauthenticated(None));
        };
        if let Some(subject) = tokens.as_ref().and_then(|t| t.load().resolve(token)) {
            return Ok(subject);
        }
        let Some(verifier) = oauth else {
            return Err(Refused::Unauthenticated(Some("invalid_token")));
        };
        match verifier.verify(token).await {
            Ok(subject) => Ok(subject),
            Err(Rejection::InsufficientScope) => Err(Refused::InsufficientScope),
            Err(Rejection::Invalid(reason)) => {
                // Why, never the token: a flood of bad tokens stays at debug.
                tracing::debug!(%reason, "bearer token refused");
                Err(Refused::Unauthenticated(Some("invalid_token")))
            }
            // The fetch that failed logged why.
            Err(Rejection::KeysUnavailable(_)) => Err(Refused::KeysUnavailable),
        }
    }

    /// The OAuth resource server, if any.
    fn oauth(&self) -> Option<&Verifier> {
        match self {
            Authentication::Bearer { oauth, .. } => oauth.as_deref(),
            Authentication::Fixed(_) => None,
        }
    }

    /// The answer to a request `refused`.
    fn refusal(&self, refused: Refused) -> Response {
        match refused {
            Refused::Unauthenticated(error) => unauthorized(self.oauth(), error),
            Refused::KeysUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "5")],
                KEYS_UNAVAILABLE_TEXT,
            )
                .into_response(),
            Refused::InsufficientScope => {
                let mut response = Response::new(Body::from(INSUFFICIENT_SCOPE_TEXT));
                *response.status_mut() = StatusCode::FORBIDDEN;
                if let Some(verifier) = self.oauth()
                    && let Ok(value) =
                        HeaderValue::from_str(&verifier.challenge(Some("insufficient_scope")))
                {
                    response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, value);
                }
                response
            }
        }
    }
}

/// The body of a 503 while the OAuth issuer's keys cannot be fetched.
const KEYS_UNAVAILABLE_TEXT: &str = "Service Unavailable: the authorization server's keys could not be fetched; try again shortly\n";

/// The body of a 403 for a token without a required scope.
const INSUFFICIENT_SCOPE_TEXT: &str =
    "forbidden: the access token lacks a required scope (see WWW-Authenticate)\n";

/// The server once its catalog is loaded.
#[derive(Clone, Default)]
pub struct Readiness {
    ready: Arc<OnceLock<(Arc<Service>, McpServer)>>,
}

impl Readiness {
    /// Starts serving `service` on `/mcp`, its tasks kept in `tasks`, approvals
    /// as `approvals` says (`--approval-timeout`, the key); `/readyz` turns 200.
    pub fn set(
        &self,
        service: Arc<Service>,
        tasks: Arc<TaskStore>,
        approvals: (std::time::Duration, Option<Arc<super::ApprovalKey>>),
    ) {
        let server = McpServer::new(service.clone(), SubjectSource::Authenticated, tasks)
            .with_approvals(approvals.0, approvals.1);
        let _ = self.ready.set((service, server));
    }

    fn server(&self) -> Option<McpServer> {
        self.ready.get().map(|(_, server)| server.clone())
    }

    fn service(&self) -> Option<&Arc<Service>> {
        self.ready.get().map(|(service, _)| service)
    }
}

/// The router of `--listen`: `/mcp`, `/healthz`, `/readyz`, `/metrics`, every path
/// behind the `Host` check (a page in a browser that rebinds its name to 127.0.0.1
/// must not read the metrics either).
pub fn router(config: &HttpConfig, readiness: Readiness) -> Router {
    let factory_readiness = readiness.clone();
    let sessions = config
        .sessions
        .map(|idle| Arc::new(Sessions::new(idle, config.session_store.clone())));
    let keeps_sessions = sessions.is_some();
    let manager = match &sessions {
        Some(sessions) => {
            sessions.hear_answers();
            sessions.manager()
        }
        // Stateless: no session is ever made, so no request ID is sent.
        None => Arc::new(ReplicaSessionManager::new(
            LocalSessionManager::default(),
            Arc::from(""),
        )),
    };
    let mut settings = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(keeps_sessions)
        .with_json_response(true)
        // A session's GET stream stays open: pings keep proxies from
        // closing it (rmcp sends them on any SSE answer, a stateless one
        // that streams progress too).
        .with_sse_keep_alive(keeps_sessions.then_some(SSE_KEEP_ALIVE))
        .with_allowed_hosts(config.allowed_hosts.clone());
    settings.session_store = sessions.as_ref().and_then(|s| s.session_store());
    let body_limit = settings.max_request_body_bytes;
    let mcp = StreamableHttpService::new(
        move || {
            factory_readiness
                .server()
                .map(|server| server.with_sessions(keeps_sessions))
                .ok_or_else(|| std::io::Error::other("the catalog is not loaded yet"))
        },
        manager,
        settings,
    );
    let gate = Gate {
        authentication: config.authentication.clone(),
        readiness: readiness.clone(),
        sessions,
        stop: config.stop.clone(),
        body_limit,
    };
    let mcp = Router::new()
        .route_service(MCP_PATH, mcp)
        .layer(middleware::from_fn(session_ended))
        .layer(middleware::from_fn_with_state(gate, authenticate));
    // With tokens, what the catalog holds and how it is used (the plugins left
    // out and why, the metrics) is for subjects only; `/healthz` tells nothing and
    // stays open, as does all of `--metrics-listen` (the orchestrator's address).
    let inspect = Router::new().route(READYZ_PATH, get(ready));
    let inspect = if config.metrics_for_subjects {
        inspect.route(METRICS_PATH, get(metrics))
    } else {
        inspect.route(
            METRICS_PATH,
            get(|| async { (StatusCode::NOT_FOUND, METRICS_ELSEWHERE) }),
        )
    };
    let inspect = inspect.with_state(readiness);
    let inspect = match &config.authentication {
        Authentication::Bearer { .. } => inspect.layer(middleware::from_fn_with_state(
            config.authentication.clone(),
            require_token,
        )),
        Authentication::Fixed(_) => inspect,
    };
    let mut router = Router::new()
        .route(HEALTHZ_PATH, get(|| async { "ok\n" }))
        .merge(inspect)
        .merge(mcp);
    if let Some(verifier) = config.authentication.oauth() {
        // RFC 9728: at the well-known path, and with the resource's path after it.
        let metadata: Arc<str> = Arc::from(verifier.resource_metadata().to_string());
        let answer = move || {
            let metadata = metadata.clone();
            async move {
                (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::CACHE_CONTROL, "max-age=3600"),
                    ],
                    metadata.to_string(),
                )
            }
        };
        let suffixed = url::Url::parse(verifier.resource())
            .map(|url| url.path().trim_end_matches('/').to_owned())
            .unwrap_or_default();
        router = router.route(PROTECTED_RESOURCE_PATH, get(answer.clone()));
        if !suffixed.is_empty() {
            router = router.route(&format!("{PROTECTED_RESOURCE_PATH}{suffixed}"), get(answer));
        }
    }
    router.layer(middleware::from_fn_with_state(
        Arc::new(config.allowed_hosts.clone()),
        check_host,
    ))
}

/// `/healthz`, `/readyz` and `/metrics` without the `Host` check: the router of
/// `--metrics-listen`, an address for the orchestrator, whose probes name the
/// pod's address as the host.
pub fn probes_router(readiness: Readiness) -> Router {
    Router::new()
        .route(HEALTHZ_PATH, get(|| async { "ok\n" }))
        .route(READYZ_PATH, get(ready))
        .route(METRICS_PATH, get(metrics))
        .with_state(readiness)
}

/// Refuses (403) a request whose `Host` header is not one of `allowed`.
async fn check_host(
    State(allowed): State<Arc<Vec<String>>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    if host.is_some_and(|host| host_allowed(host, &allowed)) {
        return next.run(request).await;
    }
    (
        StatusCode::FORBIDDEN,
        "forbidden: Host header not allowed\n",
    )
        .into_response()
}

/// Whether the `Host` header `host` names one of `allowed`: an entry equal to the
/// whole header (`name:port`), or to its host part (`name`, `::1` for `[::1]:80`).
/// Names compare case-insensitively.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or(rest, |(name, _)| name),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        },
    };
    allowed
        .iter()
        .any(|entry| entry.eq_ignore_ascii_case(host) || entry.eq_ignore_ascii_case(name))
}

#[derive(Clone)]
struct Gate {
    authentication: Authentication,
    readiness: Readiness,
    /// Who owns each session (`--http-sessions`).
    sessions: Option<Arc<Sessions>>,
    /// Cancelled when the server begins to stop.
    stop: tokio_util::sync::CancellationToken,
    /// The largest request body rmcp reads (a POST read here first is
    /// bounded alike).
    body_limit: usize,
}

/// `/readyz`: 503 `loading` until the catalog is in place; then 200 `ready`,
/// followed by the plugin files left out and why and the upstreams down, or 503
/// when every plugin is required and one is left out, or while a `[[plugin]]`
/// entry has never been pulled and has no file in the folder (named).
async fn ready(State(readiness): State<Readiness>) -> Response {
    let Some(service) = readiness.service() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "loading\n").into_response();
    };
    let skipped = service.skipped();
    let pending = service.pulls_pending();
    let (status, mut body) = if !service.ready() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: every plugin must load (--require-all-plugins)\n".to_owned(),
        )
    } else if !pending.is_empty() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: plugins of the config file not pulled yet\n".to_owned(),
        )
    } else {
        (StatusCode::OK, "ready\n".to_owned())
    };
    if !pending.is_empty() {
        // Each has no file in the folder yet; why the pulls fail is in the log.
        body.push_str("plugins not pulled yet:\n");
        for reference in &pending {
            body.push_str(&format!("  {reference}\n"));
        }
    }
    if !skipped.is_empty() {
        body.push_str("plugins left out:\n");
        for s in &skipped {
            let earlier = if s.earlier_serves {
                " (an earlier version serves)"
            } else {
                ""
            };
            let reason = without_host_paths(&s.reason.replace('\n', " "));
            body.push_str(&format!("  {}: {reason}{earlier}\n", s.plugin));
        }
    }
    let down = service.upstreams_down();
    if !down.is_empty() {
        // Their capabilities (if they ever listed any) fail as unavailable.
        body.push_str("upstreams down:\n");
        for name in &down {
            body.push_str(&format!("  {name}\n"));
        }
    }
    (status, body).into_response()
}

async fn metrics(State(readiness): State<Readiness>) -> Response {
    let text = readiness
        .service()
        .map(|service| service.metrics().render())
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

/// A session ended by its client's `DELETE` is answered 204 No Content: rmcp
/// answers 202 Accepted, which the official Python SDK reports as a failed
/// termination (it expects 200 or 204); the session is gone either way. (A
/// notification's `POST` keeps its 202, as the transport requires.)
async fn session_ended(request: Request, next: Next) -> Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let response = next.run(request).await;
    if !delete || response.status() != StatusCode::ACCEPTED {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    parts.status = StatusCode::NO_CONTENT;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    Response::from_parts(parts, axum::body::Body::empty())
}

/// Answers 401 (or 403) unless the request carries a bearer token of a subject.
async fn require_token(
    State(authentication): State<Authentication>,
    request: Request,
    next: Next,
) -> Response {
    let token = presented_token(&request).map(str::to_owned);
    match authentication.resolve(token.as_deref()).await {
        Ok(_) => next.run(request).await,
        Err(refused) => authentication.refusal(refused),
    }
}

/// `text` with every absolute path replaced by its last component: the host's
/// folders are not for whoever reads `/readyz`.
fn without_host_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('/') {
        // The character before the `/`, in what was already passed over too
        // (the second `/` of `https://` follows the first, not a space).
        let starts_path = rest[..at]
            .chars()
            .next_back()
            .or_else(|| out.chars().next_back())
            .is_none_or(|c| c.is_whitespace() || matches!(c, '`' | '\'' | '"' | '(' | '='));
        if !starts_path {
            out.push_str(&rest[..=at]);
            rest = &rest[at + 1..];
            continue;
        }
        out.push_str(&rest[..at]);
        let path_end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '`' | '\'' | '"' | ')' | ','))
            .map_or(rest.len(), |end| at + end);
        let path = rest[at..path_end].trim_end_matches(['.', ':']);
        let name = path.rsplit('/').find(|part| !part.is_empty()).unwrap_or("");
        out.push_str(name);
        rest = &rest[at + path.len()..];
    }
    out.push_str(rest);
    out
}

/// Puts the request's [`Subject`] in its extensions, or answers 401 / 503.
async fn authenticate(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    let Some(service) = gate.readiness.service() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "loading\n").into_response();
    };
    // Whatever a client sent is not trusted; only what is inserted here is.
    request.extensions_mut().remove::<Subject>();
    let token = presented_token(&request).map(str::to_owned);
    let subject = match gate.authentication.resolve(token.as_deref()).await {
        Ok(subject) => subject,
        Err(refused) => {
            service.metrics().http_unauthenticated();
            return gate.authentication.refusal(refused);
        }
    };
    let Some(sessions) = &gate.sessions else {
        request.extensions_mut().insert(subject);
        return next.run(request).await;
    };
    let named = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let (request, route) = match &named {
        Some(_) if request.method() == axum::http::Method::POST => {
            match read_body(request, gate.body_limit).await {
                Ok((request, bytes)) => {
                    let route = sessions.route(&bytes);
                    (request, Some((route, bytes)))
                }
                Err(refused) => return refused,
            }
        }
        Some(_) | None => (request, None),
    };
    let mut request = request;
    let mut restore = None;
    if let Some(id) = &named {
        // A session served here is held (and restored, when it was opened
        // elsewhere): not for an answer going elsewhere, nor for its end.
        let serve_here = !matches!(route, Some((Route::Forward(_) | Route::Misdirected, _)))
            && request.method() != axum::http::Method::DELETE;
        match sessions.access(id, &subject, serve_here).await {
            Access::Allowed => {}
            // As rmcp answers for an ID it does not know.
            Access::NotFound => {
                return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
            }
            Access::Full => {
                return (StatusCode::SERVICE_UNAVAILABLE, TOO_MANY_SESSIONS).into_response();
            }
            Access::Unavailable => {
                return (StatusCode::SERVICE_UNAVAILABLE, SESSIONS_UNAVAILABLE).into_response();
            }
        }
        match route {
            Some((Route::Forward(replica), bytes)) => {
                return forward_answer(sessions, id, &replica, &bytes).await;
            }
            Some((Route::Misdirected, _)) => {
                return (StatusCode::MISDIRECTED_REQUEST, MISDIRECTED).into_response();
            }
            Some((Route::Here, _)) | None => {}
        }
        if serve_here {
            // Two first requests for a session opened elsewhere: one
            // restores it, the other waits and finds it held.
            restore = sessions.one_restore_at_a_time(id).await;
        }
    }
    if let Some(id) = &named
        && request.method() == axum::http::Method::GET
    {
        // The session's stream: one per session, bounded in all, ended when
        // the server begins to stop (it would hold the drain to its end). A
        // stream resumed after a cut (`Last-Event-ID`) is one of its own.
        let resumed = request
            .headers()
            .get("last-event-id")
            .and_then(|value| value.to_str().ok())
            .map(|event| format!("{id}\u{0}{event}"));
        let guard = match sessions.open_stream(resumed.as_deref().unwrap_or(id)) {
            Ok(guard) => guard,
            Err(StreamRefused::Open) => return (StatusCode::CONFLICT, STREAM_OPEN).into_response(),
            Err(StreamRefused::Full) => {
                return (StatusCode::SERVICE_UNAVAILABLE, TOO_MANY_STREAMS).into_response();
            }
        };
        request.extensions_mut().insert(subject);
        let (parts, body) = next.run(request).await.into_parts();
        drop(restore);
        let stream = body
            .into_data_stream()
            .take_until(gate.stop.clone().cancelled_owned())
            .map(move |chunk| {
                let _open = &guard;
                chunk
            });
        return Response::from_parts(parts, Body::from_stream(stream));
    }
    if named.is_none() && opens_session(&request) && !sessions.has_room(&subject).await {
        return (StatusCode::SERVICE_UNAVAILABLE, TOO_MANY_SESSIONS).into_response();
    }
    request.extensions_mut().insert(subject.clone());
    let response = next.run(request).await;
    drop(restore);
    if named.is_some() {
        return response;
    }
    let opened = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok());
    match opened {
        Some(id) if !sessions.adopt(id, &subject).await => {
            (StatusCode::SERVICE_UNAVAILABLE, TOO_MANY_SESSIONS).into_response()
        }
        Some(_) | None => response,
    }
}

/// `request` with its body read (at most `limit` bytes) and put back, and
/// the body; or the refusal of a body too large (413) or cut short (400).
async fn read_body(request: Request, limit: usize) -> Result<(Request, Bytes), Response> {
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok((Request::from_parts(parts, Body::from(bytes.clone())), bytes)),
        Err(error) => {
            let too_large = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Payload Too Large: the request body is over the limit\n",
                )
                    .into_response()
            } else {
                (
                    StatusCode::BAD_REQUEST,
                    "Bad Request: the request body could not be read\n",
                )
                    .into_response()
            })
        }
    }
}

/// Hands `body`, an answer in session `id` to a question `replica` asked,
/// to that replica: 202, as rmcp answers an answer; 413 past
/// [`MAX_FORWARDED_BYTES`]; 503 when the store does not answer.
async fn forward_answer(sessions: &Sessions, id: &str, replica: &str, body: &[u8]) -> Response {
    if body.len() > MAX_FORWARDED_BYTES {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large: an answer forwarded to another replica is at most 256 KiB\n",
        )
            .into_response();
    }
    match sessions.forward(id, replica, body).await {
        Ok(true) => StatusCode::ACCEPTED.into_response(),
        Ok(false) => {
            // The replica that asked is gone, and its execution with it.
            tracing::info!(replica = %replica, "an answer for a replica that no longer runs; dropped");
            StatusCode::ACCEPTED.into_response()
        }
        Err(error) => {
            tracing::warn!(reason = %error, "cannot forward an answer to the replica that asked");
            (StatusCode::SERVICE_UNAVAILABLE, SESSIONS_UNAVAILABLE).into_response()
        }
    }
}

/// Whether `request` may open a session: a POST naming none, of a protocol
/// before 2026-07-28 (those are served statelessly).
fn opens_session(request: &Request) -> bool {
    let version = request
        .headers()
        .get("mcp-protocol-version")
        .and_then(|value| value.to_str().ok());
    request.method() == axum::http::Method::POST
        && version.is_none_or(|version| version < "2026-07-28")
}

/// The bearer token `request` presents, if any.
fn presented_token(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer)
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unauthorized(oauth: Option<&Verifier>, error: Option<&str>) -> Response {
    let challenge = match (oauth, error) {
        // RFC 9728 §5.1: where the client learns which server issues tokens.
        (Some(verifier), error) => verifier.challenge(error),
        (None, Some(error)) => format!("Bearer realm=\"{REALM}\", error=\"{error}\""),
        (None, None) => format!("Bearer realm=\"{REALM}\""),
    };
    let mut response = Response::new(Body::from(format!("{UNAUTHENTICATED}\n")));
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// Binds `address`.
///
/// # Errors
///
/// When the address cannot be bound.
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await
}

/// Serves `router` on `listener` within `config.connections` until `shutdown`
/// resolves; then stops accepting and lets in-flight requests finish for at most
/// `config.drain`.
///
/// # Errors
///
/// When the listener fails.
pub fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    config: &HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
    let stop = config.stop.clone();
    super::listener::serve(
        listener,
        router,
        config.connections.clone(),
        config.drain,
        async move {
            shutdown.await;
            stop.cancel();
        },
    )
}

/// Resolves at SIGTERM or SIGINT. The handlers are installed when this is called
/// (not when the future is first polled), so that a signal arriving right after the
/// listener is up is not missed (it would otherwise end the process abruptly).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let interrupt = signal(SignalKind::interrupt());
        async move {
            match (term, interrupt) {
                (Ok(mut term), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                (Err(error), _) | (_, Err(error)) => {
                    tracing::warn!(reason = %error, "cannot watch SIGTERM and SIGINT; only SIGINT may stop the server");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_reasons_name_files_not_host_folders() {
        for (reason, shown) in [
            (
                "dirs: host directory `/srv/plugins/data/cache` does not exist or is not a directory",
                "dirs: host directory `cache` does not exist or is not a directory",
            ),
            (
                "sidecar /etc/codemode/plugins/fetch.toml: line 2: unknown key",
                "sidecar fetch.toml: line 2: unknown key",
            ),
            (
                "capability name `a.b` (a/b and 1/2 stay)",
                "capability name `a.b` (a/b and 1/2 stay)",
            ),
            ("root is / here", "root is  here"),
            (
                "spec https://127.0.0.1:8443/openapi.json: GET failed (https://a/b)",
                "spec https://127.0.0.1:8443/openapi.json: GET failed (https://a/b)",
            ),
        ] {
            assert_eq!(without_host_paths(reason), shown, "{reason}");
        }
    }

    #[test]
    fn host_headers_match_names_with_or_without_their_port() {
        let allowed: Vec<String> = ["localhost", "127.0.0.1", "::1", "mcp.example.com:8443"]
            .map(String::from)
            .to_vec();
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1:1234",
            "[::1]:80",
            "[::1]",
            "mcp.example.com:8443",
        ] {
            assert!(host_allowed(host, &allowed), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:80",
            "mcp.example.com",
            "mcp.example.com:80",
            "localhost.evil.example",
            "127.0.0.1.nip.io:80",
            "[::2]:80",
            "",
        ] {
            assert!(!host_allowed(host, &allowed), "{host}");
        }
    }

    #[test]
    fn bearer_tokens_are_read_from_the_header() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn a_401_names_the_scheme_and_the_error() {
        let response = unauthorized(None, Some("invalid_token"));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers().get(header::WWW_AUTHENTICATE),
            Some(&HeaderValue::from_static(
                "Bearer realm=\"codemode-host\", error=\"invalid_token\""
            ))
        );
        let response = unauthorized(None, None);
        assert_eq!(
            response.headers().get(header::WWW_AUTHENTICATE),
            Some(&HeaderValue::from_static("Bearer realm=\"codemode-host\""))
        );
    }
}
