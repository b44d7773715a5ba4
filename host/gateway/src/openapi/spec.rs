//! Reading a spec: from a file or an HTTPS URL, at most [`MAX_SPEC_BYTES`],
//! JSON or YAML (YAML's aliases bounded, so a few lines cannot expand to
//! gigabytes), OpenAPI 3.0, 3.1 or 3.2 (Swagger 2.0 refused by name).

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value as Json};

use super::config::SpecLocation;
use crate::files::read_text;

/// Largest spec read, in bytes. GitHub's description of its whole API (about
/// 1,000 operations) is 11 MB of JSON; a spec past this is refused before it is
/// parsed.
pub const MAX_SPEC_BYTES: u64 = 64 << 20;

/// How long fetching a spec from a URL may take, connection to last byte.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Most YAML nodes a spec may describe, aliases expanded (each alias counts its
/// target again): about ten per byte of a large real spec.
const MAX_YAML_NODES: usize = 20_000_000;

/// Most nesting levels a spec may have (JSON's parser stops at 128 too).
const MAX_NESTING: usize = 128;

/// Most redirects followed, each within the origin first asked (a spec's URL, a
/// service's base URL).
pub const MAX_REDIRECTS: usize = 5;

/// A spec's text as read, and where its relative server URLs are relative to.
pub struct Read {
    /// The text.
    pub text: String,
    /// The URL it came from, when it came from one.
    pub url: Option<url::Url>,
}

/// Reads the spec at `location`.
///
/// # Errors
///
/// Why it cannot be read, for the log and `/readyz`.
pub async fn read(location: &SpecLocation) -> Result<Read, String> {
    match location {
        SpecLocation::File(path) => {
            let path = path.clone();
            let text = tokio::task::spawn_blocking(move || read_file(&path))
                .await
                .map_err(|error| format!("reading it failed: {error}"))??;
            Ok(Read { text, url: None })
        }
        SpecLocation::Url(url) => {
            let parsed = crate::url::check_url("spec", url).map_err(|error| error.to_string())?;
            let text = tokio::time::timeout(FETCH_TIMEOUT, fetch(&parsed))
                .await
                .map_err(|_| format!("no answer within {}s", FETCH_TIMEOUT.as_secs()))??;
            Ok(Read {
                text,
                url: Some(parsed),
            })
        }
    }
}

/// The file at `path`, at most [`MAX_SPEC_BYTES`].
fn read_file(path: &Path) -> Result<String, String> {
    read_text(path, MAX_SPEC_BYTES, "the largest spec read, 64 MiB").map_err(|e| e.to_string())
}

/// The body at `url`, at most [`MAX_SPEC_BYTES`], redirects only within its
/// origin.
async fn fetch(url: &url::Url) -> Result<String, String> {
    let mut response = same_origin_client(url.origin())?
        .get(url.clone())
        .header(
            reqwest::header::ACCEPT,
            "application/json, application/yaml;q=0.9, */*;q=0.5",
        )
        .send()
        .await
        .map_err(|error| format!("GET failed: {}", causes(&error)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("GET answered HTTP {status}"));
    }
    if response
        .content_length()
        .is_some_and(|len| len > MAX_SPEC_BYTES)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| format!("reading the answer failed: {error}"))?
    {
        if (body.len() + chunk.len()) as u64 > MAX_SPEC_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| "it is not UTF-8 text".to_owned())
}

/// The HTTP client of the spec's fetch and of a service's calls: the system's
/// roots trusted, and at most [`MAX_REDIRECTS`] redirects followed, each within
/// `origin` (a redirect elsewhere is the answer, never followed).
///
/// # Errors
///
/// The system's roots or the client cannot be set up.
pub fn same_origin_client(origin: url::Origin) -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        // `previous` holds the URL first asked too: the n-th redirect has n.
        if attempt.previous().len() > MAX_REDIRECTS || attempt.url().origin() != origin {
            attempt.stop()
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .tls_backend_preconfigured(crate::tls::client_config_with_system_roots()?)
        .redirect(policy)
        .build()
        .map_err(|error| format!("HTTP client: {error}"))
}

/// `error` and its causes, joined with `: ` (reqwest's own text names only the
/// first: the certificate that did not verify is at the end of the chain).
pub fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    // Bounded: a chain is a few levels deep.
    for _ in 0..8 {
        let Some(cause) = next else { break };
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        next = cause.source();
    }
    text
}

fn too_large() -> String {
    format!(
        "more than {} MiB, the largest spec read",
        MAX_SPEC_BYTES >> 20
    )
}

/// The spec in `text`: a JSON object (when it starts with `{`) or YAML, of
/// OpenAPI 3.0, 3.1 or 3.2.
///
/// # Errors
///
/// Why it is not such a spec.
pub fn parse(text: &str) -> Result<Map<String, Json>, String> {
    let document: Json = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|error| format!("not valid JSON: {error}"))?
    } else {
        let mut options = serde_saphyr::options::Options::default();
        if let Some(budget) = options.budget.as_mut() {
            budget.max_nodes = MAX_YAML_NODES;
            budget.max_events = MAX_YAML_NODES.saturating_mul(2);
            budget.max_depth = MAX_NESTING;
        }
        serde_saphyr::from_str_with_options(text, options).map_err(|error| {
            // The first line: the rest is a drawing of the place.
            let message = error.to_string();
            let first = message.lines().next().unwrap_or("").trim().to_owned();
            format!("not valid JSON or YAML: {first}")
        })?
    };
    let Json::Object(document) = document else {
        return Err("not an OpenAPI description: it is not an object".to_owned());
    };
    match (document.get("openapi"), document.get("swagger")) {
        (Some(Json::String(version)), _)
            if ["3.0.", "3.1.", "3.2."]
                .iter()
                .any(|prefix| version.starts_with(prefix)) =>
        {
            Ok(document)
        }
        (Some(Json::String(version)), _) => Err(format!(
            "OpenAPI {version} is not supported: only 3.0, 3.1 and 3.2"
        )),
        (None, Some(_)) => Err(
            "Swagger 2.0 is not supported: convert it to OpenAPI 3 (e.g. with swagger2openapi)"
                .to_owned(),
        ),
        _ => Err("not an OpenAPI description: it has no `openapi` version".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server answering `GET /hop/N` with a redirect to `/hop/N-1`
    /// (`/hop/0`: `200 done`) and `GET /away` with a redirect to another origin
    /// (another port); one connection a request, at most `MAX_CONNECTIONS`.
    async fn redirecting_server() -> url::Url {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const MAX_CONNECTIONS: usize = 32;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let away = format!("http://{}/", elsewhere.local_addr().expect("address"));
        // Elsewhere answers, so that a redirect followed there fails the test
        // at once (a `200` where the redirect was due).
        tokio::spawn(async move {
            for _ in 0..MAX_CONNECTIONS {
                let Ok((mut connection, _)) = elsewhere.accept().await else {
                    return;
                };
                let mut request = vec![0u8; 8 * 1024];
                let _ = connection.read(&mut request).await;
                let _ = connection
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nelsewhere")
                    .await;
                let _ = connection.shutdown().await;
            }
        });
        tokio::spawn(async move {
            for _ in 0..MAX_CONNECTIONS {
                let Ok((mut connection, _)) = listener.accept().await else {
                    return;
                };
                let mut request = vec![0u8; 8 * 1024];
                let Ok(read) = connection.read(&mut request).await else {
                    continue;
                };
                let head = String::from_utf8_lossy(&request[..read]);
                let path = head.split(' ').nth(1).unwrap_or("/");
                let answer = match path.strip_prefix("/hop/").map(str::parse::<u32>) {
                    Some(Ok(0)) => {
                        "HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\ndone"
                            .to_owned()
                    }
                    Some(Ok(n)) => format!(
                        "HTTP/1.1 302 Found\r\nlocation: /hop/{}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        n - 1
                    ),
                    _ => format!(
                        "HTTP/1.1 302 Found\r\nlocation: {away}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    ),
                };
                let _ = connection.write_all(answer.as_bytes()).await;
                let _ = connection.shutdown().await;
            }
        });
        url::Url::parse(&format!("http://{address}/")).expect("URL")
    }

    /// The spec's fetch and a service's calls share this client: five redirects
    /// within the origin are followed, a sixth is the answer, and so is one to
    /// another origin.
    #[tokio::test]
    async fn redirects_are_followed_five_times_within_the_origin_only() {
        let base = redirecting_server().await;
        let client = same_origin_client(base.origin()).expect("client");
        let get = |path: &str| client.get(base.join(path).expect("URL")).send();
        let followed = get("hop/5").await.expect("answer");
        assert_eq!(followed.status(), 200);
        assert_eq!(followed.url().path(), "/hop/0");
        let stopped = get("hop/6").await.expect("answer");
        assert_eq!(stopped.status(), 302);
        assert_eq!(stopped.url().path(), "/hop/1");
        let away = get("away").await.expect("answer");
        assert_eq!(away.status(), 302);
        assert_eq!(away.url().path(), "/away");
    }

    #[test]
    fn json_and_yaml_specs_parse_and_other_versions_are_refused_by_name() {
        let json = parse(r#"{"openapi": "3.1.0", "paths": {}}"#).expect("JSON");
        assert_eq!(json.get("openapi"), Some(&Json::from("3.1.0")));
        let yaml = parse("openapi: 3.0.3\npaths:\n  /a:\n    get:\n      responses:\n        200:\n          description: ok\n").expect("YAML");
        assert!(
            yaml["paths"]["/a"]["get"]["responses"]
                .as_object()
                .expect("responses")
                .contains_key("200"),
            "an unquoted status code is a key: {yaml:?}"
        );
        assert_eq!(
            parse(r#"{"swagger": "2.0"}"#).err().as_deref(),
            Some(
                "Swagger 2.0 is not supported: convert it to OpenAPI 3 (e.g. with swagger2openapi)"
            )
        );
        assert_eq!(
            parse(r#"{"openapi": "4.0.0"}"#).err().as_deref(),
            Some("OpenAPI 4.0.0 is not supported: only 3.0, 3.1 and 3.2")
        );
        assert_eq!(
            parse("[1, 2]").err().as_deref(),
            Some("not an OpenAPI description: it is not an object")
        );
        assert_eq!(
            parse("{")
                .err()
                .as_deref()
                .map(|e| e.starts_with("not valid JSON: ")),
            Some(true)
        );
    }

    #[test]
    fn a_spec_over_64_mib_is_refused_before_it_is_read() {
        let dir = std::env::temp_dir().join(format!("codemode-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the folder");
        let path = dir.join("huge.json");
        // 100 MB, sparse: nothing is written, and nothing must be read.
        let file = std::fs::File::create(&path).expect("create the file");
        file.set_len(100_000_000).expect("size the file");
        assert_eq!(
            read_file(&path),
            Err(
                "100000000 bytes, more than the 67108864 allowed (the largest spec read, 64 MiB)"
                    .to_owned()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_yaml_alias_bomb_is_refused_not_expanded() {
        // Nine levels of nine aliases each: 387 million nodes expanded.
        let mut text = String::from("openapi: 3.0.0\na0: &a0 [x,x,x,x,x,x,x,x,x]\n");
        for level in 1..10 {
            let previous = level - 1;
            let items = vec![format!("*a{previous}"); 9].join(",");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        let refused = parse(&text).expect_err("refused");
        assert!(
            refused.starts_with("not valid JSON or YAML: ") && refused.contains("budget"),
            "{refused}"
        );
    }
}
