//! Plain-data IR shared by every Braid pass.
//!
//! Nothing here parses source, talks to a GPU or knows a topology graph: these are the
//! types that flow between passes (and, with serde, between processes).
//!
//! * [`collective`]: the six collectives, call modes, protocols.
//! * [`layout`]: which buffers exist on which rank, their chunk counts and how in-place
//!   calls alias them onto physical locations.
//! * [`value`]: the symbolic value a location holds (a multiset of input contributions)
//!   and each collective's postcondition.
//! * [`ops`]: a program instantiated for one shape: a flat list of chunk operations, each
//!   carrying the source span and loop bindings that produced it.

pub mod collective;
pub mod layout;
pub mod ops;
pub mod value;

pub use collective::{Collective, Mode, ModeSet, Protocol};
pub use layout::{Buf, Layout, LocId, Shape};
pub use ops::{Binding, Op, OpId, OpKind, OpProgram, Ref, Span};
pub use value::{Contribs, Value};
