"""Drive codemode-host with the official Python MCP SDK client (PyPI `mcp`).

Reads a JSON script on stdin:
    {"command": "...", "args": [...], "env": {...}, "mode": "legacy", "steps": [STEP, ...]}
(env optional: variables the server gets besides the SDK's default few)
or, for Streamable HTTP, {"url": "http://.../mcp", "headers": {...}, ...} instead of
command and args. A failed connection prints {"connect_error": MESSAGE}. With
"routes": [URL, ...] (HTTP) each request goes to the next URL in turn, as a
round-robin load balancer in front of replicas would send it, except that an
answer to a question goes to the URL after the one that took the last
`tools/call` (never the replica that asked); the document then
has "routed": [[INDEX, WHAT], ...], WHAT the JSON-RPC method, "answer" for a
response the client sent, or "GET"/"DELETE".
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
"meta"} or {"protocol_error": MESSAGE}. With "oauth": {"login": NAME,
"redirect_uri": URI, "scope": SCOPES} (HTTP) the SDK's OAuth client finds the
authorization server from the server's 401, registers, and logs in as NAME through
the authorization server's development login and consent pages; the document then
has "authorization": the authorization URL's resource and scope. The Rust
end-to-end tests assert on it exactly.
"""

import asyncio
import json
import sys

import httpx2
import mcp
from mcp import StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def target(script, authorization, routed):
    if "url" in script:
        auth = oauth(script, authorization) if "oauth" in script else None
        http = create_mcp_http_client(headers=script.get("headers") or {}, auth=auth)
        if "routes" in script:
            http = httpx2.AsyncClient(
                headers=script.get("headers") or {}, timeout=http.timeout, transport=RoundRobin(script["routes"], routed)
            )
        return streamable_http_client(script["url"], http_client=http)
    return StdioServerParameters(
        command=script["command"], args=script["args"], env=script.get("env"), cwd=script.get("cwd")
    )


class RoundRobin(httpx2.AsyncBaseTransport):
    """Sends each request to the next of `routes` in turn, noting in `routed`
    where each went and what it carried."""

    def __init__(self, routes, routed):
        self.routes = [httpx2.URL(route) for route in routes]
        self.routed = routed
        self.inner = httpx2.AsyncHTTPTransport()
        self.next = 0
        self.last_call = None

    async def handle_async_request(self, request):
        index = self.next
        self.next = (self.next + 1) % len(self.routes)
        what = request.method
        if request.method == "POST":
            body = json.loads(request.content)
            what = body.get("method") or "answer"
            if what == "tools/call":
                self.last_call = index
            elif what == "answer" and self.last_call is not None:
                # Never the replica that asked (the one that took the call).
                index = (self.last_call + 1) % len(self.routes)
        route = self.routes[index]
        self.routed.append([index, what])
        request.url = request.url.copy_with(host=route.host, port=route.port)
        request.headers["host"] = f"{route.host}:{route.port}"
        return await self.inner.handle_async_request(request)

    async def aclose(self):
        await self.inner.aclose()


def oauth(script, authorization):
    """The SDK's OAuth client, logging in as script["oauth"]["login"] through the
    authorization server's development login and consent pages (oidc-provider's),
    as a person in a browser would; what the authorization URL asked for goes into
    `authorization`."""
    import re
    import urllib.parse

    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    settings = script["oauth"]
    redirect_uri = settings["redirect_uri"]
    redirected = {}

    class Memory:
        def __init__(self):
            self.tokens = None
            self.client = None

        async def get_tokens(self):
            return self.tokens

        async def set_tokens(self, tokens):
            self.tokens = tokens

        async def get_client_info(self):
            return self.client

        async def set_client_info(self, client):
            self.client = client

    async def browse(url):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        authorization.update({key: values[0] for key, values in query.items() if key in ("resource", "scope")})
        async with httpx2.AsyncClient() as browser:
            response = await browser.get(url)
            for _ in range(20):
                location = response.headers.get("location")
                if location and location.startswith(redirect_uri):
                    params = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
                    redirected.update({key: values[0] for key, values in params.items()})
                    return
                if location:
                    response = await browser.get(response.url.join(location))
                    continue
                action = re.search(r'<form[^>]*action="([^"]+)"', response.text)
                if action is None:
                    raise RuntimeError(f"no form on {response.url}: {response.status_code}")
                fields = {"prompt": "consent"}
                if 'name="login"' in response.text:
                    fields = {"prompt": "login", "login": settings["login"], "password": "any"}
                response = await browser.post(response.url.join(action.group(1)), data=fields)
            raise RuntimeError("the login did not end at the redirect URI")

    async def callback():
        return AuthorizationCodeResult(
            code=redirected["code"], state=redirected.get("state"), iss=redirected.get("iss")
        )

    return OAuthClientProvider(
        server_url=script["url"],
        client_metadata=OAuthClientMetadata(
            redirect_uris=[redirect_uri],
            grant_types=["authorization_code"],
            response_types=["code"],
            token_endpoint_auth_method="none",
            scope=settings.get("scope"),
        ),
        storage=Memory(),
        redirect_handler=browse,
        callback_handler=callback,
    )


async def run(script):
    results = []
    authorization = {}
    routed = []
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
        target(script, authorization, routed), mode=script.get("mode", "legacy"), read_timeout_seconds=60, **options
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
        if "oauth" in script:
            out["authorization"] = authorization
        if "routes" in script:
            out["routed"] = routed
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
