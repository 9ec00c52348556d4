//! Integer fields of request bodies, read as JSON Schema reads `type: integer`.
//!
//! The OpenAPI document says `integer` for every whole-number field, and JSON Schema counts
//! any number with a zero fractional part as an integer: `373.0` is one, so a client (or a
//! JSON library that writes every number as a double) may send it. serde's own integer
//! visitors refuse it, so each integer field of a request body is read through [`opt`] (or
//! [`one`]): a JSON integer, or a float that is finite, has no fractional part, is below
//! 2^53 in magnitude and fits the field's type. Anything else (`1.5`, `1e300`, a string) is
//! refused as before, with the field's type in the message.
//!
//! Why 2^53: a number written with a fraction or an exponent is read as an f64 (serde_json,
//! with its `float_roundtrip` parser, so the f64 is the one nearest the text, never one off).
//! Below 2^53 every integer is an f64 of its own, so `1000.0` is exactly 1000 and
//! `999.9999999999999` is not an integer. From 2^53 on, neighbouring integers share an f64
//! (`9007199254740993.0` reads as 2^53, `100000000000000001.0` as `100000000000000000`), so
//! such a number is refused and the message says to write it as a plain integer, which is
//! read exactly. As with every JSON Schema validator that reads numbers as doubles, a fraction
//! too small for an f64 to hold (`3.0000000000000001`) reads as the integer it rounds to.
//!
//! The generated-request property test (`tests/openapi.rs`) sends zero-fraction integers, so
//! a field that is not read through here fails it.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, Visitor};

/// Reads an optional integer field (`null` is absent); use with
/// `#[serde(default, deserialize_with = "…::opt")]`.
pub(crate) fn opt<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    d.deserialize_option(Maybe(PhantomData))
}

/// Reads a required integer field.
pub(crate) fn one<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    d.deserialize_any(Whole(PhantomData))
}

struct Maybe<T>(PhantomData<T>);

impl<'de, T: TryFrom<i128>> Visitor<'de> for Maybe<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        expecting::<T>(f)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Whole(PhantomData)).map(Some)
    }
}

struct Whole<T>(PhantomData<T>);

fn expecting<T>(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    // `core::primitive::u32` → `u32`.
    let name = std::any::type_name::<T>().rsplit("::").next().unwrap_or("");
    write!(
        f,
        "an integer that fits {name} (a zero fraction such as 3.0 is accepted below 2^53; \
         write a larger one as a plain integer)"
    )
}

impl<T: TryFrom<i128>> Whole<T> {
    fn fit<E: de::Error>(self, n: i128, unexpected: de::Unexpected<'_>) -> Result<T, E> {
        T::try_from(n).map_err(|_| E::invalid_value(unexpected, &self))
    }
}

impl<'de, T: TryFrom<i128>> Visitor<'de> for Whole<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        expecting::<T>(f)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.fit(i128::from(v), de::Unexpected::Signed(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.fit(i128::from(v), de::Unexpected::Unsigned(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        // Below 2^53 an integral f64 names one integer only (see the module docs), and the
        // cast below neither rounds nor saturates.
        const LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53
        if v.is_finite() && v.fract() == 0.0 && v.abs() < LIMIT {
            #[allow(clippy::cast_possible_truncation)]
            let n = v as i128;
            self.fit(n, de::Unexpected::Float(v))
        } else {
            Err(E::invalid_value(de::Unexpected::Float(v), &self))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Fields {
        #[serde(default, deserialize_with = "opt")]
        small: Option<u32>,
        #[serde(default, deserialize_with = "opt")]
        signed: Option<i32>,
        #[serde(default, deserialize_with = "opt")]
        wide: Option<i64>,
        #[serde(default, deserialize_with = "one")]
        size: usize,
    }

    fn read(json: &str) -> Result<Fields, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn zero_fraction_integers_read_as_integers() {
        let f = read(r#"{"small": 373.0, "signed": -132818857.0, "wide": 1000.0, "size": 712.0}"#)
            .unwrap();
        assert_eq!(
            (f.small, f.signed, f.wide, f.size),
            (Some(373), Some(-132_818_857), Some(1000), 712)
        );
        let f =
            read(r#"{"small": 4294967295, "signed": null, "wide": -0.0, "size": 1e3}"#).unwrap();
        assert_eq!(
            (f.small, f.signed, f.wide, f.size),
            (Some(u32::MAX), None, Some(0), 1000)
        );
        let f = read(r#"{"size": 0}"#).unwrap();
        assert_eq!((f.small, f.signed, f.wide), (None, None, None));
        let f = read(r#"{"wide": -9223372036854775808, "size": 1}"#).unwrap();
        assert_eq!(f.wide, Some(i64::MIN));
        // Integers beyond 2^53 are exact when written as integers; 2^53 - 1 is the largest
        // float taken.
        let f = read(r#"{"wide": 253402300799999999, "size": 9007199254740991.0}"#).unwrap();
        assert_eq!(
            (f.wide, f.size),
            (Some(253_402_300_799_999_999), (1 << 53) - 1)
        );
    }

    #[test]
    fn fractions_out_of_range_and_other_types_are_refused() {
        for bad in [
            r#"{"small": 373.5}"#,
            r#"{"small": -1}"#,
            r#"{"small": -1.0}"#,
            r#"{"small": 4294967296.0}"#,
            r#"{"signed": 2147483648}"#,
            r#"{"wide": 1e300}"#,
            r#"{"wide": 9223372036854775808.0}"#,
            // Below 1000 by less than half the spacing of f64s near 1000: refused only when
            // the parser rounds correctly (float_roundtrip).
            r#"{"wide": 999.9999999999999}"#,
            r#"{"small": 1.9999999999999998}"#,
            // Beyond 2^53 a float cannot say which integer it meant.
            r#"{"wide": 100000000000000001.0}"#,
            r#"{"wide": 253402300799999999.0}"#,
            r#"{"wide": 9007199254740993.0}"#,
            r#"{"wide": 9007199254740992.0}"#,
            r#"{"wide": 1e30}"#,
            r#"{"small": "3"}"#,
            r#"{"small": true}"#,
            r#"{"size": null}"#,
        ] {
            let e = read(bad).expect_err(bad);
            assert!(e.contains("an integer that fits"), "{bad}: {e}");
        }
    }
}
