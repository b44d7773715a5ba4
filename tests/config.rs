//! Where settings come from, end to end: a flag beats its `CODEMODE_<FLAG>` variable,
//! which beats the `--config` file, which beats the default. Each case starts the
//! real binary with a plugins folder that does not exist, whose path the error names.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::support::{host_bin, root};

/// Runs `codemode-host ARGS` with `env` added (and no CODEMODE_ variable of the
/// caller's), and returns its exit code and stderr.
fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = Command::new(host_bin());
    for (key, _) in std::env::vars() {
        if key.starts_with("CODEMODE_") {
            command.env_remove(key);
        }
    }
    let out = command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run codemode-host");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A config file in a fresh folder of the test; the folder is returned too.
fn config(label: &str, text: &str) -> (PathBuf, String) {
    let dir = root().join("target/e2e-config").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    let path = dir.join("codemode.toml");
    std::fs::write(&path, text).expect("write the config");
    (dir, path.display().to_string())
}

/// Variables added to a run's environment.
type Env<'a> = &'a [(&'a str, &'a str)];

fn missing_folder(path: &str) -> String {
    format!("plugins folder `{path}`: No such file or directory (os error 2)")
}

#[test]
fn a_flag_beats_its_variable_which_beats_the_file() {
    let (dir, path) = config("precedence", "plugins = \"from-file\"\n");
    let from_file = dir.join("from-file").display().to_string();
    let cases: [(&[&str], Env, &str); 4] = [
        (&["--config", &path], &[], &from_file),
        (&[], &[("CODEMODE_CONFIG", &path)], &from_file),
        (
            &["--config", &path],
            &[("CODEMODE_PLUGINS", "/nonexistent/from-env")],
            "/nonexistent/from-env",
        ),
        (
            &["--config", &path, "--plugins", "/nonexistent/from-flag"],
            &[("CODEMODE_PLUGINS", "/nonexistent/from-env")],
            "/nonexistent/from-flag",
        ),
    ];
    for (args, env, folder) in cases {
        let (code, log) = run(args, env);
        assert_eq!(code, Some(1), "{args:?} {env:?}: {log}");
        assert!(
            log.contains(&missing_folder(folder)),
            "{args:?} {env:?}: {log}"
        );
    }
}

#[test]
fn a_missing_plugins_folder_says_so_once_with_a_hint() {
    // From the checkout, whose target/plugins holds the examples.
    let from_checkout = |args: &[&str]| {
        let out = Command::new(host_bin())
            .current_dir(root())
            .env_remove("CODEMODE_PLUGINS")
            // The tests' cache, not the user's (the interpreter compiled once).
            .env("CODEMODE_CACHE_DIR", crate::support::cache_dir())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run codemode-host");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, log) = from_checkout(&["--plugins", "plugin"]);
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.ends_with(&format!(
            "ERROR codemode_host: {}; the example plugins are in target/plugins: --plugins target/plugins\n",
            missing_folder("plugin")
        )),
        "{log}"
    );
    // The default, `plugins`, is the folder of the examples' sources there.
    let (code, log) = from_checkout(&[]);
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains(
            "WARN codemode_sandbox::plugins::provider: no plugin loaded; serving no plugin capabilities folder=plugins reason=the folder holds sources (fetch/Cargo.toml) but no built components (*.wasm): build them and put the .wasm files here; in a checkout, `cargo xtask plugins` builds the examples into target/plugins\n"
        ),
        "{log}"
    );
    // Elsewhere: what to do instead.
    let (code, log) = run(&["--plugins", "/nonexistent/plugins"], &[]);
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.ends_with(&format!(
            "ERROR codemode_host: {}; create it, or name the folder with --plugins\n",
            missing_folder("/nonexistent/plugins")
        )),
        "{log}"
    );
}

#[test]
fn a_policy_without_the_decision_names_it_and_the_flag() {
    let (dir, _) = config("policy-package", "");
    let policy = dir.join("acme.rego");
    std::fs::write(&policy, "package acme.mcp\n\nallow if { true }\n").expect("write the policy");
    let (code, log) = run(
        &[
            "--plugins",
            "/nonexistent/plugins",
            "--policy",
            policy.to_str().expect("utf-8 path"),
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.ends_with(
            "ERROR codemode_host: rego: no rule defines the decision `data.codemode.authz.allow` (the modules' packages: data.acme.mcp); define it, or name the rule that decides with --policy-decision\n"
        ),
        "{log}"
    );
}

#[test]
fn a_bad_setting_stops_startup_naming_its_source() {
    let (_, path) = config("bad", "plugins = \"p\"\nmax-exec-time = \"5s\"\n");
    let (code, log) = run(&["--config", &path], &[]);
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.starts_with(&format!(
            "error: config file `{path}`, line 2: unknown key `max-exec-time` (did you mean `max-execution-time`?)"
        )),
        "{log}"
    );
    let (code, log) = run(&[], &[("CODEMODE_MAX_EXECUTION_TIME", "5")]);
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.starts_with(
            "error: invalid value '5' for CODEMODE_MAX_EXECUTION_TIME (the variable of --max-execution-time): `5` needs a unit: ms, s, m or h (e.g. 5s)"
        ),
        "{log}"
    );
    // A switch's variable takes a boolean, and says so in the same words.
    let (code, log) = run(&[], &[("CODEMODE_ALLOW_ALL", "maybe")]);
    assert_eq!(code, Some(2), "{log}");
    assert_eq!(
        log,
        "error: invalid value 'maybe' for CODEMODE_ALLOW_ALL (the variable of --allow-all): value was not a boolean\n"
    );
    // Typed on the command line, the flag is named as ever.
    let (code, log) = run(&["--max-execution-time", "5"], &[]);
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.starts_with(
            "error: invalid value '5' for '--max-execution-time <DURATION>': `5` needs a unit: ms, s, m or h (e.g. 5s)"
        ),
        "{log}"
    );
    let (code, log) = run(
        &["--plugins", "/nonexistent/switch"],
        &[("CODEMODE_NO_WATCH", "yes")],
    );
    assert_eq!(code, Some(1), "a switch's variable takes yes: {log}");
    assert!(
        log.contains(&missing_folder("/nonexistent/switch")),
        "{log}"
    );
}
