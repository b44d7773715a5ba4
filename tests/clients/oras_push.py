"""Push an OCI artifact with oras-py (PyPI `oras`), an implementation of the
distribution API that is not ours, and print the pushed manifest's digest.

Reads a JSON script on stdin:
    {"target": "127.0.0.1:PORT/namespace/name:tag",
     "files": [[PATH, MEDIA_TYPE], ...],
     "config": [PATH, MEDIA_TYPE],            (optional: oras' empty config otherwise)
     "annotations": {PATH: {KEY: VALUE}}}     (optional: per layer, by its PATH)
and prints {"digest": "sha256:..."}: the SHA-256 of the manifest the registry now
serves under the target (read back over HTTP, as any client would).

The end-to-end tests of `codemode-host pull` publish plugins and cosign
signatures with it (tests/registry.rs).
"""

import hashlib
import json
import os
import sys
import tempfile

import oras.client
import requests

MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json"


def main() -> None:
    script = json.load(sys.stdin)
    client = oras.client.OrasClient(insecure=True)
    with tempfile.TemporaryDirectory() as folder:
        annotation_file = None
        if script.get("annotations"):
            annotation_file = os.path.join(folder, "annotations.json")
            with open(annotation_file, "w", encoding="utf-8") as out:
                json.dump(script["annotations"], out)
        # oras looks a layer's annotations up by the path it was given.
        files = [f"{path}:{media_type}" for path, media_type in script["files"]]
        config = None
        if script.get("config"):
            config = f"{script['config'][0]}:{script['config'][1]}"
        client.push(
            files=files,
            target=script["target"],
            manifest_config=config,
            annotation_file=annotation_file,
            disable_path_validation=True,
        )
    registry, rest = script["target"].split("/", 1)
    repository, tag = rest.rsplit(":", 1)
    answer = requests.get(
        f"http://{registry}/v2/{repository}/manifests/{tag}",
        headers={"Accept": MANIFEST_TYPES},
        timeout=30,
    )
    answer.raise_for_status()
    print(json.dumps({"digest": "sha256:" + hashlib.sha256(answer.content).hexdigest()}))


if __name__ == "__main__":
    main()
