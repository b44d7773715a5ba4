//! The counts of the quotas on one capability's calls, per subject: one
//! transaction for each call of a capability with such quotas, which checks
//! every one of them and counts the call only if all hold, so that the quotas
//! hold whichever process makes the call. The rules are the same in Redis
//! (`scripts/quota_call.lua`).

use redb::{ReadableDatabase, ReadableTable, TableError};

use super::counted::{CallLimits, CallQuota};
use super::database::{Store, StoreError};
use super::entry::now_ms;
use super::quota::{COUNTS, Counts, used_named};
use super::state::{Until, begin_write, commit};

/// The store's answer to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallCounted {
    /// It may run, and is counted.
    Counted,
    /// `quota` refuses it, for `resets_in_ms` more milliseconds; nothing is
    /// counted.
    Refused { quota: CallQuota, resets_in_ms: u64 },
}

/// The name a call quota's count is kept under among its subject's counts:
/// the quota's name, a space, and the capability's ID. No quota of an
/// execution has a space in its name, so no count is another's.
pub(crate) fn count_name(quota: CallQuota, capability: &str) -> String {
    format!("{} {capability}", quota.name())
}

impl Store {
    /// Counts one call of `capability` by `subject` under `limits`, or says
    /// which quota refuses it.
    ///
    /// # Errors
    ///
    /// The store did not answer, or `until` ended first.
    pub(crate) fn quota_call(
        &self,
        subject: &str,
        capability: &str,
        limits: CallLimits,
        until: &Until,
    ) -> Result<CallCounted, StoreError> {
        self.quota_call_at(subject, capability, limits, until, now_ms())
    }

    /// [`Store::quota_call`] at `now` (ms since the epoch).
    pub(crate) fn quota_call_at(
        &self,
        subject: &str,
        capability: &str,
        limits: CallLimits,
        until: &Until,
        now: u64,
    ) -> Result<CallCounted, StoreError> {
        let database = self.database()?;
        let write = || -> Result<CallCounted, String> {
            let transaction = begin_write(&database, until)?;
            let counted = {
                let mut counts = transaction.open_table(COUNTS).map_err(|e| e.to_string())?;
                count_in(&mut counts, subject, capability, limits, now)?
            };
            commit(transaction, until)?;
            Ok(counted)
        };
        write().map_err(|reason| self.error(reason))
    }
}

impl Store {
    /// Whether a quota would refuse a call of `capability` by `subject` now,
    /// counting nothing: asked before a human is, so that nobody approves a
    /// call that cannot run (`Counted`: none would).
    ///
    /// # Errors
    ///
    /// The store did not answer.
    pub(crate) fn quota_call_peek(
        &self,
        subject: &str,
        capability: &str,
        limits: CallLimits,
    ) -> Result<CallCounted, StoreError> {
        let database = self.database()?;
        let read = || -> Result<CallCounted, String> {
            let transaction = database.begin_read().map_err(|e| e.to_string())?;
            let counts = match transaction.open_table(COUNTS) {
                Ok(counts) => counts,
                Err(TableError::TableDoesNotExist(_)) => return Ok(CallCounted::Counted),
                Err(error) => return Err(error.to_string()),
            };
            let (refused, _) = check(&counts, subject, capability, limits, now_ms())?;
            Ok(refused.unwrap_or(CallCounted::Counted))
        };
        read().map_err(|reason| self.error(reason))
    }
}

/// The call's count, in an open transaction, at `now`.
fn count_in(
    counts: &mut Counts<'_>,
    subject: &str,
    capability: &str,
    limits: CallLimits,
    now: u64,
) -> Result<CallCounted, String> {
    let (refused, counted) = check(counts, subject, capability, limits, now)?;
    if let Some(refused) = refused {
        return Ok(refused);
    }
    for (name, window, used) in counted {
        counts
            .insert((subject, name.as_str()), (window, used))
            .map_err(|e| e.to_string())?;
    }
    Ok(CallCounted::Counted)
}

/// Whether a quota refuses a call at `now` (of those that do, the one that
/// allows more last), and else what each count becomes with it: (count's
/// name, window, used).
#[allow(clippy::type_complexity)]
fn check(
    counts: &impl ReadableTable<(&'static str, &'static str), (u64, u64)>,
    subject: &str,
    capability: &str,
    limits: CallLimits,
    now: u64,
) -> Result<(Option<CallCounted>, Vec<(String, u64, u64)>), String> {
    let mut counted = Vec::with_capacity(CallQuota::ALL.len());
    // Of the quotas that refuse, the one that allows more last: no call runs
    // before then.
    let mut refused: Option<CallCounted> = None;
    for quota in CallQuota::ALL {
        let Some(most) = limits.get(quota) else {
            continue;
        };
        let window = now / quota.window_ms();
        let name = count_name(quota, capability);
        let used = used_named(counts, subject, &name, window)?;
        if used >= most {
            let resets_in_ms = (window + 1) * quota.window_ms() - now;
            if !matches!(refused, Some(CallCounted::Refused { resets_in_ms: before, .. }) if before >= resets_in_ms)
            {
                refused = Some(CallCounted::Refused {
                    quota,
                    resets_in_ms,
                });
            }
        }
        counted.push((name, window, used + 1));
    }
    Ok((refused, counted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counted::{DAY_MS, MINUTE_MS};
    use crate::store::{StoreLocation, Until};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Noon and thirty seconds of a day: no window ends during a test.
    const NOW: u64 = 20_000 * DAY_MS + DAY_MS / 2 + 30_000;

    fn until() -> Until {
        Until {
            deadline: Instant::now() + Duration::from_secs(10),
            cancel: Arc::new(crate::source::Cancel::default()),
        }
    }

    fn call(
        store: &Store,
        subject: &str,
        capability: &str,
        limits: CallLimits,
        now: u64,
    ) -> CallCounted {
        match store.quota_call_at(subject, capability, limits, &until(), now) {
            Ok(counted) => counted,
            Err(error) => panic!("the store failed: {error}"),
        }
    }

    #[test]
    fn a_capabilitys_calls_are_counted_per_subject_and_capability_until_a_quota_refuses() {
        let store = Store::new(StoreLocation::Memory);
        let limits = CallLimits {
            calls_per_minute: Some(2),
            calls_per_day: Some(3),
        };
        assert_eq!(
            call(&store, "alice", "github.create_issue", limits, NOW),
            CallCounted::Counted
        );
        assert_eq!(
            call(&store, "alice", "github.create_issue", limits, NOW),
            CallCounted::Counted
        );
        // The minute's two are spent: refused until the next minute, and
        // nothing counted (the day still has one).
        assert_eq!(
            call(&store, "alice", "github.create_issue", limits, NOW),
            CallCounted::Refused {
                quota: CallQuota::CallsPerMinute,
                resets_in_ms: 30_000
            }
        );
        // Another subject, another capability: counts of their own.
        assert_eq!(
            call(&store, "bob", "github.create_issue", limits, NOW),
            CallCounted::Counted
        );
        assert_eq!(
            call(&store, "alice", "github.list_issues", limits, NOW),
            CallCounted::Counted
        );
        let next_minute = NOW + MINUTE_MS;
        assert_eq!(
            call(&store, "alice", "github.create_issue", limits, next_minute),
            CallCounted::Counted
        );
        // The day's three are spent, though the minute has room.
        assert_eq!(
            call(&store, "alice", "github.create_issue", limits, next_minute),
            CallCounted::Refused {
                quota: CallQuota::CallsPerDay,
                resets_in_ms: DAY_MS / 2 - 30_000 - MINUTE_MS
            }
        );
        // Both spent (the next minute's two, then the day's): the day, which
        // allows more last, is named.
        let limits = CallLimits {
            calls_per_minute: Some(1),
            calls_per_day: Some(1),
        };
        assert_eq!(
            call(&store, "carol", "notes.write", limits, NOW),
            CallCounted::Counted
        );
        assert_eq!(
            call(&store, "carol", "notes.write", limits, NOW),
            CallCounted::Refused {
                quota: CallQuota::CallsPerDay,
                resets_in_ms: DAY_MS / 2 - 30_000
            }
        );
        let limits = CallLimits {
            calls_per_minute: Some(2),
            calls_per_day: Some(3),
        };
        // The next day starts anew.
        assert_eq!(
            call(&store, "alice", "github.create_issue", limits, NOW + DAY_MS),
            CallCounted::Counted
        );
    }

    #[test]
    fn a_peek_says_whether_a_quota_refuses_and_counts_nothing() {
        let store = Store::new(StoreLocation::Memory);
        let limits = CallLimits {
            calls_per_minute: None,
            calls_per_day: Some(1),
        };
        let peek = |capability| match store.quota_call_peek("alice", capability, limits) {
            Ok(CallCounted::Counted) => None,
            Ok(CallCounted::Refused { quota, .. }) => Some(quota),
            Err(error) => panic!("the store failed: {error}"),
        };
        // Nothing counted yet: not even the table exists.
        assert_eq!(peek("notes.write"), None);
        assert_eq!(peek("notes.write"), None);
        assert_eq!(
            store.quota_call("alice", "notes.write", limits, &until()),
            Ok(CallCounted::Counted)
        );
        assert_eq!(peek("notes.write"), Some(CallQuota::CallsPerDay));
        assert_eq!(peek("notes.read"), None);
    }

    #[test]
    fn a_call_count_is_named_apart_from_every_execution_quota() {
        assert_eq!(
            count_name(CallQuota::CallsPerDay, "notes.write"),
            "calls-per-day notes.write"
        );
        for quota in crate::store::Quota::ALL {
            assert!(!quota.name().contains(' '), "{quota}");
        }
    }
}
