//! What the state capabilities give the store and get back, whichever holds
//! the values (the embedded database, `state.rs`; Redis, `redis.rs`).

use std::time::{SystemTime, UNIX_EPOCH};

/// What one subject may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLimits {
    /// Keys (`--max-state-keys`).
    pub max_keys: u64,
    /// Bytes of keys and values together, a value counted as its JSON text
    /// (`--max-state-bytes`).
    pub max_bytes: u64,
    /// Bytes of one value as JSON text (`--max-state-value-bytes`).
    pub max_value_bytes: u64,
}

impl Default for StateLimits {
    fn default() -> Self {
        Self {
            max_keys: 1000,
            max_bytes: 16 << 20,
            max_value_bytes: 1 << 20,
        }
    }
}

/// Which limit a write would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRefused {
    /// The subject's keys.
    Keys,
    /// The subject's bytes.
    Bytes,
}

/// A value as a write gives it to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The value, encoded.
    pub value: Vec<u8>,
    /// What it charges against its subject's bytes: its key's length and the
    /// value's JSON text.
    pub size: u64,
    /// How long it lives, in milliseconds from the write, by the clock of
    /// whatever holds it (this process for the file, Redis for Redis, so that
    /// replicas with skewed clocks agree); `None` until deleted.
    pub ttl_ms: Option<u64>,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// The key had no value (or an expired one).
    Created,
    /// The key's value was replaced.
    Replaced,
    /// Nothing changed: the write would pass a limit.
    Refused(StateRefused),
}

/// Milliseconds since the epoch: expiries outlive the process, so they are
/// wall-clock times.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
