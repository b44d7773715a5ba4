//! What the store keeps of each Streamable HTTP session (`--http-sessions`):
//! the subject that opened it and its client's `initialize` parameters, so
//! that any replica sharing the store (or this one after a restart) can check
//! who may use the session and replay its handshake. A record lasts the
//! session's idle time past its last refresh.
//!
//! In the embedded database a record is one row (`session.records`), changed
//! in one transaction; a write removes the records past their time. In Redis
//! it is a hash per session with a time to live, so Redis removes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::TableDefinition;
use serde::{Deserialize, Serialize};

use super::database::{Store, StoreError};
use super::entry::now_ms;
use super::expiry::Expiring;
use super::session_record::{MAX_SESSION_ID_BYTES, SessionField, SessionRecord, millis};
use super::state::{Until, begin_write, commit};
use crate::source::Cancel;

/// Session ID → the record as JSON ([`Row`]), and when it goes.
const RECORDS: Expiring = Expiring {
    name: "session.records",
    records: TableDefinition::new("session.records"),
    expiries: TableDefinition::new("session.expiries"),
};

/// How long a write of a session record may wait for the database's writer.
const WRITE_WAIT: Duration = Duration::from_secs(2);

/// A record as the embedded database keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Row {
    owner: Option<String>,
    initialize: Option<String>,
    #[serde(default)]
    ended: bool,
    /// Milliseconds since the epoch after which the record is gone.
    expires_ms: u64,
}

impl Store {
    /// What the store knows of session `id`, unless nothing or its time passed.
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub async fn session_load(
        self: &Arc<Self>,
        id: &str,
    ) -> Result<Option<SessionRecord>, StoreError> {
        if id.len() > MAX_SESSION_ID_BYTES {
            return Ok(None);
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis() {
            return redis?
                .session_load(id)
                .await
                .map_err(|reason| self.error(reason));
        }
        let id = id.to_owned();
        self.on_database(move |store| store.read_row(&id).map(|row| row.map(Row::record)))
            .await
    }

    /// Sets `field` of session `id`'s record to `value`, and makes the record
    /// last `ttl` from now.
    ///
    /// # Errors
    ///
    /// The store did not answer: nothing is written.
    pub async fn session_write(
        self: &Arc<Self>,
        id: &str,
        field: SessionField,
        value: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        if id.len() > MAX_SESSION_ID_BYTES {
            return Err(self.error("a session ID longer than any the server makes"));
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis() {
            return redis?
                .session_write(id, field, value, ttl)
                .await
                .map_err(|reason| self.error(reason));
        }
        let (id, value) = (id.to_owned(), value.to_owned());
        self.on_database(move |store| {
            store.change_row(&id, |row| {
                let mut row = row.unwrap_or_default();
                match field {
                    SessionField::Owner => row.owner = Some(value),
                    SessionField::Initialize => row.initialize = Some(value),
                    SessionField::Ended => row.ended = true,
                }
                row.expires_ms = now_ms().saturating_add(millis(ttl));
                Some(row)
            })
        })
        .await
    }

    /// Makes session `id`'s record last `ttl` from now, if it still exists.
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub async fn session_refresh(
        self: &Arc<Self>,
        id: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis() {
            return redis?
                .session_refresh(id, ttl)
                .await
                .map_err(|reason| self.error(reason));
        }
        let id = id.to_owned();
        self.on_database(move |store| {
            store.change_row(&id, |row| {
                row.map(|row| Row {
                    expires_ms: now_ms().saturating_add(millis(ttl)),
                    ..row
                })
            })
        })
        .await
    }

    /// Forgets session `id` (its client ended it).
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub async fn session_delete(self: &Arc<Self>, id: &str) -> Result<(), StoreError> {
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis() {
            return redis?
                .session_delete(id)
                .await
                .map_err(|reason| self.error(reason));
        }
        let id = id.to_owned();
        self.on_database(move |store| store.change_row(&id, |_| None))
            .await
    }

    /// Runs `work` on the database: on this thread in memory, else on a
    /// blocking thread (a file store waits on the disk and on other
    /// processes' commits).
    async fn on_database<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Store) -> Result<T, String> + Send + 'static,
    ) -> Result<T, StoreError> {
        let answered = if self.in_memory() {
            work(self)
        } else {
            let store = self.clone();
            tokio::task::spawn_blocking(move || work(&store))
                .await
                .map_err(|error| error.to_string())
                .and_then(|answered| answered)
        };
        answered.map_err(|reason| self.error(reason))
    }

    /// The record of `id`, unless its time passed.
    fn read_row(&self, id: &str) -> Result<Option<Row>, String> {
        let database = self.database().map_err(|error| error.reason)?;
        RECORDS
            .load(&database, id, now_ms())?
            .map(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
            .transpose()
    }

    /// Replaces the record of `id` (`None` if absent or past its time) by
    /// what `change` makes of it (`None`: removed), and removes the records
    /// past their time (at most once a minute), in one transaction.
    fn change_row(
        &self,
        id: &str,
        change: impl FnOnce(Option<Row>) -> Option<Row>,
    ) -> Result<(), String> {
        let database = self.database().map_err(|error| error.reason)?;
        let until = Until {
            deadline: Instant::now() + WRITE_WAIT,
            cancel: Arc::new(Cancel::default()),
        };
        let transaction = begin_write(&database, &until)?;
        let now = now_ms();
        RECORDS.sweep(&transaction, now)?;
        let current = RECORDS
            .get(&transaction, id, now)?
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        match change(current) {
            Some(row) => {
                let bytes = serde_json::to_vec(&row).map_err(|e| e.to_string())?;
                RECORDS.put(&transaction, id, &bytes, row.expires_ms)?;
            }
            None => RECORDS.remove(&transaction, id)?,
        }
        commit(transaction, &until)
    }
}

impl Row {
    fn record(self) -> SessionRecord {
        SessionRecord {
            owner: self.owner,
            initialize: self.initialize,
            ended: self.ended,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreLocation;

    #[tokio::test]
    async fn a_session_record_holds_its_owner_and_handshake_until_its_time() {
        let store = Arc::new(Store::new(StoreLocation::Memory));
        assert_eq!(store.session_load("s1").await, Ok(None));
        let minute = Duration::from_secs(60);
        store
            .session_write("s1", SessionField::Initialize, "{}", minute)
            .await
            .expect("write");
        store
            .session_write("s1", SessionField::Owner, "alice", minute)
            .await
            .expect("write");
        assert_eq!(
            store.session_load("s1").await,
            Ok(Some(SessionRecord {
                owner: Some("alice".to_owned()),
                initialize: Some("{}".to_owned()),
                ended: false,
            }))
        );
        // A record past its time is gone, and the next write removes it.
        store
            .session_write("s2", SessionField::Owner, "bob", Duration::from_millis(1))
            .await
            .expect("write");
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.session_load("s2").await != Ok(None) {
            assert!(Instant::now() < deadline, "the record outlived its time");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        store.session_refresh("s1", minute).await.expect("refresh");
        store.session_delete("s1").await.expect("delete");
        assert_eq!(store.session_load("s1").await, Ok(None));
        let long = "x".repeat(MAX_SESSION_ID_BYTES + 1);
        assert_eq!(store.session_load(&long).await, Ok(None));
    }
}
