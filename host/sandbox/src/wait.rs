//! The epoch callback every store gets ([`Stop`], [`Interrupted`]): an
//! execution's deadline and cancellation, and a plugin call's own timeout,
//! checked at each epoch tick. The bounded waits for work outside WebAssembly
//! ([`until`], [`Cancel`]) are the runtime crate's, re-exported here.

use std::sync::Arc;

use std::time::Instant;

use wasmtime::{Store, UpdateDeadline};

pub use codemode_runtime::wait::{Abandoned, Cancel, until};

/// Why the interrupt callback stopped a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// The request was cancelled.
    Cancelled,
    /// The time budget ran out.
    Deadline,
    /// A plugin call ran past its plugin's `timeout` grant.
    CallTimeout,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Interrupted::Cancelled => "execution cancelled",
            Interrupted::Deadline => "execution time budget exhausted",
            Interrupted::CallTimeout => "the plugin's timeout ran out",
        })
    }
}

impl std::error::Error for Interrupted {}

/// When an execution must stop: its deadline and its request's cancellation; for a
/// plugin call, also the call's own deadline (its plugin's `timeout`).
#[derive(Debug, Clone)]
pub struct Stop {
    deadline: Instant,
    /// Nanoseconds added to `deadline` (time spent waiting for a human, which
    /// the time budget does not count); shared by every clone, so that the
    /// plugin stores' checks see it too.
    extended: Arc<std::sync::atomic::AtomicU64>,
    cancel: Arc<Cancel>,
    call_deadline: Option<Instant>,
}

impl Stop {
    /// A new execution's stop.
    pub fn new(deadline: Instant, cancel: Arc<Cancel>) -> Self {
        Self {
            deadline,
            extended: Arc::default(),
            cancel,
            call_deadline: None,
        }
    }

    /// Moves the execution's deadline `by` later (for this stop and every
    /// clone of it).
    pub fn extend(&self, by: std::time::Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self.extended.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |old| Some(old.saturating_add(nanos)),
        );
    }

    /// The stop of one plugin call that must also end by `call_deadline`.
    pub fn for_call(self, call_deadline: Option<Instant>) -> Self {
        Self {
            call_deadline,
            ..self
        }
    }

    /// When the execution's time budget runs out.
    pub fn deadline(&self) -> Instant {
        let extended = self.extended.load(std::sync::atomic::Ordering::Relaxed);
        if extended == 0 {
            return self.deadline;
        }
        let later = std::time::Duration::from_nanos(extended);
        self.deadline.checked_add(later).unwrap_or(self.deadline)
    }

    /// When the current wait must end: the call's own deadline if it has one (it is
    /// never later than the execution's), else the execution's.
    pub fn wait_deadline(&self) -> Instant {
        self.call_deadline.unwrap_or_else(|| self.deadline())
    }

    /// The request's cancellation.
    pub fn cancel(&self) -> &Arc<Cancel> {
        &self.cancel
    }

    /// Arms the next epoch tick of a store this stop (or an equal one) is already
    /// installed in: the callback stays, only the deadline moves.
    pub fn renew<T: 'static>(&self, store: &mut Store<T>) {
        store.set_epoch_deadline(1);
    }

    /// Installs the check on `store`: at every epoch tick, stop if cancelled or late.
    pub fn install<T: 'static>(&self, store: &mut Store<T>) {
        let stop = self.clone();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if stop.cancel.is_cancelled() {
                return Err(wasmtime::Error::new(Interrupted::Cancelled));
            }
            let now = Instant::now();
            if now >= stop.deadline() {
                return Err(wasmtime::Error::new(Interrupted::Deadline));
            }
            if stop.call_deadline.is_some_and(|d| now >= d) {
                return Err(wasmtime::Error::new(Interrupted::CallTimeout));
            }
            Ok(UpdateDeadline::Continue(1))
        });
    }
}
