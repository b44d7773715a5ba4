//! Freeing what an execution leaves behind after its answer is on its way.
//!
//! Dropping an execution's interpreter store frees its instance and every plugin
//! instance it opened: the pooling allocator resets each memory slot (scanning for
//! the pages the instance wrote, copying them back from the image, returning the
//! rest to the kernel). That costs 13 µs for a trivial execute and 80-170 µs for one
//! that called a JavaScript or Python plugin, on the request's path if the execution
//! thread does it before it answers. One thread does it afterwards instead.
//!
//! The execution's slot (its concurrency permit) travels with what is freed and is
//! given back only once the instances are gone, so the instance pool never holds
//! more than `--max-concurrent-executions` executions' instances, and the queue of
//! what is left to free is bounded by the same number.

use std::sync::OnceLock;

use crate::worker::Worker;

/// What an execution leaves: anything whose drop may be slow, with the permit to
/// give back after it.
pub(crate) struct Leftovers {
    /// The interpreter's store, with its plugin sessions.
    pub work: Box<dyn Send>,
    /// The execution's slot.
    pub permit: tokio::sync::OwnedSemaphorePermit,
}

impl Leftovers {
    /// Frees the instances, then gives the slot back.
    fn free(self) {
        let Leftovers { work, permit } = self;
        drop(work);
        drop(permit);
    }
}

/// Frees `leftovers` on the teardown thread, or here when that thread cannot be
/// started (it is started on first use) or is gone.
pub(crate) fn later(leftovers: Leftovers) {
    static TEARDOWN: OnceLock<Option<Worker<Leftovers>>> = OnceLock::new();
    let worker =
        TEARDOWN.get_or_init(|| Worker::start("codemode-teardown", || {}, Leftovers::free));
    let unsent = match worker {
        Some(worker) => worker.send(leftovers),
        None => Err(leftovers),
    };
    if let Err(leftovers) = unsent {
        leftovers.free();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Records, when dropped, whether the permit was still held.
    struct Probe {
        semaphore: Arc<tokio::sync::Semaphore>,
        dropped: Arc<AtomicBool>,
        permit_was_held: Arc<AtomicBool>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.permit_was_held
                .store(self.semaphore.available_permits() == 0, Ordering::SeqCst);
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn leftovers_are_freed_on_another_thread_before_their_slot_is_given_back() {
        let semaphore = Arc::new(tokio::sync::Semaphore::new(1));
        let permit = semaphore
            .clone()
            .try_acquire_owned()
            .expect("the one permit");
        let dropped = Arc::new(AtomicBool::new(false));
        let permit_was_held = Arc::new(AtomicBool::new(false));
        later(Leftovers {
            work: Box::new(Probe {
                semaphore: semaphore.clone(),
                dropped: dropped.clone(),
                permit_was_held: permit_was_held.clone(),
            }),
            permit,
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while semaphore.available_permits() == 0 {
            assert!(Instant::now() < deadline, "the permit was never given back");
            std::thread::yield_now();
        }
        assert!(dropped.load(Ordering::SeqCst));
        assert!(
            permit_was_held.load(Ordering::SeqCst),
            "the slot was given back before the instances were freed"
        );
    }
}
