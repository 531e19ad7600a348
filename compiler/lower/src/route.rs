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

use braid_topo::{PathClass, Topology};

pub use braid_plan::Transport;

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

impl ConnectionRoute {
    /// The plan's record of this connection.
    pub fn annotation(&self) -> braid_plan::Connection {
        braid_plan::Connection {
            sender: self.sender,
            receiver: self.receiver,
            channel: self.channel,
            path: self.route.class.as_str().to_string(),
            transport: self.route.transport,
        }
    }
}
