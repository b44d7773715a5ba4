//! Messages between replicas through the store's Redis: a replica publishes
//! on a channel named for another, which listens on it for as long as it runs
//! (resubscribing after a lost connection). Only a Redis store has them: the
//! other stores are one process's, which needs no messages to itself.

use tokio::sync::mpsc;

use super::database::{Store, StoreError};

impl Store {
    /// Whether other processes, on any machine, share the store (Redis), so
    /// that what one replica starts another may be asked to finish.
    pub fn shared_by_replicas(&self) -> bool {
        self.location().is_redis()
    }

    /// Publishes `payload` on `channel`: how many listeners heard it.
    ///
    /// # Errors
    ///
    /// The store is no Redis, or did not answer.
    pub async fn publish(&self, channel: &str, payload: &str) -> Result<u64, StoreError> {
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis() {
            return redis?
                .publish(channel, payload)
                .await
                .map_err(|reason| self.error(reason));
        }
        let _ = (channel, payload);
        Err(self.error("no other process shares this store"))
    }

    /// The messages published on `channel` from now on, for as long as the
    /// receiver lives; `None` when the store is no Redis.
    pub fn subscribe(&self, channel: String) -> Option<mpsc::Receiver<String>> {
        #[cfg(feature = "redis")]
        if let Some(Ok(redis)) = self.redis() {
            let (sender, receiver) = mpsc::channel(subscription::BACKLOG);
            tokio::spawn(subscription::listen(
                redis.client().clone(),
                channel,
                sender,
            ));
            return Some(receiver);
        }
        let _ = channel;
        None
    }
}

/// The subscription loop (feature `redis`).
#[cfg(feature = "redis")]
mod subscription {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use futures::StreamExt as _;
    use tokio::sync::mpsc;

    /// How many messages may wait for the listener; past it the next is
    /// dropped.
    pub(super) const BACKLOG: usize = 256;

    /// The longest pause between two tries to subscribe.
    const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

    /// How long subscribing may take.
    const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(3);

    /// Subscribes to `channel` and hands its messages to `sender`, subscribing
    /// again (after a growing pause) whenever the subscription ends, until the
    /// receiver is dropped.
    pub(super) async fn listen(
        client: redis::Client,
        channel: String,
        sender: mpsc::Sender<String>,
    ) {
        let mut delay = Duration::from_millis(100);
        // Said once per outage: a WARN when it starts, an INFO when it ends.
        let lost = AtomicBool::new(false);
        while !sender.is_closed() {
            let subscribed = async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            let reason = match tokio::time::timeout(SUBSCRIBE_TIMEOUT, subscribed).await {
                Ok(Ok(pubsub)) => {
                    if lost.swap(false, Ordering::Relaxed) {
                        tracing::info!(channel = %channel, "subscribed to the store's channel again");
                    }
                    delay = Duration::from_millis(100);
                    let mut messages = pubsub.into_on_message();
                    loop {
                        tokio::select! {
                            message = messages.next() => match message {
                                Some(message) => {
                                    let Ok(payload) = message.get_payload::<String>() else {
                                        continue;
                                    };
                                    if sender.try_send(payload).is_err() {
                                        tracing::warn!(channel = %channel, "a message of the store's channel dropped: its listener is far behind");
                                    }
                                }
                                None => break,
                            },
                            () = sender.closed() => return,
                        }
                    }
                    "the subscription ended".to_owned()
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => "no answer in time".to_owned(),
            };
            if !lost.swap(true, Ordering::Relaxed) {
                tracing::warn!(channel = %channel, reason = %reason, "not subscribed to the store's channel; retrying");
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = sender.closed() => return,
            }
            delay = (delay * 2).min(MAX_RETRY_DELAY);
        }
    }
}
