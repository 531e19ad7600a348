//! The Braid runtime.

pub mod error;
pub mod transport;

pub use error::{Result, RuntimeError};
