//! `codemode-host new-plugin NAME --lang rust|python|js`: a plugin project that
//! builds, with one capability (`NAME.hello(*, name: str) -> {text: str}`), its
//! WIT, its metadata, a `build.sh` that puts the component into the project's
//! `plugins/` folder, and a README with the commands to build, check and try it.
//!
//! The templates are the constants of `rust.rs`, `python.rs` and `js.rs` (what
//! they share is `common.rs`'s); `{{name}}` is the capability root
//! (snake_case), `{{kebab}}` the same in WIT's kebab-case, and so on (see
//! [`Names`]). Rust projects take the SDK by path from the checkout this binary was
//! built from; Python and JavaScript ones get the plugin ABI's WIT copied in.

mod common;
mod js;
mod python;
mod rust;

use heck::{ToKebabCase, ToLowerCamelCase, ToUpperCamelCase};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::cli::Lang;
use common::{PLUGIN_WIT_MARK, PUBLISH_STEP, README_TRY, WIT_DOCS_STEP};
use js::JS;
use python::PYTHON;
use rust::RUST;

/// The plugin ABI, copied into Python and JavaScript projects.
const PLUGIN_WIT: &str = include_str!("../../../wit/plugin/plugin.wit");
/// The SDK of the checkout this binary was built from.
const SDK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");
/// The componentize-py the Python projects install.
const COMPONENTIZE_PY: &str = "0.25.1";
/// The componentize-js the JavaScript projects install.
const COMPONENTIZE_JS: &str = "0.23.0";

/// The spellings of a plugin's name the templates need.
struct Names {
    /// `my_tool`: the capability root and the Rust crate.
    name: String,
    /// `my-tool`: the WIT package and interface.
    kebab: String,
    /// `MyTool`: the Python class of the interface.
    pascal: String,
    /// `myTool`: the JavaScript object of the interface.
    camel: String,
}

impl Names {
    /// Checks `name` (a capability root whose `_`-separated words each start with a
    /// letter, as WIT's kebab-case needs) and spells it.
    fn new(name: &str) -> anyhow::Result<Self> {
        codemode_server::check_upstream_name(name).map_err(anyhow::Error::msg)?;
        let words: Vec<&str> = name.split('_').collect();
        let wit_words = words.iter().all(|word| {
            word.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
        if !wit_words {
            bail!(
                "`{name}` cannot name a plugin: use lowercase words of letters and digits, each starting with a letter, joined by `_` (e.g. `greet` or `my_tool`)"
            );
        }
        Ok(Self {
            name: name.to_owned(),
            kebab: name.to_kebab_case(),
            pascal: name.to_upper_camel_case(),
            camel: name.to_lower_camel_case(),
        })
    }

    /// `template` with every placeholder filled.
    fn fill(&self, template: &str, host: &str) -> String {
        template
            .replace("{{readme_try}}", README_TRY)
            .replace("{{publish}}", PUBLISH_STEP)
            .replace("{{wit_docs}}", WIT_DOCS_STEP)
            .replace("{{name}}", &self.name)
            .replace("{{kebab}}", &self.kebab)
            .replace("{{pascal}}", &self.pascal)
            .replace("{{camel}}", &self.camel)
            .replace("{{host}}", host)
            .replace("{{sdk}}", SDK_DIR)
            .replace("{{componentize_py}}", COMPONENTIZE_PY)
            .replace("{{componentize_js}}", COMPONENTIZE_JS)
    }
}

/// Writes the project and says what to do next.
///
/// # Errors
///
/// A name that cannot root capabilities, a folder that exists and is not empty, or
/// a file that cannot be written.
pub(crate) fn new_plugin(name: &str, lang: Lang, dir: Option<&Path>) -> anyhow::Result<()> {
    let names = Names::new(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if dir
        .read_dir()
        .is_ok_and(|mut entries| entries.next().is_some())
    {
        bail!(
            "`{}` exists and is not empty; name another folder with --dir",
            dir.display()
        );
    }
    let host = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.to_str().map(str::to_owned))
        .unwrap_or_else(|| "codemode-host".to_owned());
    let files = match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
        Lang::Js => JS,
    };
    for (path, template) in files {
        let path = dir.join(names.fill(path, &host));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let text = if *template == PLUGIN_WIT_MARK {
            PLUGIN_WIT.to_owned()
        } else {
            names.fill(template, &host)
        };
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let build = dir.join("build.sh");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", build.display()))?;
    }
    println!(
        "wrote {}: the plugin `{name}` with one capability, {name}.hello; build it with\n  cd {} && ./build.sh\nthen follow its README.md to check and try it",
        dir.display(),
        dir.display()
    );
    if lang == Lang::Rust && !Path::new(SDK_DIR).is_dir() {
        eprintln!(
            "note: its Cargo.toml takes codemode-sdk from {SDK_DIR}, the checkout this codemode-host was built from, which is not there: point that path at the sdk/ folder of a codemode-host checkout"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_spelled_for_each_language_and_bad_ones_refused() {
        let names = Names::new("my_tool2").expect("a good name");
        assert_eq!(
            (
                names.kebab.as_str(),
                names.pascal.as_str(),
                names.camel.as_str()
            ),
            ("my-tool2", "MyTool2", "myTool2")
        );
        assert_eq!(
            Names::new("tool_2").err().map(|e| e.to_string()).as_deref(),
            Some(
                "`tool_2` cannot name a plugin: use lowercase words of letters and digits, each starting with a letter, joined by `_` (e.g. `greet` or `my_tool`)"
            )
        );
        assert!(Names::new("json").is_err(), "a builtin cannot be a root");
        assert!(Names::new("Greet").is_err());
    }

    #[test]
    fn every_placeholder_is_filled() {
        let names = Names::new("greet").expect("a good name");
        for files in [RUST, PYTHON, JS] {
            for (path, template) in files {
                let text = names.fill(template, "/bin/codemode-host");
                assert!(!text.contains("{{"), "{path}: {text}");
            }
        }
    }
}
