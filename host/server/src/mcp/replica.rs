//! Sessions any replica can serve (`--http-sessions`): rmcp's session manager,
//! with the IDs of the requests the server sends naming the replica that
//! sends them, and what the store keeps of each session for rmcp to restore
//! it elsewhere.
//!
//! A client's answer to a question (an approval's `elicitation/create`) is a
//! new POST, which a load balancer may send to any replica. The question's
//! JSON-RPC ID says which replica asked and in which run of the session there
//! (`<replica>.<worker>.<n>`: 16 and 8 hex digits, then rmcp's own counter),
//! so the replica that receives the answer knows where the execution waits.
//! rmcp's counters start at 0 in every replica and every time a session is
//! restored, so without both names a late answer to an old question could be
//! taken for the answer to a new one. A cancel of a question the server sends
//! (its wait timed out) names it the same way.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, NumberOrString, ServerJsonRpcMessage, ServerNotification};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::store::{
    EventStore, SessionState, SessionStore, SessionStoreError,
};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};

use crate::store::{SessionField, Store};

/// What separates the parts of a request ID.
const SEPARATOR: char = '.';

/// Hex digits of a replica's name.
pub const REPLICA_DIGITS: usize = 16;

/// Hex digits of a session run's name.
const WORKER_DIGITS: usize = 8;

/// The longest `initialize` kept in the store for other replicas to replay
/// (a larger one is served here only).
pub const MAX_HANDSHAKE_BYTES: usize = 64 << 10;

/// rmcp's session manager, whose sessions' transports name this replica in
/// the IDs of the requests they send.
pub struct ReplicaSessionManager {
    /// The sessions held in this process.
    pub local: LocalSessionManager,
    replica: Arc<str>,
}

impl ReplicaSessionManager {
    /// The sessions of the replica named `replica`.
    pub fn new(local: LocalSessionManager, replica: Arc<str>) -> Self {
        Self { local, replica }
    }

    fn tagged<T>(&self, transport: T) -> Tagged<T> {
        Tagged {
            inner: transport,
            prefix: Arc::from(format!(
                "{}{SEPARATOR}{}{SEPARATOR}",
                self.replica,
                random_hex(WORKER_DIGITS / 2)
            )),
        }
    }
}

/// `bytes` random bytes in hex (a clock's reading if the system gives none).
pub fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    if getrandom::fill(&mut buffer).is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            ^ u128::from(std::process::id());
        for (at, byte) in buffer.iter_mut().enumerate() {
            *byte = (now >> ((at % 16) * 8)) as u8;
        }
    }
    hex::encode(buffer)
}

/// The replica named in a request ID `id` the server sent, if it is one
/// (`<replica>.<worker>.<n>`, exactly).
pub fn replica_of(id: &str) -> Option<&str> {
    let mut parts = id.split(SEPARATOR);
    let (replica, worker, number) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = |text: &str, digits: usize| {
        text.len() == digits && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    (parts.next().is_none()
        && hex(replica, REPLICA_DIGITS)
        && hex(worker, WORKER_DIGITS)
        && !number.is_empty()
        && number.len() <= 19
        && number.bytes().all(|b| b.is_ascii_digit()))
    .then_some(replica)
}

/// A session's transport: the requests it sends carry `<replica>.<worker>.<n>`
/// IDs (and so do its cancels of them), and the answers it receives to them
/// get rmcp's `n` back.
pub struct Tagged<T> {
    inner: T,
    /// `<replica>.<worker>.`: this run of the session on this replica.
    prefix: Arc<str>,
}

impl<T> Tagged<T> {
    fn tag(&self, id: &mut NumberOrString) {
        if let NumberOrString::Number(n) = id {
            *id = NumberOrString::String(Arc::from(format!("{}{n}", self.prefix)));
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Tagged<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        mut item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &mut item {
            ServerJsonRpcMessage::Request(request) => self.tag(&mut request.id),
            ServerJsonRpcMessage::Notification(notification) => {
                // The server cancels only its own requests (a wait that
                // timed out): the client knows them by their tagged IDs.
                if let ServerNotification::CancelledNotification(cancelled) =
                    &mut notification.notification
                    && let Some(id) = cancelled.params.request_id.as_mut()
                {
                    self.tag(id);
                }
            }
            ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_) => {}
        }
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        let prefix = self.prefix.clone();
        let received = self.inner.receive();
        async move {
            let mut message = received.await?;
            let id = match &mut message {
                ClientJsonRpcMessage::Response(response) => Some(&mut response.id),
                ClientJsonRpcMessage::Error(error) => error.id.as_mut(),
                ClientJsonRpcMessage::Request(_) | ClientJsonRpcMessage::Notification(_) => None,
            };
            if let Some(id) = id
                && let Some(n) = ours(id, &prefix)
            {
                *id = NumberOrString::Number(n);
            }
            Some(message)
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// rmcp's number in `id`, when `id` is `prefix` followed by it.
fn ours(id: &NumberOrString, prefix: &str) -> Option<i64> {
    let NumberOrString::String(text) = id else {
        return None;
    };
    text.strip_prefix(prefix)?.parse().ok()
}

impl SessionManager for ReplicaSessionManager {
    type Error = LocalSessionManagerError;
    type Transport = Tagged<<LocalSessionManager as SessionManager>::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.local.create_session().await?;
        Ok((id, self.tagged(transport)))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.local.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.local.restore_session(id).await? {
            RestoreOutcome::Restored(transport) => RestoreOutcome::Restored(self.tagged(transport)),
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            // rmcp's own manager restores; anything else is not ours to do.
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.local.event_store()
    }
}

/// The sessions' handshakes in the store, for rmcp to restore a session this
/// process does not hold (another replica opened it, or this one before a
/// restart). Who may use a restored session is checked before, from the same
/// record ([`super::sessions::Sessions::access`]).
pub struct StoredSessions {
    /// Where the records are.
    pub store: Arc<Store>,
    /// How long a record lasts past its last refresh.
    pub ttl: Duration,
    /// The handshakes just kept, until the session is bound to its subject
    /// ([`super::sessions::Sessions::adopt`] takes them): what a replica that
    /// holds the session writes again should its record be lost.
    pub handshakes: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<str>>>>,
}

#[async_trait::async_trait]
impl SessionStore for StoredSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(record) = self.store.session_load(session_id).await? else {
            return Ok(None);
        };
        // Never bound to a subject, or ended by its client: nobody's.
        if record.owner.is_none() || record.ended {
            return Ok(None);
        }
        let Some(text) = record.initialize else {
            return Ok(None);
        };
        Ok(Some(serde_json::from_str(&text)?))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let text = serde_json::to_string(state)?;
        if text.len() > MAX_HANDSHAKE_BYTES {
            return Err(format!(
                "its initialize is over {MAX_HANDSHAKE_BYTES} bytes: only this replica serves it"
            )
            .into());
        }
        self.store
            .session_write(session_id, SessionField::Initialize, &text, self.ttl)
            .await?;
        self.handshakes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(session_id.to_owned(), Arc::from(text));
        Ok(())
    }

    /// The client ended the session: its record says so, so that every
    /// replica holding it stops serving it at its next request. The mark
    /// lasts twice the record's time: a copy an execution kept alive since
    /// (rmcp's idle time restarts at each message the server sends) still
    /// finds it.
    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.store
            .session_write(session_id, SessionField::Ended, "1", self.ttl * 2)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_names_the_replica_and_the_run_that_sent_it() {
        let replica = "0123456789abcdef";
        assert_eq!(replica_of(&format!("{replica}.89abcdef.0")), Some(replica));
        for bad in [
            format!("{replica}.89abcdef."),
            format!("{replica}.89abcdef.x"),
            format!("{replica}.89abcdef.1.2"),
            format!("{replica}.89ABCDEF.1"),
            format!("{replica}0.89abcdef.1"),
            format!("{replica}.1"),
            "7".to_owned(),
            format!("{replica}.89abcdef.{}", "9".repeat(20)),
        ] {
            assert_eq!(replica_of(&bad), None, "{bad}");
        }
        let manager =
            ReplicaSessionManager::new(LocalSessionManager::default(), Arc::from(replica));
        let (one, two) = (manager.tagged(()), manager.tagged(()));
        assert_ne!(one.prefix, two.prefix);
        let mut id = NumberOrString::Number(5);
        one.tag(&mut id);
        assert_eq!(replica_of(&id.to_string()), Some(replica));
        assert_eq!(ours(&id, &one.prefix), Some(5));
        // Another run of the session, on the same replica, never takes it.
        assert_eq!(ours(&id, &two.prefix), None);
        assert_eq!(ours(&NumberOrString::Number(5), &one.prefix), None);
    }
}
