//! Destinations: where a route sends, and what a partition makes of their
//! verdicts.
//!
//! A *destination* is the API a route's requests go to: a name the route
//! gives (`[[api.routes]] destination = "crm"`, so several routes can share
//! one), or else the origin of its URL (`https://crm.example.com:443`). The
//! events no route matches go to `api.url`'s origin, the default destination
//! ([`DestinationId::DEFAULT`]). Each destination has its own circuit
//! breaker, Redis marker, adaptive limit, rate limit and delivery queue
//! (`api_health`, `delivery`, `actors::delivery_pool`), so one API's outage
//! is that API's alone.
//!
//! A partition is paused only when every destination its events can go to
//! is unavailable ([`partition_verdict`]); while some destination is unavailable
//! and another is not, the partition keeps reading and its DLQ waits (the
//! drain would send the unavailable destination's envelopes while main p
//! waits behind them). With one destination both are the verdict itself:
//! today's degraded mode, unchanged.

/// A destination's index in [`Destinations`]; `0` is the default one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct DestinationId(pub(crate) u8);

impl DestinationId {
    /// `api.url`'s destination: events no route matches, and every event when
    /// no route names another.
    pub(crate) const DEFAULT: DestinationId = DestinationId(0);

    pub(crate) fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// At most this many destinations (a [`DestSet`] is a 64-bit set).
pub(crate) const MAX_DESTINATIONS: usize = 64;

/// The destinations of a configuration, by name; index = [`DestinationId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destinations {
    names: Vec<String>,
}

/// Why a destination name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DestinationError {
    #[error("a destination name is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-' (it is a metric label and part of a Redis key); got {0:?}")]
    BadName(String),
    #[error("more than {MAX_DESTINATIONS} destinations")]
    TooMany,
}

impl Destinations {
    /// Only the default destination, named `default`.
    pub(crate) fn new(default: String) -> Destinations {
        Destinations {
            names: vec![default],
        }
    }

    /// The id of `name`, added if new.
    pub(crate) fn add(&mut self, name: &str) -> Result<DestinationId, DestinationError> {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return Ok(DestinationId(i as u8));
        }
        if self.names.len() >= MAX_DESTINATIONS {
            return Err(DestinationError::TooMany);
        }
        self.names.push(name.to_string());
        Ok(DestinationId((self.names.len() - 1) as u8))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }
}

/// Checks a name a route gives its destination.
pub(crate) fn check_name(name: &str) -> Result<(), DestinationError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(DestinationError::BadName(name.to_string()))
    }
}

/// The origin of a URL, `scheme://host[:port]` (the port only when the URL
/// names one): the name of a destination no route names. Text up to the path,
/// so a URL that does not parse still has one.
pub(crate) fn origin(url: &str) -> String {
    let rest_at = url.find("://").map_or(0, |i| i + 3);
    let end = url[rest_at..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| rest_at + i);
    url[..end].to_ascii_lowercase()
}

/// A set of destinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DestSet(u64);

impl DestSet {
    /// The first `n` ids.
    #[cfg(test)]
    pub(crate) fn first(n: usize) -> DestSet {
        if n >= 64 {
            DestSet(u64::MAX)
        } else {
            DestSet((1u64 << n) - 1)
        }
    }

    pub(crate) fn insert(&mut self, id: DestinationId) {
        self.0 |= 1u64 << (id.0 % 64);
    }

    pub(crate) fn remove(&mut self, id: DestinationId) {
        self.0 &= !(1u64 << (id.0 % 64));
    }

    pub(crate) fn contains(self, id: DestinationId) -> bool {
        self.0 & (1u64 << (id.0 % 64)) != 0
    }

    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many destinations it holds.
    pub(crate) fn len(self) -> u32 {
        self.0.count_ones()
    }

    pub(crate) fn is_subset(self, of: DestSet) -> bool {
        self.0 & !of.0 == 0
    }

    pub(crate) fn intersects(self, other: DestSet) -> bool {
        self.0 & other.0 != 0
    }
}

/// Why an event goes to the DLQ without a try (`core::partition::outage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Diverted {
    /// Its destination has been down longer than `degraded.destination_hold`
    /// (or holds its share of the partition): `destination_unavailable`.
    Unavailable,
    /// An earlier event of its key to the same destination is in the DLQ:
    /// `key_in_dlq` (order per key and destination).
    BehindDlq,
}

/// What a partition makes of its destinations' verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PartitionVerdict {
    /// Every destination its events go to is unavailable: degraded mode
    /// pauses the partition (`core::fsm`'s `api_unavailable`).
    pub(crate) paused: bool,
    /// Some destination is unavailable: the DLQ is not drained (its head may
    /// be that destination's, and main p would wait behind it).
    pub(crate) drain_held: bool,
}

/// The partition's verdict from the destinations now `unavailable` and
/// those its events can go to (`reachable`, `core::mapping::Routes::reachable`:
/// the routes' and, unless a route takes every type, the default one).
/// Static, not learnt from the events read: a paused partition reads nothing
/// more, and would never learn that it has other destinations.
pub(crate) fn partition_verdict(unavailable: DestSet, reachable: DestSet) -> PartitionVerdict {
    PartitionVerdict {
        paused: !reachable.is_empty() && reachable.is_subset(unavailable),
        drain_held: unavailable.intersects(reachable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(ids: &[u8]) -> DestSet {
        let mut s = DestSet::default();
        for &i in ids {
            s.insert(DestinationId(i));
        }
        s
    }

    #[test]
    fn origins_and_names() {
        assert_eq!(
            origin("https://CRM.example.com/v1/{type}?a=1"),
            "https://crm.example.com"
        );
        assert_eq!(origin("http://127.0.0.1:8080/x"), "http://127.0.0.1:8080");
        assert_eq!(origin("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert!(check_name("crm").is_ok());
        assert!(check_name("search-index_2.eu").is_ok());
        for bad in ["", "a b", "a:b", "ä", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let mut d = Destinations::new("http://a".into());
        assert_eq!(d.add("crm"), Ok(DestinationId(1)));
        assert_eq!(d.add("http://a"), Ok(DestinationId::DEFAULT));
        assert_eq!(d.add("crm"), Ok(DestinationId(1)));
        assert_eq!((d.len(), d.names()[1].as_str()), (2, "crm"));
        for i in 2..MAX_DESTINATIONS {
            d.add(&format!("d{i}")).expect("room");
        }
        assert_eq!(d.add("one-too-many"), Err(DestinationError::TooMany));
        assert_eq!(DestSet::first(d.len()), DestSet(u64::MAX));
    }

    #[test]
    fn one_destination_is_the_verdict_itself() {
        let all = set(&[0]);
        assert_eq!(
            partition_verdict(set(&[0]), all),
            PartitionVerdict {
                paused: true,
                drain_held: true
            }
        );
        assert_eq!(
            partition_verdict(set(&[]), all),
            PartitionVerdict::default()
        );
    }

    #[test]
    fn a_partition_pauses_only_when_every_destination_is_down() {
        let all = set(&[0, 1, 2]);
        let v = partition_verdict(set(&[1]), all);
        assert_eq!(
            v,
            PartitionVerdict {
                paused: false,
                drain_held: true
            }
        );
        assert!(partition_verdict(set(&[0, 1, 2]), all).paused);
        let v = partition_verdict(set(&[0]), set(&[1, 2]));
        assert_eq!(
            v,
            PartitionVerdict::default(),
            "an unreachable destination counts for nothing"
        );
    }

    proptest! {
        /// Paused means every reachable destination is down; and with none
        /// of them down, nothing is held.
        #[test]
        fn the_verdict_follows_its_definition(down in 0u64..8, reachable in 1u64..8) {
            let (down, reachable) = (DestSet(down), DestSet(reachable));
            let v = partition_verdict(down, reachable);
            for i in 0..3u8 {
                if reachable.contains(DestinationId(i)) && !down.contains(DestinationId(i)) {
                    prop_assert!(!v.paused);
                }
            }
            prop_assert_eq!(v.drain_held, down.intersects(reachable));
            if v.paused { prop_assert!(v.drain_held); }
        }
    }
}
