//! The subcommands (`precompile`, `check`, `wit-docs`, `pull`, `push`, `sign`,
//! `new-plugin`) and their arguments.

use std::path::PathBuf;

/// Subcommands; without one the server runs.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Command {
    /// Compile the interpreter and the plugins into the cache
    ///
    /// The next start then loads compiled code instead of compiling. Each plugin
    /// is loaded in full, so one that would be skipped is reported; the exit code
    /// is 1 when any plugin failed.
    Precompile,

    /// Load plugin files as the server would and print what they offer
    ///
    /// For each file: its capabilities (signature and result, stable ID,
    /// summary), or every reason the server would skip it. Its sidecar is read
    /// as when serving; compiled code goes to the cache (--cache-dir). The exit
    /// code is 1 when any file cannot load.
    Check {
        /// The plugin files (*.wasm)
        #[arg(value_name = "PLUGIN.wasm", required = true)]
        files: Vec<PathBuf>,
    },

    /// Keep a plugin's WIT doc comments in its component file
    ///
    /// Component toolchains drop the WIT's doc comments; this writes them into
    /// the component as its `codemode-docs` section, which the server reads to
    /// show what each parameter means: a line `name: what it means` of a
    /// function's doc comment documents its parameter `name`, `///` on a record's
    /// fields document them. Run it after componentize-py or componentize-js
    /// (the build scripts new-plugin writes do); Rust plugins built with
    /// codemode_sdk::generate! have the section already.
    WitDocs {
        /// The plugin's WIT: its folder (with deps/) or one file
        #[arg(long, value_name = "DIR", default_value = "wit")]
        wit: PathBuf,
        /// The component file to write the docs into (replaced whole)
        #[arg(value_name = "PLUGIN.wasm")]
        file: PathBuf,
    },

    /// Pull a plugin from an OCI registry into the plugins folder, verified
    ///
    /// REFERENCE is registry/namespace/name:tag or ...@sha256:<digest> (the CNCF
    /// Wasm artifact layout: `oras push`, `wkg oci push` and `codemode-host push`
    /// write it). The component is checked (layout, digests, signatures) before
    /// a byte of it is in the folder, then written as --plugins/NAME.wasm in one
    /// rename, with NAME.oci.json saying where it came from; the sidecar NAME.toml
    /// stays the operator's. Signatures are cosign's, by key: found under the
    /// tag sha256-<digest>.sig or through the referrers API, and trusted when one
    /// of the --verify-key files verifies one whose payload names the pulled
    /// digest (--verify sets what happens when none does).
    /// For image builds and air-gapped copies; a server pulls the [[plugin]]
    /// entries of its config file itself.
    Pull {
        /// The artifact: registry/namespace/name:tag or registry/namespace/name@sha256:<digest>
        #[arg(value_name = "REFERENCE", value_parser = oci_reference)]
        reference: codemode_oci::Reference,
        /// The plugin's file name in the folder, without .wasm [default: the
        /// repository's last segment]
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Refuse any digest but this one (sha256:<64 hex digits>)
        #[arg(long, value_name = "DIGEST", value_parser = oci_digest)]
        digest: Option<codemode_oci::Digest>,
        #[command(flatten)]
        registry: RegistryAccess,
    },

    /// Push a plugin to an OCI registry, signed when a key is given
    ///
    /// The component goes as a CNCF Wasm artifact (config
    /// application/vnd.wasm.config.v0+json, one application/wasm layer), which
    /// `pull`, [[plugin]] entries, `oras pull` and `wkg oci pull` read. With --key
    /// it is then signed as `sign` does. Credentials as for `pull`.
    Push {
        /// The component file
        #[arg(value_name = "PLUGIN.wasm")]
        file: PathBuf,
        /// Where it goes: registry/namespace/name:tag
        #[arg(value_name = "REFERENCE", value_parser = oci_reference)]
        reference: codemode_oci::Reference,
        /// A private key (PEM: ECDSA P-256 or Ed25519, unencrypted) to sign the
        /// pushed artifact with
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryAccess,
    },

    /// Sign an artifact in an OCI registry with a key, as `cosign sign --key`
    ///
    /// The signature of the artifact's digest (a tag is resolved first) goes
    /// where cosign puts it: a simple signing payload under the tag
    /// sha256-<digest>.sig, next to the signatures already there. `cosign
    /// verify --key`, `pull --verify-key` and [[plugin]] entries check it.
    Sign {
        /// The artifact: registry/namespace/name:tag or ...@sha256:<digest>
        #[arg(value_name = "REFERENCE", value_parser = oci_reference)]
        reference: codemode_oci::Reference,
        /// The private key (PEM: ECDSA P-256 or Ed25519, unencrypted, e.g. from
        /// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`)
        #[arg(long, value_name = "FILE", required = true)]
        key: PathBuf,
        #[command(flatten)]
        registry: RegistryAccess,
    },

    /// Write a new plugin project that builds, with one capability
    ///
    /// NAME is the capability root (`greet` makes `greet.hello`): lowercase
    /// letters, digits and underscores, starting with a letter. The project has
    /// the WIT, the code with its metadata, a build script that puts NAME.wasm
    /// into its plugins/ folder, and a README with the commands to build, check
    /// and try it.
    NewPlugin {
        /// The capability root, and the project's name
        #[arg(value_name = "NAME")]
        name: String,
        /// The plugin's language
        #[arg(long, value_enum)]
        lang: Lang,
        /// Where to write the project [default: ./NAME]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// How `pull`, `push` and `sign` reach a registry: its credentials and whether
/// plain HTTP is allowed.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RegistryAccess {
    /// A Docker config.json with the registry's credentials [default:
    /// $DOCKER_CONFIG/config.json or ~/.docker/config.json, when there is one]
    #[arg(long, value_name = "FILE", conflicts_with = "registry_token")]
    pub registry_auth: Option<PathBuf>,
    /// A file holding a registry token, sent as a bearer token
    #[arg(long, value_name = "FILE")]
    pub registry_token: Option<PathBuf>,
    /// Speak plain HTTP to a registry that is not on this machine (one on this
    /// machine is tried over HTTPS first, and spoken to in plain HTTP only when
    /// it does not speak TLS)
    #[arg(long)]
    pub insecure: bool,
}

/// The languages `new-plugin` writes projects in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust with codemode-sdk, built with cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

/// An OCI reference, as `pull` takes it.
fn oci_reference(text: &str) -> Result<codemode_oci::Reference, String> {
    codemode_oci::Reference::parse(text).map_err(|e| e.to_string())
}

/// A digest, as `--digest` takes it.
fn oci_digest(text: &str) -> Result<codemode_oci::Digest, String> {
    codemode_oci::Digest::parse(text).map_err(|e| e.to_string())
}
