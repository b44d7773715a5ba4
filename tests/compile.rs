//! Compiling plugins in a child process bounded in memory and time: a generated
//! compile bomb (small in bytes, large in locals times blocks) is skipped with the
//! reason, by the server, a reload and `check` alike, and the other plugins serve.

use std::path::PathBuf;

use serde_json::json;

use crate::support::{HttpServer, execute_http, host_bin, plugin_folder, root, test_plugin};

/// Locals of the bomb's one function, all read after [`BLOCKS`] joins: Cranelift
/// keeps a table of locals times blocks (about 4 bytes each), 800 MB here.
const LOCALS: usize = 10_000;
/// Blocks of the bomb's function that two edges enter.
const BLOCKS: usize = 20_000;

/// The memory cap the tests give compilers: far below what the bomb needs, far
/// above what the test plugins need.
const CAP: &str = "256MiB";

/// The bomb as a component (a core module in a world with no exports).
fn bomb_component() -> Vec<u8> {
    let mut wat = String::from("(module\n  (func (param i32) (result i64)\n");
    wat.push_str(&format!("    (local {})\n", "i64 ".repeat(LOCALS)));
    for _ in 0..BLOCKS {
        wat.push_str("    (block (br_if 0 (local.get 0)))\n");
    }
    wat.push_str("    (i64.const 0)\n");
    for local in 1..=LOCALS {
        wat.push_str(&format!("    (i64.add (local.get {local}))\n"));
    }
    wat.push_str("  )\n)\n");
    crate::probe::component_of("package test:bomb@0.1.0;\n\nworld plugin {}\n", &wat)
}

/// The bomb written to `target/test-plugins/bomb/bomb.wasm`.
fn bomb() -> PathBuf {
    let dir = root().join("target/test-plugins/bomb");
    std::fs::create_dir_all(&dir).expect("the bomb's folder");
    let path = dir.join("bomb.wasm");
    let temp = dir.join(format!("bomb.wasm.{}", std::process::id()));
    std::fs::write(&temp, bomb_component()).expect("write the bomb");
    std::fs::rename(&temp, &path).expect("put the bomb in place");
    path
}

/// The reason the server and `check` give for the bomb.
const REASON: &str = "compiling needed more than 256 MiB of memory (--max-compile-memory)";

#[test]
fn a_compile_bomb_is_stopped_at_its_memory_cap_and_the_rest_serves() {
    let bomb = bomb();
    let size = std::fs::metadata(&bomb).map_or(0, |m| m.len());
    assert!(size < 512 << 10, "small in bytes: {size}");
    let dir = plugin_folder("compile-bomb", &[bomb.clone(), test_plugin("sleepy")]);
    // Before, the server compiled it in its own process, as far as memory went.
    let server = HttpServer::allowing(&dir, &["--max-compile-memory", CAP]);
    let log = server.log();
    assert!(
        log.contains(&format!("plugin skipped plugin=bomb.wasm reason={REASON}")),
        "{log}"
    );
    assert_eq!(
        execute_http(server.port, "def main():\n    return sleepy.nap(ms=1)"),
        Ok(json!({"ms": 1}))
    );
    // `check` compiles it the same way.
    let out = std::process::Command::new(host_bin())
        .args(["check", "--max-compile-memory", CAP, "--cache-dir"])
        .arg(root().join("target/e2e-compile-cache"))
        .arg(&bomb)
        .output()
        .expect("run check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(REASON), "{text}");
}
