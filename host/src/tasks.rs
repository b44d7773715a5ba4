//! Executions that outlive their request: the task board.
//!
//! A client may ask for an `execute` to run as a task (the MCP Tasks extension):
//! the answer is the task's handle at once, and the client asks for its status
//! and result, or cancels it, in later requests. The board keeps each task's
//! state under a random ID, for the subject that started it only: another
//! subject's task is not found. A finished task is kept `--task-ttl`, and the
//! board holds at most `--max-tasks` (the oldest dropped first; a running one
//! dropped is cancelled). It stores results as opaque JSON: what a result looks
//! like on the wire is the MCP layer's business.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value as Json;

/// The default `--max-task-time`: how long a task's execution may run.
pub const DEFAULT_MAX_TASK_TIME: Duration = Duration::from_secs(5 * 60);
/// The default `--task-ttl`: how long a finished task is kept.
pub const DEFAULT_TASK_TTL: Duration = Duration::from_secs(10 * 60);
/// The default `--max-tasks`: how many tasks the board holds.
pub const DEFAULT_MAX_TASKS: usize = 1000;
/// The flag of a task's time budget, reported as the limit that fired.
pub const TASK_TIME_FLAG: &str = "--max-task-time";

/// What the board allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskLimits {
    /// How long a task's execution may run (its own time budget, in place of
    /// `--max-execution-time`).
    pub max_task_time: Duration,
    /// How long a finished task (and its result) is kept.
    pub ttl: Duration,
    /// How many tasks are kept at once.
    pub max_tasks: usize,
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self {
            max_task_time: DEFAULT_MAX_TASK_TIME,
            ttl: DEFAULT_TASK_TTL,
            max_tasks: DEFAULT_MAX_TASKS,
        }
    }
}

/// Where a task stands.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    /// Its execution runs.
    Working,
    /// It ended with this result (a tool result: an execution that failed is one
    /// too).
    Completed(Json),
    /// It ended without a result: this error.
    Failed(Json),
    /// It was cancelled before it ended.
    Cancelled,
}

impl TaskState {
    /// Whether it will never change again.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, TaskState::Working)
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
    /// How long after `created` it may still be read: its time budget and then
    /// the TTL while it runs, its run and then the TTL once it ended.
    pub ttl: Duration,
}

/// One task on the board.
struct Entry {
    subject: String,
    state: TaskState,
    created: SystemTime,
    updated: SystemTime,
    /// When it ended, on this process's clock (expiry is measured from here).
    ended: Option<Instant>,
    /// Stops its execution (a dropped future cancels it).
    abort: Option<tokio::task::AbortHandle>,
}

/// The tasks of this server, in memory.
pub struct TaskBoard {
    limits: TaskLimits,
    inner: Mutex<Board>,
}

#[derive(Default)]
struct Board {
    entries: HashMap<String, Entry>,
    /// IDs in creation order, for dropping the oldest.
    order: VecDeque<String>,
}

impl std::fmt::Debug for TaskBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskBoard")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Why a task could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// No random ID could be drawn.
    #[error("no random task ID: {0}")]
    Random(String),
}

impl TaskBoard {
    /// An empty board with `limits`.
    pub fn new(limits: TaskLimits) -> Self {
        Self {
            limits,
            inner: Mutex::new(Board::default()),
        }
    }

    /// What it allows.
    pub fn limits(&self) -> TaskLimits {
        self.limits
    }

    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        // A panic while holding the lock leaves plain data behind: keep serving.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new working task of `subject`. The oldest tasks go (expired ones first)
    /// to keep at most `max_tasks`; a running one that goes is cancelled.
    ///
    /// # Errors
    ///
    /// [`TaskError::Random`] when the system has no randomness to give.
    pub fn create(&self, subject: &str) -> Result<TaskView, TaskError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| TaskError::Random(e.to_string()))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = SystemTime::now();
        let mut board = self.board();
        self.expire(&mut board);
        while board.entries.len() >= self.limits.max_tasks.max(1) {
            let Some(oldest) = board.order.pop_front() else {
                break;
            };
            if let Some(entry) = board.entries.remove(&oldest)
                && let Some(abort) = entry.abort
            {
                abort.abort();
            }
        }
        board.entries.insert(
            id.clone(),
            Entry {
                subject: subject.to_owned(),
                state: TaskState::Working,
                created: now,
                updated: now,
                ended: None,
                abort: None,
            },
        );
        board.order.push_back(id.clone());
        Ok(TaskView {
            id,
            state: TaskState::Working,
            created: now,
            updated: now,
            ttl: self.limits.max_task_time + self.limits.ttl,
        })
    }

    /// Ties the running execution of task `id` to it, so that cancelling stops
    /// it. A task already cancelled (or gone) stops it at once.
    pub fn attach(&self, id: &str, abort: tokio::task::AbortHandle) {
        let mut board = self.board();
        match board.entries.get_mut(id) {
            Some(entry) if entry.state == TaskState::Working => entry.abort = Some(abort),
            Some(_) | None => abort.abort(),
        }
    }

    /// Task `id` of `subject`, unless it is unknown, another subject's or
    /// expired.
    pub fn get(&self, subject: &str, id: &str) -> Option<TaskView> {
        let mut board = self.board();
        self.expire(&mut board);
        let entry = board.entries.get(id).filter(|e| e.subject == subject)?;
        Some(self.view(id, entry))
    }

    /// Ends task `id` with `state`, unless it ended already (a cancelled task
    /// stays cancelled) or is gone.
    pub fn finish(&self, id: &str, state: TaskState) {
        let mut board = self.board();
        if let Some(entry) = board.entries.get_mut(id)
            && entry.state == TaskState::Working
        {
            entry.state = state;
            entry.updated = SystemTime::now();
            entry.ended = Some(Instant::now());
            entry.abort = None;
        }
    }

    /// Cancels task `id` of `subject`: a working one is `Cancelled` at once and
    /// its execution stopped (a native call in flight is abandoned as at a
    /// deadline); an ended one stays as it is. `false` when it is not found.
    pub fn cancel(&self, subject: &str, id: &str) -> bool {
        let mut board = self.board();
        self.expire(&mut board);
        let Some(entry) = board.entries.get_mut(id).filter(|e| e.subject == subject) else {
            return false;
        };
        if entry.state == TaskState::Working {
            entry.state = TaskState::Cancelled;
            entry.updated = SystemTime::now();
            entry.ended = Some(Instant::now());
            if let Some(abort) = entry.abort.take() {
                abort.abort();
            }
        }
        true
    }

    /// How many tasks are on the board.
    pub fn len(&self) -> usize {
        self.board().entries.len()
    }

    /// Whether the board is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the tasks that ended more than the TTL ago.
    fn expire(&self, board: &mut Board) {
        let ttl = self.limits.ttl;
        let expired = |entry: &Entry| entry.ended.is_some_and(|ended| ended.elapsed() >= ttl);
        if !board.entries.values().any(expired) {
            return;
        }
        board.entries.retain(|_, entry| !expired(entry));
        let Board { entries, order } = board;
        order.retain(|id| entries.contains_key(id));
    }

    fn view(&self, id: &str, entry: &Entry) -> TaskView {
        let ttl = match entry.ended {
            None => self.limits.max_task_time + self.limits.ttl,
            Some(_) => {
                entry
                    .updated
                    .duration_since(entry.created)
                    .unwrap_or_default()
                    + self.limits.ttl
            }
        };
        TaskView {
            id: id.to_owned(),
            state: entry.state.clone(),
            created: entry.created,
            updated: entry.updated,
            ttl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(max_tasks: usize, ttl: Duration) -> TaskBoard {
        TaskBoard::new(TaskLimits {
            max_task_time: Duration::from_secs(60),
            ttl,
            max_tasks,
        })
    }

    #[test]
    fn a_task_is_its_subject_s_only() {
        let board = board(10, Duration::from_secs(60));
        let task = board.create("ada").unwrap();
        assert_eq!(task.id.len(), 32);
        assert_eq!(task.state, TaskState::Working);
        assert_eq!(task.ttl, Duration::from_secs(120));
        assert_eq!(
            board.get("ada", &task.id).map(|t| t.state),
            Some(TaskState::Working)
        );
        assert_eq!(board.get("bob", &task.id), None);
        assert!(!board.cancel("bob", &task.id));
        assert_eq!(board.get("ada", "nope"), None);
        board.finish(&task.id, TaskState::Completed(serde_json::json!({"x": 1})));
        let done = board.get("ada", &task.id).unwrap();
        assert_eq!(
            done.state,
            TaskState::Completed(serde_json::json!({"x": 1}))
        );
        assert!(done.updated >= done.created);
    }

    #[test]
    fn cancel_ends_a_working_task_and_leaves_an_ended_one() {
        let board = board(10, Duration::from_secs(60));
        let task = board.create("ada").unwrap();
        assert!(board.cancel("ada", &task.id));
        assert_eq!(
            board.get("ada", &task.id).map(|t| t.state),
            Some(TaskState::Cancelled)
        );
        // Its execution finishing later changes nothing.
        board.finish(&task.id, TaskState::Completed(serde_json::json!(1)));
        assert_eq!(
            board.get("ada", &task.id).map(|t| t.state),
            Some(TaskState::Cancelled)
        );
        let done = board.create("ada").unwrap();
        board.finish(
            &done.id,
            TaskState::Failed(serde_json::json!({"code": -32603})),
        );
        assert!(board.cancel("ada", &done.id));
        assert_eq!(
            board.get("ada", &done.id).map(|t| t.state),
            Some(TaskState::Failed(serde_json::json!({"code": -32603})))
        );
    }

    #[test]
    fn the_oldest_task_goes_when_the_board_is_full() {
        let board = board(2, Duration::from_secs(60));
        let first = board.create("ada").unwrap();
        let second = board.create("ada").unwrap();
        let third = board.create("ada").unwrap();
        assert_eq!(board.len(), 2);
        assert_eq!(board.get("ada", &first.id), None);
        assert!(board.get("ada", &second.id).is_some());
        assert!(board.get("ada", &third.id).is_some());
    }

    #[test]
    fn an_ended_task_expires_after_the_ttl_a_working_one_does_not() {
        let board = board(10, Duration::ZERO);
        let working = board.create("ada").unwrap();
        let ended = board.create("ada").unwrap();
        board.finish(&ended.id, TaskState::Completed(serde_json::json!(1)));
        assert_eq!(board.get("ada", &ended.id), None);
        assert!(board.get("ada", &working.id).is_some());
        assert_eq!(board.len(), 1);
    }

    #[tokio::test]
    async fn cancelling_stops_the_attached_execution() {
        let board = board(10, Duration::from_secs(60));
        let task = board.create("ada").unwrap();
        let running = tokio::spawn(std::future::pending::<()>());
        board.attach(&task.id, running.abort_handle());
        assert!(board.cancel("ada", &task.id));
        assert!(running.await.is_err_and(|e| e.is_cancelled()));
        // Attached after it was cancelled: stopped at once.
        let late = tokio::spawn(std::future::pending::<()>());
        board.attach(&task.id, late.abort_handle());
        assert!(late.await.is_err_and(|e| e.is_cancelled()));
    }
}
