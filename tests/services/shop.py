"""A small FastAPI application for the OpenAPI tests: its generated
/openapi.json is the spec the server reads, its routes what capabilities call.

Every route of the shop needs the API key `X-API-Key: shop-key` (a security
scheme, so the spec lists it under `securitySchemes`, not as a parameter);
`/whoami` needs none and says whose bearer token it got (the subject and
audience of the JWT, read, not verified: the OAuth tests check who is sent). It listens on a
free loopback port and prints `listening <port>` once it accepts connections;
`shop.py --spec FILE` writes its OpenAPI description to FILE and exits;
`shop.py --tls CERT KEY` serves HTTPS with that certificate.
"""

import asyncio
import base64
import json
import socket
import sys

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from fastapi.security import APIKeyHeader
from pydantic import BaseModel

KEY = APIKeyHeader(name="X-API-Key")


def checked(key: str = Depends(KEY)) -> None:
    if key != "shop-key":
        raise HTTPException(status_code=401, detail="wrong API key")


app = FastAPI(title="Shop", version="1.0.0")
shop = APIRouter(dependencies=[Depends(checked)])


class NewItem(BaseModel):
    """An item as it is created."""

    name: str
    price: float
    tags: list[str] = []


class Item(NewItem):
    """An item of the shop."""

    id: int


ITEMS: dict[int, Item] = {
    1: Item(id=1, name="hammer", price=12.5, tags=["tools"]),
    2: Item(id=2, name="nails", price=3.0, tags=["tools", "small"]),
    3: Item(id=3, name="glue", price=4.25, tags=["small"]),
}


@shop.get("/items", tags=["items"], operation_id="listItems", summary="List the items of the shop")
def list_items(
    max_price: float | None = Query(default=None, description="Only items at most this price."),
    tag: list[str] = Query(default=[], description="Only items with all these tags."),
) -> list[Item]:
    return [
        item
        for item in ITEMS.values()
        if (max_price is None or item.price <= max_price) and all(t in item.tags for t in tag)
    ]


@shop.get("/items/{item_id}", tags=["items"], operation_id="readItem", summary="Read one item by its ID")
def read_item(item_id: int) -> Item:
    if item_id not in ITEMS:
        raise HTTPException(status_code=404, detail="Item not found")
    return ITEMS[item_id]


@shop.post("/items", tags=["admin"], operation_id="createItem", summary="Create an item", status_code=201)
def create_item(item: NewItem) -> Item:
    created = Item(id=max(ITEMS) + 1, **item.model_dump())
    ITEMS[created.id] = created
    return created


@shop.delete("/items/{item_id}", tags=["admin"], summary="Delete an item", status_code=204)
def delete_item(item_id: int) -> None:
    ITEMS.pop(item_id, None)


@shop.get("/health", operation_id="health", summary="Say whether the shop is up", response_class=PlainTextResponse)
def health() -> str:
    return "ok"


@shop.get("/trace", operation_id="seenTrace", summary="Say which trace context the request carried")
def seen_trace(request: Request) -> dict[str, str]:
    return {"traceparent": request.headers.get("traceparent", "<none>")}


@shop.get("/slow", operation_id="slow", summary="Answer after five seconds")
async def slow() -> dict[str, str]:
    await asyncio.sleep(5)
    return {"late": "yes"}


@shop.get("/big", operation_id="big", summary="Answer 17 MiB of JSON")
def big() -> PlainTextResponse:
    return PlainTextResponse('["' + "x" * (17 << 20) + '"]', media_type="application/json")


@shop.get("/big-stream", operation_id="bigStream", summary="Stream 17 MiB of JSON, its length untold")
def big_stream() -> StreamingResponse:
    def chunks():
        yield b'["'
        for _ in range(17):
            yield b"x" * (1 << 20)
        yield b'"]'

    return StreamingResponse(chunks(), media_type="application/json")


@shop.get("/many", operation_id="many", summary="Answer 1,100,000 empty lists")
def many() -> PlainTextResponse:
    return PlainTextResponse("[" + "[]," * 1_099_999 + "[]]", media_type="application/json")


class Caller(BaseModel):
    """Whose token a request carried."""

    sub: str
    aud: str


@app.get("/whoami", operation_id="whoAmI", summary="Say whose bearer token the request carried")
def who_am_i(request: Request) -> Caller:
    token = request.headers.get("authorization", "").removeprefix("Bearer ")
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        raise HTTPException(status_code=401, detail="no bearer token")
    audience = claims.get("aud", "")
    if isinstance(audience, list):
        audience = " ".join(audience)
    return Caller(sub=claims.get("sub", ""), aud=audience)


app.include_router(shop)


def main() -> None:
    if sys.argv[1:2] == ["--spec"]:
        with open(sys.argv[2], "w", encoding="utf-8") as out:
            json.dump(app.openapi(), out)
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    tls = {}
    if sys.argv[1:2] == ["--tls"]:
        tls = {"ssl_certfile": sys.argv[2], "ssl_keyfile": sys.argv[3]}
    config = uvicorn.Config(app, log_level="warning", **tls)
    server = uvicorn.Server(config)

    async def started() -> None:
        print(f"listening {port}", flush=True)

    original = server.startup

    async def startup(sockets=None):
        await original(sockets=sockets)
        await started()

    server.startup = startup
    server.run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
