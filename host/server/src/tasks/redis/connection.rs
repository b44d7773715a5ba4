//! Requests to Redis: how long each may take, and how one is tried.

use std::time::Duration;

use super::super::task::Unavailable;

/// How long connecting to Redis may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one request to Redis may take before it counts as unavailable.
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest wait between two tries to write a result or to subscribe.
pub(super) const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
/// How long a stopping server waits for the results it is still writing.
pub(super) const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs one request to Redis; a timeout or an error is [`Unavailable`], with
/// the reason logged here. A connection found broken is tried once more: the
/// first request after an outage gets the old connection's error while the
/// new one is made.
pub(super) async fn ask<T, F, R>(what: &'static str, mut request: F) -> Result<T, Unavailable>
where
    F: FnMut() -> R,
    R: Future<Output = redis::RedisResult<T>>,
{
    let limit = RESPONSE_TIMEOUT + Duration::from_secs(1);
    let mut retried = false;
    loop {
        let reason = match tokio::time::timeout(limit, request()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error))
                if !retried && (error.is_io_error() || error.is_connection_dropped()) =>
            {
                retried = true;
                continue;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => "no answer in time".to_owned(),
        };
        tracing::warn!(reason = %reason, "task store unavailable: cannot {what}");
        return Err(Unavailable);
    }
}
