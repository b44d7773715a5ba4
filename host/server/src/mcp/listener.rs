//! Accepting HTTP connections within limits: how many at once, how long a client
//! may take to send its headers and its body, and a graceful shutdown.
//!
//! Without these, a client that opens connections and never finishes a request
//! holds a file descriptor each for as long as it likes: 1,100 of them under
//! `RLIMIT_NOFILE=1024` cut off `/healthz`, `/mcp`, and the plugins folder's reload.
//! Here a connection is accepted only while fewer than `max_connections` are open
//! (the others wait in the kernel's backlog, holding no descriptor of ours); the
//! headers of every request, including the wait for the next request on a
//! keep-alive connection, must arrive within `header_read_timeout`; and a request's
//! body within `body_read_timeout` of its headers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tower_service::Service as _;

/// How long, after accepting fails (out of file descriptors: `EMFILE`), the loop
/// waits before accepting again, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The limits on HTTP connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once (`--max-connections`).
    pub max_connections: usize,
    /// Time to receive a request's headers, counted from when the connection starts
    /// waiting for them (so also the idle time allowed on a keep-alive connection).
    pub header_read_timeout: Duration,
    /// Time to receive a request's body, counted from its headers.
    pub body_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves; then
/// stops accepting and lets connections finish their requests for at most `drain`.
///
/// # Errors
///
/// Never at present: a failed `accept` is logged and retried after a pause.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnectionLimits,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        // A permit first: past the cap, connections stay in the kernel's backlog.
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(reason = %error, retry_ms = ACCEPT_BACKOFF.as_millis() as u64, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let body_read_timeout = limits.body_read_timeout;
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let request = request.map(|body| Body::new(DeadlineBody::new(body, body_read_timeout)));
            router.clone().call(request)
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(reason = %error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!(
        drain_ms = drain.as_millis() as u64,
        "shutting down: no new connections; finishing requests in flight"
    );
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(drain) => {
            tracing::warn!("requests still in flight after the drain period; exiting");
        }
    }
    Ok(())
}

/// Why a request body was cut off.
#[derive(Debug)]
struct BodyTimeout(Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} ms of its headers",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body that fails once its deadline passes.
struct DeadlineBody {
    inner: Incoming,
    timeout: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl DeadlineBody {
    fn new(inner: Incoming, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}
