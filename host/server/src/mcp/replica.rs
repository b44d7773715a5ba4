//! Sessions any replica can serve (`--http-sessions`): rmcp's session manager,
//! with the IDs of the requests the server sends naming the replica that
//! sends them, and what the store keeps of each session for rmcp to restore
//! it elsewhere.
//!
//! A client's answer to a question (an approval's `elicitation/create`) is a
//! new POST, which a load balancer may send to any replica. The question's
//! JSON-RPC ID says which replica asked (`<replica>.<n>`, rmcp's own counter
//! after the dot), so the replica that receives the answer knows where the
//! execution waits; rmcp's counters start at 0 in every replica, so without
//! the name two replicas asking in one session would use the same ID.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, NumberOrString, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};

use crate::store::{SessionField, Store};

/// What separates the replica from rmcp's number in a request ID.
const SEPARATOR: char = '.';

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
            replica: self.replica.clone(),
        }
    }
}

/// The replica named in a request ID `id` the server sent, if it is one.
pub fn replica_of(id: &str) -> Option<&str> {
    let (replica, number) = id.rsplit_once(SEPARATOR)?;
    (!replica.is_empty() && !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
        .then_some(replica)
}

/// A session's transport: the requests it sends carry `<replica>.<n>` IDs,
/// and the answers it receives to them get rmcp's `n` back.
pub struct Tagged<T> {
    inner: T,
    replica: Arc<str>,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Tagged<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        mut item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let ServerJsonRpcMessage::Request(request) = &mut item
            && let NumberOrString::Number(n) = request.id
        {
            request.id =
                NumberOrString::String(Arc::from(format!("{}{SEPARATOR}{n}", self.replica)));
        }
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        let replica = self.replica.clone();
        let received = self.inner.receive();
        async move {
            let mut message = received.await?;
            let id = match &mut message {
                ClientJsonRpcMessage::Response(response) => Some(&mut response.id),
                ClientJsonRpcMessage::Error(error) => error.id.as_mut(),
                ClientJsonRpcMessage::Request(_) | ClientJsonRpcMessage::Notification(_) => None,
            };
            if let Some(id) = id
                && let Some(n) = ours(id, &replica)
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

/// rmcp's number in `id`, when `id` names `replica`.
fn ours(id: &NumberOrString, replica: &str) -> Option<i64> {
    let NumberOrString::String(text) = id else {
        return None;
    };
    let number = text.strip_prefix(replica)?.strip_prefix(SEPARATOR)?;
    number.parse().ok()
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
}

/// The sessions' handshakes in the store, for rmcp to restore a session this
/// process does not hold (another replica opened it, or this one before a
/// restart). Who may use a restored session is checked before, from the same
/// record ([`super::sessions::Sessions::access`]).
pub struct StoredSessions {
    /// Where the records are.
    pub store: Arc<Store>,
    /// How long a record lasts past its last use: the sessions' idle time.
    pub ttl: Duration,
}

#[async_trait::async_trait]
impl SessionStore for StoredSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(record) = self.store.session_load(session_id).await? else {
            return Ok(None);
        };
        // Never bound to a subject: nobody's to restore.
        if record.owner.is_none() {
            return Ok(None);
        }
        let Some(text) = record.initialize else {
            return Ok(None);
        };
        Ok(Some(serde_json::from_str(&text)?))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let text = serde_json::to_string(state)?;
        self.store
            .session_write(session_id, SessionField::Initialize, &text, self.ttl)
            .await?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.store.session_delete(session_id).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_names_the_replica_that_sent_it() {
        assert_eq!(replica_of("a1b2.0"), Some("a1b2"));
        assert_eq!(replica_of("a.b.17"), Some("a.b"));
        assert_eq!(replica_of("a1b2."), None);
        assert_eq!(replica_of(".3"), None);
        assert_eq!(replica_of("7"), None);
        assert_eq!(replica_of("a1b2.x"), None);
        let id = NumberOrString::String(Arc::from("a1b2.5"));
        assert_eq!(ours(&id, "a1b2"), Some(5));
        assert_eq!(ours(&id, "a1b"), None);
        assert_eq!(ours(&NumberOrString::Number(5), "a1b2"), None);
    }
}
