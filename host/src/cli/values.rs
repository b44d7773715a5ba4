//! How flag values are read: durations, sizes, addresses and URLs, each refused
//! with one clear reason.

use std::net::SocketAddr;
use std::time::Duration;

use codemode_server::authz::oauth::{MAX_LEEWAY, MIN_KEYS_REFRESH};
use codemode_server::units::{
    MAX_DURATION, MAX_DURATION_TEXT, MAX_SIZE, parse_bytes, parse_duration,
};

/// A duration that must be positive and at most a day: zero, with a unit or
/// without, says so at once (rather than "needs a unit" and then "must be
/// positive").
pub(super) fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = duration_or_zero(text)?;
    if duration.is_zero() {
        return Err("must be positive (e.g. 5s, 500ms)".to_owned());
    }
    if duration > MAX_DURATION {
        return Err(MAX_DURATION_TEXT.to_owned());
    }
    Ok(duration)
}

/// A duration, where zero needs no unit (`0`, `0.0`): the flag's own check then
/// says what zero is, rather than "needs a unit".
fn duration_or_zero(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.chars().all(|c| c == '0' || c == '.') {
        return Ok(Duration::ZERO);
    }
    parse_duration(text)
}

/// `--oauth-keys-refresh`: a duration of at least [`MIN_KEYS_REFRESH`].
pub(super) fn keys_refresh(text: &str) -> Result<Duration, String> {
    let duration = positive_duration(text)?;
    if duration < MIN_KEYS_REFRESH {
        return Err("must be at least 1s".to_owned());
    }
    Ok(duration)
}

/// `--oauth-leeway`: whole seconds, from 0s to [`MAX_LEEWAY`].
pub(super) fn leeway(text: &str) -> Result<Duration, String> {
    let duration = duration_or_zero(text)?;
    if duration.subsec_nanos() != 0 {
        return Err("must be whole seconds (e.g. 30s, 2m)".to_owned());
    }
    if duration > MAX_LEEWAY {
        return Err("at most 10m".to_owned());
    }
    Ok(duration)
}

/// A size of at most [`MAX_SIZE`].
pub(super) fn size(text: &str) -> Result<usize, String> {
    let size = parse_bytes(text)?;
    if size > MAX_SIZE {
        return Err("at most 4GiB".to_owned());
    }
    Ok(size)
}

/// A compile memory cap: positive, at most 1 TiB.
pub(super) fn compile_memory(text: &str) -> Result<u64, String> {
    memory_size(text, "4GiB").map(|size| size as u64)
}

/// A `--max-total-memory`: any size up to 1TiB (the execution limits check it
/// against --max-memory).
pub(super) fn total_memory(text: &str) -> Result<usize, String> {
    memory_size(text, "8GiB")
}

/// A memory size: positive (`example` is shown when it is not), at most 1 TiB.
fn memory_size(text: &str, example: &str) -> Result<usize, String> {
    let size = parse_bytes(text)?;
    if size == 0 {
        return Err(format!("must be positive (e.g. {example})"));
    }
    if size > 1 << 40 {
        return Err("at most 1TiB".to_owned());
    }
    Ok(size)
}

/// An OTLP receiver's base URL: `http` or `https`, a host, no query (the traces
/// path is added after it).
pub(super) fn otlp_endpoint(value: &str) -> Result<String, String> {
    let uri: http::Uri = value
        .parse()
        .map_err(|e| format!("not a URL ({e}); e.g. http://127.0.0.1:4318"))?;
    match (uri.scheme_str(), uri.host(), uri.query()) {
        (Some("http" | "https"), Some(_), None) => Ok(value.to_owned()),
        (_, _, Some(_)) => Err("must have no query: /v1/traces is added after it".to_owned()),
        _ => Err(
            "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318".to_owned(),
        ),
    }
}

/// A listening address: `IP:PORT`, `localhost:PORT` or a port alone (both meaning
/// 127.0.0.1, this machine only).
pub(super) fn listen_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let port = text.strip_prefix("localhost:").unwrap_or(text);
    match port.parse::<u16>() {
        Ok(port) => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
        Err(_) => Err(format!(
            "`{text}` is not an address: give IP:PORT, e.g. 127.0.0.1:8080 (this machine only) or 0.0.0.0:8080 (every interface), or a port alone for 127.0.0.1"
        )),
    }
}
