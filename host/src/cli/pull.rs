//! Plugins pulled from OCI registries (`--verify`, `--verify-key`,
//! `--pull-interval`, `--pull-timeout`, `--max-pull-bytes`).

use std::path::PathBuf;
use std::time::Duration;

use codemode_server::units::parse_bytes;

use super::values::positive_duration;

/// Plugins pulled from OCI registries: verification and the bounds of a pull.
#[derive(Debug, clap::Args)]
pub struct PullFlags {
    /// What signatures of plugins pulled from registries must be: require
    /// (unsigned or badly signed is refused), warn (pulled, with a warning
    /// saying why) or off (not looked for)
    ///
    /// The policy of `pull` and of every [[plugin]] entry of the config file
    /// without a `verify` of its own. Signatures are cosign's, by key: found
    /// under the tag sha256-<digest>.sig or through the referrers API, and
    /// trusted when a --verify-key verifies one whose payload names the pulled
    /// digest.
    #[arg(long, value_name = "POLICY", default_value = "require", value_parser = verify_policy, global = true)]
    pub verify: codemode_oci::Policy,

    /// A public key (PEM: ECDSA P-256 or Ed25519, as `cosign generate-key-pair`
    /// writes cosign.pub) that plugins pulled from registries may be signed
    /// with; repeat it for several (a key rotation)
    ///
    /// The keys of `pull` and of every [[plugin]] entry without `keys` of its
    /// own.
    #[arg(long = "verify-key", value_name = "FILE", global = true)]
    pub verify_keys: Vec<PathBuf>,

    /// How often the tag of each [[plugin]] entry is looked at again [default:
    /// 5m]
    ///
    /// A moved tag is pulled, verified and swapped in; a failed look keeps the
    /// running version and is tried again after 1s, doubling up to this.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, global = true)]
    pub pull_interval: Option<Duration>,

    /// The longest one pull of a plugin may take, signatures included
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = positive_duration, global = true)]
    pub pull_timeout: Duration,

    /// The largest plugin pulled from a registry
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = pull_bytes, global = true)]
    pub max_pull_bytes: u64,
}

/// A verification policy: require, warn or off.
fn verify_policy(text: &str) -> Result<codemode_oci::Policy, String> {
    text.parse()
}

/// A pull's byte bound: positive.
fn pull_bytes(text: &str) -> Result<u64, String> {
    match parse_bytes(text)? {
        0 => Err("must be positive (e.g. 256MiB)".to_owned()),
        size => Ok(size as u64),
    }
}
