//! Plugins written in Python (componentize-py) and JavaScript (componentize-js),
//! served next to a Rust plugin and combined in one program.

use serde_json::json;

use crate::stdio::{call, err, ok};
use crate::support::{drive, example_plugins, foreign_plugin, plugin_folder};

fn execute(source: &str) -> serde_json::Value {
    call("execute", json!({ "source": source }))
}

/// Tests of plugins built by another language's toolchain: `cargo xtask test`
/// skips the tests under `toolchains::` when a toolchain cannot be installed here
/// (CI installs them; a missing one fails its run).
mod toolchains {
    use super::*;

    #[test]
    fn python_javascript_and_rust_capabilities_combine_in_one_program() {
        let (python, javascript) = (foreign_plugin("python_geo"), foreign_plugin("js_strings"));
        let dir = plugin_folder(
            "polyglot",
            &[example_plugins().join("records.wasm"), python, javascript],
        );
        let out = drive(
            &["--plugins", dir.to_str().expect("utf-8 path")],
            json!([
                call(
                    "search_api",
                    json!({"query": "distance between coordinates"})
                ),
                call("describe_api", json!({"name": "strings.slugify"})),
                call("describe_api", json!({"name": "geo.nearest"})),
                execute(
                    "def main():\n    book = records.lookup(key=\"bk-0001\")\n    berlin = {\"lat\": 52.52, \"lon\": 13.405}\n    near = geo.nearest(origin=berlin, places=[{\"name\": \"Paris\", \"lat\": 48.8566, \"lon\": 2.3522}, {\"name\": \"Prague\", \"lat\": 50.0755, \"lon\": 14.4378}])\n    return {\"slug\": strings.slugify(text=book[\"title\"])[\"slug\"], \"nearest\": near[\"name\"], \"km\": int(near[\"km\"]), \"title\": strings.title_case(text=\"the lord OF the rings\")[\"text\"]}"
                ),
                execute(
                    "def main():\n    return geo.distance(a={\"lat\": 91, \"lon\": 0}, b={\"lat\": 0, \"lon\": 0})"
                ),
                execute(
                    "def main():\n    return strings.slugify(text=\"Crème brûlée, 2 ways\", separator=\"_\")"
                ),
                execute("def main():\n    return strings.slugify(text=\"!!\")"),
                execute(
                    "def main():\n    return geo.distance(a={\"lat\": \"north\", \"lon\": 0}, b={\"lat\": 0, \"lon\": 0})"
                ),
                // A word only the parameter docs of geo.nearest have.
                call("search_api", json!({"query": "candidates"})),
            ]),
        );
        let results = &out["results"];
        let names: Vec<&str> = ok(&results[0])["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names.first(), Some(&"geo.distance"), "{names:?}");
        assert_eq!(
            ok(&results[1])["signature"],
            "strings.slugify(*, text: str, separator: str | None)"
        );
        // The WIT's docs, which the build scripts keep in the components.
        assert_eq!(
            ok(&results[1])["description"],
            "Accents are removed (é -> e); anything but letters and digits separates words. separator defaults to \"-\" and may be empty or one character.\n\nArguments:\n- text: accents are removed (é -> e); anything but ASCII letters and digits separates words\n- separator: what joins the words: empty or one character (default \"-\")"
        );
        assert_eq!(
            ok(&results[2])["description"],
            "The place nearest to an origin point, with its distance in kilometres.\n\nArguments:\n- origin: where to measure from (lat: Degrees north, -90 to 90; lon: Degrees east, -180 to 180)\n- places: the candidates (at least one) (name: What the result calls it; lat: Degrees north, -90 to 90; lon: Degrees east, -180 to 180)"
        );
        assert_eq!(
            ok(&results[3])["result"],
            json!({"slug": "the-burning-tide", "nearest": "Prague", "km": 281, "title": "The Lord of the Rings"})
        );
        assert_eq!(
            err(&results[4]),
            "capability failed: a.lat must be between -90 and 90, got 91.0"
        );
        assert_eq!(
            ok(&results[5])["result"],
            json!({"slug": "creme_brulee_2_ways"})
        );
        assert_eq!(
            err(&results[6]),
            "capability failed: text has no letters or digits to make a slug from"
        );
        assert_eq!(
            err(&results[7]),
            "invalid capability arguments: argument \"a.lat\" must be a float"
        );
        assert_eq!(
            ok(&results[8])["results"][0]["name"],
            "geo.nearest",
            "{}",
            results[8]
        );
    }

    #[test]
    fn a_python_plugin_starts_without_a_warning_about_its_toolchain_export() {
        let geo = foreign_plugin("python_geo");
        let folder = crate::support::plugin_folder("python-quiet", &[geo]);
        let (log, _) = crate::support::startup_log(&["--plugins", folder.to_str().expect("utf-8")]);
        let log = log.join("\n");
        assert!(
            log.contains("plugin loaded plugin=python_geo.wasm"),
            "{log}"
        );
        assert!(!log.contains("WARN"), "{log}");
    }
}
