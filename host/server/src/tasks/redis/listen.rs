//! What a replica hears of the tasks it runs: cancels and answers published
//! by any replica, and every few seconds their status read from Redis, so
//! that a missed message is made up for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::ConnectionManager;

use super::connection::{CONNECT_TIMEOUT, MAX_RETRY_DELAY, RESPONSE_TIMEOUT, ask};
use super::keys::{ANSWER_CHANNEL, CANCEL_CHANNEL, TASK_KEY};
use super::local::{Local, lock, stop};
use super::scripts::{MAX_FIELD_BYTES, MAX_INPUT_BYTES, READ, scripts};

/// How often a replica reads the status of the tasks it runs (a cancel whose
/// message it missed stops them within this).
const RECONCILE_EVERY: Duration = Duration::from_secs(5);

/// Listens for cancels on [`CANCEL_CHANNEL`] for as long as the store lives,
/// resubscribing (after a growing pause) whenever the subscription ends; on
/// every subscription and every [`RECONCILE_EVERY`] the status of the tasks
/// running here is read, so that a cancel whose message was missed still stops
/// its task.
pub(super) async fn subscribe(client: redis::Client, connection: ConnectionManager, local: Local) {
    let mut delay = Duration::from_millis(100);
    // Said once per outage: a WARN when it starts, an INFO when it ends.
    let lost = AtomicBool::new(false);
    loop {
        let subscribed = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&[CANCEL_CHANNEL, ANSWER_CHANNEL]).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let reason = match tokio::time::timeout(CONNECT_TIMEOUT, subscribed).await {
            Ok(Ok(pubsub)) => {
                if lost.swap(false, Ordering::Relaxed) {
                    tracing::info!("subscribed to task cancels again");
                }
                let since = tokio::time::Instant::now();
                reconcile(&connection, &local).await;
                listen(pubsub, &connection, &local).await;
                // A subscription that lasted resets the pause.
                if since.elapsed() > MAX_RETRY_DELAY {
                    delay = Duration::from_millis(100);
                }
                "the subscription ended".to_owned()
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => "no answer in time".to_owned(),
        };
        if !lost.swap(true, Ordering::Relaxed) {
            tracing::warn!(reason = %reason, "not subscribed to task cancels; retrying (the tasks running here are checked every 5 s meanwhile)");
        }
        reconcile(&connection, &local).await;
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

/// Stops the tasks whose IDs come on [`CANCEL_CHANNEL`], takes the answers of
/// those on [`ANSWER_CHANNEL`], and every [`RECONCILE_EVERY`] does both for
/// what it finds in Redis; until the subscription ends.
async fn listen(pubsub: redis::aio::PubSub, connection: &ConnectionManager, local: &Local) {
    let mut messages = pubsub.into_on_message();
    let mut every = tokio::time::interval(RECONCILE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) => {
                    let Ok(id) = message.get_payload::<String>() else {
                        continue;
                    };
                    if message.get_channel_name() == ANSWER_CHANNEL {
                        take(connection, local, &id).await;
                    } else if stop(local, &id) {
                        tracing::info!(task = %id, "task cancelled through the task store: its execution stopped");
                    }
                }
                None => return,
            },
            _ = every.tick() => reconcile(connection, local).await,
        }
    }
}

/// Takes the answer for task `id` if it runs here and waits for one that came:
/// read and deleted in Redis, then handed to the asker.
pub(super) async fn take(connection: &ConnectionManager, local: &Local, id: &str) {
    let Some(key) = lock(local).get(id).and_then(|task| {
        task.question
            .as_ref()
            .filter(|question| question.answer.is_some())
            .map(|question| question.key.clone())
    }) else {
        return;
    };
    let task_key = format!("{TASK_KEY}{id}");
    let taken = ask("take a task's input", || {
        let mut script = scripts().take.prepare_invoke();
        script.key(&task_key).arg(&key).arg(MAX_INPUT_BYTES);
        let mut connection = connection.clone();
        async move { script.invoke_async::<Option<String>>(&mut connection).await }
    })
    .await;
    let Ok(Some(text)) = taken else {
        return;
    };
    // What the client sent was JSON when it was stored.
    let response = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    let waiter = lock(local).get_mut(id).and_then(|task| {
        task.question
            .as_mut()
            .filter(|question| question.key == key)
            .and_then(|question| question.answer.take())
    });
    if let Some(sender) = waiter {
        let _ = sender.send(response);
    }
}

/// Reads the status of the tasks running here: stops the cancelled ones and
/// takes the answers of those that wait (their message may have been missed).
/// A task gone from Redis (restarted empty) runs on: its end writes it again.
async fn reconcile(connection: &ConnectionManager, local: &Local) {
    let ids: Vec<String> = lock(local).keys().cloned().collect();
    if ids.is_empty() {
        return;
    }
    // Each status through READ (bounded), the script's text sent with each:
    // a pipeline has no way back to load a script Redis forgot.
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("EVAL")
            .arg(READ)
            .arg(1)
            .arg(format!("{TASK_KEY}{id}"))
            .arg(MAX_FIELD_BYTES)
            .arg(0)
            .arg(0)
            .arg("status");
    }
    let mut connection = connection.clone();
    let Ok(Ok(statuses)) = tokio::time::timeout(
        RESPONSE_TIMEOUT + Duration::from_secs(1),
        pipe.query_async::<Vec<Vec<Option<String>>>>(&mut connection),
    )
    .await
    else {
        return;
    };
    for (id, read) in ids.iter().zip(statuses) {
        let status = match read.as_slice() {
            [Some(ok), status] if ok == "ok" => status.clone(),
            _ => None,
        };
        match status.as_deref() {
            Some("cancelled") => {
                if stop(local, id) {
                    tracing::info!(task = %id, "task found cancelled in the task store: its execution stopped");
                }
            }
            Some(_) | None => take(&connection, local, id).await,
        }
    }
}
