//! [`Needs`]: what of an event the configured expressions read — which
//! variables, and which members of `event.data` — found when they are
//! compiled (`compile`), and what the converter (`convert`) and the scope
//! (`scope`) build and no more.

/// What the variables of an event must hold for the configured expressions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// `event` with its decoded attributes.
    pub event: bool,
    /// What of the event's JSON is converted: nothing (0); the members of
    /// `event.data` whose [`member_bit`]s are set (the expressions name
    /// them, `event.data.amount`); or, [`ALL_OF_THE_JSON`], all of `data`
    /// and `extensions` (an expression uses `event.data` or `event` as a
    /// whole, or `event.extensions`).
    pub event_json: u64,
    pub key: bool,
    pub record_key: bool,
    pub headers: bool,
    /// `topic`, `partition`, `offset`.
    pub coordinates: bool,
}

/// [`Needs::event_json`] for all of the event's JSON.
pub const ALL_OF_THE_JSON: u64 = u64::MAX;

/// The bit of [`Needs::event_json`] that stands for the member `name` of
/// `event.data` (FNV-1a, modulo 64): two names on one bit only convert a
/// member no expression reads.
pub fn member_bit(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    1 << (h % 64)
}

impl Needs {
    /// Every variable these needs name is in `self` too.
    pub(super) fn covers(self, o: Needs) -> bool {
        self.union(o) == self
    }

    pub fn union(self, o: Needs) -> Needs {
        Needs {
            event: self.event || o.event,
            event_json: self.event_json | o.event_json,
            key: self.key || o.key,
            record_key: self.record_key || o.record_key,
            headers: self.headers || o.headers,
            coordinates: self.coordinates || o.coordinates,
        }
    }
}
