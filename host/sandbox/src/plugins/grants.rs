//! What an operator grants one plugin: the sidecar `<plugin>.toml` beside
//! `<plugin>.wasm`.
//!
//! Nothing is granted without a sidecar (DESIGN §3): no outbound HTTP, no
//! environment, no config values, no directories, and the global budgets. A sidecar
//! can only narrow the budgets: a per-plugin value above the global one is capped.
//! Every problem in a sidecar is a load error of its plugin, naming the key, so a
//! typo never silently widens or drops a grant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::files::{FileError, read_regular};
use crate::units::{parse_bytes, parse_duration};

/// The sidecar's file extension.
pub const SIDECAR_EXTENSION: &str = "toml";

/// Largest sidecar read: grants are a few lines; this only stops a huge file.
const MAX_SIDECAR_BYTES: u64 = 1 << 20;

/// The grants of one plugin, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Where outbound HTTP may go; empty denies every request.
    pub allowed_outbound_hosts: Vec<HostPattern>,
    /// Environment variables the plugin sees (and no others).
    pub env: BTreeMap<String, String>,
    /// `wasi:config/store` values.
    pub config: BTreeMap<String, String>,
    /// Preopened directories.
    pub dirs: Vec<DirGrant>,
    /// Linear memory per instance, in bytes; `None` = the global budget.
    pub max_memory: Option<usize>,
    /// Fuel one call may spend; `None` = what is left of the execution's.
    pub max_fuel_per_call: Option<u64>,
    /// Wall time one call may take, outbound HTTP included; `None` = what is left of
    /// the execution's.
    pub timeout: Option<Duration>,
}

/// A host directory the plugin sees at `guest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// The directory on the host (relative paths are resolved against the sidecar's
    /// folder).
    pub host: PathBuf,
    /// Where the plugin sees it, e.g. `/data`.
    pub guest: String,
    /// Whether the plugin may only read (the default).
    pub read_only: bool,
}

/// The sidecar as written; [`Grants::parse`] validates it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sidecar {
    #[serde(default)]
    allowed_outbound_hosts: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    dirs: Vec<SidecarDir>,
    max_memory: Option<SizeOrText>,
    max_fuel_per_call: Option<u64>,
    timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SidecarDir {
    host: PathBuf,
    guest: String,
    #[serde(default = "read_only_default")]
    read_only: bool,
}

fn read_only_default() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SizeOrText {
    Bytes(u64),
    Text(String),
}

/// The global budgets a sidecar's own limits are capped by (what `--max-memory`,
/// `--max-fuel` and `--max-execution-time` set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalCaps {
    /// `--max-memory`, in bytes.
    pub max_memory: usize,
    /// `--max-fuel`.
    pub max_fuel: u64,
    /// `--max-execution-time`.
    pub max_execution_time: Duration,
}

impl Grants {
    /// The sidecar limits above the global budget that caps them, each as
    /// `(setting, what it asks, the flag and its value)`: they have no effect
    /// beyond the global value, which an operator should know.
    pub fn above(&self, caps: &GlobalCaps) -> Vec<(&'static str, String, String)> {
        let mut above = Vec::new();
        if let Some(memory) = self.max_memory.filter(|&m| m > caps.max_memory) {
            above.push((
                "max_memory",
                format!("{memory} bytes"),
                format!("--max-memory ({} bytes)", caps.max_memory),
            ));
        }
        if let Some(fuel) = self.max_fuel_per_call.filter(|&f| f > caps.max_fuel) {
            above.push((
                "max_fuel_per_call",
                fuel.to_string(),
                format!("--max-fuel ({})", caps.max_fuel),
            ));
        }
        if let Some(timeout) = self.timeout.filter(|&t| t > caps.max_execution_time) {
            above.push((
                "timeout",
                humantime::format_duration(timeout).to_string(),
                format!(
                    "--max-execution-time ({})",
                    humantime::format_duration(caps.max_execution_time)
                ),
            ));
        }
        above
    }

    /// The sidecar path of the plugin at `wasm`: same name, `.toml`.
    pub fn sidecar_path(wasm: &Path) -> PathBuf {
        wasm.with_extension(SIDECAR_EXTENSION)
    }

    /// Reads the sidecar of the plugin at `wasm`; no sidecar grants nothing.
    ///
    /// # Errors
    ///
    /// A message naming the sidecar and what is wrong in it.
    pub fn for_plugin(wasm: &Path) -> Result<Self, String> {
        let path = Self::sidecar_path(wasm);
        let label = super::listing::file_label(&path);
        let bytes = match read_regular(&path, MAX_SIDECAR_BYTES, "the size of any sidecar") {
            Ok(bytes) => bytes,
            Err(FileError::Io(error)) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self::default());
            }
            Err(error) => return Err(format!("sidecar `{label}`: {error}")),
        };
        let text =
            String::from_utf8(bytes).map_err(|_| format!("sidecar `{label}`: not UTF-8 text"))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).map_err(|message| format!("sidecar `{label}`: {message}"))
    }

    /// Parses sidecar text; relative directories are resolved against `base`.
    ///
    /// # Errors
    ///
    /// A message naming the key and what it must be.
    pub fn parse(text: &str, base: &Path) -> Result<Self, String> {
        let sidecar: Sidecar = toml::from_str(text).map_err(|e| e.to_string().trim().to_owned())?;
        let allowed_outbound_hosts = sidecar
            .allowed_outbound_hosts
            .iter()
            .map(|h| HostPattern::parse(h).map_err(|m| format!("allowed_outbound_hosts: {m}")))
            .collect::<Result<_, _>>()?;
        for key in sidecar.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(format!(
                    "env: `{key}` is not a variable name (non-empty, without `=`)"
                ));
            }
        }
        let mut dirs = Vec::new();
        for dir in sidecar.dirs {
            let host = if dir.host.is_absolute() {
                dir.host
            } else {
                base.join(dir.host)
            };
            if !host.is_dir() {
                return Err(format!(
                    "dirs: host directory `{}` does not exist or is not a directory",
                    host.display()
                ));
            }
            if !dir.guest.starts_with('/') {
                return Err(format!(
                    "dirs: guest path `{}` must be absolute (e.g. /data)",
                    dir.guest
                ));
            }
            if dirs.iter().any(|d: &DirGrant| d.guest == dir.guest) {
                return Err(format!("dirs: guest path `{}` is given twice", dir.guest));
            }
            dirs.push(DirGrant {
                host,
                guest: dir.guest,
                read_only: dir.read_only,
            });
        }
        let max_memory = match sidecar.max_memory {
            None => None,
            Some(SizeOrText::Bytes(n)) => {
                Some(usize::try_from(n).map_err(|_| format!("max_memory: {n} is out of range"))?)
            }
            Some(SizeOrText::Text(text)) => {
                Some(parse_bytes(&text).map_err(|m| format!("max_memory: {m}"))?)
            }
        };
        if max_memory == Some(0) {
            return Err("max_memory must be positive".to_owned());
        }
        if sidecar.max_fuel_per_call == Some(0) {
            return Err("max_fuel_per_call must be positive".to_owned());
        }
        let timeout = sidecar
            .timeout
            .map(|t| parse_duration(&t).map_err(|m| format!("timeout: {m}")))
            .transpose()?;
        if timeout == Some(Duration::ZERO) {
            return Err("timeout must be positive".to_owned());
        }
        Ok(Self {
            allowed_outbound_hosts,
            env: sidecar.env,
            config: sidecar.config,
            dirs,
            max_memory,
            max_fuel_per_call: sidecar.max_fuel_per_call,
            timeout,
        })
    }

    /// Whether outbound HTTP to `scheme://host:port` is granted.
    pub fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.allowed_outbound_hosts
            .iter()
            .any(|p| p.matches(scheme, host, port))
    }
}

/// One `allowed_outbound_hosts` entry: `scheme://host[:port]`, Spin's syntax.
///
/// - scheme: `http`, `https` or `*`;
/// - host: a name or IP literal (`[::1]` for IPv6), `*.example.com` (any subdomain,
///   not the domain itself) or `*` (any host);
/// - port: a number, `*`, or omitted for the scheme's default (80 / 443).
///
/// Hosts are compared as the plugin wrote them in the URL, case-insensitively; names
/// are not resolved (an allowed name is trusted to resolve where its owner says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    scheme: Option<String>,
    host: HostMatch,
    port: Option<u16>,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Any,
    Exact(String),
    Subdomain(String),
}

impl HostPattern {
    /// Parses one entry.
    ///
    /// # Errors
    ///
    /// A message quoting the entry and the expected form.
    pub fn parse(text: &str) -> Result<Self, String> {
        let form = "expected `scheme://host:port`, e.g. `https://api.example.com:443`, `http://127.0.0.1:*` or `https://*.example.com`";
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("`{text}` has no scheme: {form}"))?;
        let scheme = match scheme {
            "*" => None,
            "http" | "https" => Some(scheme.to_owned()),
            other => {
                return Err(format!(
                    "`{text}`: scheme `{other}` is not supported (http, https or *)"
                ));
            }
        };
        if rest.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "`{text}` must name a host only, without a path, query or user: {form}"
            ));
        }
        let (host, port) = split_host_port(rest).ok_or_else(|| format!("`{text}`: {form}"))?;
        let port = match port {
            None => match scheme.as_deref() {
                Some("http") => Some(80),
                Some("https") => Some(443),
                _ => {
                    return Err(format!(
                        "`{text}` needs a port when the scheme is `*` (a number or `*`)"
                    ));
                }
            },
            Some("*") => None,
            Some(p) => Some(p.parse::<u16>().map_err(|_| {
                format!("`{text}`: port `{p}` is not a number from 0 to 65535 or `*`")
            })?),
        };
        let host = host.to_ascii_lowercase();
        let host = if host == "*" {
            HostMatch::Any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                return Err(format!(
                    "`{text}`: `*` may only lead the host (`*.example.com`)"
                ));
            }
            HostMatch::Subdomain(suffix.to_owned())
        } else if host.is_empty() || host.contains('*') {
            return Err(format!(
                "`{text}`: `*` may only lead the host (`*.example.com`)"
            ));
        } else {
            HostMatch::Exact(host)
        };
        Ok(Self {
            scheme,
            host,
            port,
            text: text.to_owned(),
        })
    }

    /// Whether a request to `scheme://host:port` matches.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        if self.scheme.as_deref().is_some_and(|s| s != scheme) {
            return false;
        }
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let host = host.to_ascii_lowercase();
        match &self.host {
            HostMatch::Any => true,
            HostMatch::Exact(h) => *h == host,
            HostMatch::Subdomain(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.')),
        }
    }
}

/// Splits `host[:port]`, with IPv6 literals in brackets (`[::1]:8080`).
fn split_host_port(text: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let host = &text[..host.len() + 2];
        return match after {
            "" => Some((host, None)),
            _ => after.strip_prefix(':').map(|p| (host, Some(p))),
        };
    }
    match text.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port))),
        None => Some((text, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> HostPattern {
        HostPattern::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn host_patterns_follow_the_scheme_host_port_form() {
        let cases: &[(&str, &str, &str, u16, bool)] = &[
            (
                "https://api.example.com:443",
                "https",
                "api.example.com",
                443,
                true,
            ),
            (
                "https://api.example.com",
                "https",
                "API.example.com",
                443,
                true,
            ),
            (
                "https://api.example.com",
                "http",
                "api.example.com",
                443,
                false,
            ),
            (
                "https://api.example.com",
                "https",
                "api.example.com",
                8443,
                false,
            ),
            ("http://127.0.0.1:*", "http", "127.0.0.1", 31337, true),
            ("http://127.0.0.1:*", "http", "localhost", 31337, false),
            (
                "https://*.example.com",
                "https",
                "a.b.example.com",
                443,
                true,
            ),
            ("https://*.example.com", "https", "example.com", 443, false),
            (
                "https://*.example.com",
                "https",
                "badexample.com",
                443,
                false,
            ),
            ("*://example.com:8080", "http", "example.com", 8080, true),
            ("*://*:*", "https", "anything.test", 1, true),
            ("http://[::1]:8080", "http", "[::1]", 8080, true),
        ];
        for (text, scheme, host, port, want) in cases {
            assert_eq!(
                pattern(text).matches(scheme, host, *port),
                *want,
                "{text} vs {scheme}://{host}:{port}"
            );
        }
    }

    #[test]
    fn malformed_host_patterns_say_what_is_expected() {
        let cases = [
            (
                "api.example.com",
                "`api.example.com` has no scheme: expected `scheme://host:port`, e.g. `https://api.example.com:443`, `http://127.0.0.1:*` or `https://*.example.com`",
            ),
            (
                "ftp://example.com:21",
                "`ftp://example.com:21`: scheme `ftp` is not supported (http, https or *)",
            ),
            (
                "https://example.com/api",
                "`https://example.com/api` must name a host only, without a path, query or user: expected `scheme://host:port`, e.g. `https://api.example.com:443`, `http://127.0.0.1:*` or `https://*.example.com`",
            ),
            (
                "*://example.com",
                "`*://example.com` needs a port when the scheme is `*` (a number or `*`)",
            ),
            (
                "http://example.com:99999",
                "`http://example.com:99999`: port `99999` is not a number from 0 to 65535 or `*`",
            ),
            (
                "http://api.*.com:80",
                "`http://api.*.com:80`: `*` may only lead the host (`*.example.com`)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(HostPattern::parse(text), Err(want.to_owned()), "{text}");
        }
    }

    #[test]
    fn a_sidecar_parses_every_grant() -> Result<(), String> {
        let base = std::env::temp_dir();
        let grants = Grants::parse(
            r#"
            allowed_outbound_hosts = ["https://api.example.com:443", "http://127.0.0.1:*"]
            max_memory = "64MiB"
            max_fuel_per_call = 1000000
            timeout = "1500ms"
            [env]
            API_BASE = "https://api.example.com"
            [config]
            region = "eu"
            [[dirs]]
            host = "."
            guest = "/data"
            "#,
            &base,
        )?;
        assert_eq!(grants.allowed_outbound_hosts.len(), 2);
        assert!(grants.allows("http", "127.0.0.1", 8080));
        assert!(!grants.allows("http", "10.0.0.1", 8080));
        assert_eq!(grants.max_memory, Some(64 << 20));
        assert_eq!(grants.max_fuel_per_call, Some(1_000_000));
        assert_eq!(grants.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(grants.env["API_BASE"], "https://api.example.com");
        assert_eq!(grants.config["region"], "eu");
        assert_eq!(
            grants.dirs,
            vec![DirGrant {
                host: base.join("."),
                guest: "/data".to_owned(),
                read_only: true
            }]
        );
        assert_eq!(Grants::parse("", &base)?, Grants::default());
        Ok(())
    }

    #[test]
    fn sidecar_mistakes_name_the_key() {
        let base = std::env::temp_dir();
        let cases = [
            (
                "max_memory = \"64 parsecs\"",
                "max_memory: `64 parsecs`: unknown unit `parsecs`; use B, KiB, MiB or GiB",
            ),
            (
                "timeout = \"soon\"",
                "timeout: `soon` is not a duration (e.g. 5s, 500ms)",
            ),
            ("timeout = \"0s\"", "timeout must be positive"),
            (
                "max_fuel_per_call = 0",
                "max_fuel_per_call must be positive",
            ),
            (
                "allowed_outbound_hosts = [\"example.com\"]",
                "allowed_outbound_hosts: `example.com` has no scheme: expected `scheme://host:port`, e.g. `https://api.example.com:443`, `http://127.0.0.1:*` or `https://*.example.com`",
            ),
            (
                "[[dirs]]\nhost = \"/nonexistent-codemode\"\nguest = \"/data\"",
                "dirs: host directory `/nonexistent-codemode` does not exist or is not a directory",
            ),
            (
                "[[dirs]]\nhost = \".\"\nguest = \"data\"",
                "dirs: guest path `data` must be absolute (e.g. /data)",
            ),
            (
                "[env]\n\"A=B\" = \"x\"",
                "env: `A=B` is not a variable name (non-empty, without `=`)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(Grants::parse(text, &base), Err(want.to_owned()), "{text}");
        }
        // Unknown keys are refused with toml's own message, which names the key.
        let unknown = Grants::parse("allowed_hosts = []", &base).unwrap_err();
        assert!(
            unknown.contains("unknown field `allowed_hosts`"),
            "{unknown}"
        );
    }
}
