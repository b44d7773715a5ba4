//! Streamable HTTP sessions for clients before 2026-07-28 (`--http-sessions`),
//! each owned by the subject that opened it.
//!
//! Without sessions the server is stateless and a request the server sends (an
//! approval's `elicitation/create`) cannot be answered: the client's answer is a
//! new POST that any replica may receive. With them, rmcp keeps a session per
//! `initialize` (the `Mcp-Session-Id` header) and routes the answer to the call
//! that waits for it. A session ID is then as good as a bearer token for reading
//! what the server sends on it and answering it, so each session is bound to the
//! subject whose `initialize` opened it: another subject presenting the ID gets
//! the same 404 as for an unknown one. Sessions are bounded in number, overall
//! and per subject, and end after an idle time that outlasts an execution and an
//! approval.
//!
//! With a store (`--store`), each session's subject and handshake are recorded
//! there, so any replica sharing it (or this one after a restart) serves the
//! session: it checks the subject from the record and rmcp replays the
//! handshake (`replica.rs`). An answer that reaches a replica other than the
//! one that asked is forwarded to it through the store's Redis.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::store::SessionStore;

use super::replica::{ReplicaSessionManager, StoredSessions, replica_of};
use crate::authz::Subject;
use crate::store::{SessionField, Store, StoreError};

/// The request and response header that names a session.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Most sessions open at once; an `initialize` past it is refused (503).
pub const MAX_SESSIONS: usize = 4096;
/// Most sessions one subject may hold open at once; past it, 503.
pub const MAX_SESSIONS_PER_SUBJECT: usize = 64;
/// The shortest idle time after which a session ends.
pub const MIN_SESSION_IDLE: Duration = Duration::from_secs(5 * 60);
/// Most session streams (`GET`) open at once, one per session: each holds a
/// connection for as long as it is open, and connections are bounded
/// (`--max-connections`, 1024 by default), so short requests keep room.
pub const MAX_STREAMS: usize = 256;
/// What a client is told when its session has a stream open already.
pub const STREAM_OPEN: &str = "Conflict: this session's stream is open already\n";
/// What a client is told when no more streams may be opened.
pub const TOO_MANY_STREAMS: &str = "Service Unavailable: too many MCP session streams open\n";
/// What a client is told when it may open no more sessions.
pub const TOO_MANY_SESSIONS: &str =
    "Service Unavailable: too many MCP sessions open; close one (DELETE) or wait for one to end\n";
/// What a client is told when the store of the sessions did not answer (the
/// reason is logged).
pub const SESSIONS_UNAVAILABLE: &str =
    "Service Unavailable: the store of the MCP sessions did not answer; try again shortly\n";
/// The prefix of the store channel on which a replica hears the answers to its
/// questions that other replicas received; the replica's name follows.
pub const ANSWERS_CHANNEL: &str = "codemode:sessions:answers:";

/// The sessions of `--http-sessions`: rmcp's session manager, who owns each
/// session it holds, which have a stream open, and, with a store, what any
/// replica (or this one after a restart) needs to serve a session opened
/// elsewhere.
pub struct Sessions {
    manager: Arc<ReplicaSessionManager>,
    /// Each session held here: its subject, when it was bound, and when its
    /// record in the store was last made to last.
    owners: Mutex<HashMap<String, Owned>>,
    /// The sessions whose stream is open.
    streams: Arc<Mutex<HashSet<String>>>,
    /// Where the sessions last, if anywhere.
    store: Option<Arc<Store>>,
    /// This process's name among the replicas: random, new at each start.
    replica: Arc<str>,
    /// How long a session lasts without a message.
    idle: Duration,
}

/// A session held here.
struct Owned {
    subject: String,
    bound: Instant,
    refreshed: Instant,
}

/// A session's open stream; closing it (dropping) lets another be opened.
pub struct StreamGuard {
    id: String,
    streams: Arc<Mutex<HashSet<String>>>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// Why a session's stream may not be opened.
#[derive(Debug, PartialEq, Eq)]
pub enum StreamRefused {
    /// The session has one open.
    Open,
    /// [`MAX_STREAMS`] are open.
    Full,
}

/// Whether a request may use the session it names.
#[derive(Debug, PartialEq, Eq)]
pub enum Access {
    /// A session this subject owns.
    Allowed,
    /// Another subject's session, or one never bound: answered as an unknown
    /// one.
    NotFound,
    /// This subject's session, opened elsewhere, which this replica has no
    /// room to serve ([`TOO_MANY_SESSIONS`]).
    Full,
    /// Not held here, and the store did not answer ([`SESSIONS_UNAVAILABLE`]).
    Unavailable,
}

impl Sessions {
    /// Sessions that end after `idle` without a message (at least
    /// [`MIN_SESSION_IDLE`]), recorded in `store` when given.
    pub fn new(idle: Duration, store: Option<Arc<Store>>) -> Self {
        let idle = idle.max(MIN_SESSION_IDLE);
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(idle);
        let replica: Arc<str> = Arc::from(replica_name());
        Self {
            manager: Arc::new(ReplicaSessionManager::new(local, replica.clone())),
            owners: Mutex::new(HashMap::new()),
            streams: Arc::default(),
            store,
            replica,
            idle,
        }
    }

    /// The session manager to serve with.
    pub fn manager(&self) -> Arc<ReplicaSessionManager> {
        self.manager.clone()
    }

    /// What rmcp restores a session from, when the sessions are in a store.
    pub fn session_store(&self) -> Option<Arc<dyn SessionStore>> {
        self.store.as_ref().map(|store| {
            Arc::new(StoredSessions {
                store: store.clone(),
                ttl: self.idle,
            }) as Arc<dyn SessionStore>
        })
    }

    /// Whether `subject` may use the session `id`. Every session is bound
    /// before its ID reaches the client, so an unbound ID is nobody's. One
    /// not held here is looked up in the store, and held here from then on.
    pub async fn access(&self, id: &str, subject: &Subject) -> Access {
        let refresh = {
            let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            match owners.get_mut(id) {
                Some(owned) if owned.subject == subject.id => {
                    // The record lasts the idle time past its last refresh.
                    let due = owned.refreshed.elapsed() >= self.idle / 4;
                    if due {
                        owned.refreshed = Instant::now();
                    }
                    Some(due)
                }
                Some(_) => return Access::NotFound,
                None => None,
            }
        };
        let Some(store) = &self.store else {
            return match refresh {
                Some(_) => Access::Allowed,
                None => Access::NotFound,
            };
        };
        match refresh {
            Some(true) => {
                if let Err(error) = store.session_refresh(id, self.idle).await {
                    tracing::warn!(reason = %error, "cannot refresh a session in the store: another replica may not find it");
                }
                return Access::Allowed;
            }
            Some(false) => return Access::Allowed,
            None => {}
        }
        let record = match store.session_load(id).await {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(reason = %error, "cannot look a session up in the store");
                return Access::Unavailable;
            }
        };
        if record.and_then(|record| record.owner).as_deref() != Some(subject.id.as_str()) {
            return Access::NotFound;
        }
        if !self.has_room(subject).await {
            return Access::Full;
        }
        let now = Instant::now();
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id.to_owned())
            .or_insert(Owned {
                subject: subject.id.clone(),
                bound: now,
                refreshed: now,
            });
        Access::Allowed
    }

    /// Whether `subject` may open one more session (after forgetting the
    /// sessions that ended, when a limit is reached): checked before an
    /// `initialize` runs, so a subject at its limit opens none.
    pub async fn has_room(&self, subject: &Subject) -> bool {
        if !self.over(subject) {
            return true;
        }
        self.forget_ended().await;
        !self.over(subject)
    }

    /// Binds the session `id`, just opened by `subject`'s `initialize`, to
    /// it (in the store too, when there is one); or closes it and answers
    /// `false` when that would pass [`MAX_SESSIONS`] or
    /// [`MAX_SESSIONS_PER_SUBJECT`] (concurrent `initialize`s that all found
    /// room).
    pub async fn adopt(&self, id: &str, subject: &Subject) -> bool {
        let adopted = {
            let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            let room = !over(&owners, subject);
            if room {
                let now = Instant::now();
                owners.insert(
                    id.to_owned(),
                    Owned {
                        subject: subject.id.clone(),
                        bound: now,
                        refreshed: now,
                    },
                );
            }
            room
        };
        if !adopted {
            let _ = self.manager.close_session(&Arc::from(id)).await;
            if let Some(store) = &self.store
                && let Err(error) = store.session_delete(id).await
            {
                tracing::warn!(reason = %error, "cannot remove a refused session from the store");
            }
            return false;
        }
        if let Some(store) = &self.store
            && let Err(error) = store
                .session_write(id, SessionField::Owner, &subject.id, self.idle)
                .await
        {
            tracing::warn!(reason = %error, "cannot record a session in the store: only this replica serves it");
        }
        true
    }

    /// The replica that sent the request `body` answers, when `body` is a
    /// JSON-RPC response (or error) to another replica's request and the
    /// sessions are shared with other replicas.
    pub fn answered_elsewhere(&self, body: &[u8]) -> Option<String> {
        if !self
            .store
            .as_ref()
            .is_some_and(|store| store.shared_by_replicas())
        {
            return None;
        }
        let message: serde_json::Value = serde_json::from_slice(body).ok()?;
        let object = message.as_object()?;
        if object.contains_key("method")
            || !(object.contains_key("result") || object.contains_key("error"))
        {
            return None;
        }
        let replica = replica_of(object.get("id")?.as_str()?)?;
        (replica != &*self.replica).then(|| replica.to_owned())
    }

    /// Hands `body`, an answer in session `id`, to `replica`, which asked:
    /// whether a replica of that name heard it (it may have stopped).
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub async fn forward(&self, id: &str, replica: &str, body: &[u8]) -> Result<bool, StoreError> {
        let Some(store) = &self.store else {
            return Ok(false);
        };
        let payload = serde_json::json!({
            "session": id,
            "message": String::from_utf8_lossy(body),
        });
        let heard = store
            .publish(&format!("{ANSWERS_CHANNEL}{replica}"), &payload.to_string())
            .await?;
        Ok(heard > 0)
    }

    /// Starts hearing the answers other replicas received to this one's
    /// questions, for as long as the sessions live (a Redis store only).
    pub fn hear_answers(self: &Arc<Self>) {
        let Some(mut answers) = self
            .store
            .as_ref()
            .and_then(|store| store.subscribe(format!("{ANSWERS_CHANNEL}{}", self.replica)))
        else {
            return;
        };
        let sessions = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(payload) = answers.recv().await {
                let Some(sessions) = sessions.upgrade() else {
                    return;
                };
                sessions.take_answer(&payload).await;
            }
        });
    }

    /// Delivers a forwarded answer to the session it belongs to, if this
    /// replica still holds it.
    async fn take_answer(&self, payload: &str) {
        let forwarded: Option<(String, ClientJsonRpcMessage)> =
            serde_json::from_str::<serde_json::Value>(payload)
                .ok()
                .and_then(|value| {
                    let session = value.get("session")?.as_str()?.to_owned();
                    let message = serde_json::from_str(value.get("message")?.as_str()?).ok()?;
                    Some((session, message))
                });
        let Some((session, message)) = forwarded else {
            tracing::debug!("a forwarded answer that is no JSON-RPC message; dropped");
            return;
        };
        if let Err(error) = self
            .manager
            .accept_message(&Arc::from(session.as_str()), message)
            .await
        {
            tracing::debug!(reason = %error, "a forwarded answer for a session no longer held here; dropped");
        }
    }

    /// Opens the stream of session `id` (a `GET`): at most one per session
    /// and [`MAX_STREAMS`] in all.
    pub fn open_stream(&self, id: &str) -> Result<StreamGuard, StreamRefused> {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        if streams.contains(id) {
            return Err(StreamRefused::Open);
        }
        if streams.len() >= MAX_STREAMS {
            return Err(StreamRefused::Full);
        }
        streams.insert(id.to_owned());
        Ok(StreamGuard {
            id: id.to_owned(),
            streams: self.streams.clone(),
        })
    }

    fn over(&self, subject: &Subject) -> bool {
        over(
            &self.owners.lock().unwrap_or_else(|e| e.into_inner()),
            subject,
        )
    }

    /// Forgets the sessions rmcp no longer holds (ended idle, or closed by
    /// `DELETE`); not those bound after the snapshot was taken.
    async fn forget_ended(&self) {
        let taken = Instant::now();
        let open: HashSet<String> = self
            .manager
            .local
            .sessions
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect();
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|id, owned| open.contains(id) || owned.bound >= taken);
    }
}

/// A new replica name: 8 random bytes in hex (a clock's reading if the system
/// gives no random bytes).
fn replica_name() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        bytes = (now.as_nanos() as u64 ^ u64::from(std::process::id())).to_be_bytes();
    }
    hex::encode(bytes)
}

/// Whether `owners` holds [`MAX_SESSIONS`], or [`MAX_SESSIONS_PER_SUBJECT`] of
/// `subject`'s.
fn over(owners: &HashMap<String, Owned>, subject: &Subject) -> bool {
    owners.len() >= MAX_SESSIONS
        || owners
            .values()
            .filter(|owned| owned.subject == subject.id)
            .count()
            >= MAX_SESSIONS_PER_SUBJECT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_is_its_openers_alone() {
        let sessions = Sessions::new(Duration::ZERO, None);
        let alice = Subject::new("alice".to_owned());
        let bob = Subject::new("bob".to_owned());
        assert!(sessions.adopt("s1", &alice).await);
        assert_eq!(sessions.access("s1", &alice).await, Access::Allowed);
        assert_eq!(sessions.access("s1", &bob).await, Access::NotFound);
        assert_eq!(sessions.access("unknown", &bob).await, Access::NotFound);
    }

    #[tokio::test]
    async fn a_subject_holds_a_bounded_number_of_sessions() {
        let sessions = Sessions::new(Duration::ZERO, None);
        let alice = Subject::new("alice".to_owned());
        let bob = Subject::new("bob".to_owned());
        for n in 0..MAX_SESSIONS_PER_SUBJECT {
            assert!(sessions.adopt(&format!("a{n}"), &alice).await);
        }
        // At the limit: a concurrent one is closed, not bound.
        assert!(!sessions.adopt("a-next", &alice).await);
        assert_eq!(sessions.access("a-next", &alice).await, Access::NotFound);
        assert!(sessions.has_room(&bob).await);
        // None of these is open in rmcp's manager: they are forgotten.
        assert!(sessions.has_room(&alice).await);
        assert_eq!(sessions.access("a0", &alice).await, Access::NotFound);
    }

    /// Two replicas sharing a store: a session one opened is served by the
    /// other to its subject alone, and not once its record is gone.
    #[tokio::test]
    async fn a_session_in_the_store_is_served_by_any_replica() {
        let store = Arc::new(Store::new(crate::store::StoreLocation::Memory));
        let a = Sessions::new(Duration::ZERO, Some(store.clone()));
        let b = Sessions::new(Duration::ZERO, Some(store.clone()));
        assert_ne!(a.replica, b.replica);
        let alice = Subject::new("alice".to_owned());
        let bob = Subject::new("bob".to_owned());
        assert!(a.adopt("s1", &alice).await);
        assert_eq!(b.access("s1", &bob).await, Access::NotFound);
        assert_eq!(b.access("s1", &alice).await, Access::Allowed);
        assert_eq!(b.access("s2", &alice).await, Access::NotFound);
        let record = store.session_load("s1").await;
        assert_eq!(
            record.map(|r| r.and_then(|r| r.owner)),
            Ok(Some("alice".to_owned()))
        );
        store.session_delete("s1").await.expect("delete");
        let c = Sessions::new(Duration::ZERO, Some(store));
        assert_eq!(c.access("s1", &alice).await, Access::NotFound);
        // Not shared by other processes: no answer is ever forwarded.
        assert_eq!(
            a.answered_elsewhere(br#"{"jsonrpc":"2.0","id":"x.1","result":{}}"#),
            None
        );
    }

    #[test]
    fn a_session_has_one_stream_open_at_a_time() {
        let sessions = Sessions::new(Duration::ZERO, None);
        let held = sessions.open_stream("s1");
        assert!(held.is_ok());
        assert_eq!(
            sessions.open_stream("s1").map(|_| ()),
            Err(StreamRefused::Open)
        );
        drop(held);
        assert!(sessions.open_stream("s1").is_ok());
        let all: Vec<_> = (0..MAX_STREAMS)
            .map(|n| sessions.open_stream(&format!("x{n}")))
            .collect();
        assert!(all.iter().all(Result::is_ok));
        assert_eq!(
            sessions.open_stream("one-more").map(|_| ()),
            Err(StreamRefused::Full)
        );
    }
}
