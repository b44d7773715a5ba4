//! The task store in Redis (`--task-store redis://HOST:PORT/N`), shared by the
//! replicas behind a load balancer: any of them answers status, result and
//! cancel for a task another one runs.
//!
//! Each task is a hash `codemode:task:<id>` (its subject, status, result or
//! error as JSON text, and times in milliseconds since the epoch) that expires
//! on its own: `--max-task-time` plus `--task-ttl` after it was created while it
//! runs, `--task-ttl` after it ended. The sorted set `codemode:tasks` holds the
//! IDs by creation time, for keeping at most `--max-tasks` (the oldest ended
//! ones dropped first). Every step that reads and then writes (create, finish,
//! cancel) is one Lua script, so that two replicas never interleave inside one.
//!
//! A task runs on the replica that created it, which alone can stop its
//! execution. A cancel on any replica marks the task cancelled and publishes its
//! ID on `codemode:tasks:cancel`; the running replica, subscribed, stops the
//! execution. A message missed while the subscription was down is made up for
//! when it is back, and every few seconds the running replica also reads the
//! status of its tasks, so that no cancel is lost for good.
//!
//! When Redis does not answer, requests about tasks fail at once with
//! [`Unavailable`] (the reason is logged); a result that could not be written
//! is retried in the background for up to `--task-ttl`, so that a short outage
//! loses none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use redis::aio::ConnectionManager;

use super::{TaskLimits, TaskRefused, TaskState, TaskView, Unavailable, new_id};

/// The prefix of a task's hash key; the task's ID follows.
const TASK_KEY: &str = "codemode:task:";
/// The sorted set of task IDs by creation time.
const ORDER_KEY: &str = "codemode:tasks";
/// The pub/sub channel on which cancelled tasks' IDs are published.
pub const CANCEL_CHANNEL: &str = "codemode:tasks:cancel";

/// How long connecting to Redis may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one request to Redis may take before it counts as unavailable.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a replica reads the status of the tasks it runs (a cancel whose
/// message it missed stops them within this).
const RECONCILE_EVERY: Duration = Duration::from_secs(5);
/// The longest wait between two tries to write a result or to subscribe.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Creates a working task, unless `--max-tasks` are kept and none of them has
/// ended (the oldest ended ones go first; an ID whose hash expired is dropped
/// from the order). KEYS: order, task. ARGV: ID, subject, now, max tasks,
/// expiry in ms, task key prefix. Returns 1 when created, 0 when full.
const CREATE: &str = r"
local count = redis.call('ZCARD', KEYS[1])
local max = tonumber(ARGV[4])
if count >= max then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if count < max then break end
    local status = redis.call('HGET', ARGV[6] .. old, 'status')
    if not status then
      redis.call('ZREM', KEYS[1], old)
      count = count - 1
    elseif status ~= 'working' then
      redis.call('DEL', ARGV[6] .. old)
      redis.call('ZREM', KEYS[1], old)
      count = count - 1
    end
  end
  if count >= max then return 0 end
end
redis.call('HSET', KEYS[2], 'subject', ARGV[2], 'status', 'working', 'created', ARGV[3], 'updated', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
";

/// Ends a working task with a status and its JSON text, and keeps it for the
/// TTL. A task that is gone (Redis lost it, or restarted empty) is written
/// again whole, so that its result is not lost; a cancelled one stays
/// cancelled. KEYS: task, order. ARGV: status, payload, now, TTL in ms, subject,
/// created, ID. Returns 1 when written, 0 when it had ended.
const FINISH: &str = r"
local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= 'working' then return 0 end
if not status then
  redis.call('HSET', KEYS[1], 'subject', ARGV[5], 'created', ARGV[6])
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[7])
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'payload', ARGV[2], 'updated', ARGV[3], 'ended', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
";

/// Cancels a task of a subject (any subject when ARGV[1] is empty): a working
/// one is marked cancelled, kept for the TTL and its ID published for the
/// replica that runs it. KEYS: task. ARGV: subject, now, TTL in ms, channel, ID.
/// Returns 1 when the subject's task exists (cancelled now or ended before), 0
/// when not found.
const CANCEL: &str = r"
local found = redis.call('HMGET', KEYS[1], 'subject', 'status')
if not found[1] or (ARGV[1] ~= '' and found[1] ~= ARGV[1]) then return 0 end
if found[2] == 'working' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'updated', ARGV[2], 'ended', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 1
";

/// The scripts, hashed once.
struct Scripts {
    create: redis::Script,
    finish: redis::Script,
    cancel: redis::Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
        create: redis::Script::new(CREATE),
        finish: redis::Script::new(FINISH),
        cancel: redis::Script::new(CANCEL),
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
    /// Redis did not answer.
    #[error("cannot reach the task store at {url}: {reason}")]
    Unreachable {
        /// The URL, without its password.
        url: String,
        /// Redis's error, or the timeout.
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
}

/// The tasks this replica runs, by ID.
type Local = Arc<Mutex<HashMap<String, Running>>>;

/// The task store in Redis.
pub struct RedisTasks {
    limits: TaskLimits,
    connection: ConnectionManager,
    local: Local,
    /// Where results are written in the background.
    runtime: tokio::runtime::Handle,
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

/// `url` without its password, to be shown and logged.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// Checks that `url` names a Redis the store can use: `redis://` (TLS and Unix
/// sockets are not supported).
///
/// # Errors
///
/// [`ConnectError::Url`] naming what is wrong.
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
    redis::Client::open(url).map_err(|error| bad(error.to_string()))
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
/// the reason logged once here.
async fn ask<T>(
    what: &'static str,
    request: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, Unavailable> {
    match tokio::time::timeout(RESPONSE_TIMEOUT + Duration::from_secs(1), request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => {
            tracing::warn!(reason = %error, "task store unavailable: cannot {what}");
            Err(Unavailable)
        }
        Err(_) => {
            tracing::warn!(
                reason = "no answer in time",
                "task store unavailable: cannot {what}"
            );
            Err(Unavailable)
        }
    }
}

impl RedisTasks {
    /// Connects to Redis at `url` and subscribes to cancels.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when the URL is not a `redis://` one or Redis does not
    /// answer within a few seconds.
    pub async fn connect(url: &str, limits: TaskLimits) -> Result<Self, ConnectError> {
        let client = check_url(url)?;
        let unreachable = |reason: String| ConnectError::Unreachable {
            url: redacted(url),
            reason,
        };
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let connecting = client.get_connection_manager_with_config(config);
        let connection = match tokio::time::timeout(CONNECT_TIMEOUT * 2, connecting).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => return Err(unreachable(error.to_string())),
            Err(_) => return Err(unreachable("no answer in time".to_owned())),
        };
        let local = Local::default();
        let subscriber = tokio::spawn(subscribe(client, connection.clone(), local.clone()));
        Ok(Self {
            limits,
            connection,
            local,
            runtime: tokio::runtime::Handle::current(),
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
            if running.len() >= self.limits.max_running.max(1) {
                return Err(TaskRefused::Running);
            }
            running.insert(
                id.clone(),
                Running {
                    subject: subject.to_owned(),
                    created_ms: now,
                    abort: None,
                },
            );
        }
        let mut script = scripts().create.prepare_invoke();
        script
            .key(ORDER_KEY)
            .key(format!("{TASK_KEY}{id}"))
            .arg(&id)
            .arg(subject)
            .arg(now)
            .arg(self.limits.max_tasks.max(1))
            .arg(millis(self.limits.max_task_time + self.limits.ttl))
            .arg(TASK_KEY);
        let mut connection = self.connection.clone();
        let created = ask("create a task", script.invoke_async::<i64>(&mut connection)).await;
        match created {
            Ok(1) => Ok(TaskView {
                id,
                state: TaskState::Working,
                created: time_of(now),
                updated: time_of(now),
                ttl: self.limits.max_task_time + self.limits.ttl,
            }),
            Ok(_) => {
                self.running().remove(&id);
                Err(TaskRefused::Full)
            }
            Err(Unavailable) => {
                self.running().remove(&id);
                Err(TaskRefused::Unavailable)
            }
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
        let mut connection = self.connection.clone();
        let mut request = redis::cmd("HMGET");
        request.arg(format!("{TASK_KEY}{id}")).arg(&[
            "subject", "status", "payload", "created", "updated", "ended",
        ]);
        let fields: Vec<Option<String>> =
            ask("read a task", request.query_async(&mut connection)).await?;
        Ok(view(self.limits, id, subject, fields))
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
            TaskState::Cancelled => ("cancelled", Arc::from("")),
            TaskState::Working => return,
        };
        let write = Finish {
            id: id.to_owned(),
            status,
            payload,
            subject: running.subject,
            created_ms: running.created_ms,
            ttl: self.limits.ttl,
        };
        self.runtime.spawn(write.run(self.connection.clone()));
    }

    /// Cancels task `id` of `subject`, wherever it runs.
    pub async fn cancel(&self, subject: &str, id: &str) -> Result<bool, Unavailable> {
        let found = self.cancel_in_redis(subject, id).await?;
        if found {
            // Running here: stopped now rather than when the message comes back.
            let _ = stop(&self.local, id);
        }
        Ok(found)
    }

    async fn cancel_in_redis(&self, subject: &str, id: &str) -> Result<bool, Unavailable> {
        let mut script = scripts().cancel.prepare_invoke();
        script
            .key(format!("{TASK_KEY}{id}"))
            .arg(subject)
            .arg(now_ms())
            .arg(millis(self.limits.ttl))
            .arg(CANCEL_CHANNEL)
            .arg(id);
        let mut connection = self.connection.clone();
        let found = ask("cancel a task", script.invoke_async::<i64>(&mut connection)).await?;
        Ok(found == 1)
    }

    /// Stops every task running here (the server is ending) and marks them
    /// cancelled in Redis, waiting a few seconds at most.
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
            // An empty subject: whoever's it is.
            if self.cancel_in_redis("", id).await.is_err() {
                break;
            }
        }
        stopped.len()
    }
}

/// The view of a task from its hash's fields (in [`RedisTasks::get`]'s order);
/// `None` when it is not `subject`'s or not a task this store wrote.
fn view(
    limits: TaskLimits,
    id: &str,
    subject: &str,
    fields: Vec<Option<String>>,
) -> Option<TaskView> {
    let mut fields = fields.into_iter();
    let mut next = || fields.next().flatten();
    let (owner, status, payload) = (next()?, next()?, next());
    let (created, updated, ended) = (next(), next(), next());
    if owner != subject {
        return None;
    }
    let number = |text: Option<String>| text.and_then(|t| t.parse::<u64>().ok());
    let created = number(created)?;
    let updated = number(updated).unwrap_or(created);
    let payload = || Arc::<str>::from(payload.clone().unwrap_or_default());
    let state = match status.as_str() {
        "working" => TaskState::Working,
        "completed" => TaskState::Completed(payload()),
        "failed" => TaskState::Failed(payload()),
        "cancelled" => TaskState::Cancelled,
        _ => return None,
    };
    let ttl = match number(ended) {
        Some(ended) => Duration::from_millis(ended.saturating_sub(created)) + limits.ttl,
        None => limits.max_task_time + limits.ttl,
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

/// Stops task `id`, cancelled on some replica, if it runs here, and says so.
fn stop_cancelled(local: &Local, id: &str) {
    if stop(local, id) {
        tracing::info!(task = %id, "task cancelled through the task store: its execution stopped");
    }
}

/// A result to write.
struct Finish {
    id: String,
    status: &'static str,
    payload: Arc<str>,
    subject: String,
    created_ms: u64,
    ttl: Duration,
}

impl Finish {
    /// Writes it, retrying while Redis is unavailable for up to the TTL (after
    /// which it would have expired anyway).
    async fn run(self, mut connection: ConnectionManager) {
        let started = tokio::time::Instant::now();
        let mut delay = Duration::from_millis(100);
        let mut failures = 0u32;
        loop {
            let now = now_ms();
            let mut script = scripts().finish.prepare_invoke();
            script
                .key(format!("{TASK_KEY}{}", self.id))
                .key(ORDER_KEY)
                .arg(self.status)
                .arg(self.payload.as_ref())
                .arg(now)
                .arg(millis(self.ttl))
                .arg(&self.subject)
                .arg(self.created_ms)
                .arg(&self.id);
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
            if started.elapsed() + delay >= self.ttl {
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
/// resubscribing after a lost connection; on every (re)subscription and every
/// [`RECONCILE_EVERY`] the status of the tasks running here is read, so that a
/// cancel whose message was missed still stops its task.
async fn subscribe(client: redis::Client, connection: ConnectionManager, local: Local) {
    let mut delay = Duration::from_millis(100);
    let mut lost = false;
    loop {
        let subscribed = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(CANCEL_CHANNEL).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let pubsub = match tokio::time::timeout(CONNECT_TIMEOUT, subscribed).await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(error)) => {
                if !lost {
                    tracing::warn!(reason = %error, "cannot subscribe to task cancels; retrying");
                    lost = true;
                }
                reconcile(&connection, &local).await;
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RETRY_DELAY);
                continue;
            }
            Err(_) => {
                if !lost {
                    tracing::warn!(
                        reason = "no answer in time",
                        "cannot subscribe to task cancels; retrying"
                    );
                    lost = true;
                }
                reconcile(&connection, &local).await;
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RETRY_DELAY);
                continue;
            }
        };
        if lost {
            tracing::info!("subscribed to task cancels again");
        }
        delay = Duration::from_millis(100);
        reconcile(&connection, &local).await;
        let mut messages = pubsub.into_on_message();
        let mut every = tokio::time::interval(RECONCILE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(message) => {
                        if let Ok(id) = message.get_payload::<String>() {
                            stop_cancelled(&local, &id);
                        }
                    }
                    None => break,
                },
                _ = every.tick() => reconcile(&connection, &local).await,
            }
        }
        tracing::warn!("lost the subscription to task cancels; resubscribing");
        lost = true;
    }
}

/// Reads the status of the tasks running here and stops the cancelled ones. A
/// task gone from Redis (restarted empty) runs on: its end writes it again.
async fn reconcile(connection: &ConnectionManager, local: &Local) {
    let ids: Vec<String> = lock(local).keys().cloned().collect();
    if ids.is_empty() {
        return;
    }
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("HGET")
            .arg(format!("{TASK_KEY}{id}"))
            .arg("status");
    }
    let mut connection = connection.clone();
    let Ok(Ok(statuses)) = tokio::time::timeout(
        RESPONSE_TIMEOUT + Duration::from_secs(1),
        pipe.query_async::<Vec<Option<String>>>(&mut connection),
    )
    .await
    else {
        return;
    };
    for (id, status) in ids.iter().zip(statuses) {
        if status.as_deref() == Some("cancelled") {
            stop_cancelled(local, id);
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
        let working = view(limits, "t", "ada", fields("working", None, None)).unwrap();
        assert_eq!(working.state, TaskState::Working);
        assert_eq!(working.created, time_of(1000));
        assert_eq!(working.updated, time_of(1500));
        assert_eq!(working.ttl, Duration::from_secs(660));
        let done = view(
            limits,
            "t",
            "ada",
            fields("completed", Some("{}"), Some("3000")),
        );
        let done = done.unwrap();
        assert_eq!(done.state, TaskState::Completed(Arc::from("{}")));
        // Its run (2 s) and then the TTL.
        assert_eq!(done.ttl, Duration::from_secs(602));
        assert_eq!(
            view(
                limits,
                "t",
                "ada",
                fields("failed", Some("{\"code\":1}"), Some("1000"))
            )
            .map(|v| v.state),
            Some(TaskState::Failed(Arc::from("{\"code\":1}")))
        );
        assert_eq!(
            view(limits, "t", "ada", fields("cancelled", None, Some("2000"))).map(|v| v.state),
            Some(TaskState::Cancelled)
        );
        assert_eq!(
            view(limits, "t", "bob", fields("working", None, None)),
            None
        );
        assert_eq!(view(limits, "t", "ada", fields("odd", None, None)), None);
        assert_eq!(view(limits, "t", "ada", vec![None; 6]), None);
    }

    #[test]
    fn only_redis_urls_are_taken() {
        assert!(check_url("redis://127.0.0.1:6379/0").is_ok());
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
