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
//! Three stores: [`TaskBoard`], in this process's memory (`--store memory`);
//! [`StoredTasks`], the board with its tasks and claims also kept in the
//! embedded store (`--store FILE`, the default), so that they outlive a
//! restart; and `RedisTasks` (`--task-store redis://`, feature `redis`),
//! shared by the replicas behind a load balancer, so that any of them answers
//! status, result, input and cancel for a task another runs.

mod memory;
#[cfg(feature = "redis")]
mod redis;
mod stored;
mod task;

#[cfg(feature = "redis")]
pub use crate::store::{ConnectError, check_redis_url, redacted};
pub use memory::{MAX_CLAIMS, MAX_CLAIMS_PER_SUBJECT, TaskBoard};
#[cfg(feature = "redis")]
pub use redis::{ANSWER_CHANNEL, CANCEL_CHANNEL, RedisTasks, STALE_AFTER};
pub use stored::StoredTasks;

use task::is_task_id;
pub use task::{
    Answer, DEFAULT_MAX_TASK_TIME, DEFAULT_MAX_TASKS, DEFAULT_TASK_TTL, MAX_RESPONSES,
    MAX_STORED_BYTES, MAX_TASKS_FLAG, RUNNING_TASKS_FLAG, TASK_TIME_FLAG, TaskLimits, TaskRefused,
    TaskState, TaskView, Unavailable,
};

use std::sync::Arc;
use std::time::Duration;

/// Where tasks are kept: this process's memory, or Redis shared by replicas.
/// Non-exhaustive: the Redis store is the feature `redis`, and a match written
/// without it must still compile where another crate turns it on.
#[derive(Debug)]
#[non_exhaustive]
pub enum TaskStore {
    /// In memory: tasks live and die with this server.
    Memory(TaskBoard),
    /// In memory and in the embedded store (`--store FILE`, the default):
    /// this server runs them, and their records outlive it.
    Stored(StoredTasks),
    /// In Redis (`--task-store`): every replica reads every task; each runs
    /// its own.
    #[cfg(feature = "redis")]
    Redis(RedisTasks),
}

impl TaskStore {
    /// What the store allows.
    pub fn limits(&self) -> TaskLimits {
        match self {
            TaskStore::Memory(board) => board.limits(),
            TaskStore::Stored(stored) => stored.limits(),
            #[cfg(feature = "redis")]
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
            TaskStore::Stored(stored) => stored.create(subject).await,
            #[cfg(feature = "redis")]
            TaskStore::Redis(redis) => redis.create(subject).await,
        }
    }

    /// Ties the running execution of task `id` to it, so that cancelling stops
    /// it; a task already cancelled stops it at once.
    pub fn attach(&self, id: &str, abort: tokio::task::AbortHandle) {
        match self {
            TaskStore::Memory(board) => board.attach(id, abort),
            TaskStore::Stored(stored) => stored.attach(id, abort),
            #[cfg(feature = "redis")]
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
            TaskStore::Stored(stored) => stored.get(subject, id).await,
            #[cfg(feature = "redis")]
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
            TaskStore::Stored(stored) => stored.finish(id, state),
            #[cfg(feature = "redis")]
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
            TaskStore::Stored(stored) => stored.cancel(subject, id).await,
            #[cfg(feature = "redis")]
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
            TaskStore::Stored(stored) => Ok(stored.ask(id, key, requests, extend)),
            #[cfg(feature = "redis")]
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
            TaskStore::Stored(stored) => stored.answer(subject, id, responses).await,
            #[cfg(feature = "redis")]
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
            TaskStore::Stored(stored) => stored.resume(id, key, waited),
            #[cfg(feature = "redis")]
            TaskStore::Redis(redis) => redis.resume(id, key, waited),
        }
    }

    /// Where the single-use tokens it claims are remembered: `Some` with the
    /// ID of this process's board when in memory (a token claimed there is
    /// unknown to any other process, and to this one after a restart), or of
    /// the embedded store (known to every process naming its file, after a
    /// restart too, and to no other machine), `None` when in Redis, which
    /// replicas share and which outlives them.
    pub fn claims_here(&self) -> Option<&str> {
        match self {
            TaskStore::Memory(board) => Some(board.id()),
            TaskStore::Stored(stored) => Some(stored.id()),
            #[cfg(feature = "redis")]
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
            TaskStore::Stored(stored) => stored.claim(subject, token, ttl).await,
            #[cfg(feature = "redis")]
            TaskStore::Redis(redis) => redis.claim(token, ttl).await,
        }
    }

    /// Stops every task running on this server (it is ending): they end
    /// `Cancelled`. Returns how many there were.
    pub async fn cancel_all(&self) -> usize {
        match self {
            TaskStore::Memory(board) => board.cancel_all(),
            TaskStore::Stored(stored) => stored.cancel_all().await,
            #[cfg(feature = "redis")]
            TaskStore::Redis(redis) => redis.cancel_all().await,
        }
    }
}
