"""An upstream MCP server for codemode-host's tests, misbehaving on request.

Run by codemode-host as a `[[upstream]]` child over stdio. Its tools report what the
child sees (its environment), wait (to be cancelled at a deadline: a cancellation is
written to the file named by DOUBLE_LOG, one line per cancelled call), fail with
`isError`, end the process in the middle of a call, or add a tool while serving.
`note` (annotated destructive) writes `note TEXT` to that file and `echo`
(annotated read-only) answers its text: what approval tests ask about.
Each start writes `started PID` to that file. `crash_and_stay_down` also makes the
next starts fail at once (counted in the file named by DOUBLE_HOLD), so the server
sees the upstream down for a while.
"""

import asyncio
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("double")


def log(line):
    path = os.environ.get("DOUBLE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


@server.tool()
def env(name: str) -> str:
    """The value of an environment variable of the server. Answers <unset> when absent."""
    return os.environ.get(name, "<unset>")


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def note(text: str) -> str:
    """Write `note TEXT` to the file named by DOUBLE_LOG: a side effect a test can see."""
    log(f"note {text}")
    return f"noted {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def count() -> int:
    """How many times it was called in this process (each call writes `count N` to DOUBLE_LOG)."""
    global COUNTED
    COUNTED += 1
    log(f"count {COUNTED}")
    return COUNTED


COUNTED = 0


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Answer TEXT: read-only."""
    return text


@server.tool()
def trace(ctx: Context) -> str:
    """The W3C traceparent of this call's request _meta. Answers <none> when absent."""
    meta = ctx.request_context.meta or {}
    return meta.get("traceparent", "<none>")


@server.tool()
async def wait(seconds: float) -> str:
    """Waits, then answers done."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        log(f"cancelled wait {seconds}")
        raise
    return "done"


@server.tool()
def refuse(reason: str) -> str:
    """Fails with the reason given."""
    raise ToolError(reason)


@server.tool()
def huge() -> dict[str, int]:
    """Answers a number no float can hold (10**400, written out in full)."""
    return {"n": 10**400}


@server.tool()
def crash() -> str:
    """Ends the server in the middle of the call."""
    log("crash")
    os._exit(3)


@server.tool()
def crash_and_stay_down(starts: int) -> str:
    """Ends the server in the middle of the call; its next `starts` starts fail."""
    with open(os.environ["DOUBLE_HOLD"], "w") as f:
        f.write(str(starts))
    log("crash")
    os._exit(3)


def held():
    """Whether this start must fail (DOUBLE_HOLD counts the starts left to fail)."""
    path = os.environ.get("DOUBLE_HOLD")
    if not path or not os.path.exists(path):
        return False
    with open(path) as f:
        left = int(f.read() or "0")
    if left <= 0:
        return False
    with open(path, "w") as f:
        f.write(str(left - 1))
    return True


def extra() -> str:
    """A tool added while serving."""
    return "extra"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool extra and tells the client its tool list changed."""
    server.add_tool(extra)
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool(name="listFiles")
def list_files(pattern: str, limit: int | None = None, kind: str = "file") -> str:
    """Lists files. A camelCase name, an optional integer and a default."""
    return f"{pattern} {limit} {kind}"


if __name__ == "__main__":
    if held():
        log("held")
        os._exit(1)
    log(f"started {os.getpid()}")
    server.run()
