//! The state capabilities' values in Redis (`--store redis://`), shared by
//! replicas on any machine: per owner, a hash of values, a hash of each key's
//! expiry and size, and a hash of its usage, each step one Lua script
//! (`scripts/*.lua`), so that two replicas never interleave inside one and the
//! limits hold across them. Expiries are by Redis's clock, so replicas whose
//! clocks differ agree.
//!
//! The connection is made at the first state call, on the runtime that call
//! runs on, with the task store's timeouts (3 s to connect, 2 s for an
//! answer). A request that meets a connection found broken (Redis restarted)
//! is sent once more on the new one; any other failure drops the connection,
//! so the next call makes a new one (a password changed back, say).

use std::future::Future;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use redis::Script;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::entry::{Entry, Put, StateLimits, StateRefused};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one request may wait for its answer.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The scripts, read at build time, hashed once.
static PUT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/put.lua")));
static GET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/get.lua")));
static DELETE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/delete.lua")));
static LIST: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/list.lua")));

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

    /// The connection, made when there is none.
    fn connection(&self) -> Result<ConnectionManager, String> {
        let mut made = self.lock();
        if let Some(connection) = made.as_ref() {
            return Ok(connection.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let connection = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|error| format!("a connection cannot be set up ({:?})", error.kind()))?;
        *made = Some(connection.clone());
        Ok(connection)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ConnectionManager>> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `request` on the connection: once more on a connection found
    /// broken; any other failure drops the connection.
    pub(super) async fn ask<T, F, R>(&self, request: F) -> Result<T, String>
    where
        F: Fn(ConnectionManager) -> R,
        R: Future<Output = redis::RedisResult<T>>,
    {
        let mut retried = false;
        loop {
            match request(self.connection()?).await {
                Ok(value) => return Ok(value),
                Err(error)
                    if !retried && (error.is_io_error() || error.is_connection_dropped()) =>
                {
                    retried = true;
                }
                Err(error) => {
                    *self.lock() = None;
                    return Err(error.to_string());
                }
            }
        }
    }

    pub(crate) async fn get(&self, owner: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        let names = &Names::of(owner);
        self.ask(|mut connection| async move {
            GET.key(&names.values)
                .key(&names.meta)
                .arg(key)
                .invoke_async(&mut connection)
                .await
        })
        .await
    }

    pub(crate) async fn put(
        &self,
        owner: &str,
        key: &str,
        entry: &Entry,
        limits: StateLimits,
    ) -> Result<Put, String> {
        let names = &Names::of(owner);
        let put: String = self
            .ask(|mut connection| async move {
                PUT.key(&names.values)
                    .key(&names.meta)
                    .key(&names.usage)
                    .arg(key)
                    .arg(entry.value.as_slice())
                    .arg(entry.ttl_ms.unwrap_or(0))
                    .arg(entry.size)
                    .arg(limits.max_keys)
                    .arg(limits.max_bytes)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        match put.as_str() {
            "created" => Ok(Put::Created),
            "replaced" => Ok(Put::Replaced),
            "keys" => Ok(Put::Refused(StateRefused::Keys)),
            "bytes" => Ok(Put::Refused(StateRefused::Bytes)),
            other => Err(format!("an answer no script gives: {other:?}")),
        }
    }

    pub(crate) async fn delete(&self, owner: &str, key: &str) -> Result<bool, String> {
        let names = &Names::of(owner);
        let deleted: i64 = self
            .ask(|mut connection| async move {
                DELETE
                    .key(&names.values)
                    .key(&names.meta)
                    .key(&names.usage)
                    .arg(key)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(deleted == 1)
    }

    pub(crate) async fn list(&self, owner: &str, prefix: &str) -> Result<Vec<String>, String> {
        let names = &Names::of(owner);
        let mut keys: Vec<String> = self
            .ask(|mut connection| async move {
                LIST.key(&names.meta)
                    .arg(prefix)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        keys.sort_unstable();
        Ok(keys)
    }
}

/// The name of session `id`'s hash (hex-encoded: a client's header never
/// names another key).
fn session_key(id: &str) -> String {
    format!("codemode:session:{}", hex::encode(id))
}

impl RedisState {
    pub(crate) async fn session_load(
        &self,
        id: &str,
    ) -> Result<Option<super::session_record::SessionRecord>, String> {
        let key = &session_key(id);
        let (owner, initialize, ended): (Option<String>, Option<String>, Option<String>) = self
            .ask(|mut connection| async move {
                redis::cmd("HMGET")
                    .arg(key)
                    .arg("owner")
                    .arg("initialize")
                    .arg("ended")
                    .query_async(&mut connection)
                    .await
            })
            .await?;
        let ended = ended.is_some();
        Ok(
            (owner.is_some() || initialize.is_some() || ended).then_some(
                super::session_record::SessionRecord {
                    owner,
                    initialize,
                    ended,
                },
            ),
        )
    }

    pub(crate) async fn session_write(
        &self,
        id: &str,
        field: super::session_record::SessionField,
        value: &str,
        ttl: Duration,
    ) -> Result<(), String> {
        let key = &session_key(id);
        let ttl = super::session_record::millis(ttl);
        self.ask(|mut connection| async move {
            redis::pipe()
                .atomic()
                .hset(key, field.name(), value)
                .ignore()
                .pexpire(key, i64::try_from(ttl).unwrap_or(i64::MAX))
                .ignore()
                .query_async::<()>(&mut connection)
                .await
        })
        .await
    }

    pub(crate) async fn session_refresh(&self, id: &str, ttl: Duration) -> Result<(), String> {
        let key = &session_key(id);
        let ttl = i64::try_from(super::session_record::millis(ttl)).unwrap_or(i64::MAX);
        self.ask(|mut connection| async move {
            redis::cmd("PEXPIRE")
                .arg(key)
                .arg(ttl)
                .query_async::<i64>(&mut connection)
                .await
        })
        .await
        .map(|_| ())
    }

    pub(crate) async fn session_delete(&self, id: &str) -> Result<(), String> {
        let key = &session_key(id);
        self.ask(|mut connection| async move {
            redis::cmd("DEL")
                .arg(key)
                .query_async::<i64>(&mut connection)
                .await
        })
        .await
        .map(|_| ())
    }

    /// Publishes `payload` on `channel`; how many subscribers heard it.
    pub(crate) async fn publish(&self, channel: &str, payload: &str) -> Result<u64, String> {
        self.ask(|mut connection| async move {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(payload)
                .query_async::<u64>(&mut connection)
                .await
        })
        .await
    }

    /// The client, for a subscription of its own.
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }
}
