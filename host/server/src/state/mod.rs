//! The state capabilities (`state.get`, `state.put`, `state.delete`,
//! `state.list`): JSON-like values an agent keeps from one execution to the
//! next, per subject (another subject's keys are invisible), in the
//! [`Store`].
//!
//! They are a capability source like any other: found by search, described,
//! authorized by the policy by their IDs (their names), audited, charged to the
//! execution's native calls and result bytes. A write is done when its call
//! returns, so an execution that fails later keeps it; a call an approval replay
//! answers from its record is not made again, so neither is its write.

mod specs;

use std::sync::Arc;
use std::time::Instant;

use codemode_value::Value;

use crate::budget::Budget;
use crate::catalog::Capability;
use crate::source::{
    Arguments, CallBudget, CallFailure, CallFuture, CallOutcome, CapabilitySource, Offer, Provider,
    Publisher, Reserved, Session,
};
use crate::store::{Entry, Put, StateLimits, StateRefused, Store, Until};

pub use specs::{MAX_KEY_BYTES, MAX_TTL_SECONDS, STATE_ROOT, capabilities};

/// What the failure of a call says when the store does not answer (the reason
/// is logged, never told).
pub const STORE_UNAVAILABLE: &str = "the state store is unavailable";

/// What the state capabilities need: where their values are kept, and how much
/// one subject may keep.
#[derive(Debug, Clone)]
pub struct StateConfig {
    /// Where the values are kept.
    pub store: Arc<Store>,
    /// What one subject may keep.
    pub limits: StateLimits,
}

/// The provider of the state capabilities: one source, offered at start.
pub struct StateProvider {
    source: Arc<StateSource>,
}

impl StateProvider {
    /// The state capabilities over `store`, within `limits`.
    pub fn new(store: Arc<Store>, limits: StateLimits) -> Self {
        Self {
            source: Arc::new(StateSource {
                label: "state store".to_owned(),
                capabilities: capabilities(limits),
                store,
                limits,
            }),
        }
    }
}

impl Provider for StateProvider {
    fn name(&self) -> &str {
        &self.source.label
    }

    /// The root `state` and the IDs `state.*`, so that no plugin takes them.
    fn reserved(&self) -> Reserved {
        Reserved {
            roots: vec![STATE_ROOT.to_owned()],
            id_prefixes: vec![format!("{STATE_ROOT}.")],
        }
    }

    fn start(self: Arc<Self>, publisher: Publisher) {
        let offer = Offer {
            sources: vec![self.source.clone()],
            ..Offer::default()
        };
        if let Err(error) = publisher.offer(offer) {
            tracing::error!(reason = %error, "the state capabilities cannot serve");
        }
    }

    fn stop(&self, _deadline: Instant) {}
}

/// The state capabilities as one source.
struct StateSource {
    label: String,
    capabilities: Vec<Arc<Capability>>,
    store: Arc<Store>,
    limits: StateLimits,
}

impl CapabilitySource for StateSource {
    fn label(&self) -> &str {
        &self.label
    }

    fn capabilities(&self) -> &[Arc<Capability>] {
        &self.capabilities
    }

    fn session(self: Arc<Self>, _execution: u64) -> Box<dyn Session> {
        Box::new(StateSession(self))
    }
}

/// One execution's use of the state: nothing of its own.
struct StateSession(Arc<StateSource>);

impl Session for StateSession {
    fn call(&mut self, index: usize, arguments: Arguments, budget: CallBudget) -> CallFuture<'_> {
        let source = self.0.clone();
        Box::pin(async move { source.call(index, arguments, budget).await })
    }
}

/// One call, its arguments checked.
enum Call {
    Get { key: String },
    Put { key: String, entry: Entry },
    Delete { key: String },
    List { prefix: String },
}

/// What the store answered.
enum Answer {
    Value(Option<Vec<u8>>),
    Put(Put),
    Deleted(bool),
    Keys(Vec<String>),
}

impl StateSource {
    async fn call(&self, index: usize, arguments: Arguments, budget: CallBudget) -> CallOutcome {
        let Some(arguments) = arguments.take::<Vec<Value>>() else {
            return Err(CallFailure::Internal);
        };
        let call = self.checked(index, arguments)?;
        #[cfg(feature = "redis")]
        if let Some(redis) = self.store.redis() {
            let answered = match redis {
                Ok(redis) => in_redis(redis, call, &budget, self.limits)
                    .await
                    .map_err(|reason| self.store.error(reason)),
                Err(error) => Err(error),
            };
            let answer = answered.map_err(|error| {
                tracing::warn!(reason = %error, "a state call failed: the store did not answer");
                CallFailure::Failed(Some(STORE_UNAVAILABLE.to_owned()))
            })?;
            return result(answer, &budget);
        }
        let store = self.store.clone();
        let (subject, limits) = (budget.subject.clone(), self.limits);
        // A write waits for the store's writer no longer than the call may
        // last, and is not made once the call ended.
        let until = Until {
            deadline: budget.deadline,
            cancel: budget.cancel.clone(),
        };
        let run = move || match call {
            Call::Get { key } => store.state_get(&subject, &key).map(Answer::Value),
            Call::Put { key, entry } => store
                .state_put(&subject, &key, &entry, limits, &until)
                .map(Answer::Put),
            Call::Delete { key } => store
                .state_delete(&subject, &key, &until)
                .map(Answer::Deleted),
            Call::List { prefix } => store.state_list(&subject, &prefix).map(Answer::Keys),
        };
        // A file store may wait on the disk, or on another process's commit.
        let answered = if self.store.in_memory() {
            run()
        } else {
            tokio::task::spawn_blocking(run)
                .await
                .map_err(|_| CallFailure::Internal)?
        };
        let answer = answered.map_err(|error| {
            tracing::warn!(reason = %error, "a state call failed: the store did not answer");
            CallFailure::Failed(Some(STORE_UNAVAILABLE.to_owned()))
        })?;
        result(answer, &budget)
    }

    /// The call of capability `index` with `arguments`, checked.
    fn checked(&self, index: usize, arguments: Vec<Value>) -> Result<Call, CallFailure> {
        let mut arguments = arguments.into_iter();
        let mut next = || arguments.next().unwrap_or(Value::None);
        match specs::Op::at(index) {
            Some(specs::Op::Get) => Ok(Call::Get { key: key(next())? }),
            Some(specs::Op::Put) => {
                let key = key(next())?;
                let value = next();
                let ttl = next();
                let size = codemode_value::json_len(&value);
                if size as u64 > self.limits.max_value_bytes {
                    return Err(CallFailure::Exhausted(Budget::StateValueBytes));
                }
                let mut encoded = Vec::new();
                codemode_value::encode(&value, &mut encoded);
                let entry = Entry {
                    value: encoded,
                    size: (key.len() + size) as u64,
                    ttl_ms: ttl_ms(ttl)?,
                };
                Ok(Call::Put { key, entry })
            }
            Some(specs::Op::Delete) => Ok(Call::Delete { key: key(next())? }),
            Some(specs::Op::List) => {
                let prefix = match next() {
                    Value::None => String::new(),
                    Value::Str(prefix) => prefix,
                    _ => return Err(CallFailure::Internal),
                };
                Ok(Call::List { prefix })
            }
            None => Err(CallFailure::Internal),
        }
    }
}

/// `call` on the state in Redis, for the call's owner.
#[cfg(feature = "redis")]
async fn in_redis(
    redis: &crate::store::RedisState,
    call: Call,
    budget: &CallBudget,
    limits: StateLimits,
) -> Result<Answer, String> {
    let owner = &budget.subject;
    match call {
        Call::Get { key } => redis.get(owner, &key).await.map(Answer::Value),
        Call::Put { key, entry } => redis
            .put(owner, &key, &entry, limits)
            .await
            .map(Answer::Put),
        Call::Delete { key } => redis.delete(owner, &key).await.map(Answer::Deleted),
        Call::List { prefix } => redis.list(owner, &prefix).await.map(Answer::Keys),
    }
}

/// A key as given: 1 to [`MAX_KEY_BYTES`] bytes.
fn key(value: Value) -> Result<String, CallFailure> {
    match value {
        Value::Str(key) if !key.is_empty() && key.len() <= MAX_KEY_BYTES => Ok(key),
        Value::Str(_) => Err(CallFailure::Failed(Some(format!(
            "a key must be 1 to {MAX_KEY_BYTES} bytes"
        )))),
        _ => Err(CallFailure::Internal),
    }
}

/// How long a value given `ttl` (seconds, or `None`) lives, in milliseconds.
fn ttl_ms(ttl: Value) -> Result<Option<u64>, CallFailure> {
    let seconds = match ttl {
        Value::None => return Ok(None),
        Value::Int(seconds) if (1..=MAX_TTL_SECONDS).contains(&seconds) => seconds,
        Value::Int(_) => {
            return Err(CallFailure::Failed(Some(format!(
                "ttl must be 1 to {MAX_TTL_SECONDS} seconds, or None"
            ))));
        }
        _ => return Err(CallFailure::Internal),
    };
    Ok(Some(seconds.unsigned_abs().saturating_mul(1000)))
}

/// The result record of `answer`, within the call's depth and node budgets.
fn result(answer: Answer, budget: &CallBudget) -> CallOutcome {
    let field = |name: &str, value: Value| (name.to_owned(), value);
    let record = match answer {
        Answer::Value(None) => vec![
            field(specs::FOUND, Value::Bool(false)),
            field(specs::VALUE, Value::None),
        ],
        Answer::Value(Some(encoded)) => {
            // The record is depth 1; the value sits below it.
            let depth = budget.max_depth.saturating_sub(1);
            let value = codemode_value::decode(&encoded, depth).map_err(|error| match error {
                codemode_value::DecodeError::TooDeep => CallFailure::Exhausted(Budget::ValueDepth),
                codemode_value::DecodeError::Malformed => {
                    tracing::warn!("a state value in the store cannot be read");
                    CallFailure::Failed(Some(STORE_UNAVAILABLE.to_owned()))
                }
            })?;
            // The record and its two fields, then every value of the value.
            if nodes(&value) > budget.max_nodes.saturating_sub(3) {
                return Err(CallFailure::Exhausted(Budget::ValueBytes));
            }
            vec![
                field(specs::FOUND, Value::Bool(true)),
                field(specs::VALUE, value),
            ]
        }
        Answer::Put(Put::Created) => vec![field(specs::REPLACED, Value::Bool(false))],
        Answer::Put(Put::Replaced) => vec![field(specs::REPLACED, Value::Bool(true))],
        Answer::Put(Put::Refused(StateRefused::Keys)) => {
            return Err(CallFailure::Exhausted(Budget::StateKeys));
        }
        Answer::Put(Put::Refused(StateRefused::Bytes)) => {
            return Err(CallFailure::Exhausted(Budget::StateBytes));
        }
        Answer::Deleted(deleted) => vec![field(specs::DELETED, Value::Bool(deleted))],
        Answer::Keys(keys) => {
            if keys.len() > budget.max_nodes.saturating_sub(3) {
                return Err(CallFailure::Exhausted(Budget::ValueBytes));
            }
            let keys = keys.into_iter().map(Value::Str).collect();
            vec![field(specs::KEYS, Value::List(keys))]
        }
    };
    Ok(Value::Dict(record))
}

/// How many values `value` holds, itself included.
fn nodes(value: &Value) -> usize {
    let mut count = 0;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        count += 1;
        match value {
            Value::List(items) => pending.extend(items),
            Value::Dict(members) => pending.extend(members.iter().map(|(_, v)| v)),
            Value::None
            | Value::Bool(_)
            | Value::Int(_)
            | Value::BigInt { .. }
            | Value::Float(_)
            | Value::Str(_)
            | Value::NonStringKeys
            | Value::Unsupported(_) => {}
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_seconds_within_its_bounds() {
        assert_eq!(ttl_ms(Value::Int(10)), Ok(Some(10_000)));
        assert_eq!(ttl_ms(Value::None), Ok(None));
        let refused = Err(CallFailure::Failed(Some(format!(
            "ttl must be 1 to {MAX_TTL_SECONDS} seconds, or None"
        ))));
        assert_eq!(ttl_ms(Value::Int(0)), refused);
        assert_eq!(ttl_ms(Value::Int(MAX_TTL_SECONDS + 1)), refused);
        assert_eq!(
            ttl_ms(Value::Int(MAX_TTL_SECONDS)),
            Ok(Some(MAX_TTL_SECONDS as u64 * 1000))
        );
    }

    #[test]
    fn a_key_is_one_to_256_bytes() {
        assert_eq!(key(Value::Str("k".repeat(256))), Ok("k".repeat(256)));
        let refused = Err(CallFailure::Failed(Some(
            "a key must be 1 to 256 bytes".to_owned(),
        )));
        assert_eq!(key(Value::Str(String::new())), refused);
        assert_eq!(key(Value::Str("k".repeat(257))), refused);
    }
}
