//! The quotas' counts in the store: per subject, each counted quota's window
//! and what was used in it, and the leases of its admitted executions with
//! what each reserved, changed in one transaction per admission and one per
//! end, so that the quotas hold whichever process runs the execution.
//!
//! An end gives back only what its lease reserved and only once (the lease
//! goes with it), so a quota added by a reload, or a replica with other
//! tables, never takes back what was not counted. The rules are the same in
//! Redis (`scripts/quota_admit.lua`, `scripts/quota_release.lua`), where an
//! admission sent again after a lost answer finds its lease and answers as
//! the first time.

use redb::{ReadableTable, Table, TableDefinition};

use super::counted::{DAY_MS, MINUTE_MS, Quota, QuotaLimits};
use super::database::{Store, StoreError};
use super::entry::now_ms;
use super::state::{Until, begin_write, commit};

/// What each subject used: (subject, quota name) → (window, used in it). The
/// window is the minute or the day since the epoch.
pub(super) const COUNTS: TableDefinition<(&str, &str), (u64, u64)> =
    TableDefinition::new("quota.counts");

/// The admitted executions' leases: (subject, lease) → (when it ends in ms
/// since the epoch, the day of its reservation, native calls reserved, fuel
/// reserved; [`NOT_COUNTED`] for a quota the subject did not have).
const LEASES: TableDefinition<(&str, u64), (u64, u64, u64, u64)> =
    TableDefinition::new("quota.leases");

/// A reservation of a quota the subject did not have.
const NOT_COUNTED: u64 = u64::MAX;

/// What an execution asks to be admitted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admit {
    /// Its subject's quotas.
    pub limits: QuotaLimits,
    /// Its lease among the admitted executions (a random number).
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
    /// It may run. `calls` and `fuel` are what the day's quotas reserved for
    /// it (less than asked when the day has less left), `None` where the
    /// subject has no such quota and its budget stands.
    Granted {
        calls: Option<u64>,
        fuel: Option<u64>,
    },
    /// `quota` refuses it, for `resets_in_ms` more milliseconds.
    Refused { quota: Quota, resets_in_ms: u64 },
}

/// How an admitted execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Release {
    /// Its lease.
    pub lease: u64,
    /// Native calls it made.
    pub calls: u64,
    /// Fuel it burned.
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
        self.quota_admit_at(subject, admit, until, now_ms())
    }

    /// [`Store::quota_admit`] at `now` (ms since the epoch).
    pub(crate) fn quota_admit_at(
        &self,
        subject: &str,
        admit: &Admit,
        until: &Until,
        now: u64,
    ) -> Result<Admitted, StoreError> {
        let database = self.database()?;
        let write = || -> Result<Admitted, String> {
            let transaction = begin_write(&database, until)?;
            let admitted = {
                let mut counts = transaction.open_table(COUNTS).map_err(|e| e.to_string())?;
                let mut leases = transaction.open_table(LEASES).map_err(|e| e.to_string())?;
                admit_in(&mut counts, &mut leases, subject, admit, now)?
            };
            commit(transaction, until)?;
            Ok(admitted)
        };
        write().map_err(|reason| self.error(reason))
    }

    /// Ends one execution of `subject`: its lease goes, and what it reserved
    /// and did not spend is given back (unless the day changed); nothing when
    /// the lease is gone already.
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
                let held = leases
                    .remove((subject, release.lease))
                    .map_err(|e| e.to_string())?
                    .map(|held| held.value());
                if let Some((_, day, calls, fuel)) = held {
                    let mut back = |quota: Quota, reserved: u64, spent: u64| {
                        if reserved == NOT_COUNTED {
                            return Ok(());
                        }
                        give_back(
                            &mut counts,
                            subject,
                            quota,
                            day,
                            reserved.saturating_sub(spent),
                        )
                    };
                    back(Quota::NativeCallsPerDay, calls, release.calls)?;
                    back(Quota::FuelPerDay, fuel, release.fuel)?;
                }
            }
            commit(transaction, until)?;
            Ok(())
        };
        write().map_err(|reason| self.error(reason))
    }
}

impl Store {
    /// Makes `subject`'s lease `lease` last `lease_ms` from now, if it is
    /// still held and would end sooner (its execution waits for a human, and
    /// its deadline moved).
    ///
    /// # Errors
    ///
    /// The store did not answer, or `until` ended first.
    pub(crate) fn quota_extend(
        &self,
        subject: &str,
        lease: u64,
        lease_ms: u64,
        until: &Until,
    ) -> Result<(), StoreError> {
        let database = self.database()?;
        let write = || -> Result<(), String> {
            let transaction = begin_write(&database, until)?;
            {
                let mut leases = transaction.open_table(LEASES).map_err(|e| e.to_string())?;
                let held = leases
                    .get((subject, lease))
                    .map_err(|e| e.to_string())?
                    .map(|held| held.value());
                let ends = now_ms().saturating_add(lease_ms);
                if let Some((before, day, calls, fuel)) = held
                    && before < ends
                {
                    leases
                        .insert((subject, lease), (ends, day, calls, fuel))
                        .map_err(|e| e.to_string())?;
                }
            }
            commit(transaction, until)?;
            Ok(())
        };
        write().map_err(|reason| self.error(reason))
    }
}

pub(super) type Counts<'t> = Table<'t, (&'static str, &'static str), (u64, u64)>;
type Leases<'t> = Table<'t, (&'static str, u64), (u64, u64, u64, u64)>;

/// The admission, in an open transaction, at `now`.
fn admit_in(
    counts: &mut Counts<'_>,
    leases: &mut Leases<'_>,
    subject: &str,
    admit: &Admit,
    now: u64,
) -> Result<Admitted, String> {
    let limits = admit.limits;
    let mut ended = Vec::new();
    let mut running = Vec::new();
    for item in leases
        .range((subject, 0)..=(subject, u64::MAX))
        .map_err(|e| e.to_string())?
    {
        let (lease, held) = item.map_err(|e| e.to_string())?;
        match held.value().0 {
            ends if ends <= now => ended.push(lease.value().1),
            ends => running.push(ends),
        }
    }
    for lease in ended {
        leases.remove((subject, lease)).map_err(|e| e.to_string())?;
    }
    if let Some(most) = limits.concurrent_executions
        && running.len() as u64 >= most
    {
        let first = running.iter().min().copied().unwrap_or(now);
        return Ok(Admitted::Refused {
            quota: Quota::ConcurrentExecutions,
            resets_in_ms: first.saturating_sub(now),
        });
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
    // What each daily quota reserves (`None`: the subject has none), and what
    // the day had used before.
    let reserve =
        |quota: Quota, wanted: u64| -> Result<Result<(Option<u64>, u64), Admitted>, String> {
            let spent = used(counts, subject, quota, day)?;
            Ok(match limits.get(quota) {
                None => Ok((None, spent)),
                Some(most) if spent >= most => Err(Admitted::Refused {
                    quota,
                    resets_in_ms: (day + 1) * DAY_MS - now,
                }),
                Some(most) => Ok((Some(wanted.min(most - spent)), spent)),
            })
        };
    let (calls, calls_spent) = match reserve(Quota::NativeCallsPerDay, admit.calls)? {
        Ok(reserved) => reserved,
        Err(refused) => return Ok(refused),
    };
    let (fuel, fuel_spent) = match reserve(Quota::FuelPerDay, admit.fuel)? {
        Ok(reserved) => reserved,
        Err(refused) => return Ok(refused),
    };
    leases
        .insert(
            (subject, admit.lease),
            (
                now.saturating_add(admit.lease_ms),
                day,
                calls.unwrap_or(NOT_COUNTED),
                fuel.unwrap_or(NOT_COUNTED),
            ),
        )
        .map_err(|e| e.to_string())?;
    let mut count = |quota: Quota, window: u64, used: u64| -> Result<(), String> {
        if limits.get(quota).is_some() {
            counts
                .insert((subject, quota.name()), (window, used))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    count(Quota::ExecutionsPerMinute, minute, started + 1)?;
    count(
        Quota::NativeCallsPerDay,
        day,
        calls_spent + calls.unwrap_or(0),
    )?;
    count(Quota::FuelPerDay, day, fuel_spent + fuel.unwrap_or(0))?;
    Ok(Admitted::Granted { calls, fuel })
}

/// What `subject` used of `quota` in `window` (nothing when its count is of
/// another window).
fn used(counts: &Counts<'_>, subject: &str, quota: Quota, window: u64) -> Result<u64, String> {
    used_named(counts, subject, quota.name(), window)
}

/// What `subject` used of the count `name` in `window` (nothing when its
/// count is of another window).
pub(super) fn used_named(
    counts: &impl ReadableTable<(&'static str, &'static str), (u64, u64)>,
    subject: &str,
    name: &str,
    window: u64,
) -> Result<u64, String> {
    Ok(counts
        .get((subject, name))
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

    /// Noon and thirty seconds of a day: no window ends during a test.
    const NOW: u64 = 20_000 * DAY_MS + DAY_MS / 2 + 30_000;

    fn until() -> Until {
        Until {
            deadline: Instant::now() + Duration::from_secs(10),
            cancel: Arc::new(crate::source::Cancel::default()),
        }
    }

    fn admit(limits: QuotaLimits, lease: u64) -> Admit {
        Admit {
            limits,
            lease,
            lease_ms: 60_000,
            calls: 100,
            fuel: 1_000,
        }
    }

    /// Admits `lease` at `now`.
    fn admitted(store: &Store, subject: &str, admit: &Admit, now: u64) -> Admitted {
        match store.quota_admit_at(subject, admit, &until(), now) {
            Ok(admitted) => admitted,
            Err(error) => panic!("the store failed: {error}"),
        }
    }

    fn release(store: &Store, subject: &str, lease: u64, calls: u64, fuel: u64) {
        let release = Release { lease, calls, fuel };
        if let Err(error) = store.quota_release(subject, &release, &until()) {
            panic!("the store failed: {error}");
        }
    }

    fn refused_by(admitted: Admitted) -> Option<Quota> {
        match admitted {
            Admitted::Refused { quota, .. } => Some(quota),
            Admitted::Granted { .. } => None,
        }
    }

    #[test]
    fn the_last_execution_of_a_minute_is_admitted_and_the_next_refused_until_the_next_minute() {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            executions_per_minute: Some(2),
            ..QuotaLimits::default()
        };
        for lease in 0..2 {
            assert_eq!(
                admitted(&store, "alice", &admit(limits, lease), NOW),
                Admitted::Granted {
                    calls: None,
                    fuel: None
                }
            );
        }
        assert_eq!(
            admitted(&store, "alice", &admit(limits, 2), NOW),
            Admitted::Refused {
                quota: Quota::ExecutionsPerMinute,
                resets_in_ms: 30_000
            }
        );
        // Another subject's count is its own; the next minute starts anew.
        assert_eq!(
            refused_by(admitted(&store, "bob", &admit(limits, 3), NOW)),
            None
        );
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(limits, 4), NOW + 30_000)),
            None
        );
    }

    #[test]
    fn a_day_reserves_what_is_left_and_takes_back_what_is_not_spent_once() {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            native_calls_per_day: Some(150),
            fuel_per_day: Some(1_500),
            ..QuotaLimits::default()
        };
        let granted = |calls: u64, fuel: u64| Admitted::Granted {
            calls: Some(calls),
            fuel: Some(fuel),
        };
        assert_eq!(
            admitted(&store, "alice", &admit(limits, 1), NOW),
            granted(100, 1_000)
        );
        // What is left of the day, not the budget.
        assert_eq!(
            admitted(&store, "alice", &admit(limits, 2), NOW),
            granted(50, 500)
        );
        assert_eq!(
            admitted(&store, "alice", &admit(limits, 3), NOW),
            Admitted::Refused {
                quota: Quota::NativeCallsPerDay,
                resets_in_ms: DAY_MS / 2 - 30_000
            }
        );
        // The first spent 10 calls and 100 fuel: the rest comes back, once.
        release(&store, "alice", 1, 10, 100);
        release(&store, "alice", 1, 10, 100);
        assert_eq!(
            admitted(&store, "alice", &admit(limits, 4), NOW),
            granted(90, 900)
        );
        // The next day is a new one.
        assert_eq!(
            admitted(&store, "alice", &admit(limits, 5), NOW + DAY_MS),
            granted(100, 1_000)
        );
    }

    #[test]
    fn an_end_gives_back_only_what_its_lease_reserved() {
        let store = Store::new(StoreLocation::Memory);
        let none = QuotaLimits {
            concurrent_executions: Some(10),
            ..QuotaLimits::default()
        };
        let daily = QuotaLimits {
            fuel_per_day: Some(1_500),
            ..none
        };
        // Admitted before the fuel quota existed (a reload added it).
        assert_eq!(
            admitted(&store, "alice", &admit(none, 1), NOW),
            Admitted::Granted {
                calls: None,
                fuel: None
            }
        );
        assert_eq!(
            admitted(&store, "alice", &admit(daily, 2), NOW),
            Admitted::Granted {
                calls: None,
                fuel: Some(1_000)
            }
        );
        // The first spent nothing of a reservation it never had.
        release(&store, "alice", 1, 0, 0);
        assert_eq!(
            admitted(&store, "alice", &admit(daily, 3), NOW),
            Admitted::Granted {
                calls: None,
                fuel: Some(500)
            }
        );
    }

    #[test]
    fn admitted_executions_hold_their_leases_until_they_end_or_expire() {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            concurrent_executions: Some(1),
            ..QuotaLimits::default()
        };
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(limits, 1), NOW)),
            None
        );
        assert_eq!(
            admitted(&store, "alice", &admit(limits, 2), NOW + 1_000),
            Admitted::Refused {
                quota: Quota::ConcurrentExecutions,
                resets_in_ms: 59_000
            }
        );
        release(&store, "alice", 1, 0, 0);
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(limits, 2), NOW)),
            None
        );
        // A lease whose process died ends at its deadline.
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(limits, 3), NOW + 59_999)),
            Some(Quota::ConcurrentExecutions)
        );
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(limits, 3), NOW + 60_000)),
            None
        );
    }

    #[test]
    fn a_lease_made_to_last_a_wait_is_counted_until_then_and_a_gone_one_stays_gone() {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            concurrent_executions: Some(1),
            ..QuotaLimits::default()
        };
        let short = Admit {
            lease_ms: 1_000,
            ..admit(limits, 1)
        };
        assert_eq!(refused_by(admitted(&store, "alice", &short, NOW)), None);
        // Waiting for a human: it lasts a minute from now (the real clock,
        // long after NOW).
        if let Err(error) = store.quota_extend("alice", 1, 60_000, &until()) {
            panic!("the store failed: {error}");
        }
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(limits, 2), NOW + 5_000)),
            Some(Quota::ConcurrentExecutions)
        );
        release(&store, "alice", 1, 0, 0);
        if let Err(error) = store.quota_extend("alice", 1, 60_000, &until()) {
            panic!("the store failed: {error}");
        }
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(limits, 2), NOW + 5_000)),
            None
        );
    }

    #[test]
    fn a_refusal_counts_nothing() {
        let store = Store::new(StoreLocation::Memory);
        let limits = QuotaLimits {
            executions_per_minute: Some(5),
            fuel_per_day: Some(1_000),
            ..QuotaLimits::default()
        };
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(limits, 1), NOW)),
            None
        );
        for lease in 2..10 {
            assert_eq!(
                refused_by(admitted(&store, "alice", &admit(limits, lease), NOW)),
                Some(Quota::FuelPerDay)
            );
        }
        // Refused eight times, the minute still has four executions left.
        let only_minute = QuotaLimits {
            executions_per_minute: Some(5),
            ..QuotaLimits::default()
        };
        for lease in 10..14 {
            assert_eq!(
                refused_by(admitted(&store, "alice", &admit(only_minute, lease), NOW)),
                None
            );
        }
        assert_eq!(
            refused_by(admitted(&store, "alice", &admit(only_minute, 14), NOW)),
            Some(Quota::ExecutionsPerMinute)
        );
    }
}
