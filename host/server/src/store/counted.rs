//! The quotas the store counts: their names, one subject's limits, and one
//! subject's limits on the calls of one capability.

/// Milliseconds in a minute, the window of the per-minute quotas.
pub(crate) const MINUTE_MS: u64 = 60_000;

/// Milliseconds in a day, the window of the daily quotas (UTC days).
pub(crate) const DAY_MS: u64 = 86_400_000;

/// One quota, named as the config file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quota {
    /// Executions started per minute (`executions-per-minute`).
    ExecutionsPerMinute,
    /// Native calls per day, UTC (`native-calls-per-day`).
    NativeCallsPerDay,
    /// Fuel of the interpreter and the plugins per day, UTC (`fuel-per-day`).
    FuelPerDay,
    /// Executions and tasks admitted and not ended, those waiting for a slot
    /// included (`concurrent-executions`).
    ConcurrentExecutions,
}

impl Quota {
    /// Every quota, in the order an admission checks them.
    pub const ALL: [Quota; 4] = [
        Quota::ConcurrentExecutions,
        Quota::ExecutionsPerMinute,
        Quota::NativeCallsPerDay,
        Quota::FuelPerDay,
    ];

    /// Its key in a `[[quota]]` table, and its name in `_meta`, the audit log
    /// and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Quota::ExecutionsPerMinute => "executions-per-minute",
            Quota::NativeCallsPerDay => "native-calls-per-day",
            Quota::FuelPerDay => "fuel-per-day",
            Quota::ConcurrentExecutions => "concurrent-executions",
        }
    }

    /// The quota named `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|quota| quota.name() == name)
    }
}

impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One subject's quotas; `None`: no quota of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Executions started per minute.
    pub executions_per_minute: Option<u64>,
    /// Native calls per day.
    pub native_calls_per_day: Option<u64>,
    /// Fuel per day.
    pub fuel_per_day: Option<u64>,
    /// Executions admitted and not ended.
    pub concurrent_executions: Option<u64>,
}

impl QuotaLimits {
    /// These, `defaults` filling in what they leave out.
    pub fn or(self, defaults: QuotaLimits) -> QuotaLimits {
        QuotaLimits {
            executions_per_minute: self
                .executions_per_minute
                .or(defaults.executions_per_minute),
            native_calls_per_day: self.native_calls_per_day.or(defaults.native_calls_per_day),
            fuel_per_day: self.fuel_per_day.or(defaults.fuel_per_day),
            concurrent_executions: self
                .concurrent_executions
                .or(defaults.concurrent_executions),
        }
    }

    /// The limit of `quota`.
    pub fn get(&self, quota: Quota) -> Option<u64> {
        match quota {
            Quota::ExecutionsPerMinute => self.executions_per_minute,
            Quota::NativeCallsPerDay => self.native_calls_per_day,
            Quota::FuelPerDay => self.fuel_per_day,
            Quota::ConcurrentExecutions => self.concurrent_executions,
        }
    }

    /// Sets the limit of `quota`.
    pub fn set(&mut self, quota: Quota, limit: Option<u64>) {
        match quota {
            Quota::ExecutionsPerMinute => self.executions_per_minute = limit,
            Quota::NativeCallsPerDay => self.native_calls_per_day = limit,
            Quota::FuelPerDay => self.fuel_per_day = limit,
            Quota::ConcurrentExecutions => self.concurrent_executions = limit,
        }
    }

    /// Whether no quota is set.
    pub fn is_empty(&self) -> bool {
        Quota::ALL.iter().all(|quota| self.get(*quota).is_none())
    }
}

/// A quota on the calls of one capability, per subject, named as the config
/// file names it: counted when a call is about to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallQuota {
    /// Calls started per minute (`calls-per-minute`).
    CallsPerMinute,
    /// Calls per day, UTC (`calls-per-day`).
    CallsPerDay,
}

impl CallQuota {
    /// Every call quota, in the order a call checks them.
    pub const ALL: [CallQuota; 2] = [CallQuota::CallsPerMinute, CallQuota::CallsPerDay];

    /// Its key in a `[[quota]]` table with a `capability`, and its name in
    /// `_meta`, the audit log and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            CallQuota::CallsPerMinute => "calls-per-minute",
            CallQuota::CallsPerDay => "calls-per-day",
        }
    }

    /// The length of its window in milliseconds (fixed windows since the
    /// epoch: minutes, UTC days).
    pub(crate) fn window_ms(self) -> u64 {
        match self {
            CallQuota::CallsPerMinute => MINUTE_MS,
            CallQuota::CallsPerDay => DAY_MS,
        }
    }
}

impl std::fmt::Display for CallQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One subject's quotas on the calls of one capability; `None`: no quota of
/// that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallLimits {
    /// Calls started per minute.
    pub calls_per_minute: Option<u64>,
    /// Calls per day.
    pub calls_per_day: Option<u64>,
}

impl CallLimits {
    /// These, `defaults` filling in what they leave out.
    pub fn or(self, defaults: CallLimits) -> CallLimits {
        CallLimits {
            calls_per_minute: self.calls_per_minute.or(defaults.calls_per_minute),
            calls_per_day: self.calls_per_day.or(defaults.calls_per_day),
        }
    }

    /// The limit of `quota`.
    pub fn get(&self, quota: CallQuota) -> Option<u64> {
        match quota {
            CallQuota::CallsPerMinute => self.calls_per_minute,
            CallQuota::CallsPerDay => self.calls_per_day,
        }
    }

    /// Whether no quota is set.
    pub fn is_empty(&self) -> bool {
        CallQuota::ALL
            .iter()
            .all(|quota| self.get(*quota).is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_quota_has_one_name() {
        for quota in Quota::ALL {
            assert_eq!(Quota::named(quota.name()), Some(quota));
        }
        assert_eq!(Quota::named("fuel"), None);
        // No call quota shares a name with an execution's.
        for quota in CallQuota::ALL {
            assert_eq!(Quota::named(quota.name()), None);
        }
    }
}
