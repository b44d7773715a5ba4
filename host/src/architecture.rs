//! docs/architecture.md checked against the code, so that the document cannot drift:
//! its module table names exactly the crate's modules, and its "who imports whom"
//! table is exactly what the `use` lines say. The imports also keep their shape:
//! no cycle between the crate's modules, and no two files of one folder importing
//! each other.
//!
//! The imports are read from the source text (comments and `mod tests` left out):
//! `crate::x` in the library and in the binary's modules, `codemode_host::x` (the
//! library, from the binary), and the names the library's root re-exports
//! (`crate::Service` is `service`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where the crate's sources are.
fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The text of `path`, without comments and without its `mod tests`.
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    text.lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string (a URL) is rare in `use` lines; cutting there
            // only ever loses a path, and no import is written after a URL.
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module names a root file declares (`mod x;`, `pub mod x;`,
/// `pub(crate) mod x;`, an attribute before it on the same line or not).
fn declared(root: &str) -> BTreeSet<String> {
    root.lines()
        .filter_map(|line| {
            let mut line = line.trim();
            while let Some(rest) = line.strip_prefix("#[") {
                line = rest.split_once(']')?.1.trim();
            }
            let rest = ["pub mod ", "pub(crate) mod ", "mod "]
                .iter()
                .find_map(|prefix| line.strip_prefix(prefix))?;
            Some(rest.strip_suffix(';')?.trim().to_owned())
        })
        .collect()
}

/// Re-exported names of the library root: `Service` → `service`.
fn reexports(root: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for item in root.split(';') {
        let item = item.trim();
        let Some(rest) = item
            .strip_prefix("pub use ")
            .or_else(|| item.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let Some((module, list)) = rest.split_once("::") else {
            continue;
        };
        for name in list.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.split(" as ").last().unwrap_or_default().trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), module.trim().to_owned());
            }
        }
    }
    names
}

/// The first segment of every path under `prefix` (`crate::`, `codemode_host::`)
/// in `code`, a group `prefix{a, b::c}` giving each of its items.
fn roots_under(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut roots = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `my_crate::`, not `crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let mut items = Vec::new();
            let mut item = String::new();
            let mut item_depth = 0;
            for c in group[..end].chars() {
                match c {
                    '{' => item_depth += 1,
                    '}' => item_depth -= 1,
                    ',' if item_depth == 0 => {
                        items.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            items.push(item);
            for item in items {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    roots.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                roots.insert(name);
            }
        }
    }
    roots
}

/// Whether `code` holds `path` not as the end of a longer name (`cli::`, not
/// `my_cli::`).
fn mentions(code: &str, path: &str) -> bool {
    code.match_indices(path).any(|(at, _)| {
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The crate's module graph: for each module of the library and of the binary
/// (`main` included), the modules it imports.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = source_dir();
    let lib = code_of(&src.join("lib.rs"));
    let main = code_of(&src.join("main.rs"));
    let library = declared(&lib);
    let binary = declared(&main);
    let renamed = reexports(&lib);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&src) {
        let relative = file.strip_prefix(&src).unwrap_or(&file);
        let first = relative
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" {
            continue;
        }
        let code = code_of(&file);
        let in_binary = module == "main" || binary.contains(&module);
        if !in_binary && !library.contains(&module) {
            continue; // a file no root declares (none today)
        }
        let mut found = BTreeSet::new();
        for name in roots_under(&code, "crate::") {
            if in_binary || library.contains(&name) {
                found.insert(name);
            } else if let Some(module) = renamed.get(&name) {
                found.insert(module.clone());
            }
        }
        if module == "main" {
            // The binary's root names its own modules without `crate::`.
            for name in &binary {
                if mentions(&code, &format!("{name}::")) {
                    found.insert(name.clone());
                }
            }
        }
        if in_binary {
            for name in roots_under(&code, "codemode_host::") {
                match renamed.get(&name) {
                    Some(module) => found.insert(module.clone()),
                    None => found.insert(name),
                };
            }
        }
        found.remove(&module);
        graph.entry(module).or_default().extend(found);
    }
    graph
}

/// The rows of the table in `doc` that follows the line starting with `heading`:
/// each row's first cell (backquotes removed) and second.
fn table_after(doc: &str, heading: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut lines = doc.lines().skip_while(|line| !line.starts_with(heading));
    lines.next();
    for line in lines
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(first), Some(second)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        if first.starts_with("---") || *first == "module" || *first == "crate" {
            continue;
        }
        rows.push((first.replace('`', ""), second.to_string()));
    }
    rows
}

/// The "who imports whom" table as it must read.
fn imports_table(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    let mut out = String::from("| module | imports |\n|---|---|\n");
    for (module, imported) in graph {
        let list: Vec<String> = imported.iter().map(|m| format!("`{m}`")).collect();
        let list = if list.is_empty() {
            "nothing".to_owned()
        } else {
            list.join(", ")
        };
        out.push_str(&format!("| `{module}` | {list} |\n"));
    }
    out
}

/// Each cycle of `graph` found from each module, as the path around it.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            found.push(cycle);
            return;
        }
        if !done.insert(node.to_owned()) {
            return;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            visit(graph, next, path, done, found);
        }
        path.pop();
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(graph, node, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

/// For each folder module, the files of it each file imports (`super::x`,
/// `self::x` in `mod.rs`, `crate::folder::x`).
fn folder_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = src.to_owned();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&src) {
        let Ok(relative) = file.strip_prefix(&src) else {
            continue;
        };
        let parts: Vec<String> = relative
            .components()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_owned()
            })
            .collect();
        let [folder, me] = parts.as_slice() else {
            continue;
        };
        let siblings: BTreeSet<String> = rust_files(&src.join(folder))
            .iter()
            .filter_map(|f| Some(f.file_stem()?.to_string_lossy().into_owned()))
            .collect();
        let code = code_of(&file);
        // A name the folder's `mod.rs` re-exports stands for the file it is from.
        let renamed = reexports(&code_of(&src.join(folder).join("mod.rs")));
        let mut found = roots_under(&code, &format!("crate::{folder}::"));
        if me == "mod" {
            found.extend(roots_under(&code, "self::"));
        } else {
            found.extend(roots_under(&code, "super::"));
        }
        let found: BTreeSet<String> = found
            .into_iter()
            .map(|name| renamed.get(&name).cloned().unwrap_or(name))
            .collect();
        let node = format!("{folder}/{me}");
        let entry = graph.entry(node).or_default();
        for name in found {
            if siblings.contains(&name) && name != *me && name != "mod" {
                entry.insert(format!("{folder}/{name}"));
            }
        }
    }
    graph
}

#[test]
fn the_module_table_names_exactly_the_crate_s_modules() {
    let doc = std::fs::read_to_string(source_dir().join("../../docs/architecture.md"))
        .expect("docs/architecture.md");
    let listed: BTreeSet<String> = table_after(&doc, "| module | its one job |")
        .into_iter()
        .map(|(module, _)| {
            module
                .trim_end_matches(".rs")
                .trim_end_matches('/')
                .to_owned()
        })
        // The rows of the workspace's other crates.
        .filter(|module| {
            !matches!(
                module.as_str(),
                "host/runner/src" | "host/core/src" | "host/oci/src" | "wit-docs/src"
            )
        })
        .collect();
    let code: BTreeSet<String> = imports().into_keys().chain(["lib".to_owned()]).collect();
    assert_eq!(listed, code, "docs/architecture.md §2, the module table");
}

#[test]
fn who_imports_whom_is_what_the_code_says() {
    let doc = std::fs::read_to_string(source_dir().join("../../docs/architecture.md"))
        .expect("docs/architecture.md");
    let graph = imports();
    let documented: BTreeMap<String, String> = table_after(&doc, "**Who imports whom**")
        .into_iter()
        .collect();
    let expected: BTreeMap<String, String> = table_after(&imports_table(&graph), "")
        .into_iter()
        .collect();
    assert!(
        documented == expected,
        "docs/architecture.md §2, \"Who imports whom\", must read:\n\n{}",
        imports_table(&graph)
    );
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let found = cycles(&imports());
    assert!(found.is_empty(), "cycles between modules: {found:?}");
}

#[test]
fn no_two_files_of_one_folder_import_each_other() {
    // This crate's folders, and the core crate's (`catalog/`).
    for src in [source_dir(), source_dir().join("../core/src")] {
        let found = cycles(&folder_imports(&src));
        assert!(
            found.is_empty(),
            "cycles between the files of a folder of {}: {found:?}",
            src.display()
        );
    }
}

/// The workspace crates (`codemode-*`) each crate under `host/` depends on, from
/// its Cargo.toml's `[dependencies]`.
fn crate_graph() -> BTreeMap<String, BTreeSet<String>> {
    let host = source_dir().join("..");
    let mut graph = BTreeMap::new();
    for manifest in [
        host.join("Cargo.toml"),
        host.join("core/Cargo.toml"),
        host.join("oci/Cargo.toml"),
    ] {
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let parsed: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let name = parsed
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_owned();
        let deps: BTreeSet<String> = parsed
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|d| {
                d.keys()
                    .filter(|k| k.starts_with("codemode-"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        graph.insert(name, deps);
    }
    graph
}

#[test]
fn the_crate_table_is_what_the_manifests_say() {
    let doc = std::fs::read_to_string(source_dir().join("../../docs/architecture.md"))
        .expect("docs/architecture.md");
    let documented: BTreeMap<String, String> = table_after(&doc, "| crate | imports |")
        .into_iter()
        .collect();
    let graph = crate_graph();
    let expected: BTreeMap<String, String> = graph
        .iter()
        .map(|(name, deps)| {
            let list: Vec<String> = deps.iter().map(|d| format!("`{d}`")).collect();
            let list = if list.is_empty() {
                "nothing".to_owned()
            } else {
                list.join(", ")
            };
            (name.clone(), list)
        })
        .collect();
    assert_eq!(
        documented, expected,
        "docs/architecture.md §2, the crate table"
    );
    // The layers point one way: the core and the registry client know no other
    // crate of the host.
    assert!(
        graph["codemode-core"].iter().all(|d| d == "codemode-value"),
        "{graph:?}"
    );
    assert!(graph["codemode-oci"].is_empty(), "{graph:?}");
    assert!(cycles(&graph).is_empty(), "{graph:?}");
}

#[test]
fn imports_are_read_from_paths_groups_and_reexports() {
    let code = "use crate::{a, b::{C, d}, e as f};\nlet x = crate::g::h();\nmy_crate::i;";
    assert_eq!(
        roots_under(code, "crate::"),
        ["a", "b", "e", "g"].map(str::to_owned).into()
    );
    let root = "pub use service::{Service, ServiceConfig};\npub use error::ToolError;\npub(crate) use plan::Plan;";
    assert_eq!(reexports(root)["Plan"], "plan");
    assert_eq!(
        declared(
            "mod a;\npub mod b;\npub(crate) mod c;\n#[cfg(test)] mod d;\n#[cfg(test)]\nmod e;"
        ),
        ["a", "b", "c", "d", "e"].map(str::to_owned).into()
    );
    assert_eq!(reexports(root)["ServiceConfig"], "service");
    assert_eq!(reexports(root)["ToolError"], "error");
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), ["b".to_owned()].into()),
        ("b".to_owned(), ["a".to_owned()].into()),
    ]
    .into();
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "a"]]);
}
