//! The gate every execution passes: its subject's quotas checked and counted
//! in the store before it waits for a slot, and what it did not spend given
//! back when it ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::subjects::{QuotaHit, Quotas};
use crate::authz::Subject;
use crate::metrics::Metrics;
use crate::source::Cancel;
use crate::store::{Admit, Admitted, DAY_MS, Quota, Release, Store, StoreError, Until};

/// How long a lease outlives its execution's deadline: an execution ends a
/// little after its deadline (its teardown), and must not be counted out
/// before.
const LEASE_MARGIN: Duration = Duration::from_secs(10);

/// How long giving back may wait for the store.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Quotas and where their counts are kept.
#[derive(Debug, Clone)]
pub struct QuotaConfig {
    /// Where the counts are kept (`--store`).
    pub store: Arc<Store>,
    /// Every subject's quotas at start.
    pub quotas: Quotas,
    /// Whether executions run without quotas while the store does not answer
    /// (`--quota-fail-open`); by default they are refused.
    pub fail_open: bool,
}

/// The gate: the quotas, their store, and the refusals' counter.
#[derive(Debug)]
pub struct QuotaGate {
    config: QuotaConfig,
    /// The quotas in force: replaced by a reload of the config file.
    quotas: arc_swap::ArcSwap<Quotas>,
    metrics: Arc<Metrics>,
}

/// What the gate decided about one execution.
#[derive(Debug)]
pub(crate) enum Admission {
    /// No quota applies to its subject, or the store did not answer and
    /// quotas fail open: it runs on its own budgets.
    Unlimited,
    /// It runs with the budgets its lease reserved.
    Admitted(Lease),
    /// A quota refuses it.
    Refused(QuotaHit),
    /// The store did not answer, and quotas fail closed.
    Unavailable,
}

/// An admitted execution's hold on its subject's quotas.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    owner: Arc<str>,
    lease: u64,
    day: u64,
    /// Native calls reserved: its budget of native calls.
    pub calls: u64,
    /// Fuel reserved: its budget of fuel.
    pub fuel: u64,
}

impl Lease {
    /// The quota that lowered the budget `flag` names, and when it resets:
    /// for an execution stopped by a budget the day's quota made smaller than
    /// its flag's (`max_fuel`, `max_native_calls`).
    pub(crate) fn lowered(
        &self,
        flag: &str,
        max_fuel: u64,
        max_native_calls: u64,
    ) -> Option<QuotaHit> {
        let quota = if flag == crate::budget::Budget::Fuel.flag() && self.fuel < max_fuel {
            Quota::FuelPerDay
        } else if flag == crate::budget::Budget::NativeCalls.flag() && self.calls < max_native_calls
        {
            Quota::NativeCallsPerDay
        } else {
            return None;
        };
        let now = crate::store::now_ms();
        let day_ends = (now / DAY_MS + 1) * DAY_MS;
        Some(QuotaHit::new(quota, day_ends - now))
    }
}

impl QuotaGate {
    /// The gate of `config`, counting refusals in `metrics`.
    pub fn new(config: QuotaConfig, metrics: Arc<Metrics>) -> Self {
        Self {
            quotas: arc_swap::ArcSwap::from_pointee(config.quotas.clone()),
            config,
            metrics,
        }
    }

    /// Applies `quotas` to the executions admitted after it; what running
    /// executions reserved stays theirs, and the counts stay.
    pub fn set_quotas(&self, quotas: Quotas) {
        self.quotas.store(Arc::new(quotas));
    }

    /// Admits an execution of `subject` whose budgets allow `calls` native
    /// calls and `fuel` fuel, and which ends by `deadline`: in one transaction
    /// of the store.
    pub(crate) async fn admit(
        &self,
        subject: &Subject,
        owner: &Arc<str>,
        calls: u64,
        fuel: u64,
        deadline: Instant,
    ) -> Admission {
        let limits = self.quotas.load().of(subject);
        if limits.is_empty() {
            return Admission::Unlimited;
        }
        let mut lease = [0u8; 8];
        if getrandom::fill(&mut lease).is_err() {
            tracing::error!("no random number for a quota lease");
            return self.unavailable();
        }
        let lease_ms = deadline.saturating_duration_since(Instant::now()) + LEASE_MARGIN;
        let admit = Admit {
            limits,
            lease: u64::from_le_bytes(lease),
            lease_ms: u64::try_from(lease_ms.as_millis()).unwrap_or(u64::MAX),
            calls,
            fuel,
        };
        let until = Until {
            deadline,
            cancel: Arc::new(Cancel::default()),
        };
        match self.admit_in_store(owner, admit, until).await {
            Ok(Admitted::Granted { calls, fuel, day }) => Admission::Admitted(Lease {
                owner: owner.clone(),
                lease: admit.lease,
                day,
                calls,
                fuel,
            }),
            Ok(Admitted::Refused {
                quota,
                resets_in_ms,
            }) => {
                self.metrics.quota_refusal(quota.name());
                tracing::info!(
                    subject = %subject.id,
                    quota = quota.name(),
                    resets_in_ms,
                    "execution refused by a quota"
                );
                Admission::Refused(QuotaHit::new(quota, resets_in_ms))
            }
            Err(error) => {
                tracing::warn!(reason = %error, "the quotas cannot be checked: the store did not answer");
                self.unavailable()
            }
        }
    }

    fn unavailable(&self) -> Admission {
        if self.config.fail_open {
            Admission::Unlimited
        } else {
            Admission::Unavailable
        }
    }

    async fn admit_in_store(
        &self,
        owner: &Arc<str>,
        admit: Admit,
        until: Until,
    ) -> Result<Admitted, StoreError> {
        let store = &self.config.store;
        #[cfg(feature = "redis")]
        if let Some(redis) = store.redis() {
            return redis?
                .quota_admit(owner, &admit)
                .await
                .map_err(|reason| store.error(reason));
        }
        if store.in_memory() {
            return store.quota_admit(owner, &admit, &until);
        }
        // A file store may wait on the disk, or on another process's commit.
        let (store, owner) = (store.clone(), owner.clone());
        tokio::task::spawn_blocking(move || store.quota_admit(&owner, &admit, &until))
            .await
            .map_err(|error| self.config.store.error(error))?
    }

    /// Ends `lease`'s execution, which made `calls` native calls and burned
    /// `fuel`: its lease goes and the rest of its reservation comes back.
    /// Waits for the store (at most a few seconds), so that the next
    /// execution sees it: call it where blocking is allowed.
    pub(crate) fn release_blocking(&self, lease: &Lease, calls: u64, fuel: u64) {
        let release = Release {
            lease: lease.lease,
            day: lease.day,
            calls: lease.calls.saturating_sub(calls),
            fuel: lease.fuel.saturating_sub(fuel),
        };
        let store = &self.config.store;
        let until = Until {
            deadline: Instant::now() + RELEASE_WAIT,
            cancel: Arc::new(Cancel::default()),
        };
        let released = match () {
            #[cfg(feature = "redis")]
            () if store.redis().is_some() => {
                match (store.redis(), tokio::runtime::Handle::try_current()) {
                    (Some(Ok(redis)), Ok(runtime)) => runtime
                        .block_on(async {
                            tokio::time::timeout(
                                RELEASE_WAIT,
                                redis.quota_release(&lease.owner, &release),
                            )
                            .await
                            .unwrap_or_else(|_| Err("no answer in time".to_owned()))
                        })
                        .map_err(|reason| store.error(reason)),
                    (Some(Err(error)), _) => Err(error),
                    (None, _) | (_, Err(_)) => Err(store.error("no runtime to reach Redis from")),
                }
            }
            () => store.quota_release(&lease.owner, &release, &until),
        };
        if let Err(error) = released {
            tracing::warn!(
                reason = %error,
                "an execution's quota lease could not be given back: it ends at its deadline, and its unspent reservation counts as spent"
            );
        }
    }

    /// Ends `lease`'s execution, which never ran: everything comes back,
    /// without waiting (from any context).
    pub(crate) fn release_unused(self: &Arc<Self>, lease: Lease) {
        let gate = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || gate.release_blocking(&lease, 0, 0));
            }
            Err(_) => gate.release_blocking(&lease, 0, 0),
        }
    }
}
