//! Connections between ranks, as the executor sees them: one direction of one connection
//! is a [`Link`], a bounded FIFO of slices. A sender blocks while `slots` slices are in
//! flight, which is the back-pressure a GPU connection's receive slots give.

use crate::error::Result;
use std::time::Instant;

/// One direction of a connection (sender rank, receiver rank, channel).
pub trait Link: Send + Sync {
    /// Queues one slice; blocks while the FIFO is full. Fails on abort, on a dead peer,
    /// or when `deadline` passes.
    fn send(&self, slice: &[u8], deadline: Instant) -> Result<()>;
    /// Takes the next slice into `buf`, whose length must equal the slice's.
    fn recv(&self, buf: &mut [u8], deadline: Instant) -> Result<()>;
}
