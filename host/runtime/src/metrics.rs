//! Counters, gauges and histograms for operators, served at `/metrics` in the
//! OpenMetrics text format by the `prometheus-client` crate.
//!
//! Recording is an atomic add on the execution path (an execution's successful
//! calls are counted once, when it ends); encoding happens only when scraped.
//! Outcomes are the fixed error texts (or `ok`), never a detail, so label values
//! stay few and hold no caller data.

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `codemode_reloads_total{outcome}`: every changed file loaded.
pub const RELOAD_OK: &str = "ok";
/// `codemode_reloads_total{outcome}`: some file failed to load or was refused;
/// the rest was applied.
pub const RELOAD_FAILED: &str = "failed";
/// `codemode_reloads_total{outcome}`: nothing was applied (the folder could not be
/// listed, or the catalog not built).
pub const RELOAD_ERROR: &str = "error";

/// `codemode_config_reloads_total{file,outcome}`: a reloaded file (`tokens`,
/// `policy`, `config`) is in force.
pub const CONFIG_RELOAD_OK: &str = "ok";
/// `codemode_config_reloads_total{file,outcome}`: a reloaded file did not read,
/// parse or compile (or took too long); the one before stays in force.
pub const CONFIG_RELOAD_ERROR: &str = "error";
/// The files a configuration reload reads, as `codemode_config_reloads_total`
/// names them.
pub const CONFIG_FILES: [&str; 3] = ["tokens", "policy", "config"];

/// The outcomes of an execute a server counts from its start (each at 0 until
/// one happens), so that a rate over them has a start: `ok`, every fixed error
/// text, and `input required`.
const EXECUTE_OUTCOMES: [&str; 12] = [
    "ok",
    crate::error::UNAUTHENTICATED,
    crate::error::CAPABILITY_NOT_FOUND,
    crate::error::INVALID_PROGRAM,
    crate::error::INVALID_CAPABILITY_ARGUMENTS,
    crate::error::PERMISSION_DENIED,
    crate::error::AUTHORIZATION_POLICY_FAILURE,
    crate::error::RESOURCE_LIMIT_EXCEEDED,
    crate::error::CAPABILITY_FAILED,
    crate::error::CONTEXT_CANCELED,
    crate::error::INTERNAL_FAILURE,
    "input required",
];

/// Upper bounds of the execution latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0,
];

/// Upper bounds of the execution fuel histogram.
const FUEL_BUCKETS: [f64; 8] = [1e5, 1e6, 1e7, 1e8, 1e9, 2e9, 4e9, 8e9];

/// A label value from outside (a capability, a plugin file, an upstream name),
/// escaped as the text format needs: the crate writes label values as they are,
/// and a file name holding `"` or a newline would otherwise forge samples.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct Text(String);

impl EncodeLabelValue for Text {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        std::fmt::Write::write_str(encoder, &escape(&self.0))
    }
}

/// A label value: backslash, double quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The label of a metric counted by outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

/// The labels of a native call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Call {
    capability: Text,
    outcome: &'static str,
}

/// The labels of a configuration reload.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigReload {
    file: &'static str,
    outcome: &'static str,
}

/// The label of a quota.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuotaLabel {
    quota: &'static str,
}

/// The label of a plugin file.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Plugin {
    plugin: Text,
}

/// The label of an upstream MCP server.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabel {
    upstream: Text,
}

/// What the server counts; each metric is registered once, in the order of the
/// exposition.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    executes: Family<Outcome, Counter>,
    native_calls: Family<Call, Counter>,
    plugin_load_failures: Family<Plugin, Counter>,
    reloads: Family<Outcome, Counter>,
    config_reloads: Family<ConfigReload, Counter>,
    approvals: Family<Outcome, Counter>,
    quota_refusals: Family<QuotaLabel, Counter>,
    http_unauthenticated: Counter,
    latency: Histogram,
    fuel: Histogram,
    plugins_loaded: Gauge,
    capabilities: Gauge,
    sandbox_memory: Gauge,
    upstreams: Family<UpstreamLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            registry: Registry::default(),
            executes: Family::default(),
            native_calls: Family::default(),
            plugin_load_failures: Family::default(),
            reloads: Family::default(),
            config_reloads: Family::default(),
            approvals: Family::default(),
            quota_refusals: Family::default(),
            http_unauthenticated: Counter::default(),
            latency: Histogram::new(LATENCY_BUCKETS),
            fuel: Histogram::new(FUEL_BUCKETS),
            plugins_loaded: Gauge::default(),
            capabilities: Gauge::default(),
            sandbox_memory: Gauge::default(),
            upstreams: Family::default(),
        };
        let mut registry = Registry::default();
        registry.register(
            "codemode_executes",
            "Finished execute calls by outcome",
            metrics.executes.clone(),
        );
        registry.register(
            "codemode_native_calls",
            "Native calls by capability and outcome",
            metrics.native_calls.clone(),
        );
        registry.register(
            "codemode_plugin_load_failures",
            "Plugin files that failed to load or were refused, at start or on a reload",
            metrics.plugin_load_failures.clone(),
        );
        registry.register(
            "codemode_reloads",
            "Reloads of the plugins folder by outcome (ok, failed: some file did not load, error: nothing applied)",
            metrics.reloads.clone(),
        );
        registry.register(
            "codemode_config_reloads",
            "Reloads of --tokens, --policy and --config (SIGHUP or a change of the file) by file and outcome (ok, error: the one before stays)",
            metrics.config_reloads.clone(),
        );
        registry.register(
            "codemode_approvals",
            "Native calls a policy said to ask a human about, by outcome (approved, approved for this execution, approved earlier, declined, timed out, not asked, canceled)",
            metrics.approvals.clone(),
        );
        registry.register(
            "codemode_quota_refusals",
            "Executions refused by a quota, by quota (executions-per-minute, native-calls-per-day, fuel-per-day, concurrent-executions)",
            metrics.quota_refusals.clone(),
        );
        registry.register(
            "codemode_http_unauthenticated",
            "HTTP requests refused without a valid bearer token",
            metrics.http_unauthenticated.clone(),
        );
        registry.register(
            "codemode_execute_duration_seconds",
            "Wall time of execute calls, queueing included",
            metrics.latency.clone(),
        );
        registry.register(
            "codemode_execute_fuel",
            "Fuel burned per execution, interpreter and plugins",
            metrics.fuel.clone(),
        );
        registry.register(
            "codemode_plugins_loaded",
            "Plugins being served",
            metrics.plugins_loaded.clone(),
        );
        registry.register(
            "codemode_capabilities",
            "Capabilities being served",
            metrics.capabilities.clone(),
        );
        registry.register(
            "codemode_sandbox_memory_bytes",
            "Linear memory reserved by every sandbox together (--max-total-memory)",
            metrics.sandbox_memory.clone(),
        );
        registry.register(
            "codemode_upstream_up",
            "Whether an upstream MCP server is serving (1) or not (0)",
            metrics.upstreams.clone(),
        );
        // Every fixed outcome from the start, at 0.
        for outcome in EXECUTE_OUTCOMES {
            let _ = metrics.executes.get_or_create(&Outcome { outcome });
        }
        for outcome in [RELOAD_OK, RELOAD_FAILED, RELOAD_ERROR] {
            let _ = metrics.reloads.get_or_create(&Outcome { outcome });
        }
        for file in CONFIG_FILES {
            for outcome in [CONFIG_RELOAD_OK, CONFIG_RELOAD_ERROR] {
                let _ = metrics
                    .config_reloads
                    .get_or_create(&ConfigReload { file, outcome });
            }
        }
        Self {
            registry,
            ..metrics
        }
    }
}

/// A count as a gauge's value.
fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

impl Metrics {
    /// One finished `execute`: its outcome (`ok` or a fixed error text) and wall time.
    pub fn execute(&self, outcome: &'static str, elapsed: Duration) {
        self.executes.get_or_create(&Outcome { outcome }).inc();
        self.latency.observe(elapsed.as_secs_f64());
    }

    /// The fuel one execution burned (interpreter and plugins).
    pub fn fuel(&self, fuel: u64) {
        self.fuel.observe(fuel as f64);
    }

    /// One native call to `capability` and its outcome.
    pub fn native_call(&self, capability: &str, outcome: &'static str) {
        self.native_calls(capability, outcome, 1);
    }

    /// `count` native calls of `capability` ended with `outcome` (an execution's
    /// successful calls are counted together when it ends).
    pub fn native_calls(&self, capability: &str, outcome: &'static str, count: u64) {
        let labels = Call {
            capability: Text(capability.to_owned()),
            outcome,
        };
        self.native_calls.get_or_create(&labels).inc_by(count);
    }

    /// The plugins being served.
    pub fn plugins(&self, plugins: usize) {
        self.plugins_loaded.set(gauge_value(plugins));
    }

    /// The capabilities being served.
    pub fn capabilities(&self, capabilities: usize) {
        self.capabilities.set(gauge_value(capabilities));
    }

    /// Whether upstream `name` serves now (the `codemode_upstream_up` gauge).
    pub fn upstream(&self, name: &str, up: bool) {
        let labels = UpstreamLabel {
            upstream: Text(name.to_owned()),
        };
        self.upstreams.get_or_create(&labels).set(i64::from(up));
    }

    /// Upstream `name` is no longer configured: its gauge goes.
    pub fn upstream_removed(&self, name: &str) {
        let labels = UpstreamLabel {
            upstream: Text(name.to_owned()),
        };
        self.upstreams.remove(&labels);
    }

    /// Plugin file `plugin` failed to load, or loaded and was refused (at start or
    /// on a reload).
    pub fn plugin_load_failure(&self, plugin: &str) {
        let labels = Plugin {
            plugin: Text(plugin.to_owned()),
        };
        self.plugin_load_failures.get_or_create(&labels).inc();
    }

    /// One reload of the plugins folder and its outcome ([`RELOAD_OK`],
    /// [`RELOAD_FAILED`], [`RELOAD_ERROR`]).
    pub fn reload(&self, outcome: &'static str) {
        self.reloads.get_or_create(&Outcome { outcome }).inc();
    }

    /// One reload of the configuration file `file` (one of [`CONFIG_FILES`])
    /// and its outcome ([`CONFIG_RELOAD_OK`], [`CONFIG_RELOAD_ERROR`]).
    pub fn config_reload(&self, file: &'static str, outcome: &'static str) {
        self.config_reloads
            .get_or_create(&ConfigReload { file, outcome })
            .inc();
    }

    /// One call a policy said to ask about ended its asking with `outcome`.
    pub fn approval(&self, outcome: &'static str) {
        self.approvals.get_or_create(&Outcome { outcome }).inc();
    }

    /// One execution refused by the quota `quota`.
    pub fn quota_refusal(&self, quota: &'static str) {
        self.quota_refusals
            .get_or_create(&QuotaLabel { quota })
            .inc();
    }

    /// One HTTP request refused for want of a valid bearer token.
    pub fn http_unauthenticated(&self) {
        self.http_unauthenticated.inc();
    }

    /// Plugins serving now (the `codemode_plugins_loaded` gauge).
    pub fn plugins_loaded(&self) -> usize {
        usize::try_from(self.plugins_loaded.get()).unwrap_or_default()
    }

    /// Capabilities serving now (the `codemode_capabilities` gauge).
    pub fn capabilities_serving(&self) -> usize {
        usize::try_from(self.capabilities.get()).unwrap_or_default()
    }

    /// Everything, in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        self.sandbox_memory
            .set(gauge_value(crate::memory::TOTAL.used()));
        let mut out = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(reason = %error, "cannot encode the metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixed_outcome_is_there_from_the_start_at_zero() {
        let metrics = Metrics::default();
        metrics.config_reload("tokens", CONFIG_RELOAD_OK);
        let text = metrics.render();
        let mut expected = vec![
            "codemode_executes_total{outcome=\"ok\"} 0".to_owned(),
            "codemode_executes_total{outcome=\"resource limit exceeded\"} 0".to_owned(),
            "codemode_executes_total{outcome=\"input required\"} 0".to_owned(),
            "codemode_reloads_total{outcome=\"error\"} 0".to_owned(),
            "codemode_config_reloads_total{file=\"tokens\",outcome=\"ok\"} 1".to_owned(),
            "# TYPE codemode_config_reloads counter".to_owned(),
        ];
        for file in CONFIG_FILES {
            expected.push(format!(
                "codemode_config_reloads_total{{file=\"{file}\",outcome=\"error\"}} 0"
            ));
        }
        for line in &expected {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("codemode_executes_total"))
                .count(),
            EXECUTE_OUTCOMES.len()
        );
    }

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let metrics = Metrics::default();
        metrics.plugins(3);
        metrics.capabilities(9);
        metrics.execute("ok", Duration::from_micros(400));
        metrics.execute("ok", Duration::from_millis(20));
        metrics.execute("permission denied", Duration::from_secs(10));
        metrics.fuel(85_000);
        metrics.native_call("records.lookup", "ok");
        metrics.native_call("records.lookup", "ok");
        metrics.native_call("records.query", "permission denied");
        metrics.upstream("time", true);
        metrics.upstream("git", true);
        metrics.upstream("git", false);
        metrics.plugin_load_failure("broken.wasm");
        metrics.plugin_load_failure("broken.wasm");
        metrics.reload(RELOAD_OK);
        metrics.reload(RELOAD_FAILED);
        metrics.reload(RELOAD_OK);
        metrics.http_unauthenticated();
        let text = metrics.render();
        let expected = [
            "codemode_executes_total{outcome=\"ok\"} 2",
            "codemode_executes_total{outcome=\"permission denied\"} 1",
            "codemode_native_calls_total{capability=\"records.lookup\",outcome=\"ok\"} 2",
            "codemode_native_calls_total{capability=\"records.query\",outcome=\"permission denied\"} 1",
            "codemode_execute_duration_seconds_bucket{le=\"0.00025\"} 0",
            "codemode_execute_duration_seconds_bucket{le=\"0.0005\"} 1",
            "codemode_execute_duration_seconds_bucket{le=\"0.05\"} 2",
            "codemode_execute_duration_seconds_bucket{le=\"5.0\"} 2",
            "codemode_execute_duration_seconds_bucket{le=\"+Inf\"} 3",
            "codemode_execute_duration_seconds_count 3",
            "codemode_execute_fuel_bucket{le=\"100000.0\"} 1",
            "codemode_execute_fuel_sum 85000.0",
            "codemode_plugins_loaded 3",
            "codemode_capabilities 9",
            "# TYPE codemode_execute_fuel histogram",
            "# HELP codemode_plugins_loaded Plugins being served.",
            "codemode_upstream_up{upstream=\"git\"} 0",
            "codemode_upstream_up{upstream=\"time\"} 1",
            "# TYPE codemode_upstream_up gauge",
            "codemode_plugin_load_failures_total{plugin=\"broken.wasm\"} 2",
            "# TYPE codemode_plugin_load_failures counter",
            "codemode_reloads_total{outcome=\"failed\"} 1",
            "codemode_reloads_total{outcome=\"ok\"} 2",
            "codemode_http_unauthenticated_total 1",
        ];
        for line in expected {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn the_exposition_is_pinned() {
        let metrics = Metrics::default();
        metrics.plugins(1);
        metrics.capabilities(2);
        metrics.execute("ok", Duration::from_millis(3));
        metrics.fuel(2_000_000);
        metrics.native_calls("records.lookup", "ok", 3);
        metrics.upstream("git", true);
        metrics.plugin_load_failure("odd \"name\".wasm");
        metrics.reload(RELOAD_ERROR);
        let text = metrics.render();
        // Process-wide, and other tests' sandboxes come and go: read as rendered.
        let reserved = text
            .lines()
            .find_map(|line| line.strip_prefix("codemode_sandbox_memory_bytes "))
            .unwrap_or("missing")
            .to_owned();
        assert!(reserved.parse::<u64>().is_ok(), "{text}");
        let bucket = |name: &str, bounds: &[&str], counts: &[u64]| -> String {
            bounds
                .iter()
                .zip(counts)
                .map(|(le, n)| format!("{name}_bucket{{le=\"{le}\"}} {n}\n"))
                .collect()
        };
        let latency = bucket(
            "codemode_execute_duration_seconds",
            &[
                "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.05", "0.1",
                "0.5", "1.0", "5.0", "+Inf",
            ],
            &[0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
        );
        let fuel = bucket(
            "codemode_execute_fuel",
            &[
                "100000.0",
                "1000000.0",
                "10000000.0",
                "100000000.0",
                "1000000000.0",
                "2000000000.0",
                "4000000000.0",
                "8000000000.0",
                "+Inf",
            ],
            &[0, 0, 1, 1, 1, 1, 1, 1, 1],
        );
        let expected = format!(
            "# HELP codemode_executes Finished execute calls by outcome.\n\
             # TYPE codemode_executes counter\n\
             codemode_executes_total{{outcome=\"ok\"}} 1\n\
             codemode_executes_total{{outcome=\"unauthenticated\"}} 0\n\
             codemode_executes_total{{outcome=\"capability not found\"}} 0\n\
             codemode_executes_total{{outcome=\"invalid program\"}} 0\n\
             codemode_executes_total{{outcome=\"invalid capability arguments\"}} 0\n\
             codemode_executes_total{{outcome=\"permission denied\"}} 0\n\
             codemode_executes_total{{outcome=\"authorization policy failure\"}} 0\n\
             codemode_executes_total{{outcome=\"resource limit exceeded\"}} 0\n\
             codemode_executes_total{{outcome=\"capability failed\"}} 0\n\
             codemode_executes_total{{outcome=\"context canceled\"}} 0\n\
             codemode_executes_total{{outcome=\"internal failure\"}} 0\n\
             codemode_executes_total{{outcome=\"input required\"}} 0\n\
             # HELP codemode_native_calls Native calls by capability and outcome.\n\
             # TYPE codemode_native_calls counter\n\
             codemode_native_calls_total{{capability=\"records.lookup\",outcome=\"ok\"}} 3\n\
             # HELP codemode_plugin_load_failures Plugin files that failed to load or were refused, at start or on a reload.\n\
             # TYPE codemode_plugin_load_failures counter\n\
             codemode_plugin_load_failures_total{{plugin=\"odd \\\"name\\\".wasm\"}} 1\n\
             # HELP codemode_reloads Reloads of the plugins folder by outcome (ok, failed: some file did not load, error: nothing applied).\n\
             # TYPE codemode_reloads counter\n\
             codemode_reloads_total{{outcome=\"error\"}} 1\n\
             codemode_reloads_total{{outcome=\"ok\"}} 0\n\
             codemode_reloads_total{{outcome=\"failed\"}} 0\n\
             # HELP codemode_config_reloads Reloads of --tokens, --policy and --config (SIGHUP or a change of the file) by file and outcome (ok, error: the one before stays).\n\
             # TYPE codemode_config_reloads counter\n\
             codemode_config_reloads_total{{file=\"tokens\",outcome=\"ok\"}} 0\n\
             codemode_config_reloads_total{{file=\"tokens\",outcome=\"error\"}} 0\n\
             codemode_config_reloads_total{{file=\"policy\",outcome=\"ok\"}} 0\n\
             codemode_config_reloads_total{{file=\"policy\",outcome=\"error\"}} 0\n\
             codemode_config_reloads_total{{file=\"config\",outcome=\"ok\"}} 0\n\
             codemode_config_reloads_total{{file=\"config\",outcome=\"error\"}} 0\n\
             # HELP codemode_http_unauthenticated HTTP requests refused without a valid bearer token.\n\
             # TYPE codemode_http_unauthenticated counter\n\
             codemode_http_unauthenticated_total 0\n\
             # HELP codemode_execute_duration_seconds Wall time of execute calls, queueing included.\n\
             # TYPE codemode_execute_duration_seconds histogram\n\
             codemode_execute_duration_seconds_sum 0.003\n\
             codemode_execute_duration_seconds_count 1\n\
             {latency}\
             # HELP codemode_execute_fuel Fuel burned per execution, interpreter and plugins.\n\
             # TYPE codemode_execute_fuel histogram\n\
             codemode_execute_fuel_sum 2000000.0\n\
             codemode_execute_fuel_count 1\n\
             {fuel}\
             # HELP codemode_plugins_loaded Plugins being served.\n\
             # TYPE codemode_plugins_loaded gauge\n\
             codemode_plugins_loaded 1\n\
             # HELP codemode_capabilities Capabilities being served.\n\
             # TYPE codemode_capabilities gauge\n\
             codemode_capabilities 2\n\
             # HELP codemode_sandbox_memory_bytes Linear memory reserved by every sandbox together (--max-total-memory).\n\
             # TYPE codemode_sandbox_memory_bytes gauge\n\
             codemode_sandbox_memory_bytes {}\n\
             # HELP codemode_upstream_up Whether an upstream MCP server is serving (1) or not (0).\n\
             # TYPE codemode_upstream_up gauge\n\
             codemode_upstream_up{{upstream=\"git\"}} 1\n\
             # EOF\n",
            reserved
        );
        // A family's samples come in no set order: compare each family's as a set.
        assert_eq!(samples_sorted(&text), samples_sorted(&expected));
    }

    /// `text` with each run of sample lines sorted, comment lines in place.
    fn samples_sorted(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut run: Vec<String> = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') {
                run.sort();
                out.append(&mut run);
                out.push(line.to_owned());
            } else {
                run.push(line.to_owned());
            }
        }
        run.sort();
        out.append(&mut run);
        out
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let metrics = Metrics::default();
        metrics.plugin_load_failure("x\"} 1\ncodemode_forged 9\n#.wasm");
        let text = metrics.render();
        assert!(
            !text.lines().any(|line| line.starts_with("codemode_forged")),
            "{text}"
        );
    }
}
