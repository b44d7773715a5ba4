//! The tasks this replica runs: the only ones whose execution it can stop and
//! whose questions it can answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::super::task::Question;

/// A task running on this replica.
pub(super) struct Running {
    /// Its subject and creation time, to write it again whole if Redis lost it.
    pub(super) subject: String,
    pub(super) created_ms: u64,
    /// Stops its execution (a dropped future cancels it).
    pub(super) abort: Option<tokio::task::AbortHandle>,
    /// What its time budget grew by while it waited for input.
    pub(super) extended: Duration,
    /// The question it waits on.
    pub(super) question: Option<Question>,
}

/// The tasks this replica runs, by ID.
pub(super) type Local = Arc<Mutex<HashMap<String, Running>>>;

pub(super) fn lock(local: &Local) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
    // A panic while holding the lock leaves plain data behind: keep serving.
    local
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Stops task `id` if it runs here; whether it did.
pub(super) fn stop(local: &Local, id: &str) -> bool {
    let Some(running) = lock(local).remove(id) else {
        return false;
    };
    if let Some(abort) = running.abort {
        abort.abort();
    }
    true
}
