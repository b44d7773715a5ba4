//! What a task is, whichever store keeps it: its limits, state and view, the
//! questions it waits on, why one is refused, and its ID.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The default `--max-task-time`: how long a task's execution may run.
pub const DEFAULT_MAX_TASK_TIME: Duration = Duration::from_secs(5 * 60);
/// The default `--task-ttl`: how long a finished task is kept.
pub const DEFAULT_TASK_TTL: Duration = Duration::from_secs(10 * 60);
/// The default `--max-tasks`: how many tasks the board holds.
pub const DEFAULT_MAX_TASKS: usize = 1000;
/// Most bytes of results the board keeps together; past it the oldest ended
/// tasks go first.
pub const MAX_STORED_BYTES: usize = 256 * 1024 * 1024;
/// The flag of a task's time budget, reported as the limit that fired.
pub const TASK_TIME_FLAG: &str = "--max-task-time";
/// The flag reported when the board is full of running tasks.
pub const MAX_TASKS_FLAG: &str = "--max-tasks";
/// The flag reported when as many tasks run as may at once (half the execution
/// slots: direct calls keep the other half).
pub const RUNNING_TASKS_FLAG: &str = "--max-concurrent-executions";

/// What the board allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskLimits {
    /// How long a task's execution may run (its own time budget, in place of
    /// `--max-execution-time`; waiting for a slot counts).
    pub max_task_time: Duration,
    /// How long a finished task (and its result) is kept.
    pub ttl: Duration,
    /// How many tasks are kept at once, running or ended.
    pub max_tasks: usize,
    /// How many tasks may run at once: half of `--max-concurrent-executions`
    /// (at least one), so that a flood of tasks leaves direct calls the rest.
    pub max_running: usize,
    /// Most bytes of results kept together ([`MAX_STORED_BYTES`]); past it
    /// the oldest ended tasks go first.
    pub max_stored_bytes: usize,
}

impl TaskLimits {
    /// How many tasks one subject may run at once on one server: half of
    /// [`TaskLimits::max_running`] (at least one), so that no subject takes
    /// every task slot from the others (issue 49, F7).
    pub fn max_running_per_subject(&self) -> usize {
        (self.max_running / 2).max(1)
    }
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self {
            max_task_time: DEFAULT_MAX_TASK_TIME,
            ttl: DEFAULT_TASK_TTL,
            max_tasks: DEFAULT_MAX_TASKS,
            max_running: 4,
            max_stored_bytes: MAX_STORED_BYTES,
        }
    }
}

/// Where a task stands.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    /// Its execution runs.
    Working,
    /// Its execution runs and waits for input: these requests, as JSON text
    /// (an `inputRequests` object).
    InputRequired(Arc<str>),
    /// It ended with this result, as JSON text (a tool result: an execution
    /// that failed is one too).
    Completed(Arc<str>),
    /// It ended without a result: this error, as JSON text.
    Failed(Arc<str>),
    /// It was cancelled before it ended.
    Cancelled,
    /// It never ended: the server running it stopped (in Redis, a task still
    /// working well past its time budget; in the embedded store, one still
    /// working whose process is gone).
    Lost,
}

impl TaskState {
    /// Whether it will never change again.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, TaskState::Working | TaskState::InputRequired(_))
    }

    /// Bytes of the result or error it holds (the requests of a task waiting
    /// for input are not counted: they go when it goes on).
    pub(super) fn bytes(&self) -> usize {
        match self {
            TaskState::Completed(text) | TaskState::Failed(text) => text.len(),
            TaskState::Working
            | TaskState::InputRequired(_)
            | TaskState::Cancelled
            | TaskState::Lost => 0,
        }
    }
}

/// A task as the board reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    /// Its ID: 128 random bits, in hex.
    pub id: String,
    /// Where it stands.
    pub state: TaskState,
    /// When it was created.
    pub created: SystemTime,
    /// When its state last changed.
    pub updated: SystemTime,
    /// How long after `created` it may still be read: its time budget (grown
    /// by its waits for input) and then the TTL while it runs, its run and then
    /// the TTL once it ended.
    pub ttl: Duration,
}

/// The answer a task waiting for input gets: the response to its request, as
/// the client sent it. Dropped without one (the task ended meanwhile, or the
/// store went away), the wait ends at once.
pub type Answer = tokio::sync::oneshot::Receiver<serde_json::Value>;

/// Most responses of one `tasks/update` looked at: a task asks one question at
/// a time, so the rest are for requests that are not outstanding.
pub const MAX_RESPONSES: usize = 16;

/// The question a running task waits on (or waited on, until
/// [`TaskStore::resume`](super::TaskStore::resume) settles it): its key, what the task's budget grew by
/// for it, and where the answer goes (taken when it comes).
pub(super) struct Question {
    pub(super) key: String,
    pub(super) reserved: Duration,
    pub(super) answer: Option<tokio::sync::oneshot::Sender<serde_json::Value>>,
}

impl Question {
    /// What a task's budget has grown by, `extended`, once the wait for this
    /// question ended after `waited`: the time waited in place of what was
    /// reserved.
    pub(super) fn settle(&self, extended: Duration, waited: Duration) -> Duration {
        extended.saturating_sub(self.reserved) + waited.min(self.reserved)
    }
}

/// Why no task was made: the error the client reads names the flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskRefused {
    /// As many tasks run as may at once.
    #[error("as many tasks run as may at once ({RUNNING_TASKS_FLAG})")]
    Running,
    /// The board is full of running tasks.
    #[error("the task board is full of running tasks ({MAX_TASKS_FLAG})")]
    Full,
    /// No random ID could be drawn.
    #[error("no random task ID")]
    Random,
    /// The task store did not answer (Redis is down or unreachable).
    #[error("the task store is unavailable")]
    Unavailable,
}

impl TaskRefused {
    /// The flag of the limit that refused it.
    pub fn flag(self) -> Option<&'static str> {
        match self {
            TaskRefused::Running => Some(RUNNING_TASKS_FLAG),
            TaskRefused::Full => Some(MAX_TASKS_FLAG),
            TaskRefused::Random | TaskRefused::Unavailable => None,
        }
    }
}

/// The task store did not answer: Redis is down or unreachable (the reason is
/// logged, not told to the client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the task store is unavailable")]
pub struct Unavailable;

/// A new task ID: 128 random bits, in hex.
pub(super) fn new_id() -> Result<String, TaskRefused> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| TaskRefused::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `id` looks like an ID [`new_id`] draws (32 lowercase hex digits):
/// anything else is not found without asking the store.
pub(super) fn is_task_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_the_store_draws_are_looked_up() {
        let id = new_id().unwrap();
        assert!(is_task_id(&id), "{id}");
        for other in [
            "",
            "0123",
            &id.to_uppercase(),
            &format!("{id}0"),
            &"g".repeat(32),
        ] {
            assert!(!is_task_id(other), "{other}");
        }
    }
}
