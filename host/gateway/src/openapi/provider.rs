//! One configured OpenAPI service as a capability-source provider: started, it
//! offers `starting` at once and loads its spec in the background (read,
//! parsed and converted off the runtime's workers), then offers the service,
//! or names why it serves nothing (`/readyz` lists it). A reload of the config
//! replaces it; a reload that keeps it reads its spec again and offers the new
//! version when the text changed ([`OpenApiProvider::refresh`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::task::JoinHandle;

use super::call::OpenApi;
use super::config::{ID_PREFIX, OpenApiConfig};
use super::operations::operations;
use super::spec::{self, Read};
use crate::json::schema::Stop;
use crate::source::{CapabilitySource, Offer, Provider, Publisher, Reserved, Skipped};
use crate::wait;

/// One configured OpenAPI service, as [`Provider`].
pub struct OpenApiProvider {
    config: OpenApiConfig,
    /// `openapi <name>`.
    name: String,
    /// Stops a load under way.
    stop: Arc<Stop>,
    /// Set once stopped: nothing more is offered.
    stopped: Arc<AtomicBool>,
    /// Where its offers go, once started.
    publisher: Mutex<Option<Publisher>>,
    /// The text of the spec serving now, to tell a changed one.
    serving: Arc<Mutex<Option<String>>>,
    /// The load under way.
    task: Mutex<Option<JoinHandle<()>>>,
    /// Counts the loads started: only the newest may offer, so a slow first
    /// load cannot withdraw what a later one offered.
    generation: Arc<AtomicU64>,
}

impl OpenApiProvider {
    /// The service `config` describes; nothing is read before [`Provider::start`].
    pub fn new(config: OpenApiConfig) -> Self {
        Self {
            name: Self::provider_name(&config.name),
            config,
            stop: Arc::new(Stop::default()),
            stopped: Arc::new(AtomicBool::new(false)),
            publisher: Mutex::new(None),
            serving: Arc::new(Mutex::new(None)),
            task: Mutex::new(None),
            generation: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The provider name of the service named `name` (`openapi github`).
    pub fn provider_name(name: &str) -> String {
        format!("openapi {name}")
    }

    /// Its configuration.
    pub fn config(&self) -> &OpenApiConfig {
        &self.config
    }

    /// Reads its spec again and offers it when its text changed (a reload of
    /// the config that kept this entry as it was); a spec that now fails to
    /// load leaves the last version serving, with a WARN.
    pub fn refresh(&self) {
        let publisher = self
            .publisher
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(publisher) = publisher {
            self.load(publisher, false);
        }
    }

    /// Loads the spec in the background and offers what it became; a failure
    /// is offered only while nothing of it serves (else it is logged and the
    /// last version serves on). A load started later ends this one.
    fn load(&self, publisher: Publisher, first: bool) {
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let newest = self.generation.clone();
        let current = move || newest.load(Ordering::Acquire) == generation;
        let config = self.config.clone();
        let (stop, stopped, serving) = (
            self.stop.clone(),
            self.stopped.clone(),
            self.serving.clone(),
        );
        let label = self.name.clone();
        let work = async move {
            let started = Instant::now();
            let read = spec::read(&config.spec).await;
            let unchanged = |read: &Read| {
                serving
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_deref()
                    == Some(read.text.as_str())
            };
            if let Ok(read) = &read
                && !first
                && unchanged(read)
            {
                return;
            }
            let converted = match read {
                Ok(read) => {
                    let (config, stop) = (config.clone(), stop.clone());
                    tokio::task::spawn_blocking(move || {
                        let built = build(&config, &read, &stop);
                        (built, read.text)
                    })
                    .await
                    .map_err(|error| format!("converting it failed: {error}"))
                    .and_then(|(built, text)| built.map(|built| (built, text)))
                }
                Err(reason) => Err(reason),
            };
            if !current() {
                return;
            }
            let served = serving
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some();
            let offer = match converted {
                Ok((service, text)) => {
                    tracing::info!(
                        openapi = %config.name,
                        operations = service.operation_count(),
                        base = %service.base(),
                        load_ms = started.elapsed().as_millis() as u64,
                        "spec loaded"
                    );
                    *serving
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(text);
                    Offer {
                        sources: vec![Arc::new(service) as Arc<dyn CapabilitySource>],
                        failures: Vec::new(),
                        starting: false,
                    }
                }
                Err(reason) if !served => {
                    tracing::error!(openapi = %config.name, spec = %config.spec, %reason, "spec not loaded: the service serves nothing");
                    Offer {
                        sources: Vec::new(),
                        failures: vec![Skipped {
                            plugin: label,
                            reason: format!("spec {}: {reason}", config.spec),
                            earlier_serves: false,
                        }],
                        starting: false,
                    }
                }
                Err(reason) => {
                    tracing::warn!(openapi = %config.name, spec = %config.spec, %reason, "spec not reloaded: the last version serves on");
                    return;
                }
            };
            if stopped.load(Ordering::Acquire) || !current() {
                return;
            }
            // Offering rebuilds the catalog: not on a runtime worker.
            let _ = tokio::task::spawn_blocking(move || publisher.offer(offer)).await;
        };
        let task = wait::spawn(work);
        if task.is_none() {
            tracing::error!(openapi = %self.config.name, "no runtime to load the spec on");
        }
        let older = std::mem::replace(
            &mut *self
                .task
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            task,
        );
        if let Some(older) = older {
            older.abort();
        }
    }
}

/// The service a spec's text describes, with what `config` says.
///
/// # Errors
///
/// Why it serves nothing, naming the place.
fn build(config: &OpenApiConfig, read: &Read, stop: &Stop) -> Result<OpenApi, String> {
    let document = spec::parse(&read.text)?;
    let base = base_url(config, &document, read.url.as_ref())?;
    if config.base_url.is_none() && !matches!(config.auth, super::config::OpenApiAuth::None) {
        // The spec chose where the credential goes: only encrypted, and only
        // to where the spec itself came from.
        crate::url::check_url("the spec's server", base.as_str())
            .map_err(|error| format!("{error}; it would carry a credential: give `base-url`"))?;
        if let Some(spec_url) = &read.url
            && spec_url.origin() != base.origin()
        {
            return Err(format!(
                "its server {base} is not where the spec came from, and it would carry a credential: give `base-url`"
            ));
        }
    }
    let built = operations(config, &document, stop)?;
    for reason in &built.left_out {
        tracing::warn!(openapi = %config.name, spec = %config.spec, %reason, "operation left out");
    }
    OpenApi::new(
        &config.name,
        base,
        config.timeout,
        config.auth.clone(),
        &config.headers,
        built.operations,
    )
}

/// Where requests go: `base_url`, else the spec's first server (relative to the
/// URL the spec came from; its variables at their defaults), else `/` of the
/// spec's URL.
///
/// # Errors
///
/// No base URL, or one that is not an absolute http(s) URL.
pub fn base_url(
    config: &OpenApiConfig,
    document: &serde_json::Map<String, serde_json::Value>,
    spec_url: Option<&url::Url>,
) -> Result<url::Url, String> {
    let (text, from) = match &config.base_url {
        Some(base) => (base.clone(), "base-url"),
        None => {
            let server = document.get("servers").and_then(|servers| servers.get(0));
            let Some(server) = server else {
                // OpenAPI: no `servers` is one server at `/`, beside the spec.
                return match spec_url {
                    Some(spec_url) => spec_url
                        .join("/")
                        .map_err(|error| format!("the spec's URL: {error}")),
                    None => Err(
                        "it names no server and is a file: give `base-url` in its [[openapi]] table"
                            .to_owned(),
                    ),
                };
            };
            let mut url = server
                .get("url")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| "its first server has no `url`".to_owned())?
                .to_owned();
            if let Some(serde_json::Value::Object(variables)) = server.get("variables") {
                for (name, variable) in variables {
                    if let Some(default) = variable.get("default").and_then(|d| d.as_str()) {
                        url = url.replace(&format!("{{{name}}}"), default);
                    }
                }
            }
            (url, "its first server")
        }
    };
    let parsed = match (url::Url::parse(&text), spec_url) {
        (Ok(parsed), _) => parsed,
        (Err(url::ParseError::RelativeUrlWithoutBase), Some(spec_url)) => spec_url
            .join(&text)
            .map_err(|error| format!("{from} `{text}`: {error}"))?,
        (Err(url::ParseError::RelativeUrlWithoutBase), None) => {
            return Err(format!(
                "{from} `{text}` is relative and the spec is a file: give `base-url` in its [[openapi]] table"
            ));
        }
        (Err(error), _) => return Err(format!("{from} `{text}`: {error}")),
    };
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(format!(
            "{from} `{text}` is not an http or https URL with a host"
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!(
            "{from} `{text}` must have no query and no fragment"
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("{from} must not carry a user name or password"));
    }
    Ok(parsed)
}

impl Provider for OpenApiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    /// Its name as the root of capability names and its `openapi:<name>/` IDs.
    fn reserved(&self) -> Reserved {
        Reserved::named(&self.config.name, ID_PREFIX)
    }

    /// Offers `starting` (programs naming it wait for the spec, within the
    /// service's startup wait), then loads the spec in the background.
    fn start(self: Arc<Self>, publisher: Publisher) {
        let _ = publisher.offer(Offer::starting());
        *self
            .publisher
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(publisher.clone());
        self.load(publisher, true);
    }

    fn stop(&self, deadline: Instant) {
        self.stopped.store(true, Ordering::Release);
        self.stop.set();
        if deadline <= Instant::now() {
            return;
        }
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = wait::until(deadline, None, task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openapi::{OpenApiAuth, SpecLocation};
    use crate::secret::Secret;

    fn config(base_url: Option<&str>, auth: OpenApiAuth) -> OpenApiConfig {
        OpenApiConfig {
            name: "shop".to_owned(),
            spec: SpecLocation::Url("https://specs.example.com/shop.json".to_owned()),
            base_url: base_url.map(str::to_owned),
            include: Vec::new(),
            exclude: Vec::new(),
            timeout: None,
            auth,
            headers: Default::default(),
        }
    }

    fn read(servers: &str) -> Read {
        Read {
            text: format!(r#"{{"openapi": "3.1.0", {servers} "paths": {{}}}}"#),
            url: url::Url::parse("https://specs.example.com/shop.json").ok(),
        }
    }

    fn base_of(config: &OpenApiConfig, read: &Read) -> Result<String, String> {
        build(config, read, &Stop::default()).map(|service| service.base().to_string())
    }

    #[test]
    fn the_spec_chooses_where_requests_go_only_without_a_credential_or_on_its_own_origin() {
        let bearer = OpenApiAuth::Bearer(Secret::new("t"));
        let elsewhere = r#""servers": [{"url": "https://collector.example.net/v1"}],"#;
        // Without a credential the spec's server is where requests go.
        assert_eq!(
            base_of(&config(None, OpenApiAuth::None), &read(elsewhere)),
            Ok("https://collector.example.net/v1".to_owned())
        );
        // With one, a server elsewhere than the spec's origin is refused.
        assert_eq!(
            base_of(&config(None, bearer.clone()), &read(elsewhere)),
            Err("its server https://collector.example.net/v1 is not where the spec came from, and it would carry a credential: give `base-url`".to_owned())
        );
        assert_eq!(
            base_of(&config(None, bearer.clone()), &read(r#""servers": [{"url": "http://specs.example.com/"}],"#)),
            Err("the spec's server http://specs.example.com/: must be https (http only on a loopback host); it would carry a credential: give `base-url`".to_owned())
        );
        // A relative server, and none at all, are the spec's own origin.
        assert_eq!(
            base_of(
                &config(None, bearer.clone()),
                &read(
                    r#""servers": [{"url": "/api/{v}", "variables": {"v": {"default": "v2"}}}],"#
                )
            ),
            Ok("https://specs.example.com/api/v2".to_owned())
        );
        assert_eq!(
            base_of(&config(None, bearer.clone()), &read("")),
            Ok("https://specs.example.com/".to_owned())
        );
        // `base-url` wins over any server the spec names.
        assert_eq!(
            base_of(
                &config(Some("https://api.example.com/v3"), bearer),
                &read(elsewhere)
            ),
            Ok("https://api.example.com/v3".to_owned())
        );
    }
}
