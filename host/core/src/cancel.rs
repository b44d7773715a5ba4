//! [`Cancel`]: the flag a request's end raises, which every wait of its
//! execution (and the sandbox, at its next epoch tick) notices.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A cancellation flag that a waiting `until` (the host's `wait.rs`) notices at once (and code in a
/// sandbox at its next epoch tick, by reading [`Cancel::is_cancelled`]).
#[derive(Debug, Default)]
pub struct Cancel {
    flag: AtomicBool,
    notify: Notify,
}

impl Cancel {
    /// Sets the flag and wakes every wait on it.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Relaxed);
        self.notify.notify_waiters();
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Completes once cancelled (at once if already).
    pub async fn cancelled(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Registered before the flag is read, so a cancel in between is not missed.
        notified.as_mut().enable();
        if self.is_cancelled() {
            return;
        }
        notified.await;
    }
}
