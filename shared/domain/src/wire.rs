//! The one idiom for a closed set of strings Baton reads and writes (on the
//! wire, in a database column, in a tool call): [`wire_enum!`](crate::wire_enum) declares the
//! enum and its strings in one list, so `as_str`, `parse`, `FromStr`, serde
//! and the list of every value cannot drift apart. Also: JSON that Postgres
//! text can hold ([`contains_nul`], [`without_nul`]).

/// A string that is not one of an enum's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a {kind} Baton knows")]
pub struct Unknown {
    /// The enum's name, as in `Language`.
    pub kind: &'static str,
    pub value: String,
}

/// Fails the build when a list names one string twice (called by [`wire_enum!`](crate::wire_enum)
/// at compile time, so two values can never be written alike).
pub const fn assert_distinct(strings: &[&str]) {
    let mut i = 0;
    while i < strings.len() {
        let mut j = i + 1;
        while j < strings.len() {
            if same(strings[i].as_bytes(), strings[j].as_bytes()) {
                panic!("a wire_enum! writes two of its values with one string");
            }
            j += 1;
        }
        i += 1;
    }
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Declares an enum whose values are written as fixed strings: it derives
/// serde with those strings and generates `ALL` (every value, in declaration
/// order), `as_str`, `parse`, `Display` and `FromStr`, and its JSON Schema
/// (`schemars`) and TypeScript type (`ts-rs`): a union of the strings. Extra
/// derives and attributes (`#[derive(Default)]`, `#[default]`) pass through.
/// A string listed twice fails the build.
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $wire:literal),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize, ::schemars::JsonSchema, ::ts_rs::TS,
        )]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $wire)] $variant),+
        }

        const _: () = $crate::wire::assert_distinct(&[$($wire),+]);

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [Self; [$($wire),+].len()] = [$(Self::$variant),+];

            /// The value as it is written.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire),+
                }
            }

            /// Reads a written value; `None` for anything outside the set.
            #[must_use]
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($wire => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::wire::Unknown;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s).ok_or_else(|| $crate::wire::Unknown { kind: stringify!($name), value: s.to_string() })
            }
        }
    };
}

/// Whether a JSON value holds a NUL character, in a value or a key: Postgres
/// text (and so `jsonb`) cannot hold one.
pub fn contains_nul(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

/// The value with every NUL character, in values and keys, as U+FFFD: what
/// a model or an agent produced, made storable.
pub fn without_nul(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let clean = |s: String| if s.contains('\0') { s.replace('\0', "\u{FFFD}") } else { s };
    match value {
        Value::String(s) => Value::String(clean(s)),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nul).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (clean(k), without_nul(v))).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    crate::wire_enum! {
        /// A test set.
        #[derive(Default)]
        pub enum Fruit { #[default] Apple => "apple", BloodOrange => "blood_orange" }
    }

    #[test]
    fn every_value_round_trips_through_its_string_and_serde() {
        for fruit in Fruit::ALL {
            assert_eq!(Fruit::parse(fruit.as_str()), Some(fruit));
            assert_eq!(fruit.as_str().parse::<Fruit>(), Ok(fruit));
            assert_eq!(serde_json::to_value(fruit).unwrap(), fruit.as_str());
            assert_eq!(fruit.to_string(), fruit.as_str());
        }
        assert_eq!(Fruit::default(), Fruit::Apple);
    }

    #[test]
    fn a_string_listed_twice_is_found() {
        super::assert_distinct(&["apple", "pear"]);
        let twice = std::panic::catch_unwind(|| super::assert_distinct(&["apple", "pear", "apple"]));
        assert!(twice.is_err());
    }

    #[test]
    fn an_unknown_string_is_refused_by_name() {
        assert_eq!(Fruit::parse("pear"), None);
        let error = "pear".parse::<Fruit>().unwrap_err();
        assert_eq!(error.to_string(), "`pear` is not a Fruit Baton knows");
        assert!(serde_json::from_value::<Fruit>(serde_json::json!("pear")).is_err());
    }
}
