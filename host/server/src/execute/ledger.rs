//! The ledger of one execution: every budget charged in one place, and the name of
//! the one that ran out.
//!
//! Fuel, time and memory are enforced by wasmtime (fuel, the epoch deadline, the
//! memory limiter) and by the bounded waits; the executor classifies their traps
//! into a [`Budget`] and records it here too. What the ledger counts itself are the
//! budgets no sandbox sees: native calls, the size of arguments crossing into the
//! host, the size of each result and of all results together.

use crate::budget::Budget;
use crate::error::ToolError;

use super::Limits;

/// Most bytes of the interpreter's encoding per byte of type-preserving JSON: an
/// integer takes 9 encoded bytes and at least 1 in JSON; every other kind of value
/// takes fewer per JSON byte.
pub(crate) const MAX_ENCODED_PER_JSON_BYTE: usize = 9;

/// What one execution has spent, against its limits.
#[derive(Debug)]
pub(crate) struct Ledger {
    limits: Limits,
    native_calls: u64,
    intermediate_bytes: usize,
    exhausted: Option<Budget>,
}

impl Ledger {
    /// A fresh ledger for an execution with `limits`.
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            native_calls: 0,
            intermediate_bytes: 0,
            exhausted: None,
        }
    }

    /// The limits charged against.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Native calls attempted so far.
    pub(crate) fn native_calls(&self) -> u64 {
        self.native_calls
    }

    /// Encoded bytes of the successful native results so far.
    pub(crate) fn intermediate_bytes(&self) -> usize {
        self.intermediate_bytes
    }

    /// The first budget that ran out, if one did.
    pub(crate) fn exhausted(&self) -> Option<Budget> {
        self.exhausted
    }

    /// Records that `budget` ran out (the first one recorded is the one reported)
    /// and returns the error the agent sees.
    pub(crate) fn exhaust(&mut self, budget: Budget) -> ToolError {
        self.exhausted.get_or_insert(budget);
        ToolError::ResourceLimit
    }

    /// Counts a native call, before anything about it can fail (failed calls count).
    pub(crate) fn charge_call(&mut self) -> Result<(), ToolError> {
        self.native_calls += 1;
        if self.native_calls > self.limits.max_native_calls {
            return Err(self.exhaust(Budget::NativeCalls));
        }
        Ok(())
    }

    /// Checks the encoded arguments before they are decoded, so that decoding costs
    /// no more than the budget allows: no value whose type-preserving JSON fits
    /// `max_value_bytes` encodes to more than this.
    pub(crate) fn check_encoded_arguments(&mut self, encoded: usize) -> Result<(), ToolError> {
        if encoded
            > self
                .limits
                .max_value_bytes
                .saturating_mul(MAX_ENCODED_PER_JSON_BYTE)
        {
            return Err(self.exhaust(Budget::ValueBytes));
        }
        Ok(())
    }

    /// Checks the arguments' type-preserving JSON size.
    pub(crate) fn check_arguments(&mut self, json_bytes: usize) -> Result<(), ToolError> {
        if json_bytes > self.limits.max_value_bytes {
            return Err(self.exhaust(Budget::ValueBytes));
        }
        Ok(())
    }

    /// How many bytes (and conversion nodes) the next result may take: the per-value
    /// budget or what is left of the intermediate budget, whichever is smaller.
    pub(crate) fn result_room(&self) -> usize {
        self.limits.max_value_bytes.min(self.intermediate_room())
    }

    fn intermediate_room(&self) -> usize {
        self.limits
            .max_intermediate_value_bytes
            .saturating_sub(self.intermediate_bytes)
    }

    /// The budget a result too large for [`Ledger::result_room`] ran out of.
    pub(crate) fn result_budget(&self) -> Budget {
        if self.intermediate_room() < self.limits.max_value_bytes {
            Budget::IntermediateValueBytes
        } else {
            Budget::ValueBytes
        }
    }

    /// Charges a successful result of `json_bytes`.
    pub(crate) fn charge_result(&mut self, json_bytes: usize) -> Result<(), ToolError> {
        if json_bytes > self.limits.max_value_bytes {
            return Err(self.exhaust(Budget::ValueBytes));
        }
        if json_bytes > self.intermediate_room() {
            return Err(self.exhaust(Budget::IntermediateValueBytes));
        }
        self.intermediate_bytes += json_bytes;
        Ok(())
    }

    /// Checks the final value's type-preserving JSON size.
    pub(crate) fn check_final_value(&mut self, json_bytes: usize) -> Result<(), ToolError> {
        if json_bytes > self.limits.max_value_bytes {
            return Err(self.exhaust(Budget::ValueBytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> Ledger {
        Ledger::new(Limits {
            max_native_calls: 2,
            max_value_bytes: 100,
            max_intermediate_value_bytes: 250,
            ..Limits::default()
        })
    }

    #[test]
    fn calls_are_counted_before_they_can_fail_and_the_budget_is_named() {
        let mut ledger = ledger();
        assert_eq!(ledger.charge_call(), Ok(()));
        assert_eq!(ledger.charge_call(), Ok(()));
        assert_eq!(ledger.charge_call(), Err(ToolError::ResourceLimit));
        assert_eq!(ledger.native_calls(), 3);
        assert_eq!(ledger.exhausted(), Some(Budget::NativeCalls));
    }

    #[test]
    fn results_are_charged_per_value_and_together() {
        let mut ledger = ledger();
        assert_eq!(ledger.result_room(), 100);
        assert_eq!(ledger.result_budget(), Budget::ValueBytes);
        assert_eq!(ledger.charge_result(100), Ok(()));
        assert_eq!(ledger.charge_result(100), Ok(()));
        assert_eq!(ledger.intermediate_bytes(), 200);
        assert_eq!(ledger.result_room(), 50);
        assert_eq!(ledger.result_budget(), Budget::IntermediateValueBytes);
        assert_eq!(ledger.charge_result(51), Err(ToolError::ResourceLimit));
        assert_eq!(ledger.exhausted(), Some(Budget::IntermediateValueBytes));
        assert_eq!(
            ledger.intermediate_bytes(),
            200,
            "nothing charged on failure"
        );
    }

    #[test]
    fn the_first_budget_to_run_out_is_the_one_reported() {
        let mut ledger = ledger();
        assert_eq!(ledger.charge_result(101), Err(ToolError::ResourceLimit));
        assert_eq!(ledger.exhaust(Budget::Fuel), ToolError::ResourceLimit);
        assert_eq!(ledger.exhausted(), Some(Budget::ValueBytes));
    }

    #[test]
    fn arguments_are_checked_encoded_and_as_json() {
        let mut ledger = ledger();
        assert_eq!(ledger.check_encoded_arguments(900), Ok(()));
        assert_eq!(
            ledger.check_encoded_arguments(901),
            Err(ToolError::ResourceLimit)
        );
        assert_eq!(ledger.check_arguments(100), Ok(()));
        assert_eq!(ledger.check_final_value(101), Err(ToolError::ResourceLimit));
    }
}
