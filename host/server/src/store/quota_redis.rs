//! The quotas' counts in Redis (`--store redis://`), shared by replicas on any
//! machine: per owner, a hash of counts and a sorted set of the running
//! executions' leases, each admission and each end one Lua script
//! (`scripts/quota_*.lua`), so that two replicas never both spend the last
//! unit. The rules are those of `quota.rs`.

use std::sync::LazyLock;

use redis::Script;

use super::counted::Quota;
use super::quota::{Admit, Admitted, Release};
use super::redis::RedisState;

static ADMIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/quota_admit.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/quota_release.lua")));

/// The names of an owner's counts and leases: the owner hex-encoded, so that
/// no owner's names are another's.
fn names(owner: &str) -> (String, String) {
    let owner = hex::encode(owner);
    (
        format!("codemode:quota:{owner}:counts"),
        format!("codemode:quota:{owner}:leases"),
    )
}

/// A limit as the scripts take it: -1 for none.
fn limit(limit: Option<u64>) -> i64 {
    limit.map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX))
}

impl RedisState {
    /// [`crate::store::Store::quota_admit`] in Redis.
    pub(crate) async fn quota_admit(&self, owner: &str, admit: &Admit) -> Result<Admitted, String> {
        let (counts, leases) = &names(owner);
        let limits = admit.limits;
        let answer: Vec<redis::Value> = self
            .ask(|mut connection| async move {
                ADMIT
                    .key(counts)
                    .key(leases)
                    .arg(admit.lease)
                    .arg(admit.lease_ms)
                    .arg(limit(limits.executions_per_minute))
                    .arg(limit(limits.native_calls_per_day))
                    .arg(limit(limits.fuel_per_day))
                    .arg(limit(limits.concurrent_executions))
                    .arg(admit.calls)
                    .arg(admit.fuel)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        parse(&answer)
    }

    /// [`crate::store::Store::quota_release`] in Redis.
    pub(crate) async fn quota_release(&self, owner: &str, release: &Release) -> Result<(), String> {
        let (counts, leases) = &names(owner);
        let _: i64 = self
            .ask(|mut connection| async move {
                RELEASE
                    .key(counts)
                    .key(leases)
                    .arg(release.lease)
                    .arg(release.day)
                    .arg(release.calls)
                    .arg(release.fuel)
                    .invoke_async(&mut connection)
                    .await
            })
            .await?;
        Ok(())
    }
}

/// The admission script's answer.
fn parse(answer: &[redis::Value]) -> Result<Admitted, String> {
    let text = |value: &redis::Value| redis::from_redis_value_ref::<String>(value).ok();
    let number = |value: &redis::Value| redis::from_redis_value_ref::<u64>(value).ok();
    match answer {
        [kind, calls, fuel, day] if text(kind).as_deref() == Some("granted") => {
            match (number(calls), number(fuel), number(day)) {
                (Some(calls), Some(fuel), Some(day)) => Ok(Admitted::Granted { calls, fuel, day }),
                _ => Err(format!("an answer no script gives: {answer:?}")),
            }
        }
        [kind, name, resets_in_ms] if text(kind).as_deref() == Some("refused") => {
            match (
                text(name).as_deref().and_then(Quota::named),
                number(resets_in_ms),
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
