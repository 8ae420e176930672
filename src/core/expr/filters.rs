//! `[[filters]]`: which events are not delivered. Each filter's `drop`
//! expression is evaluated in order; the first that says `true` drops the
//! event (the others are not evaluated). A `dry_run` filter that says `true`
//! is only noted, and so is one that fails (it would park the event): the
//! event goes on to the next filter either way.

use super::needs::Needs;
use super::scope::{EvalError, Scope};
use super::Expr;

/// One compiled filter.
#[derive(Debug)]
pub struct Filter {
    pub name: String,
    pub drop: Expr,
    /// Counts and logs what it would drop, drops nothing.
    pub dry_run: bool,
}

/// The filters, in order.
#[derive(Debug, Default)]
pub struct Filters {
    filters: Vec<Filter>,
}

/// What the filters say of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterVerdict {
    /// Deliver it; `would_drop`: the dry-run filters that said `true`,
    /// `would_park`: those that failed (indexes into the filters). A dry
    /// run never changes an event's fate, even when it fails.
    Keep {
        would_drop: Vec<usize>,
        would_park: Vec<usize>,
    },
    /// Filter `filter` (an index) drops it, after the dry-run filters in
    /// `would_drop` said `true` and those in `would_park` failed.
    Drop {
        filter: usize,
        would_drop: Vec<usize>,
        would_park: Vec<usize>,
    },
}

/// A filter whose expression gave no answer: the event is parked
/// `expression_failed` (fail closed: neither dropped nor delivered).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("filter `{filter}`: {error}")]
pub struct FilterFailed {
    pub filter: String,
    pub error: EvalError,
}

impl Filters {
    pub fn new(filters: Vec<Filter>) -> Filters {
        Filters { filters }
    }

    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&Filter> {
        self.filters.get(i)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Filter> {
        self.filters.iter()
    }

    /// What all the filters' expressions need.
    pub fn needs(&self) -> Needs {
        self.filters
            .iter()
            .fold(Needs::default(), |n, f| n.union(f.drop.needs))
    }

    /// The verdict for the event of `scope`.
    pub fn verdict(&self, scope: &mut Scope<'_>) -> Result<FilterVerdict, FilterFailed> {
        let (mut would_drop, mut would_park) = (Vec::new(), Vec::new());
        for (i, f) in self.filters.iter().enumerate() {
            let says = match (scope.eval_bool(&f.drop), f.dry_run) {
                (Ok(says), _) => says,
                (Err(_), true) => {
                    would_park.push(i);
                    continue;
                }
                (Err(error), false) => {
                    return Err(FilterFailed {
                        filter: f.name.clone(),
                        error,
                    })
                }
            };
            match (says, f.dry_run) {
                (false, _) => {}
                (true, true) => would_drop.push(i),
                (true, false) => {
                    return Ok(FilterVerdict::Drop {
                        filter: i,
                        would_drop,
                        would_park,
                    })
                }
            }
        }
        Ok(FilterVerdict::Keep {
            would_drop,
            would_park,
        })
    }
}
