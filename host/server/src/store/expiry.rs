//! Rows that last until a time, in the embedded database: each table of
//! records (ID → bytes) has a table of their expiries (ID → milliseconds since
//! the epoch), so that finding the rows past their time reads no record; and
//! they are swept at most once a minute per table and process, so that a
//! write does not pay for every row.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redb::{
    Database, ReadableDatabase, ReadableTable, TableDefinition, TableError, WriteTransaction,
};

/// How often a table's rows past their time are removed, at most.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// A table of records and the table of their expiries.
#[derive(Clone, Copy)]
pub(super) struct Expiring {
    /// The records' name, for [`SWEPT`].
    pub name: &'static str,
    /// ID → the record.
    pub records: TableDefinition<'static, &'static str, &'static [u8]>,
    /// ID → when it goes, in milliseconds since the epoch.
    pub expiries: TableDefinition<'static, &'static str, u64>,
}

/// When each table was last swept by this process.
static SWEPT: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());

impl Expiring {
    /// Record `id`, unless none or past its time at `now`, read outside any
    /// write.
    pub(super) fn load(
        self,
        database: &Database,
        id: &str,
        now: u64,
    ) -> Result<Option<Vec<u8>>, String> {
        let read = database.begin_read().map_err(|e| e.to_string())?;
        let (expiries, records) = match (
            read.open_table(self.expiries),
            read.open_table(self.records),
        ) {
            (Ok(expiries), Ok(records)) => (expiries, records),
            (Err(TableError::TableDoesNotExist(_)), _)
            | (_, Err(TableError::TableDoesNotExist(_))) => {
                return Ok(None);
            }
            (Err(error), _) | (_, Err(error)) => return Err(error.to_string()),
        };
        let live = expiries
            .get(id)
            .map_err(|e| e.to_string())?
            .is_some_and(|expires| expires.value() > now);
        if !live {
            return Ok(None);
        }
        Ok(records
            .get(id)
            .map_err(|e| e.to_string())?
            .map(|bytes| bytes.value().to_vec()))
    }

    /// Record `id`, unless none or past its time at `now`.
    pub(super) fn get(
        self,
        transaction: &WriteTransaction,
        id: &str,
        now: u64,
    ) -> Result<Option<Vec<u8>>, String> {
        let expiries = transaction
            .open_table(self.expiries)
            .map_err(|e| e.to_string())?;
        let live = expiries
            .get(id)
            .map_err(|e| e.to_string())?
            .is_some_and(|expires| expires.value() > now);
        if !live {
            return Ok(None);
        }
        let records = transaction
            .open_table(self.records)
            .map_err(|e| e.to_string())?;
        Ok(records
            .get(id)
            .map_err(|e| e.to_string())?
            .map(|bytes| bytes.value().to_vec()))
    }

    /// Sets record `id` to `bytes` until `expires`.
    pub(super) fn put(
        self,
        transaction: &WriteTransaction,
        id: &str,
        bytes: &[u8],
        expires: u64,
    ) -> Result<(), String> {
        let mut records = transaction
            .open_table(self.records)
            .map_err(|e| e.to_string())?;
        records.insert(id, bytes).map_err(|e| e.to_string())?;
        let mut expiries = transaction
            .open_table(self.expiries)
            .map_err(|e| e.to_string())?;
        expiries.insert(id, expires).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Removes record `id`.
    pub(super) fn remove(self, transaction: &WriteTransaction, id: &str) -> Result<(), String> {
        let mut records = transaction
            .open_table(self.records)
            .map_err(|e| e.to_string())?;
        records.remove(id).map_err(|e| e.to_string())?;
        let mut expiries = transaction
            .open_table(self.expiries)
            .map_err(|e| e.to_string())?;
        expiries.remove(id).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Removes the records past their time at `now`, unless this process
    /// did so less than [`SWEEP_EVERY`] ago.
    pub(super) fn sweep(self, transaction: &WriteTransaction, now: u64) -> Result<(), String> {
        if !due(self.name) {
            return Ok(());
        }
        let ended: Vec<String> = {
            let expiries = transaction
                .open_table(self.expiries)
                .map_err(|e| e.to_string())?;
            let mut ended = Vec::new();
            for entry in expiries.iter().map_err(|e| e.to_string())? {
                let (id, expires) = entry.map_err(|e| e.to_string())?;
                if expires.value() <= now {
                    ended.push(id.value().to_owned());
                }
            }
            ended
        };
        for id in &ended {
            self.remove(transaction, id)?;
        }
        Ok(())
    }
}

/// Whether table `name` is due a sweep (and marks it swept).
fn due(name: &'static str) -> bool {
    let mut swept = SWEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    match swept.iter_mut().find(|(table, _)| *table == name) {
        Some((_, at)) if now.duration_since(*at) < SWEEP_EVERY => false,
        Some((_, at)) => {
            *at = now;
            true
        }
        None => {
            swept.push((name, now));
            true
        }
    }
}
