//! The value types a capability accepts and returns, and their model-facing notation.
//!
//! A [`Shape`] is the catalog's own description of a WIT type after the mapping of
//! DESIGN §3 (the loader builds it; this module never sees wasmtime). It renders the
//! seed's notation (`list[str]`, `dict[str, int]`, `{a: T, b: U}`, `T | None`) and is
//! what argument binding checks values against.

/// Width and signedness of a WIT integer; binding checks ranges with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntKind {
    /// `s8`
    S8,
    /// `u8`
    U8,
    /// `s16`
    S16,
    /// `u16`
    U16,
    /// `s32`
    S32,
    /// `u32`
    U32,
    /// `s64`
    S64,
    /// `u64` (values above `i64::MAX` cannot cross into a program)
    U64,
}

impl IntKind {
    /// The inclusive range of values this kind accepts from a program (signed 64-bit
    /// projection: `u64` tops out at `i64::MAX`).
    pub fn range(self) -> (i64, i64) {
        match self {
            IntKind::S8 => (i8::MIN.into(), i8::MAX.into()),
            IntKind::U8 => (0, u8::MAX.into()),
            IntKind::S16 => (i16::MIN.into(), i16::MAX.into()),
            IntKind::U16 => (0, u16::MAX.into()),
            IntKind::S32 => (i32::MIN.into(), i32::MAX.into()),
            IntKind::U32 => (0, u32::MAX.into()),
            IntKind::S64 => (i64::MIN, i64::MAX),
            IntKind::U64 => (0, i64::MAX),
        }
    }
}

/// Precision of a WIT float.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatKind {
    /// `f32`
    F32,
    /// `f64`
    F64,
}

/// The shape of a capability parameter or result field: what a program may pass or
/// will get back. WIT reflection produces it (DESIGN §3 mapping); it renders the
/// seed's notation and drives argument binding.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// `string` → `str`
    Str,
    /// `char` → `str` (exactly one Unicode scalar value)
    Char,
    /// `bool`
    Bool,
    /// Any WIT integer → `int`
    Int(IntKind),
    /// `f32`/`f64` → `float`
    Float(FloatKind),
    /// `list<T>` → `list[T]`
    List(Box<Shape>),
    /// `list<tuple<string, T>>` → `dict[str, T]`; also what a JSON Schema object
    /// with `additionalProperties` describes.
    Dict(Box<Shape>),
    /// `map<string, T>` → `dict[str, T]`: a dict to programs, a map to the
    /// component (the two differ only in how a source lowers them).
    Map(Box<Shape>),
    /// `record` → `{a: T, b: U}`
    Record(Vec<Field>),
    /// `option<T>` → `T | None`
    Option(Box<Shape>),
    /// `enum` → `str`, one of the cases (WIT spelling, e.g. `in-progress`)
    Enum(Vec<String>),
    /// `flags` → `list[str]`, each one of the flags (WIT spelling)
    Flags(Vec<String>),
    /// Any value a program can pass (none, bool, int, float, str, list, dict with
    /// string keys): what a JSON Schema without a type describes.
    Any,
}

/// One member of a record, or one parameter of a capability.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The name agents use (a WIT name with `-` turned into `_`).
    pub name: String,
    /// The member's shape.
    pub ty: Shape,
}

impl Field {
    /// A field named `name` (already as agents write it).
    pub fn new(name: impl Into<String>, ty: Shape) -> Self {
        Self {
            name: name.into(),
            ty,
        }
    }

    /// Whether a program may omit this field (its type is an option).
    pub fn is_optional(&self) -> bool {
        matches!(self.ty, Shape::Option(_))
    }
}

/// Turns a WIT kebab-case identifier into the snake_case name agents see.
pub fn snake_case(wit_name: &str) -> String {
    wit_name.replace('-', "_")
}

impl Shape {
    /// The seed's notation for this type.
    pub fn notation(&self) -> String {
        let mut out = String::new();
        self.write_notation(&mut out);
        out
    }

    fn write_notation(&self, out: &mut String) {
        match self {
            Shape::Str | Shape::Char => out.push_str("str"),
            Shape::Enum(cases) => write_literals(cases, out),
            Shape::Bool => out.push_str("bool"),
            Shape::Any => out.push_str("any"),
            Shape::Int(_) => out.push_str("int"),
            Shape::Float(_) => out.push_str("float"),
            Shape::Flags(flags) => {
                out.push_str("list[");
                write_literals(flags, out);
                out.push(']');
            }
            Shape::List(elem) => {
                out.push_str("list[");
                elem.write_notation(out);
                out.push(']');
            }
            Shape::Dict(value) | Shape::Map(value) => {
                out.push_str("dict[str, ");
                value.write_notation(out);
                out.push(']');
            }
            Shape::Record(fields) => {
                out.push('{');
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&field.name);
                    out.push_str(": ");
                    field.ty.write_notation(out);
                }
                out.push('}');
            }
            Shape::Option(inner) => {
                // Option layers append `| None` once (seed: "Pointer layers append
                // | None once").
                let mut inner = inner.as_ref();
                while let Shape::Option(next) = inner {
                    inner = next;
                }
                inner.write_notation(out);
                out.push_str(" | None");
            }
        }
    }
}

/// Most values of an enum or flags written out; past it the notation ends in `...`
/// (binding's message still lists them all), so one huge enum cannot crowd out a
/// search response.
pub const MAX_LITERALS_SHOWN: usize = 32;

/// The values a string may take, as literals: `"open" | "closed"`.
fn write_literals(values: &[String], out: &mut String) {
    if values.is_empty() {
        out.push_str("str");
        return;
    }
    for (i, value) in values.iter().take(MAX_LITERALS_SHOWN).enumerate() {
        if i > 0 {
            out.push_str(" | ");
        }
        out.push_str(&super::quote::go_quote(value));
    }
    if values.len() > MAX_LITERALS_SHOWN {
        out.push_str(" | ...");
    }
}

/// The flat field shape `describe_api` returns for one input or output field.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldShape {
    /// Field name as agents write it.
    pub name: String,
    /// The type in the seed's notation; nesting lives in this string.
    #[serde(rename = "type")]
    pub ty: String,
    /// Input: whether the argument must be given. Output: whether the key is always
    /// present (always true: an option field is present as `None`).
    pub required: bool,
}

/// The input field shapes of a parameter list: optional exactly when the type is an
/// option.
pub fn input_shapes(params: &[Field]) -> Vec<FieldShape> {
    params
        .iter()
        .map(|p| FieldShape {
            name: p.name.clone(),
            ty: p.ty.notation(),
            required: !p.is_optional(),
        })
        .collect()
}

/// The output field shapes of a result record. Every key is present in a result (an
/// option is `None`, not omitted), so every field is required.
pub fn output_shapes(fields: &[Field]) -> Vec<FieldShape> {
    fields
        .iter()
        .map(|f| FieldShape {
            name: f.name.clone(),
            ty: f.ty.notation(),
            required: true,
        })
        .collect()
}

/// The invocation-only keyword signature: `records.lookup(*, key: str, limit: int |
/// None)`, or `records.status()` without parameters.
pub fn signature(name: &str, params: &[Field]) -> String {
    if params.is_empty() {
        return format!("{name}()");
    }
    let list: Vec<String> = params
        .iter()
        .map(|p| format!("{}: {}", p.name, p.ty.notation()))
        .collect();
    format!("{name}(*, {})", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, ty: Shape) -> Field {
        Field::new(snake_case(name), ty)
    }

    fn opt(ty: Shape) -> Shape {
        Shape::Option(Box::new(ty))
    }

    #[test]
    fn notation_follows_the_mapping_table() {
        let cases = [
            ("string", Shape::Str, "str"),
            ("char", Shape::Char, "str"),
            ("bool", Shape::Bool, "bool"),
            ("u8", Shape::Int(IntKind::U8), "int"),
            ("f32", Shape::Float(FloatKind::F32), "float"),
            (
                "enum",
                Shape::Enum(vec!["open".into(), "closed".into()]),
                "\"open\" | \"closed\"",
            ),
            (
                "optional enum",
                opt(Shape::Enum(vec!["in-progress".into(), "done".into()])),
                "\"in-progress\" | \"done\" | None",
            ),
            (
                "flags",
                Shape::Flags(vec!["read".into(), "write".into()]),
                "list[\"read\" | \"write\"]",
            ),
            (
                "a value that needs escaping",
                Shape::Enum(vec!["say \"hi\"".into()]),
                "\"say \\\"hi\\\"\"",
            ),
            ("list", Shape::List(Box::new(Shape::Str)), "list[str]"),
            (
                "dict",
                Shape::Dict(Box::new(Shape::Int(IntKind::S64))),
                "dict[str, int]",
            ),
            (
                "map",
                Shape::Map(Box::new(Shape::Int(IntKind::S64))),
                "dict[str, int]",
            ),
            ("option", opt(Shape::Str), "str | None"),
            ("option of option", opt(opt(Shape::Str)), "str | None"),
            (
                "list of options, optional",
                opt(Shape::List(Box::new(opt(Shape::Str)))),
                "list[str | None] | None",
            ),
            (
                "record",
                Shape::Record(vec![
                    field("title", Shape::Str),
                    field("min-score", opt(Shape::Float(FloatKind::F64))),
                ]),
                "{title: str, min_score: float | None}",
            ),
            ("empty record", Shape::Record(vec![]), "{}"),
            (
                "list of records",
                Shape::List(Box::new(Shape::Record(vec![
                    field("title", Shape::Str),
                    field("score", Shape::Float(FloatKind::F64)),
                ]))),
                "list[{title: str, score: float}]",
            ),
        ];
        for (case, ty, want) in cases {
            assert_eq!(ty.notation(), want, "{case}");
        }
    }

    #[test]
    fn a_long_enum_is_cut_in_the_notation() {
        let cases: Vec<String> = (0..40).map(|i| format!("v{i}")).collect();
        let notation = Shape::Enum(cases).notation();
        assert!(notation.starts_with("\"v0\" | \"v1\""), "{notation}");
        assert!(notation.ends_with("\"v31\" | ..."), "{notation}");
        assert_eq!(notation.matches(" | ").count(), MAX_LITERALS_SHOWN);
    }

    #[test]
    fn signature_has_keyword_marker_only_with_parameters() {
        let params = vec![
            field("key", Shape::Str),
            field("limit", opt(Shape::Int(IntKind::S64))),
        ];
        assert_eq!(
            signature("records.lookup", &params),
            "records.lookup(*, key: str, limit: int | None)"
        );
        assert_eq!(signature("records.status", &[]), "records.status()");
    }

    #[test]
    fn shapes_mark_optional_inputs_and_keep_declaration_order() {
        let params = vec![
            field("tags", Shape::List(Box::new(Shape::Str))),
            field("limit", opt(Shape::Int(IntKind::S64))),
        ];
        assert_eq!(
            input_shapes(&params),
            vec![
                FieldShape {
                    name: "tags".into(),
                    ty: "list[str]".into(),
                    required: true
                },
                FieldShape {
                    name: "limit".into(),
                    ty: "int | None".into(),
                    required: false
                },
            ]
        );
        assert_eq!(
            output_shapes(&params),
            vec![
                FieldShape {
                    name: "tags".into(),
                    ty: "list[str]".into(),
                    required: true
                },
                FieldShape {
                    name: "limit".into(),
                    ty: "int | None".into(),
                    required: true
                },
            ]
        );
    }

    #[test]
    fn int_ranges_project_through_signed_64_bit() {
        assert_eq!(IntKind::U64.range(), (0, i64::MAX));
        assert_eq!(IntKind::S8.range(), (-128, 127));
        assert_eq!(IntKind::U32.range(), (0, 4_294_967_295));
    }
}
