//! Times as the store keeps them: milliseconds since the Unix epoch.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::super::task::TaskLimits;

/// How long past its time budget a task still working is taken for lost.
pub const STALE_AFTER: Duration = Duration::from_secs(30);

/// Milliseconds since the epoch, now.
pub(super) fn now_ms() -> u64 {
    millis_since_epoch(SystemTime::now())
}

fn millis_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `duration` in whole milliseconds.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The time `ms` milliseconds after the epoch.
pub(super) fn time_of(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The limit past which a working task is taken for lost, in milliseconds.
pub(super) fn stale_ms(limits: TaskLimits) -> u64 {
    millis(limits.max_task_time + STALE_AFTER)
}
