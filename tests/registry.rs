//! `codemode-host pull` against a real registry: the CNCF distribution registry
//! (Debian's `docker-registry`, installed by `cargo xtask test`) on a loopback
//! port, artifacts and cosign signatures published by oras-py (not our code),
//! keys made and signatures computed by `openssl` (not our code either). Every
//! refusal leaves the plugins folder exactly as it was.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::stdio::{call, ok};
use crate::support::{drive, example_plugins, host_bin, python, root, test_plugin, wait_until};

/// cosign's signature layer media type.
const SIGNATURE_LAYER: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The CNCF Wasm artifact's config media type.
const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";

/// A `docker-registry` on a loopback port, its storage in a folder of its own;
/// killed when dropped.
pub(crate) struct Registry {
    child: std::process::Child,
    port: u16,
    dir: PathBuf,
}

impl Registry {
    pub(crate) fn start(label: &str) -> Self {
        Self::start_with(label, false)
    }

    /// A registry over HTTPS, its certificate (for 127.0.0.1, self-signed by
    /// openssl) in `cert.pem` of its folder.
    fn start_tls(label: &str) -> Self {
        Self::start_with(label, true)
    }

    fn start_with(label: &str, tls: bool) -> Self {
        let dir = root()
            .join("target/e2e-registry")
            .join(format!("{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the registry's folder");
        let port = crate::support::free_port();
        let mut config = format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("data").display()
        );
        if tls {
            let (cert, key) = crate::support::loopback_certificate(&dir);
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ));
        }
        config.push_str("log:\n  level: error\n");
        std::fs::write(dir.join("config.yml"), config).expect("write the registry's config");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("registry.log")).expect("the registry's log"))
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start docker-registry ({e}): `cargo xtask test` installs it (Debian package docker-registry)")
            });
        let registry = Self { child, port, dir };
        wait_until(
            "the registry to answer /v2/",
            || {
                if tls {
                    std::net::TcpStream::connect(("127.0.0.1", registry.port)).is_ok()
                } else {
                    crate::support::answers(
                        registry.port,
                        b"GET /v2/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                        b"HTTP/1.1 200",
                    )
                }
            },
            || std::fs::read_to_string(registry.dir.join("registry.log")).unwrap_or_default(),
        );
        registry
    }

    pub(crate) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Publishes `wasm` as a Wasm artifact at `repository:tag`; its manifest's digest.
    fn push(&self, repository_tag: &str, wasm: &Path) -> String {
        self.push_with_config(
            repository_tag,
            wasm,
            r#"{"architecture":"wasm","os":"wasip2"}"#,
        )
    }

    /// [`Registry::push`] with `config` as the artifact's config (another config:
    /// another digest for the same component).
    fn push_with_config(&self, repository_tag: &str, wasm: &Path, config_text: &str) -> String {
        let config = self.dir.join("wasm-config.json");
        std::fs::write(&config, config_text).expect("config");
        oras_push(&json!({
            "target": format!("{}/{repository_tag}", self.host()),
            "files": [[wasm, "application/wasm"]],
            "config": [config, WASM_CONFIG],
        }))
    }

    /// Publishes, under cosign's tag for `attached` in `repository`, a signature
    /// by `key` of a payload naming `signed`.
    fn sign(&self, repository: &str, attached: &str, signed: &str, key: &Key) {
        let payload = format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"{}/{repository}"}},"image":{{"docker-manifest-digest":"{signed}"}},"type":"cosign container image signature"}},"optional":null}}"#,
            self.host()
        );
        let file = self.dir.join(format!("payload-{}.json", &signed[7..19]));
        std::fs::write(&file, &payload).expect("write the payload");
        let signature = key.sign(payload.as_bytes());
        let tag = format!("sha256-{}.sig", &attached["sha256:".len()..]);
        oras_push(&json!({
            "target": format!("{}/{repository}:{tag}", self.host()),
            "files": [[file, SIGNATURE_LAYER]],
            "annotations": {file.to_str().expect("utf-8 path"): {"dev.cosignproject.cosign/signature": signature}},
        }));
    }

    /// The file the registry keeps the blob `digest` in.
    fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = &digest["sha256:".len()..];
        self.dir
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Registry {
    /// Stops it (its storage stays until it is dropped).
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn oras_push(script: &Value) -> String {
    let answer = crate::support::run_python("oras_push.py", script);
    answer["digest"].as_str().expect("a digest").to_owned()
}

/// A key pair made by `openssl`, with the key ID the host names it by (the
/// first 16 hex digits of the SHA-256 of its DER public key).
pub(crate) struct Key {
    private: PathBuf,
    pub(crate) public: PathBuf,
    pub(crate) id: String,
    ed25519: bool,
}

impl Key {
    pub(crate) fn new(dir: &Path, name: &str, ed25519: bool) -> Self {
        std::fs::create_dir_all(dir).expect("the keys' folder");
        let private = dir.join(format!("{name}.key"));
        let public = dir.join(format!("{name}.pub"));
        let algorithm: &[&str] = if ed25519 {
            &["-algorithm", "ed25519"]
        } else {
            &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
        };
        openssl(
            &[&["genpkey"], algorithm, &["-out", path(&private)]].concat(),
            b"",
        );
        openssl(
            &[
                "pkey",
                "-in",
                path(&private),
                "-pubout",
                "-out",
                path(&public),
            ],
            b"",
        );
        let der = openssl(
            &["pkey", "-pubin", "-in", path(&public), "-outform", "der"],
            b"",
        );
        let id = hex::encode(Sha256::digest(&der))[..16].to_owned();
        Self {
            private,
            public,
            id,
            ed25519,
        }
    }

    /// Whether openssl verifies `signature` of `payload` with the public key.
    fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        let payload_file = self.public.with_extension("verify-payload");
        let signature_file = self.public.with_extension("verify-signature");
        std::fs::write(&payload_file, payload).expect("write the payload");
        std::fs::write(&signature_file, signature).expect("write the signature");
        let args: Vec<&str> = if self.ed25519 {
            vec![
                "pkeyutl",
                "-verify",
                "-pubin",
                "-inkey",
                path(&self.public),
                "-rawin",
                "-in",
                path(&payload_file),
                "-sigfile",
                path(&signature_file),
            ]
        } else {
            vec![
                "dgst",
                "-sha256",
                "-verify",
                path(&self.public),
                "-signature",
                path(&signature_file),
                path(&payload_file),
            ]
        };
        Command::new("openssl")
            .args(&args)
            .output()
            .is_ok_and(|out| out.status.success())
    }

    /// The base64 signature of `payload`: DER ECDSA over its SHA-256, or Ed25519.
    pub(crate) fn sign(&self, payload: &[u8]) -> String {
        let signature = if self.ed25519 {
            // Ed25519 signs in one shot, from a file (not a pipe).
            let input = self.private.with_extension("payload");
            std::fs::write(&input, payload).expect("write the payload");
            openssl(
                &[
                    "pkeyutl",
                    "-sign",
                    "-rawin",
                    "-inkey",
                    path(&self.private),
                    "-in",
                    path(&input),
                ],
                b"",
            )
        } else {
            openssl(&["dgst", "-sha256", "-sign", path(&self.private)], payload)
        };
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(signature)
    }
}

/// A server on `dir` serves the records example pulled into it.
fn assert_serves_the_records(dir: &Path) {
    let out = drive(
        &["--plugins", path(dir)],
        json!([call(
            "execute",
            json!({"source": "def main():\n    return records.lookup(key=\"bk-0042\")[\"key\"]"})
        )]),
    );
    assert_eq!(ok(&out["results"][0])["result"], json!("bk-0042"));
}

pub(crate) fn path(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn openssl(args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("feed openssl");
    let out = child.wait_with_output().expect("wait for openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `codemode-host pull ARGS`: its exit code, stdout and stderr.
pub(crate) fn pull(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(host_bin())
        .arg("pull")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run codemode-host pull");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The error a failed `pull` logged (its one ERROR line, without the time).
pub(crate) fn refusal(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter_map(|line| {
            line.split_once(" ERROR codemode_host: ")
                .map(|(_, message)| message)
        })
        .collect();
    assert_eq!(lines.len(), 1, "one ERROR line: {stderr}");
    lines[0].to_owned()
}

/// A plugins folder under target/ for `label`, empty.
pub(crate) fn folder(label: &str) -> PathBuf {
    let dir = root()
        .join("target/e2e-registry/folders")
        .join(format!("{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the plugins folder");
    dir
}

/// The names in `dir` and each file's bytes.
pub(crate) fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("list the folder")
        .map(|entry| {
            let entry = entry.expect("an entry");
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path()).expect("read a file"),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_plugin_oras_pushed_and_cosign_signed_is_pulled_verified_and_served() {
    let registry = Registry::start("served");
    let records = example_plugins().join("records.wasm");
    let digest = registry.push("team/records:1.0", &records);
    let keys = registry.dir.join("keys");
    let key = Key::new(&keys, "signer", false);
    registry.sign("team/records", &digest, &digest, &key);
    let dir = folder("served");
    let reference = format!("{}/team/records:1.0", registry.host());

    let (code, stdout, stderr) = pull(&[
        &reference,
        "--plugins",
        path(&dir),
        "--verify-key",
        path(&key.public),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let file = dir.join("records.wasm");
    assert_eq!(
        stdout,
        format!(
            "{}: pulled ({digest}) from {reference}; signature verified by key {} (cosign tag)\n",
            file.display(),
            key.id
        )
    );
    let layer = format!(
        "sha256:{}",
        hex::encode(Sha256::digest(std::fs::read(&records).expect("read")))
    );
    let provenance: Value =
        serde_json::from_slice(&std::fs::read(dir.join("records.oci.json")).expect("provenance"))
            .expect("provenance is JSON");
    assert_eq!(
        provenance,
        json!({"reference": reference, "digest": digest, "layer": layer, "key_id": key.id})
    );
    assert_eq!(
        std::fs::read(&file).expect("pulled"),
        std::fs::read(&records).expect("pushed")
    );

    // Pulled again: nothing to write.
    let (code, stdout, _) = pull(&[
        &reference,
        "--plugins",
        path(&dir),
        "--verify-key",
        path(&key.public),
    ]);
    assert_eq!(code, 0);
    assert!(stdout.contains(": already up to date ("), "{stdout}");

    // An Ed25519 key verifies as well (a rotation: both keys given).
    let ed = Key::new(&keys, "ed", true);
    let second = registry.push("team/records:1.1", &records);
    assert_eq!(second, digest, "the same artifact under a second tag");
    registry.sign("team/records", &digest, &digest, &ed);
    // (Into a folder of its own: two files offering `records` would both be
    // refused.)
    let by_digest = folder("served-by-digest");
    let (code, stdout, stderr) = pull(&[
        &format!("{}/team/records@{digest}", registry.host()),
        "--plugins",
        path(&by_digest),
        "--verify-key",
        path(&key.public),
        "--verify-key",
        path(&ed.public),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.ends_with(&format!(
            "; signature verified by key {} (cosign tag)\n",
            ed.id
        )),
        "{stdout}"
    );

    // The server serves what was pulled.
    assert_serves_the_records(&dir);
}

#[test]
fn require_refuses_unsigned_wrong_key_replayed_tampered_and_unpinned_leaving_the_folder_as_it_was()
{
    let registry = Registry::start("refused");
    let plugins = example_plugins();
    let keys = registry.dir.join("keys");
    let key = Key::new(&keys, "trusted", false);
    let other = Key::new(&keys, "other", false);
    let dir = folder("refused");
    // The running version, which every refusal must leave in place.
    std::fs::copy(plugins.join("stats.wasm"), dir.join("records.wasm")).expect("a running version");
    let before = contents(&dir);
    let host = registry.host();
    let pull_as_records = |reference: &str, extra: &[&str]| {
        let mut args = vec![
            reference,
            "--plugins",
            path(&dir),
            "--name",
            "records",
            "--verify-key",
            path(&key.public),
        ];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = pull(&args);
        assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
        assert_eq!(contents(&dir), before, "the folder is as it was");
        refusal(&stderr)
    };

    let unsigned = registry.push("team/unsigned:1", &plugins.join("records.wasm"));
    assert_eq!(
        pull_as_records(&format!("{host}/team/unsigned:1"), &[]),
        format!(
            "cannot pull {host}/team/unsigned:1: {unsigned} is refused (verify = require): it is not signed: no signature under the tag sha256-{}.sig nor through the referrers API",
            &unsigned[7..]
        )
    );

    let foreign = registry.push("team/foreign:1", &plugins.join("records.wasm"));
    registry.sign("team/foreign", &foreign, &foreign, &other);
    assert_eq!(
        pull_as_records(&format!("{host}/team/foreign:1"), &[]),
        format!(
            "cannot pull {host}/team/foreign:1: {foreign} is refused (verify = require): none of its 1 signature(s) is by a trusted key ({})",
            key.id
        )
    );

    // A signature of one artifact put under another's signature tag.
    let text = registry.push("team/replayed:1", &plugins.join("text.wasm"));
    registry.sign("team/replayed", &text, &foreign, &key);
    assert_eq!(
        pull_as_records(&format!("{host}/team/replayed:1"), &[]),
        format!(
            "cannot pull {host}/team/replayed:1: {text} is refused (verify = require): its signature by key {} is of another artifact ({foreign}), not of {text}",
            key.id
        )
    );

    // A layer changed in the registry's storage after it was signed.
    let tampered = registry.push("team/tampered:1", &test_plugin("oddtypes"));
    registry.sign("team/tampered", &tampered, &tampered, &key);
    let manifest: Value = serde_json::from_str(
        &crate::support::raw_request(
            registry.port,
            "GET",
            "/v2/team/tampered/manifests/1",
            &[("Accept", "application/vnd.oci.image.manifest.v1+json")],
            "",
        )
        .body,
    )
    .expect("a manifest");
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .expect("a layer")
        .to_owned();
    let blob = registry.blob_file(&layer);
    let mut bytes = std::fs::read(&blob).expect("the stored layer");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).expect("tamper with the stored layer");
    let got = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    assert_eq!(
        pull_as_records(&format!("{host}/team/tampered:1"), &[]),
        format!(
            "cannot pull {host}/team/tampered:1: the registry's blob {layer} does not match its digest: expected {layer}, got {got}"
        )
    );

    // A pin the tag no longer names.
    let pin = format!("sha256:{}", "0".repeat(64));
    assert_eq!(
        pull_as_records(&format!("{host}/team/foreign:1"), &["--digest", &pin]),
        format!(
            "cannot pull {host}/team/foreign:1: the registry has {foreign}, not the pinned {pin}: refused"
        )
    );

    // Not a Wasm artifact: oras' own default config.
    let config_less = oras_push(&json!({
        "target": format!("{host}/team/plain:1"),
        "files": [[plugins.join("records.wasm"), "application/wasm"]],
    }));
    assert!(config_less.starts_with("sha256:"));
    assert_eq!(
        pull_as_records(&format!("{host}/team/plain:1"), &[]),
        format!(
            "cannot pull {host}/team/plain:1: the config's media type is `application/vnd.unknown.config.v1+json`, not application/vnd.wasm.config.v0+json: not a Wasm artifact"
        )
    );

    // Without a key, require cannot check anything: refused before any request.
    let (code, _, stderr) = pull(&[&format!("{host}/team/foreign:1"), "--plugins", path(&dir)]);
    assert_eq!(code, 1);
    assert_eq!(
        refusal(&stderr),
        format!(
            "cannot pull {host}/team/foreign:1: verify = require (the default) needs a public key to check signatures with (--verify-key, or keys in a [[plugin]] entry); verify = warn or off pulls unsigned plugins"
        )
    );

    // Under warn, the unsigned one is pulled, saying why it did not verify.
    let (code, stdout, stderr) = pull(&[
        &format!("{host}/team/unsigned:1"),
        "--plugins",
        path(&dir),
        "--name",
        "records",
        "--verify-key",
        path(&key.public),
        "--verify",
        "warn",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "{}: pulled ({unsigned}) from {host}/team/unsigned:1; NOT verified: it is not signed: no signature under the tag sha256-{}.sig nor through the referrers API\n",
            dir.join("records.wasm").display(),
            &unsigned[7..]
        )
    );
    assert_eq!(
        std::fs::read(dir.join("records.wasm")).expect("pulled"),
        std::fs::read(plugins.join("records.wasm")).expect("pushed")
    );
}

#[test]
fn push_and_sign_publish_what_oras_and_openssl_read_and_pull_verifies() {
    let registry = Registry::start("published");
    let host = registry.host();
    let keys = registry.dir.join("keys");
    let p256 = Key::new(&keys, "p256", false);
    let ed = Key::new(&keys, "ed", true);
    let records = example_plugins().join("records.wasm");
    let reference = format!("{host}/team/records:0.1.0");
    let run = |args: &[&str]| {
        let out = Command::new(host_bin())
            .args(args)
            .output()
            .expect("run codemode-host");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (code, stdout, stderr) = run(&[
        "push",
        path(&records),
        &reference,
        "--key",
        path(&p256.private),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let digest = stdout
        .split_once(" (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(digest, _)| digest.to_owned())
        .expect("a digest");
    assert_eq!(
        stdout,
        format!(
            "pushed {} to {reference} ({digest}), signed with key {}\n",
            records.display(),
            p256.id
        )
    );
    let (code, stdout, stderr) = run(&["sign", &reference, "--key", path(&ed.private)]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!("signed {reference} ({digest}) with key {}\n", ed.id)
    );

    // oras-py reads the artifact back.
    let out_dir = registry.dir.join("oras-out");
    let pulled = oras_pull(&format!("{host}/team/records:0.1.0"), &out_dir);
    // (oras names the file it wrote by its normalized path.)
    assert_eq!(pulled.len(), 1, "{pulled:?}");
    assert!(pulled[0].ends_with("/oras-out/records.wasm"), "{pulled:?}");
    assert_eq!(
        std::fs::read(out_dir.join("records.wasm")).expect("oras' file"),
        std::fs::read(&records).expect("ours")
    );

    // openssl verifies both signatures over the payloads stored, which name the digest.
    let tag = format!("sha256-{}.sig", &digest[7..]);
    let manifest: Value = serde_json::from_str(
        &crate::support::raw_request(
            registry.port,
            "GET",
            &format!("/v2/team/records/manifests/{tag}"),
            &[("Accept", "application/vnd.oci.image.manifest.v1+json")],
            "",
        )
        .body,
    )
    .expect("the signature manifest");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 2, "{manifest}");
    for (layer, key) in layers.iter().zip([&p256, &ed]) {
        assert_eq!(layer["mediaType"], SIGNATURE_LAYER);
        let blob = crate::support::raw_request(
            registry.port,
            "GET",
            &format!(
                "/v2/team/records/blobs/{}",
                layer["digest"].as_str().expect("digest")
            ),
            &[],
            "",
        )
        .body;
        let payload: Value = serde_json::from_str(&blob).expect("a JSON payload");
        assert_eq!(
            payload,
            json!({"critical": {"identity": {"docker-reference": format!("{host}/team/records")}, "image": {"docker-manifest-digest": digest}, "type": "cosign container image signature"}, "optional": null})
        );
        use base64::Engine as _;
        let signature = base64::engine::general_purpose::STANDARD
            .decode(
                layer["annotations"]["dev.cosignproject.cosign/signature"]
                    .as_str()
                    .expect("a signature"),
            )
            .expect("base64");
        assert!(
            key.verifies(blob.as_bytes(), &signature),
            "openssl verifies the signature by {}",
            key.id
        );
    }

    // pull verifies with either key.
    for key in [&p256, &ed] {
        let dir = folder(&format!("published-{}", key.id));
        let (code, stdout, stderr) = pull(&[
            &reference,
            "--plugins",
            path(&dir),
            "--verify-key",
            path(&key.public),
        ]);
        assert_eq!(code, 0, "{stderr}");
        assert!(
            stdout.ends_with(&format!(
                "; signature verified by key {} (cosign tag)\n",
                key.id
            )),
            "{stdout}"
        );
    }

    // What cannot be published says why.
    let not_wasm = registry.dir.join("notes.txt");
    std::fs::write(&not_wasm, "not a component").expect("a text file");
    let (code, _, stderr) = run(&["push", path(&not_wasm), &reference]);
    assert_eq!(code, 1);
    assert_eq!(
        refusal(&stderr),
        format!(
            "cannot push {} to {reference}: not a WebAssembly file (no \\0asm at its start)",
            not_wasm.display()
        )
    );
    let encrypted = keys.join("cosign.key");
    std::fs::write(&encrypted, "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nabc\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n").expect("a key");
    let (code, _, stderr) = run(&["sign", &reference, "--key", path(&encrypted)]);
    assert_eq!(code, 1);
    assert_eq!(
        refusal(&stderr),
        format!(
            "cannot sign {reference}: key {}: the private key is encrypted (cosign's own key format is): sign with an unencrypted PEM key, e.g. from `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`",
            encrypted.display()
        )
    );
    let (code, _, stderr) = run(&[
        "sign",
        &format!("{host}/team/records:nope"),
        "--key",
        path(&ed.private),
    ]);
    assert_eq!(code, 1);
    assert_eq!(
        refusal(&stderr),
        format!(
            "cannot sign {host}/team/records:nope: the registry has no manifest team/records:nope"
        )
    );
}

/// Pulls `target` with oras-py into `dir`; the files it wrote.
fn oras_pull(target: &str, dir: &Path) -> Vec<String> {
    let out = Command::new(python())
        .arg("-c")
        .arg("import json, sys, oras.client\nc = oras.client.OrasClient(insecure=True)\nprint(json.dumps(c.pull(target=sys.argv[1], outdir=sys.argv[2])))")
        .arg(target)
        .arg(dir)
        .output()
        .expect("run oras-py");
    assert!(
        out.status.success(),
        "oras pull: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the files oras wrote")
}

#[test]
fn a_registry_over_https_is_trusted_through_the_system_roots_only() {
    let registry = Registry::start_tls("https");
    let host = registry.host();
    let cert = registry.dir.join("cert.pem");
    let key = Key::new(&registry.dir.join("keys"), "signer", false);
    let reference = format!("{host}/team/records:1");
    let dir = folder("https");
    // The system's roots, as rustls-native-certs reads them: SSL_CERT_FILE.
    let run = |args: &[&str], trust: bool| {
        let mut command = Command::new(host_bin());
        command.args(args);
        if trust {
            command.env("SSL_CERT_FILE", &cert);
        } else {
            command.env("SSL_CERT_FILE", root().join("Cargo.toml"));
        }
        let out = command.output().expect("run codemode-host");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let records = example_plugins().join("records.wasm");
    let (code, _, stderr) = run(
        &[
            "push",
            path(&records),
            &reference,
            "--key",
            path(&key.private),
        ],
        true,
    );
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run(
        &[
            "pull",
            &reference,
            "--plugins",
            path(&dir),
            "--verify-key",
            path(&key.public),
        ],
        true,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.ends_with(&format!(
            "; signature verified by key {} (cosign tag)\n",
            key.id
        )),
        "{stdout}"
    );

    // A certificate the roots do not vouch for is an error, never a fall back
    // to plain HTTP.
    let (code, _, stderr) = run(
        &[
            "pull",
            &reference,
            "--plugins",
            path(&dir),
            "--verify-key",
            path(&key.public),
        ],
        false,
    );
    assert_eq!(code, 1);
    let message = refusal(&stderr);
    assert!(
        message.starts_with(&format!(
            "cannot pull {reference}: cannot reach the registry {host}: "
        )) && message.contains("invalid peer certificate: UnknownIssuer"),
        "{message}"
    );
}

#[test]
fn wkg_reads_what_push_wrote_and_pull_reads_what_wkg_pushed() {
    let registry = Registry::start("wkg");
    let host = registry.host();
    let wkg = devtools::WKG
        .binary()
        .unwrap_or_else(|e| panic!("cannot install wkg: {e}"));
    let records = example_plugins().join("records.wasm");
    let run = |program: &Path, args: &[&str]| {
        let out = Command::new(program)
            .args(args)
            .output()
            .expect("run a program");
        assert!(
            out.status.success(),
            "{} {args:?}: {}",
            program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // Ours, read by wkg (which decodes the component's WIT on push, and reads
    // the layout on pull).
    let ours = format!("{host}/team/ours:1");
    run(Path::new(host_bin()), &["push", path(&records), &ours]);
    let fetched = registry.dir.join("from-ours.wasm");
    run(
        &wkg,
        &[
            "oci",
            "pull",
            "--insecure",
            &host,
            &ours,
            "-o",
            path(&fetched),
        ],
    );
    assert_eq!(
        std::fs::read(&fetched).expect("wkg's file"),
        std::fs::read(&records).expect("ours")
    );

    // wkg's, pulled by us and served.
    let theirs = format!("{host}/team/theirs:1");
    run(
        &wkg,
        &["oci", "push", "--insecure", &host, &theirs, path(&records)],
    );
    let dir = folder("wkg");
    let stdout = run(
        Path::new(host_bin()),
        &[
            "pull",
            &theirs,
            "--plugins",
            path(&dir),
            "--name",
            "records",
            "--verify",
            "off",
        ],
    );
    assert!(stdout.contains(": pulled (sha256:"), "{stdout}");
    assert_eq!(
        std::fs::read(dir.join("records.wasm")).expect("pulled"),
        std::fs::read(&records).expect("pushed")
    );
    assert_serves_the_records(&dir);
}

#[test]
fn config_plugins_are_pulled_swapped_when_their_tag_moves_or_a_key_is_added_and_serve_while_the_registry_is_down()
 {
    use crate::support::{HttpServer, execute_http, wait_for_log};
    let mut registry = Registry::start("polled");
    let host = registry.host();
    let key = Key::new(&registry.dir.join("keys"), "signer", false);
    let one = registry.push("team/versioned:stable", &test_plugin("versioned"));
    registry.sign("team/versioned", &one, &one, &key);
    // A folder that does not exist yet, and a config naming the key beside it.
    let base = folder("polled");
    let dir = base.join("plugins");
    let config = base.join("codemode.toml");
    std::fs::copy(&key.public, base.join("signer.pub")).expect("the key beside the config");
    let write_config = |keys: &str, extra: &str| {
        std::fs::write(
            &config,
            format!(
                "verify-key = [{keys}]\npull-interval = \"1s\"\n\n[[plugin]]\nref = \"{host}/team/versioned:stable\"\n{extra}"
            ),
        )
        .expect("write the config");
    };
    write_config("\"signer.pub\"", "");
    let version = "def main():\n    return versioned.version()[\"version\"]";
    // Budgets for the long execution below (about 2 s).
    let server = HttpServer::start(&[
        "--config",
        path(&config),
        "--plugins",
        path(&dir),
        "--allow-all",
        "--max-execution-steps",
        "100000000",
        "--max-fuel",
        "100000000000",
        "--max-execution-time",
        "30s",
    ]);
    wait_until(
        "the pulled plugin to serve",
        || execute_http(server.port, version) == Ok(json!(1)),
        || server.log(),
    );
    // The pull's line, and the load's naming the digest and the key (the log
    // is read by a thread: waited for).
    wait_for_log(
        &server,
        &format!("plugin pulled reference={host}/team/versioned:stable digest={one}"),
        1,
    );
    wait_for_log(
        &server,
        &format!(
            "reference={host}/team/versioned:stable digest={one} key_id={}",
            key.id
        ),
        1,
    );

    // Its calls' audit lines say where it came from.
    crate::support::wait_for_audit(
        &server,
        &format!(
            r#""pulled":{{"reference":"{host}/team/versioned:stable","digest":"{one}","key_id":"{}"}}"#,
            key.id
        ),
        1,
    );

    // The tag moves to a new signed version: swapped in at the next poll, while
    // an execution that started before goes on with the version it started with.
    let port = server.port;
    let long = std::thread::spawn(move || {
        execute_http(
            port,
            "def main():\n    before = versioned.version()[\"version\"]\n    t = 0\n    for i in range(30000000):\n        t += 1\n    return [before, versioned.version()[\"version\"]]",
        )
    });
    crate::support::wait_for_audit(&server, "\"capability\":\"versioned.version\"", 2);
    let two = registry.push("team/versioned:stable", &test_plugin("versioned_two"));
    registry.sign("team/versioned", &two, &two, &key);
    wait_until(
        "the moved tag's version to serve",
        || execute_http(server.port, version) == Ok(json!(2)),
        || server.log(),
    );
    assert_eq!(long.join().expect("the long execution"), Ok(json!([1, 1])));
    let (status, body) = readyz(server.port);
    assert_eq!((status, body.as_str()), (200, "ready\n"));

    // A key rotation: the tag moves to a version signed by a key the config does
    // not trust yet, which is refused (version 2 serves on); the config naming
    // both keys is reloaded, the pulls start again with them, and it serves.
    let next = Key::new(&registry.dir.join("keys"), "next", false);
    std::fs::copy(&next.public, base.join("next.pub")).expect("the new key beside the config");
    let three = registry.push_with_config(
        "team/versioned:stable",
        &test_plugin("versioned"),
        r#"{"architecture":"wasm","os":"wasip2","build":"rotated"}"#,
    );
    registry.sign("team/versioned", &three, &three, &next);
    wait_for_log(
        &server,
        &format!(
            "{three} is refused (verify = require): none of its 1 signature(s) is by a trusted key ({})",
            key.id
        ),
        1,
    );
    assert_eq!(execute_http(server.port, version), Ok(json!(2)));
    write_config("\"signer.pub\", \"next.pub\"", "");
    wait_until(
        "the version signed by the new key to serve",
        || execute_http(server.port, version) == Ok(json!(1)),
        || server.log(),
    );

    // The key is withdrawn (only the old one is trusted): the version in place,
    // signed by the withdrawn key only, no longer verifies and stops serving,
    // and /readyz names its entry; trusted again, it comes back.
    write_config("\"signer.pub\"", "");
    wait_for_log(
        &server,
        "plugin removed from the folder: the version in place no longer verifies",
        1,
    );
    wait_until(
        "the withdrawn version to stop serving",
        || execute_http(server.port, version).is_err(),
        || server.log(),
    );
    assert!(!dir.join("versioned.wasm").exists());
    let (status, body) = readyz(server.port);
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            format!("not ready: plugins of the config file not pulled yet\nplugins not pulled yet:\n  {host}/team/versioned:stable\n").as_str()
        )
    );
    write_config("\"signer.pub\", \"next.pub\"", "");
    wait_until(
        "the version signed by the new key to serve again",
        || execute_http(server.port, version) == Ok(json!(1)),
        || server.log(),
    );
    drop(server);

    // `check` says where the file came from.
    let out = Command::new(host_bin())
        .args(["check", path(&dir.join("versioned.wasm"))])
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "\n  pulled from {host}/team/versioned:stable ({three}), signature verified by key {}\n",
            next.id
        )),
        "{stdout}"
    );

    // The registry goes away: the folder's last pulled version serves, one
    // WARN says why the pull failed, and /readyz names the entry never pulled.
    registry.stop();
    write_config(
        "\"signer.pub\", \"next.pub\"",
        &format!("\n[[plugin]]\nref = \"{host}/team/missing:1\"\n"),
    );
    let server = HttpServer::start(&[
        "--config",
        path(&config),
        "--plugins",
        path(&dir),
        "--allow-all",
    ]);
    assert_eq!(execute_http(server.port, version), Ok(json!(1)));
    wait_for_log(
        &server,
        "plugin pull failed; the folder's version is kept",
        2,
    );
    let (status, body) = readyz(server.port);
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            format!("not ready: plugins of the config file not pulled yet\nplugins not pulled yet:\n  {host}/team/missing:1\n").as_str()
        )
    );
}

/// `GET /readyz`: its status and body.
fn readyz(port: u16) -> (u16, String) {
    let response = crate::support::raw_request(port, "GET", "/readyz", &[], "");
    (response.status, response.body)
}
