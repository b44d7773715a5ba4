//! The Lua scripts of the task store, each in a file of its own beside this
//! one (read at build time): every step that reads and then writes is one
//! script, so that two replicas never interleave inside it. Each script's keys
//! and arguments are documented here, where it is named.

/// The functions the scripts share. `ended` tells a task's state from its
/// hash (`gone`, `ended`, or `working`; a working one, or one waiting for
/// input, older than the stale limit and what its budget grew by counts as
/// ended); `forget` drops a task and its size; `make_room`
/// drops the oldest ended (or gone) tasks, a hundred IDs read at a time, until
/// `fits()` holds or none is left, never `keep`.
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// Creates a working task, unless `--max-tasks` are kept and none of them has
/// ended. KEYS: order, sizes, bytes, task. ARGV: ID, subject, now, max tasks,
/// expiry in ms, task key prefix, stale limit in ms. Returns 1 when created, 0
/// when full.
const CREATE: &str = include_str!("scripts/create.lua");

/// Ends a working task with a status and its JSON text, keeps it for the TTL
/// and counts its size, dropping the oldest ended tasks past the byte budget.
/// A task that is gone (Redis lost it, or restarted empty) is written again
/// whole, so that its result is not lost; a cancelled one stays cancelled.
/// KEYS: task, order, sizes, bytes. ARGV: status, payload, now, TTL in ms,
/// subject, created, ID, task key prefix, stale limit in ms, byte budget.
/// Returns 1 when written, 0 when it had ended.
const FINISH: &str = include_str!("scripts/finish.lua");

/// Cancels a task of a subject (of any subject when ARGV[2] is `1`): a working
/// one (or one waiting for input) is marked cancelled, kept for the TTL and its ID published for the
/// replica that runs it. KEYS: task. ARGV: subject, any subject, now, TTL in
/// ms, channel, ID. Returns 1 when the task exists (cancelled now or ended
/// before), 0 when not found.
const CANCEL: &str = include_str!("scripts/cancel.lua");

/// Marks a running task as waiting for input (an ended or gone one is left
/// as it is), its budget grown and its expiry moved. KEYS: task. ARGV: the
/// request key, the requests, now, what its budget grew by in all (ms), its
/// new expiry (ms since the epoch). Returns 1 when marked, 0 when it had
/// ended.
const ASK: &str = include_str!("scripts/ask.lua");

/// Delivers a subject's answer to its task: the response for the key it waits
/// on (if one is given) is stored for the running replica, the task works
/// again and its ID is published; other responses are ignored. KEYS: task.
/// ARGV: subject, now, channel, ID, then key and response pairs. Returns 1
/// when the task exists, 0 when not found.
const ANSWER: &str = include_str!("scripts/answer.lua");

/// The running replica takes the answer to the key its task waits on: read
/// and deleted. KEYS: task. ARGV: the key, the most bytes of an answer read
/// (a larger one, planted, is left unread). Returns the response, or nil.
const TAKE: &str = include_str!("scripts/take.lua");

/// The task no longer waits on the key (the asker gave up, or took the
/// answer): it works again, an answer to that key left unread is dropped, and
/// a task still running gets its settled budget growth and expiry (when
/// given). KEYS: task. ARGV: the key, now, what its budget grew by in all
/// (ms, or empty), its expiry (ms since the epoch, or empty).
const RESUME: &str = include_str!("scripts/resume.lua");

/// Reads fields of a hash, none larger than its bound, so that a value planted
/// in the store (by whoever else can write it) is never read whole. KEYS: the
/// hash. ARGV: the most bytes of a small field, of `payload`, of `input` and
/// `answer`; then the fields. Returns `ok` and the values (nil for a missing
/// one), or `oversized` and the first field over its bound.
pub(super) const READ: &str = include_str!("scripts/read.lua");

/// The most bytes of a task's small field (its subject, status, times and
/// keys) read from the store: a server writes a few dozen.
pub(super) const MAX_FIELD_BYTES: usize = 4096;

/// The most bytes of a task's `input` (its questions) or `answer` read from
/// the store: a server writes at most [`MAX_RESPONSES`](super::super::task::MAX_RESPONSES) questions of a few
/// kilobytes, and answers reduced to their action and two fields.
pub(super) const MAX_INPUT_BYTES: usize = 1024 * 1024;

/// The scripts, hashed once.
pub(super) struct Scripts {
    pub(super) read: redis::Script,
    pub(super) create: redis::Script,
    pub(super) finish: redis::Script,
    pub(super) cancel: redis::Script,
    pub(super) ask: redis::Script,
    pub(super) answer: redis::Script,
    pub(super) take: redis::Script,
    pub(super) resume: redis::Script,
}

pub(super) fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
        read: redis::Script::new(READ),
        create: redis::Script::new(&format!("{PRELUDE}{CREATE}")),
        finish: redis::Script::new(&format!("{PRELUDE}{FINISH}")),
        cancel: redis::Script::new(CANCEL),
        ask: redis::Script::new(ASK),
        answer: redis::Script::new(ANSWER),
        take: redis::Script::new(TAKE),
        resume: redis::Script::new(RESUME),
    });
    &SCRIPTS
}
