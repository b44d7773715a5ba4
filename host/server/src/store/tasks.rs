//! The tasks and the approvals' single-use claims in the embedded database,
//! so that they outlive the process that made them: each task's record (its
//! subject, where it stands, its result, and which process runs it), and each
//! claimed token until it expires. A write removes what is past its time.
//!
//! The records are plain data; what a task is and who may read it is the task
//! store's business (`tasks/stored.rs`). Every call blocks: it is made on a
//! blocking thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::{ReadableDatabase, ReadableTable, TableDefinition, TableError};
use serde::{Deserialize, Serialize};

use super::database::Store;
use super::entry::now_ms;
use super::expiry::Expiring;
use super::state::{Until, begin_write, commit};
use crate::source::Cancel;

/// Task ID → its record as JSON ([`TaskRecord`]), and when it goes.
const TASKS: Expiring = Expiring {
    name: "task.records",
    records: TableDefinition::new("task.records"),
    expiries: TableDefinition::new("task.expiries"),
};

/// Claimed token → (its subject, when it expires in milliseconds since the
/// epoch).
const CLAIMS: TableDefinition<&str, (&str, u64)> = TableDefinition::new("task.claims");

/// (subject, token) → when it expires: each subject's claims, counted without
/// reading anyone else's.
const HELD: TableDefinition<(&str, &str), u64> = TableDefinition::new("task.claims_held");

/// How often the expired claims are removed, at most (per process).
const CLAIMS_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// When this process last removed the expired claims.
static CLAIMS_SWEPT: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// The store's own name: one row, [`STORE_ID`].
const META: TableDefinition<&str, &str> = TableDefinition::new("store.meta");

/// The row of [`META`] naming the store.
const STORE_ID: &str = "id";

/// How long a write may wait for the database's writer.
const WRITE_WAIT: Duration = Duration::from_secs(2);

/// Where a recorded task stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Its execution runs (or ran, in a process that is gone).
    Working,
    /// It ended with a result (JSON text).
    Completed(String),
    /// It ended with an error (JSON text).
    Failed(String),
    /// It was cancelled.
    Cancelled,
}

impl TaskStatus {
    /// Whether it will never change again.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, TaskStatus::Working)
    }
}

/// Which process runs a task: its PID, the time it started and the machine's
/// boot (so that a PID used again by another process, after a reboot too, is
/// not taken for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runner {
    /// The process ID.
    pub pid: u32,
    /// When it started, in the kernel's clock ticks since boot (0 if unknown).
    pub started: u64,
    /// The first 64 bits of the kernel's boot ID (0 if unknown).
    #[serde(default)]
    pub boot: u64,
}

/// One task as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The subject that started it.
    pub subject: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// When it was created and last changed, in milliseconds since the epoch.
    pub created_ms: u64,
    /// When it last changed.
    pub updated_ms: u64,
    /// When the record goes, in milliseconds since the epoch.
    pub expires_ms: u64,
    /// The process running it.
    pub runner: Runner,
}

impl Store {
    /// The store's own name: 128 random bits in hex, made at its first use
    /// and kept in it (approvals sealed where claims are kept here name it).
    ///
    /// # Errors
    ///
    /// The store did not answer, or no random bits.
    pub fn store_id(&self) -> Result<String, String> {
        let database = self.database().map_err(|error| error.reason)?;
        {
            let read = database.begin_read().map_err(|e| e.to_string())?;
            match read.open_table(META) {
                Ok(table) => {
                    if let Some(id) = table.get(STORE_ID).map_err(|e| e.to_string())? {
                        return Ok(id.value().to_owned());
                    }
                }
                Err(TableError::TableDoesNotExist(_)) => {}
                Err(error) => return Err(error.to_string()),
            }
        }
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|_| "no random bits for the store's name")?;
        let fresh = hex::encode(bytes);
        let until = until();
        let transaction = begin_write(&database, &until)?;
        let id = {
            let mut table = transaction.open_table(META).map_err(|e| e.to_string())?;
            // Another process may have named it meanwhile: its name stands.
            let existing = table
                .get(STORE_ID)
                .map_err(|e| e.to_string())?
                .map(|id| id.value().to_owned());
            match existing {
                Some(id) => id,
                None => {
                    table
                        .insert(STORE_ID, fresh.as_str())
                        .map_err(|e| e.to_string())?;
                    fresh
                }
            }
        };
        commit(transaction, &until)?;
        Ok(id)
    }

    /// Task `id`'s record, unless none or past its time.
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub fn task_load(&self, id: &str) -> Result<Option<TaskRecord>, String> {
        let database = self.database().map_err(|error| error.reason)?;
        TASKS
            .load(&database, id, now_ms())?
            .map(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
            .transpose()
    }

    /// Writes task `id`'s record as `change` makes it from the one kept
    /// (`None`: none, or past its time); a record that ended is never
    /// changed again (a cancelled task stays cancelled). The records past
    /// their time go in the same transaction (at most once a minute).
    ///
    /// # Errors
    ///
    /// The store did not answer: nothing is written.
    pub fn task_write(
        &self,
        id: &str,
        change: impl FnOnce(Option<TaskRecord>) -> Option<TaskRecord>,
    ) -> Result<(), String> {
        let database = self.database().map_err(|error| error.reason)?;
        let until = until();
        let transaction = begin_write(&database, &until)?;
        let now = now_ms();
        TASKS.sweep(&transaction, now)?;
        let current: Option<TaskRecord> = TASKS
            .get(&transaction, id, now)?
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let ended = current.as_ref().is_some_and(|r| r.status.is_terminal());
        if let Some(record) = change(current).filter(|_| !ended) {
            let bytes = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
            TASKS.put(&transaction, id, &bytes, record.expires_ms)?;
        }
        commit(transaction, &until)
    }

    /// Claims `token` for `subject` for `ttl`: `true` the first time (in any
    /// process naming this store), `false` while it is held or when `subject`
    /// holds `max_per_subject` live tokens. Expired tokens are removed (all of
    /// them at most once a minute; the subject's own when it is at its limit).
    ///
    /// # Errors
    ///
    /// The store did not answer: nothing is claimed.
    pub fn task_claim(
        &self,
        subject: &str,
        token: &str,
        ttl: Duration,
        max_per_subject: usize,
    ) -> Result<bool, String> {
        let database = self.database().map_err(|error| error.reason)?;
        let until = until();
        let transaction = begin_write(&database, &until)?;
        let claimed = {
            let mut claims = transaction.open_table(CLAIMS).map_err(|e| e.to_string())?;
            let mut held = transaction.open_table(HELD).map_err(|e| e.to_string())?;
            let now = now_ms();
            let mut expired: Vec<(String, String)> = Vec::new();
            if claims_sweep_due() {
                for entry in claims.iter().map_err(|e| e.to_string())? {
                    let (key, value) = entry.map_err(|e| e.to_string())?;
                    let (owner, expires) = value.value();
                    if expires <= now {
                        expired.push((owner.to_owned(), key.value().to_owned()));
                    }
                }
            }
            let mut live = 0usize;
            for entry in held.range((subject, "")..).map_err(|e| e.to_string())? {
                let (key, expires) = entry.map_err(|e| e.to_string())?;
                let (owner, held_token) = key.value();
                if owner != subject {
                    break;
                }
                if expires.value() <= now {
                    expired.push((owner.to_owned(), held_token.to_owned()));
                } else {
                    live += 1;
                }
            }
            for (owner, expired_token) in &expired {
                claims
                    .remove(expired_token.as_str())
                    .map_err(|e| e.to_string())?;
                held.remove((owner.as_str(), expired_token.as_str()))
                    .map_err(|e| e.to_string())?;
            }
            let taken = claims
                .get(token)
                .map_err(|e| e.to_string())?
                .is_some_and(|value| value.value().1 > now);
            let claimed = !taken && live < max_per_subject;
            if claimed {
                let expires =
                    now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
                // An expired claim of the same token, another subject's maybe.
                if let Some(old) = claims
                    .insert(token, (subject, expires))
                    .map_err(|e| e.to_string())?
                {
                    let (owner, _) = old.value();
                    let owner = owner.to_owned();
                    held.remove((owner.as_str(), token))
                        .map_err(|e| e.to_string())?;
                }
                held.insert((subject, token), expires)
                    .map_err(|e| e.to_string())?;
            }
            claimed
        };
        commit(transaction, &until)?;
        Ok(claimed)
    }
}

/// Whether the expired claims are due a sweep (and marks them swept).
fn claims_sweep_due() -> bool {
    let mut swept = CLAIMS_SWEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    if swept.is_some_and(|at| now.duration_since(at) < CLAIMS_SWEEP_EVERY) {
        return false;
    }
    *swept = Some(now);
    true
}

/// A write's wait for the writer: [`WRITE_WAIT`], never cancelled.
fn until() -> Until {
    Until {
        deadline: Instant::now() + WRITE_WAIT,
        cancel: Arc::new(Cancel::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreLocation;

    fn record(status: TaskStatus, expires_ms: u64) -> TaskRecord {
        TaskRecord {
            subject: "alice".to_owned(),
            status,
            created_ms: 1,
            updated_ms: 1,
            expires_ms,
            runner: Runner {
                pid: 7,
                started: 9,
                boot: 1,
            },
        }
    }

    #[test]
    fn a_task_record_ends_once_and_goes_at_its_time() {
        let store = Store::new(StoreLocation::Memory);
        let later = now_ms() + 60_000;
        store
            .task_write("t1", |_| Some(record(TaskStatus::Working, later)))
            .expect("write");
        store
            .task_write("t1", |_| Some(record(TaskStatus::Cancelled, later)))
            .expect("write");
        // Ended: a finish after the cancel changes nothing.
        store
            .task_write("t1", |_| {
                Some(record(TaskStatus::Completed("{}".to_owned()), later))
            })
            .expect("write");
        assert_eq!(
            store.task_load("t1"),
            Ok(Some(record(TaskStatus::Cancelled, later)))
        );
        store
            .task_write("t2", |_| Some(record(TaskStatus::Working, 1)))
            .expect("write");
        assert_eq!(store.task_load("t2"), Ok(None));
        assert_eq!(store.task_load("t3"), Ok(None));
    }

    #[test]
    fn a_token_is_claimed_once_and_a_subject_holds_a_bounded_number() {
        let store = Store::new(StoreLocation::Memory);
        let minute = Duration::from_secs(60);
        assert_eq!(store.task_claim("alice", "a", minute, 2), Ok(true));
        assert_eq!(store.task_claim("bob", "a", minute, 2), Ok(false));
        assert_eq!(store.task_claim("alice", "b", minute, 2), Ok(true));
        assert_eq!(store.task_claim("alice", "c", minute, 2), Ok(false));
        assert_eq!(store.task_claim("bob", "c", minute, 2), Ok(true));
        // An expired token may be claimed again.
        assert_eq!(
            store.task_claim("bob", "d", Duration::from_millis(0), 2),
            Ok(true)
        );
        assert_eq!(store.task_claim("bob", "d", minute, 2), Ok(true));
        let id = store.store_id().expect("an ID");
        assert_eq!(id.len(), 32);
        assert_eq!(store.store_id(), Ok(id));
    }
}
