//! An event's JSON as CEL values, in one pass of the parser: serde drives a
//! visitor that builds the crate's values directly (no `serde_json::Value` in
//! between), borrowing every string without escapes from the event's bytes.
//! It notes the longest list or map and the longest string ([`Sizes`]): what
//! the evaluation bound is estimated from.
//!
//! Numbers: an integer that fits `i64` is an `int`, a larger one a `uint`,
//! anything with a fraction or an exponent a `double` (as serde_json reads it).

use super::needs::{member_bit, ALL_OF_THE_JSON};
use base64::Engine;
use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::HashMap;
use std::fmt;

/// A CEL value that may borrow from `'v`.
pub type Value<'v> = Box<dyn Val + 'v>;

/// The largest parts of the values built for one event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Items of the longest list or entries of the largest map.
    pub longest_collection: u64,
    /// Bytes of the longest string or bytes value.
    pub longest_text: u64,
}

impl Sizes {
    pub(crate) fn collection(&mut self, n: usize) {
        self.longest_collection = self.longest_collection.max(n as u64);
    }

    pub(crate) fn text(&mut self, n: usize) {
        self.longest_text = self.longest_text.max(n as u64);
    }
}

/// `text` as a CEL string, its size noted.
pub(crate) fn string<'v>(text: &'v str, sizes: &mut Sizes) -> Value<'v> {
    sizes.text(text.len());
    Box::new(CelString::from(text))
}

pub(crate) fn owned_string<'v>(text: String, sizes: &mut Sizes) -> Value<'v> {
    sizes.text(text.len());
    Box::new(CelString::from(text))
}

pub(crate) fn int<'v>(n: i64) -> Value<'v> {
    Box::new(CelInt::from(n))
}

pub(crate) fn null<'v>() -> Value<'v> {
    Box::new(CelNull)
}

/// A map with string keys.
pub(crate) fn map<'v>(entries: Vec<(&'v str, Value<'v>)>, sizes: &mut Sizes) -> Value<'v> {
    sizes.collection(entries.len());
    let m: HashMap<CelMapKey<'v>, Value<'v>> = entries
        .into_iter()
        .map(|(k, v)| (CelMapKey::from(k), v))
        .collect();
    Box::new(CelMap::from(m))
}

/// Bytes that may not be UTF-8 (a key, a header value) as text: the text
/// where it is UTF-8, base64 otherwise.
pub(crate) fn text_or_base64<'v>(bytes: &'v [u8], sizes: &mut Sizes) -> Value<'v> {
    match std::str::from_utf8(bytes) {
        Ok(s) => string(s, sizes),
        Err(_) => owned_string(
            base64::engine::general_purpose::STANDARD.encode(bytes),
            sizes,
        ),
    }
}

/// Any JSON text as a CEL value.
pub fn json<'v>(text: &'v str, sizes: &mut Sizes) -> Result<Value<'v>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = Seed { sizes }.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// A plain JSON event (all of it is `data`) as a CEL value, an object with
/// only the members `members` names (`needs::Needs::event_json`); the
/// others are skipped unread.
pub fn data<'v>(
    text: &'v str,
    members: u64,
    sizes: &mut Sizes,
) -> Result<Value<'v>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = DataSeed { sizes, members }.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// A structured CloudEvent's members Courier does not read as attributes:
/// `data` (or `data_base64`, decoded to bytes) and the others as
/// `extensions` (everything but `specversion` and the attributes `event`
/// has itself).
pub struct Members<'v> {
    pub data: Option<Value<'v>>,
    pub extensions: Value<'v>,
}

/// A structured CloudEvent's JSON text, read for [`Members`]: of `data`
/// only the members `members` names (`needs::Needs::event_json`), and the
/// extensions only for [`ALL_OF_THE_JSON`] (an empty map otherwise).
pub fn cloudevent<'v>(
    text: &'v str,
    members: u64,
    sizes: &mut Sizes,
) -> Result<Members<'v>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let m = (&mut de).deserialize_map(EventVisitor { sizes, members })?;
    de.end()?;
    Ok(m)
}

struct EventVisitor<'s> {
    sizes: &'s mut Sizes,
    members: u64,
}

impl<'de> Visitor<'de> for EventVisitor<'_> {
    type Value = Members<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Members<'de>, A::Error> {
        let mut data = None;
        let mut extensions: HashMap<CelMapKey<'de>, Value<'de>> = HashMap::new();
        while let Some(key) = access.next_key_seed(KeySeed)? {
            let name = match &key {
                CelMapKey::String(s) => s.inner(),
                _ => "",
            };
            match name {
                "data" => {
                    data = Some(access.next_value_seed(DataSeed {
                        sizes: &mut *self.sizes,
                        members: self.members,
                    })?)
                }
                "data_base64" => {
                    let text: std::borrow::Cow<'de, str> = access.next_value()?;
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(text.as_bytes())
                        .map_err(serde::de::Error::custom)?;
                    self.sizes.text(bytes.len());
                    data = Some(Box::new(CelBytes::from(bytes)));
                }
                "specversion" | "id" | "type" | "source" | "subject" | "time" => {
                    access.next_value::<IgnoredAny>()?;
                }
                _ if self.members != ALL_OF_THE_JSON => {
                    access.next_value::<IgnoredAny>()?;
                }
                _ => {
                    let v = access.next_value_seed(Seed {
                        sizes: &mut *self.sizes,
                    })?;
                    extensions.insert(key, v);
                }
            }
        }
        self.sizes.collection(extensions.len());
        Ok(Members {
            data,
            extensions: Box::new(CelMap::from(extensions)),
        })
    }
}

struct Seed<'s> {
    sizes: &'s mut Sizes,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value<'de>, E> {
        Ok(Box::new(CelBool::from(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value<'de>, E> {
        Ok(int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value<'de>, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => int(i),
            Err(_) => Box::new(CelUInt::from(v)),
        })
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value<'de>, E> {
        Ok(Box::new(CelDouble::from(v)))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Value<'de>, E> {
        Ok(string(v, self.sizes))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value<'de>, E> {
        Ok(owned_string(v.to_string(), self.sizes))
    }

    fn visit_string<E>(self, v: String) -> Result<Value<'de>, E> {
        Ok(owned_string(v, self.sizes))
    }

    fn visit_unit<E>(self) -> Result<Value<'de>, E> {
        Ok(null())
    }

    fn visit_none<E>(self) -> Result<Value<'de>, E> {
        Ok(null())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(v) = seq.next_element_seed(Seed {
            sizes: &mut *self.sizes,
        })? {
            items.push(v);
        }
        self.sizes.collection(items.len());
        Ok(Box::new(CelList::from(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value<'de>, A::Error> {
        let mut m: HashMap<CelMapKey<'de>, Value<'de>> = HashMap::new();
        while let Some(k) = access.next_key_seed(KeySeed)? {
            let v = access.next_value_seed(Seed {
                sizes: &mut *self.sizes,
            })?;
            m.insert(k, v);
        }
        self.sizes.collection(m.len());
        Ok(Box::new(CelMap::from(m)))
    }
}

/// `data`: as [`Seed`] does, but of an object only the members whose
/// [`member_bit`] is in `members` (all of it for [`ALL_OF_THE_JSON`]).
struct DataSeed<'s> {
    sizes: &'s mut Sizes,
    members: u64,
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = Value<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value<'de>, D::Error> {
        if self.members == ALL_OF_THE_JSON {
            return Seed { sizes: self.sizes }.deserialize(d);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = Value<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value<'de>, E> {
        Seed { sizes: self.sizes }.visit_bool(v)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value<'de>, E> {
        Seed { sizes: self.sizes }.visit_i64(v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value<'de>, E> {
        Seed { sizes: self.sizes }.visit_u64(v)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value<'de>, E> {
        Seed { sizes: self.sizes }.visit_f64(v)
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Value<'de>, E> {
        Seed { sizes: self.sizes }.visit_borrowed_str(v)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value<'de>, E> {
        Seed { sizes: self.sizes }.visit_str(v)
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value<'de>, E> {
        Seed { sizes: self.sizes }.visit_string(v)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value<'de>, E> {
        Ok(null())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value<'de>, E> {
        Ok(null())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value<'de>, A::Error> {
        Seed { sizes: self.sizes }.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value<'de>, A::Error> {
        let mut m: HashMap<CelMapKey<'de>, Value<'de>> = HashMap::new();
        while let Some(k) = access.next_key_seed(KeySeed)? {
            let named = match &k {
                CelMapKey::String(s) => member_bit(s.inner()) & self.members != 0,
                _ => false,
            };
            if named {
                let v = access.next_value_seed(Seed {
                    sizes: &mut *self.sizes,
                })?;
                m.insert(k, v);
            } else {
                access.next_value::<IgnoredAny>()?;
            }
        }
        self.sizes.collection(m.len());
        Ok(Box::new(CelMap::from(m)))
    }
}

/// An object's key, borrowed when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = CelMapKey<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<CelMapKey<'de>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = CelMapKey<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<CelMapKey<'de>, E> {
        Ok(CelMapKey::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<CelMapKey<'de>, E> {
        Ok(CelMapKey::from(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<CelMapKey<'de>, E> {
        Ok(CelMapKey::from(v))
    }
}
