//! Fuzz target `plugin_docs`: see `codemode_server::fuzzing::plugin_docs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_server::fuzzing::plugin_docs(data));
