//! `codemode-host precompile`: fills the artifact cache so the next start compiles
//! nothing, and reports plugins that cannot load.

use std::process::Command;

use crate::support::{cache_dir, example_plugin_files, host_bin, plugin_folder, root, startup_log};

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

#[cfg(unix)]
#[test]
fn a_cache_others_could_have_planted_is_never_trusted() {
    use std::os::unix::fs::PermissionsExt;
    let empty = plugin_folder("planted-cache-plugins", &[]);
    // A folder anyone can write to, holding a key someone else could have put there.
    let dir = root().join("target/test-cache/private/planted");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    std::fs::write(dir.join("cache.key"), [7u8; 32]).expect("plant a key");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let refusal = format!(
        "the cache folder {} has mode 777; it must not be writable by group or others",
        dir.display()
    );
    // precompile exists to fill the cache: it stops, naming the reason.
    let out = Command::new(host_bin())
        .args(["precompile", "--plugins"])
        .arg(&empty)
        .arg("--cache-dir")
        .arg(&dir)
        .output()
        .expect("run codemode-host precompile");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&refusal), "{stderr}");
    // A server goes on without the cache, and says so.
    let (lines, _) = startup_log(&[
        "--plugins",
        empty.to_str().expect("utf-8 path"),
        "--cache-dir",
        dir.to_str().expect("utf-8 path"),
    ]);
    assert!(
        lines.iter().any(
            |l| l.contains("cannot use the cache folder; compiling everything")
                && l.contains(&refusal)
        ),
        "{lines:#?}"
    );
    // Nothing was written into the folder.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("list the folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["cache.key"]);
}
