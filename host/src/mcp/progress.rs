//! `notifications/progress` for an `execute` whose request carried a
//! `progressToken`: after each successful native call, the calls done so far and
//! the capability's name (never arguments or results), at most one per
//! [`MIN_INTERVAL`], and none after the answer.
//!
//! The execution's thread only queues a notification (it must not block); a task
//! sends them, in order, through the request's peer, and the answer waits until
//! the task sent what was queued (at most [`FLUSH_TIMEOUT`]). Over HTTP, rmcp answers a
//! request that sent a notification as an SSE stream, one that sent none as one
//! JSON body, so a client that does not ask for progress pays nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::execute::Progress;

/// Least time between two progress notifications of one execution.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Longest the answer waits for the queued notifications to be sent (a client
/// that reads nothing would hold it): past it the rest is dropped.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// What the sending task gets.
enum Queued {
    /// A notification: calls done, the capability.
    Call(u64, String),
    /// The execution ended: nothing follows.
    End,
}

/// The progress notifications of one request, sent while it runs.
pub(crate) struct Reporter {
    notifier: Arc<Notifier>,
    task: JoinHandle<()>,
}

/// What the execution calls: it queues a notification unless one was queued
/// less than [`MIN_INTERVAL`] ago.
struct Notifier {
    sender: mpsc::UnboundedSender<Queued>,
    last: Mutex<Option<Instant>>,
}

impl Progress for Notifier {
    fn call_done(&self, calls: u64, capability: &str) {
        self.call_done_at(Instant::now(), calls, capability);
    }
}

impl Notifier {
    /// [`Progress::call_done`] at `now`.
    fn call_done_at(&self, now: Instant, calls: u64, capability: &str) {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|at| now.duration_since(at) < MIN_INTERVAL) {
            return;
        }
        *last = Some(now);
        // The task is gone only once the answer is on its way: nothing to tell.
        let _ = self.sender.send(Queued::Call(calls, capability.to_owned()));
    }
}

impl Reporter {
    /// Starts sending the progress of the request with `token` to `peer`.
    pub(crate) fn start(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        let (sender, mut queued) = mpsc::unbounded_channel::<Queued>();
        let task = tokio::spawn(async move {
            while let Some(Queued::Call(calls, capability)) = queued.recv().await {
                let mut param = ProgressNotificationParam::new(token.clone(), calls as f64);
                param.message = Some(capability);
                if let Err(error) = peer.notify_progress(param).await {
                    tracing::debug!(reason = %error, "a progress notification was not sent");
                    return;
                }
            }
        });
        Self {
            notifier: Arc::new(Notifier {
                sender,
                last: Mutex::new(None),
            }),
            task,
        }
    }

    /// What the execution tells of its progress.
    pub(crate) fn progress(&self) -> Arc<dyn Progress> {
        self.notifier.clone()
    }

    /// Sends what was queued (for at most [`FLUSH_TIMEOUT`]) and stops: once this
    /// returns, no notification of this request is sent any more, so all go out
    /// before the answer.
    pub(crate) async fn finish(mut self) {
        let _ = self.notifier.sender.send(Queued::End);
        if tokio::time::timeout(FLUSH_TIMEOUT, &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
            let _ = (&mut self.task).await;
        }
    }
}

impl Drop for Reporter {
    /// A request dropped (cancelled) sends no more progress either.
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_one_notification_is_queued_per_interval() {
        let (sender, mut queued) = mpsc::unbounded_channel();
        let notifier = Notifier {
            sender,
            last: Mutex::new(None),
        };
        let start = Instant::now();
        notifier.call_done_at(start, 1, "a.b");
        notifier.call_done_at(start + Duration::from_millis(99), 2, "a.b");
        notifier.call_done_at(start + MIN_INTERVAL, 3, "c.d");
        notifier.call_done_at(start + Duration::from_millis(150), 4, "c.d");
        notifier.call_done_at(start + Duration::from_millis(250), 5, "e.f");
        let mut sent = Vec::new();
        while let Ok(Queued::Call(calls, capability)) = queued.try_recv() {
            sent.push((calls, capability));
        }
        assert_eq!(
            sent,
            [
                (1, "a.b".to_owned()),
                (3, "c.d".to_owned()),
                (5, "e.f".to_owned())
            ]
        );
    }
}
