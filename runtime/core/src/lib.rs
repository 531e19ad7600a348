//! The Braid runtime: communicators (shaped after NCCL's), bootstrap, the plan registry,
//! and the host backend, which executes plans on CPU threads exactly as specified (blocks,
//! dependencies, bounded links) so that it is both the reference the GPU backend is
//! checked against and a runtime that needs no GPU.
//!
//! The runtime never parses source: plans come compiled (from the library, from files,
//! from `BRAID_PLANS`), and each is verified before it runs.

pub mod bench;
pub mod bootstrap;
pub mod call;
pub mod comm;
mod cpus;
pub mod device_comm;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod fabric;
mod futex;
pub mod geometry;
pub mod host_engine;
pub mod launcher;
pub mod net_fabric;
pub mod p2p;
pub mod policy;
pub mod reduce;
pub mod reference;
pub mod registry;
pub mod selection;
pub mod selfcheck;
pub mod shm_link;
pub mod step_clock;
pub mod tcp_link;
pub mod transport;
pub mod workers;

pub use comm::{Buffers, Communicator};
pub use cpus::binds_threads;
pub use error::{Result, RuntimeError};
