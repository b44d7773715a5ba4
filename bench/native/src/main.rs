//! Runs the Starlark program on stdin with starlark-rust natively: the
//! interpreter's dialect switches and tick budget (counting ticks is part of the
//! evaluator's work in the sandbox too), standard globals. Prints the
//! nanoseconds from parse to `main()`'s return on stdout.
//!
//! `codemode-bench-native MAX_STEPS < program.star`

use std::io::Read;
use std::process::ExitCode;
use std::time::Instant;

use starlark::environment::{Globals, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};

fn main() -> ExitCode {
    match run() {
        Ok(nanos) => {
            println!("{nanos}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("codemode-bench-native: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<u128, String> {
    let max_steps: u64 = std::env::args()
        .nth(1)
        .ok_or("usage: codemode-bench-native MAX_STEPS < program.star")?
        .parse()
        .map_err(|error| format!("MAX_STEPS: {error}"))?;
    let mut source = String::new();
    std::io::stdin()
        .read_to_string(&mut source)
        .map_err(|error| format!("stdin: {error}"))?;
    let globals = Globals::standard();
    let started = Instant::now();
    let dialect = Dialect {
        enable_load: false,
        ..Dialect::Standard
    };
    let ast = AstModule::parse("<codemode>", source, &dialect)
        .map_err(|error| format!("parse: {error}"))?;
    Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        eval.set_max_tick_count(max_steps)
            .map_err(|error| format!("tick budget: {error}"))?;
        eval.eval_module(ast, &globals)
            .map_err(|error| format!("eval: {error}"))?;
        let main = module.get("main").ok_or("no main")?;
        eval.eval_function(main, &[], &[])
            .map_err(|error| format!("main: {error}"))?;
        Ok::<(), String>(())
    })?;
    Ok(started.elapsed().as_nanos())
}
