//! The rmcp [`ServerHandler`] exposing the tools over a [`Service`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams,
    InitializeResult, InputResponses, JsonObject, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProgressToken, ServerCapabilities, ServerConfig, Tool,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde::Serialize;
use serde_json::{Value, json};

use super::approval::{self, ApprovalKey, DEFAULT_APPROVAL_TIMEOUT};
use super::contract::{self, DESCRIBE_API, EXECUTE, SEARCH_API};
use super::progress::Reporter;
use super::stdio::StdioTransport;
use super::tasks;
use crate::authz::Subject;
use crate::error::ToolError;
use crate::execute::{Approver, Execution, RunOptions};
use crate::service::Service;
use crate::source::TraceContext;
use crate::tasks::{TaskRefused, TaskStore};
use crate::telemetry;

/// The `_meta` key of an execution's statistics (fuel, steps, native calls, bytes,
/// elapsed microseconds).
pub const META_STATS: &str = "codemode/stats";
/// The `_meta` key of an `execute` error caused by a native call: the capability
/// and the call's 1-based line and column in the program.
pub const META_ERROR: &str = "codemode/error";

/// The server name clients see at initialize.
const SERVER_NAME: &str = "codemode-host";

/// Where the subject of a tool call comes from: always the host, never the client
/// (a `_meta` field naming a subject is ignored like any other).
#[derive(Debug, Clone)]
pub enum SubjectSource {
    /// Every call acts for this subject (stdio: `--subject`).
    Fixed(Subject),
    /// The subject the HTTP layer authenticated and put in the request's extensions;
    /// none there means unauthenticated.
    Authenticated,
}

impl SubjectSource {
    /// The subject of the call `context` belongs to; `None` when unauthenticated.
    fn resolve(&self, context: &RequestContext<RoleServer>) -> Option<Subject> {
        let subject = match self {
            SubjectSource::Fixed(subject) => Some(subject.clone()),
            SubjectSource::Authenticated => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Subject>())
                .cloned(),
        };
        subject.filter(|s| !s.id.is_empty())
    }
}

/// Where a server's [`Service`] comes from.
#[derive(Clone)]
enum Backend {
    /// Loaded before the server was made (HTTP serves `/mcp` only then).
    Ready(Arc<Service>),
    /// Still loading (stdio answers at once, even while a cold cache compiles):
    /// `initialize` and `tools/list` need no service; the tools wait for it, an
    /// `execute` at most `startup_wait` from its arrival, and its time budget
    /// starts when the wait ends.
    Loading {
        loaded: tokio::sync::watch::Receiver<Option<Arc<Service>>>,
        startup_wait: Duration,
    },
}

/// Why a tool call got no service.
enum NotLoaded {
    /// The execute's wait for the load went by first.
    TimeWentBy,
    /// The load failed (the server is ending).
    Failed,
}

/// How much longer than its state a state's single use is remembered: clocks
/// of replicas may disagree a little.
const CLAIM_MARGIN: Duration = Duration::from_secs(60);

/// The source named in an execute's failure when the server itself did not
/// finish starting (loading its plugins, preparing the interpreter) in time:
/// `capability failed: the server is still starting`.
pub const SERVER_SOURCE: &str = "the server";

/// The MCP face of a [`Service`]. Cheap to clone; every clone serves the same service.
#[derive(Clone)]
pub struct McpServer {
    backend: Backend,
    subjects: SubjectSource,
    tools: Arc<Vec<Tool>>,
    /// The executions run as tasks (answered without waiting for the service).
    tasks: Arc<TaskStore>,
    /// Over Streamable HTTP without sessions: a client's answer to a request
    /// the server sent would be a new request, which could reach another
    /// replica.
    stateless: bool,
    /// How long a human may take to approve a call (`--approval-timeout`).
    approval_timeout: Duration,
    /// Seals and opens the `requestState` of 2026-07-28 approvals; `None`:
    /// such clients are not asked.
    key: Option<Arc<ApprovalKey>>,
    /// Told when a client speaks (its `initialize`, a tool list or call),
    /// before it is answered: the binary starts its stdio upstreams then.
    client_seen: Option<ClientHook>,
}

/// What [`McpServer::with_client_hook`] calls.
pub type ClientHook = Arc<dyn Fn() + Send + Sync>;

/// What a `tools/call` brings for asking a human: who asks, and on a retry the
/// signed state and the answers.
struct Asking {
    approver: Arc<dyn Approver>,
    request_state: Option<String>,
    responses: Option<InputResponses>,
}

impl McpServer {
    /// A server over Streamable HTTP answering from `service` for the subjects
    /// `subjects` resolves, keeping the executions run as tasks in `tasks`.
    pub fn new(service: Arc<Service>, subjects: SubjectSource, tasks: Arc<TaskStore>) -> Self {
        Self {
            stateless: true,
            ..Self::with_backend(Backend::Ready(service), subjects, tasks)
        }
    }

    /// The same server, giving a human `timeout` to approve a call a policy
    /// asks about ([`DEFAULT_APPROVAL_TIMEOUT`] when not set), and signing the
    /// `requestState` of 2026-07-28 approvals with `key`.
    pub fn with_approvals(self, timeout: Duration, key: Option<Arc<ApprovalKey>>) -> Self {
        Self {
            approval_timeout: timeout,
            key,
            ..self
        }
    }

    /// The same server, knowing whether HTTP clients before 2026-07-28 keep a
    /// session (`--http-sessions`), in which the answer to a question it sends
    /// comes back to it.
    pub fn with_sessions(self, sessions: bool) -> Self {
        Self {
            stateless: !sessions,
            ..self
        }
    }

    /// A server over stdio answering before its service is loaded: `loaded` holds it once it
    /// is (the sender dropped without one: the load failed). Tool calls wait for
    /// it; an `execute` at most `startup_wait` from its arrival, which then ends
    /// as `capability failed: the server is still starting`; its time budget
    /// starts when the wait ends.
    pub fn loading(
        loaded: tokio::sync::watch::Receiver<Option<Arc<Service>>>,
        startup_wait: Duration,
        subjects: SubjectSource,
        tasks: Arc<TaskStore>,
    ) -> Self {
        Self::with_backend(
            Backend::Loading {
                loaded,
                startup_wait,
            },
            subjects,
            tasks,
        )
    }

    fn with_backend(backend: Backend, subjects: SubjectSource, tasks: Arc<TaskStore>) -> Self {
        let tools = vec![
            tool(
                SEARCH_API,
                contract::SEARCH_API_DESCRIPTION,
                contract::search_output_schema(),
            ),
            tool(
                DESCRIBE_API,
                contract::DESCRIBE_API_DESCRIPTION,
                contract::describe_output_schema(),
            ),
            tool(
                EXECUTE,
                contract::EXECUTE_DESCRIPTION,
                contract::execute_output_schema(),
            ),
        ];
        Self {
            backend,
            subjects,
            tools: Arc::new(tools),
            tasks,
            stateless: false,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            key: None,
            client_seen: None,
        }
    }

    /// Calls `hook` whenever a client speaks (`initialize`, `tools/list`,
    /// `tools/call`), before it is answered; the hook must be quick and
    /// idempotent.
    pub fn with_client_hook(self, hook: ClientHook) -> Self {
        Self {
            client_seen: Some(hook),
            ..self
        }
    }

    fn client_seen(&self) {
        if let Some(hook) = &self.client_seen {
            hook();
        }
    }

    /// The service, once loaded, and whether the call had to wait for it; an
    /// `execute` (`arrived` when its request came) waits no longer than the
    /// startup wait.
    async fn service(&self, execute: Option<Instant>) -> Result<(Arc<Service>, bool), NotLoaded> {
        let (loaded, startup_wait) = match &self.backend {
            Backend::Ready(service) => return Ok((service.clone(), false)),
            Backend::Loading {
                loaded,
                startup_wait,
            } => (loaded, *startup_wait),
        };
        if let Some(service) = loaded.borrow().clone() {
            return Ok((service, false));
        }
        let mut loaded = loaded.clone();
        let wait = loaded.wait_for(Option::is_some);
        let got = match execute {
            Some(arrived) => {
                let deadline = tokio::time::Instant::from_std(arrived + startup_wait);
                tokio::time::timeout_at(deadline, wait)
                    .await
                    .map_err(|_| NotLoaded::TimeWentBy)?
            }
            None => wait.await,
        };
        got.ok()
            .and_then(|service| service.clone())
            .map(|service| (service, true))
            .ok_or(NotLoaded::Failed)
    }

    /// Starts `execute` as a task and answers its handle at once; its arguments
    /// and subject are checked first, as for a direct call (a failure is the
    /// direct answer, no task). The execution has `--max-task-time`, runs
    /// detached from this request and ends the task with the tool result a
    /// direct call would have got. A call it must ask a human about is asked
    /// through the task, when the request (`context`) declared form
    /// elicitation.
    async fn start_task(
        &self,
        subject: Option<Subject>,
        arguments: Option<&JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let trace = trace_context(context);
        let arrived = Instant::now();
        let property = contract::input_property(EXECUTE).unwrap_or_default();
        let source = match contract::single_string(EXECUTE, property, arguments) {
            Ok(source) => source.to_owned(),
            Err(error) => {
                let text = vec![ContentBlock::text(error.to_string())];
                return Ok(CallToolResult::error(text).into());
            }
        };
        let Some(subject) = subject else {
            return Ok(project::<()>(Err(ToolError::Unauthenticated)).into());
        };
        let Ok((service, _)) = self.service(None).await else {
            return Ok(project::<()>(Err(ToolError::Internal)).into());
        };
        let board = self.tasks.clone();
        let view = match board.create(&subject.id).await {
            Ok(view) => view,
            Err(TaskRefused::Unavailable) => return Err(tasks::unavailable()),
            Err(refused) => {
                tracing::info!(subject = %subject.id, reason = %refused, "task refused");
                let error = match refused.flag() {
                    Some(_) => ToolError::ResourceLimit,
                    None => ToolError::Internal,
                };
                let mut execution = Execution::refused(error, None);
                execution.stats.limit = refused.flag();
                execution.stats.elapsed_us = arrived.elapsed().as_micros() as u64;
                return Ok(project_execution(execution).into());
            }
        };
        let options = RunOptions {
            progress: None,
            trace,
            max_time: Some(board.limits().max_task_time),
            approver: Some(approval::for_task(
                context,
                board.clone(),
                view.id.clone(),
                self.approval_timeout,
            )),
            replay: None,
            not_started: None,
        };
        let running = tokio::spawn({
            let (board, id) = (board.clone(), view.id.clone());
            async move {
                // A panic on the way still ends the task (as failed).
                let ending = EndTask(board, id);
                let execution = service.run_since(&subject, &source, arrived, options).await;
                ending
                    .0
                    .finish(&ending.1, tasks::completed(&project_execution(execution)));
            }
        });
        board.attach(&view.id, running.abort_handle());
        Ok(CallToolResponse::Task(CreateTaskResult::new(
            tasks::handle(&view),
        )))
    }

    /// The replay a retry's `requestState` asks for, its single-use token
    /// claimed (in the task store, shared by replicas with `--task-store`);
    /// `Err` with the reason when it does not open or was answered before.
    async fn reopen(
        &self,
        subject: &Subject,
        source: &str,
        sealed: &str,
        asking: &Asking,
        max_bytes: usize,
    ) -> Result<crate::execute::Replay, String> {
        let key = self
            .key
            .as_ref()
            .ok_or_else(|| approval::NO_KEY.to_owned())?;
        let replayed = approval::replay(
            key,
            &subject.id,
            source,
            sealed,
            asking.responses.as_ref(),
            max_bytes,
            self.tasks.claims_here(),
        )?;
        // Remembered as long as the state itself is valid (it says how long:
        // another replica may have sealed it with another --approval-timeout),
        // and a minute more for clocks that disagree.
        let ttl = replayed.valid_for.unwrap_or(self.approval_timeout) + CLAIM_MARGIN;
        let claimed = self
            .tasks
            .claim(&subject.id, &replayed.once, ttl)
            .await
            .map_err(|_| "the task store is unavailable to claim the requestState".to_owned())?;
        if !claimed {
            return Err(approval::USED_ALREADY.to_owned());
        }
        Ok(replayed.replay)
    }

    /// Runs one tool call; `Err` is a protocol error (an unknown tool). Arguments
    /// that violate the tool's input schema are a tool error result.
    /// Dropping the future (a cancelled request) cancels an execution.
    async fn call(
        &self,
        subject: Option<Subject>,
        name: &str,
        arguments: Option<&JsonObject>,
        progress: Option<(Peer<RoleServer>, ProgressToken)>,
        trace: Option<TraceContext>,
        asking: Asking,
    ) -> Result<CallToolResponse, ErrorData> {
        let arrived = Instant::now();
        let tool_name = match name {
            SEARCH_API => SEARCH_API,
            DESCRIBE_API => DESCRIBE_API,
            EXECUTE => EXECUTE,
            _ => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {name:?}"),
                    None,
                ));
            }
        };
        // Arguments are checked before the subject, whoever makes the call. A
        // violation is a tool result the model reads and can fix (SEP-1303), not
        // a protocol error most hosts never show it.
        let property = contract::input_property(tool_name).unwrap_or_default();
        let input = match contract::single_string(tool_name, property, arguments) {
            Ok(input) => input,
            Err(error) => {
                return Ok(
                    CallToolResult::error(vec![ContentBlock::text(error.to_string())]).into(),
                );
            }
        };
        let Some(subject) = subject else {
            return Ok(project::<()>(Err(ToolError::Unauthenticated)).into());
        };
        let execute = (tool_name == EXECUTE).then_some(arrived);
        let (service, waited) = match self.service(execute).await {
            Ok(loaded) => loaded,
            Err(not_loaded) => {
                let execution = match not_loaded {
                    NotLoaded::TimeWentBy => Execution::refused(
                        ToolError::CapabilityFailed(Some(crate::error::still_starting_detail(
                            SERVER_SOURCE,
                        ))),
                        None,
                    ),
                    NotLoaded::Failed => Execution::refused(ToolError::Internal, None),
                };
                return Ok(not_loaded_yet(tool_name, &subject, execution, arrived).into());
            }
        };
        // The wait for the load is not the program's time.
        let arrived = if waited { Instant::now() } else { arrived };
        match tool_name {
            SEARCH_API => Ok(project(service.search(&subject, input).await).into()),
            DESCRIBE_API => Ok(project(service.describe(&subject, input).await).into()),
            _ => {
                let max_bytes = service.max_value_bytes();
                let replay = match &asking.request_state {
                    None => None,
                    Some(sealed) => match self
                        .reopen(&subject, input, sealed, &asking, max_bytes)
                        .await
                    {
                        Ok(replay) => Some(replay),
                        Err(reason) => {
                            tracing::info!(subject = %subject.id, reason = %reason, "execute refused: its requestState does not open");
                            return Ok(project::<()>(Err(ToolError::PermissionDenied)).into());
                        }
                    },
                };
                let reporter = progress.map(|(peer, token)| Reporter::start(peer, token));
                let options = RunOptions {
                    progress: reporter.as_ref().map(Reporter::progress),
                    trace,
                    max_time: None,
                    approver: Some(asking.approver),
                    replay,
                    not_started: None,
                };
                let mut execution = service.run_since(&subject, input, arrived, options).await;
                if let Some(reporter) = reporter {
                    reporter.finish().await;
                }
                if let (Some(suspended), Some(key)) = (execution.suspended.take(), &self.key) {
                    match approval::input_required(
                        key,
                        &subject.id,
                        input,
                        suspended,
                        self.approval_timeout,
                        max_bytes,
                        self.tasks.claims_here(),
                    ) {
                        Ok(result) => return Ok(CallToolResponse::InputRequired(result)),
                        Err(reason) => {
                            tracing::info!(subject = %subject.id, reason, "call denied: the policy asks a human, who cannot be asked");
                        }
                    }
                }
                Ok(project_execution(execution).into())
            }
        }
    }
}

/// The answer to a tool call that got no service: an execution's (with its cost,
/// and the operator's log line an execution that fails gets), or the fixed text.
fn not_loaded_yet(
    tool_name: &str,
    subject: &Subject,
    mut execution: Execution,
    arrived: Instant,
) -> CallToolResult {
    if tool_name != EXECUTE {
        let error = execution.outcome.err().unwrap_or(ToolError::Internal);
        return project::<()>(Err(error));
    }
    execution.stats.elapsed_us = arrived.elapsed().as_micros() as u64;
    if let Err(error) = &execution.outcome {
        tracing::info!(
            subject = %subject.id,
            outcome = error.fixed_text(),
            limit = execution.stats.limit.unwrap_or("-"),
            capability = "-",
            elapsed_ms = crate::units::millis(arrived.elapsed()),
            "execution failed before the plugins finished loading"
        );
    }
    project_execution(execution)
}

/// Builds a tool definition from the contract.
fn tool(name: &'static str, description: &'static str, output_schema: Value) -> Tool {
    let mut tool = Tool::new(
        name,
        description,
        as_object(contract::input_schema(
            contract::input_property(name).unwrap_or_default(),
        )),
    );
    tool.output_schema = Some(Arc::new(as_object(output_schema)));
    tool
}

fn as_object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        // The contract builds every schema with `json!({...})`.
        _ => JsonObject::new(),
    }
}

/// Success → `structuredContent` plus its JSON text mirror; failure → the fixed text
/// with `isError`.
fn project<T: Serialize>(outcome: Result<T, ToolError>) -> CallToolResult {
    match outcome.and_then(|value| serde_json::to_value(value).map_err(|_| ToolError::Internal)) {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
    }
}

/// `execute`'s success is exactly `{"result": value}`, its error the fixed text; its
/// cost goes in `_meta` either way (with the budget that ran out, on a limit).
fn project_execution(execution: Execution) -> CallToolResult {
    let mut result = match execution.outcome {
        Ok(value) => CallToolResult::structured(json!({ "result": value })),
        Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
    };
    let mut meta = MetaObject::new();
    if let Ok(stats @ Value::Object(_)) = serde_json::to_value(&execution.stats) {
        meta.0.insert(META_STATS.to_owned(), stats);
    }
    if let Some(call) = &execution.failed_call
        && let Ok(call @ Value::Object(_)) = serde_json::to_value(call)
    {
        meta.0.insert(META_ERROR.to_owned(), call);
    }
    result.meta = Some(meta);
    result
}

impl ServerHandler for McpServer {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.client_seen();
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    fn get_info(&self) -> ServerConfig {
        let mut info = InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        );
        info.server_info = Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION"));
        info.instructions = Some(contract::INSTRUCTIONS.to_owned());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.client_seen();
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.client_seen();
        let subject = self.subjects.resolve(&context);
        // A retry answering an approval is a direct call: a task would run the
        // program again without its record.
        let retry = request.request_state.is_some() || request.input_responses.is_some();
        if request.name == EXECUTE && tasks::wants_task(&context) && !retry {
            return self
                .start_task(subject, request.arguments.as_ref(), &context)
                .await;
        }
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| (context.peer.clone(), token));
        let asking = Asking {
            approver: approval::approver(
                &context,
                self.stateless,
                self.key.is_some(),
                self.approval_timeout,
            ),
            request_state: request.request_state.clone(),
            responses: request.input_responses.clone(),
        };
        tokio::select! {
            result = self.call(subject, &request.name, request.arguments.as_ref(), progress, trace_context(&context), asking) => {
                result
            }
            () = context.ct.cancelled() => {
                Ok(CallToolResponse::from(CallToolResult::error(vec![ContentBlock::text(
                    ToolError::Canceled.to_string(),
                )])))
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let Some(subject) = self.subjects.resolve(&context) else {
            return Err(tasks::not_found());
        };
        match self.tasks.get(&subject.id, &request.task_id).await {
            Ok(Some(view)) => Ok(tasks::detailed(&view)),
            Ok(None) => Err(tasks::not_found()),
            Err(_) => Err(tasks::unavailable()),
        }
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // The response to the question the task waits on goes to its execution,
        // wherever it runs; responses to other keys are ignored.
        let Some(subject) = self.subjects.resolve(&context) else {
            return Err(tasks::not_found());
        };
        let responses = approval::task_responses(&request.input_responses);
        match self
            .tasks
            .answer(&subject.id, &request.task_id, &responses)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(tasks::not_found()),
            Err(_) => Err(tasks::unavailable()),
        }
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let Some(subject) = self.subjects.resolve(&context) else {
            return Err(tasks::not_found());
        };
        match self.tasks.cancel(&subject.id, &request.task_id).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(tasks::not_found()),
            Err(_) => Err(tasks::unavailable()),
        }
    }
}

/// Ends a task as failed when its execution's future goes without ending it
/// (a panic); after a normal end, or a cancel, ending again changes nothing.
struct EndTask(Arc<TaskStore>, String);

impl Drop for EndTask {
    fn drop(&mut self) {
        self.0.finish(&self.1, tasks::failed());
    }
}

/// The W3C trace context of a request: its `_meta` (2026-07-28, SEP-414), else
/// (absent or malformed there), over HTTP, its `traceparent` and `tracestate`
/// headers (each given once); `None` when absent or malformed.
fn trace_context(context: &RequestContext<RoleServer>) -> Option<TraceContext> {
    if let Some(traceparent) = context.meta.get_traceparent()
        && let Some(trace) = telemetry::incoming(traceparent, context.meta.get_tracestate())
    {
        return Some(trace);
    }
    let headers = &context
        .extensions
        .get::<axum::http::request::Parts>()?
        .headers;
    // A header given twice is no context (W3C).
    let header = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        }
    };
    telemetry::incoming(
        header(telemetry::TRACEPARENT)?,
        header(telemetry::TRACESTATE),
    )
}

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The MCP handshake failed.
    #[error("MCP initialization failed: {0}")]
    Initialize(#[from] Box<rmcp::service::ServerInitializeError>),
    /// The server task ended abnormally.
    #[error("MCP server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The stdio transport could not start its threads.
    #[error("cannot start the stdio transport: {0}")]
    Transport(String),
}

/// Serves `server` on stdin/stdout until the client disconnects. Stdin closing
/// before any client initialized (Ctrl-D at a terminal, or a start that only
/// prepares the cache) is a normal end, not an error.
///
/// # Errors
///
/// [`ServeError`] when the handshake fails or the server task dies.
pub async fn serve_stdio(server: McpServer) -> Result<(), ServeError> {
    let transport =
        StdioTransport::stdio().map_err(|error| ServeError::Transport(error.to_string()))?;
    let running = match server.serve(transport).await {
        Ok(running) => running,
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("stdin closed before a client initialized; exiting");
            return Ok(());
        }
        Err(error) => return Err(Box::new(error).into()),
    };
    running.waiting().await?;
    Ok(())
}
