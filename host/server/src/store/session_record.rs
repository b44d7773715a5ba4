//! What the store gives and takes of an HTTP session, whichever holds it (the
//! embedded database, `sessions.rs`; Redis, `redis.rs`).

use std::time::Duration;

/// The longest session ID kept: rmcp's are UUIDs (36 bytes); a longer one is
/// nobody's session, and never reaches the store.
pub const MAX_SESSION_ID_BYTES: usize = 128;

/// What the store knows of one session.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionRecord {
    /// The ID of the subject whose `initialize` opened it, once bound.
    pub owner: Option<String>,
    /// The client's `initialize` parameters as JSON, once the handshake ended.
    pub initialize: Option<String>,
    /// Whether its client ended it (`DELETE`): nobody's any more.
    pub ended: bool,
}

/// Which part of a session record a write sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionField {
    /// [`SessionRecord::owner`].
    Owner,
    /// [`SessionRecord::initialize`].
    Initialize,
    /// [`SessionRecord::ended`] (any value sets it).
    Ended,
}

impl SessionField {
    /// Its name in a Redis hash.
    #[cfg(feature = "redis")]
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Initialize => "initialize",
            Self::Ended => "ended",
        }
    }
}

/// `duration` in whole milliseconds (at least 1).
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}
