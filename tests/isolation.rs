//! Every execution gets plugin instances nobody called before, including the spare
//! instances the host makes ahead of time: what a plugin keeps in its memory never
//! reaches another execution, and a spare costs the execution that takes it exactly
//! what instantiating the plugin itself would have.

use serde_json::{Value, json};

use crate::support::{
    HttpServer, execute_http, plugin_folder, test_plugin, wait_for_audit, wait_for_log,
};

/// A program that hands `hostile.remember` a secret, then asks what it kept.
fn remember(secret: &str) -> String {
    format!(
        "def main():\n    return [hostile.remember(text=\"{secret}\"), hostile.remember(text=\"again\")]"
    )
}

/// The audit lines of `hostile.remember` calls, in order.
fn remember_calls(audit: &str) -> Vec<Value> {
    audit
        .lines()
        .filter(|line| line.contains("\"capability\":\"hostile.remember\""))
        .map(|line| {
            let start = line.find('{').expect("a JSON audit line");
            serde_json::from_str(&line[start..]).expect("audit JSON")
        })
        .collect()
}

#[test]
fn a_spare_instance_is_fresh_and_costs_what_instantiating_the_plugin_would() {
    let dir = plugin_folder("isolation-spares", &[test_plugin("hostile")]);
    let dir = dir.to_str().expect("utf-8 path");
    let server = HttpServer::start(&[
        "--plugins",
        dir,
        "--allow-all",
        "--log",
        "info,codemode_host::plugins=debug",
    ]);
    // The first execution instantiates the plugin itself; a spare is made after.
    assert_eq!(
        execute_http(server.port, &remember("secret-1")),
        Ok(json!([{"previous": null}, {"previous": "secret-1"}]))
    );
    wait_for_log(&server, "spare instance ready plugin=hostile.wasm", 1);
    // The second takes that spare: it has not seen the first execution's secret.
    assert_eq!(
        execute_http(server.port, &remember("secret-2")),
        Ok(json!([{"previous": null}, {"previous": "secret-2"}]))
    );
    wait_for_log(
        &server,
        "took a spare instance plugin=hostile.wasm execution=2",
        1,
    );
    wait_for_log(&server, "spare instance ready plugin=hostile.wasm", 2);
    assert_eq!(
        execute_http(server.port, &remember("secret-3")),
        Ok(json!([{"previous": null}, {"previous": "secret-3"}]))
    );
    wait_for_log(
        &server,
        "took a spare instance plugin=hostile.wasm execution=3",
        1,
    );

    // Each execution's first call paid for the instance's start code, whether it ran
    // then or ahead of time: the same fuel, audited the same.
    wait_for_audit(&server, "\"capability\":\"hostile.remember\"", 6);
    let calls = remember_calls(&server.audit());
    let fuel: Vec<u64> = calls
        .iter()
        .map(|call| call["fuel"].as_u64().expect("fuel"))
        .collect();
    assert_eq!(fuel.len(), 6, "{calls:?}");
    assert_eq!((fuel[2], fuel[4]), (fuel[0], fuel[0]), "{fuel:?}");
    assert_eq!((fuel[3], fuel[5]), (fuel[1], fuel[1]), "{fuel:?}");
    assert!(
        fuel[0] > fuel[1],
        "the first call includes the start code: {fuel:?}"
    );
}
