//! Gives the interpreter a larger stack than the wasm32 default (1 MiB): the parser and
//! evaluator recurse, and a program that still overflows it traps (the stack sits
//! below the data, so overflow is an out-of-bounds access), ending one execution.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-cdylib-link-arg=-zstack-size=8388608");
    }
}
