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
//! 5 s (the store's `redis_url.rs`) of unanswered data.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use super::task::{
    Answer, MAX_RESPONSES, Question, TaskLimits, TaskRefused, TaskState, TaskView, Unavailable,
    new_id,
};

mod claims;
mod connection;
mod finish;
mod keys;
mod listen;
mod local;
mod scripts;
mod time;

pub use keys::{ANSWER_CHANNEL, CANCEL_CHANNEL};
pub use time::STALE_AFTER;

use crate::store::{ConnectError, check_redis_url as check_url, redacted};
use connection::{CONNECT_TIMEOUT, FLUSH_TIMEOUT, RESPONSE_TIMEOUT, ask};
use finish::Finish;
use keys::{BYTES_KEY, ORDER_KEY, SIZES_KEY, TASK_KEY};
use listen::{subscribe, take};
use local::{Local, Running, lock, stop};
use scripts::{MAX_FIELD_BYTES, MAX_INPUT_BYTES, scripts};
use time::{millis, now_ms, stale_ms, time_of};

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
        claims::claim(&self.connection, token, ttl).await
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
