//! The budgets of one execution, their defaults and how operators write them.
//!
//! Every budget is positive: zero never means unlimited. The defaults are the Go
//! digest's §8 plus ours (fuel and memory, see [`DEFAULT_MAX_FUEL`]).

use std::time::Duration;

use crate::units::{DEFAULT_MAX_MEMORY_BYTES, MAX_DURATION, MAX_DURATION_TEXT, MAX_MEMORY_BYTES};

/// Fuel (roughly one unit per WebAssembly instruction) an execution may spend in the
/// interpreter and every plugin instance together.
///
/// Calibration (`cargo bench --bench execute`, this repository's machine): a
/// 1,000,000-tick loop spends about 0.5 G fuel for `t = t + i % 7`, 1.1 G building a
/// small dict per iteration and 1.6 G for string formatting per iteration. The
/// default is 8 G: every such program within the default step budget finishes, with
/// room for plugin work, and a runaway native builtin (`sorted` over a huge list is
/// one tick) still stops.
pub const DEFAULT_MAX_FUEL: u64 = 8_000_000_000;

/// The largest `--max-total-memory`.
const MAX_TOTAL_MEMORY_BYTES: usize = 1 << 40;

/// All budgets of one execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of Starlark source.
    pub max_source_bytes: usize,
    /// Starlark ticks (function calls and loop iterations).
    pub max_execution_steps: u64,
    /// Wall time from the request's arrival (waiting for a slot counts) to the result.
    pub max_execution_time: Duration,
    /// Native calls attempted, counted before binding.
    pub max_native_calls: u64,
    /// Inclusive depth of any value crossing the sandbox (a scalar is 1).
    pub max_value_depth: usize,
    /// Type-preserving JSON bytes of any crossing value (arguments, each result, the
    /// final value); also the node budget of conversions.
    pub max_value_bytes: usize,
    /// Sum of the encoded sizes of successful native results in one execution.
    pub max_intermediate_value_bytes: usize,
    /// Executions running at once; more wait for a slot.
    pub max_concurrent_executions: usize,
    /// Fuel for the interpreter and every plugin instance together.
    pub max_fuel: u64,
    /// Linear memory of the interpreter, and of each plugin instance, in bytes.
    pub max_memory_bytes: usize,
    /// Linear memory of every sandbox of the process together, in bytes
    /// ([`crate::memory`]).
    pub max_total_memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_source_bytes: 65_536,
            max_execution_steps: 1_000_000,
            max_execution_time: Duration::from_secs(5),
            max_native_calls: 100,
            max_value_depth: 32,
            max_value_bytes: 1_048_576,
            max_intermediate_value_bytes: 8_388_608,
            max_concurrent_executions: 8,
            max_fuel: DEFAULT_MAX_FUEL,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_total_memory_bytes: crate::memory::default_total(),
        }
    }
}

/// A budget that is zero (or too large for the sandbox).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be {requirement}")]
pub struct LimitError {
    /// The flag's name, e.g. `--max-native-calls`.
    pub field: &'static str,
    /// What it must be.
    pub requirement: &'static str,
}

/// The budgets of `new` applied to limits in force, and those of its changes
/// that need a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retuned {
    /// The limits in force with every change that can take effect while serving.
    pub limits: Limits,
    /// The flags whose change needs a restart (they keep their values), e.g.
    /// `--max-memory`: the sandboxes' pool was sized by them.
    pub need_restart: Vec<&'static str>,
}

impl Limits {
    /// `new` applied to these limits in force: every budget of one execution
    /// changes for the executions that start after it; what sized the sandboxes
    /// (`--max-concurrent-executions`, `--max-memory`, `--max-total-memory`) keeps
    /// its value and is named in [`Retuned::need_restart`].
    pub fn retune(&self, new: &Limits) -> Retuned {
        let mut need_restart = Vec::new();
        if new.max_concurrent_executions != self.max_concurrent_executions {
            need_restart.push("--max-concurrent-executions");
        }
        if new.max_memory_bytes != self.max_memory_bytes {
            need_restart.push("--max-memory");
        }
        if new.max_total_memory_bytes != self.max_total_memory_bytes {
            need_restart.push("--max-total-memory");
        }
        Retuned {
            limits: Limits {
                max_concurrent_executions: self.max_concurrent_executions,
                max_memory_bytes: self.max_memory_bytes,
                max_total_memory_bytes: self.max_total_memory_bytes,
                ..new.clone()
            },
            need_restart,
        }
    }

    /// Checks every budget is positive and fits the sandbox.
    ///
    /// # Errors
    ///
    /// The first [`LimitError`].
    pub fn validate(&self) -> Result<(), LimitError> {
        let positive = |ok: bool, field: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(LimitError {
                    field,
                    requirement: "positive",
                })
            }
        };
        positive(self.max_source_bytes > 0, "--max-source-bytes")?;
        positive(self.max_execution_steps > 0, "--max-execution-steps")?;
        positive(!self.max_execution_time.is_zero(), "--max-execution-time")?;
        positive(self.max_native_calls > 0, "--max-native-calls")?;
        positive(self.max_value_depth > 0, "--max-value-depth")?;
        positive(self.max_value_bytes > 0, "--max-value-bytes")?;
        positive(
            self.max_intermediate_value_bytes > 0,
            "--max-intermediate-value-bytes",
        )?;
        positive(
            self.max_concurrent_executions > 0,
            "--max-concurrent-executions",
        )?;
        positive(self.max_fuel > 0, "--max-fuel")?;
        positive(self.max_memory_bytes > 0, "--max-memory")?;
        if self.max_value_bytes > u32::MAX as usize || self.max_value_depth > u32::MAX as usize {
            return Err(LimitError {
                field: "--max-value-bytes",
                requirement: "below 4 GiB",
            });
        }
        if self.max_execution_time > MAX_DURATION {
            return Err(LimitError {
                field: "--max-execution-time",
                requirement: MAX_DURATION_TEXT,
            });
        }
        if self.max_memory_bytes > MAX_MEMORY_BYTES {
            return Err(LimitError {
                field: "--max-memory",
                requirement: "at most 4GiB (a 32-bit linear memory)",
            });
        }
        if self.max_total_memory_bytes < self.max_memory_bytes {
            return Err(LimitError {
                field: "--max-total-memory",
                requirement: "at least --max-memory",
            });
        }
        if self.max_total_memory_bytes > MAX_TOTAL_MEMORY_BYTES {
            return Err(LimitError {
                field: "--max-total-memory",
                requirement: "at most 1TiB",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retuning_changes_an_executions_budgets_and_names_what_needs_a_restart() {
        let running = Limits::default();
        let new = Limits {
            max_execution_time: Duration::from_secs(9),
            max_native_calls: 7,
            max_memory_bytes: running.max_memory_bytes / 2,
            max_concurrent_executions: 3,
            ..Limits::default()
        };
        let retuned = running.retune(&new);
        assert_eq!(
            retuned.limits,
            Limits {
                max_execution_time: Duration::from_secs(9),
                max_native_calls: 7,
                ..Limits::default()
            }
        );
        assert_eq!(
            retuned.need_restart,
            ["--max-concurrent-executions", "--max-memory"]
        );
        assert_eq!(running.retune(&running).need_restart, Vec::<&str>::new());
    }

    #[test]
    fn defaults_are_the_digest_values() {
        let limits = Limits::default();
        assert_eq!(limits.max_source_bytes, 65_536);
        assert_eq!(limits.max_execution_steps, 1_000_000);
        assert_eq!(limits.max_execution_time, Duration::from_secs(5));
        assert_eq!(limits.max_native_calls, 100);
        assert_eq!(limits.max_value_depth, 32);
        assert_eq!(limits.max_value_bytes, 1_048_576);
        assert_eq!(limits.max_intermediate_value_bytes, 8_388_608);
        assert_eq!(limits.max_concurrent_executions, 8);
        assert_eq!(limits.validate(), Ok(()));
    }

    #[test]
    fn zero_is_never_unlimited() {
        let limits = Limits {
            max_native_calls: 0,
            ..Limits::default()
        };
        assert_eq!(
            limits.validate().unwrap_err().to_string(),
            "--max-native-calls must be positive"
        );
        let limits = Limits {
            max_execution_time: Duration::ZERO,
            ..Limits::default()
        };
        assert_eq!(
            limits.validate().unwrap_err().to_string(),
            "--max-execution-time must be positive"
        );
    }
}
