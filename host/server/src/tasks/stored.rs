//! The task board with its tasks and claims also kept in the embedded store
//! (`--store FILE`, the default), so that they outlive the process.
//!
//! The board in memory runs this process's tasks as [`TaskBoard`] does; each
//! task's record is written to the store when it is created and when it ends
//! (in order, by one writer), and each single-use token is claimed in the
//! store. After a restart (a SIGKILL included) the tasks of the process that
//! is gone are read from the store: an ended one with its result, one that was
//! still running as lost (`the server running this task stopped before it
//! ended`), to the subject that started it only. A task of another process
//! still running on the same file is not this one's to show: it is not found,
//! as with the board alone. A claim binds every process naming the file.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};

use super::memory::{MAX_CLAIMS_PER_SUBJECT, TaskBoard};
use super::task::{Answer, TaskLimits, TaskRefused, TaskState, TaskView, Unavailable};
use crate::store::{Runner, Store, TaskRecord, TaskStatus};

/// How long a stopping server waits for the records it is still writing.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// The tasks of this process, also kept in the store.
pub struct StoredTasks {
    board: TaskBoard,
    store: Arc<Store>,
    /// This process, as the records name it.
    runner: Runner,
    /// The store's own name: where the claims are kept.
    store_id: String,
    /// The one writer of records, in the order they were made.
    writes: mpsc::UnboundedSender<Write>,
}

impl std::fmt::Debug for StoredTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredTasks")
            .field("store", self.store.location())
            .finish_non_exhaustive()
    }
}

/// What the writer does next.
enum Write {
    /// Ends task `id`'s record with `status` at `updated_ms`, to be kept
    /// until `expires_ms`, unless it ended already.
    End {
        id: String,
        status: TaskStatus,
        updated_ms: u64,
        expires_ms: u64,
    },
    /// Tells when every write before it is done.
    Flush(oneshot::Sender<()>),
}

impl StoredTasks {
    /// The board of `limits`, its tasks and claims kept in `store` (opened
    /// here, on a blocking thread).
    ///
    /// # Errors
    ///
    /// The store cannot be opened, or has no name and cannot be given one.
    pub async fn open(store: Arc<Store>, limits: TaskLimits) -> Result<Self, String> {
        let opened = store.clone();
        let store_id = tokio::task::spawn_blocking(move || opened.store_id())
            .await
            .map_err(|error| error.to_string())??;
        let (writes, queue) = mpsc::unbounded_channel();
        tokio::spawn(write_in_order(store.clone(), queue));
        Ok(Self {
            board: TaskBoard::new(limits),
            store,
            runner: this_process(),
            store_id,
            writes,
        })
    }

    /// What the board allows.
    pub fn limits(&self) -> TaskLimits {
        self.board.limits()
    }

    /// The store's own name, which approvals whose claims are kept here name.
    pub fn id(&self) -> &str {
        &self.store_id
    }

    /// A new working task of `subject`, recorded in the store before it runs
    /// (a record that cannot be written is logged: the task runs, and is lost
    /// to a restart).
    ///
    /// # Errors
    ///
    /// [`TaskRefused`]: as [`TaskBoard::create`].
    pub async fn create(&self, subject: &str) -> Result<TaskView, TaskRefused> {
        let view = self.board.create(subject)?;
        let created_ms = millis_since_epoch(view.created);
        let record = TaskRecord {
            subject: subject.to_owned(),
            status: TaskStatus::Working,
            created_ms,
            updated_ms: created_ms,
            expires_ms: created_ms.saturating_add(millis(view.ttl)),
            runner: self.runner,
        };
        let (store, id) = (self.store.clone(), view.id.clone());
        let written =
            tokio::task::spawn_blocking(move || store.task_write(&id, |_| Some(record))).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                tracing::warn!(reason = %reason, "a task could not be recorded in the store: it runs, and a restart loses it")
            }
            Err(error) => {
                tracing::warn!(reason = %error, "a task could not be recorded in the store: it runs, and a restart loses it")
            }
        }
        Ok(view)
    }

    /// Ties the running execution of task `id` to it.
    pub fn attach(&self, id: &str, abort: tokio::task::AbortHandle) {
        self.board.attach(id, abort);
    }

    /// Task `id` of `subject`: from the board, else from the store when the
    /// process that ran it is gone.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the store does not answer.
    pub async fn get(&self, subject: &str, id: &str) -> Result<Option<TaskView>, Unavailable> {
        if let Some(view) = self.board.get(subject, id) {
            return Ok(Some(view));
        }
        Ok(self
            .orphan(subject, id)
            .await?
            .map(|record| view_of(id, &record)))
    }

    /// Task `id`'s record, when it is `subject`'s and the process that ran it
    /// is gone.
    async fn orphan(&self, subject: &str, id: &str) -> Result<Option<TaskRecord>, Unavailable> {
        let (store, key) = (self.store.clone(), id.to_owned());
        let loaded = tokio::task::spawn_blocking(move || store.task_load(&key))
            .await
            .map_err(|_| Unavailable)?
            .map_err(|reason| {
                tracing::warn!(reason = %reason, "task store unavailable: cannot read a task");
                Unavailable
            })?;
        Ok(loaded.filter(|record| {
            record.subject == subject && record.runner != self.runner && !alive(record.runner)
        }))
    }

    /// Ends task `id`, which runs here, with `state`; its record follows.
    pub fn finish(&self, id: &str, state: TaskState) {
        let status = match &state {
            TaskState::Completed(text) => TaskStatus::Completed(text.to_string()),
            TaskState::Failed(text) => TaskStatus::Failed(text.to_string()),
            TaskState::Cancelled | TaskState::Lost => TaskStatus::Cancelled,
            TaskState::Working | TaskState::InputRequired(_) => return,
        };
        self.board.finish(id, state);
        self.record_end(id, status);
    }

    /// Cancels task `id` of `subject`: one running here stops; one whose
    /// process is gone stays as it is. `false` when not found.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the store does not answer.
    pub async fn cancel(&self, subject: &str, id: &str) -> Result<bool, Unavailable> {
        if self.board.cancel(subject, id) {
            if self
                .board
                .get(subject, id)
                .is_some_and(|view| view.state == TaskState::Cancelled)
            {
                self.record_end(id, TaskStatus::Cancelled);
            }
            return Ok(true);
        }
        Ok(self.orphan(subject, id).await?.is_some())
    }

    /// As [`TaskBoard::ask`]: a task waits for input only while its process
    /// runs.
    pub fn ask(&self, id: &str, key: &str, requests: Arc<str>, extend: Duration) -> Answer {
        self.board.ask(id, key, requests, extend)
    }

    /// As [`TaskBoard::answer`]; a task whose process is gone is found, and
    /// waits for nothing.
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
        if self.board.answer(subject, id, responses) {
            return Ok(true);
        }
        Ok(self.orphan(subject, id).await?.is_some())
    }

    /// As [`TaskBoard::resume`].
    pub fn resume(&self, id: &str, key: &str, waited: Duration) {
        self.board.resume(id, key, waited);
    }

    /// Claims `token` for `subject` for `ttl` in the store: `true` the first
    /// time in any process naming it.
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
        let store = self.store.clone();
        let (subject, token) = (subject.to_owned(), token.to_owned());
        tokio::task::spawn_blocking(move || {
            store.task_claim(&subject, &token, ttl, MAX_CLAIMS_PER_SUBJECT)
        })
        .await
        .map_err(|_| Unavailable)?
        .map_err(|reason| {
            tracing::warn!(reason = %reason, "task store unavailable: cannot claim a single-use token");
            Unavailable
        })
    }

    /// Stops every task running here (the server is ending): they end
    /// `Cancelled`, in the store too (waited for, at most [`FLUSH_TIMEOUT`]).
    pub async fn cancel_all(&self) -> usize {
        let cancelled = self.board.cancel_running();
        for id in &cancelled {
            self.record_end(id, TaskStatus::Cancelled);
        }
        let (done, flushed) = oneshot::channel();
        if self.writes.send(Write::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, flushed).await;
        }
        cancelled.len()
    }

    /// Queues the end of task `id`'s record, as the board has it (when it
    /// changed and until when it is kept).
    fn record_end(&self, id: &str, status: TaskStatus) {
        let Some(view) = self.board.peek(id) else {
            return;
        };
        let created_ms = millis_since_epoch(view.created);
        let _ = self.writes.send(Write::End {
            id: id.to_owned(),
            status,
            updated_ms: millis_since_epoch(view.updated),
            expires_ms: created_ms.saturating_add(millis(view.ttl)),
        });
    }
}

/// Writes the records queued in `queue`, one after another, until every
/// sender is gone.
async fn write_in_order(store: Arc<Store>, mut queue: mpsc::UnboundedReceiver<Write>) {
    while let Some(write) = queue.recv().await {
        let (id, status, updated_ms, expires_ms) = match write {
            Write::End {
                id,
                status,
                updated_ms,
                expires_ms,
            } => (id, status, updated_ms, expires_ms),
            Write::Flush(done) => {
                let _ = done.send(());
                continue;
            }
        };
        let store = store.clone();
        let written = tokio::task::spawn_blocking(move || {
            store.task_write(&id, |current| {
                current.map(|record| TaskRecord {
                    status,
                    updated_ms,
                    expires_ms,
                    ..record
                })
            })
        })
        .await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                tracing::warn!(reason = %reason, "a task's end could not be recorded in the store: a restart reads it as lost")
            }
            Err(error) => {
                tracing::warn!(reason = %error, "a task's end could not be recorded in the store: a restart reads it as lost")
            }
        }
    }
}

/// A record as a task's view: one still working whose process is gone is
/// lost.
fn view_of(id: &str, record: &TaskRecord) -> TaskView {
    let state = match &record.status {
        TaskStatus::Working => TaskState::Lost,
        TaskStatus::Completed(text) => TaskState::Completed(Arc::from(text.as_str())),
        TaskStatus::Failed(text) => TaskState::Failed(Arc::from(text.as_str())),
        TaskStatus::Cancelled => TaskState::Cancelled,
    };
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    TaskView {
        id: id.to_owned(),
        state,
        created: at(record.created_ms),
        updated: at(record.updated_ms),
        ttl: Duration::from_millis(record.expires_ms.saturating_sub(record.created_ms)),
    }
}

/// This process: its PID and start time.
fn this_process() -> Runner {
    let pid = std::process::id();
    Runner {
        pid,
        started: started(pid).unwrap_or(0),
    }
}

/// Whether the process `runner` names still runs (its PID is there, started
/// when it did).
fn alive(runner: Runner) -> bool {
    started(runner.pid).is_some_and(|started| started == runner.started)
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`'s
/// 22nd field); `None` when there is no such process.
fn started(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything:
    // the fields after its last `)` are plain.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn millis_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreLocation, now_ms};

    #[test]
    fn this_process_is_alive_and_a_pid_started_at_another_time_is_not() {
        let me = this_process();
        assert_ne!(me.started, 0);
        assert!(alive(me));
        assert!(!alive(Runner {
            started: me.started + 1,
            ..me
        }));
        assert!(!alive(Runner {
            pid: u32::MAX,
            started: 1
        }));
    }

    /// A task whose process is gone reads from the store: one that ended with
    /// its result, one still working as lost, to its subject only; one of a
    /// process that still runs is not this process's to show.
    #[tokio::test]
    async fn the_tasks_of_a_process_that_is_gone_read_from_the_store() {
        let store = Arc::new(Store::new(StoreLocation::Memory));
        let tasks = StoredTasks::open(store.clone(), TaskLimits::default())
            .await
            .expect("open");
        let gone = Runner {
            pid: u32::MAX,
            started: 1,
        };
        let later = now_ms() + 60_000;
        let write = |id: &str, status: TaskStatus, runner: Runner| {
            let record = TaskRecord {
                subject: "alice".to_owned(),
                status,
                created_ms: 1_000,
                updated_ms: 2_000,
                expires_ms: later,
                runner,
            };
            store.task_write(id, |_| Some(record)).expect("write");
        };
        write("done", TaskStatus::Completed("{\"r\":1}".to_owned()), gone);
        write("running", TaskStatus::Working, gone);
        write("elsewhere", TaskStatus::Working, this_process_other());
        let done = tasks.get("alice", "done").await.expect("read");
        assert_eq!(
            done.map(|view| view.state),
            Some(TaskState::Completed(Arc::from("{\"r\":1}")))
        );
        let running = tasks.get("alice", "running").await.expect("read");
        assert_eq!(running.map(|view| view.state), Some(TaskState::Lost));
        assert_eq!(tasks.get("bob", "done").await, Ok(None));
        assert_eq!(tasks.get("alice", "elsewhere").await, Ok(None));
        assert_eq!(tasks.cancel("alice", "running").await, Ok(true));
        assert_eq!(tasks.cancel("bob", "running").await, Ok(false));
        // A task made here is recorded, and its end too.
        let made = tasks.create("alice").await.expect("a task");
        tasks.finish(&made.id, TaskState::Completed(Arc::from("{}")));
        assert_eq!(tasks.cancel_all().await, 0);
        let record = store.task_load(&made.id).expect("read").expect("a record");
        assert_eq!(
            (record.status, record.runner),
            (TaskStatus::Completed("{}".to_owned()), tasks.runner)
        );
        assert!(tasks.claim("alice", "t", Duration::from_secs(60)).await == Ok(true));
        assert!(tasks.claim("alice", "t", Duration::from_secs(60)).await == Ok(false));
    }

    /// Another process that runs: the parent of this test process.
    fn this_process_other() -> Runner {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(1);
        Runner {
            pid: ppid,
            started: started(ppid).unwrap_or(0),
        }
    }
}
