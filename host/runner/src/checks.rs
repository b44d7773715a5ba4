//! Checks a program must pass before it runs, and the rendering of Starlark errors as
//! `<codemode>:line:col: message`.
//!
//! starlark-rust has no switch against recursion and parses recursively; the seed's
//! dialect forbids recursion and a deeply nested program must fail cleanly. So: a
//! bracket-depth pre-scan before parsing, a depth check over the syntax tree after
//! parsing (before anything walks it recursively), a call-graph check over the `def`s
//! (and lambdas bound to names), and a small call-stack limit at run time for what a
//! static check cannot see.

use std::collections::{BTreeMap, BTreeSet};

use starlark::environment::Globals;
use starlark::syntax::AstModule;
use starlark_syntax::codemap::Span;
use starlark_syntax::syntax::ast::{
    AssignTargetP, AstExpr, AstNoPayload, AstStmt, ExprP, ParameterP, StmtP,
};
use starlark_syntax::syntax::uniplate::Visit;

use crate::{FILE_NAME, RunError};

/// Brackets may nest this deep; deeper source is refused before the parser sees it.
pub(crate) const MAX_NESTING: usize = 100;

/// Refuses source whose brackets nest deeper than [`MAX_NESTING`], naming the position
/// of the first bracket too deep. Strings and comments are skipped.
pub(crate) fn nesting(source: &str) -> Result<(), RunError> {
    let bytes = source.as_bytes();
    let (mut depth, mut i, mut line, mut line_start) = (0usize, 0usize, 1usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                line += 1;
                line_start = i + 1;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            quote @ (b'"' | b'\'') => {
                let triple = bytes.get(i..i + 3) == Some(&[quote, quote, quote][..]);
                i += if triple { 3 } else { 1 };
                while i < bytes.len() {
                    if bytes[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if bytes[i] == b'\n' {
                        line += 1;
                        line_start = i + 1;
                    }
                    if bytes[i] == quote
                        && (!triple || bytes.get(i..i + 3) == Some(&[quote, quote, quote][..]))
                    {
                        i += if triple { 3 } else { 1 };
                        break;
                    }
                    i += 1;
                }
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    let col = source[line_start..i].chars().count() + 1;
                    return Err(RunError::Invalid(format!(
                        "{FILE_NAME}:{line}:{col}: brackets nest deeper than {MAX_NESTING} levels"
                    )));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Statements and expressions may nest this deep. starlark-rust compiles a program
/// recursively, about 7 KiB of the interpreter's 8 MiB stack per level, so a chain
/// of operators without brackets (`-----x`, `1 + 1 + ... + 1`) ran out of stack
/// past about 1,100 levels, which the host could only report as memory.
pub(crate) const MAX_DEPTH: usize = 200;

/// Refuses a syntax tree deeper than [`MAX_DEPTH`], at the first node too deep in
/// source order. The walk keeps its own stack: the tree being checked is the one
/// too deep to recurse over.
pub(crate) fn depth(ast: &AstModule) -> Result<(), RunError> {
    let mut pending = vec![(Visit::<AstNoPayload>::Stmt(ast.statement()), 0usize)];
    let mut children = Vec::new();
    while let Some((node, level)) = pending.pop() {
        if level > MAX_DEPTH {
            let span = match node {
                Visit::Stmt(stmt) => stmt.span,
                Visit::Expr(expr) => expr.span,
            };
            return Err(at(
                ast,
                span,
                format!("statements and expressions nest deeper than {MAX_DEPTH} levels"),
            ));
        }
        node.visit_children(|child| children.push((child, level + 1)));
        // Reversed, so that the first child is the next one visited.
        pending.extend(children.drain(..).rev());
    }
    Ok(())
}

/// `<codemode>:line:col: message` for a parse error (1-based line and column, as
/// the seed shows them), or `<codemode>: message` without a position.
pub(crate) fn diagnostic(error: &starlark::Error) -> String {
    let message = message(error);
    match position(error) {
        Some((line, column)) => format!("{FILE_NAME}:{line}:{column}: {message}"),
        None => format!("{FILE_NAME}: {message}"),
    }
}

/// What follows `invalid program: ` when the program failed while it ran (a
/// missing key, a division by zero), rather than a check before it ran: the
/// agent reads that it ran, and where it failed.
pub(crate) const RUNTIME_ERROR: &str = "runtime error";

/// `runtime error at <codemode>:line:col: message` for an error raised while
/// the program ran, or `runtime error: message` without a position.
pub(crate) fn runtime_diagnostic(error: &starlark::Error) -> String {
    let message = message(error);
    match position(error) {
        Some((line, column)) => {
            format!("{RUNTIME_ERROR} at {FILE_NAME}:{line}:{column}: {message}")
        }
        None => format!("{RUNTIME_ERROR}: {message}"),
    }
}

/// The message of `error` on one line, with a suggestion where one helps.
fn message(error: &starlark::Error) -> String {
    let text = error.without_diagnostic().to_string();
    // anyhow-style chains print as `outer\n\nCaused by:\n    inner`: one line here.
    let message = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && *line != "Caused by:")
        .map(|line| line.strip_prefix("error: ").unwrap_or(line))
        .collect::<Vec<_>>()
        .join(": ");
    if message.is_empty() {
        "error".to_owned()
    } else {
        with_suggestion(message)
    }
}

/// Where `error` was raised in the program (1-based line and column): its own span,
/// or else the innermost frame of its call stack with a location.
fn position(error: &starlark::Error) -> Option<crate::capability::Position> {
    let span = error.span().map(|span| span.resolve_span()).or_else(|| {
        error
            .call_stack()
            .frames
            .iter()
            .rev()
            .find_map(|frame| frame.location.as_ref().map(|l| l.resolve_span()))
    })?;
    let line = u32::try_from(span.begin.line + 1).ok()?;
    let column = u32::try_from(span.begin.column + 1).ok()?;
    Some((line, column))
}

/// Appends the nearest capability names to starlark-rust's "Variable `x` not found"
/// when it has no hint of its own: an unknown root is usually a misspelt capability.
fn with_suggestion(message: String) -> String {
    let Some(name) = message
        .strip_prefix("Variable `")
        .and_then(|rest| rest.strip_suffix("` not found"))
    else {
        return message;
    };
    let names = crate::bindings::codemode::runner::host::suggest(name);
    if names.is_empty() {
        message
    } else {
        format!("{message}; did you mean {}?", names.join(" or "))
    }
}

/// Classifies an error raised while the program ran: a native call's own failure or
/// budget wins over the text Starlark wrapped around it.
pub(crate) fn runtime_error(error: &starlark::Error) -> RunError {
    match crate::capability::native_outcome() {
        Some(outcome) => {
            // The error unwinding from a failed native call is raised at the call.
            crate::capability::failed_at(position(error));
            outcome
        }
        // Names and syntax are checked as the module compiles, before anything
        // ran; everything else was raised while the program ran.
        None => match error.kind() {
            starlark::ErrorKind::Scope(_) | starlark::ErrorKind::Parser(_) => {
                RunError::Invalid(diagnostic(error))
            }
            _ => RunError::Invalid(runtime_diagnostic(error)),
        },
    }
}

fn at(ast: &AstModule, span: Span, message: String) -> RunError {
    let pos = ast.file_span(span).resolve_span();
    RunError::Invalid(format!(
        "{FILE_NAME}:{}:{}: {message}",
        pos.begin.line + 1,
        pos.begin.column + 1
    ))
}

/// Requires a top-level `def main():` with no parameters, when `main` is a `def`.
/// (A missing `main`, or one that is not a function, is reported after loading.)
pub(crate) fn main_signature(ast: &AstModule) -> Result<(), RunError> {
    let mut found = Ok(());
    top_level(ast.statement(), &mut |stmt| {
        if let StmtP::Def(def) = &stmt.node
            && def.name.node.ident == "main"
            && !def.params.is_empty()
        {
            found = Err(at(
                ast,
                def.name.span,
                "main must take no parameters: define `def main():`".into(),
            ));
        }
    });
    found
}

fn top_level<'a>(stmt: &'a AstStmt, f: &mut impl FnMut(&'a AstStmt)) {
    match &stmt.node {
        StmtP::Statements(stmts) => stmts.iter().for_each(|s| top_level(s, f)),
        _ => f(stmt),
    }
}

/// A function the call graph knows: where it is defined and the names it calls.
struct Function {
    span: Span,
    calls: BTreeSet<String>,
}

/// Rejects direct and mutual recursion among `def`s and lambdas bound to names: the
/// first cycle found (in name order) is reported at the definition it starts from.
pub(crate) fn no_recursion(ast: &AstModule) -> Result<(), RunError> {
    let mut functions: BTreeMap<String, Function> = BTreeMap::new();
    collect_functions(ast.statement(), &mut functions);
    for start in functions.keys() {
        let mut path = vec![start.clone()];
        if let Some(cycle) = find_cycle(&functions, start, &mut path, &mut BTreeSet::new()) {
            let span = functions[start].span;
            let message = if cycle.len() == 2 {
                format!("`{start}` calls itself; recursion is not allowed")
            } else {
                format!(
                    "recursion is not allowed: {}",
                    cycle
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(" calls ")
                )
            };
            return Err(at(ast, span, message));
        }
    }
    Ok(())
}

fn find_cycle(
    functions: &BTreeMap<String, Function>,
    start: &str,
    path: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    let current = path.last()?.clone();
    for callee in &functions.get(&current)?.calls {
        if callee == start {
            let mut cycle = path.clone();
            cycle.push(start.to_owned());
            return Some(cycle);
        }
        if functions.contains_key(callee) && seen.insert(callee.clone()) {
            path.push(callee.clone());
            if let Some(cycle) = find_cycle(functions, start, path, seen) {
                return Some(cycle);
            }
            path.pop();
        }
    }
    None
}

fn collect_functions(stmt: &AstStmt, functions: &mut BTreeMap<String, Function>) {
    match &stmt.node {
        StmtP::Def(def) => {
            let mut calls = BTreeSet::new();
            Visit::<AstNoPayload>::Stmt(&def.body).visit_children(|v| called_names(v, &mut calls));
            for param in &def.params {
                if let ParameterP::Normal(_, _, Some(default)) = &param.node {
                    calls_in_expr(default, &mut calls);
                }
            }
            functions
                .entry(def.name.node.ident.clone())
                .or_insert(Function {
                    span: def.name.span,
                    calls: BTreeSet::new(),
                })
                .calls
                .extend(calls);
        }
        StmtP::Assign(assign) => {
            if let (AssignTargetP::Identifier(name), ExprP::Lambda(lambda)) =
                (&assign.lhs.node, &assign.rhs.node)
            {
                let mut calls = BTreeSet::new();
                calls_in_expr(&lambda.body, &mut calls);
                functions
                    .entry(name.node.ident.clone())
                    .or_insert(Function {
                        span: name.span,
                        calls: BTreeSet::new(),
                    })
                    .calls
                    .extend(calls);
            }
        }
        _ => {}
    }
    stmt.visit_stmt(|child| collect_functions(child, functions));
}

fn called_names(visit: Visit<'_, AstNoPayload>, calls: &mut BTreeSet<String>) {
    match visit {
        Visit::Expr(expr) => calls_in_expr(expr, calls),
        Visit::Stmt(stmt) => {
            Visit::<AstNoPayload>::Stmt(stmt).visit_children(|v| called_names(v, calls))
        }
    }
}

fn calls_in_expr(expr: &AstExpr, calls: &mut BTreeSet<String>) {
    if let ExprP::Call(callee, _) = &expr.node
        && let ExprP::Identifier(name) = &callee.node
    {
        calls.insert(name.node.ident.clone());
    }
    expr.visit_expr(|child| calls_in_expr(child, calls));
}

/// Identifiers the program uses that are neither builtins nor assigned anywhere in
/// it: the candidates for capability roots, for the host to resolve.
pub(crate) fn free_identifiers(ast: &AstModule, globals: &Globals) -> Vec<String> {
    let mut used = BTreeSet::new();
    Visit::<AstNoPayload>::Stmt(ast.statement()).visit_children(|v| identifiers(v, &mut used));
    let builtins: BTreeSet<String> = globals.names().map(|n| n.as_str().to_owned()).collect();
    used.into_iter()
        .filter(|name| !builtins.contains(name))
        .collect()
}

fn identifiers(visit: Visit<'_, AstNoPayload>, used: &mut BTreeSet<String>) {
    match visit {
        Visit::Expr(expr) => {
            if let ExprP::Identifier(name) = &expr.node {
                used.insert(name.node.ident.clone());
            }
            expr.visit_expr(|child| identifiers(Visit::Expr(child), used));
        }
        Visit::Stmt(stmt) => {
            Visit::<AstNoPayload>::Stmt(stmt).visit_children(|v| identifiers(v, used))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message `source` fails with when run natively. A program naming
    /// anything but builtins asks the host for its capabilities, which a
    /// native test has not: these programs name no variable.
    fn failure(source: &str) -> String {
        let limits = crate::Limits {
            max_steps: 10_000,
            max_value_depth: 32,
            max_value_bytes: 1 << 20,
        };
        match crate::run_program(source, &limits).0 {
            Err(RunError::Invalid(message)) => message,
            other => panic!("{source:?}: expected an invalid program, got {other:?}"),
        }
    }

    #[test]
    fn a_failure_while_the_program_runs_says_it_ran_and_where() {
        assert_eq!(RUNTIME_ERROR, "runtime error");
        assert_eq!(
            failure("def main():\n    return {}[\"text\"]"),
            "runtime error at <codemode>:2:12: Key `\"text\"` was not found"
        );
        assert_eq!(
            failure("def main():\n    return 1 // 0"),
            "runtime error at <codemode>:2:12: Floor division by zero: 1 // 0"
        );
        assert_eq!(
            failure("def main():\n    fail(\"boom\")"),
            "runtime error at <codemode>:2:5: fail: boom"
        );
        // Checked before anything ran.
        let syntax = failure("def main(:\n    return 1");
        assert!(!syntax.contains(RUNTIME_ERROR), "{syntax}");
    }

    fn parse(source: &str) -> AstModule {
        match AstModule::parse(FILE_NAME, source.to_owned(), &crate::dialect()) {
            Ok(ast) => ast,
            Err(error) => panic!("{source:?} does not parse: {error}"),
        }
    }

    /// The message of a refused program.
    fn refused(result: Result<(), RunError>) -> String {
        match result {
            Err(RunError::Invalid(message)) => message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn brackets_nest_at_most_100_deep_and_the_first_too_deep_is_named() {
        let at_limit = format!("x = {}1{}", "[".repeat(100), "]".repeat(100));
        assert!(nesting(&at_limit).is_ok());
        let deep = format!("x = {}1{}", "(".repeat(101), ")".repeat(101));
        assert_eq!(
            refused(nesting(&deep)),
            "<codemode>:1:105: brackets nest deeper than 100 levels"
        );
        let second_line = format!("x = 1\ny = {}", "{".repeat(101));
        assert_eq!(
            refused(nesting(&second_line)),
            "<codemode>:2:105: brackets nest deeper than 100 levels"
        );
        // Closed brackets free their level: 100 open, closed, 100 open again.
        let siblings = format!("x = {0}{1} + {0}{1}", "[".repeat(100), "]".repeat(100));
        assert!(nesting(&siblings).is_ok());
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let deep = "(".repeat(200);
        for source in [
            format!("x = '{deep}'"),
            format!("x = \"{deep}\""),
            format!("x = '''\n{deep}\n'''"),
            format!("x = \"it\\\"s {deep}\""),
            format!("# {deep}\nx = 1"),
        ] {
            assert!(nesting(&source).is_ok(), "{source}");
        }
        // A string that ends on its line: the brackets after it count again.
        let after = format!("x = ')' + {}1{}", "(".repeat(101), ")".repeat(101));
        assert_eq!(
            refused(nesting(&after)),
            "<codemode>:1:111: brackets nest deeper than 100 levels"
        );
    }

    #[test]
    fn the_tree_nests_at_most_200_deep_and_the_first_node_too_deep_is_named() {
        // The def (level 0, the module's only statement) and the return are two
        // levels above the expression: `n` signs and the literal reach level 2 + n.
        let chain = |n: usize| format!("def main():\n    return {}1\n", "-".repeat(n));
        assert!(depth(&parse(&chain(198))).is_ok());
        assert_eq!(
            refused(depth(&parse(&chain(199)))),
            "<codemode>:2:211: statements and expressions nest deeper than 200 levels"
        );
        // Siblings do not add up: a long list and a long sum of bracketed terms.
        let wide = format!(
            "x = [{}]\ny = {}",
            "1, ".repeat(5000),
            "(1) + ".repeat(150) + "1"
        );
        assert!(depth(&parse(&wide)).is_ok());
        // Far past the limit, the walk itself stays off the stack. (Not much
        // farther: starlark-rust's parser recurses too, and a test thread has a
        // 2 MiB stack.)
        let far = parse(&format!("x = {}\n", vec!["1"; 2_000].join(" + ")));
        assert_eq!(
            refused(depth(&far)),
            "<codemode>:1:5: statements and expressions nest deeper than 200 levels"
        );
        // Dropping it would recurse as deep as it is.
        std::mem::forget(far);
    }

    #[test]
    fn recursion_direct_mutual_or_through_a_lambda_is_refused_at_its_definition() {
        assert_eq!(
            refused(no_recursion(&parse("def f():\n    return f()\n"))),
            "<codemode>:1:5: `f` calls itself; recursion is not allowed"
        );
        assert_eq!(
            refused(no_recursion(&parse(
                "def a():\n    return b()\n\ndef b():\n    return a()\n"
            ))),
            "<codemode>:1:5: recursion is not allowed: `a` calls `b` calls `a`"
        );
        assert_eq!(
            refused(no_recursion(&parse("g = lambda: g()\n"))),
            "<codemode>:1:1: `g` calls itself; recursion is not allowed"
        );
        // A default value is evaluated by the call: it counts as one.
        assert_eq!(
            refused(no_recursion(&parse("def h(x = h()):\n    return x\n"))),
            "<codemode>:1:5: `h` calls itself; recursion is not allowed"
        );
        // Calls into other functions, builtins and capabilities are not cycles.
        assert!(
            no_recursion(&parse(
                "def a():\n    return len([b()])\n\ndef b():\n    return records.lookup(key='x')\n"
            ))
            .is_ok()
        );
    }

    #[test]
    fn main_takes_no_parameters() {
        assert_eq!(
            refused(main_signature(&parse("def main(x):\n    return x\n"))),
            "<codemode>:1:5: main must take no parameters: define `def main():`"
        );
        assert!(main_signature(&parse("def main():\n    return 1\n")).is_ok());
        // Not a top-level def: reported after loading, not here.
        assert!(main_signature(&parse("main = 1\n")).is_ok());
    }
}
