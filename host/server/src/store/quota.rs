//! The quotas' counts in the store: per subject, each counted quota's window
//! and what was used in it, and the leases of its running executions, changed
//! in one transaction per admission and one per end, so that the quotas hold
//! whichever process runs the execution.
//!
//! The rules are the same in Redis (`scripts/quota_begin.lua`,
//! `scripts/quota_end.lua`); the tests below and those of `redis.rs` check
//! both against one table of cases.

use redb::{ReadableTable, Table, TableDefinition};

use super::counted::{Quota, QuotaLimits};
use super::database::{Store, StoreError};
use super::entry::now_ms;
use super::state::{Until, begin_write, commit};

/// What each subject used: (subject, quota name) → (window, used in it). The
/// window is the minute or the day since the epoch.
const COUNTS: TableDefinition<(&str, &str), (u64, u64)> = TableDefinition::new("quota.counts");

/// The running executions' leases: (subject, lease) → when it ends, in
/// milliseconds since the epoch.
const LEASES: TableDefinition<(&str, u64), u64> = TableDefinition::new("quota.leases");

/// Milliseconds in a minute, the window of `executions-per-minute`.
pub(crate) const MINUTE_MS: u64 = 60_000;

/// Milliseconds in a day, the window of the daily quotas (UTC days).
pub(crate) const DAY_MS: u64 = 86_400_000;

/// What an execution asks to be admitted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admit {
    /// Its subject's quotas.
    pub limits: QuotaLimits,
    /// Its lease among the running executions (a random number).
    pub lease: u64,
    /// How long its lease lasts: its time budget, and a margin.
    pub lease_ms: u64,
    /// Native calls its budget allows.
    pub calls: u64,
    /// Fuel its budget allows.
    pub fuel: u64,
}

/// The store's answer to an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// It may run, with these many native calls and this much fuel (less than
    /// asked when the day has less left); `day` is the window they were
    /// reserved in, for giving back what is not spent.
    Granted { calls: u64, fuel: u64, day: u64 },
    /// `quota` refuses it, for `resets_in_ms` more milliseconds.
    Refused { quota: Quota, resets_in_ms: u64 },
}

/// What an execution that ends gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Release {
    /// Its lease.
    pub lease: u64,
    /// The day its reservation was made in.
    pub day: u64,
    /// Native calls reserved and not made.
    pub calls: u64,
    /// Fuel reserved and not burned.
    pub fuel: u64,
}

impl Store {
    /// Admits one execution of `subject` (see [`Admit`]), or says which quota
    /// refuses it; nothing is counted when one does.
    ///
    /// # Errors
    ///
    /// The store did not answer, or `until` ended first.
    pub(crate) fn quota_admit(
        &self,
        subject: &str,
        admit: &Admit,
        until: &Until,
    ) -> Result<Admitted, StoreError> {
        let database = self.database()?;
        let write = || -> Result<Admitted, String> {
            let transaction = begin_write(&database, until)?;
            let admitted = {
                let mut counts = transaction.open_table(COUNTS).map_err(|e| e.to_string())?;
                let mut leases = transaction.open_table(LEASES).map_err(|e| e.to_string())?;
                admit_in(&mut counts, &mut leases, subject, admit, now_ms())?
            };
            commit(transaction, until)?;
            Ok(admitted)
        };
        write().map_err(|reason| self.error(reason))
    }

    /// Ends one execution of `subject`: its lease goes, and what it did not
    /// spend of its reservation is given back (unless the day changed).
    ///
    /// # Errors
    ///
    /// The store did not answer, or `until` ended first.
    pub(crate) fn quota_release(
        &self,
        subject: &str,
        release: &Release,
        until: &Until,
    ) -> Result<(), StoreError> {
        let database = self.database()?;
        let write = || -> Result<(), String> {
            let transaction = begin_write(&database, until)?;
            {
                let mut counts = transaction.open_table(COUNTS).map_err(|e| e.to_string())?;
                let mut leases = transaction.open_table(LEASES).map_err(|e| e.to_string())?;
                leases
                    .remove((subject, release.lease))
                    .map_err(|e| e.to_string())?;
                give_back(
                    &mut counts,
                    subject,
                    Quota::NativeCallsPerDay,
                    release.day,
                    release.calls,
                )?;
                give_back(
                    &mut counts,
                    subject,
                    Quota::FuelPerDay,
                    release.day,
                    release.fuel,
                )?;
            }
            commit(transaction, until)?;
            Ok(())
        };
        write().map_err(|reason| self.error(reason))
    }
}

type Counts<'t> = Table<'t, (&'static str, &'static str), (u64, u64)>;
type Leases<'t> = Table<'t, (&'static str, u64), u64>;

/// The admission, in an open transaction, at `now`.
fn admit_in(
    counts: &mut Counts<'_>,
    leases: &mut Leases<'_>,
    subject: &str,
    admit: &Admit,
    now: u64,
) -> Result<Admitted, String> {
    let limits = admit.limits;
    if let Some(most) = limits.concurrent_executions {
        let mut ended = Vec::new();
        let mut running = Vec::new();
        for item in leases
            .range((subject, 0)..=(subject, u64::MAX))
            .map_err(|e| e.to_string())?
        {
            let (lease, ends) = item.map_err(|e| e.to_string())?;
            match ends.value() {
                ends if ends <= now => ended.push(lease.value().1),
                ends => running.push(ends),
            }
        }
        for lease in ended {
            leases.remove((subject, lease)).map_err(|e| e.to_string())?;
        }
        if running.len() as u64 >= most {
            let first = running.iter().min().copied().unwrap_or(now);
            return Ok(Admitted::Refused {
                quota: Quota::ConcurrentExecutions,
                resets_in_ms: first.saturating_sub(now),
            });
        }
    }
    let minute = now / MINUTE_MS;
    let day = now / DAY_MS;
    let started = used(counts, subject, Quota::ExecutionsPerMinute, minute)?;
    if limits
        .executions_per_minute
        .is_some_and(|most| started >= most)
    {
        return Ok(Admitted::Refused {
            quota: Quota::ExecutionsPerMinute,
            resets_in_ms: (minute + 1) * MINUTE_MS - now,
        });
    }
    let reserve = |quota: Quota, wanted: u64| -> Result<Result<(u64, u64), Admitted>, String> {
        let spent = used(counts, subject, quota, day)?;
        Ok(match limits.get(quota) {
            None => Ok((wanted, spent)),
            Some(most) if spent >= most => Err(Admitted::Refused {
                quota,
                resets_in_ms: (day + 1) * DAY_MS - now,
            }),
            Some(most) => Ok((wanted.min(most - spent), spent)),
        })
    };
    let (calls, calls_spent) = match reserve(Quota::NativeCallsPerDay, admit.calls)? {
        Ok(granted) => granted,
        Err(refused) => return Ok(refused),
    };
    let (fuel, fuel_spent) = match reserve(Quota::FuelPerDay, admit.fuel)? {
        Ok(granted) => granted,
        Err(refused) => return Ok(refused),
    };
    if limits.concurrent_executions.is_some() {
        leases
            .insert((subject, admit.lease), now.saturating_add(admit.lease_ms))
            .map_err(|e| e.to_string())?;
    }
    let mut count = |quota: Quota, window: u64, used: u64| -> Result<(), String> {
        if limits.get(quota).is_some() {
            counts
                .insert((subject, quota.name()), (window, used))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    count(Quota::ExecutionsPerMinute, minute, started + 1)?;
    count(Quota::NativeCallsPerDay, day, calls_spent + calls)?;
    count(Quota::FuelPerDay, day, fuel_spent + fuel)?;
    Ok(Admitted::Granted { calls, fuel, day })
}

/// What `subject` used of `quota` in `window` (nothing when its count is of
/// another window).
fn used(counts: &Counts<'_>, subject: &str, quota: Quota, window: u64) -> Result<u64, String> {
    Ok(counts
        .get((subject, quota.name()))
        .map_err(|e| e.to_string())?
        .map(|count| count.value())
        .filter(|(counted, _)| *counted == window)
        .map_or(0, |(_, used)| used))
}

/// Gives `amount` of `quota` back to `subject`, if its count is still of `day`.
fn give_back(
    counts: &mut Counts<'_>,
    subject: &str,
    quota: Quota,
    day: u64,
    amount: u64,
) -> Result<(), String> {
    if amount == 0 {
        return Ok(());
    }
    let spent = used(counts, subject, quota, day)?;
    if spent == 0 {
        return Ok(());
    }
    counts
        .insert((subject, quota.name()), (day, spent.saturating_sub(amount)))
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::StoreLocation;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    pub(crate) fn until() -> Until {
        Until {
            deadline: Instant::now() + Duration::from_secs(10),
            cancel: Arc::new(crate::source::Cancel::default()),
        }
    }

    pub(crate) fn admit(limits: QuotaLimits, lease: u64) -> Admit {
        Admit {
            limits,
            lease,
            lease_ms: 60_000,
            calls: 100,
            fuel: 1_000,
        }
    }

    #[test]
    fn the_last_execution_of_a_minute_is_admitted_and_the_next_refused() -> anyhow::Result<()> {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            executions_per_minute: Some(2),
            ..QuotaLimits::default()
        };
        let mut refused = None;
        for lease in 0..3 {
            match store.quota_admit("alice", &admit(limits, lease), &until())? {
                Admitted::Granted { calls, fuel, .. } => {
                    assert_eq!((calls, fuel), (100, 1_000));
                    assert!(lease < 2, "the third was admitted");
                }
                Admitted::Refused {
                    quota,
                    resets_in_ms,
                } => {
                    assert_eq!(quota, Quota::ExecutionsPerMinute);
                    assert!(resets_in_ms <= MINUTE_MS);
                    refused = Some(lease);
                }
            }
        }
        assert_eq!(refused, Some(2));
        // Another subject's count is its own.
        assert!(matches!(
            store.quota_admit("bob", &admit(limits, 9), &until())?,
            Admitted::Granted { .. }
        ));
        Ok(())
    }

    #[test]
    fn a_day_reserves_what_is_left_and_takes_back_what_is_not_spent() -> anyhow::Result<()> {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            native_calls_per_day: Some(150),
            fuel_per_day: Some(1_500),
            ..QuotaLimits::default()
        };
        let Admitted::Granted { calls, fuel, day } =
            store.quota_admit("alice", &admit(limits, 1), &until())?
        else {
            anyhow::bail!("the first was refused");
        };
        assert_eq!((calls, fuel), (100, 1_000));
        // What is left of the day, not the budget.
        let Admitted::Granted { calls, fuel, .. } =
            store.quota_admit("alice", &admit(limits, 2), &until())?
        else {
            anyhow::bail!("the second was refused");
        };
        assert_eq!((calls, fuel), (50, 500));
        assert!(matches!(
            store.quota_admit("alice", &admit(limits, 3), &until())?,
            Admitted::Refused {
                quota: Quota::NativeCallsPerDay,
                ..
            }
        ));
        // The first spent 10 calls and 100 fuel: the rest comes back.
        store.quota_release(
            "alice",
            &Release {
                lease: 1,
                day,
                calls: 90,
                fuel: 900,
            },
            &until(),
        )?;
        let Admitted::Granted { calls, fuel, .. } =
            store.quota_admit("alice", &admit(limits, 4), &until())?
        else {
            anyhow::bail!("the fourth was refused");
        };
        assert_eq!((calls, fuel), (90, 900));
        Ok(())
    }

    #[test]
    fn running_executions_hold_their_leases_until_they_end_or_expire() -> anyhow::Result<()> {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            concurrent_executions: Some(1),
            ..QuotaLimits::default()
        };
        let Admitted::Granted { day, .. } =
            store.quota_admit("alice", &admit(limits, 1), &until())?
        else {
            anyhow::bail!("the first was refused");
        };
        match store.quota_admit("alice", &admit(limits, 2), &until())? {
            Admitted::Refused {
                quota,
                resets_in_ms,
            } => {
                assert_eq!(quota, Quota::ConcurrentExecutions);
                assert!(resets_in_ms <= 60_000 && resets_in_ms > 50_000);
            }
            granted => anyhow::bail!("a second ran at once: {granted:?}"),
        }
        let release = Release {
            lease: 1,
            day,
            calls: 0,
            fuel: 0,
        };
        store.quota_release("alice", &release, &until())?;
        assert!(matches!(
            store.quota_admit("alice", &admit(limits, 2), &until())?,
            Admitted::Granted { .. }
        ));
        // A lease whose process died ends at its deadline.
        let short = Admit {
            lease_ms: 0,
            ..admit(limits, 3)
        };
        store.quota_release(
            "alice",
            &Release {
                lease: 2,
                ..release
            },
            &until(),
        )?;
        assert!(matches!(
            store.quota_admit("alice", &short, &until())?,
            Admitted::Granted { .. }
        ));
        assert!(matches!(
            store.quota_admit("alice", &admit(limits, 4), &until())?,
            Admitted::Granted { .. }
        ));
        Ok(())
    }

    #[test]
    fn a_refusal_counts_nothing() -> anyhow::Result<()> {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            executions_per_minute: Some(5),
            fuel_per_day: Some(1_000),
            ..QuotaLimits::default()
        };
        assert!(matches!(
            store.quota_admit("alice", &admit(limits, 1), &until())?,
            Admitted::Granted { fuel: 1_000, .. }
        ));
        for lease in 2..10 {
            assert!(matches!(
                store.quota_admit("alice", &admit(limits, lease), &until())?,
                Admitted::Refused {
                    quota: Quota::FuelPerDay,
                    ..
                }
            ));
        }
        // Refused eight times, the minute still has four executions left.
        let only_minute = QuotaLimits {
            executions_per_minute: Some(5),
            ..QuotaLimits::default()
        };
        for lease in 10..14 {
            assert!(matches!(
                store.quota_admit("alice", &admit(only_minute, lease), &until())?,
                Admitted::Granted { .. }
            ));
        }
        assert!(matches!(
            store.quota_admit("alice", &admit(only_minute, 14), &until())?,
            Admitted::Refused {
                quota: Quota::ExecutionsPerMinute,
                ..
            }
        ));
        Ok(())
    }
}
