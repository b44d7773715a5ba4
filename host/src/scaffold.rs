//! `codemode-host new-plugin NAME --lang rust|python|js`: a plugin project that
//! builds, with one capability (`NAME.hello(*, name: str) -> {text: str}`), its
//! WIT, its metadata, a `build.sh` that puts the component into the project's
//! `plugins/` folder, and a README with the commands to build, check and try it.
//!
//! The templates are this file's constants; `{{name}}` is the capability root
//! (snake_case), `{{kebab}}` the same in WIT's kebab-case, and so on (see
//! [`Names`]). Rust projects take the SDK by path from the checkout this binary was
//! built from; Python and JavaScript ones get the plugin ABI's WIT copied in.

use heck::{ToKebabCase, ToLowerCamelCase, ToUpperCamelCase};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::cli::Lang;

/// The plugin ABI, copied into Python and JavaScript projects.
const PLUGIN_WIT: &str = include_str!("../../wit/plugin/plugin.wit");
/// The SDK of the checkout this binary was built from.
const SDK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");
/// The componentize-py the Python projects install.
const COMPONENTIZE_PY: &str = "0.25.1";
/// The componentize-js the JavaScript projects install.
const COMPONENTIZE_JS: &str = "0.23.0";

/// The spellings of a plugin's name the templates need.
struct Names {
    /// `my_tool`: the capability root and the Rust crate.
    name: String,
    /// `my-tool`: the WIT package and interface.
    kebab: String,
    /// `MyTool`: the Python class of the interface.
    pascal: String,
    /// `myTool`: the JavaScript object of the interface.
    camel: String,
}

impl Names {
    /// Checks `name` (a capability root whose `_`-separated words each start with a
    /// letter, as WIT's kebab-case needs) and spells it.
    fn new(name: &str) -> anyhow::Result<Self> {
        codemode_host::check_upstream_name(name).map_err(anyhow::Error::msg)?;
        let words: Vec<&str> = name.split('_').collect();
        let wit_words = words.iter().all(|word| {
            word.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
        if !wit_words {
            bail!(
                "`{name}` cannot name a plugin: use lowercase words of letters and digits, each starting with a letter, joined by `_` (e.g. `greet` or `my_tool`)"
            );
        }
        Ok(Self {
            name: name.to_owned(),
            kebab: name.to_kebab_case(),
            pascal: name.to_upper_camel_case(),
            camel: name.to_lower_camel_case(),
        })
    }

    /// `template` with every placeholder filled.
    fn fill(&self, template: &str, host: &str) -> String {
        template
            .replace("{{readme_try}}", README_TRY)
            .replace("{{publish}}", PUBLISH_STEP)
            .replace("{{name}}", &self.name)
            .replace("{{kebab}}", &self.kebab)
            .replace("{{pascal}}", &self.pascal)
            .replace("{{camel}}", &self.camel)
            .replace("{{host}}", host)
            .replace("{{sdk}}", SDK_DIR)
            .replace("{{componentize_py}}", COMPONENTIZE_PY)
            .replace("{{componentize_js}}", COMPONENTIZE_JS)
    }
}

/// Writes the project and says what to do next.
///
/// # Errors
///
/// A name that cannot root capabilities, a folder that exists and is not empty, or
/// a file that cannot be written.
pub(crate) fn new_plugin(name: &str, lang: Lang, dir: Option<&Path>) -> anyhow::Result<()> {
    let names = Names::new(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if dir
        .read_dir()
        .is_ok_and(|mut entries| entries.next().is_some())
    {
        bail!(
            "`{}` exists and is not empty; name another folder with --dir",
            dir.display()
        );
    }
    let host = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.to_str().map(str::to_owned))
        .unwrap_or_else(|| "codemode-host".to_owned());
    let files = match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
        Lang::Js => JS,
    };
    for (path, template) in files {
        let path = dir.join(names.fill(path, &host));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let text = if *template == PLUGIN_WIT_MARK {
            PLUGIN_WIT.to_owned()
        } else {
            names.fill(template, &host)
        };
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let build = dir.join("build.sh");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", build.display()))?;
    }
    println!(
        "wrote {}: the plugin `{name}` with one capability, {name}.hello; build it with\n  cd {} && ./build.sh\nthen follow its README.md to check and try it",
        dir.display(),
        dir.display()
    );
    if lang == Lang::Rust && !Path::new(SDK_DIR).is_dir() {
        eprintln!(
            "note: its Cargo.toml takes codemode-sdk from {SDK_DIR}, the checkout this codemode-host was built from, which is not there: point that path at the sdk/ folder of a codemode-host checkout"
        );
    }
    Ok(())
}

/// Marks the file that gets the plugin ABI's WIT as it is.
const PLUGIN_WIT_MARK: &str = "<the plugin ABI>";

/// The end of every `build.sh`: `./build.sh publish REFERENCE [--key FILE]`
/// builds, then pushes the component to an OCI registry (signed with the key).
const PUBLISH_STEP: &str = r#"# ./build.sh publish REGISTRY/NAMESPACE/{{name}}:TAG [--key cosign.key]: then push
# plugins/{{name}}.wasm to that OCI registry, signed with the key when one is given
# (codemode-host push; $CODEMODE_HOST names another codemode-host).
if [ "${1:-}" = publish ]; then
  shift
  "${CODEMODE_HOST:-{{host}}}" push plugins/{{name}}.wasm "$@"
fi
"#;

/// How each project is checked and tried: the README's second half.
const README_TRY: &str = r#"
Build it (the component goes to `plugins/{{name}}.wasm`), check it exactly as the
server would load it, and call it through the MCP Inspector (Node.js):

```sh
./build.sh
{{host}} check plugins/{{name}}.wasm
npx -y @modelcontextprotocol/inspector@2.12.0 --cli {{host}} --plugins plugins \
  --method tools/call --tool-name execute \
  --tool-arg 'source=def main():
    return {{name}}.hello(name="Ada")'
```

`check` prints what agents will see:

```text
{{name}}.wasm: 1 capability
  {{name}}.hello(*, name: str) -> {text: str}
    id: {{name}}.hello
    Greet someone by name.
```

and the Inspector shows `"structuredContent": {"result": {"text": "Hello, Ada!"}}`.
To serve it to a client: `{{host}} --plugins /path/to/this/plugins`; the
folder is watched, so a rebuild is picked up while serving.

To publish it, signed, to an OCI registry your servers pull from (`--verify-key`
and `[[plugin]]` entries: the codemode-host README, "Plugins from OCI registries"),
with a key pair made by openssl:

```sh
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out cosign.key
openssl pkey -in cosign.key -pubout -out cosign.pub
./build.sh publish registry.example/team/{{name}}:0.1.0 --key cosign.key
{{host}} pull registry.example/team/{{name}}:0.1.0 --plugins /srv/plugins --verify-key cosign.pub
```

Next: add functions to the interface in `wit/world.wit`, implement them, and
describe each in the metadata (the codemode-host plugin guide,
`docs/plugin-guide.md`, lists the WIT types agents can see and what each
metadata field does).
"#;

/// A Rust project.
const RUST: &[(&str, &str)] = &[
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
        r#"package local:{{kebab}}@0.1.0;

interface {{kebab}} {
  record greeting { text: string }
  /// Greets someone by name. `describe_api` shows the `///` comments of the
  /// parameters (and of a record's fields) after the description.
  hello: func(
    /// who to greet; must not be empty
    name: string,
  ) -> result<greeting, string>;
}

// codemode-sdk exports codemode:plugin/metadata for you.
world plugin {
  export {{kebab}};
}
"#,
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

/// A Python project.
const PYTHON: &[(&str, &str)] = &[
    (
        "wit/world.wit",
        r#"package local:{{kebab}}@0.1.0;

interface {{kebab}} {
  record greeting { text: string }
  /// Greets someone by name. `describe_api` shows the `///` comments of the
  /// parameters (and of a record's fields) after the description.
  hello: func(
    /// who to greet; must not be empty
    name: string,
  ) -> result<greeting, string>;
}

world plugin {
  include codemode:plugin/plugin@0.1.0;
  export {{kebab}};
}
"#,
    ),
    ("wit/deps/codemode-plugin/plugin.wit", PLUGIN_WIT_MARK),
    (
        "app.py",
        r#""""The {{name}} plugin for codemode-host: one capability, `{{name}}.hello`."""

import inspect
import traceback
from functools import wraps
from typing import List

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.{{name}} import Greeting
from wit_world.exports.metadata import Capability


def capabilities(cls):
    """Makes an exception escaping a method of `cls` its capability's failure: the
    agent reads `capability failed: KeyError: 'x'`, the operator log gets the
    traceback. `raise Err("...")` is the failure message as it is."""
    for name, method in list(vars(cls).items()):
        if inspect.isfunction(method) and not name.startswith("_"):
            setattr(cls, name, _explained(method))
    return cls


def _explained(method):
    @wraps(method)
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Err:
            raise
        except Exception as error:
            traceback.print_exc()
            message = _text(error)
            raise Err(f"{type(error).__name__}: {message}" if message else type(error).__name__) from None

    return call


def _text(error):
    """`str(error)`, or nothing when even that fails."""
    try:
        return str(error)
    except Exception:
        return ""


@capabilities
class {{pascal}}(exports.{{pascal}}):
    def hello(self, name: str) -> Greeting:
        if not name:
            raise Err("name must not be empty")
        return Greeting(text=f"Hello, {name}!")


class Metadata(exports.Metadata):
    def describe(self) -> List[Capability]:
        return [
            Capability(
                export_name="{{kebab}}.hello",
                name=None,
                id=None,
                summary="Greet someone by name.",
                description='Returns "Hello, <name>!"; an empty name is refused.',
                search_terms=["greeting", "say hello"],
            )
        ]
"#,
    ),
    (
        "build.sh",
        r#"#!/usr/bin/env bash
# Builds plugins/{{name}}.wasm with componentize-py {{componentize_py}}, installed into
# .venv on first use (or the one $COMPONENTIZE_PY names).
set -euo pipefail
cd "$(dirname "$0")"
py="${COMPONENTIZE_PY:-.venv/bin/componentize-py}"
if ! [ -x "$py" ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check "componentize-py=={{componentize_py}}"
  py=.venv/bin/componentize-py
fi
mkdir -p plugins
"$py" --quiet -d wit -w local:{{kebab}}/plugin@0.1.0 componentize app -o plugins/{{name}}.wasm.partial
# Keep the WIT's doc comments (what each parameter means) in the component:
# componentize-py drops them. Needs codemode-host on PATH (or in $CODEMODE_HOST).
host="${CODEMODE_HOST:-codemode-host}"
if ! command -v "$host" >/dev/null; then
  echo "$host not found: put codemode-host on PATH or name it in CODEMODE_HOST (it writes the WIT docs into the component)" >&2
  rm -f plugins/{{name}}.wasm.partial
  exit 1
fi
if ! "$host" wit-docs --wit wit plugins/{{name}}.wasm.partial >/dev/null; then
  rm -f plugins/{{name}}.wasm.partial
  exit 1
fi
mv plugins/{{name}}.wasm.partial plugins/{{name}}.wasm
echo "built plugins/{{name}}.wasm"
{{publish}}"#,
    ),
    (
        ".gitignore",
        "/.venv\n/plugins\n__pycache__/\n/cosign.key\n",
    ),
    (
        "README.md",
        r#"# {{name}}: a codemode-host plugin in Python

One capability, `{{name}}.hello(*, name: str) -> {text: str}`, in `app.py` (one
class per exported interface, and `Metadata`, whose `describe()` gives the text
agents see); its WIT is `wit/world.wit`, which includes the plugin ABI in
`wit/deps/codemode-plugin/`. `build.sh` needs Python 3 with venv and pip.
{{readme_try}}"#,
    ),
];

/// A JavaScript project.
const JS: &[(&str, &str)] = &[
    (
        "wit/world.wit",
        r#"package local:{{kebab}}@0.1.0;

interface {{kebab}} {
  record greeting { text: string }
  /// Greets someone by name. `describe_api` shows the `///` comments of the
  /// parameters (and of a record's fields) after the description.
  hello: func(
    /// who to greet; must not be empty
    name: string,
  ) -> result<greeting, string>;
}

world plugin {
  include codemode:plugin/plugin@0.1.0;
  export {{kebab}};
}
"#,
    ),
    ("wit/deps/codemode-plugin/plugin.wit", PLUGIN_WIT_MARK),
    (
        "{{name}}.js",
        r#"// The {{name}} plugin for codemode-host: one capability, `{{name}}.hello`.

/**
 * Makes anything a method of `object` throws its capability's failure: the agent
 * reads `capability failed: ReferenceError: Intl is not defined`, the operator
 * log gets the stack. A thrown string is the failure message as it is.
 */
function capabilities(object) {
  for (const [name, method] of Object.entries(object)) {
    if (typeof method !== "function") {
      continue;
    }
    object[name] = function (...args) {
      let result;
      try {
        result = method.apply(this, args);
      } catch (error) {
        if (typeof error === "string") {
          throw error;
        }
        console.error(error instanceof Error ? `${error}\n${error.stack}` : error);
        throw explain(error);
      }
      if (result !== null && typeof result === "object" && typeof result.then === "function") {
        throw `${name} returned a Promise: a capability returns its value (no async functions)`;
      }
      return result;
    };
  }
  return object;
}

/** A thrown value as text: an Error as `Name: message`, anything else as JSON. */
function explain(error) {
  if (error instanceof Error) {
    return String(error);
  }
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

export const {{camel}} = capabilities({
  hello(name) {
    if (name.length === 0) {
      throw "name must not be empty";
    }
    return { text: `Hello, ${name}!` };
  },
});

export const metadata = {
  describe() {
    return [
      {
        exportName: "{{kebab}}.hello",
        name: undefined,
        id: undefined,
        summary: "Greet someone by name.",
        description: 'Returns "Hello, <name>!"; an empty name is refused.',
        searchTerms: ["greeting", "say hello"],
      },
    ];
  },
};
"#,
    ),
    (
        "package.json",
        r#"{
  "name": "{{kebab}}",
  "private": true,
  "type": "module",
  "devDependencies": {
    "@bytecodealliance/componentize-js": "{{componentize_js}}"
  }
}
"#,
    ),
    (
        "build.sh",
        r#"#!/usr/bin/env bash
# Builds plugins/{{name}}.wasm with componentize-js {{componentize_js}}, installed with
# npm on first use (or the cli.js $COMPONENTIZE_JS names). Needs Node.js 20+.
set -euo pipefail
cd "$(dirname "$0")"
cli="${COMPONENTIZE_JS:-node_modules/@bytecodealliance/componentize-js/src/cli.js}"
if ! [ -f "$cli" ]; then
  npm install --silent --no-audit --no-fund
  cli=node_modules/@bytecodealliance/componentize-js/src/cli.js
fi
mkdir -p plugins
node "$cli" {{name}}.js --wit wit --world-name plugin --disable http fetch-event -o plugins/{{name}}.wasm.partial
# Keep the WIT's doc comments (what each parameter means) in the component:
# componentize-js drops them. Needs codemode-host on PATH (or in $CODEMODE_HOST).
host="${CODEMODE_HOST:-codemode-host}"
if ! command -v "$host" >/dev/null; then
  echo "$host not found: put codemode-host on PATH or name it in CODEMODE_HOST (it writes the WIT docs into the component)" >&2
  rm -f plugins/{{name}}.wasm.partial
  exit 1
fi
if ! "$host" wit-docs --wit wit plugins/{{name}}.wasm.partial >/dev/null; then
  rm -f plugins/{{name}}.wasm.partial
  exit 1
fi
mv plugins/{{name}}.wasm.partial plugins/{{name}}.wasm
echo "built plugins/{{name}}.wasm"
{{publish}}"#,
    ),
    (".gitignore", "/node_modules\n/plugins\n/cosign.key\n"),
    (
        "README.md",
        r#"# {{name}}: a codemode-host plugin in JavaScript

One capability, `{{name}}.hello(*, name: str) -> {text: str}`, in `{{name}}.js` (one
exported object per interface, and `metadata`, whose `describe()` gives the text
agents see); its WIT is `wit/world.wit`, which includes the plugin ABI in
`wit/deps/codemode-plugin/`. `build.sh` needs Node.js 20+ with npm.
{{readme_try}}"#,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_spelled_for_each_language_and_bad_ones_refused() {
        let names = Names::new("my_tool2").expect("a good name");
        assert_eq!(
            (
                names.kebab.as_str(),
                names.pascal.as_str(),
                names.camel.as_str()
            ),
            ("my-tool2", "MyTool2", "myTool2")
        );
        assert_eq!(
            Names::new("tool_2").err().map(|e| e.to_string()).as_deref(),
            Some(
                "`tool_2` cannot name a plugin: use lowercase words of letters and digits, each starting with a letter, joined by `_` (e.g. `greet` or `my_tool`)"
            )
        );
        assert!(Names::new("json").is_err(), "a builtin cannot be a root");
        assert!(Names::new("Greet").is_err());
    }

    #[test]
    fn every_placeholder_is_filled() {
        let names = Names::new("greet").expect("a good name");
        for files in [RUST, PYTHON, JS] {
            for (path, template) in files {
                let text = names.fill(template, "/bin/codemode-host");
                assert!(!text.contains("{{"), "{path}: {text}");
            }
        }
    }
}
