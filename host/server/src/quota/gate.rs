//! The gate every execution passes: its subject's quotas checked and counted
//! in the store before it waits for a slot, and what it did not spend given
//! back when it ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::subjects::{QuotaHit, Quotas};
use crate::authz::{Authorizer, Subject};
use crate::metrics::Metrics;
use crate::source::Cancel;
use crate::store::{
    Admit, Admitted, DAY_MS, Quota, QuotaLimits, Release, Store, StoreError, Until,
};

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
    /// The policy's quota decision failed, or gave no quotas it can read
    /// (`authorization policy failure`).
    PolicyFailure,
    /// The store did not answer, and quotas fail closed.
    Unavailable,
}

/// An admitted execution's hold on its subject's quotas.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    owner: Arc<str>,
    lease: u64,
    /// Native calls the day's quota reserved, `None` without such a quota.
    pub calls: Option<u64>,
    /// Fuel the day's quota reserved, `None` without such a quota.
    pub fuel: Option<u64>,
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
        let below = |reserved: Option<u64>, flag: u64| reserved.is_some_and(|r| r < flag);
        let quota = if flag == crate::budget::Budget::Fuel.flag() && below(self.fuel, max_fuel) {
            Quota::FuelPerDay
        } else if flag == crate::budget::Budget::NativeCalls.flag()
            && below(self.calls, max_native_calls)
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

    /// The quotas in force.
    pub(super) fn quotas(&self) -> Arc<Quotas> {
        self.quotas.load_full()
    }

    /// Where the counts are kept.
    pub(super) fn store(&self) -> &Store {
        &self.config.store
    }

    /// Where refusals are counted.
    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether quotas let work run while the store does not answer.
    pub(super) fn fails_open(&self) -> bool {
        self.config.fail_open
    }

    /// Admits an execution of `subject` (its quotas from `authorizer`'s
    /// decision first, the config file's filling in) whose budgets allow
    /// `calls` native calls and `fuel` fuel, and which ends by `deadline`: in
    /// one transaction of the store, made by a task of its own, so that a
    /// request dropped meanwhile, or an answer that comes too late, still has
    /// what was admitted given back.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        authorizer: &Arc<dyn Authorizer>,
        subject: &Subject,
        calls: u64,
        fuel: u64,
        deadline: Instant,
    ) -> Admission {
        let configured = self.quotas.load().of(subject);
        let limits = if authorizer.decides_quotas() {
            // A Rego evaluation: not on a runtime's worker (over stdio the
            // only one).
            let (authorizer, who) = (authorizer.clone(), subject.clone());
            let decided = tokio::task::spawn_blocking(move || authorizer.quota(&who))
                .await
                .map_err(|error| error.to_string())
                .and_then(|decided| decided.map_err(|error| error.to_string()))
                .and_then(|decided| decided.map(|decided| decided_limits(&decided)).transpose());
            match decided {
                Ok(Some(decided)) => decided.or(configured),
                Ok(None) => configured,
                Err(reason) => {
                    tracing::warn!(subject = %subject.id, reason, "execution refused: the policy's quota decision failed");
                    return Admission::PolicyFailure;
                }
            }
        } else {
            configured
        };
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
        let owner: Arc<str> = Arc::from(subject.owner());
        let unused = Lease {
            owner: owner.clone(),
            lease: admit.lease,
            calls: None,
            fuel: None,
        };
        let (answer, admitted) = tokio::sync::oneshot::channel();
        let mut pending = Pending {
            gate: self.clone(),
            lease: Some(unused.clone()),
            admitted,
        };
        let gate = self.clone();
        let until = Until {
            deadline,
            cancel: Arc::new(Cancel::default()),
        };
        gate.start_admission(unused, admit, until, answer);
        let admitted = match pending.wait(deadline).await {
            Some(Ok(admitted)) => Ok(admitted),
            Some(Err(error)) => Err(error),
            None => Err(self
                .config
                .store
                .error("no answer before the execution's deadline")),
        };
        match admitted {
            Ok(Admitted::Granted { calls, fuel }) => Admission::Admitted(Lease {
                owner,
                lease: admit.lease,
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
                if self.config.store.location().is_redis() {
                    // The script may have run: its lease goes.
                    if let Some(lease) = pending.lease.take() {
                        self.release_unused(lease);
                    }
                }
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

    /// Starts the admission in the store, its answer sent to `answer`: in
    /// Redis by a task of this runtime; in a file on a blocking thread (it
    /// waits on its disk or another process's commit); in memory at once, on
    /// this thread (nothing to wait on but another execution's write). Each
    /// way it runs to its end even if nobody waits any more, and then gives
    /// back what it admitted.
    fn start_admission(
        self: &Arc<Self>,
        unused: Lease,
        admit: Admit,
        until: Until,
        answer: tokio::sync::oneshot::Sender<Result<Admitted, StoreError>>,
    ) {
        let gate = self.clone();
        #[cfg(feature = "redis")]
        if self.config.store.redis().is_some() {
            tokio::spawn(async move {
                let admitted = match gate.config.store.redis() {
                    Some(Ok(redis)) => redis
                        .quota_admit(&unused.owner, &admit)
                        .await
                        .map_err(|reason| gate.config.store.error(reason)),
                    Some(Err(error)) => Err(error),
                    None => Err(gate.config.store.error("the store is no Redis")),
                };
                gate.settle(answer, admitted, unused);
            });
            return;
        }
        let run = move || {
            let admitted = gate.config.store.quota_admit(&unused.owner, &admit, &until);
            gate.settle(answer, admitted, unused);
        };
        if self.config.store.in_memory() {
            run();
        } else {
            tokio::task::spawn_blocking(run);
        }
    }

    /// Sends the store's answer `admitted` for `unused`'s admission to
    /// whoever waits; when nobody does any more, what was admitted goes back
    /// at once.
    fn settle(
        self: &Arc<Self>,
        answer: tokio::sync::oneshot::Sender<Result<Admitted, StoreError>>,
        admitted: Result<Admitted, StoreError>,
        unused: Lease,
    ) {
        match answer.send(admitted) {
            Ok(()) => {}
            Err(Ok(Admitted::Granted { .. })) => self.release_unused(unused),
            // A failed answer from Redis may come after the script ran: its
            // lease goes (a release of no lease changes nothing).
            Err(Err(_)) if self.config.store.location().is_redis() => {
                self.release_unused(unused);
            }
            Err(_) => {}
        }
    }

    /// Ends `lease`'s execution, which made `calls` native calls and burned
    /// `fuel`: its lease goes and the rest of what it reserved comes back.
    /// Waits for the store (at most a few seconds), so that the next
    /// execution sees it: call it only on a blocking thread.
    pub(crate) fn release_blocking(&self, lease: &Lease, calls: u64, fuel: u64) {
        let release = Release {
            lease: lease.lease,
            calls,
            fuel,
        };
        if let Err(error) = self.change_blocking(&lease.owner, Change::Release(release)) {
            tracing::warn!(
                reason = %error,
                "an execution's quota lease could not be given back: it ends at its deadline, and its unspent reservation counts as spent"
            );
        }
    }

    /// Makes `lease` last `lasts` more (its execution is about to wait for a
    /// human, which moves its deadline), so that it is neither counted out
    /// of the running ones nor found gone at its end. Waits for the store:
    /// call it only on a blocking thread.
    pub(crate) fn extend_blocking(&self, lease: &Lease, lasts: Duration) {
        let lease_ms = u64::try_from((lasts + LEASE_MARGIN).as_millis()).unwrap_or(u64::MAX);
        let change = Change::Extend {
            lease: lease.lease,
            lease_ms,
        };
        if let Err(error) = self.change_blocking(&lease.owner, change) {
            tracing::warn!(
                reason = %error,
                "an execution's quota lease could not be made to last its wait: it may end before the execution"
            );
        }
    }

    /// Makes `change` to `owner`'s lease, waiting for the store at most
    /// [`RELEASE_WAIT`] (in Redis through the runtime's handle, which a
    /// blocking thread may block on).
    fn change_blocking(&self, owner: &str, change: Change) -> Result<(), StoreError> {
        let store = &self.config.store;
        #[cfg(feature = "redis")]
        if let Some(redis) = store.redis() {
            let redis = redis?;
            let runtime = tokio::runtime::Handle::try_current()
                .map_err(|_| store.error("no runtime to reach Redis from"))?;
            return runtime
                .block_on(async {
                    let changed = async {
                        match change {
                            Change::Release(release) => redis.quota_release(owner, &release).await,
                            Change::Extend { lease, lease_ms } => {
                                redis.quota_extend(owner, lease, lease_ms).await
                            }
                        }
                    };
                    tokio::time::timeout(RELEASE_WAIT, changed)
                        .await
                        .unwrap_or_else(|_| Err("no answer in time".to_owned()))
                })
                .map_err(|reason| store.error(reason));
        }
        let until = Until {
            deadline: Instant::now() + RELEASE_WAIT,
            cancel: Arc::new(Cancel::default()),
        };
        match change {
            Change::Release(release) => store.quota_release(owner, &release, &until),
            Change::Extend { lease, lease_ms } => {
                store.quota_extend(owner, lease, lease_ms, &until)
            }
        }
    }

    /// Ends `lease`'s execution, which never ran: everything it reserved
    /// comes back, on a blocking thread of the runtime (the caller does not
    /// wait for it).
    pub(crate) fn release_unused(self: &Arc<Self>, lease: Lease) {
        self.release_later(lease, 0, 0);
    }

    /// Ends `lease`'s execution, which may have spent anything (it panicked):
    /// its lease goes, and nothing comes back.
    pub(crate) fn release_spent(self: &Arc<Self>, lease: Lease) {
        self.release_later(lease, u64::MAX, u64::MAX);
    }

    fn release_later(self: &Arc<Self>, lease: Lease, calls: u64, fuel: u64) {
        let gate = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || gate.release_blocking(&lease, calls, fuel));
            }
            Err(_) => tracing::warn!(
                "an execution's quota lease could not be given back (no runtime): it ends at its deadline"
            ),
        }
    }
}

/// What becomes of a lease after its admission.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// Its execution ended.
    Release(Release),
    /// Its execution waits for a human: it lasts `lease_ms` from now.
    Extend { lease: u64, lease_ms: u64 },
}

/// An admission the request waits for. Dropped before its answer was taken
/// (the request went, or its deadline passed), it closes the channel: a grant
/// already in it (or a failure from Redis, whose script may have run) is
/// given back here; an answer not sent yet finds the channel closed, and its
/// task gives it back. A lease may so be released twice (at a Redis
/// deadline, by the waiter and by the task), which changes nothing: a
/// release of a lease gone gives nothing, and in Redis marks it released, so
/// that its admission, should it still run, counts nothing.
struct Pending {
    gate: Arc<QuotaGate>,
    /// The lease asked for, until its answer is taken.
    lease: Option<Lease>,
    admitted: tokio::sync::oneshot::Receiver<Result<Admitted, StoreError>>,
}

impl Pending {
    /// The store's answer, or `None` at `deadline` (or if the task ended
    /// without one).
    async fn wait(&mut self, deadline: Instant) -> Option<Result<Admitted, StoreError>> {
        let answer =
            tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), &mut self.admitted)
                .await;
        match answer {
            Ok(Ok(admitted)) => {
                if matches!(admitted, Ok(Admitted::Granted { .. })) {
                    // Taken: the caller holds the lease from here.
                    self.lease = None;
                }
                Some(admitted)
            }
            Ok(Err(_)) | Err(_) => None,
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.admitted.close();
        let release = match self.admitted.try_recv() {
            Ok(Ok(Admitted::Granted { .. })) => true,
            // A failed answer from Redis may come after the script ran.
            Ok(Err(_)) => self.gate.config.store.location().is_redis(),
            Ok(Ok(Admitted::Refused { .. })) | Err(_) => false,
        };
        if release && let Some(lease) = self.lease.take() {
            self.gate.release_unused(lease);
        }
    }
}

/// The quotas of a policy's decision: each key a quota's name, each value a
/// whole number of at least 1.
///
/// # Errors
///
/// The first key that names no quota, or value that is no such number.
fn decided_limits(
    decided: &serde_json::Map<String, serde_json::Value>,
) -> Result<QuotaLimits, String> {
    let mut limits = QuotaLimits::default();
    for (name, value) in decided {
        let quota = Quota::named(name).ok_or_else(|| {
            let names: Vec<&str> = Quota::ALL.iter().map(|quota| quota.name()).collect();
            format!(
                "the quota decision names `{name}`, which is no quota ({})",
                names.join(", ")
            )
        })?;
        match value.as_u64() {
            Some(limit) if limit >= 1 => limits.set(quota, Some(limit)),
            _ => {
                return Err(format!(
                    "the quota decision gives `{name}` {value}; a quota is a whole number of at least 1"
                ));
            }
        }
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_sets_the_quotas_it_names_and_refuses_what_is_none() {
        let decided = |value: serde_json::Value| match value {
            serde_json::Value::Object(map) => decided_limits(&map),
            _ => Err("not an object".to_owned()),
        };
        assert_eq!(
            decided(serde_json::json!({"executions-per-minute": 5, "fuel-per-day": 1000})),
            Ok(QuotaLimits {
                executions_per_minute: Some(5),
                fuel_per_day: Some(1000),
                ..QuotaLimits::default()
            })
        );
        assert_eq!(decided(serde_json::json!({})), Ok(QuotaLimits::default()));
        assert_eq!(
            decided(serde_json::json!({"executions-per-hour": 5})),
            Err("the quota decision names `executions-per-hour`, which is no quota (concurrent-executions, executions-per-minute, native-calls-per-day, fuel-per-day)".to_owned())
        );
        for bad in [
            serde_json::json!(0),
            serde_json::json!(1.5),
            serde_json::json!("5"),
            serde_json::json!(-1),
        ] {
            assert_eq!(
                decided(serde_json::json!({"fuel-per-day": bad})),
                Err(format!(
                    "the quota decision gives `fuel-per-day` {bad}; a quota is a whole number of at least 1"
                ))
            );
        }
    }
}
