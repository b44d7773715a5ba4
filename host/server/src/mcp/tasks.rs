//! The Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) on the wire:
//! when a `tools/call execute` becomes a task, and what a task looks like in the
//! answers to `tools/call` and `tasks/get`. The store itself is
//! [`crate::tasks::TaskStore`].

use rmcp::model::{
    CallToolResult, DetailedTask, GetTaskResult, InputRequests, ProtocolVersion, Task, TaskPayload,
    TaskStatus,
};
use std::sync::Arc;

use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

use crate::tasks::{TaskState, TaskView};

/// How often a client is asked to poll a working task, in milliseconds.
pub(super) const POLL_INTERVAL_MS: u64 = 1000;

/// The error of a `tasks/*` request naming a task that is unknown, expired, or
/// another subject's (the three are not told apart).
pub(super) const TASK_NOT_FOUND: &str = "Failed to retrieve task: Task not found";

/// The error of a `tasks/*` request, or of a `tools/call` asking for a task,
/// when the task store (Redis) does not answer; the reason is in the log.
pub(super) const TASK_STORE_UNAVAILABLE: &str = "Task store unavailable: try again later";

/// What a task says whose server stopped before it ended (with Redis: still
/// working well past its time budget; in the embedded store: still working,
/// its process gone).
pub(super) const TASK_LOST: &str = "the server running this task stopped before it ended";

/// What a task that ended without a result says (its execution panicked, or
/// its result could not be encoded: never expected).
pub(super) const TASK_INTERNAL_FAILURE: &str = "internal failure";

/// Whether this request's client takes a task for an answer: it declared the
/// extension in this request's capabilities, on a revision that has it
/// (2026-07-28 on).
pub(super) fn wants_task(context: &RequestContext<RoleServer>) -> bool {
    let revision = context.protocol_version();
    revision.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
        && context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// A task's handle: its ID, status and times (RFC 3339), how long it is kept
/// and how often to poll.
pub(super) fn handle(view: &TaskView) -> Task {
    let status = match view.state {
        TaskState::Working => TaskStatus::Working,
        TaskState::InputRequired(_) => TaskStatus::InputRequired,
        TaskState::Completed(_) => TaskStatus::Completed,
        TaskState::Failed(_) | TaskState::Lost => TaskStatus::Failed,
        TaskState::Cancelled => TaskStatus::Cancelled,
    };
    Task::new(
        view.id.clone(),
        status,
        humantime::format_rfc3339_millis(view.created).to_string(),
        humantime::format_rfc3339_millis(view.updated).to_string(),
    )
    .with_ttl_ms(u64::try_from(view.ttl.as_millis()).unwrap_or(u64::MAX))
    .with_poll_interval_ms(POLL_INTERVAL_MS)
}

/// The answer to `tasks/get`: the handle, the requests of a task waiting for
/// input, and what a direct call would have returned once it completed (the
/// `_meta` stats included).
pub(super) fn detailed(view: &TaskView) -> GetTaskResult {
    let payload = match &view.state {
        TaskState::Working => TaskPayload::Working,
        TaskState::InputRequired(text) => match serde_json::from_str::<InputRequests>(text) {
            Ok(input_requests) => TaskPayload::InputRequired { input_requests },
            // Written by this server from an `InputRequests`: never expected.
            Err(_) => TaskPayload::Working,
        },
        TaskState::Completed(text) => match object(text) {
            Some(result) => TaskPayload::Completed { result },
            None => TaskPayload::Failed {
                error: internal_failure(),
            },
        },
        TaskState::Failed(text) => TaskPayload::Failed {
            error: object(text).unwrap_or_else(internal_failure),
        },
        TaskState::Cancelled => TaskPayload::Cancelled,
        TaskState::Lost => TaskPayload::Failed {
            error: error_object(TASK_LOST),
        },
    };
    GetTaskResult::new(DetailedTask::new(handle(view), payload))
}

/// A JSON object's text, read back.
fn object(text: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(object)) => Some(object),
        Ok(_) | Err(_) => None,
    }
}

/// A finished execution's tool result as the task's end (kept as JSON text:
/// about the result's size, where a parsed tree would be many times it).
pub(super) fn completed(result: &CallToolResult) -> TaskState {
    match serde_json::to_string(result) {
        Ok(text) => TaskState::Completed(Arc::from(text)),
        Err(_) => failed(),
    }
}

/// A task whose execution ended without a result (it panicked).
pub(super) fn failed() -> TaskState {
    TaskState::Failed(Arc::from(
        Value::Object(internal_failure()).to_string().as_str(),
    ))
}

/// The JSON-RPC error of a task that ended without a result.
fn internal_failure() -> serde_json::Map<String, Value> {
    error_object(TASK_INTERNAL_FAILURE)
}

/// A JSON-RPC internal error (-32603) saying `message`.
fn error_object(message: &str) -> serde_json::Map<String, Value> {
    match json!({"code": -32603, "message": message}) {
        Value::Object(error) => error,
        _ => serde_json::Map::new(),
    }
}

/// The error of a request the task store could not answer (JSON-RPC internal
/// error).
pub(super) fn unavailable() -> ErrorData {
    ErrorData::internal_error(TASK_STORE_UNAVAILABLE, None)
}

/// The error of a `tasks/*` request for a task this subject cannot see.
pub(super) fn not_found() -> ErrorData {
    ErrorData::invalid_params(TASK_NOT_FOUND, None)
}
