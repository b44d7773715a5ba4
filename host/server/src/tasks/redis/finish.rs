//! A task's end written in the background, retried while Redis is away.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::super::task::TaskLimits;
use super::connection::{MAX_RETRY_DELAY, RESPONSE_TIMEOUT};
use super::keys::{BYTES_KEY, ORDER_KEY, SIZES_KEY, TASK_KEY};
use super::scripts::scripts;
use super::time::{millis, now_ms, stale_ms};

/// A result to write.
pub(super) struct Finish {
    pub(super) id: String,
    pub(super) status: &'static str,
    pub(super) payload: Arc<str>,
    pub(super) subject: String,
    pub(super) created_ms: u64,
    pub(super) limits: TaskLimits,
}

impl Finish {
    /// Writes it, retrying while Redis is unavailable for up to the TTL (after
    /// which it would have expired anyway).
    pub(super) async fn run(self, connection: ConnectionManager) {
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
