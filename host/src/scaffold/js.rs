//! The files of a new plugin project in JavaScript with componentize-js.

use super::common::{FOREIGN_WORLD, PLUGIN_WIT_MARK};

/// A JavaScript project.
pub(super) const JS: &[(&str, &str)] = &[
    ("wit/world.wit", FOREIGN_WORLD),
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
{{wit_docs}}{{publish}}"#,
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
