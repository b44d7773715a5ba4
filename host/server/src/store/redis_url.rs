//! Which Redis a `redis://` URL names, checked before anything connects, and
//! the URL as it may be shown (without its password). Shared by the store's
//! Redis and the task store's.

use std::time::Duration;

use redis::IntoConnectionInfo;

/// How long data sent on a connection may go unacknowledged before the
/// connection is dropped (TCP_USER_TIMEOUT): a Redis that vanished without a
/// reset is then reconnected to instead of timing out every request.
const USER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the task store could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL is not `redis://[[USER]:PASSWORD@]HOST[:PORT][/N]`.
    #[error("--task-store {url}: {reason}")]
    Url {
        /// The URL, without its password.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// `url` without its password (whatever is between `://` and the last `@`),
/// to be shown and logged.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// Checks that `url` names a Redis the store can use (`redis://`; TLS and Unix
/// sockets are not supported) and makes its client, whose connections give up
/// after [`USER_TIMEOUT`] of unacknowledged data.
///
/// # Errors
///
/// [`ConnectError::Url`] naming what is wrong (never the password).
pub fn check_url(url: &str) -> Result<redis::Client, ConnectError> {
    let bad = |reason: String| ConnectError::Url {
        url: redacted(url),
        reason,
    };
    match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("redis") => {}
        Some("rediss") => {
            return Err(bad(
                "TLS to Redis (rediss://) is not supported; reach Redis on a private network"
                    .to_owned(),
            ));
        }
        Some(_) | None => {
            return Err(bad("expected redis://HOST:PORT/N".to_owned()));
        }
    }
    // The client's errors may quote the URL: only their kind is told.
    let info = url
        .into_connection_info()
        .map_err(|error| bad(format!("not a Redis URL ({:?})", error.kind())))?;
    let tcp = redis::io::tcp::TcpSettings::default().set_user_timeout(USER_TIMEOUT);
    redis::Client::open(info.set_tcp_settings(tcp))
        .map_err(|error| bad(format!("not a Redis URL ({:?})", error.kind())))
}
