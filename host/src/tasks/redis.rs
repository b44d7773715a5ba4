//! The task store in Redis (`--task-store redis://HOST:PORT/N`), shared by the
//! replicas behind a load balancer: any of them answers status, result and
//! cancel for a task another one runs.
//!
//! Each task is a hash `codemode:task:<id>` (its subject, status, result or
//! error as JSON text, and times in milliseconds since the epoch) that expires
//! on its own: `--max-task-time` plus `--task-ttl` after it was created while it
//! runs, `--task-ttl` after it ended. The sorted set `codemode:tasks` holds the
//! IDs by creation time, for keeping at most `--max-tasks` and
//! [`super::MAX_STORED_BYTES`] of results (the oldest ended tasks dropped first; the
//! sizes are kept in `codemode:tasks:sizes` and their sum in
//! `codemode:tasks:bytes`). Every step that reads and then writes (create,
//! finish, cancel) is one Lua script, so that two replicas never interleave
//! inside one; the scripts walk the set a hundred IDs at a time.
//!
//! A task runs on the replica that created it, which alone can stop its
//! execution. A cancel on any replica marks the task cancelled and publishes its
//! ID on `codemode:tasks:cancel`; the running replica, subscribed, stops the
//! execution. A message missed while the subscription was down is made up for
//! when it is back, and every few seconds the running replica also reads the
//! status of its tasks, so that no cancel is lost for good. A task still
//! working [`STALE_AFTER`] past its time budget lost its replica (killed, or
//! unable to write its end): it reads as [`TaskState::Lost`] and can be dropped.
//!
//! A task waiting for input is `input_required`, its requests in `input` and
//! their key in `input_key`; its budget grew by `extended` ms (its expiry too).
//! An answer on any replica is stored in `answer` (with `answer_key`), the task
//! set working again and its ID published on `codemode:tasks:answer`; the
//! running replica takes the answer (once: it is deleted as it is read) when
//! the message comes, and at every status check, so that none is lost with a
//! message.
//!
//! When Redis does not answer, requests about tasks fail within a few seconds
//! with [`Unavailable`] (the reason is logged); a result that could not be
//! written is retried in the background for up to `--task-ttl`, so that a short
//! outage loses none, and a task Redis lost (restarted empty) is written again
//! whole. The server starts whether or not Redis answers: direct calls never
//! need it. A connection whose peer vanished without a word is given up after
//! [`USER_TIMEOUT`] of unanswered data.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use redis::IntoConnectionInfo;
use redis::aio::ConnectionManager;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use super::{
    Answer, MAX_RESPONSES, Question, TaskLimits, TaskRefused, TaskState, TaskView, Unavailable,
    new_id,
};

/// The prefix of a task's hash key; the task's ID follows.
const TASK_KEY: &str = "codemode:task:";
/// The sorted set of task IDs by creation time.
const ORDER_KEY: &str = "codemode:tasks";
/// The hash of each ended task's result size, by ID.
const SIZES_KEY: &str = "codemode:tasks:sizes";
/// The sum of the sizes.
const BYTES_KEY: &str = "codemode:tasks:bytes";
/// The prefix of a claimed single-use token's key.
const CLAIM_KEY: &str = "codemode:claim:";
/// The pub/sub channel on which cancelled tasks' IDs are published.
pub const CANCEL_CHANNEL: &str = "codemode:tasks:cancel";
/// The pub/sub channel on which the IDs of tasks whose input came are
/// published.
pub const ANSWER_CHANNEL: &str = "codemode:tasks:answer";

/// How long connecting to Redis may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one request to Redis may take before it counts as unavailable.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long data sent on a connection may go unacknowledged before the
/// connection is dropped (TCP_USER_TIMEOUT): a Redis that vanished without a
/// reset is then reconnected to instead of timing out every request.
const USER_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a replica reads the status of the tasks it runs (a cancel whose
/// message it missed stops them within this).
const RECONCILE_EVERY: Duration = Duration::from_secs(5);
/// The longest wait between two tries to write a result or to subscribe.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
/// How long past its time budget a task still working is taken for lost.
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// How long a stopping server waits for the results it is still writing.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// The functions the scripts share. `ended` tells a task's state from its
/// hash (`gone`, `ended`, or `working`; a working one, or one waiting for
/// input, older than the stale limit and what its budget grew by counts as
/// ended); `forget` drops a task and its size; `make_room`
/// drops the oldest ended (or gone) tasks, a hundred IDs read at a time, until
/// `fits()` holds or none is left, never `keep`.
const PRELUDE: &str = r"
local function ended(key, now, stale)
  local f = redis.call('HMGET', key, 'status', 'created', 'extended')
  if not f[1] then return 'gone' end
  if f[1] ~= 'working' and f[1] ~= 'input_required' then return 'ended' end
  if (tonumber(f[2]) or 0) + (tonumber(f[3]) or 0) + stale < now then return 'ended' end
  return 'working'
end
local function forget(order, sizes, bytes, prefix, id)
  redis.call('DEL', prefix .. id)
  redis.call('ZREM', order, id)
  local size = redis.call('HGET', sizes, id)
  if size then
    redis.call('HDEL', sizes, id)
    redis.call('DECRBY', bytes, size)
  end
end
local function make_room(order, sizes, bytes, prefix, now, stale, fits, keep)
  local start = 0
  while not fits() do
    local ids = redis.call('ZRANGE', order, start, start + 99)
    if #ids == 0 then return false end
    local kept = 0
    for _, id in ipairs(ids) do
      if fits() then return true end
      if id ~= keep and ended(prefix .. id, now, stale) ~= 'working' then
        forget(order, sizes, bytes, prefix, id)
      else
        kept = kept + 1
      end
    end
    start = start + kept
  end
  return true
end
";

/// Creates a working task, unless `--max-tasks` are kept and none of them has
/// ended. KEYS: order, sizes, bytes, task. ARGV: ID, subject, now, max tasks,
/// expiry in ms, task key prefix, stale limit in ms. Returns 1 when created, 0
/// when full.
const CREATE: &str = r"
local max = tonumber(ARGV[4])
local fits = function() return redis.call('ZCARD', KEYS[1]) < max end
if not make_room(KEYS[1], KEYS[2], KEYS[3], ARGV[6], tonumber(ARGV[3]), tonumber(ARGV[7]), fits, '') then
  return 0
end
redis.call('HSET', KEYS[4], 'subject', ARGV[2], 'status', 'working', 'created', ARGV[3], 'updated', ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[5])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
";

/// Ends a working task with a status and its JSON text, keeps it for the TTL
/// and counts its size, dropping the oldest ended tasks past the byte budget.
/// A task that is gone (Redis lost it, or restarted empty) is written again
/// whole, so that its result is not lost; a cancelled one stays cancelled.
/// KEYS: task, order, sizes, bytes. ARGV: status, payload, now, TTL in ms,
/// subject, created, ID, task key prefix, stale limit in ms, byte budget.
/// Returns 1 when written, 0 when it had ended.
const FINISH: &str = r"
local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= 'working' and status ~= 'input_required' then return 0 end
if not status then
  redis.call('HSET', KEYS[1], 'subject', ARGV[5], 'created', ARGV[6])
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[7])
end
redis.call('HDEL', KEYS[1], 'input', 'input_key', 'answer', 'answer_key')
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'payload', ARGV[2], 'updated', ARGV[3], 'ended', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local size = string.len(ARGV[2])
local old = redis.call('HGET', KEYS[3], ARGV[7])
if old then redis.call('DECRBY', KEYS[4], old) end
redis.call('HSET', KEYS[3], ARGV[7], size)
redis.call('INCRBY', KEYS[4], size)
local max = tonumber(ARGV[10])
local fits = function() return (tonumber(redis.call('GET', KEYS[4])) or 0) <= max end
make_room(KEYS[2], KEYS[3], KEYS[4], ARGV[8], tonumber(ARGV[3]), tonumber(ARGV[9]), fits, ARGV[7])
return 1
";

/// Cancels a task of a subject (of any subject when ARGV[2] is `1`): a working
/// one (or one waiting for input) is marked cancelled, kept for the TTL and its ID published for the
/// replica that runs it. KEYS: task. ARGV: subject, any subject, now, TTL in
/// ms, channel, ID. Returns 1 when the task exists (cancelled now or ended
/// before), 0 when not found.
const CANCEL: &str = r"
local found = redis.call('HMGET', KEYS[1], 'subject', 'status')
if not found[1] or (ARGV[2] ~= '1' and found[1] ~= ARGV[1]) then return 0 end
if found[2] == 'working' or found[2] == 'input_required' then
  redis.call('HDEL', KEYS[1], 'input', 'input_key', 'answer', 'answer_key')
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'updated', ARGV[3], 'ended', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('PUBLISH', ARGV[5], ARGV[6])
end
return 1
";

/// Marks a running task as waiting for input (an ended or gone one is left
/// as it is), its budget grown and its expiry moved. KEYS: task. ARGV: the
/// request key, the requests, now, what its budget grew by in all (ms), its
/// new expiry (ms since the epoch). Returns 1 when marked, 0 when it had
/// ended.
const ASK: &str = r"
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'working' and status ~= 'input_required' then return 0 end
redis.call('HDEL', KEYS[1], 'answer', 'answer_key')
redis.call('HSET', KEYS[1], 'status', 'input_required', 'input', ARGV[2], 'input_key', ARGV[1], 'updated', ARGV[3], 'extended', ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[5])
return 1
";

/// Delivers a subject's answer to its task: the response for the key it waits
/// on (if one is given) is stored for the running replica, the task works
/// again and its ID is published; other responses are ignored. KEYS: task.
/// ARGV: subject, now, channel, ID, then key and response pairs. Returns 1
/// when the task exists, 0 when not found.
const ANSWER: &str = r"
local f = redis.call('HMGET', KEYS[1], 'subject', 'status', 'input_key')
if not f[1] or f[1] ~= ARGV[1] then return 0 end
if f[2] == 'input_required' then
  for i = 5, #ARGV - 1, 2 do
    if ARGV[i] == f[3] then
      redis.call('HDEL', KEYS[1], 'input', 'input_key')
      redis.call('HSET', KEYS[1], 'status', 'working', 'updated', ARGV[2], 'answer', ARGV[i + 1], 'answer_key', f[3])
      redis.call('PUBLISH', ARGV[3], ARGV[4])
      break
    end
  end
end
return 1
";

/// The running replica takes the answer to the key its task waits on: read
/// and deleted. KEYS: task. ARGV: the key, the most bytes of an answer read
/// (a larger one, planted, is left unread). Returns the response, or nil.
const TAKE: &str = r"
if redis.call('HSTRLEN', KEYS[1], 'answer') > tonumber(ARGV[2]) then return false end
local f = redis.call('HMGET', KEYS[1], 'answer_key', 'answer')
if f[1] ~= ARGV[1] or not f[2] then return false end
redis.call('HDEL', KEYS[1], 'answer', 'answer_key')
return f[2]
";

/// The task no longer waits on the key (the asker gave up, or took the
/// answer): it works again, an answer to that key left unread is dropped, and
/// a task still running gets its settled budget growth and expiry (when
/// given). KEYS: task. ARGV: the key, now, what its budget grew by in all
/// (ms, or empty), its expiry (ms since the epoch, or empty).
const RESUME: &str = r"
local f = redis.call('HMGET', KEYS[1], 'status', 'input_key', 'answer_key')
if f[1] == 'input_required' and f[2] == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'input', 'input_key')
  redis.call('HSET', KEYS[1], 'status', 'working', 'updated', ARGV[2])
end
if f[3] == ARGV[1] then redis.call('HDEL', KEYS[1], 'answer', 'answer_key') end
if ARGV[3] ~= '' and (f[1] == 'working' or f[1] == 'input_required') then
  redis.call('HSET', KEYS[1], 'extended', ARGV[3])
  redis.call('PEXPIREAT', KEYS[1], ARGV[4])
end
return 1
";

/// Reads fields of a hash, none larger than its bound, so that a value planted
/// in the store (by whoever else can write it) is never read whole. KEYS: the
/// hash. ARGV: the most bytes of a small field, of `payload`, of `input` and
/// `answer`; then the fields. Returns `ok` and the values (nil for a missing
/// one), or `oversized` and the first field over its bound.
const READ: &str = r"
local function bound(name)
  if name == 'payload' then return tonumber(ARGV[2]) end
  if name == 'input' or name == 'answer' then return tonumber(ARGV[3]) end
  return tonumber(ARGV[1])
end
local fields = {}
for i = 4, #ARGV do
  if redis.call('HSTRLEN', KEYS[1], ARGV[i]) > bound(ARGV[i]) then
    return {'oversized', ARGV[i]}
  end
  fields[#fields + 1] = ARGV[i]
end
local values = redis.call('HMGET', KEYS[1], unpack(fields))
local out = {'ok'}
for i = 1, #fields do out[i + 1] = values[i] end
return out
";

/// The most bytes of a task's small field (its subject, status, times and
/// keys) read from the store: a server writes a few dozen.
const MAX_FIELD_BYTES: usize = 4096;

/// The most bytes of a task's `input` (its questions) or `answer` read from
/// the store: a server writes at most [`MAX_RESPONSES`] questions of a few
/// kilobytes, and answers reduced to their action and two fields.
const MAX_INPUT_BYTES: usize = 1024 * 1024;

/// The scripts, hashed once.
struct Scripts {
    read: redis::Script,
    create: redis::Script,
    finish: redis::Script,
    cancel: redis::Script,
    ask: redis::Script,
    answer: redis::Script,
    take: redis::Script,
    resume: redis::Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
        read: redis::Script::new(READ),
        create: redis::Script::new(&format!("{PRELUDE}{CREATE}")),
        finish: redis::Script::new(&format!("{PRELUDE}{FINISH}")),
        cancel: redis::Script::new(CANCEL),
        ask: redis::Script::new(ASK),
        answer: redis::Script::new(ANSWER),
        take: redis::Script::new(TAKE),
        resume: redis::Script::new(RESUME),
    });
    &SCRIPTS
}

/// Why the task store could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL is not `redis://[[USER]:PASSWORD@]HOST[:PORT][/N]`.
    #[error("--task-store {url}: {reason}")]
    Url {
        /// The URL, without its password.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A task running on this replica.
struct Running {
    /// Its subject and creation time, to write it again whole if Redis lost it.
    subject: String,
    created_ms: u64,
    /// Stops its execution (a dropped future cancels it).
    abort: Option<tokio::task::AbortHandle>,
    /// What its time budget grew by while it waited for input.
    extended: Duration,
    /// The question it waits on.
    question: Option<Question>,
}

/// The tasks this replica runs, by ID.
type Local = Arc<Mutex<HashMap<String, Running>>>;

/// The task store in Redis.
pub struct RedisTasks {
    limits: TaskLimits,
    connection: ConnectionManager,
    local: Local,
    /// Where results are written in the background, and waited for at the end.
    runtime: tokio::runtime::Handle,
    writes: TaskTracker,
    /// The subscriber to cancels (ended when the store is dropped).
    subscriber: tokio::task::AbortHandle,
}

impl std::fmt::Debug for RedisTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTasks")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisTasks {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

/// `url` without its password (whatever is between `://` and the last `@`),
/// to be shown and logged.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// Checks that `url` names a Redis the store can use (`redis://`; TLS and Unix
/// sockets are not supported) and makes its client, whose connections give up
/// after [`USER_TIMEOUT`] of unacknowledged data.
///
/// # Errors
///
/// [`ConnectError::Url`] naming what is wrong (never the password).
pub fn check_url(url: &str) -> Result<redis::Client, ConnectError> {
    let bad = |reason: String| ConnectError::Url {
        url: redacted(url),
        reason,
    };
    match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("redis") => {}
        Some("rediss") => {
            return Err(bad(
                "TLS to Redis (rediss://) is not supported; reach Redis on a private network"
                    .to_owned(),
            ));
        }
        Some(_) | None => {
            return Err(bad("expected redis://HOST:PORT/N".to_owned()));
        }
    }
    // The client's errors may quote the URL: only their kind is told.
    let info = url
        .into_connection_info()
        .map_err(|error| bad(format!("not a Redis URL ({:?})", error.kind())))?;
    let tcp = redis::io::tcp::TcpSettings::default().set_user_timeout(USER_TIMEOUT);
    redis::Client::open(info.set_tcp_settings(tcp))
        .map_err(|error| bad(format!("not a Redis URL ({:?})", error.kind())))
}

/// Milliseconds since the epoch, now.
fn now_ms() -> u64 {
    millis_since_epoch(SystemTime::now())
}

fn millis_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn time_of(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Runs one request to Redis; a timeout or an error is [`Unavailable`], with
/// the reason logged here. A connection found broken is tried once more: the
/// first request after an outage gets the old connection's error while the
/// new one is made.
async fn ask<T, F, R>(what: &'static str, mut request: F) -> Result<T, Unavailable>
where
    F: FnMut() -> R,
    R: Future<Output = redis::RedisResult<T>>,
{
    let limit = RESPONSE_TIMEOUT + Duration::from_secs(1);
    let mut retried = false;
    loop {
        let reason = match tokio::time::timeout(limit, request()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error))
                if !retried && (error.is_io_error() || error.is_connection_dropped()) =>
            {
                retried = true;
                continue;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => "no answer in time".to_owned(),
        };
        tracing::warn!(reason = %reason, "task store unavailable: cannot {what}");
        return Err(Unavailable);
    }
}

/// The limit past which a working task is taken for lost, in milliseconds.
fn stale_ms(limits: TaskLimits) -> u64 {
    millis(limits.max_task_time + STALE_AFTER)
}

/// Gives a task's slot back unless [`Slot::keep`] was called: a `create`
/// whose future is dropped while Redis answers leaves no slot taken.
struct Slot<'a> {
    local: &'a Local,
    id: &'a str,
    kept: bool,
}

impl Slot<'_> {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.kept {
            lock(self.local).remove(self.id);
        }
    }
}

impl RedisTasks {
    /// The store in the Redis at `url`, subscribed to cancels. It connects now
    /// when it can; when Redis does not answer, the server serves anyway (a WARN
    /// says so) and requests about tasks fail until it does.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when the URL is not a `redis://` one.
    pub async fn connect(url: &str, limits: TaskLimits) -> Result<Self, ConnectError> {
        let client = check_url(url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let connection =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(|error| {
                ConnectError::Url {
                    url: redacted(url),
                    reason: format!("{:?}", error.kind()),
                }
            })?;
        let pinged = ask("reach it", || {
            let mut probe = connection.clone();
            async move { redis::cmd("PING").query_async::<String>(&mut probe).await }
        })
        .await;
        match pinged {
            Ok(_) => {
                tracing::info!(store = %redacted(url), "tasks are kept in Redis, shared with the other replicas")
            }
            Err(Unavailable) => {
                tracing::warn!(store = %redacted(url), "the task store does not answer: direct calls are served, requests about tasks fail until it does")
            }
        }
        let local = Local::default();
        let subscriber = tokio::spawn(subscribe(client, connection.clone(), local.clone()));
        Ok(Self {
            limits,
            connection,
            local,
            runtime: tokio::runtime::Handle::current(),
            writes: TaskTracker::new(),
            subscriber: subscriber.abort_handle(),
        })
    }

    /// What the store allows.
    pub fn limits(&self) -> TaskLimits {
        self.limits
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        lock(&self.local)
    }

    /// A new working task of `subject`, to run on this replica: at most
    /// [`TaskLimits::max_running`] run here at once, and at most
    /// [`TaskLimits::max_tasks`] are kept in Redis for all replicas.
    pub async fn create(&self, subject: &str) -> Result<TaskView, TaskRefused> {
        let id = new_id()?;
        let now = now_ms();
        {
            // The slot is taken before Redis is asked, so that two requests
            // never both take the last one.
            let mut running = self.running();
            let mine = running
                .values()
                .filter(|task| task.subject == subject)
                .count();
            if running.len() >= self.limits.max_running.max(1)
                || mine >= self.limits.max_running_per_subject()
            {
                return Err(TaskRefused::Running);
            }
            running.insert(
                id.clone(),
                Running {
                    subject: subject.to_owned(),
                    created_ms: now,
                    abort: None,
                    extended: Duration::ZERO,
                    question: None,
                },
            );
        }
        let slot = Slot {
            local: &self.local,
            id: &id,
            kept: false,
        };
        let task_key = format!("{TASK_KEY}{id}");
        let expiry = millis(self.limits.max_task_time + self.limits.ttl);
        let stale = stale_ms(self.limits);
        let max_tasks = self.limits.max_tasks.max(1);
        let connection = &self.connection;
        let created = ask("create a task", || {
            let mut script = scripts().create.prepare_invoke();
            script
                .key(ORDER_KEY)
                .key(SIZES_KEY)
                .key(BYTES_KEY)
                .key(&task_key)
                .arg(&id)
                .arg(subject)
                .arg(now)
                .arg(max_tasks)
                .arg(expiry)
                .arg(TASK_KEY)
                .arg(stale);
            let mut connection = connection.clone();
            async move { script.invoke_async::<i64>(&mut connection).await }
        })
        .await;
        match created {
            Ok(1) => {
                slot.keep();
                Ok(TaskView {
                    id: id.clone(),
                    state: TaskState::Working,
                    created: time_of(now),
                    updated: time_of(now),
                    ttl: self.limits.max_task_time + self.limits.ttl,
                })
            }
            Ok(_) => Err(TaskRefused::Full),
            Err(Unavailable) => Err(TaskRefused::Unavailable),
        }
    }

    /// Ties the running execution of task `id` to it; a task no longer running
    /// here (cancelled meanwhile) stops it at once.
    pub fn attach(&self, id: &str, abort: tokio::task::AbortHandle) {
        match self.running().get_mut(id) {
            Some(running) => running.abort = Some(abort),
            None => abort.abort(),
        }
    }

    /// Task `id` of `subject`, as Redis holds it.
    pub async fn get(&self, subject: &str, id: &str) -> Result<Option<TaskView>, Unavailable> {
        let key = format!("{TASK_KEY}{id}");
        let connection = &self.connection;
        let max_payload = self.limits.max_stored_bytes;
        let read: Vec<Option<String>> = ask("read a task", || {
            let mut script = scripts().read.prepare_invoke();
            script
                .key(&key)
                .arg(MAX_FIELD_BYTES)
                .arg(max_payload)
                .arg(MAX_INPUT_BYTES)
                .arg(&[
                    "subject", "status", "payload", "created", "updated", "ended", "extended",
                    "input",
                ]);
            let mut connection = connection.clone();
            async move { script.invoke_async(&mut connection).await }
        })
        .await?;
        let mut read = read.into_iter();
        match read.next().flatten().as_deref() {
            Some("ok") => Ok(view(self.limits, now_ms(), id, subject, read.collect())),
            _ => {
                // Never written by a server: read as no task, with a WARN.
                let field = read.next().flatten().unwrap_or_default();
                tracing::warn!(task = %id, field = %field, "a task in the task store holds a value over the bound a server writes; it is not read");
                Ok(None)
            }
        }
    }

    /// Ends task `id`, which runs here, with `state`; the result is written in
    /// the background, retried for up to the TTL while Redis is unavailable.
    /// A task cancelled meanwhile stays cancelled.
    pub fn finish(&self, id: &str, state: TaskState) {
        let Some(running) = self.running().remove(id) else {
            // Cancelled (or the server is ending): its state is written.
            return;
        };
        let (status, payload) = match state {
            TaskState::Completed(text) => ("completed", text),
            TaskState::Failed(text) => ("failed", text),
            TaskState::Cancelled | TaskState::Lost => ("cancelled", Arc::from("")),
            TaskState::Working | TaskState::InputRequired(_) => return,
        };
        let write = Finish {
            id: id.to_owned(),
            status,
            payload,
            subject: running.subject,
            created_ms: running.created_ms,
            limits: self.limits,
        };
        // Runs on its own; `cancel_all` waits for it through the tracker.
        drop(
            self.writes
                .spawn_on(write.run(self.connection.clone()), &self.runtime),
        );
    }

    /// Cancels task `id` of `subject`, wherever it runs.
    pub async fn cancel(&self, subject: &str, id: &str) -> Result<bool, Unavailable> {
        let found = self.cancel_in_redis(Some(subject), id).await?;
        if found {
            // Running here: stopped now rather than when the message comes back.
            let _ = stop(&self.local, id);
        }
        Ok(found)
    }

    /// Cancels task `id` in Redis, of `subject` only when one is given.
    async fn cancel_in_redis(&self, subject: Option<&str>, id: &str) -> Result<bool, Unavailable> {
        let key = format!("{TASK_KEY}{id}");
        let now = now_ms();
        let ttl = millis(self.limits.ttl);
        let connection = &self.connection;
        let found = ask("cancel a task", || {
            let mut script = scripts().cancel.prepare_invoke();
            script
                .key(&key)
                .arg(subject.unwrap_or(""))
                .arg(if subject.is_some() { "0" } else { "1" })
                .arg(now)
                .arg(ttl)
                .arg(CANCEL_CHANNEL)
                .arg(id);
            let mut connection = connection.clone();
            async move { script.invoke_async::<i64>(&mut connection).await }
        })
        .await?;
        Ok(found == 1)
    }

    /// Task `id`, which runs here, waits for the answer to `key`, showing
    /// `requests`; its budget and expiry grow by `extend`. A task that ended
    /// (or that Redis lost) gets an answer that never comes.
    pub async fn ask(
        &self,
        id: &str,
        key: &str,
        requests: Arc<str>,
        extend: Duration,
    ) -> Result<Answer, Unavailable> {
        let (sender, answer) = oneshot::channel();
        let (created_ms, extended_ms) = {
            let mut running = self.running();
            let Some(task) = running.get_mut(id) else {
                return Ok(answer);
            };
            task.extended += extend;
            task.question = Some(Question {
                key: key.to_owned(),
                reserved: extend,
                answer: Some(sender),
            });
            (task.created_ms, millis(task.extended))
        };
        let expire_at = created_ms
            .saturating_add(extended_ms)
            .saturating_add(millis(self.limits.max_task_time + self.limits.ttl));
        let task_key = format!("{TASK_KEY}{id}");
        let connection = &self.connection;
        let marked = ask("ask for input", || {
            let mut script = scripts().ask.prepare_invoke();
            script
                .key(&task_key)
                .arg(key)
                .arg(requests.as_ref())
                .arg(now_ms())
                .arg(extended_ms)
                .arg(expire_at);
            let mut connection = connection.clone();
            async move { script.invoke_async::<i64>(&mut connection).await }
        })
        .await;
        if !matches!(marked, Ok(1)) {
            // Nobody can answer: the wait ends at once (its resume still
            // settles what was reserved).
            if let Some(question) = self
                .running()
                .get_mut(id)
                .and_then(|task| task.question.as_mut())
            {
                question.answer = None;
            }
        }
        marked.map(|_| answer)
    }

    /// Delivers `responses` to task `id` of `subject` (the one for the key it
    /// waits on; the rest are ignored); when it runs here, the answer is taken
    /// at once, else its replica hears of it.
    pub async fn answer(
        &self,
        subject: &str,
        id: &str,
        responses: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, Unavailable> {
        let pairs: Vec<(&String, String)> = responses
            .iter()
            .take(MAX_RESPONSES)
            .map(|(key, response)| (key, response.to_string()))
            .collect();
        let task_key = format!("{TASK_KEY}{id}");
        let now = now_ms();
        let connection = &self.connection;
        let found = ask("answer a task", || {
            let mut script = scripts().answer.prepare_invoke();
            script
                .key(&task_key)
                .arg(subject)
                .arg(now)
                .arg(ANSWER_CHANNEL)
                .arg(id);
            for (key, response) in &pairs {
                script.arg(key.as_str()).arg(response.as_str());
            }
            let mut connection = connection.clone();
            async move { script.invoke_async::<i64>(&mut connection).await }
        })
        .await?;
        if found == 1 {
            take(&self.connection, &self.local, id).await;
        }
        Ok(found == 1)
    }

    /// Task `id`, which runs here, no longer waits on `key`, after `waited`:
    /// it works again, its budget and expiry grown by the time waited (written
    /// in the background).
    pub fn resume(&self, id: &str, key: &str, waited: Duration) {
        let settled = {
            let mut running = self.running();
            running.get_mut(id).and_then(|task| {
                let question = task.question.take_if(|q| q.key == key)?;
                task.extended = question.settle(task.extended, waited);
                Some((task.created_ms, millis(task.extended)))
            })
        };
        // Unsettled (the task ended, or another question is asked): the
        // budget is left as it is.
        let (extended, expire_at) = match settled {
            Some((created_ms, extended_ms)) => (
                extended_ms.to_string(),
                created_ms
                    .saturating_add(extended_ms)
                    .saturating_add(millis(self.limits.max_task_time + self.limits.ttl))
                    .to_string(),
            ),
            None => (String::new(), String::new()),
        };
        let (task_key, key) = (format!("{TASK_KEY}{id}"), key.to_owned());
        let connection = self.connection.clone();
        let write = async move {
            // Unavailable: logged; the task reads as waiting until it ends.
            let _ = ask("resume a task", || {
                let mut script = scripts().resume.prepare_invoke();
                script
                    .key(&task_key)
                    .arg(&key)
                    .arg(now_ms())
                    .arg(&extended)
                    .arg(&expire_at);
                let mut connection = connection.clone();
                async move { script.invoke_async::<i64>(&mut connection).await }
            })
            .await;
        };
        drop(self.writes.spawn_on(write, &self.runtime));
    }

    /// Claims `token` for `ttl` in Redis (`SET NX PX`): `true` the first time
    /// on any replica.
    pub async fn claim(&self, token: &str, ttl: Duration) -> Result<bool, Unavailable> {
        let key = format!("{CLAIM_KEY}{token}");
        let ttl = millis(ttl).max(1);
        let connection = &self.connection;
        let set: Option<String> = ask("claim a token", || {
            let mut request = redis::cmd("SET");
            request.arg(&key).arg(1).arg("NX").arg("PX").arg(ttl);
            let mut connection = connection.clone();
            async move { request.query_async(&mut connection).await }
        })
        .await?;
        Ok(set.is_some())
    }

    /// Stops every task running here (the server is ending), marks them
    /// cancelled in Redis, and waits for the results still being written, a
    /// few seconds at most.
    pub async fn cancel_all(&self) -> usize {
        let stopped: Vec<String> = {
            let mut running = self.running();
            running
                .drain()
                .map(|(id, running)| {
                    if let Some(abort) = running.abort {
                        abort.abort();
                    }
                    id
                })
                .collect()
        };
        for id in &stopped {
            // Redis away: the rest read as lost once stale.
            if self.cancel_in_redis(None, id).await.is_err() {
                break;
            }
        }
        self.writes.close();
        if tokio::time::timeout(FLUSH_TIMEOUT, self.writes.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                results = self.writes.len(),
                "task results not written before the server ended: the task store did not answer"
            );
        }
        stopped.len()
    }
}

/// The view of a task from its hash's fields (in [`RedisTasks::get`]'s order)
/// at `now`; `None` when it is not `subject`'s or not a task this store wrote.
/// A task working past its budget and [`STALE_AFTER`] reads as lost.
fn view(
    limits: TaskLimits,
    now: u64,
    id: &str,
    subject: &str,
    fields: Vec<Option<String>>,
) -> Option<TaskView> {
    let mut fields = fields.into_iter();
    let mut next = || fields.next().flatten();
    let (owner, status, payload) = (next()?, next()?, next());
    let (created, updated, ended) = (next(), next(), next());
    let (extended, input) = (next(), next());
    if owner != subject {
        return None;
    }
    let number = |text: Option<String>| text.and_then(|t| t.parse::<u64>().ok());
    let created = number(created)?;
    let updated = number(updated).unwrap_or(created);
    let extended = number(extended).unwrap_or(0);
    let payload = || Arc::<str>::from(payload.clone().unwrap_or_default());
    let stale = now
        > created
            .saturating_add(extended)
            .saturating_add(stale_ms(limits));
    let state = match status.as_str() {
        "working" | "input_required" if stale => TaskState::Lost,
        "working" => TaskState::Working,
        "input_required" => TaskState::InputRequired(Arc::from(input.unwrap_or_default())),
        "completed" => TaskState::Completed(payload()),
        "failed" => TaskState::Failed(payload()),
        "cancelled" => TaskState::Cancelled,
        _ => return None,
    };
    let ttl = match number(ended) {
        Some(ended) => Duration::from_millis(ended.saturating_sub(created)) + limits.ttl,
        None => limits.max_task_time + Duration::from_millis(extended) + limits.ttl,
    };
    Some(TaskView {
        id: id.to_owned(),
        state,
        created: time_of(created),
        updated: time_of(updated),
        ttl,
    })
}

fn lock(local: &Local) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
    // A panic while holding the lock leaves plain data behind: keep serving.
    local
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Stops task `id` if it runs here; whether it did.
fn stop(local: &Local, id: &str) -> bool {
    let Some(running) = lock(local).remove(id) else {
        return false;
    };
    if let Some(abort) = running.abort {
        abort.abort();
    }
    true
}

/// A result to write.
struct Finish {
    id: String,
    status: &'static str,
    payload: Arc<str>,
    subject: String,
    created_ms: u64,
    limits: TaskLimits,
}

impl Finish {
    /// Writes it, retrying while Redis is unavailable for up to the TTL (after
    /// which it would have expired anyway).
    async fn run(self, connection: ConnectionManager) {
        let started = tokio::time::Instant::now();
        let mut delay = Duration::from_millis(100);
        let mut failures = 0u32;
        loop {
            let mut script = scripts().finish.prepare_invoke();
            script
                .key(format!("{TASK_KEY}{}", self.id))
                .key(ORDER_KEY)
                .key(SIZES_KEY)
                .key(BYTES_KEY)
                .arg(self.status)
                .arg(self.payload.as_ref())
                .arg(now_ms())
                .arg(millis(self.limits.ttl))
                .arg(&self.subject)
                .arg(self.created_ms)
                .arg(&self.id)
                .arg(TASK_KEY)
                .arg(stale_ms(self.limits))
                .arg(self.limits.max_stored_bytes);
            let mut connection = connection.clone();
            let written = tokio::time::timeout(
                RESPONSE_TIMEOUT + Duration::from_secs(1),
                script.invoke_async::<i64>(&mut connection),
            )
            .await;
            let reason = match written {
                Ok(Ok(_)) => {
                    if failures > 0 {
                        tracing::info!(task = %self.id, tries = failures + 1, "task result stored after the task store came back");
                    }
                    return;
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => "no answer in time".to_owned(),
            };
            failures += 1;
            if started.elapsed() + delay >= self.limits.ttl {
                tracing::error!(task = %self.id, reason, "task result lost: the task store was unavailable for --task-ttl");
                return;
            }
            if failures == 1 {
                tracing::warn!(task = %self.id, reason, "cannot store the task result yet: the task store is unavailable; retrying");
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(MAX_RETRY_DELAY);
        }
    }
}

/// Listens for cancels on [`CANCEL_CHANNEL`] for as long as the store lives,
/// resubscribing (after a growing pause) whenever the subscription ends; on
/// every subscription and every [`RECONCILE_EVERY`] the status of the tasks
/// running here is read, so that a cancel whose message was missed still stops
/// its task.
async fn subscribe(client: redis::Client, connection: ConnectionManager, local: Local) {
    let mut delay = Duration::from_millis(100);
    // Said once per outage: a WARN when it starts, an INFO when it ends.
    let lost = AtomicBool::new(false);
    loop {
        let subscribed = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&[CANCEL_CHANNEL, ANSWER_CHANNEL]).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let reason = match tokio::time::timeout(CONNECT_TIMEOUT, subscribed).await {
            Ok(Ok(pubsub)) => {
                if lost.swap(false, Ordering::Relaxed) {
                    tracing::info!("subscribed to task cancels again");
                }
                let since = tokio::time::Instant::now();
                reconcile(&connection, &local).await;
                listen(pubsub, &connection, &local).await;
                // A subscription that lasted resets the pause.
                if since.elapsed() > MAX_RETRY_DELAY {
                    delay = Duration::from_millis(100);
                }
                "the subscription ended".to_owned()
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => "no answer in time".to_owned(),
        };
        if !lost.swap(true, Ordering::Relaxed) {
            tracing::warn!(reason = %reason, "not subscribed to task cancels; retrying (the tasks running here are checked every 5 s meanwhile)");
        }
        reconcile(&connection, &local).await;
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

/// Stops the tasks whose IDs come on [`CANCEL_CHANNEL`], takes the answers of
/// those on [`ANSWER_CHANNEL`], and every [`RECONCILE_EVERY`] does both for
/// what it finds in Redis; until the subscription ends.
async fn listen(pubsub: redis::aio::PubSub, connection: &ConnectionManager, local: &Local) {
    let mut messages = pubsub.into_on_message();
    let mut every = tokio::time::interval(RECONCILE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) => {
                    let Ok(id) = message.get_payload::<String>() else {
                        continue;
                    };
                    if message.get_channel_name() == ANSWER_CHANNEL {
                        take(connection, local, &id).await;
                    } else if stop(local, &id) {
                        tracing::info!(task = %id, "task cancelled through the task store: its execution stopped");
                    }
                }
                None => return,
            },
            _ = every.tick() => reconcile(connection, local).await,
        }
    }
}

/// Takes the answer for task `id` if it runs here and waits for one that came:
/// read and deleted in Redis, then handed to the asker.
async fn take(connection: &ConnectionManager, local: &Local, id: &str) {
    let Some(key) = lock(local).get(id).and_then(|task| {
        task.question
            .as_ref()
            .filter(|question| question.answer.is_some())
            .map(|question| question.key.clone())
    }) else {
        return;
    };
    let task_key = format!("{TASK_KEY}{id}");
    let taken = ask("take a task's input", || {
        let mut script = scripts().take.prepare_invoke();
        script.key(&task_key).arg(&key).arg(MAX_INPUT_BYTES);
        let mut connection = connection.clone();
        async move { script.invoke_async::<Option<String>>(&mut connection).await }
    })
    .await;
    let Ok(Some(text)) = taken else {
        return;
    };
    // What the client sent was JSON when it was stored.
    let response = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    let waiter = lock(local).get_mut(id).and_then(|task| {
        task.question
            .as_mut()
            .filter(|question| question.key == key)
            .and_then(|question| question.answer.take())
    });
    if let Some(sender) = waiter {
        let _ = sender.send(response);
    }
}

/// Reads the status of the tasks running here: stops the cancelled ones and
/// takes the answers of those that wait (their message may have been missed).
/// A task gone from Redis (restarted empty) runs on: its end writes it again.
async fn reconcile(connection: &ConnectionManager, local: &Local) {
    let ids: Vec<String> = lock(local).keys().cloned().collect();
    if ids.is_empty() {
        return;
    }
    // Each status through READ (bounded), the script's text sent with each:
    // a pipeline has no way back to load a script Redis forgot.
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("EVAL")
            .arg(READ)
            .arg(1)
            .arg(format!("{TASK_KEY}{id}"))
            .arg(MAX_FIELD_BYTES)
            .arg(0)
            .arg(0)
            .arg("status");
    }
    let mut connection = connection.clone();
    let Ok(Ok(statuses)) = tokio::time::timeout(
        RESPONSE_TIMEOUT + Duration::from_secs(1),
        pipe.query_async::<Vec<Vec<Option<String>>>>(&mut connection),
    )
    .await
    else {
        return;
    };
    for (id, read) in ids.iter().zip(statuses) {
        let status = match read.as_slice() {
            [Some(ok), status] if ok == "ok" => status.clone(),
            _ => None,
        };
        match status.as_deref() {
            Some("cancelled") => {
                if stop(local, id) {
                    tracing::info!(task = %id, "task found cancelled in the task store: its execution stopped");
                }
            }
            Some(_) | None => take(&connection, local, id).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            redacted("redis://:s3cret@10.0.0.1:6379/2"),
            "redis://***@10.0.0.1:6379/2"
        );
        assert_eq!(redacted("redis://user:p@ss@host/0"), "redis://***@host/0");
        assert_eq!(redacted("redis://host:6379/0"), "redis://host:6379/0");
    }

    #[test]
    fn a_task_is_read_from_its_hash_for_its_subject_only() {
        let limits = TaskLimits {
            max_task_time: Duration::from_secs(60),
            ttl: Duration::from_secs(600),
            max_tasks: 10,
            max_running: 2,
            max_stored_bytes: 100,
        };
        let fields = |status: &str, payload: Option<&str>, ended: Option<&str>| {
            [
                Some("ada"),
                Some(status),
                payload,
                Some("1000"),
                Some("1500"),
                ended,
            ]
            .map(|f| f.map(str::to_owned))
            .to_vec()
        };
        let view = |id, subject, fields| view(limits, 2000, id, subject, fields);
        let working = view("t", "ada", fields("working", None, None)).unwrap();
        assert_eq!(working.state, TaskState::Working);
        assert_eq!(working.created, time_of(1000));
        assert_eq!(working.updated, time_of(1500));
        assert_eq!(working.ttl, Duration::from_secs(660));
        let done = view("t", "ada", fields("completed", Some("{}"), Some("3000")));
        let done = done.unwrap();
        assert_eq!(done.state, TaskState::Completed(Arc::from("{}")));
        // Its run (2 s) and then the TTL.
        assert_eq!(done.ttl, Duration::from_secs(602));
        assert_eq!(
            view(
                "t",
                "ada",
                fields("failed", Some("{\"code\":1}"), Some("1000"))
            )
            .map(|v| v.state),
            Some(TaskState::Failed(Arc::from("{\"code\":1}")))
        );
        assert_eq!(
            view("t", "ada", fields("cancelled", None, Some("2000"))).map(|v| v.state),
            Some(TaskState::Cancelled)
        );
        assert_eq!(view("t", "bob", fields("working", None, None)), None);
        assert_eq!(view("t", "ada", fields("odd", None, None)), None);
        assert_eq!(view("t", "ada", vec![None; 6]), None);
        // Still working past its budget and the stale limit: its replica is gone.
        let stale = 1000 + 60_000 + 30_000 + 1;
        assert_eq!(
            super::view(limits, stale, "t", "ada", fields("working", None, None)).map(|v| v.state),
            Some(TaskState::Lost)
        );
        assert_eq!(
            super::view(limits, stale - 1, "t", "ada", fields("working", None, None))
                .map(|v| v.state),
            Some(TaskState::Working)
        );
        // Waiting for input: its requests shown; its budget (and so its TTL
        // and when it counts as lost) grew by `extended`.
        let mut asked = fields("input_required", None, None);
        asked.extend([
            Some("5000".to_owned()),
            Some("{\"approval-1\":{}}".to_owned()),
        ]);
        let waiting = super::view(limits, stale, "t", "ada", asked.clone()).unwrap();
        assert_eq!(
            waiting.state,
            TaskState::InputRequired(Arc::from("{\"approval-1\":{}}"))
        );
        assert_eq!(waiting.ttl, Duration::from_secs(665));
        assert_eq!(
            super::view(limits, stale + 5000, "t", "ada", asked).map(|v| v.state),
            Some(TaskState::Lost)
        );
    }

    #[test]
    fn only_redis_urls_are_taken() {
        assert!(check_url("redis://127.0.0.1:6379/0").is_ok());
        assert_eq!(
            check_url("redis://:pw@h:6379/x")
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(
                "--task-store redis://***@h:6379/x: not a Redis URL (InvalidClientConfig)"
                    .to_owned()
            )
        );
        assert_eq!(
            check_url("rediss://:pw@h:6380/0").map(|_| ()).map_err(|e| e.to_string()),
            Err("--task-store rediss://***@h:6380/0: TLS to Redis (rediss://) is not supported; reach Redis on a private network".to_owned())
        );
        assert_eq!(
            check_url("memory").map(|_| ()).map_err(|e| e.to_string()),
            Err("--task-store memory: expected redis://HOST:PORT/N".to_owned())
        );
        assert_eq!(
            check_url("http://h/0")
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err("--task-store http://h/0: expected redis://HOST:PORT/N".to_owned())
        );
    }
}
