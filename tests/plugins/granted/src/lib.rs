//! Test plugin: `granted.env`, `granted.config`, `granted.read` and `granted.write`
//! show what the host grants through the sidecar `granted.toml`, and that nothing
//! else (the host's environment, other directories) reaches the plugin;
//! `granted.unprovided` calls an import no host provides.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit", generate_all });

use exports::test::granted::granted::{Guest, Text};
use wasi::config::store;

struct Granted;

impl Guest for Granted {
    fn env(name: String) -> Text {
        Text {
            value: std::env::var(name).ok(),
        }
    }

    fn config(key: String) -> Result<Text, String> {
        store::get(&key)
            .map(|value| Text { value })
            .map_err(|error| format!("{error:?}"))
    }

    fn read(path: String) -> Result<Text, String> {
        std::fs::read_to_string(&path)
            .map(|text| Text { value: Some(text) })
            .map_err(|error| format!("cannot read {path}: {error}"))
    }

    fn write(path: String, value: String) -> Result<Text, String> {
        std::fs::write(&path, &value)
            .map(|()| Text { value: Some(value) })
            .map_err(|error| format!("cannot write {path}: {error}"))
    }

    fn unprovided() -> Text {
        Text {
            value: Some(test::granted::missing::ping().to_string()),
        }
    }
}

export!(Granted);

codemode_sdk::metadata![
    codemode_sdk::Capability::new("granted.env", "Read an environment variable."),
    codemode_sdk::Capability::new("granted.config", "Read a config value."),
    codemode_sdk::Capability::new("granted.read", "Read a file."),
    codemode_sdk::Capability::new("granted.write", "Write a file."),
    codemode_sdk::Capability::new("granted.unprovided", "Call an import no host provides."),
];

// A reader and a writer, as a policy that asks before writes sees them.
codemode_sdk::annotations![
    codemode_sdk::Annotated::new("granted.read").read_only(true),
    codemode_sdk::Annotated::new("granted.write")
        .read_only(false)
        .destructive(true),
];
