//! Services described by OpenAPI as capabilities, end to end: the real binary
//! with a config file whose `[[openapi]]` tables name a FastAPI application
//! (`tests/services/shop.py`, PyPI `fastapi` + `uvicorn`) by the URL of its
//! generated `/openapi.json`, driven by the Python MCP client over stdio and
//! over HTTP.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::stdio::{call, err, ok};
use crate::support::{HttpServer, drive_http, root, wait_for_audit};
use crate::upstream::upstream_bin;

/// The FastAPI shop on a free loopback port, ended (by its PID) when dropped.
struct Shop {
    child: Child,
    port: u16,
}

impl Shop {
    fn start() -> Self {
        let mut child = Command::new(upstream_bin().join("python"))
            .arg(root().join("tests/services/shop.py"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the FastAPI shop");
        let stdout = child.stdout.take().expect("its stdout");
        // Its first line comes once it accepts connections; a shop that dies
        // first ends the stream, and the test with it.
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the shop's first line");
        let port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the shop did not start: {line:?}"));
        Self { child, port }
    }

    fn spec_url(&self) -> String {
        format!("http://127.0.0.1:{}/openapi.json", self.port)
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The README's section "Services described by OpenAPI": its TOML block and
/// its program.
fn readme_example() -> (String, String) {
    let readme = include_str!("../README.md");
    let section = readme
        .split("## Services described by OpenAPI")
        .nth(1)
        .expect("the README has the section");
    let block = |fence: &str| {
        section
            .split(fence)
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("the section has the block")
            .to_owned()
    };
    (block("```toml\n"), block("```python\n"))
}

/// The README's config naming the shop as `shop` (the right key, from a
/// variable), and `badshop` with a wrong one (from a file), in a fresh folder
/// of the test `label`, and the folder the server starts in (no plugins
/// folder).
fn config(label: &str, shop: &Shop) -> (PathBuf, PathBuf) {
    let dir = root().join("target/e2e-openapi").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("cwd")).expect("create the folders");
    std::fs::write(dir.join("wrong.key"), "not-the-key\n").expect("write the key file");
    let path = dir.join("codemode.toml");
    let (readme, _) = readme_example();
    let readme = readme.replace("http://127.0.0.1:8000/openapi.json", &shop.spec_url());
    std::fs::write(
        &path,
        format!(
            r#"{readme}
[[openapi]]
name = "badshop"
spec = "{spec}"
api-key-header = "X-API-Key"
api-key-file = "wrong.key"
include = ["readItem"]
"#,
            spec = shop.spec_url()
        ),
    )
    .expect("write the config");
    (path, dir.join("cwd"))
}

fn execute(source: &str) -> Value {
    call("execute", json!({ "source": source }))
}

#[test]
fn a_fastapi_service_is_searched_described_and_called_over_stdio() {
    let shop = Shop::start();
    let (path, cwd) = config("stdio", &shop);
    let out = crate::support::run_driver(&json!({
        "command": crate::support::host_bin(),
        "args": crate::support::with_cache(&["--config", path.to_str().expect("utf-8")]),
        "cwd": cwd,
        "env": {"SHOP_KEY": "shop-key"},
        "mode": "legacy",
        "steps": [
            call("search_api", json!({"query": "create a new item in the shop"})),
            call("describe_api", json!({"name": "shop.list_items"})),
            execute(
                "def main():\n    made = shop.create_item(name=\"saw\", price=20.0, tags=[\"tools\"])\n    got = shop.read_item(item_id=made[\"id\"])\n    cheap = shop.list_items(max_price=5.0, tag=[\"small\"])\n    return {\"made\": made[\"id\"], \"got\": got[\"name\"], \"cheap\": sorted([i[\"name\"] for i in cheap[\"result\"]]), \"health\": shop.health()[\"text\"]}"
            ),
            execute("def main():\n    return shop.read_item(item_id=99)"),
            execute("def main():\n    return badshop.read_item(item_id=1)"),
            execute(
                "def main():\n    shop.delete_item_items_item_id_delete(item_id=1)\n    return shop.read_item(item_id=1)"
            ),
            execute("def main():\n    return shop.read_item(item_id=\"one\")"),
            execute(&readme_example().1),
        ],
    }));
    let results = out["results"].as_array().expect("results");
    let found = ok(&results[0]);
    assert_eq!(found["results"][0]["name"], "shop.create_item", "{found}");
    let described = ok(&results[1]);
    assert_eq!(described["summary"], "List the items of the shop");
    assert_eq!(
        described["output"],
        json!([{"name": "result", "type": "list[{name: str, price: float, tags: list[str] | None, id: int}] | None", "required": true}])
    );
    assert_eq!(
        described["signature"],
        "shop.list_items(*, max_price: float | None, tag: list[str] | None)",
        "{described}"
    );
    assert_eq!(
        described["description"],
        "GET /items\n\nArguments:\n- max_price: Only items at most this price.\n- tag: Only items with all these tags. (default: [])",
        "{described}"
    );
    assert_eq!(
        ok(&results[2])["result"],
        json!({"made": 4, "got": "saw", "cheap": ["glue", "nails"], "health": "ok"})
    );
    assert_eq!(
        err(&results[3]),
        r#"capability failed: HTTP 404 Not Found: {"detail":"Item not found"}"#
    );
    assert_eq!(
        err(&results[4]),
        r#"capability failed: HTTP 401 Unauthorized: {"detail":"wrong API key"}"#
    );
    assert_eq!(
        err(&results[5]),
        r#"capability failed: HTTP 404 Not Found: {"detail":"Item not found"}"#
    );
    assert_eq!(
        ok(&results[7])["result"],
        json!({"made": 5, "cheap": ["glue", "nails"]})
    );
    // Bound against the operation's parameters before any request is made.
    assert_eq!(
        err(&results[6]),
        "invalid capability arguments: argument \"item_id\" must be an integer"
    );
}

#[test]
fn a_fastapi_service_is_called_over_http_and_audited_by_its_id() {
    let shop = Shop::start();
    let (path, cwd) = config("http", &shop);
    let server = HttpServer::start_with_env(
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--allow-all",
            "--plugins",
            cwd.to_str().expect("utf-8"),
        ],
        &[("SHOP_KEY", "shop-key")],
    );
    let out = drive_http(
        &server.url(),
        json!({}),
        "legacy",
        json!([execute(
            "def main():\n    return [shop.read_item(item_id=2)[\"name\"], len(shop.list_items(tag=[\"tools\"])[\"result\"])]"
        )]),
    );
    assert_eq!(ok(&out["results"][0])["result"], json!(["nails", 2]));
    wait_for_audit(&server, "\"capability_id\":\"openapi:shop/readItem\"", 1);
}
