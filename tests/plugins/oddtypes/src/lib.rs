//! Test plugin: `odd.area` takes a WIT variant, outside the supported type mapping;
//! the host must skip the plugin naming the export, the parameter and the type.

// wit-bindgen's generated modules carry no docs.
#![allow(missing_docs)]

codemode_sdk::generate!({ world: "plugin", path: "wit" });

use exports::test::oddtypes::odd::{AreaResult, Guest, Shape};

struct Odd;

impl Guest for Odd {
    fn area(shape: Shape) -> AreaResult {
        let value = match shape {
            Shape::Circle(r) => std::f64::consts::PI * r * r,
            Shape::Square(s) => s * s,
        };
        AreaResult { value }
    }
}

export!(Odd);

codemode_sdk::metadata![codemode_sdk::Capability::new(
    "odd.area",
    "Area of a shape."
)];
