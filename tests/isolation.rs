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

/// A server of the plugins in `dir` whose log shows spares being made and taken.
fn start(dir: &std::path::Path) -> HttpServer {
    HttpServer::start(&[
        "--plugins",
        dir.to_str().expect("utf-8 path"),
        "--allow-all",
        "--log",
        "info,codemode_host::plugins=debug",
    ])
}

/// The fuel of each audited call of `capability`, in order.
fn fuel_of_calls(audit: &str, capability: &str) -> Vec<u64> {
    let needle = format!("\"capability\":\"{capability}\"");
    audit
        .lines()
        .filter(|line| line.contains(&needle))
        .map(|line| {
            let start = line.find('{').expect("a JSON audit line");
            let call: Value = serde_json::from_str(&line[start..]).expect("audit JSON");
            call["fuel"].as_u64().expect("fuel")
        })
        .collect()
}

#[test]
fn a_spare_instance_is_fresh_and_costs_what_instantiating_the_plugin_would() {
    let server = start(&plugin_folder(
        "isolation-spares",
        &[test_plugin("hostile")],
    ));
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
    let fuel = fuel_of_calls(&server.audit(), "hostile.remember");
    assert_eq!(fuel.len(), 6, "{fuel:?}");
    assert_eq!((fuel[2], fuel[4]), (fuel[0], fuel[0]), "{fuel:?}");
    assert_eq!((fuel[3], fuel[5]), (fuel[1], fuel[1]), "{fuel:?}");
    assert!(
        fuel[0] > fuel[1],
        "the first call includes the start code: {fuel:?}"
    );
}

#[test]
fn a_spare_s_start_code_is_charged_to_the_call_that_takes_it() {
    // The Python example's start code burns fuel (a Rust plugin's burns almost
    // none): a spare that did not charge it would show as a cheaper first call.
    let Some(geo) = crate::support::foreign_plugin("python_geo") else {
        return;
    };
    let server = start(&plugin_folder("isolation-spare-fuel", &[geo]));
    let distance = "def main():\n    return geo.distance(a={\"lat\": 52.5, \"lon\": 13.4}, b={\"lat\": 48.9, \"lon\": 2.4})";
    let first = execute_http(server.port, distance).expect("the first execute");
    wait_for_log(&server, "spare instance ready plugin=python_geo.wasm", 1);
    assert_eq!(execute_http(server.port, distance), Ok(first));
    wait_for_log(
        &server,
        "took a spare instance plugin=python_geo.wasm execution=2",
        1,
    );
    wait_for_audit(&server, "\"capability\":\"geo.distance\"", 2);
    let fuel = fuel_of_calls(&server.audit(), "geo.distance");
    assert_eq!(fuel.len(), 2, "{fuel:?}");
    assert_eq!(
        fuel[1], fuel[0],
        "instantiated by the call, then taken as a spare"
    );
}
