//! A registry of the tests' own: one that offers the OCI 1.1 referrers API (the
//! Debian registry does not), and, as a registry is untrusted input, one that
//! answers each request the way a broken or hostile one would (a 10 GB blob, a manifest of
//! 100,000 layers, an endless body, a slow drip, a redirect to another host, bytes
//! that are not their digest, a tag that flips), and `pull` refuses each with a
//! clear message, nothing half-written in the plugins folder; a server whose
//! `[[plugin]]` entry names such a registry serves on.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::registry::{contents, folder, path, pull, refusal};
use crate::support::{HttpServer, example_plugin_files, execute_http, wait_for_log};

/// The most an endless body sends before giving up (the client must stop first).
const ENDLESS_CAP: usize = 64 * 1024 * 1024;

/// How a request is answered.
enum Answer {
    /// A status, headers and a body (`Content-Length` set from it unless the
    /// headers give one).
    Bytes(u16, Vec<(String, String)>, Vec<u8>),
    /// 200 with a chunked body that never ends (up to [`ENDLESS_CAP`]).
    Endless,
    /// 200 with `Content-Length` of `body`, one byte of it every `every`.
    Drip(Vec<u8>, Duration),
}

fn ok(content_type: &str, body: Vec<u8>) -> Answer {
    Answer::Bytes(
        200,
        vec![("Content-Type".into(), content_type.into())],
        body,
    )
}

/// The fake registry: answers `GET /v2/` itself, every other request with the
/// handler's answer; one thread per connection; stops when dropped.
struct Fake {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Fake {
    fn start(
        bind: &str,
        handler: impl Fn(&str, &str, Option<&str>) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind((bind, 0)).expect("bind the fake registry");
        listener.set_nonblocking(true).expect("nonblocking accept");
        let port = listener.local_addr().expect("its address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (handler, flag) = (handler.clone(), flag.clone());
                        std::thread::spawn(move || serve(stream, &*handler, &flag));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self { port, stop }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answers the requests of one connection.
fn serve(
    stream: TcpStream,
    handler: &(dyn Fn(&str, &str, Option<&str>) -> Answer + Send + Sync),
    stop: &AtomicBool,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or_default().to_owned(),
            parts.next().unwrap_or_default().to_owned(),
        );
        let mut length = 0usize;
        let mut authorization = None;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
                if name.eq_ignore_ascii_case("authorization") {
                    authorization = Some(value.trim().to_owned());
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answer = if target == "/v2/" {
            ok("application/json", b"{}".to_vec())
        } else {
            handler(&method, &target, authorization.as_deref())
        };
        let head = method == "HEAD";
        let written = match answer {
            Answer::Bytes(status, headers, body) => {
                let mut text = format!("HTTP/1.1 {status} X\r\n");
                if !headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                {
                    text.push_str(&format!("Content-Length: {}\r\n", body.len()));
                }
                for (name, value) in headers {
                    text.push_str(&format!("{name}: {value}\r\n"));
                }
                text.push_str("\r\n");
                writer.write_all(text.as_bytes()).and_then(|()| {
                    if head {
                        Ok(())
                    } else {
                        writer.write_all(&body)
                    }
                })
            }
            Answer::Endless => {
                let chunk = vec![b'{'; 64 * 1024];
                let mut sent = 0;
                let mut result = writer.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nTransfer-Encoding: chunked\r\n\r\n",
                );
                while result.is_ok() && sent < ENDLESS_CAP && !stop.load(Ordering::Relaxed) {
                    result = writer
                        .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                        .and_then(|()| writer.write_all(&chunk))
                        .and_then(|()| writer.write_all(b"\r\n"));
                    sent += chunk.len();
                }
                return;
            }
            Answer::Drip(body, every) => {
                let mut result = writer.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                for byte in body {
                    if result.is_err() || stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(every);
                    result = writer.write_all(&[byte]).and_then(|()| writer.flush());
                }
                return;
            }
        };
        if written.is_err() {
            return;
        }
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A Wasm artifact's manifest naming a layer of `size` bytes and `digest`.
fn manifest(digest: &str, size: u64, config: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": sha256(config.as_bytes()), "size": config.len()},
        "layers": [{"mediaType": "application/wasm", "digest": digest, "size": size}],
    }))
    .expect("a manifest")
}

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// A plugins folder holding the running version of `x.wasm`.
fn running(label: &str) -> std::path::PathBuf {
    let dir = folder(label);
    std::fs::copy(&example_plugin_files()[1], dir.join("x.wasm")).expect("a running version");
    dir
}

/// `pull` of `reference` into `dir` fails with `expected` after `cannot pull
/// REFERENCE: `, leaving `dir` as it was.
fn refused(dir: &Path, reference: &str, extra: &[&str], expected: &str) {
    let before = contents(dir);
    let mut args = vec![
        reference,
        "--plugins",
        path(dir),
        "--name",
        "x",
        "--verify",
        "off",
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = pull(&args);
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    assert_eq!(
        refusal(&stderr),
        format!("cannot pull {reference}: {expected}")
    );
    assert_eq!(
        contents(dir),
        before,
        "{reference}: the folder is as it was"
    );
}

#[test]
fn sizes_are_capped_before_and_while_reading() {
    let component = std::fs::read(&example_plugin_files()[0]).expect("a component");
    let layer = sha256(&component);
    let small = layer.clone();
    let fake = Fake::start("127.0.0.1", move |_, target, _| {
        let config = r#"{"os":"wasip2"}"#;
        match target {
            // A 10 GB component.
            "/v2/team/huge/manifests/1" => {
                ok(MANIFEST_TYPE, manifest(&small, 10_000_000_000, config))
            }
            // A small one whose answer says it is 10 GB, and one without end.
            "/v2/team/lying/manifests/1" | "/v2/team/endless-blob/manifests/1" => {
                ok(MANIFEST_TYPE, manifest(&small, 100, config))
            }
            path if path.starts_with("/v2/team/lying/blobs/") => Answer::Bytes(
                200,
                vec![("Content-Length".into(), "10000000000".into())],
                Vec::new(),
            ),
            path if path.starts_with("/v2/team/endless-blob/blobs/") => Answer::Endless,
            // A manifest of 100,000 layers, and one without end.
            "/v2/team/layers/manifests/1" => {
                let layers: Vec<_> = (0..100_000)
                    .map(|_| json!({"mediaType": "application/wasm", "digest": small, "size": 1}))
                    .collect();
                ok(
                    MANIFEST_TYPE,
                    serde_json::to_vec(&json!({"schemaVersion": 2, "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": small, "size": 1}, "layers": layers}))
                        .expect("JSON"),
                )
            }
            "/v2/team/endless/manifests/1" => Answer::Endless,
            _ => Answer::Bytes(404, Vec::new(), Vec::new()),
        }
    });
    let dir = running("hostile-sizes");
    let host = format!("127.0.0.1:{}", fake.port);
    refused(
        &dir,
        &format!("{host}/team/huge:1"),
        &[],
        &format!("the registry's blob {layer} is over 268435456 bytes: refused"),
    );
    refused(
        &dir,
        &format!("{host}/team/huge:1"),
        &["--max-pull-bytes", "1MiB"],
        &format!("the registry's blob {layer} is over 1048576 bytes: refused"),
    );
    refused(
        &dir,
        &format!("{host}/team/lying:1"),
        &[],
        &format!("the registry's blob {layer} is over 100 bytes: refused"),
    );
    refused(
        &dir,
        &format!("{host}/team/endless-blob:1"),
        &[],
        &format!("the registry's blob {layer} is over 100 bytes: refused"),
    );
    refused(
        &dir,
        &format!("{host}/team/layers:1"),
        &[],
        "the registry's manifest team/layers:1 is over 4194304 bytes: refused",
    );
    refused(
        &dir,
        &format!("{host}/team/endless:1"),
        &[],
        "the registry's manifest team/endless:1 is over 4194304 bytes: refused",
    );
}

#[test]
fn a_slow_drip_a_redirect_elsewhere_wrong_bytes_and_a_flipping_tag_are_refused() {
    let component = std::fs::read(&example_plugin_files()[0]).expect("a component");
    let layer = sha256(&component);
    let config = r#"{"os":"wasip2"}"#;
    let good = manifest(&layer, component.len() as u64, config);
    let other = manifest(
        &layer,
        component.len() as u64,
        r#"{"os":"wasip2","flip":1}"#,
    );
    let (good_digest, other_digest) = (sha256(&good), sha256(&other));
    // Another origin (another loopback address) that would serve the manifest.
    let elsewhere = Fake::start("127.0.0.2", {
        let good = good.clone();
        move |_, _, _| ok(MANIFEST_TYPE, good.clone())
    });
    let elsewhere_port = elsewhere.port;
    let flips = Arc::new(AtomicUsize::new(0));
    let fake = Fake::start("127.0.0.1", {
        let (good, other, component) = (good.clone(), other.clone(), component.clone());
        let good_digest = good_digest.clone();
        move |_, target, _| match target {
            "/v2/team/drip/manifests/1" => ok(MANIFEST_TYPE, good.clone()),
            path if path.starts_with("/v2/team/drip/blobs/") => {
                Answer::Drip(component.clone(), Duration::from_millis(200))
            }
            "/v2/team/moved/manifests/1" => Answer::Bytes(
                307,
                vec![(
                    "Location".into(),
                    format!("http://127.0.0.2:{elsewhere_port}/v2/team/moved/manifests/1"),
                )],
                Vec::new(),
            ),
            // Asked by digest, it answers other bytes.
            path if path == format!("/v2/team/forged/manifests/{good_digest}") => {
                ok(MANIFEST_TYPE, other.clone())
            }
            // Its digest header names other bytes than the body's.
            "/v2/team/header/manifests/1" => Answer::Bytes(
                200,
                vec![
                    ("Content-Type".into(), MANIFEST_TYPE.into()),
                    ("Docker-Content-Digest".into(), sha256(&other)),
                ],
                good.clone(),
            ),
            // Each look at the tag names the other version.
            "/v2/team/flip/manifests/1" => {
                let body = if flips.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
                    good.clone()
                } else {
                    other.clone()
                };
                Answer::Bytes(
                    200,
                    vec![
                        ("Content-Type".into(), MANIFEST_TYPE.into()),
                        ("Docker-Content-Digest".into(), sha256(&body)),
                    ],
                    body,
                )
            }
            path if path.contains("/blobs/") => ok("application/octet-stream", component.clone()),
            _ => Answer::Bytes(404, Vec::new(), Vec::new()),
        }
    });
    let dir = running("hostile-answers");
    let host = format!("127.0.0.1:{}", fake.port);
    refused(
        &dir,
        &format!("{host}/team/drip:1"),
        &["--pull-timeout", "2s"],
        "it took longer than 2s (--pull-timeout)",
    );
    refused(
        &dir,
        &format!("{host}/team/moved:1"),
        &[],
        &format!(
            "the registry redirected manifest team/moved:1 to http://127.0.0.2:{elsewhere_port}/v2/team/moved/manifests/1, outside its origin: refused"
        ),
    );
    refused(
        &dir,
        &format!("{host}/team/forged@{good_digest}"),
        &[],
        &format!(
            "the registry's manifest team/forged@{good_digest} does not match its digest: expected {good_digest}, got {other_digest}"
        ),
    );
    refused(
        &dir,
        &format!("{host}/team/header:1"),
        &[],
        &format!(
            "the registry's manifest team/header:1 does not match its digest: expected {other_digest}, got {good_digest}"
        ),
    );
    refused(
        &dir,
        &format!("{host}/team/flip:1"),
        &[],
        &format!(
            "the tag moved while it was pulled ({good_digest}, then {other_digest}): nothing was written"
        ),
    );
    assert!(
        !contents(&dir)
            .iter()
            .any(|(name, _)| name.ends_with(".pulling")),
        "no temporary file is left"
    );

    // A server whose [[plugin]] entry names the flipping tag serves its other
    // plugins, says why the pull failed, and keeps trying.
    let base = folder("hostile-server");
    let plugins = base.join("plugins");
    std::fs::create_dir_all(&plugins).expect("the plugins folder");
    std::fs::copy(&example_plugin_files()[0], plugins.join("records.wasm")).expect("a plugin");
    let config = base.join("codemode.toml");
    std::fs::write(
        &config,
        format!("verify = \"off\"\npull-interval = \"1s\"\n\n[[plugin]]\nref = \"{host}/team/flip:1\"\nname = \"flip\"\n"),
    )
    .expect("the config");
    let server = HttpServer::start(&[
        "--config",
        path(&config),
        "--plugins",
        path(&plugins),
        "--allow-all",
    ]);
    wait_for_log(&server, "the tag moved while it was pulled", 1);
    assert!(!plugins.join("flip.wasm").exists(), "nothing was written");
    let readyz = crate::support::raw_request(server.port, "GET", "/readyz", &[], "");
    assert_eq!(
        (readyz.status, readyz.body.as_str()),
        (
            503,
            format!("not ready: plugins of the config file not pulled yet\nplugins not pulled yet:\n  {host}/team/flip:1\n").as_str()
        )
    );
    assert_eq!(
        execute_http(
            server.port,
            "def main():\n    return records.lookup(key=\"bk-0042\")[\"key\"]"
        ),
        Ok(json!("bk-0042"))
    );
}

#[test]
fn a_signature_found_through_the_referrers_api_verifies() {
    let component = std::fs::read(&example_plugin_files()[0]).expect("a component");
    let layer = sha256(&component);
    let artifact = manifest(&layer, component.len() as u64, r#"{"os":"wasip2"}"#);
    let digest = sha256(&artifact);
    let dir = folder("referrers");
    let key = crate::registry::Key::new(&dir.join("keys"), "signer", false);
    // cosign's payload (its identity is not checked: registries get mirrored),
    // signed by openssl once, in a manifest whose subject is the artifact (as
    // `cosign sign --registry-referrers-mode=oci-1-1` stores it).
    let payload = format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"registry.example/team/ref"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
    )
    .into_bytes();
    let signature = key.sign(&payload);
    let signature_manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "artifactType": "application/vnd.dev.cosign.artifact.sig.v1+json",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256(b"{}"), "size": 2},
        "layers": [{
            "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
            "digest": sha256(&payload),
            "size": payload.len(),
            "annotations": {"dev.cosignproject.cosign/signature": signature},
        }],
        "subject": {"mediaType": MANIFEST_TYPE, "digest": digest, "size": artifact.len()},
    }))
    .expect("JSON");
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": MANIFEST_TYPE, "digest": sha256(b"an SBOM"), "size": 7, "artifactType": "application/spdx+json"},
            {"mediaType": MANIFEST_TYPE, "digest": sha256(&signature_manifest), "size": signature_manifest.len(), "artifactType": "application/vnd.dev.cosign.artifact.sig.v1+json"},
        ],
    }))
    .expect("JSON");
    let fake = Fake::start("127.0.0.1", {
        let (artifact, component, digest) = (artifact.clone(), component.clone(), digest.clone());
        move |_, target, _| match target {
            "/v2/team/ref/manifests/1" => ok(MANIFEST_TYPE, artifact.clone()),
            path if path == format!("/v2/team/ref/referrers/{digest}") => {
                ok("application/vnd.oci.image.index.v1+json", index.clone())
            }
            path if path == format!("/v2/team/ref/manifests/{}", sha256(&signature_manifest)) => {
                ok(MANIFEST_TYPE, signature_manifest.clone())
            }
            path if path == format!("/v2/team/ref/blobs/{}", sha256(&payload)) => {
                ok("application/octet-stream", payload.clone())
            }
            path if path.starts_with("/v2/team/ref/blobs/") => {
                ok("application/octet-stream", component.clone())
            }
            _ => Answer::Bytes(404, Vec::new(), Vec::new()),
        }
    });
    let host = format!("127.0.0.1:{}", fake.port);
    let reference = format!("{host}/team/ref:1");
    let (code, stdout, stderr) = pull(&[
        &reference,
        "--plugins",
        path(&dir),
        "--verify-key",
        path(&key.public),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "{}: pulled ({digest}) from {reference}; signature verified by key {} (referrers)\n",
            dir.join("ref.wasm").display(),
            key.id
        )
    );
}

#[test]
fn credentials_go_to_the_registry_and_its_token_service_only() {
    use base64::Engine as _;
    let component = std::fs::read(&example_plugin_files()[0]).expect("a component");
    let layer = sha256(&component);
    let artifact = manifest(&layer, component.len() as u64, r#"{"os":"wasip2"}"#);
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice:s3cret")
    );
    // Another origin naming itself a token service: it must never see a
    // credential.
    let seen_elsewhere = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let elsewhere = Fake::start("127.0.0.2", {
        let seen = seen_elsewhere.clone();
        move |_, target, authorization| {
            seen.lock()
                .expect("lock")
                .push(format!("{target} {authorization:?}"));
            ok("application/json", br#"{"token":"stolen"}"#.to_vec())
        }
    });
    let elsewhere_port = elsewhere.port;
    let port = Arc::new(std::sync::OnceLock::<u16>::new());
    let fake = Fake::start("127.0.0.1", {
        let (artifact, component, basic, port) = (
            artifact.clone(),
            component.clone(),
            basic.clone(),
            port.clone(),
        );
        move |_, target, authorization| {
            let own = port.get().copied().unwrap_or_default();
            let (repository, wants, challenge) = match target.split('/').nth(3) {
                Some("basic") => ("basic", basic.clone(), r#"Basic realm="fake""#.to_owned()),
                Some("bearer") => (
                    "bearer",
                    "Bearer t0ken".to_owned(),
                    format!(
                        r#"Bearer realm="http://127.0.0.1:{own}/token",service="fake",scope="repository:team/bearer:pull""#
                    ),
                ),
                Some("elsewhere") => (
                    "elsewhere",
                    "Bearer stolen".to_owned(),
                    format!(
                        r#"Bearer realm="http://127.0.0.2:{elsewhere_port}/token",service="fake""#
                    ),
                ),
                Some("file") => (
                    "file",
                    "Bearer file-token".to_owned(),
                    r#"Bearer realm="x""#.to_owned(),
                ),
                _ if target.starts_with("/token?") => {
                    return if authorization == Some(basic.as_str()) {
                        ok("application/json", br#"{"token":"t0ken"}"#.to_vec())
                    } else {
                        Answer::Bytes(401, Vec::new(), Vec::new())
                    };
                }
                _ => return Answer::Bytes(404, Vec::new(), Vec::new()),
            };
            if authorization != Some(wants.as_str()) {
                return Answer::Bytes(
                    401,
                    vec![("WWW-Authenticate".into(), challenge)],
                    Vec::new(),
                );
            }
            if target == format!("/v2/team/{repository}/manifests/1") {
                ok(MANIFEST_TYPE, artifact.clone())
            } else if target.starts_with(&format!("/v2/team/{repository}/blobs/")) {
                ok("application/octet-stream", component.clone())
            } else {
                Answer::Bytes(404, Vec::new(), Vec::new())
            }
        }
    });
    port.set(fake.port).expect("set once");
    let host = format!("127.0.0.1:{}", fake.port);
    let dir = folder("credentials");
    let docker = dir.join("docker.json");
    std::fs::write(
        &docker,
        format!(
            r#"{{"auths": {{"{host}": {{"auth": "{}"}}}}}}"#,
            base64::engine::general_purpose::STANDARD.encode("alice:s3cret")
        ),
    )
    .expect("a Docker config");
    let token = dir.join("token");
    std::fs::write(&token, "file-token\n").expect("a token file");
    let pulled = |reference: &str, extra: &[&str]| {
        let mut args = vec![reference, "--plugins", path(&dir), "--verify", "off"];
        args.extend_from_slice(extra);
        pull(&args)
    };

    for repository in ["basic", "bearer"] {
        let (code, stdout, stderr) = pulled(
            &format!("{host}/team/{repository}:1"),
            &["--registry-auth", path(&docker)],
        );
        assert_eq!(code, 0, "{repository}: {stderr}");
        assert!(stdout.contains(": pulled (sha256:"), "{stdout}");
    }
    let (code, _, stderr) = pulled(
        &format!("{host}/team/file:1"),
        &["--registry-token", path(&token)],
    );
    assert_eq!(code, 0, "{stderr}");

    // Without credentials, the registry's refusal says there were none.
    let (code, _, stderr) = pulled(
        &format!("{host}/team/bearer:1"),
        &["--registry-auth", path(&dir.join("missing.json"))],
    );
    assert_eq!(code, 1);
    assert!(
        refusal(&stderr).starts_with(&format!("cannot pull {host}/team/bearer:1: Docker config ")),
        "{stderr}"
    );
    let empty = dir.join("empty.json");
    std::fs::write(&empty, r#"{"auths": {}}"#).expect("an empty Docker config");
    let (code, _, stderr) = pulled(
        &format!("{host}/team/bearer:1"),
        &["--registry-auth", path(&empty)],
    );
    assert_eq!(code, 1);
    assert_eq!(
        refusal(&stderr),
        format!(
            "cannot pull {host}/team/bearer:1: the registry refused access to manifest team/bearer:1: its token service answered 401 Unauthorized (no credentials are configured for this registry)"
        )
    );

    // A token file the registry refuses is named as such.
    std::fs::write(&token, "wrong-token\n").expect("a token file");
    let (code, _, stderr) = pulled(
        &format!("{host}/team/file:1"),
        &["--registry-token", path(&token)],
    );
    assert_eq!(code, 1);
    assert_eq!(
        refusal(&stderr),
        format!(
            "cannot pull {host}/team/file:1: the registry refused access to manifest team/file:1: it refused the token of the token file (401)"
        )
    );

    // A plain-HTTP token service on another host gets nothing.
    let (code, _, stderr) = pulled(
        &format!("{host}/team/elsewhere:1"),
        &["--registry-auth", path(&docker)],
    );
    assert_eq!(code, 1);
    assert_eq!(
        refusal(&stderr),
        format!(
            "cannot pull {host}/team/elsewhere:1: the registry refused access to manifest team/elsewhere:1: its token realm `http://127.0.0.2:{elsewhere_port}/token` is neither HTTPS nor on the registry's own host: no credentials are sent there"
        )
    );
    assert_eq!(*seen_elsewhere.lock().expect("lock"), Vec::<String>::new());
}
