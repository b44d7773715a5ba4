//! Reads a component's exported functions and maps their WIT types to catalog types.
//!
//! The mapping is DESIGN §3: scalars, `list<T>`, `list<tuple<string, T>>` (a dict),
//! records, options, enums and flags are supported; variants, resources, futures,
//! streams and other tuples are rejected naming the export, the place in the type and
//! the WIT type. A capability's result must be a record or `result<record, E>`.

use std::collections::HashMap;

use wasmtime::Engine;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{Component, Type};

use super::wire::ErrorKind;
use crate::catalog::{Field, FloatKind, IntKind, Shape, snake_case};

/// One function exported from an interface of the component.
#[derive(Debug, Clone)]
pub struct ExportedFunc {
    /// Full name of the exported instance, e.g. `example:records/records@0.1.0`.
    pub instance: String,
    /// The interface's short name, e.g. `records`.
    pub interface: String,
    /// The function's WIT name, e.g. `lookup` or `word-counts`.
    pub function: String,
    /// Each parameter's WIT name, and the name the interface exports the
    /// parameter's record type under (also a list's or an option's record):
    /// where the WIT docs of the record's fields are found.
    pub params: Vec<(String, Option<String>)>,
    /// The outcome of mapping its signature.
    pub signature: Result<Signature, TypeError>,
}

impl ExportedFunc {
    /// The `<interface>.<function>` name metadata entries use.
    pub fn export_name(&self) -> String {
        format!("{}.{}", self.interface, self.function)
    }
}

/// A function's parameters and result, mapped to the catalog's shapes, and how
/// its result reports a failure.
#[derive(Debug, Clone)]
pub struct Signature {
    /// Parameters in order.
    pub params: Vec<Field>,
    /// Fields of the result record.
    pub output: Vec<Field>,
    /// How the result reports a failure.
    pub error: ErrorKind,
}

/// Why a function's signature cannot be a capability.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TypeError {
    /// A WIT type outside the supported mapping.
    #[error("{place}: WIT type `{wit}` is not supported ({hint})")]
    Unsupported {
        /// Where the type sits, e.g. `parameter filter, field kind`.
        place: String,
        /// The WIT type's kind, e.g. `variant`.
        wit: &'static str,
        /// What to use instead.
        hint: &'static str,
    },
    /// The function returns nothing or something other than a record.
    #[error("the result must be a record or result<record, E>, found {found}")]
    Result {
        /// What was found.
        found: String,
    },
    /// The error type of a `result` is neither a string nor a record with `message`.
    #[error(
        "the error type of result<record, E> must be string or a record with a `message: string` field, found {found}"
    )]
    ErrorType {
        /// What was found.
        found: String,
    },
}

/// The interface name inside an instance export name: `ns:pkg/iface@1.0` → `iface`;
/// a plain name is itself.
pub fn interface_name(instance: &str) -> &str {
    let after_slash = instance.rsplit_once('/').map_or(instance, |(_, rest)| rest);
    after_slash
        .split_once('@')
        .map_or(after_slash, |(name, _)| name)
}

/// Every function exported through an instance of `component`, plus the names of
/// exports that are not instances (world-level functions, types), which can never be
/// capabilities. With `record_names`, a parameter's record gets the name its
/// interface exports it under (for its docs).
pub fn exported_functions(
    engine: &Engine,
    component: &Component,
    record_names: bool,
) -> (Vec<ExportedFunc>, Vec<String>) {
    let mut funcs = Vec::new();
    let mut other = Vec::new();
    let ty = component.component_type();
    for (instance_name, item) in ty.exports(engine) {
        match item.ty {
            ComponentItem::ComponentInstance(instance) => {
                // Component types carry no names; the interface's type exports do.
                // Only read for a plugin with docs to find: one map per instance.
                let named: HashMap<Vec<String>, String> = if record_names {
                    let mut named = HashMap::new();
                    for (name, item) in instance.exports(engine) {
                        if let ComponentItem::Type(Type::Record(record)) = item.ty {
                            let fields = record.fields().map(|f| f.name.to_owned()).collect();
                            named.entry(fields).or_insert_with(|| name.to_owned());
                        }
                    }
                    named
                } else {
                    HashMap::new()
                };
                for (function, item) in instance.exports(engine) {
                    if let ComponentItem::ComponentFunc(func) = item.ty {
                        funcs.push(ExportedFunc {
                            instance: instance_name.to_owned(),
                            interface: interface_name(instance_name).to_owned(),
                            function: function.to_owned(),
                            params: func
                                .params()
                                .map(|(name, ty)| (name.to_owned(), record_name(&ty, &named)))
                                .collect(),
                            signature: map_signature(&func),
                        });
                    }
                }
            }
            ComponentItem::ComponentFunc(_)
            | ComponentItem::CoreFunc(_)
            | ComponentItem::Module(_)
            | ComponentItem::Component(_)
            | ComponentItem::Type(_)
            | ComponentItem::Resource(_) => other.push(instance_name.to_owned()),
        }
    }
    (funcs, other)
}

/// The exported name of the record `ty` is, or holds as a list's or an option's
/// element, found by its field names (one hash lookup: a hostile component's many
/// records cost no comparisons); two exported records with the same field names
/// share the first's name.
fn record_name(ty: &Type, named: &HashMap<Vec<String>, String>) -> Option<String> {
    if named.is_empty() {
        return None;
    }
    let record = match ty {
        Type::List(list) => list.ty(),
        Type::Option(option) => option.ty(),
        other => other.clone(),
    };
    let Type::Record(record) = record else {
        return None;
    };
    let fields: Vec<String> = record.fields().map(|f| f.name.to_owned()).collect();
    named.get(&fields).cloned()
}

fn map_signature(func: &ComponentFunc) -> Result<Signature, TypeError> {
    let mut params = Vec::new();
    for (name, ty) in func.params() {
        let name = snake_case(name);
        let shape = map_type(&ty, &format!("parameter {name}"))?;
        params.push(Field::new(name, shape));
    }
    let results: Vec<Type> = func.results().collect();
    let (record, error) = match results.as_slice() {
        [] => {
            return Err(TypeError::Result {
                found: "no result".into(),
            });
        }
        [record @ Type::Record(_)] => (record.clone(), ErrorKind::None),
        [Type::Result(r)] => {
            let ok = r.ok().ok_or_else(|| TypeError::Result {
                found: "result<_, E> without an ok type".into(),
            })?;
            if !matches!(ok, Type::Record(_)) {
                return Err(TypeError::Result {
                    found: format!("result<{}, E>", wit_kind(&ok)),
                });
            }
            let error = match r.err() {
                None => ErrorKind::Bare,
                Some(Type::String) => ErrorKind::Message,
                Some(Type::Record(rec))
                    if rec
                        .fields()
                        .any(|f| f.name == "message" && matches!(f.ty, Type::String)) =>
                {
                    ErrorKind::RecordMessage
                }
                Some(other) => {
                    return Err(TypeError::ErrorType {
                        found: wit_kind(&other).to_owned(),
                    });
                }
            };
            (ok, error)
        }
        [other] => {
            return Err(TypeError::Result {
                found: wit_kind(other).to_owned(),
            });
        }
        _ => {
            return Err(TypeError::Result {
                found: format!("{} results", results.len()),
            });
        }
    };
    let Shape::Record(output) = map_type(&record, "result")? else {
        return Err(TypeError::Result {
            found: wit_kind(&record).to_owned(),
        });
    };
    Ok(Signature {
        params,
        output,
        error,
    })
}

/// Maps one WIT type to its shape; `place` says where it sits for error messages.
fn map_type(ty: &Type, place: &str) -> Result<Shape, TypeError> {
    let unsupported = |wit: &'static str, hint: &'static str| {
        Err(TypeError::Unsupported {
            place: place.to_owned(),
            wit,
            hint,
        })
    };
    Ok(match ty {
        Type::Bool => Shape::Bool,
        Type::S8 => Shape::Int(IntKind::S8),
        Type::U8 => Shape::Int(IntKind::U8),
        Type::S16 => Shape::Int(IntKind::S16),
        Type::U16 => Shape::Int(IntKind::U16),
        Type::S32 => Shape::Int(IntKind::S32),
        Type::U32 => Shape::Int(IntKind::U32),
        Type::S64 => Shape::Int(IntKind::S64),
        Type::U64 => Shape::Int(IntKind::U64),
        Type::Float32 => Shape::Float(FloatKind::F32),
        Type::Float64 => Shape::Float(FloatKind::F64),
        Type::Char => Shape::Char,
        Type::String => Shape::Str,
        Type::List(list) => {
            let elem = list.ty();
            if let Type::Tuple(tuple) = &elem {
                let types: Vec<Type> = tuple.types().collect();
                if let [Type::String, value] = types.as_slice() {
                    let shape = map_type(value, &format!("{place}, dict value"))?;
                    return Ok(Shape::Dict(Box::new(shape)));
                }
                return unsupported(
                    "tuple",
                    "only list<tuple<string, T>> is supported, as a dict",
                );
            }
            Shape::List(Box::new(map_type(
                &elem,
                &format!("{place}, list element"),
            )?))
        }
        Type::Map(map) => {
            if !matches!(map.key(), Type::String) {
                return unsupported("map", "only string keys are supported");
            }
            Shape::Map(Box::new(map_type(
                &map.value(),
                &format!("{place}, map value"),
            )?))
        }
        Type::Record(record) => {
            let mut fields = Vec::new();
            for f in record.fields() {
                let name = snake_case(f.name);
                let shape = map_type(&f.ty, &format!("{place}, field {name}"))?;
                fields.push(Field::new(name, shape));
            }
            Shape::Record(fields)
        }
        Type::Option(option) => Shape::Option(Box::new(map_type(&option.ty(), place)?)),
        Type::Enum(e) => Shape::Enum(e.names().map(str::to_owned).collect()),
        Type::Flags(f) => Shape::Flags(f.names().map(str::to_owned).collect()),
        Type::Tuple(_) => return unsupported("tuple", "use a record"),
        Type::Variant(_) => {
            return unsupported("variant", "use an enum, or a record with option fields");
        }
        Type::Result(_) => {
            return unsupported(
                "result",
                "result is only supported as the function's own result",
            );
        }
        Type::Own(_) | Type::Borrow(_) => {
            return unsupported("resource", "capabilities take and return plain data");
        }
        Type::Future(_) => return unsupported("future", "capabilities are synchronous"),
        Type::Stream(_) => return unsupported("stream", "capabilities are synchronous"),
        Type::ErrorContext => return unsupported("error-context", "return result<record, string>"),
        Type::FixedLengthList(_) => return unsupported("fixed-length list", "use list<T>"),
    })
}

/// A short WIT name of a type's kind, for messages.
fn wit_kind(ty: &Type) -> &'static str {
    match ty {
        Type::Bool => "bool",
        Type::S8 => "s8",
        Type::U8 => "u8",
        Type::S16 => "s16",
        Type::U16 => "u16",
        Type::S32 => "s32",
        Type::U32 => "u32",
        Type::S64 => "s64",
        Type::U64 => "u64",
        Type::Float32 => "f32",
        Type::Float64 => "f64",
        Type::Char => "char",
        Type::String => "string",
        Type::List(_) => "list",
        Type::Map(_) => "map",
        Type::Record(_) => "record",
        Type::Tuple(_) => "tuple",
        Type::Variant(_) => "variant",
        Type::Enum(_) => "enum",
        Type::Option(_) => "option",
        Type::Result(_) => "result",
        Type::Flags(_) => "flags",
        Type::Own(_) | Type::Borrow(_) => "resource",
        Type::Future(_) => "future",
        Type::Stream(_) => "stream",
        Type::ErrorContext => "error-context",
        Type::FixedLengthList(_) => "fixed-length list",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_drop_package_and_version() {
        assert_eq!(interface_name("example:records/records@0.1.0"), "records");
        assert_eq!(interface_name("example:records/records"), "records");
        assert_eq!(interface_name("plain"), "plain");
    }
}
