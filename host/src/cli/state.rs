//! What lasts between executions (`--store`, `--max-state-keys`,
//! `--max-state-bytes`, `--max-state-value-bytes`), and whether quotas, which
//! are counted there, fail open (`--quota-fail-open`).

use codemode_server::store::{StateLimits, StoreLocation};
use codemode_server::units::parse_bytes;

/// Where the state capabilities keep their values, and how much one subject
/// may keep.
#[derive(Debug, clap::Args)]
pub struct StateFlags {
    /// Where what agents keep between executions goes (`state.put`): a file,
    /// `memory` (gone at exit), or redis://[:PASSWORD@]HOST:PORT/N for
    /// replicas [default: $XDG_STATE_HOME/codemode-host/store.redb or
    /// ~/.local/state/codemode-host/store.redb]
    ///
    /// The file is an embedded database made at the first state call (its
    /// folder too, both private to their owner). It survives a restart, and
    /// every server naming it shares it: the stdio servers several clients of
    /// one user start see the same values. Each subject (a token's subject,
    /// after its issuer; over stdio, and over HTTP without tokens, the one local
    /// subject) sees only its own keys, so two deployments whose tokens files
    /// name the same subjects need a store each. In Redis (CODEMODE_STORE keeps
    /// the password off the command line) the values and the limits are the
    /// replicas' together, wherever they run; while Redis does not answer,
    /// state calls fail and everything else is served.
    #[arg(long, value_name = "STORE", value_parser = StoreLocation::parse, value_hint = clap::ValueHint::FilePath)]
    pub store: Option<StoreLocation>,

    /// Keys one subject may keep [default: 1000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_state_keys: Option<u64>,

    /// Bytes of keys and values (as JSON) one subject may keep [default: 16MiB]
    #[arg(long, value_name = "SIZE", value_parser = positive_size)]
    pub max_state_bytes: Option<u64>,

    /// The largest value kept, as JSON [default: 1MiB]
    #[arg(long, value_name = "SIZE", value_parser = positive_size)]
    pub max_state_value_bytes: Option<u64>,

    /// Run executions without their quotas (the config file's `[[quota]]`
    /// tables) while the store does not answer, rather than refuse them
    ///
    /// Quotas are counted in the store (`--store`). When it does not answer
    /// (Redis away), an execution of a subject with quotas is refused with
    /// `internal failure` by default, so that no subject runs past its share,
    /// and so is a call of a capability with quotas (`capability` tables),
    /// stopping its program there; with this switch the execution runs on its
    /// own budgets and the call runs uncounted, and a warning is logged.
    #[arg(long)]
    pub quota_fail_open: bool,
}

impl StateFlags {
    /// Where the store is: `--store`, else its default.
    pub fn location(&self) -> StoreLocation {
        self.store
            .clone()
            .unwrap_or_else(StoreLocation::default_location)
    }

    /// What one subject may keep: the flags, else the defaults.
    pub fn limits(&self) -> StateLimits {
        let defaults = StateLimits::default();
        StateLimits {
            max_keys: self.max_state_keys.unwrap_or(defaults.max_keys),
            max_bytes: self.max_state_bytes.unwrap_or(defaults.max_bytes),
            max_value_bytes: self
                .max_state_value_bytes
                .unwrap_or(defaults.max_value_bytes),
        }
    }
}

/// A size above zero.
fn positive_size(text: &str) -> Result<u64, String> {
    match parse_bytes(text)? {
        0 => Err("must be positive (e.g. 1MiB)".to_owned()),
        size => Ok(size as u64),
    }
}
