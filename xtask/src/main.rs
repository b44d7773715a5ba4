//! Build helpers: `cargo xtask plugins | run | test | bench | soak | fuzz | deny | dist`.
//!
//! cargo alone cannot build the example plugins for `wasm32-wasip2` while the host
//! builds for the machine, nor install the target first; these tasks do, so a
//! newcomer needs exactly two commands (README).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

mod deny;
mod dist;
mod phases;
mod test;
mod tools;

/// The target plugins are built for.
const WASM_TARGET: &str = "wasm32-wasip2";
/// The sandboxed interpreter's manifest (a workspace of its own).
const RUNNER_MANIFEST: &str = "host/runner/Cargo.toml";
/// The example plugins, served by `cargo xtask run`.
const EXAMPLE_PLUGINS: &[&str] = &["records", "stats", "text", "fetch"];
/// Plugins that misbehave on purpose, used by the end-to-end tests only.
const TEST_PLUGINS: &[&str] = &[
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
];
/// An example plugin in another language.
struct Foreign {
    /// Its folder under `plugins/`, holding a `build.sh`.
    folder: &'static str,
    /// Its component's file name, without `.wasm`.
    name: &'static str,
    /// The toolchain it builds with, from the machine's tools folder.
    toolchain: devtools::Tool,
    /// The variable its `build.sh` takes the toolchain's command from (else it
    /// installs its own into `target/toolchains`, for use without xtask).
    variable: &'static str,
    /// The command in the toolchain's folder.
    command: &'static str,
}

/// The example plugins in other languages.
const FOREIGN_PLUGINS: &[Foreign] = &[
    Foreign {
        folder: "python-geo",
        name: "python_geo",
        toolchain: devtools::COMPONENTIZE_PY,
        variable: "COMPONENTIZE_PY",
        command: "bin/componentize-py",
    },
    Foreign {
        folder: "js-strings",
        name: "js_strings",
        toolchain: devtools::COMPONENTIZE_JS,
        variable: "COMPONENTIZE_JS",
        command: "node_modules/@bytecodealliance/componentize-js/src/cli.js",
    },
];
/// Exit status of a `build.sh` whose toolchain cannot be installed (EX_UNAVAILABLE).
const TOOLCHAIN_UNAVAILABLE: i32 = 69;
/// When set (CI sets it), a foreign plugin whose toolchain cannot be installed is an
/// error instead of a skipped plugin.
const REQUIRE_FOREIGN: &str = "CODEMODE_REQUIRE_FOREIGN_PLUGINS";
/// Sidecars (grants) shipped with example plugins, copied beside their components.
const EXAMPLE_SIDECARS: &[&str] = &["plugins/fetch/fetch.toml"];

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  plugins        build the example plugins to target/plugins/*.wasm
                 (Rust, plus Python and JavaScript with their toolchains
                 from the machine's tools folder; those two need
                 codemode-host's wit-docs, so the debug build is made first
                 when they are out of date) and the test plugins to
                 target/test-plugins/
  run [ARGS..]   build everything and run the server over stdio with the
                 example plugins; ARGS go to codemode-host
  test           every check, in phases, ending with each phase's wall time:
                 tools (installed once per machine into
                 ~/.cache/codemode-host-tools, or $CODEMODE_TOOLS_DIR), deny,
                 fmt, plugins, interpreter tests, build (clippy linting the
                 workspace's crates as it compiles them), same features,
                 precompile, dist, tests (cargo-nextest), soak, doc tests
  bench          build the plugins and a release build, then measure against
                 the performance targets (DESIGN §8): trivial execute, native
                 calls (allow-all, Rego), sandbox vs native starlark-rust, a
                 1 MiB value through a plugin, cold and warm start with 10
                 plugins, HTTP throughput of 8 clients, resident memory; ends
                 with a table of measured/target ratios
  soak [SECONDS] build the plugins and a release build, then run the soak
                 (tests/soak.rs) against it for SECONDS (default 60): 8
                 HTTP clients mixing ordinary and hostile programs, slow
                 connections, a plugin replaced every 2 s, hostile upstream
                 MCP servers (schema bomb, flood of list_changed, results
                 over 16 MiB, a crash loop, a slow tool list); checks answers,
                 deadlines, and that memory, threads and open files stay
                 flat (the test command runs it for 10 s on the debug build)
  dist [--debug] build the container image's layout into target/dist (the
                 release binary in bin/, the example plugins in plugins/,
                 their precompiled cache in cache/; the Dockerfile copies
                 it), then check that the server starts from it with the
                 cache read-only, as the image's user, in under 1 s;
                 --debug: from the debug build into target/dist-debug (the
                 test command checks the same from its own build)
  fuzz [SECONDS] [--runs N] [TARGET..]
                 run each fuzz target (fuzz/ and fuzz/runner/, nightly and
                 cargo-fuzz, both installed if missing) for SECONDS (default
                 60), or until N executions if sooner, from its checked-in
                 corpus fuzz/corpus/TARGET; new inputs go to
                 target/fuzz/corpus, crashes to fuzz/artifacts; prints the
                 executions per target (the test command replays the
                 corpora on stable)
  deny           check the dependency graphs (the workspace's and the
                 interpreter's) with cargo-deny, offline, against deny.toml:
                 RustSec advisories from the snapshot in
                 ../shared/advisory-db (or $CODEMODE_ADVISORY_DB), licenses,
                 sources, one major version of wasmtime and cranelift;
                 cargo-deny comes from the machine's tools folder (installed
                 there if missing)";

/// How long `cargo xtask fuzz` runs each target without an argument, in seconds.
const FUZZ_SECONDS: u64 = 60;

/// The fuzz targets and the cargo-fuzz folder of each: the host's (`fuzz/`,
/// `codemode_server::fuzzing::TARGETS`) and the interpreter's (`fuzz/runner/`,
/// `codemode_runner::fuzzing::TARGETS`).
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("value_decode", "fuzz"),
    ("bind", "fuzz"),
    ("catalog", "fuzz"),
    ("sidecar", "fuzz"),
    ("host_pattern", "fuzz"),
    ("tokens", "fuzz"),
    ("plugin_docs", "fuzz"),
    ("openapi_spec", "fuzz"),
    ("upstream_line", "fuzz"),
    ("source_checks", "fuzz/runner"),
    ("json_decode", "fuzz/runner"),
];

/// How long `cargo xtask soak` runs without an argument, in seconds.
const SOAK_SECONDS: u64 = 60;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("plugins") => plugins(&debug_host).map(|_| ()),
        Some("run") => run(&args[1..]),
        Some("test") => test::test(),
        Some("bench") => bench(),
        Some("soak") => soak(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("deny") => deny::deny(),
        Some("dist") => match &args[1..] {
            [] => dist::dist(dist::Profile::Release).map(|_| ()),
            [flag] if flag == "--debug" => dist::dist(dist::Profile::Debug).map(|_| ()),
            _ => Err(anyhow::anyhow!("usage: cargo xtask dist [--debug]")),
        },
        Some("-h" | "--help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    without_run_env(&mut cmd);
    cmd
}

/// `cmd` (a cargo or a tool that runs cargo) without the variables `cargo run`
/// set for xtask.
fn without_run_env(cmd: &mut Command) {
    // What `cargo run` set for this process describes xtask, not the build it
    // starts; a build script watching one of them (ring's watches
    // CARGO_MANIFEST_DIR) would otherwise run again, and everything above it be
    // compiled again, whenever a build alternates between xtask and a shell.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(
                &*name,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(&*name);
        }
    }
}

fn status(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Installs the wasm target when rustup manages the toolchain and lacks it.
fn ensure_target() -> Result<()> {
    let Ok(out) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        // No rustup: the toolchain is managed elsewhere; cargo will say if the target
        // is missing.
        return Ok(());
    };
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == WASM_TARGET)
    {
        return Ok(());
    }
    status(Command::new("rustup").args(["target", "add", WASM_TARGET]))
}

/// Builds every plugin for wasm (the release profile with
/// [`devtools::PLUGIN_RELEASE_PROFILE`]) and copies the components to
/// `target/plugins` and `target/test-plugins`. The Python and JavaScript
/// examples, when out of date, need a codemode-host binary (its `wit-docs`):
/// `host` builds or finds one. Returns the examples folder.
///
/// No lints here: the test command lints the plugins where it compiles them
/// natively, so that this build's units are exactly what a plugin project of
/// its own builds (the scaffold test reuses them).
fn plugins(host: &dyn Fn() -> Result<PathBuf>) -> Result<PathBuf> {
    ensure_target()?;
    let mut build = cargo();
    build.args(["build", "--release", "--target", WASM_TARGET]);
    for (setting, value) in devtools::PLUGIN_RELEASE_PROFILE {
        build.env(format!("CARGO_PROFILE_RELEASE_{setting}"), value);
    }
    for p in EXAMPLE_PLUGINS.iter().chain(TEST_PLUGINS) {
        build.args(["-p", p]);
    }
    status(&mut build)?;
    let built = root().join("target").join(WASM_TARGET).join("release");
    let examples = root().join("target/plugins");
    copy_plugins(&built, EXAMPLE_PLUGINS, &examples)?;
    for sidecar in EXAMPLE_SIDECARS {
        let from = root().join(sidecar);
        let name = from.file_name().context("sidecar file name")?;
        std::fs::copy(&from, examples.join(name))
            .with_context(|| format!("cannot copy {}", from.display()))?;
    }
    copy_plugins(&built, TEST_PLUGINS, &root().join("target/test-plugins"))?;
    foreign_plugins(&examples, host)?;
    Ok(examples)
}

/// The debug build of codemode-host, built first.
fn debug_host() -> Result<PathBuf> {
    status(cargo().args(["build", "-p", "codemode-host"]))?;
    Ok(root().join("target/debug/codemode-host"))
}

/// The release build of codemode-host, built first.
fn release_host() -> Result<PathBuf> {
    status(cargo().args(["build", "--release", "-p", "codemode-host"]))?;
    Ok(root().join("target/release/codemode-host"))
}

/// Builds the Python and JavaScript examples into `examples`, unless their
/// components are newer than every source (each build takes seconds and yields
/// different bytes, which the artifact cache would compile again).
fn foreign_plugins(examples: &Path, host: &dyn Fn() -> Result<PathBuf>) -> Result<()> {
    let mut host_binary = None;
    for plugin in FOREIGN_PLUGINS {
        let folder = plugin.folder;
        let source = root().join("plugins").join(folder);
        let out = examples.join(format!("{}.wasm", plugin.name));
        if newer_than_all(&out, &[&source, &root().join("wit/plugin")]) {
            continue;
        }
        let built = match plugin.toolchain.ensure() {
            Ok(toolchain) => {
                let binary = match &host_binary {
                    Some(binary) => binary,
                    None => host_binary.insert(host()?),
                };
                eprintln!(
                    "xtask: building plugins/{folder} with {}",
                    plugin.toolchain.label()
                );
                Command::new("bash")
                    .arg(source.join("build.sh"))
                    .arg(&out)
                    .env(plugin.variable, toolchain.join(plugin.command))
                    .env(HOST_COMMAND, binary)
                    .status()
                    .with_context(|| format!("cannot run plugins/{folder}/build.sh"))?
                    .code()
            }
            Err(error) => {
                eprintln!("xtask: {error}");
                Some(TOOLCHAIN_UNAVAILABLE)
            }
        };
        if built == Some(0) {
            continue;
        }
        // Never left to look up to date next time.
        let _ = std::fs::remove_file(&out);
        if built != Some(TOOLCHAIN_UNAVAILABLE) || std::env::var_os(REQUIRE_FOREIGN).is_some() {
            bail!("plugins/{folder}/build.sh failed (exit status {built:?})");
        }
        eprintln!(
            "xtask: SKIPPED plugins/{folder}: its toolchain cannot be installed here (see above); the tests under `toolchains::` are skipped too. Set {REQUIRE_FOREIGN}=1 to make this an error (CI does)."
        );
    }
    Ok(())
}

/// The variable the build scripts read the codemode-host binary from, for its
/// `wit-docs` (default: `codemode-host` on PATH); `plugins()` names the one it
/// built.
const HOST_COMMAND: &str = "CODEMODE_HOST";

/// Whether `file` exists and is newer than every file under `sources`.
fn newer_than_all(file: &Path, sources: &[&Path]) -> bool {
    fn newest(path: &Path) -> Option<std::time::SystemTime> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_dir() {
            return meta.modified().ok();
        }
        std::fs::read_dir(path)
            .ok()?
            .filter_map(|entry| newest(&entry.ok()?.path()))
            .max()
    }
    let Some(built) = std::fs::metadata(file).and_then(|m| m.modified()).ok() else {
        return false;
    };
    sources
        .iter()
        .all(|source| newest(source).is_some_and(|t| t < built))
}

fn copy_plugins(built: &Path, names: &[&str], to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for name in names {
        let from = built.join(format!("{name}.wasm"));
        let dest = to.join(format!("{name}.wasm"));
        std::fs::copy(&from, &dest)
            .with_context(|| format!("cannot copy {} to {}", from.display(), dest.display()))?;
    }
    Ok(())
}

fn run(args: &[String]) -> Result<()> {
    let examples = plugins(&debug_host)?;
    // Compile the interpreter and the plugins into the cache the server will use
    // first (the first time about 30 s, then nothing), so that the server answers
    // `initialize` at once instead of compiling while a client waits.
    let mut precompile = cargo();
    precompile
        .args([
            "run",
            "--quiet",
            "-p",
            "codemode-host",
            "--",
            "precompile",
            "--plugins",
        ])
        .arg(&examples)
        .args(cache_dir_arg(args))
        .stdout(std::process::Stdio::null());
    status(&mut precompile)?;
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "-p", "codemode-host", "--", "--plugins"])
        .arg(examples)
        .args(args);
    eprintln!("xtask: {}", serving_line(args));
    status(&mut cmd)
}

/// The `--cache-dir` of the server's arguments, for `precompile` to fill the same
/// cache (none: the default both use).
fn cache_dir_arg(args: &[String]) -> Vec<String> {
    args.iter()
        .enumerate()
        .find_map(|(i, arg)| {
            if let Some(dir) = arg.strip_prefix("--cache-dir=") {
                Some(vec!["--cache-dir".to_owned(), dir.to_owned()])
            } else if arg == "--cache-dir" {
                args.get(i + 1)
                    .map(|dir| vec!["--cache-dir".to_owned(), dir.clone()])
            } else {
                None
            }
        })
        .unwrap_or_default()
}

/// What `cargo xtask run ARGS` says before starting the server: where it serves.
fn serving_line(args: &[String]) -> String {
    let listen = args.iter().enumerate().find_map(|(i, arg)| {
        arg.strip_prefix("--listen=")
            .map(str::to_owned)
            .or_else(|| {
                (arg == "--listen")
                    .then(|| args.get(i + 1).cloned())
                    .flatten()
            })
    });
    match listen {
        Some(address) => format!(
            "serving MCP over Streamable HTTP on {address} with the example plugins (Ctrl-C to stop)"
        ),
        None => {
            "serving MCP on stdio with the example plugins (Ctrl-D or Ctrl-C to stop)".to_owned()
        }
    }
}

fn bench() -> Result<()> {
    plugins(&release_host)?;
    // The bench starts the server binary beside it: build both, optimized, each
    // in a cargo invocation of its own, so that the server is built with its own
    // features only, and the native starlark-rust the bench compares with
    // (codemode-bench-native, a process of its own) reaches neither.
    for package in ["codemode-host", "codemode-bench", "codemode-bench-native"] {
        status(cargo().args(["build", "--release", "-p", package]))?;
    }
    status(&mut Command::new(
        root().join("target/release/codemode-bench"),
    ))
}

fn soak(args: &[String]) -> Result<()> {
    let seconds = match args {
        [] => SOAK_SECONDS,
        [seconds] => seconds
            .parse()
            .with_context(|| format!("SECONDS must be a whole number, not {seconds:?}"))?,
        [_, extra, ..] => bail!("unexpected argument {extra:?}\n\n{USAGE}"),
    };
    plugins(&release_host)?;
    status(cargo().args(["build", "--release", "-p", "codemode-host"]))?;
    let mut cmd = cargo();
    cmd.args([
        "test",
        "-p",
        "codemode-host",
        "--test",
        "soak",
        "--",
        "--nocapture",
    ])
    .env("CODEMODE_SOAK_SECONDS", seconds.to_string())
    .env(
        "CODEMODE_SOAK_HOST",
        root().join("target/release/codemode-host"),
    );
    status(&mut cmd)
}

fn fuzz(args: &[String]) -> Result<()> {
    let mut seconds = FUZZ_SECONDS;
    let mut runs = None;
    let mut targets = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--runs" {
            let value = rest.next().context("--runs needs a number")?;
            runs = Some(
                value
                    .parse::<u64>()
                    .with_context(|| format!("--runs must be a whole number, not {value:?}"))?,
            );
        } else if let Some(&target) = FUZZ_TARGETS.iter().find(|(name, ..)| name == arg) {
            targets.push(target);
        } else if targets.is_empty() && arg.bytes().all(|b| b.is_ascii_digit()) {
            seconds = arg
                .parse()
                .with_context(|| format!("SECONDS must be a whole number, not {arg:?}"))?;
        } else {
            let names: Vec<&str> = FUZZ_TARGETS.iter().map(|(name, ..)| *name).collect();
            bail!("no fuzz target {arg:?} (targets: {})", names.join(", "));
        }
    }
    if targets.is_empty() {
        targets = FUZZ_TARGETS.to_vec();
    }
    // cargo-fuzz needs nightly (sanitizers); through rustup's `cargo +nightly`.
    let has_fuzz = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_fuzz {
        status(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
        status(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    let mut report = Vec::new();
    for (target, dir) in targets {
        let found = root().join("target/fuzz/corpus").join(target);
        let artifacts = root().join("fuzz/artifacts").join(target);
        std::fs::create_dir_all(&found)?;
        std::fs::create_dir_all(&artifacts)?;
        let output = Command::new("cargo")
            .current_dir(root())
            .args([
                "+nightly",
                "fuzz",
                "run",
                "--fuzz-dir",
                dir,
                "--target-dir",
                "target/fuzz/build",
                target,
            ])
            .arg(&found)
            .arg(root().join("fuzz/corpus").join(target))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args(runs.map(|runs| format!("-runs={runs}")))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .stderr(std::process::Stdio::piped())
            .output()
            .with_context(|| format!("cannot run cargo fuzz for {target}"))?;
        let log = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            eprintln!("{log}");
            bail!(
                "fuzz target {target} failed (its input is in {})",
                artifacts.display()
            );
        }
        // "Done 123456 runs in 60 second(s)": the runs and the time they took.
        let done = log
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("Done "))
            .unwrap_or("? runs");
        report.push(format!("{target}: {done}"));
    }
    println!("{}", report.join("\n"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_precompiles_into_the_cache_the_server_uses() {
        let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        assert_eq!(cache_dir_arg(&args(&["--allow-all"])), Vec::<String>::new());
        for given in [
            &["--cache-dir", "/c", "--log", "debug"][..],
            &["--cache-dir=/c"],
        ] {
            assert_eq!(cache_dir_arg(&args(given)), args(&["--cache-dir", "/c"]));
        }
    }

    #[test]
    fn run_says_where_it_serves() {
        let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            serving_line(&args(&[])),
            "serving MCP on stdio with the example plugins (Ctrl-D or Ctrl-C to stop)"
        );
        for given in [
            &["--listen", "127.0.0.1:8080", "--allow-all"][..],
            &["--allow-all", "--listen=127.0.0.1:8080"],
        ] {
            assert_eq!(
                serving_line(&args(given)),
                "serving MCP over Streamable HTTP on 127.0.0.1:8080 with the example plugins (Ctrl-C to stop)"
            );
        }
    }
}
