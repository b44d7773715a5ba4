//! The quotas' counts in Redis (`--store redis://`), shared by replicas on any
//! machine: per owner, a hash of counts, a sorted set of the admitted
//! executions' leases, a hash of what each reserved, and a sorted set of the
//! calls counted lately; each admission, each end, and each call of a
//! capability with quotas is one Lua script (`scripts/quota_*.lua`), so that
//! two replicas never both spend the last unit; a script sent again after a
//! lost answer (the connection's one retry) finds its lease or its call and
//! changes nothing twice. The rules are those of `quota.rs` and
//! `call_quota.rs`.

use std::sync::LazyLock;

use redis::Script;

use super::call_quota::CallCounted;
use super::counted::{CallLimits, CallQuota, Quota};
use super::quota::{Admit, Admitted, Release};
use super::redis::RedisState;

static ADMIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/quota_admit.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/quota_release.lua")));
static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/quota_extend.lua")));
static CALL: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/quota_call.lua")));

/// The names of an owner's counts, leases, reservations and leases released
/// before their admission: the owner
/// hex-encoded, so that no owner's names are another's.
fn names(owner: &str) -> [String; 4] {
    let owner = hex::encode(owner);
    ["counts", "leases", "held", "released"].map(|what| format!("codemode:quota:{owner}:{what}"))
}

/// The name of an owner's calls counted in the last minute (`quota_call.lua`).
fn calls_name(owner: &str) -> String {
    format!("codemode:quota:{}:calls", hex::encode(owner))
}

/// The largest number Lua's doubles hold exactly: what is sent is at most it
/// (a budget or a quota past it is, for a day, as good as unbounded).
const EXACT: u64 = 1 << 53;

/// A limit as the scripts take it: -1 for none.
fn limit(limit: Option<u64>) -> i64 {
    limit.map_or(-1, |limit| limit.min(EXACT) as i64)
}

impl RedisState {
    /// [`crate::store::Store::quota_admit`] in Redis.
    pub(crate) async fn quota_admit(&self, owner: &str, admit: &Admit) -> Result<Admitted, String> {
        let [counts, leases, held, released] = &names(owner);
        let limits = admit.limits;
        let answer: Vec<redis::Value> = self
            .ask(|mut connection| async move {
                ADMIT
                    .key(counts)
                    .key(leases)
                    .key(held)
                    .key(released)
                    .arg(admit.lease)
                    .arg(admit.lease_ms)
                    .arg(limit(limits.executions_per_minute))
                    .arg(limit(limits.native_calls_per_day))
                    .arg(limit(limits.fuel_per_day))
                    .arg(limit(limits.concurrent_executions))
                    .arg(admit.calls.min(EXACT))
                    .arg(admit.fuel.min(EXACT))
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        parse(&answer)
    }

    /// [`crate::store::Store::quota_extend`] in Redis.
    pub(crate) async fn quota_extend(
        &self,
        owner: &str,
        lease: u64,
        lease_ms: u64,
    ) -> Result<(), String> {
        let [counts, leases, held, released] = &names(owner);
        let _: i64 = self
            .ask(|mut connection| async move {
                EXTEND
                    .key(counts)
                    .key(leases)
                    .key(held)
                    .key(released)
                    .arg(lease)
                    .arg(lease_ms.min(EXACT))
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(())
    }

    /// [`crate::store::Store::quota_release`] in Redis.
    pub(crate) async fn quota_release(&self, owner: &str, release: &Release) -> Result<(), String> {
        let [counts, leases, held, released] = &names(owner);
        let _: i64 = self
            .ask(|mut connection| async move {
                RELEASE
                    .key(counts)
                    .key(leases)
                    .key(held)
                    .key(released)
                    .arg(release.lease)
                    .arg(release.calls.min(EXACT))
                    .arg(release.fuel.min(EXACT))
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(())
    }
}

impl RedisState {
    /// [`crate::store::Store::quota_call`] in Redis; `call` tells this call
    /// from the others (a random number), so that the script sent again
    /// counts it once.
    pub(crate) async fn quota_call(
        &self,
        owner: &str,
        capability: &str,
        limits: CallLimits,
        call: u64,
    ) -> Result<CallCounted, String> {
        self.call_script(owner, capability, limits, call, "count")
            .await
    }

    /// [`crate::store::Store::quota_call_peek`] in Redis.
    pub(crate) async fn quota_call_peek(
        &self,
        owner: &str,
        capability: &str,
        limits: CallLimits,
    ) -> Result<CallCounted, String> {
        self.call_script(owner, capability, limits, 0, "peek").await
    }

    async fn call_script(
        &self,
        owner: &str,
        capability: &str,
        limits: CallLimits,
        call: u64,
        mode: &str,
    ) -> Result<CallCounted, String> {
        let [counts, ..] = &names(owner);
        let calls = &calls_name(owner);
        let answer: Vec<redis::Value> = self
            .ask(|mut connection| async move {
                CALL.key(counts)
                    .key(calls)
                    .arg(call)
                    .arg(capability)
                    .arg(limit(limits.calls_per_minute))
                    .arg(limit(limits.calls_per_day))
                    .arg(mode)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        parse_call(&answer)
    }
}

/// The call script's answer.
fn parse_call(answer: &[redis::Value]) -> Result<CallCounted, String> {
    let text = |value: &redis::Value| redis::from_redis_value_ref::<String>(value).ok();
    let number = |value: &redis::Value| redis::from_redis_value_ref::<i64>(value).ok();
    match answer {
        [kind] if text(kind).as_deref() == Some("counted") => Ok(CallCounted::Counted),
        [kind, name, resets_in_ms] if text(kind).as_deref() == Some("refused") => {
            let quota = text(name).and_then(|name| {
                CallQuota::ALL
                    .into_iter()
                    .find(|quota| quota.name() == name)
            });
            match (
                quota,
                number(resets_in_ms).and_then(|ms| u64::try_from(ms).ok()),
            ) {
                (Some(quota), Some(resets_in_ms)) => Ok(CallCounted::Refused {
                    quota,
                    resets_in_ms,
                }),
                _ => Err(format!("an answer no script gives: {answer:?}")),
            }
        }
        _ => Err(format!("an answer no script gives: {answer:?}")),
    }
}

/// The admission script's answer.
fn parse(answer: &[redis::Value]) -> Result<Admitted, String> {
    let text = |value: &redis::Value| redis::from_redis_value_ref::<String>(value).ok();
    let number = |value: &redis::Value| redis::from_redis_value_ref::<i64>(value).ok();
    // -1: the owner has no such quota.
    let reserved = |value: &redis::Value| number(value).map(|n| u64::try_from(n).ok());
    match answer {
        [kind, calls, fuel] if text(kind).as_deref() == Some("granted") => {
            match (reserved(calls), reserved(fuel)) {
                (Some(calls), Some(fuel)) => Ok(Admitted::Granted { calls, fuel }),
                _ => Err(format!("an answer no script gives: {answer:?}")),
            }
        }
        [kind, name, resets_in_ms] if text(kind).as_deref() == Some("refused") => {
            match (
                text(name).as_deref().and_then(Quota::named),
                number(resets_in_ms).and_then(|ms| u64::try_from(ms).ok()),
            ) {
                (Some(quota), Some(resets_in_ms)) => Ok(Admitted::Refused {
                    quota,
                    resets_in_ms,
                }),
                _ => Err(format!("an answer no script gives: {answer:?}")),
            }
        }
        _ => Err(format!("an answer no script gives: {answer:?}")),
    }
}
