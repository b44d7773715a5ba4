//! `cargo xtask test`: every check of the project, each dependency graph compiled
//! once, and a phase table at the end.
//!
//! Lints do not get a compile of their own: clippy is the compiler of the
//! workspace's own crates in the builds the test command makes anyway
//! (`RUSTC_WORKSPACE_WRAPPER`, see [`Lints`]), so dependencies are compiled once,
//! by rustc, for the plugins (wasm), the interpreter's tests and the host's tests.
//! The host's binary the tests build is the one precompile and dist use, and a
//! check that building it alone compiles nothing keeps one feature set for all
//! of them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::phases::Phases;
use crate::{FOREIGN_PLUGINS, RUNNER_MANIFEST, cargo, deny, dist, plugins, root, status};

/// The filter of the tests that need a toolchain of another language: skipped,
/// and said so, when `plugins()` could not install one (never in CI).
const TOOLCHAIN_TESTS: &str = "test(/toolchains::/)";
/// The soak's test binary: run in a phase of its own, alone on the machine.
const SOAK: &str = "binary(soak)";

/// Clippy as the compiler of the workspace's own crates, denying warnings.
///
/// `cargo clippy` is `cargo check` with this wrapper; used on the builds the
/// test command makes anyway, it lints the same crates without compiling every
/// dependency a second time in check mode.
pub(crate) struct Lints {
    driver: PathBuf,
}

impl Lints {
    /// Finds `clippy-driver` in the toolchain's sysroot.
    pub(crate) fn find() -> Result<Self> {
        let out = Command::new("rustc")
            .current_dir(root())
            .args(["--print", "sysroot"])
            .output()
            .context("cannot run rustc --print sysroot")?;
        let sysroot = String::from_utf8(out.stdout).context("a sysroot path in UTF-8")?;
        let driver = Path::new(sysroot.trim()).join("bin/clippy-driver");
        if !driver.is_file() {
            bail!(
                "{} is missing: install clippy (`rustup component add clippy`)",
                driver.display()
            );
        }
        Ok(Self { driver })
    }

    /// `command` with clippy linting the workspace's crates it compiles.
    pub(crate) fn apply<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        command
            .env("RUSTC_WORKSPACE_WRAPPER", &self.driver)
            // clippy-driver's own encoding of `cargo clippy -- -D warnings`.
            .env(
                "CLIPPY_ARGS",
                "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__",
            )
    }
}

/// `cargo xtask test`: every check, then the phase table (also on failure).
pub(crate) fn test() -> Result<()> {
    let mut phases = Phases::new(crate::phases::time_before_start());
    let result = run(&mut phases);
    eprintln!("\n{}", phases.table());
    result
}

fn run(phases: &mut Phases) -> Result<()> {
    phases.run("tools", crate::tools::install_all)?;
    phases.run("deny", deny::deny)?;
    phases.run("fmt", || {
        status(cargo().args(["fmt", "--all", "--check"]))?;
        status(cargo().args(["fmt", "--check", "--manifest-path", RUNNER_MANIFEST]))
    })?;
    let lints = Lints::find()?;
    let nextest = crate::tools::nextest()?;
    // The interpreter for wasm, as host/server/build.rs builds it, from the
    // start: cargo schedules that build script late (nothing waits on it but
    // the server), and its two and a half minutes then ran alone at the end of
    // the build. The script finds it built (or waits for it, on the lock of
    // target/runner).
    let wasm = phases.beside("wasm build", &mut interpreter_wasm_build())?;
    // Every native target of the host's packages, benches included, so that
    // clippy sees them all.
    phases.run("build", || {
        status(lints.apply(packages(cargo().args([
            "test",
            "--all-targets",
            "--no-run",
        ]))))
    })?;
    phases.join(wasm)?;
    let binary = root().join("target/debug/codemode-host");
    phases.run("same features", || {
        dist::unchanged_build(&lints, "codemode-host")
    })?;
    phases.run("library alone", || dist::library_alone(&lints))?;
    // The interpreter is its own workspace: its checks are tested (and linted)
    // natively beside its wasm build, in target/runner (which the build above
    // wrote last), while the plugins build and precompile.
    let interpreter = phases.beside(
        "interpreter",
        lints.apply(cargo().args([
            "test",
            "--manifest-path",
            RUNNER_MANIFEST,
            "--target-dir",
            "target/runner",
        ])),
    )?;
    // The Python and JavaScript examples' build scripts write the WIT docs with
    // the binary just built.
    let examples = phases.run("plugins", || plugins(&|| Ok(binary.clone())))?;
    let missing: Vec<&str> = FOREIGN_PLUGINS
        .iter()
        .map(|plugin| plugin.name)
        .filter(|name| !examples.join(format!("{name}.wasm")).is_file())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "xtask: SKIPPED the tests under `toolchains::`: {} not built (their toolchains cannot be installed here)",
            missing.join(", ")
        );
    }
    phases.run("precompile", || {
        status(
            Command::new(&binary)
                .args(["precompile", "--plugins"])
                .arg(&examples)
                .arg("--cache-dir")
                .arg(root().join("target/test-cache"))
                .stdout(std::process::Stdio::null()),
        )
    })?;
    phases.join(interpreter)?;

    // The image's layout, from the debug build: it starts from a read-only cache.
    phases.run("dist", || {
        dist::layout_debug(&binary, &examples, &root().join("target/test-cache")).map(|_| ())
    })?;
    let run_tests = |filter: &str| {
        let mut filter = filter.to_owned();
        if !missing.is_empty() {
            filter = format!("({filter}) and not {TOOLCHAIN_TESTS}");
        }
        let mut command = Command::new(&nextest);
        command.current_dir(root());
        crate::without_run_env(&mut command);
        lints.apply(packages(
            command
                .args(["nextest", "run", "--no-fail-fast", "-E"])
                .arg(filter),
        ));
        status(&mut command)
    };
    phases.run("tests", || run_tests(&format!("not {SOAK}")))?;
    phases.run("soak", || run_tests(SOAK))?;
    phases.run("doc tests", || {
        status(lints.apply(packages(cargo().args(["test", "--doc"]))))
    })
}

/// The packages the host's tests build natively, so that clippy lints them: the
/// default members, the plugins (the examples' own unit tests run; the test
/// plugins are only compiled, as the wasm build is not linted) and the bench.
/// Not the bench's native starlark-rust (`codemode-bench-native`), which would
/// turn on features of the host's dependencies (`serde_json/arbitrary_precision`)
/// that the server does not have.
const NATIVE_PACKAGES: &[&str] = &[
    "codemode-host",
    "codemode-server",
    "codemode-core",
    "codemode-oci",
    "codemode-runtime",
    "codemode-gateway",
    "codemode-sandbox",
    "codemode-value",
    "codemode-sdk",
    "codemode-sdk-macros",
    "codemode-wit-docs",
    "codemode-devtools",
    "xtask",
    "records",
    "stats",
    "text",
    "fetch",
    "misfit",
    "oddtypes",
    "hostile",
    "liar",
    "granted",
    "versioned",
    "versioned_two",
    "sleepy",
    "drowsy",
    "squatter",
    "codemode-bench",
];

/// `command` selecting [`NATIVE_PACKAGES`]: one selection for every build keeps
/// one feature set.
/// The interpreter's wasm build exactly as host/server/build.rs runs it for a
/// debug host (its profile, target and folder, and without the variables the
/// script removes), so that the script's own build finds it fresh.
fn interpreter_wasm_build() -> Command {
    let mut command = cargo();
    command
        .args([
            "build",
            "--profile",
            "debug-host",
            "--quiet",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
            RUNNER_MANIFEST,
            "--target-dir",
            "target/runner",
        ])
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CARGO_PROFILE_") {
            command.env_remove(name);
        }
    }
    command
}

fn packages(command: &mut Command) -> &mut Command {
    for package in NATIVE_PACKAGES {
        command.args(["-p", package]);
    }
    command
}
