//! Paths: which transport each connection uses.
//!
//! A connection is `(sender, receiver, channel)`. Its data takes the best path the topology
//! offers between the two GPUs (braid-topo picks it the way NCCL does); lowering records
//! that path's class and the transport the runtime should open:
//!
//! | path | transport |
//! |---|---|
//! | NVL (NVLink, NVSwitch) | `p2p-nvlink` |
//! | PIX, PXB, or PHB where the topology allows P2P | `p2p-pcie` |
//! | PHB without P2P, SYS (across CPU sockets) | `host-staged`: through pinned host memory |
//! | NET (another node) | `net` |
//!
//! Routing through an intermediate GPU is not done: every transfer is one hop, as written.

use crate::moves::Moves;
use braid_topo::{PathClass, Topology};
use std::collections::BTreeSet;
use std::fmt;

/// How a connection's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    P2pNvlink,
    P2pPcie,
    HostStaged,
    Net,
}

impl Transport {
    /// The name written in plans.
    pub fn name(self) -> &'static str {
        match self {
            Transport::P2pNvlink => "p2p-nvlink",
            Transport::P2pPcie => "p2p-pcie",
            Transport::HostStaged => "host-staged",
            Transport::Net => "net",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The path between two ranks and the transport it calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub class: PathClass,
    pub transport: Transport,
}

/// The route from `a` to `b` on `topo` (see the module table).
pub fn route(topo: &Topology, a: u32, b: u32) -> Route {
    let class = topo.class(a, b);
    let transport = match class {
        PathClass::Net => Transport::Net,
        PathClass::Nvl => Transport::P2pNvlink,
        _ if topo.p2p_direct(a, b) => Transport::P2pPcie,
        _ => Transport::HostStaged,
    };
    Route { class, transport }
}

/// One connection a plan uses and its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionRoute {
    pub sender: u32,
    pub receiver: u32,
    pub channel: u32,
    pub route: Route,
}

/// Every connection the transfers of `moves` use, sorted by (sender, receiver, channel).
pub fn connections(moves: &Moves, topo: &Topology) -> Vec<ConnectionRoute> {
    let seen: BTreeSet<(u32, u32, u32)> = moves
        .moves
        .iter()
        .filter_map(|m| m.transfer().map(|t| (t.from, t.to, m.channel)))
        .collect();
    seen.into_iter()
        .map(|(sender, receiver, channel)| ConnectionRoute {
            sender,
            receiver,
            channel,
            route: route(topo, sender, receiver),
        })
        .collect()
}
