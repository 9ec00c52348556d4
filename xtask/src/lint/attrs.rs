//! Which attributes make code test-only: the one judgement both checks share.

use syn::punctuated::Punctuated;
use syn::{Attribute, Meta, Token};

/// Whether `attrs` hold a `#[cfg(..)]` that is true only under `cfg(test)`: `test`, an
/// `all(..)` with a test-only part, an `any(..)` whose every part is test-only. `not(test)`,
/// `feature = ".."` and anything else are not (`cfg(any(test, feature = "testkit"))` is
/// compiled for users of the feature).
pub(crate) fn test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<Meta>()
                .is_ok_and(|meta| implies_test(&meta))
    })
}

/// Whether the cfg predicate `meta` can hold only when `test` does.
fn implies_test(meta: &Meta) -> bool {
    match meta {
        Meta::Path(path) => path.is_ident("test"),
        Meta::NameValue(_) => false,
        Meta::List(list) => {
            let Ok(parts) = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            else {
                return false;
            };
            if list.path.is_ident("all") {
                parts.iter().any(implies_test)
            } else if list.path.is_ident("any") {
                !parts.is_empty() && parts.iter().all(implies_test)
            } else {
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(source: &str) -> Vec<Attribute> {
        let item: syn::ItemFn = syn::parse_str(&format!("{source} fn f() {{}}")).unwrap();
        item.attrs
    }

    #[test]
    fn only_predicates_that_need_test_are_test_only() {
        for yes in [
            "#[cfg(test)]",
            "#[cfg(all(test, feature = \"x\"))]",
            "#[cfg(any(test, all(test, unix)))]",
            "#[allow(dead_code)] #[cfg(test)]",
        ] {
            assert!(test_only(&attrs(yes)), "{yes}");
        }
        for no in [
            "",
            "#[cfg(not(test))]",
            "#[cfg(any(test, feature = \"testkit\"))]",
            "#[cfg(feature = \"test\")]",
            "#[cfg_attr(test, allow(dead_code))]",
            "#[cfg(any())]",
        ] {
            assert!(!test_only(&attrs(no)), "{no}");
        }
    }
}
