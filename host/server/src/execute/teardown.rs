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
//! more than `--max-concurrent-executions` executions' instances. At most one
//! execution per CPU waits to be freed: past that (executions that filled their
//! memory take milliseconds each to free), an execution frees its own before it
//! answers, as before, so one thread never holds every slot in its queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

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

/// Frees `leftovers` on the teardown thread, or here when that thread has one
/// execution per CPU waiting already, cannot be started (it is started on first
/// use) or is gone.
pub(crate) fn later(leftovers: Leftovers) {
    static TEARDOWN: OnceLock<Teardown> = OnceLock::new();
    TEARDOWN
        .get_or_init(|| {
            let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            Teardown::start("codemode-teardown", cpus)
        })
        .later(leftovers);
}

/// A teardown thread and how much waits for it.
struct Teardown {
    worker: Option<Worker<Leftovers>>,
    /// Sent and not yet freed.
    pending: Arc<AtomicUsize>,
    /// Most that may wait; more is freed by its sender.
    max_pending: usize,
}

impl Teardown {
    fn start(name: &str, max_pending: usize) -> Self {
        let pending = Arc::new(AtomicUsize::new(0));
        let freed = pending.clone();
        let worker = Worker::start(
            name,
            || {},
            move |leftovers: Leftovers| {
                leftovers.free();
                freed.fetch_sub(1, Ordering::AcqRel);
            },
        );
        Self {
            worker,
            pending,
            max_pending,
        }
    }

    fn later(&self, leftovers: Leftovers) {
        let Some(worker) = &self.worker else {
            leftovers.free();
            return;
        };
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.max_pending {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            leftovers.free();
            return;
        }
        if let Err(leftovers) = worker.send(leftovers) {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            leftovers.free();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc::{Receiver, channel};
    use std::time::{Duration, Instant};

    /// Records, when dropped, whether the permit was still held and on which
    /// thread it was dropped; waits for `release` first, if it has one.
    struct Probe {
        semaphore: Arc<tokio::sync::Semaphore>,
        permit_was_held: Arc<AtomicBool>,
        dropped_on: std::sync::mpsc::Sender<std::thread::ThreadId>,
        release: Option<Receiver<()>>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            if let Some(release) = &self.release {
                let _ = release.recv_timeout(Duration::from_secs(20));
            }
            self.permit_was_held
                .store(self.semaphore.available_permits() == 0, Ordering::SeqCst);
            let _ = self.dropped_on.send(std::thread::current().id());
        }
    }

    /// Leftovers holding the one permit of a new semaphore.
    fn leftovers(
        release: Option<Receiver<()>>,
    ) -> (
        Leftovers,
        Arc<tokio::sync::Semaphore>,
        Arc<AtomicBool>,
        Receiver<std::thread::ThreadId>,
    ) {
        let semaphore = Arc::new(tokio::sync::Semaphore::new(1));
        let permit = semaphore
            .clone()
            .try_acquire_owned()
            .expect("the one permit");
        let permit_was_held = Arc::new(AtomicBool::new(false));
        let (dropped_on, dropped) = channel();
        let probe = Probe {
            semaphore: semaphore.clone(),
            permit_was_held: permit_was_held.clone(),
            dropped_on,
            release,
        };
        (
            Leftovers {
                work: Box::new(probe),
                permit,
            },
            semaphore,
            permit_was_held,
            dropped,
        )
    }

    #[test]
    fn leftovers_are_freed_on_another_thread_before_their_slot_is_given_back() {
        let teardown = Teardown::start("test-teardown", 1);
        let (leftovers, semaphore, permit_was_held, dropped) = leftovers(None);
        teardown.later(leftovers);
        let thread = dropped
            .recv_timeout(Duration::from_secs(20))
            .expect("freed");
        assert_ne!(thread, std::thread::current().id());
        let deadline = Instant::now() + Duration::from_secs(20);
        while semaphore.available_permits() == 0 {
            assert!(Instant::now() < deadline, "the permit was never given back");
            std::thread::yield_now();
        }
        assert!(
            permit_was_held.load(Ordering::SeqCst),
            "the slot was given back before the instances were freed"
        );
    }

    #[test]
    fn past_one_waiting_per_cpu_an_execution_frees_its_own() {
        let teardown = Teardown::start("test-teardown-full", 1);
        let (release, held) = channel();
        let (slow, _, _, slow_dropped) = leftovers(Some(held));
        teardown.later(slow);
        // The thread is busy with `slow`: the next is freed here, at once.
        let (next, semaphore, _, next_dropped) = leftovers(None);
        teardown.later(next);
        assert_eq!(
            next_dropped.try_recv(),
            Ok(std::thread::current().id()),
            "freed by its sender"
        );
        assert_eq!(semaphore.available_permits(), 1);
        release.send(()).expect("release the slow one");
        let thread = slow_dropped
            .recv_timeout(Duration::from_secs(20))
            .expect("freed");
        assert_ne!(thread, std::thread::current().id());
        // The queue is free again: the next waits for the thread.
        let deadline = Instant::now() + Duration::from_secs(20);
        while teardown.pending.load(Ordering::Acquire) > 0 {
            assert!(
                Instant::now() < deadline,
                "the slow one was never counted off"
            );
            std::thread::yield_now();
        }
        let (last, _, _, last_dropped) = leftovers(None);
        teardown.later(last);
        let thread = last_dropped
            .recv_timeout(Duration::from_secs(20))
            .expect("freed");
        assert_ne!(thread, std::thread::current().id());
    }
}
