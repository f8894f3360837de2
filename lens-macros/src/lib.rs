//! The `#[trace_fn]` attribute of lens, re-exported by `lens-fallbacks`.
//!
//! It rewrites a function's body to run inside a managed span of a span
//! group. The generated code calls the facade's hidden `__private` items
//! (`::lens_fallbacks::__private::in_managed_span` and friends), so the same
//! attribute works whether the facade's `otel` feature is on (a real span,
//! gated at call time) or off (the no-op versions, which inline to the plain
//! body). The macro itself knows nothing of OpenTelemetry.
//!
//! Arguments:
//! - `group = <expr>` (required): the span group, such as `SpanGroup::STEP`.
//! - `name = <expr>` (required): the span name, a string literal or a `const`.
//! - `err = true | false` (optional): whether an `Err` result marks the span
//!   `ERROR`. The default is `true` when the written return type's last path
//!   segment is `Result` (`Result<T, E>`, `io::Result<T>`, `anyhow::Result<T>`),
//!   which requires the error type to implement `Display`.
//! - `crate = "path"` (optional): where the facade is, for crates that reach
//!   it through a re-export (default `::lens_fallbacks`).
//!
//! `async fn`s are supported: the body runs through `instrument_future`, so
//! the span stays current across `.await` points.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{ToTokens, quote};
use syn::parse::Parser;
use syn::{Expr, ItemFn, LitBool, LitStr, Path, ReturnType, Type};

/// Runs the function in a managed span of a group, checked at each call.
///
/// ```text
/// #[lens_fallbacks::trace_fn(group = SpanGroup::CHECKPOINT, name = "megatron.checkpoint.save")]
/// fn save(path: &str) -> std::io::Result<()> { ... }
/// ```
///
/// See the crate documentation for the arguments; the runnable example and
/// the tests are in `lens-fallbacks`, the crate that re-exports it.
#[proc_macro_attribute]
pub fn trace_fn(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand(args.into(), item.into()) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

struct Args {
    group: Option<Expr>,
    name: Option<Expr>,
    err: Option<bool>,
    krate: Option<Path>,
}

fn parse_args(args: TokenStream2) -> syn::Result<Args> {
    let mut parsed = Args { group: None, name: None, err: None, krate: None };
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("group") {
            parsed.group = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("name") {
            parsed.name = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("err") {
            parsed.err = Some(meta.value()?.parse::<LitBool>()?.value);
        } else if meta.path.is_ident("crate") {
            parsed.krate = Some(meta.value()?.parse::<LitStr>()?.parse()?);
        } else {
            return Err(meta.error("unknown argument: expected `group`, `name`, `err` or `crate`"));
        }
        Ok(())
    });
    parser.parse2(args)?;
    Ok(parsed)
}

/// Whether the written return type is a `...::Result<...>`.
fn returns_result(output: &ReturnType) -> bool {
    match output {
        ReturnType::Type(_, ty) => match ty.as_ref() {
            Type::Path(path) => path.path.segments.last().is_some_and(|segment| segment.ident == "Result"),
            _ => false,
        },
        ReturnType::Default => false,
    }
}

fn expand(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let args = parse_args(args)?;
    let mut function: ItemFn = syn::parse2(item)?;
    let span = function.sig.ident.span();
    let group = args
        .group
        .ok_or_else(|| syn::Error::new(span, "#[trace_fn] needs `group = ...`, such as `group = SpanGroup::STEP`"))?;
    let name = args.name.ok_or_else(|| syn::Error::new(span, "#[trace_fn] needs `name = \"...\"`, the span name"))?;
    let krate = args.krate.map_or_else(|| quote!(::lens_fallbacks), |path| path.into_token_stream());
    let err = args.err.unwrap_or_else(|| returns_result(&function.sig.output));
    let block = &function.block;

    let body = if function.sig.asyncness.is_some() {
        let helper = if err { quote!(try_instrument_future) } else { quote!(instrument_future) };
        quote!({ #krate::__private::#helper(#group, #name, [], async move #block).await })
    } else {
        let helper = if err { quote!(try_in_managed_span) } else { quote!(in_managed_span) };
        quote!({ #krate::__private::#helper(#group, #name, [], move |_| #block) })
    };
    function.block = Box::new(syn::parse2(body)?);
    Ok(function.into_token_stream())
}
