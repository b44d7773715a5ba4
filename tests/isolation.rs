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
    HttpServer::allowing(dir, &["--log", "info,codemode_sandbox::plugins=debug"])
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

/// Bearer tokens of the two subjects the leak tests alternate between.
const TOKENS: [(&str, &str); 2] = [
    ("tenant-a", "isolation-token-of-tenant-a"),
    ("tenant-b", "isolation-token-of-tenant-b"),
];
/// WebAssembly pages (64 KiB) `probe.memory` grows by: 96 MiB, past 64 MiB.
const PROBE_PAGES: u32 = 1536;
/// Every how many 4 KiB pages it writes one: 6,144 scattered runs (more than one
/// scan's buffer of 64 runs), 24 MiB in all (more than the 16 MiB a slot keeps
/// resident, so part of the reset is the kernel's).
const PROBE_STRIDE: u32 = 4;
/// Every how many table slots `probe.table` sets.
const PROBE_SLOT_STRIDE: u32 = 3;

/// One program calls all three sweeps, each leaving its part of the instance
/// dirty; the segment is checked against the probe made with `seed`.
fn sweep(seed: u32) -> String {
    format!(
        "def main():\n    return [probe.memory(pages={PROBE_PAGES}, stride={PROBE_STRIDE}, marker=165), probe.table(stride={PROBE_SLOT_STRIDE}), probe.segment(seed={seed}, marker=90)]"
    )
}

/// What every sweep of a slot nobody else's data reached reports.
fn pristine() -> Value {
    let host_pages = PROBE_PAGES * 16;
    json!([
        {"checked": host_pages, "dirty": 0, "written": host_pages.div_ceil(PROBE_STRIDE)},
        {"checked": crate::probe::TABLE_SLOTS, "dirty": 0, "written": crate::probe::TABLE_SLOTS.div_ceil(PROBE_SLOT_STRIDE)},
        {"checked": crate::probe::SEGMENT_BYTES, "dirty": 0, "written": crate::probe::SEGMENT_BYTES},
    ])
}

/// A tokens file naming both subjects.
fn tokens_file(label: &str) -> std::path::PathBuf {
    crate::support::tokens_file(label, &TOKENS)
}

/// A server of `dir` that runs one execution at a time (so every execution reuses
/// the slots the last one wrote), with memory room for the probe's 96 MiB.
fn leak_server(dir: &std::path::Path, label: &str) -> HttpServer {
    let tokens = tokens_file(label);
    HttpServer::start(&[
        "--plugins",
        dir.to_str().expect("utf-8 path"),
        "--tokens",
        tokens.to_str().expect("utf-8 path"),
        "--allow-all",
        "--max-concurrent-executions",
        "1",
        "--max-memory",
        "128MiB",
        "--log",
        "info,codemode_sandbox::plugins=debug",
    ])
}

/// Runs `rounds` sweeps of the probe made with `seed`, alternating the two
/// subjects, and checks each found its instance pristine; returns how many pages,
/// slots and bytes were checked.
fn sweep_rounds(server: &HttpServer, rounds: usize, first: usize, seed: u32) -> u64 {
    let mut checked = 0;
    for round in 0..rounds {
        let (subject, token) = TOKENS[(first + round) % 2];
        let swept = crate::support::execute_as(server.port, token, &sweep(seed))
            .unwrap_or_else(|error| panic!("sweep {round} as {subject}: {error}"));
        assert_eq!(swept, pristine(), "sweep {round} as {subject}");
        checked += swept
            .as_array()
            .expect("three sweeps")
            .iter()
            .map(|one| one["checked"].as_u64().expect("checked"))
            .sum::<u64>();
    }
    checked
}

#[test]
fn no_byte_of_one_execution_reaches_the_next_in_memory_tables_or_data() {
    let dir = plugin_folder("isolation-leak", &[crate::probe::plugin(1)]);
    let server = leak_server(&dir, "isolation-leak");
    // The first execution instantiates the probe itself; each later one takes the
    // spare made in the slot the last execution freed.
    let mut checked = sweep_rounds(&server, 1, 0, 1);
    for execution in 2..=4 {
        wait_for_log(
            &server,
            "spare instance ready plugin=probe.wasm",
            execution - 1,
        );
        checked += sweep_rounds(&server, 1, execution - 1, 1);
        wait_for_log(
            &server,
            &format!("took a spare instance plugin=probe.wasm execution={execution}"),
            1,
        );
    }
    // Without waiting for a spare, an execution may instantiate the probe itself
    // in a slot just reset: the same must hold.
    checked += sweep_rounds(&server, 4, 0, 1);
    eprintln!(
        "isolation: 8 executions, 2 subjects, one slot reused: {checked} pages, table slots and segment bytes checked, none dirty"
    );
    assert_eq!(
        checked,
        8 * u64::from(PROBE_PAGES * 16 + crate::probe::TABLE_SLOTS + crate::probe::SEGMENT_BYTES)
    );
}

#[test]
fn after_a_hot_reload_no_call_is_served_by_the_old_version_s_instances() {
    let dir = plugin_folder("isolation-reload", &[crate::probe::plugin(2)]);
    let server = leak_server(&dir, "isolation-reload");
    sweep_rounds(&server, 1, 0, 2);
    wait_for_log(&server, "spare instance ready plugin=probe.wasm", 1);
    // The new version's data segment differs in every byte from the old one's, and
    // the program checks against the new one's: a call served by an instance of
    // the old version counts every byte of its segment dirty.
    let new = crate::probe::plugin(3);
    assert!(
        (0..crate::probe::SEGMENT_BYTES)
            .all(|i| crate::probe::segment_byte(2, i) != crate::probe::segment_byte(3, i))
    );
    let temp = dir.join(".probe.wasm.tmp");
    std::fs::copy(&new, &temp).expect("copy the new version");
    std::fs::rename(&temp, dir.join("probe.wasm")).expect("the new version in place");
    wait_for_log(&server, "catalog reloaded", 1);
    let checked = sweep_rounds(&server, 4, 1, 3);
    eprintln!(
        "isolation after a reload: {checked} pages, table slots and segment bytes checked, none dirty"
    );
    assert_eq!(
        checked,
        4 * u64::from(PROBE_PAGES * 16 + crate::probe::TABLE_SLOTS + crate::probe::SEGMENT_BYTES)
    );
}

/// Tests of plugins built by another language's toolchain: `cargo xtask test`
/// skips the tests under `toolchains::` when a toolchain cannot be installed here
/// (CI installs them; a missing one fails its run).
mod toolchains {
    use super::*;

    #[test]
    fn a_spare_s_start_code_is_charged_to_the_call_that_takes_it() {
        // The Python example's start code burns fuel (a Rust plugin's burns almost
        // none): a spare that did not charge it would show as a cheaper first call.
        let geo = crate::support::foreign_plugin("python_geo");
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
}
