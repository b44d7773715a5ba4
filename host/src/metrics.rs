//! Counters and histograms for operators, rendered in the Prometheus text format at
//! `/metrics`.
//!
//! Plain atomics and one small map: recording costs nanoseconds on the execution
//! path, and rendering happens only when scraped. Outcomes are the fixed error texts
//! (or `ok`), never a detail, so label values stay few and hold no caller data.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// `codemode_reloads_total{outcome}`: every changed file loaded.
pub const RELOAD_OK: &str = "ok";
/// `codemode_reloads_total{outcome}`: some file failed to load or was refused;
/// the rest was applied.
pub const RELOAD_FAILED: &str = "failed";
/// `codemode_reloads_total{outcome}`: nothing was applied (the folder could not be
/// listed, or the catalog not built).
pub const RELOAD_ERROR: &str = "error";

/// Upper bounds of the execution latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0,
];

/// Upper bounds of the execution fuel histogram.
const FUEL_BUCKETS: [f64; 8] = [1e5, 1e6, 1e7, 1e8, 1e9, 2e9, 4e9, 8e9];

/// A cumulative histogram over fixed bounds.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum: Mutex<f64>,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum: Mutex::new(0.0),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: f64) {
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut sum) = self.sum.lock() {
            *sum += value;
        }
    }

    fn render(&self, out: &mut String, name: &str) {
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum.lock().map(|s| *s).unwrap_or_default();
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// What the server counts.
#[derive(Debug)]
pub struct Metrics {
    executes: Mutex<BTreeMap<&'static str, u64>>,
    /// Capability → outcome → count; nested so that counting a call looks the name
    /// up without allocating a key.
    native_calls: Mutex<BTreeMap<String, BTreeMap<&'static str, u64>>>,
    latency: Histogram,
    fuel: Histogram,
    plugins_loaded: AtomicU64,
    capabilities: AtomicU64,
    upstreams: Mutex<BTreeMap<String, bool>>,
    plugin_load_failures: Mutex<BTreeMap<String, u64>>,
    reloads: Mutex<BTreeMap<&'static str, u64>>,
    http_unauthenticated: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            executes: Mutex::new(BTreeMap::new()),
            native_calls: Mutex::new(BTreeMap::new()),
            latency: Histogram::new(&LATENCY_BUCKETS),
            fuel: Histogram::new(&FUEL_BUCKETS),
            plugins_loaded: AtomicU64::new(0),
            capabilities: AtomicU64::new(0),
            upstreams: Mutex::new(BTreeMap::new()),
            plugin_load_failures: Mutex::new(BTreeMap::new()),
            reloads: Mutex::new(BTreeMap::new()),
            http_unauthenticated: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// One finished `execute`: its outcome (`ok` or a fixed error text) and wall time.
    pub fn execute(&self, outcome: &'static str, elapsed: Duration) {
        if let Ok(mut executes) = self.executes.lock() {
            *executes.entry(outcome).or_default() += 1;
        }
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
        if let Ok(mut calls) = self.native_calls.lock() {
            let outcomes = match calls.get_mut(capability) {
                Some(outcomes) => outcomes,
                None => calls.entry(capability.to_owned()).or_default(),
            };
            *outcomes.entry(outcome).or_default() += count;
        }
    }

    /// The plugins and capabilities being served.
    pub fn catalog(&self, plugins: usize, capabilities: usize) {
        self.plugins_loaded.store(plugins as u64, Ordering::Relaxed);
        self.capabilities
            .store(capabilities as u64, Ordering::Relaxed);
    }

    /// Whether upstream `name` serves now (the `codemode_upstream_up` gauge).
    pub fn upstream(&self, name: &str, up: bool) {
        if let Ok(mut upstreams) = self.upstreams.lock() {
            upstreams.insert(name.to_owned(), up);
        }
    }

    /// Plugin file `plugin` failed to load, or loaded and was refused (at start or
    /// on a reload).
    pub fn plugin_load_failure(&self, plugin: &str) {
        if let Ok(mut failures) = self.plugin_load_failures.lock() {
            *failures.entry(plugin.to_owned()).or_default() += 1;
        }
    }

    /// One reload of the plugins folder and its outcome ([`RELOAD_OK`],
    /// [`RELOAD_FAILED`], [`RELOAD_ERROR`]).
    pub fn reload(&self, outcome: &'static str) {
        if let Ok(mut reloads) = self.reloads.lock() {
            *reloads.entry(outcome).or_default() += 1;
        }
    }

    /// One HTTP request refused for want of a valid bearer token.
    pub fn http_unauthenticated(&self) {
        self.http_unauthenticated.fetch_add(1, Ordering::Relaxed);
    }

    /// Plugins serving now (the `codemode_plugins_loaded` gauge).
    pub fn plugins_loaded(&self) -> usize {
        self.plugins_loaded.load(Ordering::Relaxed) as usize
    }

    /// Everything, in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        header(
            &mut out,
            "codemode_executes_total",
            "counter",
            "Finished execute calls by outcome.",
        );
        if let Ok(executes) = self.executes.lock() {
            for (outcome, count) in executes.iter() {
                let _ = writeln!(
                    out,
                    "codemode_executes_total{{outcome=\"{}\"}} {count}",
                    escape(outcome)
                );
            }
        }
        header(
            &mut out,
            "codemode_native_calls_total",
            "counter",
            "Native calls by capability and outcome.",
        );
        if let Ok(calls) = self.native_calls.lock() {
            let counts = calls.iter().flat_map(|(capability, outcomes)| {
                outcomes
                    .iter()
                    .map(move |(outcome, count)| (capability, outcome, count))
            });
            for (capability, outcome, count) in counts {
                let _ = writeln!(
                    out,
                    "codemode_native_calls_total{{capability=\"{}\",outcome=\"{}\"}} {count}",
                    escape(capability),
                    escape(outcome)
                );
            }
        }
        header(
            &mut out,
            "codemode_plugin_load_failures_total",
            "counter",
            "Plugin files that failed to load or were refused, at start or on a reload.",
        );
        if let Ok(failures) = self.plugin_load_failures.lock() {
            for (plugin, count) in failures.iter() {
                let _ = writeln!(
                    out,
                    "codemode_plugin_load_failures_total{{plugin=\"{}\"}} {count}",
                    escape(plugin)
                );
            }
        }
        header(
            &mut out,
            "codemode_reloads_total",
            "counter",
            "Reloads of the plugins folder by outcome (ok, failed: some file did not load, error: nothing applied).",
        );
        if let Ok(reloads) = self.reloads.lock() {
            for (outcome, count) in reloads.iter() {
                let _ = writeln!(
                    out,
                    "codemode_reloads_total{{outcome=\"{}\"}} {count}",
                    escape(outcome)
                );
            }
        }
        header(
            &mut out,
            "codemode_http_unauthenticated_total",
            "counter",
            "HTTP requests refused without a valid bearer token.",
        );
        let _ = writeln!(
            out,
            "codemode_http_unauthenticated_total {}",
            self.http_unauthenticated.load(Ordering::Relaxed)
        );
        let histograms = [
            (
                "codemode_execute_duration_seconds",
                "Wall time of execute calls, queueing included.",
                &self.latency,
            ),
            (
                "codemode_execute_fuel",
                "Fuel burned per execution, interpreter and plugins.",
                &self.fuel,
            ),
        ];
        for (name, help, histogram) in histograms {
            header(&mut out, name, "histogram", help);
            histogram.render(&mut out, name);
        }
        let gauges = [
            (
                "codemode_plugins_loaded",
                "Plugins being served.",
                &self.plugins_loaded,
            ),
            (
                "codemode_capabilities",
                "Capabilities being served.",
                &self.capabilities,
            ),
        ];
        for (name, help, value) in gauges {
            header(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        header(
            &mut out,
            "codemode_sandbox_memory_bytes",
            "gauge",
            "Linear memory reserved by every sandbox together (--max-total-memory).",
        );
        let _ = writeln!(
            out,
            "codemode_sandbox_memory_bytes {}",
            crate::memory::TOTAL.used()
        );
        header(
            &mut out,
            "codemode_upstream_up",
            "gauge",
            "Whether an upstream MCP server is serving (1) or not (0).",
        );
        if let Ok(upstreams) = self.upstreams.lock() {
            for (upstream, up) in upstreams.iter() {
                let _ = writeln!(
                    out,
                    "codemode_upstream_up{{upstream=\"{}\"}} {}",
                    escape(upstream),
                    u8::from(*up)
                );
            }
        }
        out
    }
}

/// The `# HELP` and `# TYPE` lines of a metric.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value: backslash, double quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let metrics = Metrics::default();
        metrics.catalog(3, 9);
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
            "codemode_execute_duration_seconds_bucket{le=\"5\"} 2",
            "codemode_execute_duration_seconds_bucket{le=\"+Inf\"} 3",
            "codemode_execute_duration_seconds_count 3",
            "codemode_execute_fuel_bucket{le=\"100000\"} 1",
            "codemode_execute_fuel_sum 85000",
            "codemode_plugins_loaded 3",
            "codemode_capabilities 9",
            "# TYPE codemode_execute_fuel histogram",
            "# HELP codemode_plugins_loaded Plugins being served.",
            "codemode_upstream_up{upstream=\"git\"} 0",
            "codemode_upstream_up{upstream=\"time\"} 1",
            "# TYPE codemode_upstream_up gauge",
            "codemode_plugin_load_failures_total{plugin=\"broken.wasm\"} 2",
            "# TYPE codemode_plugin_load_failures_total counter",
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
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
