//! Test plugin: results the host must refuse (a string that is not UTF-8, a `u64`
//! above `i64::MAX`, NaN), failures that carry messages, results of a chosen size,
//! and `liar.echo`, which takes one parameter of every supported type and returns
//! them, for the binding diagnostics.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]
// `bad_utf8` builds an invalid `String` on purpose.
#![allow(unsafe_code)]

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use exports::test::liar::liar::{
    Color, Echoed, Filter, Guest, Number, Payload, Perms, Real, Refusal, Text, Window,
};

struct Liar;

impl Guest for Liar {
    fn bad_utf8() -> Text {
        // SAFETY: deliberately not UTF-8: the host must refuse it when lifting.
        let value = unsafe { String::from_utf8_unchecked(vec![b'o', b'k', 0xff, 0xfe]) };
        Text { value }
    }

    fn huge() -> Number {
        Number { value: u64::MAX }
    }

    fn nan() -> Real {
        Real { value: f64::NAN }
    }

    fn fail(message: String) -> Result<Text, String> {
        Err(message)
    }

    fn refuse(message: String) -> Result<Text, Refusal> {
        Err(Refusal { message, code: 7 })
    }

    fn blob(size: u32) -> Payload {
        Payload {
            data: "x".repeat(size as usize),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn echo(
        name: String,
        letter: char,
        small: i8,
        count: u64,
        ratio: f32,
        flag: bool,
        color: Color,
        perms: Perms,
        tags: Vec<String>,
        labels: Vec<(String, String)>,
        filter: Option<Filter>,
        window: Option<Window>,
    ) -> Echoed {
        Echoed {
            name,
            letter,
            small,
            count,
            ratio,
            flag,
            color,
            perms,
            tags,
            labels,
            filter,
            window,
        }
    }
}

export!(Liar);

codemode_sdk::metadata![
    codemode_sdk::Capability::new("liar.bad-utf8", "Return a string that is not UTF-8."),
    codemode_sdk::Capability::new("liar.huge", "Return u64::MAX."),
    codemode_sdk::Capability::new("liar.nan", "Return NaN."),
    codemode_sdk::Capability::new("liar.fail", "Fail with a message."),
    codemode_sdk::Capability::new("liar.refuse", "Fail with a record message."),
    codemode_sdk::Capability::new("liar.blob", "Return a string of a given size."),
    codemode_sdk::Capability::new("liar.echo", "Return every argument."),
];
