//! [`Cancel`]: the flag a request's end raises, which every wait of its
//! execution (and the sandbox, at its next epoch tick) notices. Only the
//! [`Canceller`] made with it raises it: a source handed the flag (in its
//! `CallBudget`) can read it and wait on it, never cancel the request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A cancellation flag that a waiting `until` (the runtime crate's `wait.rs`)
/// notices at once, and code in a sandbox at its next epoch tick (by reading
/// [`Cancel::is_cancelled`]). One made with `Default` is never raised.
#[derive(Debug, Default)]
pub struct Cancel {
    flag: AtomicBool,
    notify: Notify,
}

/// What raises one [`Cancel`]: kept by whoever owns the request (the executor).
#[derive(Debug)]
pub struct Canceller(Arc<Cancel>);

impl Canceller {
    /// Sets the flag and wakes every wait on it.
    pub fn cancel(&self) {
        self.0.flag.store(true, Ordering::Relaxed);
        self.0.notify.notify_waiters();
    }
}

impl Cancel {
    /// A flag, and the one handle that raises it.
    pub fn with_canceller() -> (Arc<Cancel>, Canceller) {
        let cancel = Arc::new(Cancel::default());
        (cancel.clone(), Canceller(cancel))
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
