//! Bounded waits for work that runs outside WebAssembly.
//!
//! Fuel and the epoch deadline stop code running *inside* a sandbox, but not a
//! plugin waiting in a host call (a WASI clock, a socket, outbound HTTP, a file): no
//! wasm runs then, so nothing checks the budget. Such work is an asynchronous future
//! here (wasmtime's async instantiation and calls, with async WASI), and
//! [`until`] drives it on the calling thread while racing it against a deadline and
//! a [`Cancel`]. The future that loses the race is dropped: wasmtime unwinds the
//! plugin's stack and the host call it waited in is abandoned, so the caller gets
//! its answer at the deadline, not when the plugin is done waiting.
//!
//! The host's timers, sockets and blocking file operations run on one small runtime
//! of their own ([`runtime`]), so this works the same from the server, a
//! single-threaded runtime in a library user's test, or a plain thread (the loader).
//!
//! [`until`] is hand-written rather than a crate's `block_on` (`pollster`, which it
//! used before) raced against a runtime timer, for speed: that parked the
//! execution's thread at once and registered a timer on the host-waits runtime for
//! every pending wait, and waking a parked thread costs tens of µs on a virtual
//! machine whose CPU went idle. Here the work is polled on the execution's thread
//! with a waker of its own, the thread yields for up to [`SPIN`] while a local
//! answer may come, then parks with the deadline as its timeout (no timer). The
//! bench row it moved is `upstream call: execute beyond direct` (`cargo xtask
//! bench`): 292-297 µs with `pollster` and a timer, 153-219 µs (median 158) with
//! this (five runs each, p50; docs/performance.md). The runner's `block_on`
//! (`execute/runner.rs`) waits on no I/O and uses the `futures` crate's.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Instant;

pub use codemode_core::cancel::Cancel;

/// Why [`until`] gave up on a future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// The deadline passed first.
    Deadline,
    /// The [`Cancel`] fired first.
    Cancelled,
    /// The runtime for host waits could not be started (no thread could be
    /// spawned); nothing was run.
    NoRuntime,
}

/// The runtime that drives the timers, sockets and blocking file operations of
/// host waits: one worker (it only parks on the I/O and timer drivers; the waiting
/// futures themselves run on their callers' threads).
fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("codemode-host-io")
                .enable_all()
                .build()
                .inspect_err(|error| {
                    tracing::error!(reason = %error, "cannot start the runtime for host waits");
                })
                .ok()
        })
        .as_ref()
}

/// Runs `work` on this thread until it completes, `deadline` passes or `cancel`
/// fires, whichever is first; the loser is dropped. `work` is polled first each
/// time, so work that completes without waiting never touches a timer.
///
/// Blocks the calling thread: call it from a blocking thread (an execution's, the
/// loader's), never from an async task.
///
/// # Errors
///
/// [`Abandoned`]: the deadline passed or `cancel` fired before `work` completed
/// (`work` is dropped, unfinished), or there is no runtime to wait on.
pub fn until<F: Future>(
    deadline: Instant,
    cancel: Option<&Cancel>,
    work: F,
) -> Result<F::Output, Abandoned> {
    let runtime = runtime().ok_or(Abandoned::NoRuntime)?;
    // Timers, sockets and spawned blocking work made while `work` runs belong to
    // that runtime; `work` itself is polled here.
    let _context = runtime.enter();
    let signal = Signal::take();
    let waker = std::task::Waker::from(signal.clone());
    let outcome = run(deadline, cancel, work, &signal, &waker);
    drop(waker);
    Signal::put_back(signal);
    outcome
}

/// [`until`]'s loop, with its signal and waker.
fn run<F: Future>(
    deadline: Instant,
    cancel: Option<&Cancel>,
    work: F,
    signal: &Signal,
    waker: &std::task::Waker,
) -> Result<F::Output, Abandoned> {
    let mut context = std::task::Context::from_waker(waker);
    let mut work = std::pin::pin!(work);
    let mut cancelled = std::pin::pin!(async {
        match cancel {
            Some(cancel) => cancel.cancelled().await,
            None => std::future::pending().await,
        }
    });
    loop {
        if let Poll::Ready(done) = work.as_mut().poll(&mut context) {
            return Ok(done);
        }
        if cancelled.as_mut().poll(&mut context).is_ready() {
            return Err(Abandoned::Cancelled);
        }
        // The deadline is this thread's own park timeout, not a timer of the
        // runtime: registering one would wake the runtime's thread on every wait.
        if !signal.wait(deadline) {
            return Err(Abandoned::Deadline);
        }
    }
}

thread_local! {
    /// This thread's [`Signal`] between waits, so that a wait (one per native call)
    /// allocates none. Taken while a wait uses it: a wait nested in another's work
    /// makes its own and cannot take the outer one's wake.
    static SIGNAL: std::cell::Cell<Option<Arc<Signal>>> = const { std::cell::Cell::new(None) };
}

/// How long [`until`] spins before it parks its thread. An answer that comes
/// within this (an upstream MCP server on this machine) then needs no wake of a
/// parked thread, which costs tens of µs on a virtual machine whose CPU went idle.
const SPIN: std::time::Duration = std::time::Duration::from_micros(500);

/// The waker of [`until`]: a flag, and the thread to unpark.
struct Signal {
    woken: AtomicBool,
    thread: std::thread::Thread,
}

impl Signal {
    /// This thread's signal, not woken, or a new one when a wait on this thread
    /// already holds it.
    fn take() -> Arc<Signal> {
        match SIGNAL.with(std::cell::Cell::take) {
            Some(signal) => {
                // A waker of an earlier wait that fired after it ended: not this
                // wait's wake.
                signal.woken.store(false, Ordering::Relaxed);
                signal
            }
            None => Arc::new(Signal {
                woken: AtomicBool::new(false),
                thread: std::thread::current(),
            }),
        }
    }

    /// Keeps `signal` for this thread's next wait.
    fn put_back(signal: Arc<Signal>) {
        SIGNAL.with(|cell| cell.set(Some(signal)));
    }

    /// Waits until woken (true) or `deadline` (false): spins for [`SPIN`], then
    /// parks.
    fn wait(&self, deadline: Instant) -> bool {
        let spin_until = Instant::now() + SPIN;
        loop {
            if self.woken.swap(false, Ordering::Acquire) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if now < spin_until {
                // Not a pure spin: a thread this one would keep off its CPU (the
                // upstream's child, the runtime's thread) runs first.
                std::thread::yield_now();
            } else {
                std::thread::park_timeout(deadline - now);
            }
        }
    }
}

impl std::task::Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        // Cheap when the thread is not parked (it is spinning, or running).
        self.thread.unpark();
    }
}

/// The runtime of connections that outlive any one call (an upstream's MCP
/// session, its child's stderr, its supervisor): apart from [`runtime`], so that
/// an upstream sending a large message (its decoding takes the thread for a while)
/// delays neither a plugin's timer nor a socket it waits on.
fn connections() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("codemode-host-upstreams")
                .enable_all()
                .build()
                .inspect_err(|error| {
                    tracing::error!(reason = %error, "cannot start the runtime for upstream connections");
                })
                .ok()
        })
        .as_ref()
}

/// Runs `work` in the background on the runtime of connections ([`connections`]).
/// `None` when that runtime could not be started.
pub fn spawn<F>(work: F) -> Option<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Some(connections()?.spawn(work))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn work_that_completes_first_is_returned() {
        let deadline = Instant::now() + Duration::from_secs(30);
        assert_eq!(until(deadline, None, async { 7 }), Ok(7));
        let waited = until(deadline, None, async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            8
        });
        assert_eq!(waited, Ok(8));
    }

    #[test]
    fn a_wait_past_the_deadline_is_abandoned_at_the_deadline() {
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        let deadline = Instant::now() + Duration::from_millis(50);
        let waited = until(deadline, None, async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            flag.store(true, Ordering::Relaxed);
        });
        assert_eq!(waited, Err(Abandoned::Deadline));
        assert!(Instant::now() >= deadline);
        assert!(
            !finished.load(Ordering::Relaxed),
            "the work was dropped unfinished"
        );
    }

    #[test]
    fn a_cancel_from_another_thread_ends_the_wait() {
        let (cancel, canceller) = Cancel::with_canceller();
        let (started, waiting) = std::sync::mpsc::channel();
        let canceller = std::thread::spawn(move || {
            // Cancel only once the wait below has begun.
            let _ = waiting.recv();
            canceller.cancel();
        });
        let deadline = Instant::now() + Duration::from_secs(3600);
        let waited = until(deadline, Some(&cancel), async {
            let _ = started.send(());
            std::future::pending::<()>().await;
        });
        assert_eq!(waited, Err(Abandoned::Cancelled));
        assert!(canceller.join().is_ok());
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn an_already_cancelled_wait_does_not_start_waiting() {
        let (cancel, canceller) = Cancel::with_canceller();
        canceller.cancel();
        let deadline = Instant::now() + Duration::from_secs(3600);
        let waited = until(deadline, Some(&cancel), std::future::pending::<()>());
        assert_eq!(waited, Err(Abandoned::Cancelled));
    }
}
