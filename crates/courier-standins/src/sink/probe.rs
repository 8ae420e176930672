//! Reading what the stand-in needs from an event's JSON without building a
//! `Value`: the id, and the key and sequence number of the order check
//! ([`super::order`]).

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::order::Mark;

/// The fields of an event the stand-in reads: its string `id` (required) and,
/// for the order check, `subject` and `data`. Unknown fields are skipped, so
/// this is much cheaper than building a full `Value`; `subject` and `data` are
/// lenient: any other shape of either is "no mark", never an error, and
/// nothing but the two little fields is copied.
#[derive(Debug, Deserialize)]
pub(super) struct EventProbe {
    pub id: String,
    #[serde(default)]
    subject: Scalar,
    #[serde(default)]
    data: DataFields,
}

impl EventProbe {
    /// The load generator's key and sequence number, when the event has them:
    /// `data.key` (else `subject`) and `data.seq`.
    pub(super) fn mark(self) -> Option<Mark> {
        let key = match (self.data.key, self.subject) {
            (Scalar::Str(k), _) | (_, Scalar::Str(k)) => k,
            _ => return None,
        };
        match self.data.seq {
            Scalar::U64(seq) => Some(Mark { key, seq }),
            _ => None,
        }
    }
}

/// `data.key` and `data.seq` when `data` is an object.
#[derive(Debug, Default)]
struct DataFields {
    key: Scalar,
    seq: Scalar,
}

/// A JSON value reduced to what the check needs: a string, an unsigned
/// integer, or anything else (skipped without copying).
#[derive(Debug, Default)]
enum Scalar {
    Str(String),
    U64(u64),
    #[default]
    Other,
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar::Str(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::U64(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(u64::try_from(v).map_or(Scalar::Other, Scalar::U64))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Scalar, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Scalar, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for DataFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DataFields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<DataFields, A::Error> {
                let mut out = DataFields::default();
                while let Some(name) = a.next_key::<std::borrow::Cow<'de, str>>()? {
                    match name.as_ref() {
                        "key" => out.key = a.next_value()?,
                        "seq" => out.seq = a.next_value()?,
                        _ => {
                            a.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<DataFields, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(DataFields::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<DataFields, E> {
                Ok(DataFields::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<DataFields, E> {
                Ok(DataFields::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<DataFields, E> {
                Ok(DataFields::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<DataFields, E> {
                Ok(DataFields::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<DataFields, E> {
                Ok(DataFields::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<DataFields, E> {
                Ok(DataFields::default())
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark_of(json: &str) -> Option<Mark> {
        serde_json::from_str::<EventProbe>(json)
            .expect("lenient")
            .mark()
    }

    #[test]
    fn reads_the_load_generators_key_and_seq() {
        // The shape of `loadgen::event_json("ev-7", "t", "key-3", 7, …)`.
        let ev = br#"{"specversion":"1.0","id":"ev-7","source":"/courier/loadgen","type":"t","subject":"key-3","entityversion":1,"data":{"key":"key-3","seq":7,"pad":"..."}}"#;
        let probe: EventProbe = serde_json::from_slice(ev).expect("an event");
        assert_eq!(probe.id, "ev-7");
        assert_eq!(
            probe.mark(),
            Some(Mark {
                key: "key-3".into(),
                seq: 7
            })
        );
    }

    #[test]
    fn other_shapes_are_no_mark_not_errors() {
        assert_eq!(mark_of(r#"{"id":"a","data":"text","subject":5}"#), None);
        assert_eq!(mark_of(r#"{"id":"a","data":[1,{"seq":2}]}"#), None);
        assert_eq!(mark_of(r#"{"id":"a","data":{"seq":-1,"key":"k"}}"#), None);
        assert_eq!(mark_of(r#"{"id":"a","data":null}"#), None);
        assert_eq!(mark_of(r#"{"id":"a"}"#), None);
        assert_eq!(
            mark_of(r#"{"id":"a","subject":"s","data":{"seq":2,"x":{"y":[null]}}}"#),
            Some(Mark {
                key: "s".into(),
                seq: 2
            })
        );
    }

    #[test]
    fn the_id_is_required_and_a_string() {
        assert!(serde_json::from_str::<EventProbe>(r#"{"data":{}}"#).is_err());
        assert!(serde_json::from_str::<EventProbe>(r#"{"id":7}"#).is_err());
    }

    #[test]
    fn reads_from_a_value_too() {
        let v = serde_json::json!({"id": "x", "data": {"key": "k", "seq": 3}});
        let probe = EventProbe::deserialize(&v).expect("an event");
        assert_eq!(probe.mark().map(|m| m.seq), Some(3));
    }
}
