//! Example plugin `fetch`: `web.get` fetches a URL with outbound HTTP (`wasi:http`).
//!
//! The host decides where requests may go: only the hosts listed in the sidecar
//! `fetch.toml` (`allowed_outbound_hosts`); any other request is refused and the
//! agent is told which host was refused.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use codemode_sdk::Capability;
use exports::example::fetch::web::{Guest, Response};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingRequest, RequestOptions, Scheme};
use wasip2::io::streams::StreamError;

/// Largest body returned; the host's default per-value budget.
const MAX_BODY_BYTES: usize = 1 << 20;
/// Bytes read from the body stream at a time.
const READ_CHUNK: u64 = 64 << 10;

struct Fetch;

/// A short, readable reason for a failed request, for the agent (the host's own
/// debug text would show payload structs and field names).
fn reason(code: &ErrorCode) -> &'static str {
    match code {
        ErrorCode::DnsTimeout => "the host name lookup timed out",
        ErrorCode::DnsError(_) => "the host name could not be resolved",
        ErrorCode::DestinationNotFound => "the destination was not found",
        ErrorCode::DestinationUnavailable => "the destination is unavailable",
        ErrorCode::DestinationIpProhibited => "the destination address is prohibited",
        ErrorCode::DestinationIpUnroutable => "the destination address is unroutable",
        ErrorCode::ConnectionRefused => "the connection was refused",
        ErrorCode::ConnectionTerminated => "the connection was closed",
        ErrorCode::ConnectionTimeout => "connecting timed out",
        ErrorCode::ConnectionReadTimeout => "timed out waiting for the response",
        ErrorCode::ConnectionWriteTimeout => "timed out sending the request",
        ErrorCode::ConnectionLimitReached => "too many connections",
        ErrorCode::TlsProtocolError => "TLS failed",
        ErrorCode::TlsCertificateError => "the TLS certificate was not accepted",
        ErrorCode::TlsAlertReceived(_) => "the server ended TLS with an alert",
        ErrorCode::HttpRequestDenied => "the request was denied",
        ErrorCode::HttpRequestLengthRequired => "the request needs a length",
        ErrorCode::HttpRequestBodySize(_) => "the request body is too large",
        ErrorCode::HttpRequestMethodInvalid => "the request method is invalid",
        ErrorCode::HttpRequestUriInvalid => "the URL is invalid",
        ErrorCode::HttpRequestUriTooLong => "the URL is too long",
        ErrorCode::HttpRequestHeaderSectionSize(_) | ErrorCode::HttpRequestHeaderSize(_) => {
            "the request headers are too large"
        }
        ErrorCode::HttpRequestTrailerSectionSize(_) | ErrorCode::HttpRequestTrailerSize(_) => {
            "the request trailers are too large"
        }
        ErrorCode::HttpResponseIncomplete => "the response was incomplete",
        ErrorCode::HttpResponseHeaderSectionSize(_) | ErrorCode::HttpResponseHeaderSize(_) => {
            "the response headers are too large"
        }
        ErrorCode::HttpResponseBodySize(_) => "the response body is too large",
        ErrorCode::HttpResponseTrailerSectionSize(_) | ErrorCode::HttpResponseTrailerSize(_) => {
            "the response trailers are too large"
        }
        ErrorCode::HttpResponseTransferCoding(_) => "the response transfer coding is not supported",
        ErrorCode::HttpResponseContentCoding(_) => "the response content coding is not supported",
        ErrorCode::HttpResponseTimeout => "the response timed out",
        ErrorCode::HttpUpgradeFailed => "the protocol upgrade failed",
        ErrorCode::HttpProtocolError => "the server broke the HTTP protocol",
        ErrorCode::LoopDetected => "a request loop was detected",
        ErrorCode::ConfigurationError => "the host's HTTP configuration is wrong",
        ErrorCode::InternalError(_) => "the host failed internally",
    }
}

impl Guest for Fetch {
    fn get(url: String, timeout_ms: Option<u32>) -> Result<Response, String> {
        let target = Target::parse(&url)?;
        let request = OutgoingRequest::new(Fields::new());
        let set = |ok: Result<(), ()>, what: &str| {
            ok.map_err(|()| format!("url {url:?}: invalid {what}"))
        };
        set(request.set_method(&Method::Get), "method")?;
        set(request.set_scheme(Some(&target.scheme)), "scheme")?;
        set(request.set_authority(Some(&target.authority)), "host")?;
        set(
            request.set_path_with_query(Some(&target.path_with_query)),
            "path",
        )?;
        let options = RequestOptions::new();
        if let Some(ms) = timeout_ms {
            let nanos = u64::from(ms) * 1_000_000;
            // Each setter fails only when the host does not support the option.
            let _ = options.set_connect_timeout(Some(nanos));
            let _ = options.set_first_byte_timeout(Some(nanos));
            let _ = options.set_between_bytes_timeout(Some(nanos));
        }
        let pending = outgoing_handler::handle(request, Some(options))
            .map_err(|code| format!("GET {url} failed: {}", reason(&code)))?;
        pending.subscribe().block();
        let response = match pending.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(code))) => return Err(format!("GET {url} failed: {}", reason(&code))),
            Some(Err(())) | None => return Err(format!("GET {url} failed: no response")),
        };
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .first()
            .map(|v| String::from_utf8_lossy(v).into_owned());
        let body = response
            .consume()
            .map_err(|()| format!("GET {url}: the body cannot be read"))?;
        let stream = body
            .stream()
            .map_err(|()| format!("GET {url}: the body cannot be read"))?;
        let mut bytes = Vec::new();
        loop {
            match stream.blocking_read(READ_CHUNK) {
                Ok(chunk) => {
                    bytes.extend_from_slice(&chunk);
                    if bytes.len() > MAX_BODY_BYTES {
                        return Err(format!(
                            "GET {url}: the body is larger than {MAX_BODY_BYTES} bytes"
                        ));
                    }
                }
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(error)) => {
                    return Err(format!(
                        "GET {url}: reading the body failed: {}",
                        error.to_debug_string()
                    ));
                }
            }
        }
        let body = String::from_utf8(bytes)
            .map_err(|_| format!("GET {url}: the body is not UTF-8 text"))?;
        Ok(Response {
            status,
            content_type,
            body,
        })
    }
}

/// The parts of an `http(s)://host[:port]/path?query` URL a request needs.
struct Target {
    scheme: Scheme,
    authority: String,
    path_with_query: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self, String> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else {
            return Err(format!("url {url:?} must start with http:// or https://"));
        };
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() {
            return Err(format!("url {url:?} has no host"));
        }
        let path_with_query = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        Ok(Self {
            scheme,
            authority: authority.to_owned(),
            path_with_query,
        })
    }
}

export!(Fetch);

codemode_sdk::metadata![
    Capability::new("web.get", "Fetch a URL with HTTP GET and return its status, content type and body text.")
        .with_description("Only hosts the operator allows can be reached; any other host fails with a message naming it. The body is returned as text (at most 1 MiB); decode JSON with json.decode(response[\"body\"]). timeout_ms bounds connecting and each wait for data.")
        .with_search_terms(["http", "download", "url", "fetch", "json", "api request"]),
];

// A GET reads: it changes nothing (on servers that keep HTTP's promise), and
// reaches the web, whatever the hosts allowed.
codemode_sdk::annotations![
    codemode_sdk::Annotated::new("web.get")
        .read_only(true)
        .idempotent(true)
        .open_world(true),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_host_and_path() {
        let t = Target::parse("http://127.0.0.1:8080/a/b?x=1").unwrap();
        assert!(matches!(t.scheme, Scheme::Http));
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(t.path_with_query, "/a/b?x=1");
        let t = Target::parse("https://example.com?q").unwrap();
        assert_eq!(t.authority, "example.com");
        assert_eq!(t.path_with_query, "/?q");
        assert_eq!(
            Target::parse("https://example.com")
                .unwrap()
                .path_with_query,
            "/"
        );
        assert_eq!(
            Target::parse("ftp://x").err(),
            Some("url \"ftp://x\" must start with http:// or https://".to_owned())
        );
        assert_eq!(
            Target::parse("http:///x").err(),
            Some("url \"http:///x\" has no host".to_owned())
        );
    }
}
