//! `execute` end to end: the real binary, real plugins (the examples plus two that
//! misbehave on purpose) and the Python MCP client.

use serde_json::{Value, json};

use crate::stdio::{call, err, ok};
use crate::support::{drive, example_plugin_files, example_plugins, plugin_folder, test_plugin};

/// A plugins folder (own to the test `label`) with the examples and the hostile and
/// liar test plugins.
fn plugins_with_test_doubles(label: &str) -> std::path::PathBuf {
    let mut files = example_plugin_files();
    files.extend(["hostile", "liar"].map(test_plugin));
    plugin_folder(label, &files)
}

fn execute(source: &str) -> Value {
    call("execute", json!({ "source": source }))
}

const TRIVIAL: &str = "def main():\n    return 1";

#[test]
fn records_query_feeds_stats_summary_with_the_right_numbers() {
    let dir = example_plugins();
    let out = drive(
        &["--plugins", dir.to_str().expect("utf-8 path")],
        json!([
            execute(
                "def main():\n    r = records.query(filter={\"genre\": \"fantasy\"}, tags=[\"classic\"])\n    return stats.summary(values=[x[\"score\"] for x in r[\"items\"]])"
            ),
            execute(
                "def main():\n    r = records.query(filter={\"genre\": \"fantasy\"}, tags=[\"classic\"])\n    return [x[\"score\"] for x in r[\"items\"]]"
            ),
        ]),
    );
    let summary = &ok(&out["results"][0])["result"];
    let mut scores: Vec<f64> = ok(&out["results"][1])["result"]
        .as_array()
        .expect("scores")
        .iter()
        .map(|v| v.as_f64().expect("float"))
        .collect();
    assert!(
        scores.len() >= 3,
        "too few books to be a meaningful check: {scores:?}"
    );
    scores.sort_by(f64::total_cmp);
    let n = scores.len() as f64;
    let mean = scores.iter().sum::<f64>() / n;
    let median = if scores.len() % 2 == 1 {
        scores[scores.len() / 2]
    } else {
        (scores[scores.len() / 2 - 1] + scores[scores.len() / 2]) / 2.0
    };
    let stdev = (scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n).sqrt();
    assert_eq!(summary["count"], json!(scores.len()));
    let close = |key: &str, want: f64| {
        let got = summary[key].as_f64().expect("float");
        assert!((got - want).abs() < 1e-9, "{key}: got {got}, want {want}");
    };
    close("mean", mean);
    close("median", median);
    close("stdev", stdev);
    close("min", scores[0]);
    close("max", scores[scores.len() - 1]);
    // Keys come back sorted: the record's fields in name order.
    let keys: Vec<&String> = summary.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["count", "max", "mean", "median", "min", "stdev"]);
    let stats = &out["results"][0]["meta"]["codemode/stats"];
    assert_eq!(stats["native_calls"], json!(2));
    for key in [
        "fuel",
        "steps",
        "intermediate_bytes",
        "result_bytes",
        "elapsed_us",
    ] {
        assert!(
            stats[key].as_u64().is_some_and(|v| v > 0),
            "{key} in {stats}"
        );
    }
}

/// Programs that must fail with exactly this text, each followed by a trivial
/// program that must still succeed on the same server.
fn hostile_programs() -> Vec<(&'static str, String, String)> {
    vec![
        ("parens", format!("def main():\n    return {}1{}", "(".repeat(10_000), ")".repeat(10_000)), "invalid program: <codemode>:2:112: brackets nest deeper than 100 levels".to_owned()),
        // Operators without brackets: refused after parsing, at the first node past
        // 200 levels (once `--max-memory`), and past what the parser's stack takes
        // a resource limit (`_meta` names the interpreter's stack).
        ("chain", format!("def main():\n    return {}", vec!["1"; 1200].join(" + ")), "invalid program: <codemode>:2:12: statements and expressions nest deeper than 200 levels".to_owned()),
        ("unarychain", format!("def main():\n    return {}1", "-".repeat(30_000)), "resource limit exceeded".to_owned()),
        ("xrepeat", "def main():\n    return len(\"x\" * (1 << 32))".to_owned(), "invalid program: runtime error at <codemode>:2:16: Integer value is too big to fit in i32: 4294967296".to_owned()),
        ("biglist", "def main():\n    return len(list(range(100000000)))".to_owned(), "resource limit exceeded".to_owned()),
        ("range62", "def main():\n    for x in range(1 << 62):\n        pass\n    return 1".to_owned(), "invalid program: runtime error at <codemode>:2:14: range: argument 1 is 4611686018427387904, outside the ints a range holds (-2147483648 to 2147483647)".to_owned()),
        ("loop", "def main():\n    t = 0\n    for x in range(2147483647):\n        t += 1\n    return t".to_owned(), "resource limit exceeded".to_owned()),
        ("mutual", "def a(n):\n    return b(n)\n\ndef b(n):\n    return a(n)\n\ndef main():\n    return a(1)".to_owned(), "invalid program: <codemode>:1:5: recursion is not allowed: `a` calls `b` calls `a`".to_owned()),
        ("lambda_rec", "f = lambda n: f(n - 1)\n\ndef main():\n    return f(10)".to_owned(), "invalid program: <codemode>:1:1: `f` calls itself; recursion is not allowed".to_owned()),
        ("evade_rec", "fs = []\n\ndef main():\n    fs.append(lambda n: fs[0](n + 1))\n    return fs[0](1)".to_owned(), "invalid program: runtime error at <codemode>:4:25: Starlark call stack overflow".to_owned()),
        ("alias", "def main():\n    return [[[0] * 300] * 300] * 300".to_owned(), "resource limit exceeded".to_owned()),
        ("twomib", "def main():\n    return \"x\" * (2 * 1024 * 1024)".to_owned(), "resource limit exceeded".to_owned()),
        ("millionkeys", "def main():\n    return {str(i): i for i in range(1000000)}".to_owned(), "resource limit exceeded".to_owned()),
        // Sizes past the interpreter's address space: once `internal failure`.
        ("strrepeat", "def main():\n    return len('abc' * 1000000000)".to_owned(), "resource limit exceeded".to_owned()),
        ("listrepeat", "def main():\n    return len([1, 2, 3] * 1000000000)".to_owned(), "resource limit exceeded".to_owned()),
        ("onerepeat", "def main():\n    return len([1] * 600000000)".to_owned(), "resource limit exceeded".to_owned()),
        // A JSON number no float holds: once `internal failure`.
        ("json1e400", "def main():\n    return json.decode('[1, 1e400]')".to_owned(), "invalid program: runtime error at <codemode>:2:12: json.decode: number out of range".to_owned()),
        ("toplevel", "x = records.lookup(key=\"bk-0001\")\n\ndef main():\n    return x".to_owned(), "invalid program: runtime error at <codemode>:1:5: `records.lookup` called outside main(): capabilities can only be called while main() runs".to_owned()),
        ("closure", "def main():\n    return lambda: records.lookup(key=\"bk-0001\")".to_owned(), "invalid program: <codemode>: main() returned a value of type function; return None, bool, int, float, str, list, tuple or dict".to_owned()),
        ("load", "load(\"x.star\", \"y\")\n\ndef main():\n    return 1".to_owned(), "invalid program: <codemode>:1:1: `load` is not allowed in this dialect".to_owned()),
        ("while", "def main():\n    while True:\n        pass".to_owned(), "invalid program: <codemode>:2:5: Parse error: cannot use reserved keyword `while`".to_owned()),
        ("fstring", "def main():\n    x = 1\n    return f\"{x}\"".to_owned(), "invalid program: <codemode>:3:12: Your Starlark dialect must enable f-strings to use them".to_owned()),
        ("set", "def main():\n    return set()".to_owned(), "invalid program: <codemode>:2:12: Variable `set` not found, did you mean `int`?".to_owned()),
        ("unknown", "def main():\n    return records.lokup(key=\"bk-0001\")".to_owned(), "invalid program: runtime error at <codemode>:2:12: unknown capability `records.lokup`; did you mean records.lookup? (find names with search_api)".to_owned()),
        ("unknownroot", "def main():\n    return recods.lookup(key=\"bk-0001\")".to_owned(), "invalid program: <codemode>:2:12: Variable `recods` not found; did you mean records?".to_owned()),
        ("positional", "def main():\n    return records.lookup(\"bk-0001\")".to_owned(), "invalid capability arguments: positional arguments are not accepted".to_owned()),
        ("calls101", "def main():\n    for i in range(101):\n        stats.summary(values=[1.0])\n    return 1".to_owned(), "resource limit exceeded".to_owned()),
        ("intermediate", "def main():\n    n = 0\n    for i in range(10):\n        n += len(liar.blob(size=900000)[\"data\"])\n    return n".to_owned(), "resource limit exceeded".to_owned()),
        ("source", format!("def main():\n    return 1\n{}", "#".repeat(65_537 - 25)), "resource limit exceeded".to_owned()),
        ("badutf8", "def main():\n    return liar.bad_utf8()".to_owned(), "capability failed".to_owned()),
        ("spin", "def main():\n    return hostile.spin()".to_owned(), "resource limit exceeded".to_owned()),
        ("hog", "def main():\n    return hostile.hog()".to_owned(), "resource limit exceeded".to_owned()),
        ("crash", "def main():\n    return hostile.crash()".to_owned(), "capability failed".to_owned()),
        ("fail", "def main():\n    fail(\"boom\")".to_owned(), "invalid program: runtime error at <codemode>:2:5: fail: boom".to_owned()),
        ("keyerror", "def main():\n    return {}[\"x\"]".to_owned(), "invalid program: runtime error at <codemode>:2:12: Key `\"x\"` was not found".to_owned()),
        ("typeerror", "def main():\n    return 1 + \"a\"".to_owned(), "invalid program: runtime error at <codemode>:2:12: Operation `+` not supported for types `int` and `string`".to_owned()),
        ("nomain", "def helper():\n    return 1".to_owned(), "invalid program: <codemode>: `main` is not defined; define `def main():` with no parameters".to_owned()),
        ("mainparams", "def main(x):\n    return x".to_owned(), "invalid program: <codemode>:1:5: main must take no parameters: define `def main():`".to_owned()),
        ("mainint", "main = 1".to_owned(), "invalid program: <codemode>: `main` must be a function defined with `def main():`, not a int".to_owned()),
        ("import", "import os\n\ndef main():\n    return 1".to_owned(), "invalid program: <codemode>:1:1: Parse error: cannot use reserved keyword `import`".to_owned()),
        ("unknownarg", "def main():\n    return records.lookup(key=\"bk-0001\", colour=1)".to_owned(), "invalid capability arguments: unknown argument \"colour\"".to_owned()),
        ("missing", "def main():\n    return records.lookup()".to_owned(), "invalid capability arguments: missing required argument \"key\"".to_owned()),
        ("nested", "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=1, count=1, ratio=1.0, flag=True, color=\"red\", perms=[], tags=[], labels={}, filter={\"owner\": 1})".to_owned(), "invalid capability arguments: argument \"filter.owner\" must be a string".to_owned()),
        ("tags1", "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=1, count=1, ratio=1.0, flag=True, color=\"red\", perms=[], tags=[\"a\", 2], labels={})".to_owned(), "invalid capability arguments: argument \"tags[1]\" must be a string".to_owned()),
        ("labels", "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=1, count=1, ratio=1.0, flag=True, color=\"red\", perms=[], tags=[], labels={\"env\": 1})".to_owned(), "invalid capability arguments: argument \"labels['env']\" must be a string".to_owned()),
        ("intkeyarg", "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=1, count=1, ratio=1.0, flag=True, color=\"red\", perms=[], tags=[], labels={\"env\": \"a\", 2: \"b\"})".to_owned(), "invalid capability arguments: argument \"labels\" keys must be strings".to_owned()),
        ("funcarg", "def main():\n    return liar.echo(name=len, letter=\"a\", small=1, count=1, ratio=1.0, flag=True, color=\"red\", perms=[], tags=[], labels={})".to_owned(), "invalid capability arguments: argument \"name\" must be a string".to_owned()),
        ("int64", "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=1, count=1 << 70, ratio=1.0, flag=True, color=\"red\", perms=[], tags=[], labels={})".to_owned(), "invalid capability arguments: argument \"count\" overflows int64".to_owned()),
        ("finite", "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=1, count=1, ratio=float(\"inf\"), flag=True, color=\"red\", perms=[], tags=[], labels={})".to_owned(), "invalid capability arguments: argument \"ratio\" is not finite".to_owned()),
        ("range8", "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=1000, count=1, ratio=1.0, flag=True, color=\"red\", perms=[], tags=[], labels={})".to_owned(), "invalid capability arguments: argument \"small\" must be between -128 and 127".to_owned()),
        ("huge", "def main():\n    return liar.huge()".to_owned(), "capability failed".to_owned()),
        ("nan", "def main():\n    return liar.nan()".to_owned(), "capability failed".to_owned()),
        ("failmsg", "def main():\n    return liar.fail(message=\"no\\tluck\\n\" + \"é\" * 200)".to_owned(), format!("capability failed: no luck {}...", "é".repeat(122))),
        ("refuse", "def main():\n    return liar.refuse(message=\"denied by plugin\")".to_owned(), "capability failed: denied by plugin".to_owned()),
        ("retnan", "def main():\n    return float(\"nan\")".to_owned(), "invalid program: <codemode>: main() returned a float that is not finite (nan)".to_owned()),
        ("deep", "def main():\n    x = 1\n    for i in range(40):\n        x = [x]\n    return x".to_owned(), "resource limit exceeded".to_owned()),
        ("intkeys", "def main():\n    return {1: 2}".to_owned(), "invalid program: <codemode>: main() returned a dict with a key of type int; keys must be strings".to_owned()),
        ("steps", "def main():\n    for i in range(2000000):\n        pass\n    return 1".to_owned(), "resource limit exceeded".to_owned()),
        ("namespace", "def main():\n    return records(key=1)".to_owned(), "invalid program: runtime error at <codemode>:2:12: `records` is a namespace, not a capability; call one of its capabilities".to_owned()),
        ("dupkw", "def main():\n    return records.lookup(key=\"a\", key=\"b\")".to_owned(), "invalid program: <codemode>:2:36: repeated named argument".to_owned()),
        ("sumbool", "def main():\n    return sum([1, True])".to_owned(), "invalid program: runtime error at <codemode>:2:12: sum: at index 1, got bool, want int or float".to_owned()),
    ]
}

#[test]
fn hostile_programs_fail_exactly_and_the_server_survives() {
    let dir = plugins_with_test_doubles("hostile-corpus");
    let corpus = hostile_programs();
    assert!(
        corpus.len() >= 40,
        "the corpus must keep at least 40 programs"
    );
    let mut steps = Vec::new();
    for (_, source, _) in &corpus {
        steps.push(execute(source));
        steps.push(execute(TRIVIAL));
    }
    steps.push(json!({"op": "list_tools"}));
    let out = drive(
        &[
            "--plugins",
            dir.to_str().expect("utf-8 path"),
            "--max-execution-time",
            "2s",
        ],
        Value::Array(steps),
    );
    let results = out["results"].as_array().expect("results");
    for (i, (name, _, want)) in corpus.iter().enumerate() {
        assert_eq!(err(&results[2 * i]), want.as_str(), "{name}");
        assert_eq!(
            ok(&results[2 * i + 1]),
            &json!({"result": 1}),
            "the execute after {name}"
        );
    }
    assert_eq!(
        results.last().and_then(Value::as_array).map(Vec::len),
        Some(3),
        "the server still lists its tools"
    );
}

#[test]
fn values_cross_with_their_types_and_sorted_keys() {
    let dir = plugins_with_test_doubles("values-cross");
    let out = drive(
        &["--plugins", dir.to_str().expect("utf-8 path")],
        json!([
            execute(
                "def main():\n    return [-0.0, 1.0, 2, None, True, \"s\", (1, 2), {\"b\": 1, \"a\": 2}]"
            ),
            execute(
                "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=-3, count=5, ratio=0.5, flag=True, color=\"dark-green\", perms=[\"write\"], tags=[\"t\"], labels={\"b\": \"2\", \"a\": \"1\"}, filter={\"owner\": \"o\", \"min_score\": None}, window={\"since\": 1})"
            ),
            execute(
                "def main():\n    print(\"discarded\")\n    return [hasattr(json, \"encode_indent\"), json.indent('{\"a\":[1,2]}', indent=\"  \"), math.round(2.5), math.floor(1.5), sum([]), sum([1, 2]), sum([1, 2.0])]"
            ),
            execute(
                "def main():\n    r = records.lookup(key=\"bk-0001\")\n    return list(r.keys())"
            ),
        ]),
    );
    let results = out["results"].as_array().expect("results");
    assert_eq!(
        results[0]["text"][0],
        json!(r#"{"result":[-0.0,1.0,2,null,true,"s",[1,2],{"a":2,"b":1}]}"#)
    );
    assert_eq!(
        ok(&results[1])["result"],
        json!({"color": "dark-green", "count": 5, "filter": {"min_score": null, "owner": "o"}, "flag": true, "labels": {"a": "1", "b": "2"}, "letter": "a", "name": "n", "perms": ["write"], "ratio": 0.5, "small": -3, "tags": ["t"], "window": {"since": 1, "until_day": null}})
    );
    assert_eq!(
        ok(&results[2])["result"],
        json!([
            false,
            "{\n  \"a\": [\n    1,\n    2\n  ]\n}",
            3.0,
            1,
            0,
            3,
            3.0
        ])
    );
    // A program iterates a result's keys in sorted order.
    assert_eq!(
        ok(&results[3])["result"],
        json!([
            "author", "genre", "key", "pages", "score", "tags", "title", "year"
        ])
    );
}
