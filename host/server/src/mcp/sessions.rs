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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::authz::Subject;

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

/// The sessions of `--http-sessions`: rmcp's session manager, who owns each
/// session it holds, and which have a stream open.
pub struct Sessions {
    manager: Arc<LocalSessionManager>,
    /// Each session's subject, and when it was bound.
    owners: Mutex<HashMap<String, (String, Instant)>>,
    /// The sessions whose stream is open.
    streams: Arc<Mutex<HashSet<String>>>,
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
}

impl Sessions {
    /// Sessions that end after `idle` without a message (at least
    /// [`MIN_SESSION_IDLE`]).
    pub fn new(idle: Duration) -> Self {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(idle.max(MIN_SESSION_IDLE));
        Self {
            manager: Arc::new(manager),
            owners: Mutex::new(HashMap::new()),
            streams: Arc::default(),
        }
    }

    /// The session manager to serve with.
    pub fn manager(&self) -> Arc<LocalSessionManager> {
        self.manager.clone()
    }

    /// Whether `subject` may use the session `id`. Every session is bound
    /// before its ID reaches the client, so an unbound ID is nobody's.
    pub fn access(&self, id: &str, subject: &Subject) -> Access {
        let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        match owners.get(id) {
            Some((owner, _)) if *owner == subject.id => Access::Allowed,
            Some(_) | None => Access::NotFound,
        }
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
    /// it; or closes it and answers `false` when that would pass
    /// [`MAX_SESSIONS`] or [`MAX_SESSIONS_PER_SUBJECT`] (concurrent
    /// `initialize`s that all found room).
    pub async fn adopt(&self, id: &str, subject: &Subject) -> bool {
        let adopted = {
            let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            let room = !over(&owners, subject);
            if room {
                owners.insert(id.to_owned(), (subject.id.clone(), Instant::now()));
            }
            room
        };
        if !adopted {
            let _ = self.manager.close_session(&Arc::from(id)).await;
        }
        adopted
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
            .sessions
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect();
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|id, (_, bound)| open.contains(id) || *bound >= taken);
    }
}

/// Whether `owners` holds [`MAX_SESSIONS`], or [`MAX_SESSIONS_PER_SUBJECT`] of
/// `subject`'s.
fn over(owners: &HashMap<String, (String, Instant)>, subject: &Subject) -> bool {
    owners.len() >= MAX_SESSIONS
        || owners
            .values()
            .filter(|(owner, _)| *owner == subject.id)
            .count()
            >= MAX_SESSIONS_PER_SUBJECT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_is_its_openers_alone() {
        let sessions = Sessions::new(Duration::ZERO);
        let alice = Subject::new("alice".to_owned());
        let bob = Subject::new("bob".to_owned());
        assert!(sessions.adopt("s1", &alice).await);
        assert_eq!(sessions.access("s1", &alice), Access::Allowed);
        assert_eq!(sessions.access("s1", &bob), Access::NotFound);
        assert_eq!(sessions.access("unknown", &bob), Access::NotFound);
    }

    #[tokio::test]
    async fn a_subject_holds_a_bounded_number_of_sessions() {
        let sessions = Sessions::new(Duration::ZERO);
        let alice = Subject::new("alice".to_owned());
        let bob = Subject::new("bob".to_owned());
        for n in 0..MAX_SESSIONS_PER_SUBJECT {
            assert!(sessions.adopt(&format!("a{n}"), &alice).await);
        }
        // At the limit: a concurrent one is closed, not bound.
        assert!(!sessions.adopt("a-next", &alice).await);
        assert_eq!(sessions.access("a-next", &alice), Access::NotFound);
        assert!(sessions.has_room(&bob).await);
        // None of these is open in rmcp's manager: they are forgotten.
        assert!(sessions.has_room(&alice).await);
        assert_eq!(sessions.access("a0", &alice), Access::NotFound);
    }

    #[test]
    fn a_session_has_one_stream_open_at_a_time() {
        let sessions = Sessions::new(Duration::ZERO);
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
