#!/usr/bin/env bash
# Builds the Python example plugin with componentize-py: the one $COMPONENTIZE_PY
# names (`cargo xtask plugins` names the one of the machine's tools folder), else
# one installed into a local venv (target/toolchains/python; nothing global).
#
#   plugins/python-geo/build.sh [OUTPUT]    default: target/plugins/python_geo.wasm
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(realpath -m "${1:-$root/target/plugins/python_geo.wasm}")"
venv="$root/target/toolchains/python"
version="0.25.1"
py="${COMPONENTIZE_PY:-$venv/bin/componentize-py}"
if [ "$("$py" --version 2>/dev/null)" != "componentize-py $version" ]; then
  if [ -n "${COMPONENTIZE_PY:-}" ]; then
    echo "python-geo: $COMPONENTIZE_PY is not componentize-py $version" >&2
    exit 1
  fi
  if ! python3 -m venv "$venv" || ! "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$version"; then
    echo "python-geo: cannot install componentize-py $version (needs python3 with venv and pip, and the package index)" >&2
    exit 69
  fi
fi
mkdir -p "$(dirname "$out")"
cd "$here"
# wit/deps/codemode-plugin links to the repository's wit/plugin (the plugin ABI).
"$py" --quiet -d wit -w example:geo/plugin@0.1.0 componentize app -o "$out.partial"
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
