//! What a [`Service`](super::Service) is built from, and why it may not start.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::audit::AuditLog;
use crate::authz::Authorizer;
use crate::catalog::SpecError;
use crate::execute::{LimitError, Limits, RunnerError};
use crate::openapi::OpenApiConfig;
use crate::plugins::LoadLimits;
use crate::quota::QuotaConfig;
use crate::source::{Provider, Skipped};
use crate::state::StateConfig;
use crate::telemetry::Telemetry;
use crate::upstream::UpstreamConfig;
use crate::upstream::UpstreamGate;
use codemode_core::exchange::TokenExchange;

/// What the service is built from.
///
/// There is no default: who decides on native calls must be said
/// ([`ServiceConfig::new`]); allowing every call is a choice
/// ([`crate::authz::AllowAll`]), never what an omission means.
#[derive(Clone)]
pub struct ServiceConfig {
    /// Who decides on native calls.
    pub authorizer: Arc<dyn Authorizer>,
    /// Where each native call's audit line goes; `None` keeps no audit log.
    pub audit: Option<Arc<AuditLog>>,
    /// The folder whose `*.wasm` files (non-recursive) are the plugins, each with its
    /// optional sidecar `<plugin>.toml` of grants.
    pub plugins_dir: PathBuf,
    /// Capability IDs to remove from search, describe and execute.
    pub disabled: Vec<String>,
    /// The budgets of every execution.
    pub limits: Limits,
    /// What loading one plugin may cost (size, compile and describe time).
    pub loading: LoadLimits,
    /// Where compiled components (the interpreter and the plugins) are cached; `None`
    /// compiles them at every start.
    pub cache_dir: Option<PathBuf>,
    /// MCP servers whose tools are capabilities too, connected while the plugins
    /// load.
    pub upstreams: Vec<UpstreamConfig>,
    /// Services described by OpenAPI whose operations are capabilities too,
    /// their specs loaded while the plugins load.
    pub openapi: Vec<OpenApiConfig>,
    /// Whether every plugin file must load: one that does not is a start error, and
    /// after a reload it makes [`Service::ready`] false.
    pub require_all_plugins: bool,
    /// Whether a missing plugins folder means no plugins (a gateway of upstreams
    /// only) instead of a start error.
    pub plugins_optional: bool,
    /// More capability sources, of the library user's own, after the plugins
    /// folder and the upstreams: their capabilities are searched, described,
    /// authorized, audited and budgeted as every other's.
    pub providers: Vec<Arc<dyn Provider>>,
    /// The state capabilities (`state.*`) and where their values are kept;
    /// `None` serves none.
    pub state: Option<StateConfig>,
    /// The subjects' quotas and where they are counted; `None`: no quotas.
    pub quotas: Option<QuotaConfig>,
    /// Where execution spans are exported (`Telemetry::start`, feature `otel`); `None` exports
    /// none (a request's trace context still reaches upstreams).
    pub telemetry: Option<Arc<Telemetry>>,
    /// What trades a caller's access token for one of an upstream's audience
    /// (`auth = "token-exchange"`); `None`: such upstreams' calls fail.
    pub token_exchange: Option<Arc<dyn TokenExchange>>,
    /// How long a request waits for a source it needs that is still starting
    /// (an upstream's first connection; [`DEFAULT_STARTUP_WAIT`]): an execute for
    /// those its program names, a search for all, a describe for the name's. Not
    /// part of the program's time budget.
    pub startup_wait: Duration,
    /// Holds the upstreams' children (those configured and those a reload
    /// adds) until it opens: a stdio server opens it once a client speaks.
    /// `None`: they start with the service.
    pub upstreams_gate: Option<UpstreamGate>,
    /// The plugins pulled from registries into `plugins_dir` (`[[plugin]]`),
    /// held for `/readyz`, which names the references not pulled yet.
    pub pulls: Option<Arc<crate::oci::Pulls>>,
}

/// How long a request waits for a source still starting, by default: an
/// upstream's first connection is bounded by the same 30 s.
pub const DEFAULT_STARTUP_WAIT: Duration = Duration::from_secs(30);

impl std::fmt::Debug for ServiceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let providers: Vec<&str> = self.providers.iter().map(|p| p.name()).collect();
        f.debug_struct("ServiceConfig")
            .field("authorizer", &self.authorizer)
            .field("audit", &self.audit)
            .field("plugins_dir", &self.plugins_dir)
            .field("disabled", &self.disabled)
            .field("limits", &self.limits)
            .field("loading", &self.loading)
            .field("cache_dir", &self.cache_dir)
            .field("upstreams", &self.upstreams)
            .field("openapi", &self.openapi)
            .field("require_all_plugins", &self.require_all_plugins)
            .field("plugins_optional", &self.plugins_optional)
            .field("providers", &providers)
            .field("state", &self.state)
            .field("quotas", &self.quotas)
            .field("telemetry", &self.telemetry.is_some())
            .field("token_exchange", &self.token_exchange.is_some())
            .field("startup_wait", &self.startup_wait)
            .field("upstreams_gate", &self.upstreams_gate)
            .finish()
    }
}

impl ServiceConfig {
    /// Serves the plugins in `plugins_dir`, every native call decided by
    /// `authorizer`; everything else at its default: the default budgets and load
    /// limits, nothing disabled, no audit log, no artifact cache.
    pub fn new(plugins_dir: impl Into<PathBuf>, authorizer: Arc<dyn Authorizer>) -> Self {
        Self {
            authorizer,
            audit: None,
            plugins_dir: plugins_dir.into(),
            disabled: Vec::new(),
            limits: Limits::default(),
            loading: LoadLimits::default(),
            cache_dir: None,
            upstreams: Vec::new(),
            openapi: Vec::new(),
            require_all_plugins: false,
            plugins_optional: false,
            providers: Vec::new(),
            state: None,
            quotas: None,
            telemetry: None,
            token_exchange: None,
            startup_wait: DEFAULT_STARTUP_WAIT,
            upstreams_gate: None,
            pulls: None,
        }
    }
}

/// Why the service could not start. Problems of single plugins are not start errors:
/// those plugins are logged and skipped.
///
/// An I/O cause is a `reason`, not an error `source`: the message already says it,
/// and a printer of error chains (`{:#}`) would say it twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The plugins folder could not be listed.
    #[error("plugins folder `{path}`: {reason}")]
    PluginsDir {
        /// The folder.
        path: PathBuf,
        /// Why it could not be listed.
        reason: std::io::Error,
    },
    /// The wasmtime engine could not be configured.
    #[error("cannot configure the WebAssembly engine: {0:#}")]
    Engine(wasmtime::Error),
    /// The catalog could not be built (e.g. an unknown `--disable` ID).
    #[error("{0}")]
    Catalog(SpecError),
    /// A budget is zero or out of range.
    #[error("{0}")]
    Limits(LimitError),
    /// The cache folder cannot be used (`precompile` needs it).
    #[error("cache folder `{path}`: {reason}")]
    Cache {
        /// The folder.
        path: PathBuf,
        /// Why it cannot be used.
        reason: std::io::Error,
    },
    /// The interpreter could not be prepared.
    #[error("{0}")]
    Runner(RunnerError),
    /// Every plugin must load ([`ServiceConfig::require_all_plugins`]) and these
    /// did not.
    #[error("{}", required_message(.0))]
    PluginsRequired(Vec<Skipped>),
}

/// The message of [`StartError::PluginsRequired`]: each file and its reason.
fn required_message(skipped: &[Skipped]) -> String {
    let mut message = format!(
        "every plugin must load, and {} did not:",
        if skipped.len() == 1 {
            "1 plugin".to_owned()
        } else {
            format!("{} plugins", skipped.len())
        }
    );
    for s in skipped {
        message.push_str(&format!("\n  {}: {}", s.plugin, s.reason));
    }
    message
}
