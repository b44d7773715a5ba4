//! Discovery benchmark: load the example plugins (cold compile), then time search_api
//! and describe_api over the resulting catalog.
//!
//! Run: `cargo xtask plugins && cargo bench -p codemode-server --bench discovery`.
//! Prints absolute numbers (µs) per operation; nothing here is a pass/fail test.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_server::authz::{AllowAll, Subject};
use codemode_server::{Service, ServiceConfig};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn time<F: FnMut()>(name: &str, iterations: usize, mut f: F) {
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        f();
        samples.push(started.elapsed());
    }
    samples.sort();
    println!(
        "{name:<40} p50 {:>8.2} µs   p99 {:>8.2} µs   ({iterations} runs)",
        percentile(&samples, 0.5).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6
    );
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugins");
    assert!(
        dir.join("records.wasm").is_file(),
        "run `cargo xtask plugins` first"
    );
    let started = Instant::now();
    let service = match Service::load(&ServiceConfig {
        cache_dir: codemode_server::default_cache_dir(),
        // Discovery makes no native calls: nothing to decide.
        ..ServiceConfig::new(dir, Arc::new(AllowAll))
    }) {
        Ok(service) => service,
        Err(e) => panic!("load: {e}"),
    };
    println!(
        "load {} capabilities from 3 plugins (cold compile) + cached interpreter: {:.1} ms",
        service.capability_count(),
        started.elapsed().as_secs_f64() * 1e3
    );
    let queries = [
        ("search: records lookup", "records lookup"),
        ("search: exact name stats.summary", "stats.summary"),
        (
            "search: task query, 5 tokens",
            "count how often words occur text",
        ),
        ("search: prefix tokens", "perc hist summ"),
        ("search: no match", "zebra quokka"),
    ];
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(e) => panic!("runtime: {e}"),
    };
    let subject = Subject::new("bench");
    for (name, query) in queries {
        time(name, 10_000, || {
            let r = runtime.block_on(service.search(&subject, query));
            assert!(r.is_ok());
        });
    }
    time("describe: records.query", 10_000, || {
        assert!(
            runtime
                .block_on(service.describe(&subject, "records.query"))
                .is_ok()
        );
    });
}
