//! `codemode-host new-plugin` and `codemode-host check`: a project generated in each
//! language builds with its own `build.sh`, `check` prints what agents will see,
//! and the server answers its capability. Python and JavaScript projects are
//! built with the toolchains `cargo xtask plugins` installed for the examples.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::stdio::{call, err, ok};
use crate::support::{cache_dir, drive, foreign_plugin, host_bin, root, tool};

fn execute(source: &str) -> serde_json::Value {
    call("execute", json!({ "source": source }))
}

/// Generates the project `name` in `lang` into a fresh folder of the test.
fn generate(label: &str, name: &str, lang: &str) -> PathBuf {
    let parent = root().join("target/e2e-scaffold");
    std::fs::create_dir_all(&parent).expect("create the folder");
    let dir = parent.join(label);
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(host_bin())
        .args(["new-plugin", name, "--lang", lang, "--dir"])
        .arg(&dir)
        .output()
        .expect("run new-plugin");
    assert!(
        out.status.success(),
        "new-plugin failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "wrote {0}: the plugin `{name}` with one capability, {name}.hello; build it with\n  cd {0} && ./build.sh\nthen follow its README.md to check and try it\n",
            dir.display()
        )
    );
    dir
}

/// Runs the project's `build.sh` with `env`.
fn build(dir: &Path, env: &[(&str, PathBuf)]) {
    let out = Command::new(dir.join("build.sh"))
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .expect("run build.sh");
    assert!(
        out.status.success(),
        "build.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `codemode-host check FILES` with the shared cache: exit code and stdout.
fn check(files: &[&Path]) -> (Option<i32>, String) {
    let out = Command::new(host_bin())
        .arg("check")
        .args(files)
        .args(["--cache-dir", cache_dir()])
        .output()
        .expect("run check");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Checks the built project and calls its capability through the server.
fn check_and_try(dir: &Path, name: &str) {
    let plugin = dir.join("plugins").join(format!("{name}.wasm"));
    assert_eq!(
        check(&[&plugin]),
        (
            Some(0),
            format!(
                "{name}.wasm: 1 capability\n  {name}.hello(*, name: str) -> {{text: str}}\n    id: {name}.hello\n    Greet someone by name.\n"
            )
        )
    );
    // The README's commands are these, with this binary.
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("read the README");
    for command in [
        "./build.sh".to_owned(),
        format!("{} check plugins/{name}.wasm", host_bin()),
        format!("--cli {} --plugins plugins", host_bin()),
    ] {
        assert!(readme.contains(&command), "{command} missing:\n{readme}");
    }
    let plugins = dir.join("plugins");
    let out = drive(
        &["--plugins", plugins.to_str().expect("utf-8 path")],
        json!([
            execute(&format!(
                "def main():\n    return {name}.hello(name=\"Ada\")"
            )),
            execute(&format!("def main():\n    return {name}.hello(name=\"\")")),
            call("describe_api", json!({ "name": format!("{name}.hello") })),
        ]),
    );
    // The WIT's doc comment of `hello` documents its parameter.
    let description = ok(&out["results"][2])["description"]
        .as_str()
        .expect("a description")
        .to_owned();
    assert!(
        description.ends_with("\n\nArguments:\n- name: who to greet; must not be empty"),
        "{description}"
    );
    assert_eq!(
        ok(&out["results"][0]),
        &json!({"result": {"text": "Hello, Ada!"}})
    );
    assert_eq!(
        err(&out["results"][1]),
        "capability failed: name must not be empty"
    );
}

#[test]
fn a_new_rust_plugin_builds_checks_and_answers() {
    let dir = generate("rust", "my_tool", "rust");
    // Its release profile is the one the example plugins are built with, and
    // with the workspace's lock file it takes the same dependency versions: built
    // into the workspace's target folder, it compiles only itself.
    let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml"))
        .expect("read Cargo.toml")
        .parse()
        .expect("a TOML manifest");
    let release = &manifest["profile"]["release"];
    for (setting, want) in devtools::PLUGIN_RELEASE_PROFILE {
        let key = setting.to_lowercase().replace('_', "-");
        let got = match release.get(&key) {
            Some(toml::Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            // Cargo's default for a release profile.
            None if key == "debug" => "false".to_owned(),
            None => String::new(),
        };
        assert_eq!(&got, want, "[profile.release] {key} in {}", dir.display());
    }
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy the lock file");
    build(&dir, &[("CARGO_TARGET_DIR", root().join("target"))]);
    check_and_try(&dir, "my_tool");
    publish_and_pull(&dir, "my_tool");
}

/// Runs the README's publishing commands in `dir`, against a registry of the
/// test's own instead of registry.example, and serves what they pulled.
fn publish_and_pull(dir: &Path, name: &str) {
    let registry = crate::registry::Registry::start(&format!("scaffold-{name}"));
    let pulled = root()
        .join("target/e2e-scaffold")
        .join(format!("pulled-{name}"));
    let _ = std::fs::remove_dir_all(&pulled);
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("read the README");
    let commands = [
        "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out cosign.key".to_owned(),
        "openssl pkey -in cosign.key -pubout -out cosign.pub".to_owned(),
        format!("./build.sh publish registry.example/team/{name}:0.1.0 --key cosign.key"),
        format!(
            "{} pull registry.example/team/{name}:0.1.0 --plugins /srv/plugins --verify-key cosign.pub",
            host_bin()
        ),
    ];
    for command in &commands {
        assert!(
            readme.contains(command.as_str()),
            "{command} missing:\n{readme}"
        );
        let command = command
            .replace("registry.example", &registry.host())
            .replace("/srv/plugins", pulled.to_str().expect("utf-8 path"));
        let out = Command::new("sh")
            .args(["-c", &command])
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", root().join("target"))
            .output()
            .expect("run a README command");
        assert!(
            out.status.success(),
            "{command}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = drive(
        &["--plugins", pulled.to_str().expect("utf-8 path")],
        json!([execute(&format!(
            "def main():\n    return {name}.hello(name=\"Ada\")"
        ))]),
    );
    assert_eq!(
        ok(&out["results"][0]),
        &json!({"result": {"text": "Hello, Ada!"}})
    );
}

#[test]
fn check_names_every_reason_a_file_cannot_load_and_exits_1() {
    let dir = root().join("target/e2e-scaffold/broken");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    let notes = dir.join("notes.wasm");
    std::fs::write(&notes, "not a component").expect("write");
    let misfit = root().join("target/test-plugins/misfit.wasm");
    let oddtypes = root().join("target/test-plugins/oddtypes.wasm");
    let (code, out) = check(&[&notes, &misfit, &oddtypes]);
    assert_eq!(code, Some(1));
    assert_eq!(
        out,
        "notes.wasm: cannot load\n  not a WebAssembly file (no `\\0asm` header); only components are loaded\n\
         misfit.wasm: cannot load\n  export `misfit.echo`: name \"json.echo\": the first segment \"json\" is reserved by the language surface\n\
         oddtypes.wasm: cannot load\n  export `odd.area`: parameter shape: WIT type `variant` is not supported (use an enum, or a record with option fields)\n"
    );
}

#[test]
fn new_plugin_refuses_a_bad_name_and_a_folder_in_use() {
    let run = |args: &[&str]| {
        let out = Command::new(host_bin())
            .arg("new-plugin")
            .args(args)
            .output()
            .expect("run new-plugin");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["2fast", "--lang", "rust", "--dir", "/nonexistent/x"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(
            "ERROR codemode_host: `2fast` cannot be the root of capability names: it must be an identifier (letters, digits, `_`), not a Starlark keyword or builtin"
        ),
        "{stderr}"
    );
    let used = root().join("target/e2e-scaffold/used");
    std::fs::create_dir_all(&used).expect("create the folder");
    std::fs::write(used.join("keep.txt"), "mine").expect("write");
    let (code, stderr) = run(&[
        "greet",
        "--lang",
        "js",
        "--dir",
        used.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(&format!(
            "ERROR codemode_host: `{}` exists and is not empty; name another folder with --dir",
            used.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(used.join("keep.txt")).expect("read"),
        "mine"
    );
}

#[test]
fn wit_docs_writes_the_section_once_and_names_each_bad_input() {
    let dir = root().join("target/e2e-scaffold/wit-docs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("wit")).expect("create the folder");
    let wit = dir.join("wit/world.wit");
    std::fs::write(
        &wit,
        "package a:b;\ninterface i {\n  /// Does it.\n  /// - x: how much\n  f: func(x: u32);\n}\n",
    )
    .expect("write");
    let plugin = dir.join("p.wasm");
    let run = |args: &[&str]| {
        let out = Command::new(host_bin())
            .arg("wit-docs")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run wit-docs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let component = std::fs::read(root().join("target/test-plugins/sleepy.wasm")).expect("read");
    std::fs::write(&plugin, &component).expect("write");
    let (code, stdout, _) = run(&["p.wasm"]);
    assert_eq!(code, Some(0));
    assert_eq!(stdout, "p.wasm: 72 bytes of WIT docs from wit\n");
    let once = std::fs::read(&plugin).expect("read");
    // The section, appended: its header, its name (codemode-docs: a
    // `package-docs` section makes WIT decoders fail), the WIT tools' format.
    let payload = br#"{"interfaces":{"i":{"funcs":{"f":{"docs":"Does it.\n- x: how much"}}}}}"#;
    let mut section = vec![0, 86, 13];
    section.extend_from_slice(b"codemode-docs\x01");
    section.extend_from_slice(payload);
    assert_eq!(&once[..component.len()], &component[..]);
    assert_eq!(&once[component.len()..], &section[..]);
    // Twice: the section is replaced, not added.
    assert_eq!(run(&["p.wasm"]).0, Some(0));
    assert_eq!(std::fs::read(&plugin).expect("read"), once);
    let failures = [
        (
            vec!["nope.wasm"],
            "cannot write the WIT docs into nope.wasm: cannot read it: No such file or directory (os error 2)",
        ),
        (
            vec!["--wit", "missing", "p.wasm"],
            "cannot write the WIT docs into p.wasm: cannot read the WIT at missing: failed to read path for WIT [missing]: No such file or directory (os error 2)",
        ),
        (
            vec!["wit/world.wit"],
            "cannot write the WIT docs into wit/world.wit: not a well-formed WebAssembly binary (no WebAssembly preamble)",
        ),
    ];
    for (args, want) in failures {
        let (code, stdout, stderr) = run(&args);
        assert_eq!((code, stdout.as_str()), (Some(1), ""), "{args:?}");
        assert!(stderr.trim_end().ends_with(want), "{args:?}: {stderr}");
    }
}

/// Tests of plugins built by another language's toolchain: `cargo xtask test`
/// skips the tests under `toolchains::` when a toolchain cannot be installed here
/// (CI installs them; a missing one fails its run).
mod toolchains {
    use super::*;

    #[test]
    fn a_new_python_plugin_builds_checks_and_answers() {
        // The example was built, so its toolchain is installed.
        foreign_plugin("python_geo");
        let dir = generate("python", "greet", "python");
        // The project pins the componentize-py the test builds it with.
        let script = std::fs::read_to_string(dir.join("build.sh")).expect("read build.sh");
        let pin = format!("componentize-py=={}", devtools::COMPONENTIZE_PY_VERSION);
        assert!(script.contains(&pin), "{pin} in:\n{script}");
        // An exception the author did not foresee.
        patch(
            &dir.join("app.py"),
            "        return Greeting(text=f\"Hello, {name}!\")",
            "        if name == \"boom\":\n            return Greeting(text={}[\"boom\"])\n        return Greeting(text=f\"Hello, {name}!\")",
        );
        build(
            &dir,
            &[
                (
                    "COMPONENTIZE_PY",
                    tool(&devtools::COMPONENTIZE_PY).join("bin/componentize-py"),
                ),
                ("CODEMODE_HOST", PathBuf::from(host_bin())),
            ],
        );
        check_and_try(&dir, "greet");
        unforeseen(&dir, "greet", "capability failed: KeyError: 'boom'");
    }

    #[test]
    fn a_new_javascript_plugin_builds_checks_and_answers() {
        // The example was built, so its toolchain is installed.
        foreign_plugin("js_strings");
        let dir = generate("js", "my_tool", "js");
        let manifest =
            std::fs::read_to_string(dir.join("package.json")).expect("read package.json");
        let pin = format!(
            "\"@bytecodealliance/componentize-js\": \"{}\"",
            devtools::COMPONENTIZE_JS_VERSION
        );
        assert!(manifest.contains(&pin), "{pin} in:\n{manifest}");
        // A runtime gap the author did not know of (docs/plugin-guide.md).
        patch(
            &dir.join("my_tool.js"),
            "    return { text: `Hello, ${name}!` };",
            "    if (name === \"boom\") {\n      return { text: new Intl.DateTimeFormat().format(0) };\n    }\n    return { text: `Hello, ${name}!` };",
        );
        build(
            &dir,
            &[
                (
                    "COMPONENTIZE_JS",
                    tool(&devtools::COMPONENTIZE_JS)
                        .join("node_modules/@bytecodealliance/componentize-js/src/cli.js"),
                ),
                ("CODEMODE_HOST", PathBuf::from(host_bin())),
            ],
        );
        check_and_try(&dir, "my_tool");
        unforeseen(
            &dir,
            "my_tool",
            "capability failed: ReferenceError: Intl is not defined",
        );
    }

    /// Replaces the one `from` in the file at `path` with `to`.
    fn patch(path: &Path, from: &str, to: &str) {
        let text = std::fs::read_to_string(path).expect("read the generated file");
        assert_eq!(text.matches(from).count(), 1, "{from:?} in:\n{text}");
        std::fs::write(path, text.replace(from, to)).expect("write the generated file");
    }

    /// Calls `hello(name="boom")`, which fails in a way its author did not
    /// foresee: the agent reads `want`.
    fn unforeseen(dir: &Path, name: &str, want: &str) {
        let plugins = dir.join("plugins");
        let out = drive(
            &["--plugins", plugins.to_str().expect("utf-8 path")],
            json!([execute(&format!(
                "def main():\n    return {name}.hello(name=\"boom\")"
            ))]),
        );
        assert_eq!(err(&out["results"][0]), want);
    }
}

#[test]
fn check_shows_the_effect_hints_a_plugin_declares() {
    let granted = root().join("target/test-plugins/granted.wasm");
    let (code, out) = check(&[&granted]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out,
        "granted.wasm: 5 capabilities\n\
         \x20 granted.env(*, name: str) -> {value: str | None}\n    id: granted.env\n    Read an environment variable.\n\
         \x20 granted.config(*, key: str) -> {value: str | None}\n    id: granted.config\n    Read a config value.\n\
         \x20 granted.read(*, path: str) -> {value: str | None}\n    id: granted.read\n    annotations: readOnlyHint=true\n    Read a file.\n\
         \x20 granted.write(*, path: str, value: str) -> {value: str | None}\n    id: granted.write\n    annotations: readOnlyHint=false destructiveHint=true\n    Write a file.\n\
         \x20 granted.unprovided() -> {value: str | None}\n    id: granted.unprovided\n    Call an import no host provides.\n"
    );
}
