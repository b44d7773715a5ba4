"""Drive codemode-host with the official Python MCP SDK client (PyPI `mcp`).

Reads a JSON script on stdin:
    {"command": "...", "args": [...], "env": {...}, "mode": "legacy", "steps": [STEP, ...]}
(env optional: variables the server gets besides the SDK's default few)
or, for Streamable HTTP, {"url": "http://.../mcp", "headers": {...}, ...} instead of
command and args. A failed connection prints {"connect_error": MESSAGE}.
with steps {"op": "list_tools"} or {"op": "call", "tool": NAME, "arguments": {...},
"meta": {...}, "progress": true} (meta optional: the request's `_meta`; progress
optional: ask for progress, the RESULT then has "progress": [[progress, total,
message], ...], what the SDK's callback got), or {"op": "call_until", ...
"seconds": S} (a call repeated every 0.2 s until it succeeds, for at most S
seconds; its RESULT is the last one),
and prints one JSON document: {"server_info": ..., "instructions": ...,
"results": [RESULT, ...]}. With "elicitation": [ANSWER, ...] the client declares
form elicitation and answers each request with the next ANSWER (the last one
again once they run out): {"action": "accept", "content": {...}}, {"action":
"decline"}, or {"wait": SECONDS} (an answer that comes after SECONDS: the next
ANSWER, or a decline when none is left); the document then has "elicitations": [the requests' params, ...]. A call's RESULT is {"is_error", "structured", "text",
"meta"} or {"protocol_error": MESSAGE}. The Rust end-to-end tests assert on it exactly.
"""

import asyncio
import json
import sys

import mcp
from mcp import StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def target(script):
    if "url" in script:
        http = create_mcp_http_client(headers=script.get("headers") or {})
        return streamable_http_client(script["url"], http_client=http)
    return StdioServerParameters(
        command=script["command"], args=script["args"], env=script.get("env"), cwd=script.get("cwd")
    )


async def run(script):
    results = []
    elicitations = []
    options = {}
    if "elicitation" in script:
        answers = list(script["elicitation"])

        async def on_elicitation(context, params):
            elicitations.append(params.model_dump(by_alias=True, exclude_none=True, mode="json"))
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if "wait" in answer:
                await asyncio.sleep(answer["wait"])
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                if "wait" in answer:
                    answer = {"action": "decline"}
            return mcp.types.ElicitResult(action=answer["action"], content=answer.get("content"))

        options["elicitation_callback"] = on_elicitation
    async with mcp.Client(
        target(script), mode=script.get("mode", "legacy"), read_timeout_seconds=60, **options
    ) as client:
        info = client.server_info
        for step in script["steps"]:
            if step["op"] == "list_tools":
                listed = await client.list_tools()
                results.append([t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools])
            elif step["op"] == "call":
                results.append(await call(client, step))
            elif step["op"] == "call_until":
                deadline = asyncio.get_running_loop().time() + step["seconds"]
                result = await call(client, step)
                while result.get("is_error") is not False and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.2)
                    result = await call(client, step)
                results.append(result)
            else:
                raise ValueError(f"unknown op {step['op']!r}")
        out = {
            "server_info": info.model_dump(by_alias=True, exclude_none=True) if info else None,
            "instructions": client.instructions,
            "protocol_version": client.protocol_version,
            "results": results,
        }
        if "elicitation" in script:
            out["elicitations"] = elicitations
        return out


async def call(client, step):
    received = []

    async def on_progress(progress, total, message):
        received.append([progress, total, message])

    callback = on_progress if step.get("progress") else None
    try:
        r = await client.call_tool(
            step["tool"], step.get("arguments"), progress_callback=callback, meta=step.get("meta")
        )
    except mcp.MCPError as e:
        return {"protocol_error": str(e)}
    text = [c.text for c in r.content if getattr(c, "type", None) == "text"]
    result = {"is_error": bool(r.is_error), "structured": r.structured_content, "text": text, "meta": r.meta}
    if callback:
        result["progress"] = received
    return result


def describe(error):
    """The innermost message of an exception group (anyio wraps transport errors)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"


def main():
    script = json.load(sys.stdin)
    try:
        out = asyncio.run(asyncio.wait_for(run(script), timeout=120))
    except Exception as e:  # a refused connection (e.g. 401) is a result to assert on
        if "url" not in script:
            raise
        out = {"connect_error": describe(e)}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
