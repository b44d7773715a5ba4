//! `probe.wasm`: a hostile plugin that looks for what earlier instances left in its
//! slot. Written as a core module in WebAssembly text, because Rust cannot grow or
//! fill a table, and made a component by wit-component, as wit-bindgen's output
//! is. Each of its three capabilities first checks that its part of the instance is
//! pristine, then dirties it:
//!
//! - `probe.memory` grows linear memory, counts the 4 KiB pages of the new memory
//!   that hold anything but zeros, then fills every `stride`th page with `marker`;
//! - `probe.table` counts the slots of its table of function references that are
//!   not null, then sets every `stride`th to a function (the table starts with
//!   `TABLE_SLOTS` slots: slots a `table.grow` adds are filled by the grow itself,
//!   so only a table's initial slots show what a reset left);
//! - `probe.segment` counts the bytes of its data segment that differ from those
//!   of the probe made with `seed`, then overwrites them all with `marker`.
//!
//! The data segment's bytes depend on the `seed` the probe is made with, so a
//! program that names the version it expects (a hot reload) sees every byte of an
//! instance of another version as dirty.

use std::path::PathBuf;

/// Where the data segment starts in linear memory.
const SEGMENT_AT: u32 = 16384;
/// The data segment's length: three host pages.
pub(crate) const SEGMENT_BYTES: u32 = 3 * 4096;
/// The table's slots: 480 KB of references, more than the 256 KiB a table slot
/// keeps resident.
pub(crate) const TABLE_SLOTS: u32 = 60_000;
/// Where `describe()`'s answer starts in linear memory.
const DESCRIBE_AT: u32 = 1024;
/// Size of one `capability` record in the canonical ABI: five strings or optional
/// strings and a list, 4-aligned.
const RECORD_BYTES: u32 = 60;

/// The capabilities, as `describe()` names them.
const CAPABILITIES: &[(&str, &str)] = &[
    (
        "probe.memory",
        "Grow memory, count dirty pages, then write a marker.",
    ),
    (
        "probe.table",
        "Grow the table, count set slots, then set some.",
    ),
    (
        "probe.segment",
        "Count changed bytes of the data segment, then overwrite it.",
    ),
];

/// The WIT of the probe and of the metadata interface it exports.
const WIT: &str = r#"
package test:probe@0.1.0;

interface probe {
  /// Units checked, units found not pristine, units written after.
  record swept { checked: u32, dirty: u32, written: u32 }
  memory: func(pages: u32, stride: u32, marker: u8) -> swept;
  table: func(stride: u32) -> swept;
  segment: func(seed: u32, marker: u8) -> swept;
}

world plugin {
  export probe;
  export codemode:plugin/metadata@0.1.0;
}

package codemode:plugin@0.1.0 {
  interface metadata {
    record capability {
      export-name: string,
      name: option<string>,
      id: option<string>,
      summary: string,
      description: option<string>,
      search-terms: list<string>,
    }
    describe: func() -> list<capability>;
  }
}
"#;

/// The byte at offset `i` of the data segment of the probe made with `seed`.
pub(crate) fn segment_byte(seed: u32, i: u32) -> u8 {
    (i.wrapping_mul(31).wrapping_add(seed) & 0xff) as u8
}

/// A byte string as WebAssembly text: every byte escaped.
fn wat_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:02x}")).collect()
}

/// `describe()`'s answer at `DESCRIBE_AT`: the list's pointer and length, the
/// records, then their strings.
fn describe_data() -> Vec<u8> {
    let records_at = DESCRIBE_AT + 8;
    let count = u32::try_from(CAPABILITIES.len()).expect("a few capabilities");
    let mut strings_at = records_at + count * RECORD_BYTES;
    let mut head = Vec::new();
    let mut strings: Vec<u8> = Vec::new();
    head.extend(records_at.to_le_bytes());
    head.extend(count.to_le_bytes());
    let mut string = |text: &str, head: &mut Vec<u8>| {
        let len = u32::try_from(text.len()).expect("a short text");
        head.extend(strings_at.to_le_bytes());
        head.extend(len.to_le_bytes());
        strings.extend(text.as_bytes());
        strings_at += len;
    };
    let none = [0u8; 12];
    for (export_name, summary) in CAPABILITIES {
        string(export_name, &mut head); // export-name
        head.extend(none); // name
        head.extend(none); // id
        string(summary, &mut head); // summary
        head.extend(none); // description
        head.extend([0u8; 4]); // search-terms: an empty list (any aligned pointer)
        head.extend(0u32.to_le_bytes());
    }
    head.extend(strings);
    head
}

/// The core module, in text.
fn module_text(seed: u32) -> String {
    let segment: Vec<u8> = (0..SEGMENT_BYTES).map(|i| segment_byte(seed, i)).collect();
    format!(
        r#"(module
  (memory (export "memory") 1)
  (table $table {TABLE_SLOTS} funcref)
  (func $mark)
  (elem declare func $mark)
  (data (i32.const {DESCRIBE_AT}) "{describe}")
  (data (i32.const {SEGMENT_AT}) "{segment}")

  ;; Stores a `swept` record at 512 and returns its address.
  (func $swept (param $checked i32) (param $dirty i32) (param $written i32) (result i32)
    (i32.store (i32.const 512) (local.get $checked))
    (i32.store (i32.const 516) (local.get $dirty))
    (i32.store (i32.const 520) (local.get $written))
    (i32.const 512))

  (func (export "codemode:plugin/metadata@0.1.0#describe") (result i32)
    (i32.const {DESCRIBE_AT}))

  (func (export "test:probe/probe@0.1.0#memory")
    (param $pages i32) (param $stride i32) (param $marker i32) (result i32)
    (local $page i32) (local $end i32) (local $at i32) (local $index i32)
    (local $checked i32) (local $dirty i32) (local $written i32)
    (local.set $page (memory.grow (local.get $pages)))
    (if (i32.eq (local.get $page) (i32.const -1)) (then unreachable))
    (local.set $page (i32.shl (local.get $page) (i32.const 16)))
    (local.set $end (i32.add (local.get $page) (i32.shl (local.get $pages) (i32.const 16))))
    ;; Every 4 KiB page of the new memory must read as zeros.
    (block $scanned
      (loop $pages
        (br_if $scanned (i32.ge_u (local.get $page) (local.get $end)))
        (local.set $at (local.get $page))
        (block $clean
          (loop $words
            (if (i64.ne (i64.load (local.get $at)) (i64.const 0))
              (then
                (local.set $dirty (i32.add (local.get $dirty) (i32.const 1)))
                (br $clean)))
            (local.set $at (i32.add (local.get $at) (i32.const 8)))
            (br_if $words (i32.lt_u (local.get $at) (i32.add (local.get $page) (i32.const 4096))))))
        (local.set $checked (i32.add (local.get $checked) (i32.const 1)))
        (local.set $page (i32.add (local.get $page) (i32.const 4096)))
        (br $pages)))
    ;; Then every `stride`th page is filled with the marker: scattered runs.
    (local.set $page (i32.sub (local.get $end) (i32.shl (local.get $pages) (i32.const 16))))
    (block $filled
      (loop $fill
        (br_if $filled (i32.ge_u (local.get $page) (local.get $end)))
        (if (i32.eqz (i32.rem_u (local.get $index) (local.get $stride)))
          (then
            (memory.fill (local.get $page) (local.get $marker) (i32.const 4096))
            (local.set $written (i32.add (local.get $written) (i32.const 1)))))
        (local.set $index (i32.add (local.get $index) (i32.const 1)))
        (local.set $page (i32.add (local.get $page) (i32.const 4096)))
        (br $fill)))
    (call $swept (local.get $checked) (local.get $dirty) (local.get $written)))

  (func (export "test:probe/probe@0.1.0#table") (param $stride i32) (result i32)
    (local $slot i32) (local $end i32)
    (local $checked i32) (local $dirty i32) (local $written i32)
    (local.set $end (table.size $table))
    ;; Every slot must be null.
    (block $scanned
      (loop $scan
        (br_if $scanned (i32.ge_u (local.get $slot) (local.get $end)))
        (if (i32.eqz (ref.is_null (table.get $table (local.get $slot))))
          (then (local.set $dirty (i32.add (local.get $dirty) (i32.const 1)))))
        (local.set $checked (i32.add (local.get $checked) (i32.const 1)))
        (local.set $slot (i32.add (local.get $slot) (i32.const 1)))
        (br $scan)))
    ;; Then every `stride`th holds a function.
    (local.set $slot (i32.const 0))
    (block $set
      (loop $each
        (br_if $set (i32.ge_u (local.get $slot) (local.get $end)))
        (if (i32.eqz (i32.rem_u (local.get $slot) (local.get $stride)))
          (then
            (table.set $table (local.get $slot) (ref.func $mark))
            (local.set $written (i32.add (local.get $written) (i32.const 1)))))
        (local.set $slot (i32.add (local.get $slot) (i32.const 1)))
        (br $each)))
    (call $swept (local.get $checked) (local.get $dirty) (local.get $written)))

  (func (export "test:probe/probe@0.1.0#segment") (param $seed i32) (param $marker i32) (result i32)
    (local $i i32) (local $dirty i32)
    ;; Byte i of the segment of the probe made with `seed` is (i * 31 + seed) mod 256.
    (block $scanned
      (loop $scan
        (br_if $scanned (i32.ge_u (local.get $i) (i32.const {SEGMENT_BYTES})))
        (if (i32.ne
              (i32.load8_u (i32.add (i32.const {SEGMENT_AT}) (local.get $i)))
              (i32.and (i32.add (i32.mul (local.get $i) (i32.const 31)) (local.get $seed)) (i32.const 255)))
          (then (local.set $dirty (i32.add (local.get $dirty) (i32.const 1)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (memory.fill (i32.const {SEGMENT_AT}) (local.get $marker) (i32.const {SEGMENT_BYTES}))
    (call $swept (i32.const {SEGMENT_BYTES}) (local.get $dirty) (i32.const {SEGMENT_BYTES})))
)"#,
        describe = wat_bytes(&describe_data()),
        segment = wat_bytes(&segment),
    )
}

/// The probe component made with `seed`, as bytes.
pub(crate) fn component(seed: u32) -> Vec<u8> {
    component_of(WIT, &module_text(seed))
}

/// The component of the core module `wat` in the world `plugin` of `wit`.
pub(crate) fn component_of(wit: &str, wat: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("plugin.wit", wit).expect("the WIT");
    let world = resolve
        .select_world(&[package], Some("plugin"))
        .expect("the world `plugin`");
    let mut module = wat::parse_str(wat).expect("the module");
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
        false,
    )
    .expect("the WIT embedded");
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .expect("the module")
        .encode()
        .expect("the component")
}

/// Writes the probe made with `seed` to `target/test-plugins/probe-<seed>/probe.wasm`
/// and returns its path.
pub(crate) fn plugin(seed: u32) -> PathBuf {
    let dir = crate::support::root().join(format!("target/test-plugins/probe-{seed}"));
    std::fs::create_dir_all(&dir).expect("the probe's folder");
    let path = dir.join("probe.wasm");
    // Tests run in parallel and copy this file: it is replaced, never rewritten.
    let temp = dir.join(format!(
        ".probe.{}.{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&temp, component(seed)).expect("the probe written");
    std::fs::rename(&temp, &path).expect("the probe moved in place");
    path
}
