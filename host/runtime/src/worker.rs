//! A thread of its own for work done after an answer: what is sent to it is
//! handled there, one item at a time, in the order sent.

use std::sync::mpsc::{Sender, channel};

/// The sending end of one worker thread.
pub struct Worker<T> {
    sender: Sender<T>,
}

impl<T: Send + 'static> Worker<T> {
    /// Starts the thread `name`: it runs `setup`, then `handle` on every item sent
    /// until the last [`Worker`] is gone. `None`, logged, when no thread can be
    /// spawned (the callers then do the work themselves).
    pub fn start(
        name: &str,
        setup: impl FnOnce() + Send + 'static,
        mut handle: impl FnMut(T) + Send + 'static,
    ) -> Option<Self> {
        let (sender, receiver) = channel::<T>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                setup();
                while let Ok(item) = receiver.recv() {
                    handle(item);
                }
            })
            .inspect_err(|error| {
                tracing::warn!(thread = name, reason = %error, "cannot start a worker thread; its work is done on the callers' threads");
            })
            .ok()
            .map(|_| Self { sender })
    }

    /// Hands `item` to the thread; gives it back when the thread is gone (a
    /// handler panicked).
    pub fn send(&self, item: T) -> Result<(), T> {
        self.sender.send(item).map_err(|returned| returned.0)
    }
}
