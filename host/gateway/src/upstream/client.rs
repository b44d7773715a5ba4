//! [`Upstream`]: the connection to one upstream MCP server, as an rmcp client
//! over its child's stdio or over HTTP: started, its tools listed and converted
//! into capabilities, called.

use std::collections::BTreeMap;
use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use codemode_value::Value;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, RequestMetaObject, Tool,
};
use rmcp::service::{NotificationContext, RunningServiceCancellationToken};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, oneshot};

use super::bounds::{
    MAX_MESSAGE_DEPTH, MAX_MESSAGE_TEXT, MAX_MESSAGE_VALUES, OVERSIZED_CODE, TOO_DEEP_CODE,
    made_up_marker,
};
use super::config::{UpstreamAuth, UpstreamConfig, UpstreamTransport};
use super::credentials::{CREDENTIAL_META, Credentials, REFUSED_CODE};
use super::lines::ChildLines;
use super::supervise::{Connected, Supervised};
use super::{content, http, names};
use crate::catalog::{Annotations, Capability, CapabilitySpec, Field, validate_spec};
use crate::error::{
    no_credentials_detail, refused_credentials_detail, timed_out_detail, unavailable_detail,
};
use crate::json::schema::{self, SchemaError, Stop};
use crate::json::values as json;
use crate::secret::Secret;
use crate::source::{Arguments, CallBudget, CallFailure, CallOutcome, Caller, sanitize_message};

/// Most types all of an upstream's tools may describe together (each at most
/// `schema::MAX_SCHEMA_NODES`); the tools past it are skipped with a WARN.
const MAX_UPSTREAM_NODES: usize = 1_000_000;

/// Most pages of `tools/list` followed: an upstream that always returns another
/// cursor would otherwise grow the list until the connect timeout.
const MAX_LIST_PAGES: usize = 100;

/// Every page of the upstream's tools, at most [`MAX_LIST_PAGES`].
///
/// # Errors
///
/// Why a page could not be had, or that there are too many.
async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, String> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = cursor
            .take()
            .map(|cursor| rmcp::model::PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let page = peer
            .list_tools(params)
            .await
            .map_err(|error| format!("tools/list: {error}"))?;
        tools.extend(page.tools);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
    Err(format!(
        "tools/list: more than {MAX_LIST_PAGES} pages of tools"
    ))
}

/// The host's environment variables an upstream child gets besides its `env`.
const INHERITED_ENV: [&str; 2] = ["PATH", "HOME"];

/// Longest line of a child's stderr logged; the rest of the line is counted.
const MAX_STDERR_LINE: usize = 4096;

/// A connected upstream: its MCP session and the capabilities its tools became.
/// When its tools change, a new `Upstream` shares the session of the old one.
pub struct Upstream {
    name: String,
    label: String,
    timeout: Option<Duration>,
    /// Requests go here.
    peer: Peer<RoleClient>,
    /// Keeps the session open while any version of this upstream serves.
    link: Arc<Link>,
    /// How its calls act for their callers (`auth = "forward"`,
    /// `"token-exchange"`); `None`: they carry the session's credential.
    acting: Option<Arc<Acting>>,
    tools: Vec<UpstreamTool>,
    /// The capability of each tool, in the same order: what the registry reads.
    capabilities: Vec<Arc<Capability>>,
}

/// How an upstream's calls act for their callers.
struct Acting {
    /// Where a call lends the token it sends.
    credentials: Arc<Credentials>,
    /// With token exchange: the audience the caller's token is exchanged for;
    /// `None`: the caller's token is sent as it is.
    audience: Option<String>,
}

/// An upstream's MCP session, open until the last [`Upstream`] sharing it is
/// dropped or [`Link::close`] is called; closing it closes the child's stdin, then
/// the child gets SIGTERM and, if it lingers, SIGKILL (rmcp's graceful shutdown).
/// Dropping it kills what is left of the child's process group.
struct Link {
    stop: std::sync::Mutex<Option<RunningServiceCancellationToken>>,
    /// The child's process group (none over HTTP).
    group: Option<Group>,
    /// Set when the session ended: the names of this upstream keep serving while
    /// it restarts, and a call of one fails at once as unavailable.
    ended: std::sync::atomic::AtomicBool,
}

/// A child's process group, killed (SIGKILL) when this is dropped: when its
/// upstream's last version goes, or when connecting it is abandoned (a timeout, a
/// stop), which would otherwise kill the child alone and leave its children.
/// Disarmed (0) once the group was ended: its number may be reused later.
struct Group(std::sync::atomic::AtomicU32);

impl Group {
    fn new(pid: u32) -> Self {
        Self(std::sync::atomic::AtomicU32::new(pid))
    }

    /// SIGKILL to what is left of the group, once.
    fn end(&self) {
        let group = self.0.swap(0, std::sync::atomic::Ordering::AcqRel);
        if group != 0 {
            crate::children::kill_group(group);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.end();
    }
}

impl Link {
    /// Closes the session now.
    fn close(&self) {
        let token = self
            .stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(token) = token {
            token.cancel();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
    }
}

/// What the upstream tells the client: that its tool list changed.
#[derive(Clone)]
struct Events {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Events {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.tools_changed.notify_one();
        std::future::ready(())
    }
}

/// One tool served as a capability.
struct UpstreamTool {
    /// Its name upstream, as `tools/call` needs it.
    tool: String,
    /// The capability it is.
    capability: Arc<Capability>,
    /// The fields of its structured result; `None`: the result is its content
    /// ([`json::content_fields`]).
    structured: Option<Vec<Field>>,
}

impl Upstream {
    /// Starts the upstream's child, initializes the MCP session and lists its tools
    /// (every page). Tools that cannot be capabilities (a name that is not valid
    /// after the mapping, a parameter that cannot be a keyword argument, a name given
    /// twice) are logged and left out; so are tools outside `config.tools`.
    ///
    /// # Errors
    ///
    /// Why the upstream cannot serve (for the log; never shown to an agent).
    pub async fn connect(config: &UpstreamConfig) -> Result<Connected<Upstream>, String> {
        let tools_changed = Arc::new(Notify::new());
        let events = Events {
            tools_changed: tools_changed.clone(),
        };
        // Lent to by each call acting for its caller.
        let credentials = Arc::new(Credentials::default());
        let acting = match &config.transport {
            UpstreamTransport::Http {
                auth: UpstreamAuth::Forward(_),
                ..
            } => Some(Acting {
                credentials: credentials.clone(),
                audience: None,
            }),
            UpstreamTransport::Http {
                auth: UpstreamAuth::TokenExchange { audience, .. },
                ..
            } => Some(Acting {
                credentials: credentials.clone(),
                audience: Some(audience.clone()),
            }),
            UpstreamTransport::Http { .. } | UpstreamTransport::Command { .. } => None,
        };
        let (client, group) = match &config.transport {
            UpstreamTransport::Command { command, env, cwd } => {
                let transport = child(&config.name, command, env, cwd.as_deref())?;
                // Held from here: if this future is dropped, the group goes too.
                let group = transport.id().map(Group::new);
                (events.serve(transport).await, group)
            }
            UpstreamTransport::Http { url, auth, headers } => {
                let (bearer_token, lent) = match auth {
                    UpstreamAuth::None => (None, None),
                    UpstreamAuth::Bearer(token) => (Some(token), None),
                    UpstreamAuth::Forward(session)
                    | UpstreamAuth::TokenExchange { session, .. } => {
                        (session.as_ref(), Some(credentials.clone()))
                    }
                };
                let transport = http::transport(url, bearer_token, headers, lent)?;
                (events.serve(transport).await, None)
            }
        };
        let client = client.map_err(|error| format!("initialize: {error}"))?;
        let peer = client.peer().clone();
        let link = Arc::new(Link {
            stop: std::sync::Mutex::new(Some(client.cancellation_token())),
            group,
            ended: std::sync::atomic::AtomicBool::new(false),
        });
        // The session runs until the child goes away or the link closes it.
        let (ended, closed) = oneshot::channel();
        let watched = Arc::downgrade(&link);
        tokio::spawn(async move {
            let _ = client.waiting().await;
            if let Some(link) = watched.upgrade() {
                link.ended.store(true, std::sync::atomic::Ordering::Release);
            }
            let _ = ended.send(());
        });
        let listed = list_tools(&peer).await?;
        let tools = convert(config, listed).await?;
        let upstream = Self {
            name: config.name.clone(),
            label: format!("upstream {}", config.name),
            timeout: config.timeout,
            peer,
            link,
            acting: acting.map(Arc::new),
            capabilities: tools.iter().map(|t| t.capability.clone()).collect(),
            tools,
        };
        Ok(Connected {
            upstream: Arc::new(upstream),
            closed,
            tools_changed,
        })
    }

    /// This upstream with its tools listed again, on the same session.
    ///
    /// # Errors
    ///
    /// Why the list could not be had.
    async fn relisted(&self, config: &UpstreamConfig) -> Result<Self, String> {
        let listed = list_tools(&self.peer).await?;
        let tools = convert(config, listed).await?;
        Ok(Self {
            name: self.name.clone(),
            label: self.label.clone(),
            timeout: self.timeout,
            peer: self.peer.clone(),
            link: self.link.clone(),
            acting: self.acting.clone(),
            capabilities: tools.iter().map(|t| t.capability.clone()).collect(),
            tools,
        })
    }

    /// Stops the session: closes it (the child's stdin, then SIGTERM and SIGKILL
    /// to its process group, 3 s apart), waits up to `grace` for it to end, then
    /// kills what is left of the group. `closed` fires when the session ended.
    pub async fn stop(&self, closed: &mut oneshot::Receiver<()>, grace: Duration) {
        // Closing the session closes the transport, which ends the child
        // (`ChildLines::close`: stdin, SIGTERM to the group, SIGKILL).
        self.link.close();
        let _ = tokio::time::timeout(grace, &mut *closed).await;
        self.end_leftovers();
    }

    /// Kills what is left of the child's process group, when its session ended
    /// (the child exited): grandchildren it left behind go with it. Done at once:
    /// a group that stays empty long enough may see its number reused.
    pub fn end_leftovers(&self) {
        if let Some(group) = &self.link.group {
            group.end();
        }
    }

    /// How many capabilities its tools became.
    pub fn capability_count(&self) -> usize {
        self.tools.len()
    }

    /// Calls tool `index` with `arguments` (bound by [`json::ToolArguments`]).
    async fn call(&self, index: usize, arguments: Arguments, budget: CallBudget) -> CallOutcome {
        let Some(tool) = self.tools.get(index) else {
            tracing::error!(upstream = %self.name, index, "a call names a tool that is not there");
            return outcome(Err(CallFailure::Internal));
        };
        if self.link.ended.load(std::sync::atomic::Ordering::Acquire) {
            // Restarting: its names still serve, the call fails now.
            let detail = unavailable_detail(&self.name);
            return outcome(Err(CallFailure::Failed(Some(detail))));
        }
        let mut params = CallToolRequestParams::new(tool.tool.clone());
        let Some(arguments) = arguments.take::<serde_json::Map<String, serde_json::Value>>() else {
            tracing::error!(upstream = %self.name, tool = %tool.tool, "the arguments were not bound by the upstream source");
            return outcome(Err(CallFailure::Internal));
        };
        params.arguments = Some(arguments);
        let mut meta = RequestMetaObject::new();
        // The upstream's work joins the execution's trace (SEP-414).
        if let Some(trace) = &budget.trace {
            meta.set_traceparent(trace.traceparent.clone());
            if let Some(state) = &trace.tracestate {
                meta.set_tracestate(state.clone());
            }
        }
        // The upstream's timeout bounds the exchange of the caller's token too.
        let deadline = self
            .timeout
            .map(|timeout| tokio::time::Instant::now() + timeout);
        let timed_out = || {
            tracing::info!(upstream = %self.name, tool = %tool.tool, "call abandoned at the upstream's timeout");
            let detail = timed_out_detail(tool.capability.name.as_str());
            outcome(Err(CallFailure::Failed(Some(detail))))
        };
        // Held until the call ends: the transport sends the caller's token.
        let _lent = match (&self.acting, &budget.caller) {
            (None, _) => None,
            (Some(acting), Some(caller)) => {
                let token = self.token_for(acting, caller, &tool.tool);
                let token = match deadline {
                    Some(deadline) => match tokio::time::timeout_at(deadline, token).await {
                        Ok(token) => token,
                        Err(_) => return timed_out(),
                    },
                    None => token.await,
                };
                let token = match token {
                    Ok(token) => token,
                    Err(failure) => return outcome(Err(failure)),
                };
                let lent = acting.credentials.lend(token);
                meta.insert(CREDENTIAL_META.to_owned(), lent.reference.clone().into());
                Some(lent)
            }
            (Some(_), None) => {
                let detail = no_credentials_detail(&self.name);
                return outcome(Err(CallFailure::Failed(Some(detail))));
            }
        };
        if !meta.is_empty() {
            params.meta = Some(meta);
        }
        // Dropping this future (the execution's deadline, a cancelled request, the
        // upstream's own timeout below) sends `notifications/cancelled` upstream.
        let call = self.peer.call_tool_once(params);
        let answered = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, call).await {
                Ok(answered) => answered,
                Err(_) => return timed_out(),
            },
            None => call.await,
        };
        let result = match answered {
            Ok(CallToolResponse::Complete(result)) => result,
            Ok(_) => {
                tracing::warn!(upstream = %self.name, tool = %tool.tool, "the tool asked for input or started a task, which code mode cannot give");
                return outcome(Err(CallFailure::Failed(None)));
            }
            Err(rmcp::ServiceError::McpError(error)) if made_up(&error, REFUSED_CODE) => {
                tracing::info!(upstream = %self.name, tool = %tool.tool, "the upstream refused the caller's credentials");
                let detail = refused_credentials_detail(&self.name);
                return outcome(Err(CallFailure::Failed(Some(detail))));
            }
            Err(rmcp::ServiceError::McpError(error)) if made_up(&error, OVERSIZED_CODE) => {
                let detail = format!(
                    "upstream {} sent a result over {MAX_MESSAGE_TEXT}",
                    self.name
                );
                return outcome(Err(CallFailure::Failed(Some(detail))));
            }
            Err(rmcp::ServiceError::McpError(error)) if made_up(&error, TOO_DEEP_CODE) => {
                let detail = format!(
                    "upstream {} sent a result nested deeper than {MAX_MESSAGE_DEPTH} levels or holding more than {MAX_MESSAGE_VALUES} values",
                    self.name
                );
                return outcome(Err(CallFailure::Failed(Some(detail))));
            }
            Err(error) => {
                tracing::warn!(upstream = %self.name, tool = %tool.tool, reason = %error, "upstream call failed");
                let detail = unavailable_detail(&self.name);
                return outcome(Err(CallFailure::Failed(Some(detail))));
            }
        };
        outcome(self.project(tool, result, &budget))
    }

    /// The token a call of `tool` sends for `caller`: the caller's own, or one
    /// exchanged for the upstream's audience.
    async fn token_for(
        &self,
        acting: &Acting,
        caller: &Caller,
        tool: &str,
    ) -> Result<Secret, CallFailure> {
        let Some(audience) = &acting.audience else {
            return Ok(caller.token.clone());
        };
        let refused = || CallFailure::Failed(Some(refused_credentials_detail(&self.name)));
        let Some(exchange) = &caller.exchange else {
            tracing::error!(upstream = %self.name, tool, "auth = \"token-exchange\" without --oauth-client-id: nothing to exchange the caller's token with");
            return Err(refused());
        };
        exchange
            .exchange(&caller.token, audience)
            .await
            .map_err(|reason| {
                tracing::warn!(upstream = %self.name, tool, %reason, "token exchange failed");
                refused()
            })
    }

    /// A tool's answer as the program's value, or its failure.
    fn project(
        &self,
        tool: &UpstreamTool,
        result: CallToolResult,
        budget: &CallBudget,
    ) -> Result<Value, CallFailure> {
        if result.is_error == Some(true) {
            return Err(CallFailure::Failed(sanitize_message(&text_of(
                &result.content,
            ))));
        }
        let projected = match (&tool.structured, result.structured_content) {
            (Some(fields), Some(serde_json::Value::Object(structured))) => {
                json::result(fields, structured, budget.max_depth, budget.max_nodes)
            }
            (Some(_), _) => {
                tracing::warn!(upstream = %self.name, tool = %tool.tool, "the tool declared structured output but its result has no object in structuredContent");
                return Err(CallFailure::Failed(None));
            }
            (None, _) => {
                content::content_result(result.content, budget.max_depth, budget.max_nodes)
            }
        };
        projected.map_err(CallFailure::Exhausted)
    }
}

json::shared_json_source!(Upstream, UpstreamSession);

/// Whether `error` is an answer our transport made up with `code` (not an
/// upstream's own error that happens to use the code).
fn made_up(error: &rmcp::model::ErrorData, code: i32) -> bool {
    error.code.0 == code
        && error.data.as_ref().and_then(serde_json::Value::as_str) == Some(made_up_marker())
}

/// A call's outcome: an upstream's work is bounded by time, so it charges nothing
/// to the execution's meter.
fn outcome(result: Result<Value, CallFailure>) -> CallOutcome {
    result
}

/// Starts `command` as a child with `env` (plus `PATH` and `HOME`) in `cwd`; its
/// stderr is logged as upstream `name`'s.
///
/// # Errors
///
/// Why it cannot be started.
fn child(
    name: &str,
    command: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&std::path::Path>,
) -> Result<ChildLines, String> {
    let (program, arguments) = command
        .split_first()
        .ok_or_else(|| "`command` is empty".to_owned())?;
    let mut child = tokio::process::Command::new(program);
    child.args(arguments).env_clear();
    for key in INHERITED_ENV {
        if let Some(value) = std::env::var_os(key) {
            child.env(key, value);
        }
    }
    child.envs(env).kill_on_drop(true);
    if let Some(cwd) = cwd {
        child.current_dir(cwd);
    }
    crate::children::prepare(child.as_std_mut());
    child
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = crate::children::spawn_tokio(&mut child)
        .map_err(|error| format!("cannot start `{program}`: {error}"))?;
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(log_stderr(name.to_owned(), stderr));
    }
    ChildLines::new(name, child)
}

/// The text blocks of a tool's content, joined with newlines.
fn text_of(content: &[ContentBlock]) -> String {
    let texts: Vec<&str> = content
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|text| text.text.as_str())
        .collect();
    texts.join("\n")
}

/// Sets its [`Stop`] when dropped: the conversion it guards was abandoned.
struct StopOnDrop(Arc<Stop>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.set();
    }
}

/// [`capabilities`] on a blocking thread, off the runtime that carries sessions
/// and host waits; dropping this future (a connect or relist past its timeout)
/// stops the conversion at its next shape.
///
/// # Errors
///
/// The conversion's thread failed.
async fn convert(config: &UpstreamConfig, listed: Vec<Tool>) -> Result<Vec<UpstreamTool>, String> {
    let stop = Arc::new(Stop::default());
    let _stop_when_dropped = StopOnDrop(stop.clone());
    let config = config.clone();
    tokio::task::spawn_blocking(move || capabilities(&config, listed, &stop))
        .await
        .map_err(|error| format!("converting its tools failed: {error}"))
}

/// What a tool's annotations say of its effects (its title is a search term).
fn annotations(given: Option<&rmcp::model::ToolAnnotations>) -> Annotations {
    match given {
        None => Annotations::default(),
        Some(given) => Annotations {
            read_only: given.read_only_hint,
            destructive: given.destructive_hint,
            idempotent: given.idempotent_hint,
            open_world: given.open_world_hint,
        },
    }
}

/// The capabilities of the `listed` tools of upstream `config`: those in its
/// allow-list whose mapped name, parameters and texts the catalog accepts and whose
/// schemas fit one tool's budget. Ends early (with what it has) when `stop` is set.
fn capabilities(config: &UpstreamConfig, listed: Vec<Tool>, stop: &Stop) -> Vec<UpstreamTool> {
    let mut tools: Vec<UpstreamTool> = Vec::new();
    let mut spent = 0usize;
    for tool in listed {
        if spent >= MAX_UPSTREAM_NODES {
            tracing::warn!(upstream = %config.name, tool = %tool.name, max = MAX_UPSTREAM_NODES, "upstream tool skipped: the upstream's tools already describe the most types it may have");
            continue;
        }
        let original = tool.name.to_string();
        if let Some(allowed) = &config.tools
            && !allowed.contains(&original)
        {
            continue;
        }
        let name = format!("{}.{}", config.name, names::segment(&original));
        let (summary, description) = names::texts(
            &original,
            tool.title.as_deref(),
            tool.description.as_deref(),
        );
        let mut budget = schema::Budget::new(stop);
        let shapes = tool
            .output_schema
            .as_deref()
            .map_or(Ok(None), |output| {
                schema::output_fields(output, &mut budget)
            })
            .and_then(|structured| {
                let params = schema::parameters(&tool.input_schema, &mut budget)?;
                Ok((params, structured))
            });
        spent += budget.nodes_spent();
        let (params, structured) = match shapes {
            Ok(shapes) => shapes,
            Err(SchemaError::Stopped) => return tools,
            Err(error @ SchemaError::TooLarge) => {
                tracing::warn!(upstream = %config.name, tool = %original, reason = %error, "upstream tool skipped");
                continue;
            }
        };
        let output = structured.clone().unwrap_or_else(content::content_fields);
        // What the schema says of the parameters beyond their types: the model
        // reads formats and defaults instead of learning them by failing.
        let description = match schema::argument_docs(&tool.input_schema) {
            Some(docs) => Some(crate::catalog::with_arguments(
                description.as_deref().unwrap_or(&summary),
                &docs,
            )),
            None => description,
        };
        let spec = CapabilitySpec {
            name,
            id: Some(names::id(&config.name, &original)),
            summary,
            description,
            search_terms: tool.title.iter().cloned().collect(),
            params,
            output,
        };
        let validated = match validate_spec(&spec) {
            Err(error) => Err(error.to_string()),
            Ok(_)
                if tools
                    .iter()
                    .any(|t| t.capability.name.as_str() == spec.name) =>
            {
                Err(format!(
                    "capability name `{}` is taken by another of its tools",
                    spec.name
                ))
            }
            Ok(capability) => Ok(capability),
        };
        let capability = match validated {
            Ok(mut capability) => {
                capability.annotations = annotations(tool.annotations.as_ref());
                Arc::new(capability)
            }
            Err(reason) => {
                tracing::warn!(upstream = %config.name, tool = %original, reason = %reason, "upstream tool skipped");
                continue;
            }
        };
        tools.push(UpstreamTool {
            tool: original,
            capability,
            structured,
        });
    }
    if let Some(allowed) = &config.tools {
        for missing in allowed
            .iter()
            .filter(|a| !tools.iter().any(|t| t.tool == **a))
        {
            tracing::warn!(upstream = %config.name, tool = %missing, "a tool of the allow-list is not served");
        }
    }
    tools
}

/// Logs a child's stderr, one event per line, each cut at [`MAX_STDERR_LINE`] and
/// quoted (control characters escaped), so a child cannot forge log lines.
async fn log_stderr(upstream: String, mut stderr: tokio::process::ChildStderr) {
    let mut line: Vec<u8> = Vec::new();
    let mut dropped = 0u64;
    let mut chunk = [0u8; 4096];
    loop {
        let read = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        for &byte in &chunk[..read] {
            if byte == b'\n' {
                emit_line(&upstream, &line, dropped);
                line.clear();
                dropped = 0;
            } else if line.len() < MAX_STDERR_LINE {
                line.push(byte);
            } else {
                dropped += 1;
            }
        }
    }
    if !line.is_empty() {
        emit_line(&upstream, &line, dropped);
    }
}

fn emit_line(upstream: &str, line: &[u8], dropped: u64) {
    let text = String::from_utf8_lossy(line);
    tracing::info!(upstream = %upstream, dropped_bytes = dropped, line = ?text, "upstream stderr");
}

impl Supervised for Upstream {
    fn connect(
        config: &UpstreamConfig,
    ) -> impl Future<Output = Result<Connected<Self>, String>> + Send {
        Upstream::connect(config)
    }

    fn relisted(
        &self,
        config: &UpstreamConfig,
    ) -> impl Future<Output = Result<Self, String>> + Send {
        Upstream::relisted(self, config)
    }

    fn stop(
        &self,
        closed: &mut oneshot::Receiver<()>,
        grace: Duration,
    ) -> impl Future<Output = ()> + Send {
        Upstream::stop(self, closed, grace)
    }

    fn end_leftovers(&self) {
        Upstream::end_leftovers(self);
    }

    fn capability_count(&self) -> usize {
        Upstream::capability_count(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listed tool `name` taking one string `text`.
    fn tool(name: &str) -> Tool {
        serde_json::from_value(serde_json::json!({
            "name": name,
            "description": format!("Does {name}. More words."),
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        }))
        .expect("a tool")
    }

    fn config(tools: Option<&[&str]>) -> UpstreamConfig {
        UpstreamConfig {
            name: "h".to_owned(),
            transport: UpstreamTransport::Command {
                command: vec!["unused".to_owned()],
                env: BTreeMap::new(),
                cwd: None,
            },
            timeout: None,
            tools: tools.map(|t| t.iter().map(|n| (*n).to_owned()).collect()),
        }
    }

    /// Name, ID and summary of each capability made of `listed`.
    fn made(
        config: &UpstreamConfig,
        listed: Vec<Tool>,
        stop: &Stop,
    ) -> Vec<(String, String, String)> {
        capabilities(config, listed, stop)
            .into_iter()
            .map(|t| {
                let c = &t.capability;
                (c.name.to_string(), c.id.to_string(), c.summary.clone())
            })
            .collect()
    }

    #[test]
    fn tools_become_capabilities_in_the_allow_list_and_first_claimant_order() {
        let listed = vec![
            tool("getTime"),
            tool("get_time"),
            tool("secret"),
            tool("echo"),
        ];
        let stop = Stop::default();
        assert_eq!(
            made(&config(None), listed.clone(), &stop),
            vec![
                (
                    "h.get_time".to_owned(),
                    "mcp:h/getTime".to_owned(),
                    "Does getTime.".to_owned()
                ),
                (
                    "h.secret".to_owned(),
                    "mcp:h/secret".to_owned(),
                    "Does secret.".to_owned()
                ),
                (
                    "h.echo".to_owned(),
                    "mcp:h/echo".to_owned(),
                    "Does echo.".to_owned()
                ),
            ],
            "`get_time` maps to the name `getTime` took first"
        );
        assert_eq!(
            made(&config(Some(&["echo", "missing"])), listed, &stop),
            vec![(
                "h.echo".to_owned(),
                "mcp:h/echo".to_owned(),
                "Does echo.".to_owned()
            )]
        );
    }

    #[test]
    fn a_stopped_conversion_ends_with_what_it_has() {
        let stop = Stop::default();
        stop.set();
        assert_eq!(made(&config(None), vec![tool("echo")], &stop), vec![]);
    }

    #[test]
    fn only_our_own_made_up_answers_count_as_made_up() {
        let ours = rmcp::model::ErrorData::new(
            rmcp::model::ErrorCode(OVERSIZED_CODE),
            "the result is over 16 MiB",
            Some(serde_json::Value::String(made_up_marker().to_owned())),
        );
        assert!(made_up(&ours, OVERSIZED_CODE));
        assert!(!made_up(&ours, TOO_DEEP_CODE));
        let theirs = rmcp::model::ErrorData::new(
            rmcp::model::ErrorCode(OVERSIZED_CODE),
            "the result is over 16 MiB",
            Some(serde_json::Value::String("codemode-host/guess".to_owned())),
        );
        assert!(!made_up(&theirs, OVERSIZED_CODE));
    }

    #[test]
    fn a_result_s_text_is_its_text_blocks_joined() {
        let content: Vec<ContentBlock> = serde_json::from_value(serde_json::json!([
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "text", "text": "two"},
        ]))
        .expect("content");
        assert_eq!(text_of(&content), "one\ntwo");
    }
}
