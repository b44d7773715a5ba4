//! `cargo xtask bench`: what an execute costs, measured in-process through the
//! library, and the sandboxed interpreter against native starlark-rust on the same
//! program in the same run.
//!
//! Built in the dev profile, whose dependencies (wasmtime, cranelift, starlark) are
//! optimized (`opt-level = 2`); the WebAssembly code is compiled by cranelift at its
//! own optimization level either way. Prints medians and tail percentiles; numbers
//! are wall time on whatever else the machine is doing, so compare within one run.

use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::Arc;

use codemode_host::authz::{
    AuthorizationInput, Authorizer, DEFAULT_DECISION, RegoAuthorizer, Subject,
};
use codemode_host::execute::Limits;
use codemode_host::{LOCAL_SUBJECT, Service, ServiceConfig};
use codemode_value::Value as Arg;
use starlark::environment::{Globals, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};

/// The loop both interpreters run: small ints only, one tick per iteration.
const LOOP: &str =
    "def main():\n    t = 0\n    for i in range(1000000):\n        t = t + i % 7\n    return t\n";

/// Loop bodies whose fuel per million iterations calibrates `DEFAULT_MAX_FUEL`.
const CALIBRATION: [(&str, &str); 3] = [
    ("t = t + i % 7", LOOP),
    (
        "build a small dict",
        "def main():\n    n = 0\n    for i in range(1000000):\n        d = {\"k\": i, \"v\": [i]}\n        n += len(d)\n    return n\n",
    ),
    (
        "format a string",
        "def main():\n    n = 0\n    for i in range(1000000):\n        n += len(\"item-%d\" % i)\n    return n\n",
    ),
];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let plugins = root.join("target/plugins");
    assert!(
        plugins.join("stats.wasm").is_file(),
        "example plugins missing: run `cargo xtask plugins` first"
    );
    let config = ServiceConfig {
        plugins_dir: plugins,
        limits: Limits {
            // Room for the calibration loops (one tick per iteration, plus calls).
            max_execution_steps: 3_000_000,
            max_execution_time: Duration::from_secs(60),
            max_fuel: u64::MAX / 4,
            ..Limits::default()
        },
        cache_dir: Some(root.join("target/test-cache")),
        ..ServiceConfig::default()
    };
    let started = Instant::now();
    let service = match Service::load(&config) {
        Ok(service) => service,
        Err(error) => panic!("cannot load the service: {error}"),
    };
    println!(
        "start (3 plugins, cached interpreter): {:.1} ms",
        ms(started.elapsed())
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("tokio: {error}"),
    };
    let run = |source: &str| execute(&runtime, &service, source);

    let trivial = "def main():\n    return 1\n";
    for _ in 0..200 {
        run(trivial);
    }
    let mut times: Vec<Duration> = (0..2000).map(|_| run(trivial).0).collect();
    let (p50, p99) = percentiles(&mut times);
    let fuel = run(trivial).1.fuel;
    println!(
        "trivial execute (return 1), in-process: p50 {:.0} µs, p99 {:.0} µs, {fuel} fuel",
        us(p50),
        us(p99)
    );

    let allow_all = per_call(&run);
    println!(
        "one native call (stats.summary, bind + allow-all + invoke + convert), p50 of 100 calls: {:.1} µs per call",
        us(allow_all)
    );
    let rego = RegoAuthorizer::new(
        DEFAULT_DECISION,
        &[("bench.rego".to_owned(), POLICY.to_owned())],
    )
    .unwrap_or_else(|error| panic!("bench policy: {error}"));
    let decision = decision_cost(&rego);
    let with_policy = match Service::load(&ServiceConfig {
        authorizer: Some(Arc::new(rego)),
        ..config.clone()
    }) {
        Ok(service) => service,
        Err(error) => panic!("cannot load the service: {error}"),
    };
    let run_with_policy = |source: &str| execute(&runtime, &with_policy, source);
    let rego_call = per_call(&run_with_policy);
    println!(
        "one native call with a Rego policy: {:.1} µs per call ({:.1} µs more than allow-all); one Rego decision alone: {:.1} µs",
        us(rego_call),
        us(rego_call.saturating_sub(allow_all)),
        us(decision)
    );

    let mut sandboxed: Vec<Duration> = (0..5).map(|_| run(LOOP).0).collect();
    let mut native: Vec<Duration> = (0..5).map(|_| native_starlark(LOOP)).collect();
    let (sandboxed, _) = percentiles(&mut sandboxed);
    let (native, _) = percentiles(&mut native);
    println!(
        "1M-iteration loop: sandboxed {:.1} ms, native starlark-rust {:.1} ms, ratio {:.2}x",
        ms(sandboxed),
        ms(native),
        sandboxed.as_secs_f64() / native.as_secs_f64()
    );

    for (name, source) in CALIBRATION {
        let (took, stats) = run(source);
        println!(
            "calibration: 1M iterations of `{name}`: {:.2} G fuel, {} steps, {:.0} ms",
            stats.fuel as f64 / 1e9,
            stats.steps,
            ms(took)
        );
    }
}

/// Runs `source` for the local subject; its wall time and stats.
fn execute(
    runtime: &tokio::runtime::Runtime,
    service: &Service,
    source: &str,
) -> (Duration, codemode_host::execute::Stats) {
    let started = Instant::now();
    match runtime.block_on(service.execute(&Subject::new(LOCAL_SUBJECT), source)) {
        Ok(executed) => (started.elapsed(), executed.stats),
        Err(error) => panic!("execute failed: {error}\n{source}"),
    }
}

/// The policy of the Rego measurements: a few rules of the usual shape.
const POLICY: &str = r#"package codemode.authz

default allow := false

allow if {
    input.subject.id == "local"
    startswith(input.capability.name, "stats.")
    count(input.arguments.values) <= 1000
}

allow if {
    input.subject.id == "admin"
}
"#;

/// p50 cost of one native call: a program making 100 calls minus the same program
/// making none.
fn per_call(run: &dyn Fn(&str) -> (Duration, codemode_host::execute::Stats)) -> Duration {
    let calls = |n: usize| {
        format!(
            "def main():\n    t = 0.0\n    for i in range({n}):\n        t += stats.summary(values=[1.0, 2.0])[\"mean\"]\n    return t\n"
        )
    };
    let (zero, hundred) = (calls(0), calls(100));
    for _ in 0..20 {
        run(&zero);
        run(&hundred);
    }
    let mut without: Vec<Duration> = (0..200).map(|_| run(&zero).0).collect();
    let mut with: Vec<Duration> = (0..200).map(|_| run(&hundred).0).collect();
    let (without, _) = percentiles(&mut without);
    let (with, _) = percentiles(&mut with);
    with.saturating_sub(without) / 100
}

/// p50 of one `authorize` call with the input of a `stats.summary` call.
fn decision_cost(rego: &RegoAuthorizer) -> Duration {
    let subject = Subject::new(LOCAL_SUBJECT);
    let arguments = Arg::Dict(vec![(
        "values".to_owned(),
        Arg::List(vec![Arg::Float(1.0), Arg::Float(2.0)]),
    )]);
    let input = AuthorizationInput {
        subject: &subject,
        capability_id: "stats.summary",
        capability_name: "stats.summary",
        arguments: &arguments,
    };
    let mut times: Vec<Duration> = (0..20_000)
        .map(|_| {
            let started = Instant::now();
            if let Err(error) = rego.authorize(&input) {
                panic!("the bench policy refused: {error}");
            }
            started.elapsed()
        })
        .collect();
    percentiles(&mut times).0
}

/// Runs `source` with starlark-rust natively: same dialect switches, standard globals.
fn native_starlark(source: &str) -> Duration {
    let globals = Globals::standard();
    let started = Instant::now();
    let dialect = Dialect {
        enable_load: false,
        ..Dialect::Standard
    };
    let ast = match AstModule::parse("<codemode>", source.to_owned(), &dialect) {
        Ok(ast) => ast,
        Err(error) => panic!("parse: {error}"),
    };
    Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        if let Err(error) = eval.eval_module(ast, &globals) {
            panic!("eval: {error}");
        }
        let Some(main) = module.get("main") else {
            panic!("no main")
        };
        if let Err(error) = eval.eval_function(main, &[], &[]) {
            panic!("main: {error}");
        }
    });
    started.elapsed()
}

fn percentiles(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
