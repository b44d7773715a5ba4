//! The state capabilities' values in the store: for each subject, each key's
//! value (as `codemode_value::encode` writes it) with its expiry, and the
//! subject's count of keys and bytes, updated in the transaction that changes
//! the values, so that the limits hold whichever process writes.
//!
//! A value past its expiry reads as absent; it still counts against its
//! subject's limits until a write of that subject that would pass them removes
//! every expired value of the subject first.

use std::time::{SystemTime, UNIX_EPOCH};

use redb::{ReadableDatabase, ReadableTable, Table, TableDefinition, TableError};

use super::database::{Store, StoreError};

/// The values: (subject, key) → expiry (milliseconds since the epoch, 0 for
/// none) and charged size, 8 bytes each, little-endian, then the encoded value.
const VALUES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("state.values");

/// Each subject's keys and bytes, as its values charge them.
const USAGE: TableDefinition<&str, (u64, u64)> = TableDefinition::new("state.usage");

/// Bytes before the encoded value in an entry: the expiry and the size.
const HEADER_BYTES: usize = 16;

/// What one subject may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLimits {
    /// Keys (`--max-state-keys`).
    pub max_keys: u64,
    /// Bytes of keys and values together, a value counted as its JSON text
    /// (`--max-state-bytes`).
    pub max_bytes: u64,
    /// Bytes of one value as JSON text (`--max-state-value-bytes`).
    pub max_value_bytes: u64,
}

impl Default for StateLimits {
    fn default() -> Self {
        Self {
            max_keys: 1000,
            max_bytes: 16 << 20,
            max_value_bytes: 1 << 20,
        }
    }
}

/// Which limit a write would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRefused {
    /// The subject's keys.
    Keys,
    /// The subject's bytes.
    Bytes,
}

/// A value as a write gives it to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The value, encoded.
    pub value: Vec<u8>,
    /// What it charges against its subject's bytes: its key's length and the
    /// value's JSON text.
    pub size: u64,
    /// When it expires, in milliseconds since the epoch; `None` never.
    pub expires: Option<u64>,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// The key had no value (or an expired one).
    Created,
    /// The key's value was replaced.
    Replaced,
    /// Nothing changed: the write would pass a limit.
    Refused(StateRefused),
}

/// An entry's expiry and size, from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    expires: u64,
    size: u64,
}

impl Header {
    fn read(bytes: &[u8]) -> Result<Self, String> {
        let (Some(expires), Some(size)) = (bytes.get(..8), bytes.get(8..HEADER_BYTES)) else {
            return Err("an entry shorter than its header".to_owned());
        };
        let number = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        Ok(Self {
            expires: number(expires),
            size: number(size),
        })
    }

    fn live(self, now: u64) -> bool {
        self.expires == 0 || self.expires > now
    }
}

/// Milliseconds since the epoch: expiries outlive the process, so they are
/// wall-clock times.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
            let values = match transaction.open_table(VALUES) {
                Ok(values) => values,
                Err(TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(error) => return Err(error.to_string()),
            };
            let Some(entry) = values.get((subject, key)).map_err(|e| e.to_string())? else {
                return Ok(None);
            };
            let bytes = entry.value();
            if !Header::read(bytes)?.live(now()) {
                return Ok(None);
            }
            Ok(bytes.get(HEADER_BYTES..).map(<[u8]>::to_vec))
        };
        read().map_err(|reason| self.error(reason))
    }

    /// Sets `subject`'s value of `key` to `entry`, unless that passes `limits`
    /// (the subject's expired values are removed first when it would).
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub(crate) fn state_put(
        &self,
        subject: &str,
        key: &str,
        entry: &Entry,
        limits: StateLimits,
    ) -> Result<Put, StoreError> {
        let database = self.database()?;
        let write = || -> Result<Put, String> {
            let transaction = database.begin_write().map_err(|e| e.to_string())?;
            let put = {
                let mut values = transaction.open_table(VALUES).map_err(|e| e.to_string())?;
                let mut usage = transaction.open_table(USAGE).map_err(|e| e.to_string())?;
                let now = now();
                let mut counted = read_usage(&usage, subject)?;
                let mut after = with_entry(&values, subject, key, counted, entry.size)?;
                if over(after.0, limits).is_some() {
                    let removed = remove_expired(&mut values, subject, now)?;
                    counted = (
                        counted.0.saturating_sub(removed.0),
                        counted.1.saturating_sub(removed.1),
                    );
                    after = with_entry(&values, subject, key, counted, entry.size)?;
                }
                match over(after.0, limits) {
                    Some(refused) => {
                        usage.insert(subject, counted).map_err(|e| e.to_string())?;
                        Put::Refused(refused)
                    }
                    None => {
                        let mut bytes = Vec::with_capacity(HEADER_BYTES + entry.value.len());
                        bytes.extend_from_slice(&entry.expires.unwrap_or(0).to_le_bytes());
                        bytes.extend_from_slice(&entry.size.to_le_bytes());
                        bytes.extend_from_slice(&entry.value);
                        values
                            .insert((subject, key), bytes.as_slice())
                            .map_err(|e| e.to_string())?;
                        usage.insert(subject, after.0).map_err(|e| e.to_string())?;
                        match after.1 {
                            Some(old) if old.live(now) => Put::Replaced,
                            Some(_) | None => Put::Created,
                        }
                    }
                }
            };
            transaction.commit().map_err(|e| e.to_string())?;
            Ok(put)
        };
        write().map_err(|reason| self.error(reason))
    }

    /// Removes `subject`'s value of `key`: whether it had one (an expired value
    /// is removed too, and was none).
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub(crate) fn state_delete(&self, subject: &str, key: &str) -> Result<bool, StoreError> {
        let database = self.database()?;
        let write = || -> Result<bool, String> {
            let transaction = database.begin_write().map_err(|e| e.to_string())?;
            let live = {
                let mut values = transaction.open_table(VALUES).map_err(|e| e.to_string())?;
                let mut usage = transaction.open_table(USAGE).map_err(|e| e.to_string())?;
                let removed = values
                    .remove((subject, key))
                    .map_err(|e| e.to_string())?
                    .map(|entry| Header::read(entry.value()))
                    .transpose()?;
                match removed {
                    Some(header) => {
                        let (keys, bytes) = read_usage(&usage, subject)?;
                        let left = (keys.saturating_sub(1), bytes.saturating_sub(header.size));
                        usage.insert(subject, left).map_err(|e| e.to_string())?;
                        header.live(now())
                    }
                    None => false,
                }
            };
            transaction.commit().map_err(|e| e.to_string())?;
            Ok(live)
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
            let values = match transaction.open_table(VALUES) {
                Ok(values) => values,
                Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(error) => return Err(error.to_string()),
            };
            let now = now();
            let mut keys = Vec::new();
            for item in values
                .range((subject, prefix)..)
                .map_err(|e| e.to_string())?
            {
                let (name, entry) = item.map_err(|e| e.to_string())?;
                let (owner, key) = name.value();
                if owner != subject || !key.starts_with(prefix) {
                    break;
                }
                if Header::read(entry.value())?.live(now) {
                    keys.push(key.to_owned());
                }
            }
            Ok(keys)
        };
        read().map_err(|reason| self.error(reason))
    }
}

/// `subject`'s keys and bytes as counted.
fn read_usage(
    usage: &Table<'_, &'static str, (u64, u64)>,
    subject: &str,
) -> Result<(u64, u64), String> {
    Ok(usage
        .get(subject)
        .map_err(|e| e.to_string())?
        .map_or((0, 0), |counted| counted.value()))
}

/// The subject's keys and bytes once `key` holds a value of `size`, from
/// `counted`, and the header of the value it holds now.
fn with_entry(
    values: &Table<'_, (&'static str, &'static str), &'static [u8]>,
    subject: &str,
    key: &str,
    counted: (u64, u64),
    size: u64,
) -> Result<((u64, u64), Option<Header>), String> {
    let old = values
        .get((subject, key))
        .map_err(|e| e.to_string())?
        .map(|entry| Header::read(entry.value()))
        .transpose()?;
    let (keys, bytes) = counted;
    let after = match old {
        Some(old) => (keys, bytes.saturating_sub(old.size).saturating_add(size)),
        None => (keys.saturating_add(1), bytes.saturating_add(size)),
    };
    Ok((after, old))
}

/// The limit `counted` passes, if any.
fn over((keys, bytes): (u64, u64), limits: StateLimits) -> Option<StateRefused> {
    if keys > limits.max_keys {
        Some(StateRefused::Keys)
    } else if bytes > limits.max_bytes {
        Some(StateRefused::Bytes)
    } else {
        None
    }
}

/// Removes `subject`'s expired values: how many, and the bytes they charged.
fn remove_expired(
    values: &mut Table<'_, (&'static str, &'static str), &'static [u8]>,
    subject: &str,
    now: u64,
) -> Result<(u64, u64), String> {
    let mut expired = Vec::new();
    for item in values.range((subject, "")..).map_err(|e| e.to_string())? {
        let (name, entry) = item.map_err(|e| e.to_string())?;
        let (owner, key) = name.value();
        if owner != subject {
            break;
        }
        let header = Header::read(entry.value())?;
        if !header.live(now) {
            expired.push((key.to_owned(), header.size));
        }
    }
    let mut removed = (0u64, 0u64);
    for (key, size) in expired {
        values
            .remove((subject, key.as_str()))
            .map_err(|e| e.to_string())?;
        removed = (removed.0 + 1, removed.1.saturating_add(size));
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreLocation;

    fn entry(value: &[u8], size: u64) -> Entry {
        Entry {
            value: value.to_vec(),
            size,
            expires: None,
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
            store.state_put("ann", "b/1", &entry(b"x", 4), room)?,
            Put::Created
        );
        assert_eq!(
            store.state_put("ann", "a/1", &entry(b"y", 4), room)?,
            Put::Created
        );
        assert_eq!(
            store.state_put("ann", "a/2", &entry(b"z", 4), room)?,
            Put::Created
        );
        assert_eq!(
            store.state_put("bob", "a/1", &entry(b"w", 4), room)?,
            Put::Created
        );
        assert_eq!(
            store.state_put("ann", "a/1", &entry(b"v", 4), room)?,
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
        assert!(store.state_delete("ann", "a/1")?);
        assert!(!store.state_delete("ann", "a/1")?);
        assert_eq!(store.state_get("ann", "a/1")?, None);
        assert_eq!(store.state_get("bob", "a/1")?, Some(b"w".to_vec()));
        Ok(())
    }

    #[test]
    fn limits_count_keys_and_bytes_and_a_replacement_once() -> Result<(), StoreError> {
        let store = Store::new(StoreLocation::Memory);
        let two = limits(2, 10);
        assert_eq!(
            store.state_put("s", "a", &entry(b"1", 4), two)?,
            Put::Created
        );
        assert_eq!(
            store.state_put("s", "b", &entry(b"2", 4), two)?,
            Put::Created
        );
        assert_eq!(
            store.state_put("s", "c", &entry(b"3", 1), two)?,
            Put::Refused(StateRefused::Keys)
        );
        // Replacing `a` with 6 bytes: 6 + 4 fits the 10; 7 + 4 does not.
        assert_eq!(
            store.state_put("s", "a", &entry(b"4", 6), two)?,
            Put::Replaced
        );
        assert_eq!(
            store.state_put("s", "a", &entry(b"5", 7), two)?,
            Put::Refused(StateRefused::Bytes)
        );
        assert_eq!(store.state_get("s", "a")?, Some(b"4".to_vec()));
        // Another subject has limits of its own.
        assert_eq!(
            store.state_put("t", "c", &entry(b"6", 10), two)?,
            Put::Created
        );
        // A deletion gives its key and bytes back.
        assert!(store.state_delete("s", "b")?);
        assert_eq!(
            store.state_put("s", "c", &entry(b"7", 4), two)?,
            Put::Created
        );
        Ok(())
    }

    #[test]
    fn an_expired_value_is_absent_and_makes_room_when_needed() -> Result<(), StoreError> {
        let store = Store::new(StoreLocation::Memory);
        let one = limits(1, 100);
        let past = Entry {
            expires: Some(1),
            ..entry(b"old", 10)
        };
        let future = Entry {
            expires: Some(now() + 3_600_000),
            ..entry(b"new", 10)
        };
        assert_eq!(store.state_put("s", "gone", &past, one)?, Put::Created);
        assert_eq!(store.state_get("s", "gone")?, None);
        assert_eq!(store.state_list("s", "")?, Vec::<String>::new());
        // The expired value still held the one key: it is removed to make room.
        assert_eq!(store.state_put("s", "kept", &future, one)?, Put::Created);
        assert_eq!(store.state_get("s", "kept")?, Some(b"new".to_vec()));
        assert_eq!(store.state_list("s", "")?, ["kept"]);
        // Over an expired value, a write creates rather than replaces.
        assert_eq!(store.state_put("s", "kept", &past, one)?, Put::Replaced);
        assert_eq!(store.state_put("s", "kept", &future, one)?, Put::Created);
        Ok(())
    }

    #[test]
    fn a_file_store_keeps_its_values_after_it_is_closed() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("deeper/store.redb");
        {
            let store = Store::new(StoreLocation::File(path.clone()));
            store.state_put("s", "k", &entry(b"kept", 8), StateLimits::default())?;
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("deeper"))?
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
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
