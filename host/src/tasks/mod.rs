//! Executions that outlive their request: the task store.
//!
//! A client may ask for an `execute` to run as a task (the MCP Tasks extension):
//! the answer is the task's handle at once, and the client asks for its status
//! and result, or cancels it, in later requests. The store keeps each task's
//! state under a random ID, for the subject that started it only: another
//! subject's task is not found. A finished task is kept `--task-ttl`; at most
//! `--max-tasks` are kept (the oldest ended ones dropped first, a running one
//! never for another), and a server runs at most half of
//! `--max-concurrent-executions` tasks at once, so that direct calls keep the
//! other half. Results are opaque JSON text: what a result looks like on the
//! wire is the MCP layer's business.
//!
//! A running task may wait for input ([`TaskStore::ask`]): it shows the
//! requests (opaque JSON text: an `inputRequests` object) until an answer comes
//! ([`TaskStore::answer`], on any replica) or the asker gives up
//! ([`TaskStore::resume`]); its time budget, and how long it is kept, grow by
//! the longest the wait may take.
//!
//! Two stores: [`TaskBoard`], in this process's memory (the default), and
//! [`RedisTasks`] (`--task-store redis://`), shared by the replicas behind a load
//! balancer, so that any of them answers status, result, input and cancel for a
//! task another runs.

mod memory;
mod redis;

pub use memory::{MAX_CLAIMS, MAX_CLAIMS_PER_SUBJECT, TaskBoard};
pub use redis::{
    ANSWER_CHANNEL, CANCEL_CHANNEL, ConnectError, RedisTasks, STALE_AFTER,
    check_url as check_redis_url, redacted,
};

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
    /// It never ended: the server running it stopped (Redis only: a task
    /// still working well past its time budget).
    Lost,
}

impl TaskState {
    /// Whether it will never change again.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, TaskState::Working | TaskState::InputRequired(_))
    }

    /// Bytes of the result or error it holds (the requests of a task waiting
    /// for input are not counted: they go when it goes on).
    fn bytes(&self) -> usize {
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
/// [`TaskStore::resume`] settles it): its key, what the task's budget grew by
/// for it, and where the answer goes (taken when it comes).
struct Question {
    key: String,
    reserved: Duration,
    answer: Option<tokio::sync::oneshot::Sender<serde_json::Value>>,
}

impl Question {
    /// What a task's budget has grown by, `extended`, once the wait for this
    /// question ended after `waited`: the time waited in place of what was
    /// reserved.
    fn settle(&self, extended: Duration, waited: Duration) -> Duration {
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
fn new_id() -> Result<String, TaskRefused> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| TaskRefused::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `id` looks like an ID [`new_id`] draws (32 lowercase hex digits):
/// anything else is not found without asking the store.
fn is_task_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Where tasks are kept: this process's memory, or Redis shared by replicas.
#[derive(Debug)]
pub enum TaskStore {
    /// In memory (the default): tasks live and die with this server.
    Memory(TaskBoard),
    /// In Redis (`--task-store`): every replica reads every task; each runs
    /// its own.
    Redis(RedisTasks),
}

impl TaskStore {
    /// What the store allows.
    pub fn limits(&self) -> TaskLimits {
        match self {
            TaskStore::Memory(board) => board.limits(),
            TaskStore::Redis(redis) => redis.limits(),
        }
    }

    /// A new working task of `subject`, to run on this server.
    ///
    /// # Errors
    ///
    /// [`TaskRefused`]: a limit, no random ID, or the store unavailable.
    pub async fn create(&self, subject: &str) -> Result<TaskView, TaskRefused> {
        match self {
            TaskStore::Memory(board) => board.create(subject),
            TaskStore::Redis(redis) => redis.create(subject).await,
        }
    }

    /// Ties the running execution of task `id` to it, so that cancelling stops
    /// it; a task already cancelled stops it at once.
    pub fn attach(&self, id: &str, abort: tokio::task::AbortHandle) {
        match self {
            TaskStore::Memory(board) => board.attach(id, abort),
            TaskStore::Redis(redis) => redis.attach(id, abort),
        }
    }

    /// Task `id` of `subject`; `None` when it is unknown, another subject's or
    /// expired.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the store does not answer.
    pub async fn get(&self, subject: &str, id: &str) -> Result<Option<TaskView>, Unavailable> {
        if !is_task_id(id) {
            return Ok(None);
        }
        match self {
            TaskStore::Memory(board) => Ok(board.get(subject, id)),
            TaskStore::Redis(redis) => redis.get(subject, id).await,
        }
    }

    /// Ends task `id`, which runs here, with `state`, unless it ended already
    /// (a cancelled task stays cancelled). In Redis the result is written in
    /// the background, retried while the store is unavailable (for at most
    /// `--task-ttl`), so that a result is not lost to a short outage.
    pub fn finish(&self, id: &str, state: TaskState) {
        match self {
            TaskStore::Memory(board) => board.finish(id, state),
            TaskStore::Redis(redis) => redis.finish(id, state),
        }
    }

    /// Cancels task `id` of `subject`, wherever it runs (in Redis the running
    /// server hears of it by pub/sub); an ended one stays as it is. `false` when
    /// it is not found.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the store does not answer.
    pub async fn cancel(&self, subject: &str, id: &str) -> Result<bool, Unavailable> {
        if !is_task_id(id) {
            return Ok(false);
        }
        match self {
            TaskStore::Memory(board) => Ok(board.cancel(subject, id)),
            TaskStore::Redis(redis) => redis.cancel(subject, id).await,
        }
    }

    /// Marks task `id`, which runs here, as waiting for input: it shows
    /// `requests` (an `inputRequests` object as JSON text, whose one key is
    /// `key`) until [`TaskStore::answer`] delivers the response for `key` to
    /// the returned [`Answer`], or [`TaskStore::resume`]. Its time budget and
    /// how long it is kept grow by `extend` (the longest the wait may take).
    /// A task that ended meanwhile gets an answer that never comes.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the store does not answer.
    pub async fn ask(
        &self,
        id: &str,
        key: &str,
        requests: Arc<str>,
        extend: Duration,
    ) -> Result<Answer, Unavailable> {
        match self {
            TaskStore::Memory(board) => Ok(board.ask(id, key, requests, extend)),
            TaskStore::Redis(redis) => redis.ask(id, key, requests, extend).await,
        }
    }

    /// Delivers the client's `responses` (by request key) to task `id` of
    /// `subject`, wherever it runs: the one for its outstanding request, if
    /// any, goes to the asker and the task works again; the rest are ignored.
    /// `false` when the task is not found.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the store does not answer.
    pub async fn answer(
        &self,
        subject: &str,
        id: &str,
        responses: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, Unavailable> {
        if !is_task_id(id) {
            return Ok(false);
        }
        match self {
            TaskStore::Memory(board) => Ok(board.answer(subject, id, responses)),
            TaskStore::Redis(redis) => redis.answer(subject, id, responses).await,
        }
    }

    /// Task `id`, which runs here, no longer waits for the answer to `key` (it
    /// came, or the asker gave up, after `waited`): it works again, and its
    /// budget grew by the time waited rather than by what [`TaskStore::ask`]
    /// reserved. In Redis written in the background.
    pub fn resume(&self, id: &str, key: &str, waited: Duration) {
        match self {
            TaskStore::Memory(board) => board.resume(id, key, waited),
            TaskStore::Redis(redis) => redis.resume(id, key, waited),
        }
    }

    /// Where the single-use tokens it claims are remembered: `Some` with the
    /// ID of this process's board when in memory (a token claimed there is
    /// unknown to any other process, and to this one after a restart), `None`
    /// when in Redis, which replicas share and which outlives them.
    pub fn claims_here(&self) -> Option<&str> {
        match self {
            TaskStore::Memory(board) => Some(board.id()),
            TaskStore::Redis(_) => None,
        }
    }

    /// Claims the single-use `token` of `subject` for `ttl`: `true` the first
    /// time, `false` after (on any replica sharing Redis). Approvals'
    /// `requestState` are answered once this way. In memory a subject holds at
    /// most [`MAX_CLAIMS_PER_SUBJECT`] at once.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the store does not answer.
    pub async fn claim(
        &self,
        subject: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, Unavailable> {
        match self {
            TaskStore::Memory(board) => Ok(board.claim(subject, token, ttl)),
            TaskStore::Redis(redis) => redis.claim(token, ttl).await,
        }
    }

    /// Stops every task running on this server (it is ending): they end
    /// `Cancelled`. Returns how many there were.
    pub async fn cancel_all(&self) -> usize {
        match self {
            TaskStore::Memory(board) => board.cancel_all(),
            TaskStore::Redis(redis) => redis.cancel_all().await,
        }
    }
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
