//! The `#[capabilities]` attribute of [`codemode-sdk`]: a plugin's capability
//! metadata, written once as the doc comments of its functions.
//!
//! Use it through `codemode_sdk::capabilities`; the generated code names the SDK as
//! `::codemode_sdk`, so the plugin depends on it under that name.
//!
//! [`codemode-sdk`]: ../codemode_sdk/index.html

use proc_macro2::TokenStream;
use quote::quote;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, Ident, ImplItem, ItemImpl, Lit, LitStr, Meta, Token};

/// Name of the helper attribute on a function: `#[capability(name = "...", ...)]`.
const HELPER: &str = "capability";

/// Turns the functions of an `impl <interface>::Guest for T` block into capabilities.
///
/// The first paragraph of a function's doc comment is its summary, the following
/// paragraphs its description. `#[capability(...)]` on a function sets the rest:
/// `name = "..."`, `id = "..."`, `search_terms = ["...", ...]`, or `skip` for an
/// export that is no capability. Without arguments the attribute exports the
/// metadata; with `list = NAME` it defines `fn NAME() -> Vec<Capability>` instead,
/// for plugins with several interfaces (`codemode_sdk::metadata![a(), b()]`). The
/// interface is read off the trait path (`greet::Guest` → `greet`); when the trait
/// is imported as plain `Guest`, name it: `interface = "greet"`.
#[proc_macro_attribute]
pub fn capabilities(
    attr: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    let Expansion { item, metadata } = expand(attr.into(), item.into());
    let metadata = metadata.unwrap_or_else(syn::Error::into_compile_error);
    quote!(#item #metadata).into()
}

/// What the attribute turns its item into.
struct Expansion {
    /// The item without helper attributes. It is kept even when the metadata has
    /// errors, so that a mistake in the metadata is the only error the author sees.
    item: TokenStream,
    /// The metadata export (or list function), or every mistake found.
    metadata: syn::Result<TokenStream>,
}

/// What the attribute's own arguments ask for.
#[derive(Default)]
struct Args {
    /// The WIT interface, when the trait path does not show it.
    interface: Option<LitStr>,
    /// Define this function returning the capabilities instead of exporting them.
    list: Option<Ident>,
}

/// One function's `#[capability(...)]` settings.
#[derive(Default)]
struct Settings {
    name: Option<LitStr>,
    id: Option<LitStr>,
    search_terms: Vec<LitStr>,
    skip: bool,
}

/// Collects errors so that one expansion reports all of them.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(first) => first.combine(error),
            None => self.0 = Some(error),
        }
    }
}

/// The attribute's expansion: the impl block without helper attributes, plus the
/// metadata export (or list function).
fn expand(attr: TokenStream, item: TokenStream) -> Expansion {
    let mut block: ItemImpl = match syn::parse2(item.clone()) {
        Ok(block) => block,
        Err(e) => {
            return Expansion {
                item,
                metadata: Err(syn::Error::new(
                    e.span(),
                    "#[capabilities] goes on an `impl <interface>::Guest for <type>` block",
                )),
            };
        }
    };
    let mut errors = Errors::default();
    let args = parse_args(attr).unwrap_or_else(|e| {
        errors.push(e);
        Args::default()
    });
    let interface = interface_name(&block, &args).unwrap_or_else(|e| {
        errors.push(e);
        String::new()
    });
    let mut capabilities = Vec::new();
    for item in &mut block.items {
        let ImplItem::Fn(function) = item else {
            continue;
        };
        let settings = take_settings(&mut function.attrs).unwrap_or_else(|e| {
            errors.push(e);
            Settings::default()
        });
        if settings.skip {
            continue;
        }
        let ident = &function.sig.ident;
        let Some((summary, description)) = split_docs(&function.attrs) else {
            errors.push(syn::Error::new(
                ident.span(),
                format!(
                    "capability `{ident}` needs a doc comment: its first paragraph is the \
                     summary agents see (or mark the function #[capability(skip)])"
                ),
            ));
            continue;
        };
        let export = format!("{interface}.{}", kebab(&ident.to_string()));
        capabilities.push(capability(&export, &summary, description, &settings));
    }
    let metadata = match (errors.0, &args.list) {
        (Some(e), _) => Err(e),
        (None, Some(list)) => Ok(quote! {
            /// The capabilities of one interface, for `codemode_sdk::metadata!`.
            fn #list() -> ::std::vec::Vec<::codemode_sdk::Capability> {
                ::std::vec![#(#capabilities),*]
            }
        }),
        (None, None) => Ok(quote! {
            ::codemode_sdk::metadata![#(#capabilities),*];
        }),
    };
    Expansion {
        item: quote!(#block),
        metadata,
    }
}

/// Parses `interface = "..."` and `list = NAME`.
fn parse_args(attr: TokenStream) -> syn::Result<Args> {
    let mut args = Args::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("interface") {
            args.interface = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("list") {
            args.list = Some(meta.value()?.parse()?);
            Ok(())
        } else {
            Err(meta.error(
                "unknown argument; #[capabilities] takes `interface = \"...\"` and `list = NAME`",
            ))
        }
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(args)
}

/// The WIT interface name (kebab-case) the block implements.
fn interface_name(block: &ItemImpl, args: &Args) -> syn::Result<String> {
    if let Some(interface) = &args.interface {
        return Ok(interface.value());
    }
    let Some((_, path, _)) = &block.trait_ else {
        return Err(syn::Error::new(
            block.self_ty.span(),
            "#[capabilities] goes on an `impl <interface>::Guest for <type>` block",
        ));
    };
    let segments: Vec<_> = path.segments.iter().collect();
    match segments.as_slice() {
        [.., interface, _guest] => Ok(kebab(&interface.ident.to_string())),
        _ => Err(syn::Error::new(
            path.span(),
            format!(
                "cannot tell the WIT interface from `{}`: write its module \
                 (`impl greet::Guest for ...`) or name it: \
                 #[codemode_sdk::capabilities(interface = \"greet\")]",
                quote!(#path)
            ),
        )),
    }
}

/// Removes the `#[capability(...)]` attributes and returns what they set.
fn take_settings(attrs: &mut Vec<Attribute>) -> syn::Result<Settings> {
    let mut settings = Settings::default();
    let mut error = None;
    attrs.retain(|attr| {
        if !attr.path().is_ident(HELPER) {
            return true;
        }
        if let Err(e) = parse_settings(attr, &mut settings) {
            error.get_or_insert(e);
        }
        false
    });
    match error {
        Some(e) => Err(e),
        None => Ok(settings),
    }
}

/// Parses one `#[capability(...)]` into `settings`.
fn parse_settings(attr: &Attribute, settings: &mut Settings) -> syn::Result<()> {
    attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("name") {
            settings.name = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("id") {
            settings.id = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("search_terms") {
            let list: syn::ExprArray = meta.value()?.parse()?;
            for term in list.elems {
                match term {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(s), ..
                    }) => settings.search_terms.push(s),
                    other => {
                        return Err(syn::Error::new(
                            other.span(),
                            "search terms are string literals",
                        ));
                    }
                }
            }
        } else if meta.path.is_ident("skip") {
            settings.skip = true;
        } else {
            return Err(meta.error(
                "unknown setting; #[capability] takes `name = \"...\"`, `id = \"...\"`, \
                 `search_terms = [\"...\", ...]` and `skip`",
            ));
        }
        Ok(())
    })
}

/// The summary (first paragraph) and description (later paragraphs, if any) of the
/// doc comment; `None` without a doc comment. A paragraph's lines are joined with
/// spaces, as rustdoc renders them; paragraphs stay apart by a blank line.
fn split_docs(attrs: &[Attribute]) -> Option<(String, Option<String>)> {
    let mut text = String::new();
    for attr in attrs {
        if let Meta::NameValue(nv) = &attr.meta
            && nv.path.is_ident("doc")
            && let Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) = &nv.value
        {
            text.push_str(&s.value());
            text.push('\n');
        }
    }
    let mut paragraphs = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            if !current.is_empty() {
                paragraphs.push(current.join(" "));
                current.clear();
            }
        } else {
            current.push(line);
        }
    }
    if !current.is_empty() {
        paragraphs.push(current.join(" "));
    }
    let mut paragraphs = paragraphs.into_iter();
    let summary = paragraphs.next()?;
    let rest: Vec<String> = paragraphs.collect();
    let description = (!rest.is_empty()).then(|| rest.join("\n\n"));
    Some((summary, description))
}

/// The builder expression of one capability.
fn capability(
    export: &str,
    summary: &str,
    description: Option<String>,
    settings: &Settings,
) -> TokenStream {
    let mut expr = quote! { ::codemode_sdk::Capability::new(#export, #summary) };
    if let Some(description) = description {
        expr = quote! { #expr.with_description(#description) };
    }
    if let Some(name) = &settings.name {
        expr = quote! { #expr.with_name(#name) };
    }
    if let Some(id) = &settings.id {
        expr = quote! { #expr.with_id(#id) };
    }
    if !settings.search_terms.is_empty() {
        let terms = Punctuated::<&LitStr, Token![,]>::from_iter(&settings.search_terms);
        expr = quote! { #expr.with_search_terms([#terms]) };
    }
    expr
}

/// A Rust identifier as WIT spells it (`word_counts` → `word-counts`); exact, since
/// WIT names contain no underscores and bindings only turn `-` into `_`.
fn kebab(ident: &str) -> String {
    ident.trim_start_matches("r#").replace('_', "-")
}

/// The `codemode-docs` section of the WIT that `codemode_sdk::generate!` reads: a
/// static placed in that custom section of the plugin's core module, where the
/// host finds it. Takes `generate!`'s own input and uses its `path` (default
/// `wit`, relative to the crate, as `wit_bindgen::generate!` reads it). Emits
/// nothing when the WIT does not parse (`generate!` reports that) or for a target
/// other than WebAssembly.
#[doc(hidden)]
#[proc_macro]
pub fn package_docs(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let Some(path) = wit_path(input.into()) else {
        return TokenStream::new().into();
    };
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| std::path::PathBuf::from("."), std::path::PathBuf::from);
    let Ok(section) = codemode_wit_docs::encode(&dir.join(path)) else {
        return TokenStream::new().into();
    };
    let len = section.len();
    let bytes = proc_macro2::Literal::byte_string(&section);
    let name = codemode_wit_docs::SECTION_NAME;
    quote! {
        #[cfg(target_family = "wasm")]
        #[doc(hidden)]
        #[unsafe(link_section = #name)]
        #[used]
        static __CODEMODE_PACKAGE_DOCS: [u8; #len] = *#bytes;
    }
    .into()
}

/// The `path` of `generate!`'s input `{ key: value, ... }` (`wit` when absent);
/// `None` when it is not one string (a list of paths, inline WIT).
fn wit_path(input: TokenStream) -> Option<String> {
    use proc_macro2::{Delimiter, TokenTree};
    let mut tokens = input.into_iter();
    let body = match (tokens.next(), tokens.next()) {
        (Some(TokenTree::Group(group)), None) if group.delimiter() == Delimiter::Brace => {
            group.stream()
        }
        _ => return None,
    };
    let mut entries: Vec<Vec<TokenTree>> = vec![Vec::new()];
    for token in body {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => entries.push(Vec::new()),
            _ => entries.last_mut()?.push(token),
        }
    }
    for entry in entries {
        match entry.as_slice() {
            [TokenTree::Ident(key), TokenTree::Punct(colon), value @ ..]
                if key == "path" && colon.as_char() == ':' =>
            {
                return match value {
                    [TokenTree::Literal(literal)] => syn::parse_str::<LitStr>(&literal.to_string())
                        .ok()
                        .map(|l| l.value()),
                    _ => None,
                };
            }
            [TokenTree::Ident(key), ..] if key == "inline" => return None,
            _ => {}
        }
    }
    Some("wit".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(attr: TokenStream, item: TokenStream) -> String {
        let Expansion { item, metadata } = expand(attr, item);
        let metadata = metadata.unwrap();
        quote!(#item #metadata).to_string()
    }

    /// The error messages, after checking that the item survives without helpers.
    fn error(attr: TokenStream, item: TokenStream) -> String {
        let Expansion { item, metadata } = expand(attr, item);
        assert!(!item.to_string().contains("capability ("), "{item}");
        match metadata {
            Ok(tokens) => panic!("expanded to {tokens}"),
            Err(e) => e
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(" | "),
        }
    }

    #[test]
    fn docs_and_settings_become_metadata() {
        let got = expanded(
            quote!(),
            quote! {
                impl exports::acme::text::word_tools::Guest for Plugin {
                    /// Count words.
                    #[capability(name = "text.count", id = "text.v1.count", search_terms = ["tally", "frequency"])]
                    fn word_counts(text: String) -> Counts { todo!() }
                }
            },
        );
        let want = quote! {
            impl exports::acme::text::word_tools::Guest for Plugin {
                #[doc = r" Count words."]
                fn word_counts(text: String) -> Counts { todo!() }
            }
            ::codemode_sdk::metadata![
                ::codemode_sdk::Capability::new("word-tools.word-counts", "Count words.")
                    .with_name("text.count")
                    .with_id("text.v1.count")
                    .with_search_terms(["tally", "frequency"])
            ];
        };
        assert_eq!(got, want.to_string());
    }

    #[test]
    fn later_paragraphs_are_the_description() {
        let attrs: Vec<Attribute> = vec![
            syn::parse_quote!(#[doc = " Greet someone"]),
            syn::parse_quote!(#[doc = "   by name. "]),
            syn::parse_quote!(#[doc = ""]),
            syn::parse_quote!(#[doc = " Returns a greeting;"]),
            syn::parse_quote!(#[doc = " shout=True upper-cases it."]),
            syn::parse_quote!(#[doc = ""]),
            syn::parse_quote!(#[doc = " Fails on an empty name.\n"]),
            syn::parse_quote!(#[inline]),
        ];
        assert_eq!(
            split_docs(&attrs),
            Some((
                "Greet someone by name.".to_string(),
                Some(
                    "Returns a greeting; shout=True upper-cases it.\n\nFails on an empty name."
                        .to_string()
                )
            ))
        );
        let one: Vec<Attribute> = vec![syn::parse_quote!(#[doc = " Only a summary."])];
        assert_eq!(
            split_docs(&one),
            Some(("Only a summary.".to_string(), None))
        );
        assert_eq!(split_docs(&[]), None);
    }

    #[test]
    fn list_defines_a_function_and_skip_leaves_an_export_out() {
        let got = expanded(
            quote!(interface = "greet", list = greet_capabilities),
            quote! {
                impl Guest for Plugin {
                    /// Say hello.
                    fn hello() {}
                    #[capability(skip)]
                    fn internal() {}
                }
            },
        );
        let want = quote! {
            impl Guest for Plugin {
                #[doc = r" Say hello."]
                fn hello() {}
                fn internal() {}
            }
            /// The capabilities of one interface, for `codemode_sdk::metadata!`.
            fn greet_capabilities() -> ::std::vec::Vec<::codemode_sdk::Capability> {
                ::std::vec![::codemode_sdk::Capability::new("greet.hello", "Say hello.")]
            }
        };
        assert_eq!(got, want.to_string());
    }

    #[test]
    fn mistakes_are_explained() {
        assert_eq!(
            error(quote!(), quote!(impl greet::Guest for P { fn hello() {} })),
            "capability `hello` needs a doc comment: its first paragraph is the summary \
             agents see (or mark the function #[capability(skip)])"
        );
        assert_eq!(
            error(quote!(), quote!(impl Guest for P {})),
            "cannot tell the WIT interface from `Guest`: write its module \
             (`impl greet::Guest for ...`) or name it: \
             #[codemode_sdk::capabilities(interface = \"greet\")]"
        );
        assert_eq!(
            error(quote!(), quote!(impl P {})),
            "#[capabilities] goes on an `impl <interface>::Guest for <type>` block"
        );
        assert_eq!(
            error(
                quote!(),
                quote!(
                    fn f() {}
                )
            ),
            "#[capabilities] goes on an `impl <interface>::Guest for <type>` block"
        );
        assert_eq!(
            error(quote!(iface = "x"), quote!(impl g::Guest for P {})),
            "unknown argument; #[capabilities] takes `interface = \"...\"` and `list = NAME`"
        );
        assert_eq!(
            error(
                quote!(),
                quote!(impl g::Guest for P {
                    /// Hi.
                    #[capability(terms = ["x"])]
                    fn hi() {}
                })
            ),
            "unknown setting; #[capability] takes `name = \"...\"`, `id = \"...\"`, \
             `search_terms = [\"...\", ...]` and `skip`"
        );
        assert_eq!(
            error(
                quote!(),
                quote!(impl g::Guest for P {
                    /// Hi.
                    #[capability(search_terms = [1])]
                    fn hi() {}
                })
            ),
            "search terms are string literals"
        );
    }

    #[test]
    fn every_mistake_is_reported_and_the_block_kept() {
        let Expansion { item, metadata } = expand(
            quote!(),
            quote!(impl g::Guest for P {
                #[capability(skip)]
                fn a() {}
                fn b() {}
                /// C.
                #[capability(nam = "x")]
                fn c() {}
            }),
        );
        assert_eq!(
            item.to_string(),
            quote!(impl g::Guest for P {
                fn a() {}
                fn b() {}
                #[doc = r" C."]
                fn c() {}
            })
            .to_string()
        );
        let messages: Vec<String> = metadata
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("capability `b` needs a doc comment"));
        assert!(messages[1].starts_with("unknown setting; #[capability] takes"));
    }

    #[test]
    fn names_turn_kebab_case() {
        assert_eq!(kebab("word_counts"), "word-counts");
        assert_eq!(kebab("r#type"), "type");
    }

    #[test]
    fn the_wit_path_is_read_off_generate_input() {
        let path = |tokens: TokenStream| wit_path(tokens);
        assert_eq!(
            path(quote!({ world: "plugin", path: "my-wit", additional_derives: [PartialEq, Eq] })),
            Some("my-wit".to_owned())
        );
        assert_eq!(path(quote!({ world: "plugin" })), Some("wit".to_owned()));
        assert_eq!(path(quote!({ path: ["a", "b"] })), None);
        assert_eq!(path(quote!({ inline: "package a:b;" })), None);
        assert_eq!(path(quote!("plugin")), None);
    }
}
