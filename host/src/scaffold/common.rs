//! What every language's project shares: the mark of the plugin ABI's WIT, the
//! `build.sh publish` step and the README's second half.

/// The WIT interface every new project starts with (one capability, `hello`,
/// its parameter documented), before the world that exports it: a macro, so
/// that each language's `world.wit` is one literal (`concat!`).
macro_rules! hello_interface {
    () => {
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
"#
    };
}
pub(super) use hello_interface;

/// The `world.wit` of a project in a language without codemode-sdk: the
/// plugin ABI's metadata comes from the included world.
pub(super) const FOREIGN_WORLD: &str = concat!(
    hello_interface!(),
    r#"
world plugin {
  include codemode:plugin/plugin@0.1.0;
  export {{kebab}};
}
"#
);

/// Marks the file that gets the plugin ABI's WIT as it is.
pub(super) const PLUGIN_WIT_MARK: &str = "<the plugin ABI>";

/// The end of every `build.sh`: `./build.sh publish REFERENCE [--key FILE]`
/// builds, then pushes the component to an OCI registry (signed with the key).
pub(super) const PUBLISH_STEP: &str = r#"# ./build.sh publish REGISTRY/NAMESPACE/{{name}}:TAG [--key cosign.key]: then push
# plugins/{{name}}.wasm to that OCI registry, signed with the key when one is given
# (codemode-host push; $CODEMODE_HOST names another codemode-host).
if [ "${1:-}" = publish ]; then
  shift
  "${CODEMODE_HOST:-{{host}}}" push plugins/{{name}}.wasm "$@"
fi
"#;

/// The end of the build of a language whose componentizer drops the WIT's doc
/// comments (Python's, JavaScript's): `codemode-host wit-docs` writes them into
/// the component built as `plugins/{{name}}.wasm.partial`, which only then takes
/// its name.
pub(super) const WIT_DOCS_STEP: &str = r#"# Keep the WIT's doc comments (what each parameter means) in the component:
# the componentizer drops them. Needs codemode-host on PATH (or in $CODEMODE_HOST).
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
"#;

/// How each project is checked and tried: the README's second half.
pub(super) const README_TRY: &str = r#"
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
