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
    /// The store's own name: where the claims are kept (read at its first
    /// use, so that a server that never asks opens no file for it).
    store_id: std::sync::OnceLock<String>,
    /// This process's board's name, for when the store cannot say its own:
    /// the board then keeps the claims, and a state opens in this process
    /// only.
    fallback_id: String,
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
    /// Writes task `id`'s record, unless the one kept ended already; tells
    /// `done` how it went.
    Put {
        id: String,
        record: TaskRecord,
        done: Option<oneshot::Sender<Result<(), String>>>,
    },
    /// Tells when every write before it is done.
    Flush(oneshot::Sender<()>),
}

/// A task made on the board whose creation has not returned: dropped before
/// [`Made::keep`] (its request went away while the record was written), the
/// task ends cancelled, so its slot is not held for ever.
struct Made<'a> {
    tasks: &'a StoredTasks,
    id: String,
    kept: bool,
}

impl Made<'_> {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Made<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.tasks.finish(&self.id, TaskState::Cancelled);
        }
    }
}

impl StoredTasks {
    /// The board of `limits`, its tasks and claims kept in `store` (opened
    /// at its first use, as every use of the store is). Starts the writer of
    /// records on this runtime.
    pub fn new(store: Arc<Store>, limits: TaskLimits) -> Self {
        let (writes, queue) = mpsc::unbounded_channel();
        tokio::spawn(write_in_order(store.clone(), queue));
        let board = TaskBoard::new(limits);
        let fallback_id = board.id().to_owned();
        Self {
            board,
            store,
            runner: this_process(),
            store_id: std::sync::OnceLock::new(),
            fallback_id,
            writes,
        }
    }

    /// What the board allows.
    pub fn limits(&self) -> TaskLimits {
        self.board.limits()
    }

    /// The store's own name, which approvals whose claims are kept here name:
    /// read (or made) at the first call, a short wait on the file, and kept,
    /// whatever it was, for the life of the process (a state sealed under one
    /// name must open under the same). When the store cannot say its name,
    /// this process's board's, and the board keeps the claims.
    pub fn id(&self) -> &str {
        self.store_id.get_or_init(|| match self.store.store_id() {
            Ok(id) => id,
            Err(reason) => {
                tracing::warn!(reason = %reason, "the store cannot be used for tasks' and approvals' records: they are kept in this process's memory");
                self.fallback_id.clone()
            }
        })
    }

    /// Whether the store could not be used at its first use: the board
    /// alone keeps the tasks and the claims.
    fn in_memory_only(&self) -> bool {
        self.id() == self.fallback_id
    }

    /// A new working task of `subject`, recorded in the store before it runs
    /// (by the one writer, after every record queued before it; a record that
    /// cannot be written is logged: the task runs, and a restart loses it).
    ///
    /// # Errors
    ///
    /// [`TaskRefused`]: as [`TaskBoard::create`].
    pub async fn create(&self, subject: &str) -> Result<TaskView, TaskRefused> {
        let view = self.board.create(subject)?;
        let made = Made {
            tasks: self,
            id: view.id.clone(),
            kept: false,
        };
        let (done, written) = oneshot::channel();
        self.put(subject, &view, Some(done));
        match written.await {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                tracing::warn!(reason = %reason, "a task could not be recorded in the store: it runs, and a restart loses it");
            }
            Err(_) => {
                tracing::warn!(
                    "a task could not be recorded in the store (its writer ended): it runs, and a restart loses it"
                );
            }
        }
        made.keep();
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
        if self.in_memory_only() {
            return Ok(None);
        }
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

    /// Ends task `id`, which runs here, with `state`; when that ended it, its
    /// record follows (written behind, in order).
    pub fn finish(&self, id: &str, state: TaskState) {
        if let Some((subject, view)) = self.board.finish_seen(id, state) {
            self.put(&subject, &view, None);
        }
    }

    /// Cancels task `id` of `subject`: one running here stops (its record
    /// follows); one whose process is gone stays as it is. `false` when not
    /// found.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] when the store does not answer.
    pub async fn cancel(&self, subject: &str, id: &str) -> Result<bool, Unavailable> {
        let (found, cancelled) = self.board.cancel_seen(subject, id);
        if let Some(view) = cancelled {
            self.put(subject, &view, None);
        }
        if found {
            return Ok(true);
        }
        Ok(self.orphan(subject, id).await?.is_some())
    }

    /// As [`TaskBoard::ask`] (a task waits for input only while its process
    /// runs); its record is kept as long as the wait may make it last.
    pub fn ask(&self, id: &str, key: &str, requests: Arc<str>, extend: Duration) -> Answer {
        let answer = self.board.ask(id, key, requests, extend);
        if let Some((subject, view)) = self.board.peek(id) {
            self.put(&subject, &view, None);
        }
        answer
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
        if self.in_memory_only() {
            return Ok(self.board.claim(subject, token, ttl));
        }
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
        for (subject, view) in &cancelled {
            self.put(subject, view, None);
        }
        let (done, flushed) = oneshot::channel();
        if self.writes.send(Write::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, flushed).await;
        }
        cancelled.len()
    }

    /// Queues the record of `subject`'s task `view`, as the board has it.
    fn put(
        &self,
        subject: &str,
        view: &TaskView,
        done: Option<oneshot::Sender<Result<(), String>>>,
    ) {
        let created_ms = millis_since_epoch(view.created);
        let status = match &view.state {
            TaskState::Working | TaskState::InputRequired(_) => TaskStatus::Working,
            TaskState::Completed(text) => TaskStatus::Completed(text.to_string()),
            TaskState::Failed(text) => TaskStatus::Failed(text.to_string()),
            TaskState::Cancelled | TaskState::Lost => TaskStatus::Cancelled,
        };
        let record = TaskRecord {
            subject: subject.to_owned(),
            status,
            created_ms,
            updated_ms: millis_since_epoch(view.updated),
            expires_ms: created_ms.saturating_add(millis(view.ttl)),
            runner: self.runner,
        };
        let _ = self.writes.send(Write::Put {
            id: view.id.clone(),
            record,
            done,
        });
    }
}

/// Writes the records queued in `queue`, one after another, until every
/// sender is gone.
async fn write_in_order(store: Arc<Store>, mut queue: mpsc::UnboundedReceiver<Write>) {
    while let Some(write) = queue.recv().await {
        let (id, record, done) = match write {
            Write::Put { id, record, done } => (id, record, done),
            Write::Flush(done) => {
                let _ = done.send(());
                continue;
            }
        };
        let store = store.clone();
        let written = tokio::task::spawn_blocking(move || store.task_write(&id, |_| Some(record)))
            .await
            .map_err(|error| error.to_string())
            .and_then(|written| written);
        match done {
            Some(done) => {
                let _ = done.send(written);
            }
            None => {
                if let Err(reason) = written {
                    tracing::warn!(reason = %reason, "a task's record could not be written to the store: a restart may read it as lost");
                }
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

/// This process: its PID, start time and the machine's boot.
fn this_process() -> Runner {
    let pid = std::process::id();
    Runner {
        pid,
        started: started(pid).unwrap_or(0),
        boot: boot(),
    }
}

/// Whether the process `runner` names still runs: this boot, its PID there,
/// started when it did. Processes in another PID namespace (another
/// container) cannot be seen: servers sharing a file share the machine's.
fn alive(runner: Runner) -> bool {
    runner.boot == boot() && started(runner.pid).is_some_and(|started| started == runner.started)
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

/// The first 64 bits of the kernel's boot ID, new at each boot (0 if none).
fn boot() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(|id| {
            let digits: String = id
                .chars()
                .filter(char::is_ascii_hexdigit)
                .take(16)
                .collect();
            u64::from_str_radix(&digits, 16).ok()
        })
        .unwrap_or(0)
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
        assert_ne!(me.boot, 0);
        assert!(!alive(Runner {
            started: me.started + 1,
            ..me
        }));
        assert!(!alive(Runner {
            boot: me.boot + 1,
            ..me
        }));
        assert!(!alive(Runner {
            pid: u32::MAX,
            ..me
        }));
    }

    /// A task whose process is gone reads from the store: one that ended with
    /// its result, one still working as lost, to its subject only; one of a
    /// process that still runs is not this process's to show.
    #[tokio::test]
    async fn the_tasks_of_a_process_that_is_gone_read_from_the_store() {
        let store = Arc::new(Store::new(StoreLocation::Memory));
        let tasks = StoredTasks::new(store.clone(), TaskLimits::default());
        let gone = Runner {
            pid: u32::MAX,
            started: 1,
            boot: boot(),
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

    /// A store that cannot be used (its folder cannot be made): the board
    /// keeps the tasks and the claims, an unknown task is not found, and the
    /// name given to approvals stays the board's for the process's life.
    #[tokio::test]
    async fn a_store_that_cannot_be_used_leaves_the_board_in_charge() {
        let store = Arc::new(Store::new(StoreLocation::File(
            "/proc/no-such-folder/store.redb".into(),
        )));
        let tasks = StoredTasks::new(store, TaskLimits::default());
        assert_eq!(tasks.id(), tasks.board.id());
        let ttl = Duration::from_secs(60);
        assert_eq!(tasks.claim("alice", "t", ttl).await, Ok(true));
        assert_eq!(tasks.claim("alice", "t", ttl).await, Ok(false));
        assert_eq!(tasks.get("alice", &"0".repeat(32)).await, Ok(None));
        let made = tasks.create("alice").await.expect("a task");
        assert_eq!(
            tasks
                .get("alice", &made.id)
                .await
                .map(|v| v.map(|v| v.state)),
            Ok(Some(TaskState::Working))
        );
        assert_eq!(tasks.id(), tasks.board.id());
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
            boot: boot(),
        }
    }
}
