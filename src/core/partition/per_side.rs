//! [`PerSide`]: one value per topic of the pair, indexed by [`Src`].

use super::Src;
use std::ops::{Index, IndexMut};

/// A value for main p and one for DLQ p.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PerSide<T> {
    main: T,
    dlq: T,
}

impl<T> PerSide<T> {
    /// Each side's value, made by `f`.
    pub(super) fn from_fn(mut f: impl FnMut(Src) -> T) -> Self {
        PerSide {
            main: f(Src::Main),
            dlq: f(Src::Dlq),
        }
    }

    /// Both values, main first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        [&self.main, &self.dlq].into_iter()
    }

    /// Both values, main first.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        [&mut self.main, &mut self.dlq].into_iter()
    }
}

impl<T> From<[T; 2]> for PerSide<T> {
    /// From an array indexed by [`Src::index`] (the public settings' shape).
    fn from([main, dlq]: [T; 2]) -> Self {
        PerSide { main, dlq }
    }
}

impl<T> Index<Src> for PerSide<T> {
    type Output = T;

    fn index(&self, src: Src) -> &T {
        match src {
            Src::Main => &self.main,
            Src::Dlq => &self.dlq,
        }
    }
}

impl<T> IndexMut<Src> for PerSide<T> {
    fn index_mut(&mut self, src: Src) -> &mut T {
        match src {
            Src::Main => &mut self.main,
            Src::Dlq => &mut self.dlq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_by_side_as_the_public_arrays_do() {
        let mut p = PerSide::from(["main", "dlq"]);
        assert_eq!((p[Src::Main], p[Src::Dlq]), ("main", "dlq"));
        for src in Src::BOTH {
            assert_eq!(p[src], ["main", "dlq"][src.index()]);
        }
        p[Src::Dlq] = "other";
        assert_eq!(p.iter().copied().collect::<Vec<_>>(), vec!["main", "other"]);
    }

    #[test]
    fn from_fn_and_iter_mut_visit_main_then_dlq() {
        let mut p = PerSide::from_fn(|src| vec![src]);
        for v in p.iter_mut() {
            v.push(Src::Main);
        }
        assert_eq!(p[Src::Main], vec![Src::Main, Src::Main]);
        assert_eq!(p[Src::Dlq], vec![Src::Dlq, Src::Main]);
    }
}
