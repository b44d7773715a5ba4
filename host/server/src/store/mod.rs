//! What lasts beyond one execution: the store (`--store`).
//!
//! An embedded database (redb) in a file, which survives a restart (a commit is
//! on disk when it returns) and which every server process of the machine naming
//! the same file shares (redb's multi-writer mode: any number of processes, one
//! write transaction at a time among them), or the same database in memory
//! (`--store memory`, and the tests). It is opened at its first use, so that a
//! server whose agents never keep anything needs no writable folder; a failed
//! open is tried again at the next use.
//!
//! It keeps the values of the state capabilities, per subject (`state.rs`),
//! the quotas' counts (`quota.rs`, and `call_quota.rs` for the quotas on one
//! capability's calls), and what each HTTP session needs to be
//! served by any replica (`sessions.rs`, with the replicas' messages of
//! `channel.rs`).

mod call_quota;
mod channel;
mod counted;
mod database;
mod entry;
mod expiry;
mod quota;
#[cfg(feature = "redis")]
mod quota_redis;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redis_url;
mod session_record;
mod sessions;
mod state;
mod tasks;

pub(crate) use call_quota::CallCounted;
pub(crate) use counted::DAY_MS;
pub use counted::{CallLimits, CallQuota, Quota, QuotaLimits};
pub use database::{DEFAULT_STORE_FILE, MEMORY_STORE, Store, StoreError, StoreLocation};
pub(crate) use entry::{Entry, Put, now_ms};
pub use entry::{StateLimits, StateRefused};
pub(crate) use quota::{Admit, Admitted, Release};
#[cfg(feature = "redis")]
pub(crate) use redis::RedisState;
#[cfg(feature = "redis")]
pub use redis_url::{ConnectError, check_url as check_redis_url, redacted};
pub use session_record::{MAX_SESSION_ID_BYTES, SessionField, SessionRecord};
pub(crate) use state::Until;
pub use tasks::{Runner, TaskRecord, TaskStatus};
