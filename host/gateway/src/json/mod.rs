//! JSON shared by the sources that speak it (upstream MCP servers, OpenAPI
//! services): `schema.rs` turns JSON Schemas into the catalog's shapes, bounded
//! against hostile schemas; `values.rs` lowers bound arguments into JSON and
//! lifts JSON results into program values, within the execution's budgets.
//! Nothing here knows MCP or HTTP.

pub mod schema;
pub mod values;
