//! The state capabilities' values in Redis (`--store redis://`), shared by
//! replicas on any machine: per owner, a hash of values, a hash of each key's
//! expiry and size, and a hash of its usage, each step one Lua script
//! (`scripts/*.lua`), so that two replicas never interleave inside one and the
//! limits hold across them.
//!
//! The connection is made at the first state call, on the runtime that call
//! runs on; every request has the task store's timeouts.

use std::sync::Mutex;
use std::time::Duration;

use redis::Script;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::entry::{Entry, Put, StateLimits, StateRefused, now_ms};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one request may wait for its answer.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The scripts, read at build time.
const PUT: &str = include_str!("scripts/put.lua");
const GET: &str = include_str!("scripts/get.lua");
const DELETE: &str = include_str!("scripts/delete.lua");
const LIST: &str = include_str!("scripts/list.lua");

/// The state in the Redis at a URL.
pub(crate) struct RedisState {
    client: redis::Client,
    connection: Mutex<Option<ConnectionManager>>,
}

/// The names of an owner's three hashes: the owner hex-encoded, so that no
/// owner's names are another's.
struct Names {
    values: String,
    meta: String,
    usage: String,
}

impl Names {
    fn of(owner: &str) -> Self {
        let owner = hex::encode(owner);
        Self {
            values: format!("codemode:state:{owner}:values"),
            meta: format!("codemode:state:{owner}:meta"),
            usage: format!("codemode:state:{owner}:usage"),
        }
    }
}

impl RedisState {
    /// The state in the Redis of `client` (its URL checked), not connected yet.
    pub(super) fn new(client: redis::Client) -> Self {
        Self {
            client,
            connection: Mutex::new(None),
        }
    }

    /// The connection, made at the first call (a failed one is made again at
    /// the next).
    fn connection(&self) -> Result<ConnectionManager, String> {
        let mut made = self
            .connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(connection) = made.as_ref() {
            return Ok(connection.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let connection = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|error| format!("cannot connect ({:?})", error.kind()))?;
        *made = Some(connection.clone());
        Ok(connection)
    }

    pub(crate) async fn get(&self, owner: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        let names = Names::of(owner);
        let mut connection = self.connection()?;
        Script::new(GET)
            .key(&names.values)
            .key(&names.meta)
            .arg(key)
            .arg(now_ms())
            .invoke_async(&mut connection)
            .await
            .map_err(|error| error.to_string())
    }

    pub(crate) async fn put(
        &self,
        owner: &str,
        key: &str,
        entry: &Entry,
        limits: StateLimits,
    ) -> Result<Put, String> {
        let names = Names::of(owner);
        let mut connection = self.connection()?;
        let put: String = Script::new(PUT)
            .key(&names.values)
            .key(&names.meta)
            .key(&names.usage)
            .arg(key)
            .arg(entry.value.as_slice())
            .arg(entry.expires.unwrap_or(0))
            .arg(entry.size)
            .arg(limits.max_keys)
            .arg(limits.max_bytes)
            .arg(now_ms())
            .invoke_async(&mut connection)
            .await
            .map_err(|error| error.to_string())?;
        match put.as_str() {
            "created" => Ok(Put::Created),
            "replaced" => Ok(Put::Replaced),
            "keys" => Ok(Put::Refused(StateRefused::Keys)),
            "bytes" => Ok(Put::Refused(StateRefused::Bytes)),
            other => Err(format!("an answer no script gives: {other:?}")),
        }
    }

    pub(crate) async fn delete(&self, owner: &str, key: &str) -> Result<bool, String> {
        let names = Names::of(owner);
        let mut connection = self.connection()?;
        let deleted: i64 = Script::new(DELETE)
            .key(&names.values)
            .key(&names.meta)
            .key(&names.usage)
            .arg(key)
            .arg(now_ms())
            .invoke_async(&mut connection)
            .await
            .map_err(|error| error.to_string())?;
        Ok(deleted == 1)
    }

    pub(crate) async fn list(&self, owner: &str, prefix: &str) -> Result<Vec<String>, String> {
        let names = Names::of(owner);
        let mut connection = self.connection()?;
        let mut keys: Vec<String> = Script::new(LIST)
            .key(&names.meta)
            .arg(prefix)
            .arg(now_ms())
            .invoke_async(&mut connection)
            .await
            .map_err(|error| error.to_string())?;
        keys.sort_unstable();
        Ok(keys)
    }
}
