#!/usr/bin/env bash
# Builds the JavaScript example plugin with componentize-js: the CLI script
# $COMPONENTIZE_JS names (`cargo xtask plugins` names the one of the machine's
# tools folder), else one installed with npm into a local folder
# (target/toolchains/node; nothing global). Needs Node.js 20 or later.
#
#   plugins/js-strings/build.sh [OUTPUT]    default: target/plugins/js_strings.wasm
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(realpath -m "${1:-$root/target/plugins/js_strings.wasm}")"
tools="$root/target/toolchains/node"
version="0.23.0"
cli="${COMPONENTIZE_JS:-$tools/node_modules/@bytecodealliance/componentize-js/src/cli.js}"
package="$(dirname "$(dirname "$cli")")/package.json"
if ! grep -q "\"version\": \"$version\"" "$package" 2>/dev/null; then
  if [ -n "${COMPONENTIZE_JS:-}" ]; then
    echo "js-strings: $COMPONENTIZE_JS is not componentize-js $version" >&2
    exit 1
  fi
  mkdir -p "$tools"
  [ -f "$tools/package.json" ] || echo '{"private": true}' > "$tools/package.json"
  if ! (cd "$tools" && npm install --silent --no-audit --no-fund "@bytecodealliance/componentize-js@$version"); then
    echo "js-strings: cannot install componentize-js $version (needs Node.js 20+ with npm, and the package registry)" >&2
    exit 69
  fi
fi
mkdir -p "$(dirname "$out")"
cd "$here"
# wit/deps/codemode-plugin links to the repository's wit/plugin (the plugin ABI).
# The plugin needs no HTTP: leave wasi:http out of what the engine wires up.
node "$cli" strings.js --wit wit --world-name plugin --disable http fetch-event -o "$out.partial"
# Keep the WIT's doc comments (what each parameter means) in the component: the
# toolchain drops them. `cargo xtask plugins` names its own copy of the command.
host="${CODEMODE_HOST:-codemode-host}"
if ! command -v "$host" >/dev/null; then
  echo "$(basename "$here"): $host not found: put codemode-host on PATH or name it in CODEMODE_HOST (it writes the WIT docs into the component)" >&2
  rm -f "$out.partial"
  exit 1
fi
if ! "$host" wit-docs --wit wit "$out.partial" >/dev/null; then
  rm -f "$out.partial"
  exit 1
fi
mv "$out.partial" "$out"
