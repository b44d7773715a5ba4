//! Fuzz target `plugin_docs`: see `codemode_host::fuzzing::plugin_docs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| codemode_host::fuzzing::plugin_docs(data));
