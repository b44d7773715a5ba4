//! The names the store uses in Redis: keys and pub/sub channels.

/// The prefix of a task's hash key; the task's ID follows.
pub(super) const TASK_KEY: &str = "codemode:task:";
/// The sorted set of task IDs by creation time.
pub(super) const ORDER_KEY: &str = "codemode:tasks";
/// The hash of each ended task's result size, by ID.
pub(super) const SIZES_KEY: &str = "codemode:tasks:sizes";
/// The sum of the sizes.
pub(super) const BYTES_KEY: &str = "codemode:tasks:bytes";
/// The prefix of a claimed single-use token's key.
pub(super) const CLAIM_KEY: &str = "codemode:claim:";
/// The pub/sub channel on which cancelled tasks' IDs are published.
pub const CANCEL_CHANNEL: &str = "codemode:tasks:cancel";
/// The pub/sub channel on which the IDs of tasks whose input came are
/// published.
pub const ANSWER_CHANNEL: &str = "codemode:tasks:answer";
