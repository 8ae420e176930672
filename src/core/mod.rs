//! The pure core: no I/O, no clocks of its own. Everything here is decided from its
//! inputs and tested exhaustively; the actors only apply the decisions.

pub mod backoff;
pub mod classify;
pub mod envelope;
pub mod event;
pub mod offsets;
pub mod ordering;
pub mod restart;
