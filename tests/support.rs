//! Shared helpers: paths, the Python MCP client, spawning the server.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// The MCP SDK version the tests drive the server with.
const PYTHON_MCP: &str = "mcp==2.3.0";

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn host_bin() -> &'static str {
    env!("CARGO_BIN_EXE_codemode-host")
}

/// The folder of example plugin components; built by `cargo xtask plugins`.
pub(crate) fn example_plugins() -> PathBuf {
    let dir = root().join("target/plugins");
    assert!(
        dir.join("records.wasm").is_file(),
        "example plugins missing in {}: run `cargo xtask plugins` (or `cargo xtask test`)",
        dir.display()
    );
    dir
}

/// A test plugin component (misbehaving on purpose), built by `cargo xtask plugins`.
pub(crate) fn test_plugin(name: &str) -> PathBuf {
    let path = root()
        .join("target/test-plugins")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "test plugin {} missing: run `cargo xtask plugins`",
        path.display()
    );
    path
}

/// A plugins folder `target/test-cache/folders/LABEL` holding exactly `files`. Each
/// test uses its own label (tests run in parallel); files are replaced atomically, so
/// a server loading the folder never reads a half-copied component.
pub(crate) fn plugin_folder(label: &str, files: &[PathBuf]) -> PathBuf {
    let dir = root().join("target/test-cache/folders").join(label);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("clear the plugins folder");
    }
    std::fs::create_dir_all(&dir).expect("create the plugins folder");
    for file in files {
        let name = file.file_name().expect("file name");
        let temp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
        std::fs::copy(file, &temp).expect("copy a plugin");
        std::fs::rename(&temp, dir.join(name)).expect("move a plugin in place");
    }
    dir
}

/// The example plugin files.
pub(crate) fn example_plugin_files() -> Vec<PathBuf> {
    ["records", "stats", "text"]
        .iter()
        .map(|name| example_plugins().join(format!("{name}.wasm")))
        .collect()
}

/// A Python with the MCP SDK: `target/e2e-venv`, created on first use.
pub(crate) fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = root().join("target/e2e-venv");
        let python = venv.join("bin/python");
        let ready = |p: &Path| {
            Command::new(p)
                .args(["-c", "import mcp"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ready(&python) {
            let ok = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "cannot create a Python venv at {}: is python3 with venv installed?",
                venv.display()
            );
            let ok = Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    PYTHON_MCP,
                ])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "cannot install {PYTHON_MCP} into {}", venv.display());
        }
        python
    })
}

/// The interpreter cache every test server shares (`--cache-dir`), prepared once per
/// test run so that servers start in milliseconds instead of each compiling it.
pub(crate) fn cache_dir() -> &'static str {
    static CACHE: OnceLock<String> = OnceLock::new();
    CACHE.get_or_init(|| {
        let dir = root().join("target/test-cache");
        let dir = dir.to_str().expect("utf-8 path").to_owned();
        let empty = root().join("target/test-cache/no-plugins");
        std::fs::create_dir_all(&empty).expect("create the cache folder");
        // With stdin at EOF the server prepares the interpreter, then ends.
        let out = Command::new(host_bin())
            .args([
                "--plugins",
                empty.to_str().expect("utf-8 path"),
                "--cache-dir",
                &dir,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run codemode-host to prepare the interpreter");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            log.contains("interpreter ready"),
            "interpreter not prepared:\n{log}"
        );
        dir
    })
}

/// `args` plus the shared `--cache-dir`.
fn with_cache(args: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    all.extend(["--cache-dir".to_owned(), cache_dir().to_owned()]);
    all
}

/// Runs the Python MCP client against `codemode-host ARGS` over stdio and returns its
/// JSON report (see tests/clients/mcp_driver.py).
pub(crate) fn drive(args: &[&str], steps: Value) -> Value {
    let script = serde_json::json!({ "command": host_bin(), "args": with_cache(args), "mode": "legacy", "steps": steps });
    let mut child = Command::new(python())
        .arg(root().join("tests/clients/mcp_driver.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the Python MCP client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.to_string().as_bytes())
        .expect("write the script");
    let out = child
        .wait_with_output()
        .expect("wait for the Python MCP client");
    assert!(
        out.status.success(),
        "client failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("client prints JSON")
}

/// Starts `codemode-host ARGS` with stdin held open, reads its stderr up to the
/// `catalog ready` line (or exit), stops it, and returns the lines read.
pub(crate) fn startup_log(args: &[&str]) -> (Vec<String>, Option<i32>) {
    let mut child = Command::new(host_bin())
        .args(with_cache(args))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn codemode-host");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut lines = Vec::new();
    for line in stderr.lines() {
        let line = line.expect("read stderr");
        let ready = line.contains("catalog ready");
        lines.push(line);
        if ready {
            break;
        }
    }
    // Closing stdin ends the MCP session; the server exits on its own.
    drop(child.stdin.take());
    let status = child.wait().expect("wait for codemode-host");
    (lines, status.code())
}
