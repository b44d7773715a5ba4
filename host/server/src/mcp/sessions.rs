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

use super::replica::{
    REPLICA_DIGITS, ReplicaSessionManager, StoredSessions, random_hex, replica_of,
};
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
    /// The handshakes rmcp just had kept, until [`Sessions::adopt`] takes
    /// them.
    handshakes: Arc<Mutex<HashMap<String, Arc<str>>>>,
    /// The sessions being restored here: one request at a time each.
    restoring: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// A session held here.
struct Owned {
    subject: String,
    bound: Instant,
    refreshed: Instant,
    /// Its `initialize` as kept in the store: written again should the store
    /// lose the record while the session is held here.
    handshake: Option<Arc<str>>,
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
    /// Another subject's session, one never bound, or one its client ended:
    /// answered as an unknown one.
    NotFound,
    /// This subject's session, opened elsewhere, which this replica has no
    /// room to serve ([`TOO_MANY_SESSIONS`]).
    Full,
    /// Not held here, and the store did not answer ([`SESSIONS_UNAVAILABLE`]).
    Unavailable,
}

/// Where a POST in a session goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// Served here.
    Here,
    /// An answer to a question of the replica named, reached through the
    /// store.
    Forward(String),
    /// An answer to a question of another server, which this one cannot
    /// reach (the store is no Redis): [`MISDIRECTED`].
    Misdirected,
}

/// What a client is told when its answer reached a server that cannot hand
/// it to the one that asked.
pub const MISDIRECTED: &str = "Misdirected Request: this answers a question another server asked, which this one cannot reach; route each session to one server, or share a Redis --store\n";

/// The largest answer forwarded to another replica; a larger one is refused
/// (413).
pub const MAX_FORWARDED_BYTES: usize = 256 << 10;

/// How long a forwarded answer is tried again while no replica of its name
/// listens (it may be resubscribing).
const FORWARD_PATIENCE: Duration = Duration::from_secs(6);

/// A restore in progress of one session, which the next request for it
/// waits on; dropped once rmcp answered.
pub struct RestoreGuard {
    id: String,
    lock: Option<tokio::sync::OwnedMutexGuard<()>>,
    restoring: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl Drop for RestoreGuard {
    fn drop(&mut self) {
        drop(self.lock.take());
        let mut restoring = self.restoring.lock().unwrap_or_else(|e| e.into_inner());
        // Forgotten once nobody waits on it (a waiter holds a clone).
        if restoring
            .get(&self.id)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            restoring.remove(&self.id);
        }
    }
}

impl Sessions {
    /// Sessions that end after `idle` without a message (at least
    /// [`MIN_SESSION_IDLE`]), recorded in `store` when given.
    pub fn new(idle: Duration, store: Option<Arc<Store>>) -> Self {
        let idle = idle.max(MIN_SESSION_IDLE);
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(idle);
        let replica: Arc<str> = Arc::from(random_hex(REPLICA_DIGITS / 2));
        Self {
            manager: Arc::new(ReplicaSessionManager::new(local, replica.clone())),
            owners: Mutex::new(HashMap::new()),
            streams: Arc::default(),
            store,
            replica,
            idle,
            handshakes: Arc::default(),
            restoring: Arc::default(),
        }
    }

    /// How long a record lasts past its refresh: the idle time, and the
    /// quarter of it that may pass before the next refresh.
    fn ttl(&self) -> Duration {
        self.idle + self.idle / 4
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
                ttl: self.ttl(),
                handshakes: self.handshakes.clone(),
            }) as Arc<dyn SessionStore>
        })
    }

    /// Whether `subject` may use the session `id`; with `hold`, it is to be
    /// served here (held from then on). Every session is bound before its ID
    /// reaches the client, so an unbound ID is nobody's. With a store, the
    /// record decides: another subject's, or one its client ended, is not
    /// found (a copy held here ends); one not held here is served when it is
    /// the subject's.
    pub async fn access(&self, id: &str, subject: &Subject, hold: bool) -> Access {
        let local = {
            let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            owners.get(id).map(|owned| {
                (
                    owned.subject == subject.id,
                    owned.refreshed.elapsed() >= self.idle / 4,
                    owned.handshake.clone(),
                )
            })
        };
        let Some(store) = &self.store else {
            return match local {
                Some((true, _, _)) => Access::Allowed,
                Some((false, _, _)) | None => Access::NotFound,
            };
        };
        if matches!(local, Some((false, _, _))) {
            return Access::NotFound;
        }
        let record = match store.session_load(id).await {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(reason = %error, "cannot look a session up in the store");
                return match local {
                    // Held here: served on while the store is away.
                    Some(_) => Access::Allowed,
                    None => Access::Unavailable,
                };
            }
        };
        match (record, local) {
            (Some(record), _) if record.ended => {
                self.end_here(id).await;
                Access::NotFound
            }
            (Some(record), local) if record.owner.as_deref() == Some(subject.id.as_str()) => {
                match local {
                    Some((_, due, _)) => {
                        if due {
                            self.refresh(id).await;
                        }
                        Access::Allowed
                    }
                    None if hold => self.hold(id, subject, record.initialize).await,
                    None => Access::Allowed,
                }
            }
            (Some(record), Some((true, _, handshake))) if record.owner.is_none() => {
                // Its owner's write failed when it opened: written again.
                self.write_record(id, &subject.id, handshake.as_deref())
                    .await;
                Access::Allowed
            }
            (Some(_), _) => Access::NotFound,
            (None, Some((true, _, handshake))) if self.held_by_rmcp(id).await => {
                // The store lost it (a Redis restarted empty): written again.
                self.write_record(id, &subject.id, handshake.as_deref())
                    .await;
                Access::Allowed
            }
            (None, _) => {
                self.end_here(id).await;
                Access::NotFound
            }
        }
    }

    /// Marks session `id`'s record refreshed and makes it last.
    async fn refresh(&self, id: &str) {
        if let Some(owned) = self
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(id)
        {
            owned.refreshed = Instant::now();
        }
        if let Some(store) = &self.store
            && let Err(error) = store.session_refresh(id, self.ttl()).await
        {
            tracing::warn!(reason = %error, "cannot refresh a session in the store: another replica may not find it");
        }
    }

    /// Holds session `id` of `subject`, opened elsewhere, here: unless
    /// [`MAX_SESSIONS`] are held (the ended ones forgotten first). A subject's
    /// own limit counts the sessions it opened here, not those it brings.
    async fn hold(&self, id: &str, subject: &Subject, handshake: Option<String>) -> Access {
        let handshake: Option<Arc<str>> = handshake.map(Arc::from);
        for attempt in 0..2 {
            {
                let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
                if owners.contains_key(id) {
                    return Access::Allowed;
                }
                if owners.len() < MAX_SESSIONS {
                    let now = Instant::now();
                    owners.insert(
                        id.to_owned(),
                        Owned {
                            subject: subject.id.clone(),
                            bound: now,
                            refreshed: now,
                            handshake: handshake.clone(),
                        },
                    );
                    return Access::Allowed;
                }
            }
            if attempt == 0 {
                self.forget_ended().await;
            }
        }
        Access::Full
    }

    /// Ends this replica's copy of session `id`, if it holds one.
    async fn end_here(&self, id: &str) {
        let held = self
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
            .is_some();
        if held {
            let _ = self.manager.close_session(&Arc::from(id)).await;
        }
    }

    /// Whether rmcp holds session `id` in this process.
    async fn held_by_rmcp(&self, id: &str) -> bool {
        self.manager.local.sessions.read().await.contains_key(id)
    }

    /// Writes session `id`'s record: its owner, and its handshake when known.
    async fn write_record(&self, id: &str, owner: &str, handshake: Option<&str>) {
        let Some(store) = &self.store else {
            return;
        };
        let mut written = store
            .session_write(id, SessionField::Owner, owner, self.ttl())
            .await;
        if let (Ok(()), Some(handshake)) = (&written, handshake) {
            written = store
                .session_write(id, SessionField::Initialize, handshake, self.ttl())
                .await;
        }
        if let Err(error) = written {
            tracing::warn!(reason = %error, "cannot record a session in the store: only this replica serves it");
        }
    }

    /// Waits for any restore of session `id` in progress here, or starts
    /// one when rmcp does not hold the session: one request restores it, the
    /// next waits until rmcp answered the first (rmcp holds a session before
    /// its handshake's replay ends).
    pub async fn one_restore_at_a_time(&self, id: &str) -> Option<RestoreGuard> {
        self.store.as_ref()?;
        let held = self.held_by_rmcp(id).await;
        let lock = {
            let mut restoring = self.restoring.lock().unwrap_or_else(|e| e.into_inner());
            match restoring.get(id) {
                Some(lock) => lock.clone(),
                None if held => return None,
                None => restoring.entry(id.to_owned()).or_default().clone(),
            }
        };
        // Made before the wait, so that a waiter whose request goes away
        // still lets the entry be forgotten.
        let mut guard = RestoreGuard {
            id: id.to_owned(),
            lock: None,
            restoring: self.restoring.clone(),
        };
        guard.lock = Some(lock.lock_owned().await);
        Some(guard)
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
        let handshake = self
            .handshakes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
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
                        handshake,
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
                .session_write(id, SessionField::Owner, &subject.id, self.ttl())
                .await
        {
            tracing::warn!(reason = %error, "cannot record a session in the store: only this replica serves it");
        }
        true
    }

    /// Where the POST `body` in a session goes: elsewhere when it is a
    /// JSON-RPC answer (or error) to a request another replica sent.
    pub fn route(&self, body: &[u8]) -> Route {
        let Some(replica) = answered_to(body) else {
            return Route::Here;
        };
        if *replica == *self.replica {
            return Route::Here;
        }
        match &self.store {
            Some(store) if store.shared_by_replicas() => Route::Forward(replica),
            Some(_) | None => Route::Misdirected,
        }
    }

    /// Hands `body`, an answer in session `id`, to `replica`, which asked:
    /// whether a replica of that name heard it (tried again for
    /// [`FORWARD_PATIENCE`] while none listens, as one may be resubscribing).
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
        })
        .to_string();
        let channel = format!("{ANSWERS_CHANNEL}{replica}");
        let patience = tokio::time::Instant::now() + FORWARD_PATIENCE;
        loop {
            if store.publish(&channel, &payload).await? > 0 {
                tracing::info!(replica = %replica, "an answer forwarded to the replica that asked");
                return Ok(true);
            }
            if tokio::time::Instant::now() >= patience {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
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

/// The replica a POST `body` answers (a JSON-RPC response or error whose ID
/// names one), if any.
fn answered_to(body: &[u8]) -> Option<String> {
    let message: serde_json::Value = serde_json::from_slice(body).ok()?;
    let object = message.as_object()?;
    if object.contains_key("method")
        || !(object.contains_key("result") || object.contains_key("error"))
    {
        return None;
    }
    replica_of(object.get("id")?.as_str()?).map(str::to_owned)
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
        assert_eq!(sessions.access("s1", &alice, true).await, Access::Allowed);
        assert_eq!(sessions.access("s1", &bob, true).await, Access::NotFound);
        assert_eq!(
            sessions.access("unknown", &bob, true).await,
            Access::NotFound
        );
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
        assert_eq!(
            sessions.access("a-next", &alice, true).await,
            Access::NotFound
        );
        assert!(sessions.has_room(&bob).await);
        // None of these is open in rmcp's manager: they are forgotten.
        assert!(sessions.has_room(&alice).await);
        assert_eq!(sessions.access("a0", &alice, true).await, Access::NotFound);
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
        assert_eq!(b.access("s1", &bob, true).await, Access::NotFound);
        assert_eq!(b.access("s1", &alice, true).await, Access::Allowed);
        assert_eq!(b.access("s2", &alice, true).await, Access::NotFound);
        let record = store.session_load("s1").await;
        assert_eq!(
            record.map(|r| r.and_then(|r| r.owner)),
            Ok(Some("alice".to_owned()))
        );
        store.session_delete("s1").await.expect("delete");
        let c = Sessions::new(Duration::ZERO, Some(store.clone()));
        assert_eq!(c.access("s1", &alice, true).await, Access::NotFound);
        // Ended by its client through B: A's copy ends too.
        assert!(a.adopt("s3", &alice).await);
        assert_eq!(b.access("s3", &alice, true).await, Access::Allowed);
        store
            .session_write("s3", SessionField::Ended, "1", Duration::from_secs(60))
            .await
            .expect("end");
        assert_eq!(a.access("s3", &alice, true).await, Access::NotFound);
        assert_eq!(
            a.owners.lock().map(|o| o.contains_key("s3")).ok(),
            Some(false)
        );
        // Not shared by other processes: an answer to another server's
        // question cannot be forwarded; one to this server's is served here.
        let answer = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":"{id}","result":{{}}}}"#);
        let elsewhere = format!("{}.01234567.1", b.replica);
        assert_eq!(a.route(answer(&elsewhere).as_bytes()), Route::Misdirected);
        let here = format!("{}.01234567.1", a.replica);
        assert_eq!(a.route(answer(&here).as_bytes()), Route::Here);
        assert_eq!(a.route(answer("x.1").as_bytes()), Route::Here);
        assert_eq!(
            a.route(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Route::Here
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
