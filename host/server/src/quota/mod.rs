//! Quotas: how much one subject may run across executions, and across replicas
//! sharing a store (`[[quota]]` tables of the config file, or the policy's
//! `--quota-decision`).
//!
//! Four quotas, each per subject and each optional: executions started per
//! minute, native calls per day, fuel per day, and executions (tasks
//! included) admitted and not ended (running, or waiting for a slot). Minutes
//! and days are fixed windows by the store's clock (UTC days), so every
//! replica sharing a Redis counts the same window.
//!
//! An execution is admitted in one transaction of the store (a Lua script in
//! Redis), which checks every quota and, only if all hold, counts the
//! execution, takes a lease among the admitted ones, and reserves native calls
//! and fuel: what its own budgets allow, or what is left of the day when that
//! is less. Its budgets become what was reserved, so an execution that reaches
//! the day's end of fuel is stopped like at its own `--max-fuel`, and two
//! replicas can never both spend the last unit. When it ends, what it reserved
//! and did not spend is given back, once. A process killed mid-execution gives
//! nothing back: its reservation counts as spent, and its lease ends at its
//! deadline.
//!
//! Quotas on one capability's calls (`calls-per-minute`, `calls-per-day`,
//! per subject) are counted apart, one transaction for each call of such a
//! capability just before it runs (after the policy allowed it, and a human
//! if asked): a refused call does not run, counts nothing, and stops its
//! execution like a budget; a call replayed from an approval's record is not
//! counted again.

mod calls;
mod gate;
mod subjects;

pub use crate::store::{CallLimits, CallQuota, Quota, QuotaLimits};
pub(crate) use calls::{CallCharge, CallQuotas};
pub(crate) use gate::{Admission, Lease};
pub use gate::{QuotaConfig, QuotaGate};
pub use subjects::{CapabilityQuota, QuotaHit, QuotaSubject, Quotas};
