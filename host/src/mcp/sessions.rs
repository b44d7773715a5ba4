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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
/// What a client is told when it may open no more sessions.
pub const TOO_MANY_SESSIONS: &str =
    "Service Unavailable: too many MCP sessions open; close one (DELETE) or wait for one to end\n";

/// The sessions of `--http-sessions`: rmcp's session manager, and who owns
/// each session it holds.
pub struct Sessions {
    manager: Arc<LocalSessionManager>,
    owners: Mutex<HashMap<String, String>>,
}

/// Whether a request may use the session it names.
#[derive(Debug, PartialEq, Eq)]
pub enum Access {
    /// No session named, one this subject owns, or one we never bound (rmcp
    /// answers for an unknown ID).
    Allowed,
    /// Another subject's session: answered as an unknown one.
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
        }
    }

    /// The session manager to serve with.
    pub fn manager(&self) -> Arc<LocalSessionManager> {
        self.manager.clone()
    }

    /// Whether `subject` may use the session `id`.
    pub fn access(&self, id: &str, subject: &Subject) -> Access {
        let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        match owners.get(id) {
            Some(owner) if *owner != subject.id => Access::NotFound,
            Some(_) | None => Access::Allowed,
        }
    }

    /// Binds the session `id`, just opened by `subject`'s `initialize`, to
    /// it; or closes it and answers `false` when that would pass
    /// [`MAX_SESSIONS`] or [`MAX_SESSIONS_PER_SUBJECT`] (after forgetting the
    /// sessions that ended).
    pub async fn adopt(&self, id: &str, subject: &Subject) -> bool {
        let over = |owners: &HashMap<String, String>| {
            owners.len() >= MAX_SESSIONS
                || owners.values().filter(|o| **o == subject.id).count() >= MAX_SESSIONS_PER_SUBJECT
        };
        let full = over(&self.owners.lock().unwrap_or_else(|e| e.into_inner()));
        if full {
            // Sessions end on their own (idle, DELETE): forget those first.
            let open: std::collections::HashSet<String> = self
                .manager
                .sessions
                .read()
                .await
                .keys()
                .map(|id| id.to_string())
                .collect();
            let adopted = {
                let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
                owners.retain(|id, _| open.contains(id));
                let room = !over(&owners);
                if room {
                    owners.insert(id.to_owned(), subject.id.clone());
                }
                room
            };
            if !adopted {
                let _ = self.manager.close_session(&Arc::from(id)).await;
            }
            return adopted;
        }
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_owned(), subject.id.clone());
        true
    }
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
        assert_eq!(sessions.access("unknown", &bob), Access::Allowed);
    }

    #[tokio::test]
    async fn a_subject_holds_a_bounded_number_of_sessions() {
        let sessions = Sessions::new(Duration::ZERO);
        let alice = Subject::new("alice".to_owned());
        let bob = Subject::new("bob".to_owned());
        // None of these IDs is open in the manager, so each time the cap is
        // reached they are forgotten; a full map of open ones is refused.
        for n in 0..MAX_SESSIONS_PER_SUBJECT {
            assert!(sessions.adopt(&format!("a{n}"), &alice).await);
        }
        assert!(sessions.adopt("a-next", &alice).await);
        assert_eq!(sessions.access("a0", &bob), Access::Allowed);
        assert_eq!(sessions.access("a-next", &bob), Access::NotFound);
    }
}
