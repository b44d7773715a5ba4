//! The files of a new plugin project in Python with componentize-py.

use super::common::{FOREIGN_WORLD, PLUGIN_WIT_MARK};

/// A Python project.
pub(super) const PYTHON: &[(&str, &str)] = &[
    ("wit/world.wit", FOREIGN_WORLD),
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
{{wit_docs}}{{publish}}"#,
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
