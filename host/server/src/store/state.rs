//! The state capabilities' values in the store: for each subject, each key's
//! value (as `codemode_value::encode` writes it), its expiry and the size it
//! charges, and the subject's count of keys and bytes, all changed in one
//! transaction, so that the limits hold whichever process writes.
//!
//! A value past its expiry reads as absent; the subject's next write removes it
//! (and every other expired one of the subject) before anything else, so that
//! it neither counts against the limits nor stays on disk once its owner
//! writes again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::{
    Database, ReadableDatabase, ReadableTable, Table, TableDefinition, TableError,
    TransactionError, WriteTransaction,
};

use super::database::{Store, StoreError};
use super::entry::{Entry, Put, StateLimits, StateRefused, now_ms};
use crate::source::Cancel;

/// The values: (subject, key) → the value, encoded.
const VALUES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("state.values");

/// What a value charges and when it expires: (subject, key) → (expiry in
/// milliseconds since the epoch, 0 for none; size). Apart from the values, so
/// that listing keys and finding expired ones never reads a value.
const META: TableDefinition<(&str, &str), (u64, u64)> = TableDefinition::new("state.meta");

/// Each subject's keys, bytes, and the earliest expiry among its values (0
/// for none; it may be earlier than any left, never later).
const USAGE: TableDefinition<&str, (u64, u64, u64)> = TableDefinition::new("state.usage");

/// The longest pause between two tries for the writer's lock.
const MAX_PAUSE: Duration = Duration::from_millis(10);

/// Until when a write may wait for the database's writer (another process's
/// write, or another execution's), and what else ends the wait: the call's
/// deadline and its request's cancellation. A write whose call ended is not
/// committed.
#[derive(Debug, Clone)]
pub(crate) struct Until {
    /// The call's deadline.
    pub deadline: Instant,
    /// The request's cancellation.
    pub cancel: Arc<Cancel>,
}

impl Until {
    fn ended(&self) -> bool {
        self.cancel.is_cancelled() || Instant::now() >= self.deadline
    }
}

/// A subject's keys, bytes and earliest expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Usage {
    keys: u64,
    bytes: u64,
    earliest: u64,
}

fn live(expires: u64, now: u64) -> bool {
    expires == 0 || expires > now
}

impl Store {
    /// `subject`'s value of `key`, encoded, unless it has none or it expired.
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub(crate) fn state_get(
        &self,
        subject: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let database = self.database()?;
        let read = || -> Result<Option<Vec<u8>>, String> {
            let transaction = database.begin_read().map_err(|e| e.to_string())?;
            let (meta, values) =
                match (transaction.open_table(META), transaction.open_table(VALUES)) {
                    (Ok(meta), Ok(values)) => (meta, values),
                    (Err(TableError::TableDoesNotExist(_)), _)
                    | (_, Err(TableError::TableDoesNotExist(_))) => {
                        return Ok(None);
                    }
                    (Err(error), _) | (_, Err(error)) => return Err(error.to_string()),
                };
            let Some((expires, _)) = meta
                .get((subject, key))
                .map_err(|e| e.to_string())?
                .map(|m| m.value())
            else {
                return Ok(None);
            };
            if !live(expires, now_ms()) {
                return Ok(None);
            }
            Ok(values
                .get((subject, key))
                .map_err(|e| e.to_string())?
                .map(|value| value.value().to_vec()))
        };
        read().map_err(|reason| self.error(reason))
    }

    /// Sets `subject`'s value of `key` to `entry`, unless that grows the
    /// subject past `limits`; the subject's expired values are removed first.
    ///
    /// # Errors
    ///
    /// The store did not answer, or the call ended (`until`) before the write
    /// could be made: then nothing is written.
    pub(crate) fn state_put(
        &self,
        subject: &str,
        key: &str,
        entry: &Entry,
        limits: StateLimits,
        until: &Until,
    ) -> Result<Put, StoreError> {
        let database = self.database()?;
        let write = || -> Result<Put, String> {
            let transaction = begin_write(&database, until)?;
            let put = {
                let mut values = transaction.open_table(VALUES).map_err(|e| e.to_string())?;
                let mut meta = transaction.open_table(META).map_err(|e| e.to_string())?;
                let mut usage = transaction.open_table(USAGE).map_err(|e| e.to_string())?;
                let now = now_ms();
                let mut counted = read_usage(&usage, subject)?;
                if counted.earliest != 0 && counted.earliest <= now {
                    counted = remove_expired(&mut values, &mut meta, subject, counted, now)?;
                }
                let old = meta
                    .get((subject, key))
                    .map_err(|e| e.to_string())?
                    .map(|m| m.value());
                let after = match old {
                    Some((_, size)) => Usage {
                        bytes: counted
                            .bytes
                            .saturating_sub(size)
                            .saturating_add(entry.size),
                        ..counted
                    },
                    None => Usage {
                        keys: counted.keys.saturating_add(1),
                        bytes: counted.bytes.saturating_add(entry.size),
                        ..counted
                    },
                };
                // Past a limit only if it grows: lowered limits never stop a
                // subject from shrinking what it keeps.
                let refused = over(after, limits)
                    .filter(|_| after.keys > counted.keys || after.bytes > counted.bytes);
                match refused {
                    Some(refused) => {
                        write_usage(&mut usage, subject, counted)?;
                        Put::Refused(refused)
                    }
                    None => {
                        let expires = entry.ttl_ms.map_or(0, |ttl| now.saturating_add(ttl));
                        values
                            .insert((subject, key), entry.value.as_slice())
                            .map_err(|e| e.to_string())?;
                        meta.insert((subject, key), (expires, entry.size))
                            .map_err(|e| e.to_string())?;
                        let earliest = match (after.earliest, expires) {
                            (0, expires) | (expires, 0) => expires,
                            (earliest, expires) => earliest.min(expires),
                        };
                        write_usage(&mut usage, subject, Usage { earliest, ..after })?;
                        if old.is_some() {
                            Put::Replaced
                        } else {
                            Put::Created
                        }
                    }
                }
            };
            commit(transaction, until)?;
            Ok(put)
        };
        write().map_err(|reason| self.error(reason))
    }

    /// Removes `subject`'s value of `key`: whether it had one (an expired value
    /// is removed too, and was none).
    ///
    /// # Errors
    ///
    /// The store did not answer, or the call ended before the write.
    pub(crate) fn state_delete(
        &self,
        subject: &str,
        key: &str,
        until: &Until,
    ) -> Result<bool, StoreError> {
        let database = self.database()?;
        let write = || -> Result<bool, String> {
            let transaction = begin_write(&database, until)?;
            let live_value = {
                let mut values = transaction.open_table(VALUES).map_err(|e| e.to_string())?;
                let mut meta = transaction.open_table(META).map_err(|e| e.to_string())?;
                let mut usage = transaction.open_table(USAGE).map_err(|e| e.to_string())?;
                let removed = meta
                    .remove((subject, key))
                    .map_err(|e| e.to_string())?
                    .map(|m| m.value());
                values.remove((subject, key)).map_err(|e| e.to_string())?;
                match removed {
                    Some((expires, size)) => {
                        let counted = read_usage(&usage, subject)?;
                        let left = Usage {
                            keys: counted.keys.saturating_sub(1),
                            bytes: counted.bytes.saturating_sub(size),
                            ..counted
                        };
                        write_usage(&mut usage, subject, left)?;
                        live(expires, now_ms())
                    }
                    None => false,
                }
            };
            commit(transaction, until)?;
            Ok(live_value)
        };
        write().map_err(|reason| self.error(reason))
    }

    /// `subject`'s keys starting with `prefix` that have a value, in order.
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub(crate) fn state_list(
        &self,
        subject: &str,
        prefix: &str,
    ) -> Result<Vec<String>, StoreError> {
        let database = self.database()?;
        let read = || -> Result<Vec<String>, String> {
            let transaction = database.begin_read().map_err(|e| e.to_string())?;
            let meta = match transaction.open_table(META) {
                Ok(meta) => meta,
                Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(error) => return Err(error.to_string()),
            };
            let now = now_ms();
            let mut keys = Vec::new();
            for item in meta.range((subject, prefix)..).map_err(|e| e.to_string())? {
                let (name, entry) = item.map_err(|e| e.to_string())?;
                let (owner, key) = name.value();
                if owner != subject || !key.starts_with(prefix) {
                    break;
                }
                if live(entry.value().0, now) {
                    keys.push(key.to_owned());
                }
            }
            Ok(keys)
        };
        read().map_err(|reason| self.error(reason))
    }
}

/// A write transaction, waiting for another writer (of this process or
/// another) at most `until` allows: pauses from 0.1 ms doubling to
/// [`MAX_PAUSE`].
pub(super) fn begin_write(database: &Database, until: &Until) -> Result<WriteTransaction, String> {
    let mut pause = Duration::from_micros(100);
    loop {
        match database.try_begin_write() {
            Ok(transaction) => return Ok(transaction),
            Err(TransactionError::WouldBlock) => {}
            Err(error) => return Err(error.to_string()),
        }
        if until.ended() {
            return Err("the call ended while another write held the store".to_owned());
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Commits `transaction` unless its call ended meanwhile (then it is dropped,
/// which aborts it): a write the execution gave up on is not made behind its
/// back.
pub(super) fn commit(transaction: WriteTransaction, until: &Until) -> Result<(), String> {
    if until.ended() {
        return Err("the call ended before its write".to_owned());
    }
    transaction.commit().map_err(|e| e.to_string())
}

/// `subject`'s usage as counted.
fn read_usage(
    usage: &Table<'_, &'static str, (u64, u64, u64)>,
    subject: &str,
) -> Result<Usage, String> {
    Ok(usage
        .get(subject)
        .map_err(|e| e.to_string())?
        .map_or_else(Usage::default, |counted| {
            let (keys, bytes, earliest) = counted.value();
            Usage {
                keys,
                bytes,
                earliest,
            }
        }))
}

fn write_usage(
    usage: &mut Table<'_, &'static str, (u64, u64, u64)>,
    subject: &str,
    counted: Usage,
) -> Result<(), String> {
    usage
        .insert(subject, (counted.keys, counted.bytes, counted.earliest))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The limit `counted` passes, if any.
fn over(counted: Usage, limits: StateLimits) -> Option<StateRefused> {
    if counted.keys > limits.max_keys {
        Some(StateRefused::Keys)
    } else if counted.bytes > limits.max_bytes {
        Some(StateRefused::Bytes)
    } else {
        None
    }
}

/// Removes `subject`'s expired values: its usage after, the earliest expiry
/// among those left recomputed.
fn remove_expired(
    values: &mut Table<'_, (&'static str, &'static str), &'static [u8]>,
    meta: &mut Table<'_, (&'static str, &'static str), (u64, u64)>,
    subject: &str,
    counted: Usage,
    now: u64,
) -> Result<Usage, String> {
    let mut expired = Vec::new();
    let mut earliest = 0;
    for item in meta.range((subject, "")..).map_err(|e| e.to_string())? {
        let (name, entry) = item.map_err(|e| e.to_string())?;
        let (owner, key) = name.value();
        if owner != subject {
            break;
        }
        let (expires, size) = entry.value();
        if !live(expires, now) {
            expired.push((key.to_owned(), size));
        } else if expires != 0 && (earliest == 0 || expires < earliest) {
            earliest = expires;
        }
    }
    let mut left = Usage {
        earliest,
        ..counted
    };
    for (key, size) in expired {
        meta.remove((subject, key.as_str()))
            .map_err(|e| e.to_string())?;
        values
            .remove((subject, key.as_str()))
            .map_err(|e| e.to_string())?;
        left.keys = left.keys.saturating_sub(1);
        left.bytes = left.bytes.saturating_sub(size);
    }
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreLocation;

    /// A minute, not cancelled.
    fn until() -> Until {
        Until {
            deadline: Instant::now() + Duration::from_secs(60),
            cancel: Arc::new(Cancel::default()),
        }
    }

    fn entry(value: &[u8], size: u64) -> Entry {
        Entry {
            value: value.to_vec(),
            size,
            ttl_ms: None,
        }
    }

    fn limits(max_keys: u64, max_bytes: u64) -> StateLimits {
        StateLimits {
            max_keys,
            max_bytes,
            max_value_bytes: max_bytes,
        }
    }

    #[test]
    fn a_subject_reads_lists_and_deletes_only_its_own_keys() -> Result<(), StoreError> {
        let store = Store::new(StoreLocation::Memory);
        let room = StateLimits::default();
        assert_eq!(
            store.state_put("ann", "b/1", &entry(b"x", 4), room, &until())?,
            Put::Created
        );
        assert_eq!(
            store.state_put("ann", "a/1", &entry(b"y", 4), room, &until())?,
            Put::Created
        );
        assert_eq!(
            store.state_put("ann", "a/2", &entry(b"z", 4), room, &until())?,
            Put::Created
        );
        assert_eq!(
            store.state_put("bob", "a/1", &entry(b"w", 4), room, &until())?,
            Put::Created
        );
        assert_eq!(
            store.state_put("ann", "a/1", &entry(b"v", 4), room, &until())?,
            Put::Replaced
        );
        assert_eq!(store.state_get("ann", "a/1")?, Some(b"v".to_vec()));
        assert_eq!(store.state_get("bob", "a/1")?, Some(b"w".to_vec()));
        assert_eq!(store.state_get("bob", "b/1")?, None);
        assert_eq!(store.state_list("ann", "a/")?, ["a/1", "a/2"]);
        assert_eq!(store.state_list("ann", "")?, ["a/1", "a/2", "b/1"]);
        assert_eq!(store.state_list("bob", "")?, ["a/1"]);
        // A subject whose ID is a prefix of another's sees none of the other's.
        assert_eq!(store.state_list("an", "")?, Vec::<String>::new());
        assert!(store.state_delete("ann", "a/1", &until())?);
        assert!(!store.state_delete("ann", "a/1", &until())?);
        assert_eq!(store.state_get("ann", "a/1")?, None);
        assert_eq!(store.state_get("bob", "a/1")?, Some(b"w".to_vec()));
        Ok(())
    }

    #[test]
    fn limits_count_keys_and_bytes_and_a_replacement_once() -> Result<(), StoreError> {
        let store = Store::new(StoreLocation::Memory);
        let two = limits(2, 10);
        assert_eq!(
            store.state_put("s", "a", &entry(b"1", 4), two, &until())?,
            Put::Created
        );
        assert_eq!(
            store.state_put("s", "b", &entry(b"2", 4), two, &until())?,
            Put::Created
        );
        assert_eq!(
            store.state_put("s", "c", &entry(b"3", 1), two, &until())?,
            Put::Refused(StateRefused::Keys)
        );
        // Replacing `a` with 6 bytes: 6 + 4 fits the 10; 7 + 4 does not.
        assert_eq!(
            store.state_put("s", "a", &entry(b"4", 6), two, &until())?,
            Put::Replaced
        );
        assert_eq!(
            store.state_put("s", "a", &entry(b"5", 7), two, &until())?,
            Put::Refused(StateRefused::Bytes)
        );
        assert_eq!(store.state_get("s", "a")?, Some(b"4".to_vec()));
        // Another subject has limits of its own.
        assert_eq!(
            store.state_put("t", "c", &entry(b"6", 10), two, &until())?,
            Put::Created
        );
        // A deletion gives its key and bytes back.
        assert!(store.state_delete("s", "b", &until())?);
        assert_eq!(
            store.state_put("s", "c", &entry(b"7", 4), two, &until())?,
            Put::Created
        );
        Ok(())
    }

    #[test]
    fn an_expired_value_is_absent_and_makes_room_when_needed() -> Result<(), StoreError> {
        let store = Store::new(StoreLocation::Memory);
        let one = limits(1, 100);
        let past = Entry {
            ttl_ms: Some(0),
            ..entry(b"old", 10)
        };
        let future = Entry {
            ttl_ms: Some(3_600_000),
            ..entry(b"new", 10)
        };
        assert_eq!(
            store.state_put("s", "gone", &past, one, &until())?,
            Put::Created
        );
        assert_eq!(store.state_get("s", "gone")?, None);
        assert_eq!(store.state_list("s", "")?, Vec::<String>::new());
        // The expired value still held the one key: it is removed to make room.
        assert_eq!(
            store.state_put("s", "kept", &future, one, &until())?,
            Put::Created
        );
        assert_eq!(store.state_get("s", "kept")?, Some(b"new".to_vec()));
        assert_eq!(store.state_list("s", "")?, ["kept"]);
        // Over an expired value, a write creates rather than replaces.
        assert_eq!(
            store.state_put("s", "kept", &past, one, &until())?,
            Put::Replaced
        );
        assert_eq!(
            store.state_put("s", "kept", &future, one, &until())?,
            Put::Created
        );
        Ok(())
    }

    /// The subject's usage as the store counts it.
    fn usage_of(store: &Store, subject: &str) -> (u64, u64, u64) {
        let database = store.database().expect("the database");
        let transaction = database.begin_read().expect("a read");
        match transaction.open_table(USAGE) {
            Ok(usage) => usage
                .get(subject)
                .expect("a read")
                .map_or((0, 0, 0), |counted| counted.value()),
            Err(TableError::TableDoesNotExist(_)) => (0, 0, 0),
            Err(error) => panic!("the usage table: {error}"),
        }
    }

    #[test]
    fn the_next_write_removes_the_expired_values_and_their_charge() -> Result<(), StoreError> {
        let store = Store::new(StoreLocation::Memory);
        let room = StateLimits::default();
        let past = Entry {
            ttl_ms: Some(0),
            ..entry(b"old", 10)
        };
        // A ttl of 0 expires at the write's own millisecond: the earliest
        // expiry is then.
        let before = now_ms();
        store.state_put("s", "gone", &past, room, &until())?;
        let (keys, bytes, earliest) = usage_of(&store, "s");
        assert_eq!((keys, bytes), (1, 10));
        assert!(earliest >= before && earliest <= now_ms(), "{earliest}");
        // The second write finds the first expired, and removes it first.
        store.state_put("s", "also gone", &past, room, &until())?;
        assert_eq!(usage_of(&store, "s").0, 1);
        store.state_put("s", "kept", &entry(b"new", 7), room, &until())?;
        assert_eq!(usage_of(&store, "s"), (1, 7, 0));
        // Deleting an expired value gives its charge back and finds nothing.
        store.state_put("s", "gone", &past, room, &until())?;
        assert!(!store.state_delete("s", "gone", &until())?);
        assert_eq!(usage_of(&store, "s").0, 1);
        Ok(())
    }

    #[test]
    fn lowered_limits_still_let_a_subject_shrink_what_it_keeps() -> Result<(), StoreError> {
        let store = Store::new(StoreLocation::Memory);
        store.state_put("s", "a", &entry(b"1", 50), limits(10, 100), &until())?;
        store.state_put("s", "b", &entry(b"2", 50), limits(10, 100), &until())?;
        let lowered = limits(1, 20);
        assert_eq!(
            store.state_put("s", "a", &entry(b"3", 10), lowered, &until())?,
            Put::Replaced
        );
        assert_eq!(
            store.state_put("s", "a", &entry(b"4", 11), lowered, &until())?,
            Put::Refused(StateRefused::Keys)
        );
        assert_eq!(
            store.state_put("s", "c", &entry(b"5", 1), lowered, &until())?,
            Put::Refused(StateRefused::Keys)
        );
        assert_eq!(usage_of(&store, "s"), (2, 60, 0));
        Ok(())
    }

    #[test]
    fn a_write_whose_call_ended_is_not_made() -> Result<(), StoreError> {
        let store = Store::new(StoreLocation::Memory);
        let room = StateLimits::default();
        let ended = Until {
            deadline: Instant::now(),
            ..until()
        };
        let error = store
            .state_put("s", "k", &entry(b"x", 4), room, &ended)
            .err();
        assert_eq!(
            error.map(|e| e.reason),
            Some("the call ended before its write".to_owned())
        );
        let cancelled = until();
        let (cancel, canceller) = Cancel::with_canceller();
        canceller.cancel();
        let cancelled = Until {
            cancel,
            ..cancelled
        };
        assert!(store.state_delete("s", "k", &cancelled).is_err());
        // Another write holds the store past the call's deadline: the call
        // gives up waiting, writing nothing.
        let database = store.database()?;
        let held = database.begin_write().map_err(|e| store.error(e))?;
        let soon = Until {
            deadline: Instant::now() + Duration::from_millis(50),
            ..until()
        };
        let error = store
            .state_put("s", "k", &entry(b"x", 4), room, &soon)
            .err();
        assert_eq!(
            error.map(|e| e.reason),
            Some("the call ended while another write held the store".to_owned())
        );
        drop(held);
        assert_eq!(store.state_get("s", "k")?, None);
        assert_eq!(usage_of(&store, "s"), (0, 0, 0));
        Ok(())
    }

    #[test]
    fn a_file_store_keeps_its_values_after_it_is_closed() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("deeper/store.redb");
        {
            let store = Store::new(StoreLocation::File(path.clone()));
            store.state_put(
                "s",
                "k",
                &entry(b"kept", 8),
                StateLimits::default(),
                &until(),
            )?;
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("deeper"))?
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let mode = std::fs::metadata(&path)?.permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let store = Store::new(StoreLocation::File(path));
        assert_eq!(store.state_get("s", "k")?, Some(b"kept".to_vec()));
        Ok(())
    }

    #[test]
    fn a_store_that_cannot_open_says_where_and_why_and_tries_again()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"not a folder")?;
        let path = blocker.join("store.redb");
        let store = Store::new(StoreLocation::File(path.clone()));
        let error = store.state_get("s", "k").err().ok_or("opened")?;
        assert_eq!(error.location, path.display().to_string());
        assert!(
            error.reason.starts_with("cannot make the folder"),
            "{error}"
        );
        std::fs::remove_file(&blocker)?;
        assert_eq!(store.state_get("s", "k")?, None);
        Ok(())
    }
}
