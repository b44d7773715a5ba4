//! `codemode-host precompile`: fills the artifact cache so the next start compiles
//! nothing, and reports plugins that cannot load.

use std::process::Command;

use crate::support::{cache_dir, example_plugin_files, host_bin, plugin_folder, startup_log};

fn precompile(plugins: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(host_bin())
        .args(["precompile", "--plugins"])
        .arg(plugins)
        .args(["--cache-dir", cache_dir()])
        .output()
        .expect("run codemode-host precompile");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn precompile_fills_the_cache_the_server_then_uses() {
    let plugins = plugin_folder("precompile", &example_plugin_files());
    let (code, _) = precompile(&plugins);
    assert_eq!(code, Some(0));
    // Everything is cached now: a second run compiles nothing.
    let (code, stdout) = precompile(&plugins);
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(
        stdout,
        format!(
            "interpreter: already cached\nrecords.wasm: already cached\nstats.wasm: already cached\ntext.wasm: already cached\ncache: {}\n",
            cache_dir()
        )
    );
    let (log, _) = startup_log(&["--plugins", plugins.to_str().expect("utf-8 path")]);
    let loaded: Vec<&String> = log.iter().filter(|l| l.contains("plugin loaded")).collect();
    assert_eq!(loaded.len(), 3, "{log:?}");
    assert!(loaded.iter().all(|l| l.contains("cached=true")), "{log:?}");
}

#[test]
fn precompile_reports_a_plugin_that_cannot_load() {
    let plugins = plugin_folder("precompile-broken", &[]);
    std::fs::write(plugins.join("broken.wasm"), b"not wasm").expect("write a broken plugin");
    let (code, stdout) = precompile(&plugins);
    assert_eq!(code, Some(1));
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("broken.wasm: cannot load: ")),
        "{stdout}"
    );
}
