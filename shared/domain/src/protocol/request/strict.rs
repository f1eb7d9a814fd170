//! Reading a JSON value into the request types exactly as the contract
//! writes them.
//!
//! `serde_json` is lenient in two ways the contract is not: a struct may be
//! given as an array of its fields in order (`"callback": []` reads as an
//! empty callback), and a unit enum may be given as a one-key object
//! (`"priority": {"high": null}` reads as `high`). [`Strict`] wraps a
//! `&Value` and refuses both, so an object is required wherever the contract
//! has one and a string wherever it has one of a closed set of words.
//! Everything else (unknown fields ignored, `null` for an absent optional
//! field) behaves as `serde_json` does.

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{Error as _, IntoDeserializer, Unexpected, Visitor};
use serde::{forward_to_deserialize_any, Deserializer};
use serde_json::{Error, Value};

/// A `serde` deserializer over a borrowed JSON value with the contract's
/// stricter rules (see the module docs).
#[derive(Clone, Copy)]
pub(super) struct Strict<'de>(pub(super) &'de Value);

impl<'de> Strict<'de> {
    fn unexpected(self) -> Unexpected<'de> {
        match self.0 {
            Value::Null => Unexpected::Unit,
            Value::Bool(b) => Unexpected::Bool(*b),
            Value::Number(_) => Unexpected::Other("a number"),
            Value::String(s) => Unexpected::Str(s),
            Value::Array(_) => Unexpected::Seq,
            Value::Object(_) => Unexpected::Map,
        }
    }
}

impl<'de> IntoDeserializer<'de, Error> for Strict<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for Strict<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        // Arrays and objects hand their items on as `Strict` too, so the
        // rules hold at every depth; scalars are read as serde_json reads them.
        match self.0 {
            Value::Array(items) => visitor.visit_seq(SeqDeserializer::new(items.iter().map(Strict))),
            Value::Object(fields) => {
                let entries = fields.iter().map(|(key, value)| (key.as_str(), Strict(value)));
                visitor.visit_map(MapDeserializer::new(entries))
            }
            scalar => scalar.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            _ => Err(Error::invalid_type(self.unexpected(), &"an object")),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        // The request's enums are closed sets of words: only a string names one.
        match self.0 {
            Value::String(_) => self.0.deserialize_enum(name, variants, visitor),
            _ => Err(Error::invalid_type(self.unexpected(), &"a string")),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}
