//! The files of a new plugin project in Rust with codemode-sdk.

use super::common::hello_interface;

/// A Rust project.
pub(super) const RUST: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
# The SDK of the codemode-host checkout this project was made from.
codemode-sdk = { path = "{{sdk}}" }

# Small components that compile fast when the server loads them.
[profile.release]
opt-level = "s"
lto = true
strip = true
codegen-units = 1

# A project of its own, also inside another workspace.
[workspace]
"#,
    ),
    (
        "wit/world.wit",
        concat!(
            hello_interface!(),
            r#"
// codemode-sdk exports codemode:plugin/metadata for you.
world plugin {
  export {{kebab}};
}
"#
        ),
    ),
    (
        "src/lib.rs",
        r#"//! The {{name}} plugin for codemode-host: one capability, `{{name}}.hello`.

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use exports::local::{{name}}::{{name}}::{self, Greeting};

struct Plugin;

// The doc comments are the metadata: the first paragraph is the summary agents
// see in search_api, the rest the description describe_api adds.
#[codemode_sdk::capabilities]
impl {{name}}::Guest for Plugin {
    /// Greet someone by name.
    ///
    /// Returns "Hello, <name>!"; an empty name is refused.
    fn hello(name: String) -> Result<Greeting, String> {
        if name.is_empty() {
            return Err("name must not be empty".into());
        }
        Ok(Greeting {
            text: format!("Hello, {name}!"),
        })
    }
}

export!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;
    use {{name}}::Guest;

    #[test]
    fn hello_greets_and_refuses_an_empty_name() {
        assert_eq!(Plugin::hello("Ada".into()).map(|g| g.text), Ok("Hello, Ada!".into()));
        assert_eq!(
            Plugin::hello(String::new()).map(|g| g.text),
            Err("name must not be empty".into())
        );
    }
}
"#,
    ),
    (
        "build.sh",
        r#"#!/usr/bin/env bash
# Builds plugins/{{name}}.wasm with cargo for wasm32-wasip2 (added with rustup if
# missing).
set -euo pipefail
cd "$(dirname "$0")"
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
cargo build --release --target wasm32-wasip2
mkdir -p plugins
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{name}}.wasm" plugins/{{name}}.wasm
echo "built plugins/{{name}}.wasm"
{{publish}}"#,
    ),
    (".gitignore", "/target\n/plugins\n/cosign.key\n"),
    (
        "README.md",
        r#"# {{name}}: a codemode-host plugin in Rust

One capability, `{{name}}.hello(*, name: str) -> {text: str}`, in `src/lib.rs`; its
WIT is `wit/world.wit`. `cargo test` runs its unit test natively.
{{readme_try}}"#,
    ),
];
