//! Builds the sandboxed interpreter (`host/runner`, its own workspace) for
//! `wasm32-wasip2` and hands its path to the crate, which embeds it.
//!
//! A nested cargo with its own target folder (`target/runner`), so it never waits on
//! the lock of the build that runs this script. No wasmtime here: the snapshot of the
//! interpreter is taken at run time and cached (see `execute::runner`).

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env_var("CARGO_MANIFEST_DIR"));
    // This crate is `host/server`; the interpreter is its sibling `host/runner`.
    let host = manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf);
    let runner = host.join("runner");
    let workspace = host
        .parent()
        .map_or_else(|| host.clone(), Path::to_path_buf);
    for watched in [
        runner.join("src"),
        runner.join("Cargo.toml"),
        runner.join("build.rs"),
        workspace.join("wit/runner"),
        workspace.join("value/src"),
        workspace.join("value/Cargo.toml"),
    ] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("runner");
    // A fuzz build (`cargo xtask fuzz`: `--cfg fuzzing`) runs on nightly, which may
    // lack the wasm target: the interpreter is built by the toolchain the other
    // builds here use (rustup's choice for this folder, through the `cargo` on
    // PATH), into the same folder, so that neither rebuilds it for the other.
    let fuzzing = std::env::var_os("CARGO_CFG_FUZZING").is_some();
    let toolchain_vars: &[&str] = if fuzzing {
        &["RUSTUP_TOOLCHAIN", "RUSTC", "RUSTDOC", "CARGO"]
    } else {
        &[]
    };
    ensure_target(toolchain_vars);
    let cargo = match std::env::var_os("CARGO") {
        Some(cargo) if !fuzzing => cargo,
        _ => "cargo".into(),
    };
    let mut cmd = Command::new(cargo);
    for var in toolchain_vars {
        cmd.env_remove(var);
    }
    // The host's own profile decides the interpreter's: a release host embeds
    // the release build (LTO, one codegen unit); a debug host the quicker
    // `debug-host` build (host/runner/Cargo.toml).
    let profile = match std::env::var("PROFILE").as_deref() {
        Ok("release") => "release",
        _ => "debug-host",
    };
    cmd.args(["build", "--profile", profile, "--quiet", "--target", TARGET])
        .arg("--manifest-path")
        .arg(runner.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's settings are for the host, not for a wasm build; clippy's
    // wrapper in particular must not lint (and fail) the interpreter from here.
    for var in [
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        cmd.env_remove(var);
    }
    // Profile settings a tool set for the outer build (cargo-fuzz's) too.
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("CARGO_PROFILE_") {
            cmd.env_remove(var);
        }
    }
    let status = cmd.status().unwrap_or_else(|error| {
        panic!("cannot start cargo to build the interpreter (host/runner): {error}")
    });
    if !status.success() {
        panic!("building the interpreter (host/runner) for {TARGET} failed: {status}");
    }
    let wasm = target_dir
        .join(TARGET)
        .join(profile)
        .join("codemode_runner.wasm");
    if !wasm.is_file() {
        panic!("the interpreter build did not produce {}", wasm.display());
    }
    println!("cargo:rustc-env=CODEMODE_RUNNER_WASM={}", wasm.display());
}

fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}

/// Adds the wasm target when rustup manages the toolchain and lacks it (a fresh
/// machine); without rustup the build fails with cargo's own message.
fn ensure_target(toolchain_vars: &[&str]) {
    let rustup = || {
        let mut cmd = Command::new("rustup");
        for var in toolchain_vars {
            cmd.env_remove(var);
        }
        cmd
    };
    let Ok(out) = rustup().args(["target", "list", "--installed"]).output() else {
        return;
    };
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|line| line.trim() == TARGET)
    {
        return;
    }
    let _ = rustup().args(["target", "add", TARGET]).status();
}
