//! docs/architecture.md checked against the code, so that the document cannot drift:
//! its module table names exactly the crate's modules, and its "who imports whom"
//! table is exactly what the `use` lines say. The imports also keep their shape:
//! no cycle between the crate's modules, and no two files of one folder importing
//! each other.
//!
//! The imports are read from the source text (comments and `mod tests`, inline
//! or in a `tests.rs`, left out):
//! `crate::x` in the library and in the binary's modules, `codemode_server::x` (the
//! library, from the binary), and the names the library's root re-exports
//! (`crate::Service` is `service`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where the library's sources are (`host/server/src`).
fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Where the binary's sources are (`host/src`, the `codemode-host` package).
fn binary_dir() -> PathBuf {
    source_dir().join("../../src")
}

/// docs/architecture.md.
fn architecture_doc() -> String {
    std::fs::read_to_string(source_dir().join("../../../docs/architecture.md"))
        .expect("docs/architecture.md")
}

/// The text of `path`, without comments and without its `mod tests`.
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let text = &text[..test_module_start(&text).unwrap_or(text.len())];
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

/// Where `text`'s test module begins: the `#[cfg(test)]` (or `#[cfg(all(test,
/// ...))]`) line above a top-level `mod tests {`, other attributes and comments
/// between them allowed.
fn test_module_start(text: &str) -> Option<usize> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len() + 1;
            Some((start, line))
        })
        .collect();
    let index = lines
        .iter()
        .position(|(_, line)| line.starts_with("mod tests"))?;
    lines[..index]
        .iter()
        .rev()
        .take_while(|(_, line)| line.starts_with("#[") || line.starts_with("//"))
        .find(|(_, line)| line.starts_with("#[cfg(") && line.contains("test"))
        .map(|(start, _)| *start)
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
        let mut item = item.trim();
        // `#[doc(hidden)] pub use ...`: the attributes are not the item.
        while let Some(rest) = item.strip_prefix("#[") {
            item = rest
                .split_once(']')
                .map_or("", |(_, after)| after.trim_start());
        }
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

/// The first segment of every path under `prefix` (`crate::`, `codemode_server::`)
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

/// Every `.rs` file under `dir` but the tests' (`tests.rs`, a `mod tests` of
/// its own file: left out as an inline `mod tests` is).
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_none_or(|name| name != "tests.rs")
            {
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
    let (src, bin) = (source_dir(), binary_dir());
    let lib = code_of(&src.join("lib.rs"));
    let main = code_of(&bin.join("main.rs"));
    let library = declared(&lib);
    let binary = declared(&main);
    let renamed = reexports(&lib);
    // A re-exported name's module, followed through a root's re-export of a
    // module of another crate (`Compiler` is `plugins`'s, which is
    // `codemode_sandbox`'s): one name per place the code lives.
    let owner = |name: &str| -> Option<String> {
        let mut module = renamed.get(name)?.clone();
        while !library.contains(&module) {
            match renamed.get(&module) {
                Some(next) if *next != module => module = next.clone(),
                _ => break,
            }
        }
        Some(module)
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let files = rust_files(&src).into_iter().map(|file| (file, &src));
    let files = files.chain(rust_files(&bin).into_iter().map(|file| (file, &bin)));
    for (file, root) in files {
        let relative = file.strip_prefix(root).unwrap_or(&file);
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
            } else if let Some(module) = owner(&name) {
                found.insert(module);
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
            for name in roots_under(&code, "codemode_server::") {
                match owner(&name) {
                    Some(module) => found.insert(module),
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

/// The paths a `use` tree starting at `text` names, each as its segments
/// (`a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`), and how many bytes of
/// `text` it took.
fn use_tree(text: &str) -> (Vec<Vec<String>>, usize) {
    let skip = |text: &str, at: usize| at + text[at..].len() - text[at..].trim_start().len();
    let mut at = skip(text, 0);
    if text[at..].starts_with('{') {
        at += 1;
        let mut paths = Vec::new();
        loop {
            at = skip(text, at);
            if text[at..].starts_with('}') || at >= text.len() {
                return (paths, (at + 1).min(text.len()));
            }
            let (inner, used) = use_tree(&text[at..]);
            paths.extend(inner);
            at = skip(text, at + used);
            // An alias (`x as y`) names nothing more.
            if let Some(rest) = text[at..].strip_prefix("as ") {
                let alias = rest.trim_start();
                let name = alias
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(alias.len());
                at = skip(text, text.len() - alias.len() + name);
            }
            match text[at..].chars().next() {
                Some(',') => at += 1,
                Some('}') => return (paths, at + 1),
                _ => return (paths, at),
            }
        }
    }
    // A glob names every item of the module it is under: that module.
    if text[at..].starts_with('*') {
        return (vec![Vec::new()], at + 1);
    }
    let name: String = text[at..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() {
        return (Vec::new(), at);
    }
    at += name.len();
    match text[at..].strip_prefix("::") {
        Some(rest) => {
            let (inner, used) = use_tree(rest);
            let inner = if inner.is_empty() {
                vec![Vec::new()]
            } else {
                inner
            };
            let paths = inner
                .into_iter()
                .map(|path| std::iter::once(name.clone()).chain(path).collect())
                .collect();
            (paths, at + 2 + used)
        }
        None => (vec![vec![name]], at),
    }
}

/// Every path under `prefix` (`crate::`, `super::`) in `code`, as its segments
/// after the prefix, a group giving each of its items.
fn paths_under(code: &str, prefix: &str) -> Vec<Vec<String>> {
    paths_at(code, prefix)
        .into_iter()
        .map(|(_, path)| path)
        .collect()
}

/// [`paths_under`], each path with the byte offset where it is written.
fn paths_at(code: &str, prefix: &str) -> Vec<(usize, Vec<String>)> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `my_crate::` or `a::super::`, not `crate::` / `super::`
        }
        let found = use_tree(&code[at + prefix.len()..]).0;
        paths.extend(found.into_iter().map(|path| (at, path)));
    }
    paths
}

/// The byte ranges of the inline modules of `code` (`mod linux { ... }`), where
/// `super::` is the file's own module.
fn inline_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &code[at + 4..];
        let name_end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if !rest[name_end..].trim_start().starts_with('{') {
            continue; // `mod x;`
        }
        let open = at + 4 + name_end + rest[name_end..].find('{').unwrap_or(0);
        let mut depth = 0;
        for (i, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        ranges.push(open..open + i);
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    ranges
}

/// A file's module path from the crate root: `execute/dispatch.rs` is
/// `["execute", "dispatch"]`, `execute/mod.rs` is `["execute"]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// The module graph inside the crate at `src`, file by file: for each module path
/// (a file, or a folder standing for its `mod.rs`), the module paths it imports
/// (`crate::a::b`, `super::x`, `self::x`, a folder's `mod.rs` naming a child
/// `child::x`); a name a folder's `mod.rs` re-exports stands for the file it is from.
fn file_imports(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = rust_files(src);
    let known: BTreeSet<Vec<String>> = files
        .iter()
        .filter_map(|file| Some(module_path(file.strip_prefix(src).ok()?)))
        .collect();
    let folders: BTreeMap<Vec<String>, BTreeMap<String, String>> = files
        .iter()
        .filter(|file| file.file_name().is_some_and(|n| n == "mod.rs"))
        .filter_map(|file| {
            let module = module_path(file.strip_prefix(src).ok()?);
            Some((module, reexports(&code_of(file))))
        })
        .collect();
    // The longest known module a path starts with, a folder's re-export followed.
    let resolve = |path: &[String]| -> Option<Vec<String>> {
        let length = (1..=path.len())
            .rev()
            .find(|n| known.contains(&path[..*n]))?;
        let mut module = path[..length].to_vec();
        if let (Some(renamed), Some(next)) = (folders.get(&module), path.get(length))
            && let Some(child) = renamed.get(next)
            && known.contains(&[module.clone(), vec![child.clone()]].concat())
        {
            module.push(child.clone());
        }
        Some(module)
    };
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &files {
        let Ok(relative) = file.strip_prefix(src) else {
            continue;
        };
        let me = module_path(relative);
        let is_folder = relative.file_name().is_some_and(|n| n == "mod.rs");
        let code = code_of(file);
        let mut found: Vec<Vec<String>> = paths_under(&code, "crate::");
        let parent: Vec<String> = if is_folder {
            me.clone()
        } else {
            me[..me.len().saturating_sub(1)].to_vec()
        };
        let above = parent[..parent.len().saturating_sub(1)].to_vec();
        let inline = inline_modules(&code);
        for (at, path) in paths_at(&code, "super::") {
            // `super::super::x`: one folder up for each further `super`; in an
            // inline module, the first `super` is the file itself.
            let mut base = if inline.iter().any(|range| range.contains(&at)) {
                me.clone()
            } else if is_folder {
                above.clone()
            } else {
                parent.clone()
            };
            let ups = path.iter().take_while(|s| *s == "super").count();
            base.truncate(base.len().saturating_sub(ups));
            found.push([base, path[ups..].to_vec()].concat());
        }
        for path in paths_under(&code, "self::") {
            found.push([me.clone(), path].concat());
        }
        // A folder's `mod.rs`, or a file beside a folder of its name (`oauth.rs`
        // and `oauth/`), names its children by bare paths too.
        let has_children = is_folder || file.with_extension("").is_dir();
        if has_children {
            for module in &known {
                if module.len() == me.len() + 1 && module.starts_with(&me) {
                    let child = &module[me.len()];
                    for path in paths_under(&code, &format!("{child}::")) {
                        found.push([module.clone(), path].concat());
                    }
                }
            }
        }
        let entry = graph.entry(me.clone()).or_default();
        for path in found {
            if let Some(target) = resolve(&path)
                && target != me
            {
                entry.insert(target);
            }
        }
        // A folder's `mod.rs` does not import its own files by declaring them.
    }
    graph
}

/// For each folder of the crate at `src`, the graph between its files and
/// subfolders (`folder/mod` for its `mod.rs`): an arrow from one to another when a
/// module in the first imports one in the second.
fn folder_graphs(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let graph = file_imports(src);
    let node = |folder: &[String], module: &[String]| -> Option<String> {
        if !module.starts_with(folder) {
            return None;
        }
        Some(match module.get(folder.len()) {
            Some(child) => format!("{}/{child}", folder.join("/")),
            None => format!("{}/mod", folder.join("/")),
        })
    };
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in rust_files(src) {
        let Ok(relative) = file.strip_prefix(src) else {
            continue;
        };
        // Each folder once: from its `mod.rs`, or its first file when the folder
        // is the companion of a file (`authz/oauth.rs` and `authz/oauth/`).
        let folder = module_path(
            relative
                .parent()
                .unwrap_or(Path::new(""))
                .join("mod.rs")
                .as_path(),
        );
        if !folder.is_empty() && !folders.contains_key(&folder.join("/")) {
            let mut inner: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (from, targets) in &graph {
                let Some(from) = node(&folder, from) else {
                    continue;
                };
                let entry = inner.entry(from.clone()).or_default();
                for target in targets {
                    if let Some(to) = node(&folder, target)
                        && to != from
                    {
                        entry.insert(to);
                    }
                }
            }
            folders.insert(folder.join("/"), inner);
        }
    }
    folders
}

#[test]
fn the_module_table_names_exactly_the_crate_s_modules() {
    let doc = architecture_doc();
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
                "host/runner/src"
                    | "host/core/src"
                    | "host/oci/src"
                    | "host/runtime/src"
                    | "host/gateway/src"
                    | "host/sandbox/src"
                    | "wit-docs/src"
            )
        })
        .collect();
    let code: BTreeSet<String> = imports().into_keys().chain(["lib".to_owned()]).collect();
    assert_eq!(listed, code, "docs/architecture.md §2, the module table");
}

#[test]
fn who_imports_whom_is_what_the_code_says() {
    let doc = architecture_doc();
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

/// The crates under `host/` besides this one whose modules are checked, each
/// with a module it must have (so a moved folder cannot pass unread).
const OTHER_CRATES: [(&str, &str); 4] = [
    ("../../core/src", "source"),
    ("../../runtime/src", "wait"),
    ("../../gateway/src", "upstream"),
    ("../../sandbox/src", "plugins"),
];

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let found = cycles(&imports());
    assert!(found.is_empty(), "cycles between modules: {found:?}");
    // The other crates' modules, from their files' imports.
    for (src, a_module) in OTHER_CRATES {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, targets) in file_imports(&source_dir().join(src)) {
            let Some(from) = from.first().cloned() else {
                continue;
            };
            let imported = graph.entry(from.clone()).or_default();
            imported.extend(
                targets
                    .iter()
                    .filter_map(|target| target.first().cloned())
                    .filter(|target| *target != from),
            );
        }
        assert!(graph.contains_key(a_module), "{src}: {graph:?}");
        let found = cycles(&graph);
        assert!(
            found.is_empty(),
            "cycles between the modules of {src}: {found:?}"
        );
    }
}

#[test]
fn no_two_files_of_one_folder_import_each_other() {
    // This crate's folders at every depth, `mod.rs` included (a file importing
    // what its folder's `mod.rs` defines while `mod.rs` imports it is a cycle),
    // and the other crates' (`catalog/`, `upstream/`, `openapi/`, ...).
    let mut found = Vec::new();
    let others = OTHER_CRATES.map(|(src, _)| source_dir().join(src));
    for src in [source_dir(), binary_dir()].into_iter().chain(others) {
        for (folder, graph) in folder_graphs(&src) {
            for cycle in cycles(&graph) {
                found.push(format!("{}: {}", folder, cycle.join(" -> ")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cycles between the files of a folder:\n{}",
        found.join("\n")
    );
}

/// The workspace crates (`codemode-*`) each crate under `host/` depends on, from
/// its Cargo.toml's `[dependencies]`.
fn crate_graph() -> BTreeMap<String, BTreeSet<String>> {
    let host = source_dir().join("../..");
    let mut graph = BTreeMap::new();
    for manifest in [
        host.join("Cargo.toml"),
        host.join("server/Cargo.toml"),
        host.join("core/Cargo.toml"),
        host.join("oci/Cargo.toml"),
        host.join("runtime/Cargo.toml"),
        host.join("gateway/Cargo.toml"),
        host.join("sandbox/Cargo.toml"),
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
    let doc = architecture_doc();
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
    // crate of the host, the runtime only the core, the gateway and the sandbox
    // only those two and the leaves (neither knows the other).
    let only = |name: &str, allowed: &[&str]| {
        assert!(
            graph[name].iter().all(|d| allowed.contains(&d.as_str())),
            "{name} may import only {allowed:?}: {graph:?}"
        );
    };
    only("codemode-core", &["codemode-value"]);
    only("codemode-oci", &[]);
    only("codemode-runtime", &["codemode-core"]);
    only(
        "codemode-gateway",
        &["codemode-core", "codemode-runtime", "codemode-value"],
    );
    only(
        "codemode-sandbox",
        &[
            "codemode-core",
            "codemode-runtime",
            "codemode-oci",
            "codemode-value",
            "codemode-wit-docs",
        ],
    );
    // The server builds on every layer below it; the binary knows the server
    // (and the registry client and the WIT docs, for its commands beside
    // serving), never a layer under the server directly.
    only(
        "codemode-server",
        &[
            "codemode-core",
            "codemode-runtime",
            "codemode-gateway",
            "codemode-sandbox",
            "codemode-oci",
            "codemode-value",
            "codemode-wit-docs",
        ],
    );
    only(
        "codemode-host",
        &["codemode-server", "codemode-oci", "codemode-wit-docs"],
    );
    assert!(cycles(&graph).is_empty(), "{graph:?}");
}

#[test]
fn imports_are_read_from_paths_groups_and_reexports() {
    let code = "use crate::{a, b::{C, d}, e as f};\nlet x = crate::g::h();\nmy_crate::i;";
    assert_eq!(
        roots_under(code, "crate::"),
        ["a", "b", "e", "g"].map(str::to_owned).into()
    );
    let root = "pub use service::{Service, ServiceConfig};\npub use error::ToolError;\npub(crate) use plan::Plan;\n#[doc(hidden)]\npub use probe::Probe;";
    assert_eq!(reexports(root)["Plan"], "plan");
    assert_eq!(reexports(root)["Probe"], "probe");
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

#[test]
fn a_file_importing_what_its_folder_s_mod_rs_defines_is_a_cycle() {
    let src = std::env::temp_dir().join(format!("codemode-architecture-{}", std::process::id()));
    let folder = src.join("execute");
    std::fs::create_dir_all(folder.join("deep")).expect("temporary folder");
    let files = [
        // mod.rs uses its children; one uses what mod.rs defines, another takes
        // all of it with a glob.
        (
            "execute/mod.rs",
            "mod dispatch;\nmod deep;\nmod glob;\nuse dispatch::call;\nuse glob::g;\npub struct ExecState;\n",
        ),
        (
            "execute/dispatch.rs",
            "use super::ExecState;\npub fn call() {}\n",
        ),
        ("execute/glob.rs", "use super::*;\npub fn g() {}\n"),
        // Two levels down, `super::super::` reaches the same `mod.rs`; an inline
        // module's `super::` is its own file, its `super::super::` the folder.
        (
            "execute/deep/mod.rs",
            "mod leaf;\n#[doc(hidden)]\npub use leaf::Leaf;\npub struct Deep;\n",
        ),
        (
            "execute/deep/leaf.rs",
            "use super::super::ExecState;\npub struct Leaf;\nmod inner {\n    use super::Leaf;\n    use super::super::Deep;\n}\n",
        ),
    ];
    for (path, text) in files {
        std::fs::write(src.join(path), text).expect("temporary file");
    }
    let graphs = folder_graphs(&src);
    std::fs::remove_dir_all(&src).expect("temporary folder removed");
    let execute = &graphs["execute"];
    assert_eq!(
        execute["execute/dispatch"],
        ["execute/mod".to_owned()].into()
    );
    assert_eq!(execute["execute/glob"], ["execute/mod".to_owned()].into());
    assert_eq!(execute["execute/deep"], ["execute/mod".to_owned()].into());
    assert!(!cycles(execute).is_empty(), "{execute:?}");
    // The inline module's `super::super::Deep` is `deep/mod.rs`, which names the
    // file: a cycle; its `super::Leaf` is the file itself.
    assert_eq!(
        graphs["execute/deep"]["execute/deep/leaf"],
        ["execute/deep/mod".to_owned()].into()
    );
    assert_eq!(
        cycles(&graphs["execute/deep"]),
        vec![vec![
            "execute/deep/leaf",
            "execute/deep/mod",
            "execute/deep/leaf"
        ]]
    );
    assert_eq!(
        use_tree("a::{b, c::{d, e as f}, self}").0,
        vec![
            vec!["a", "b"],
            vec!["a", "c", "d"],
            vec!["a", "c", "e"],
            vec!["a", "self"]
        ]
    );
}
