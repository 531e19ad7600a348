//! `--topo TOPO` to a topology: presets and files through braid-topo, `detect` through
//! braid-detect.

use crate::error::CliError;
use braid_ir::Shape;
use braid_topo::{TopoError, Topology};

pub fn load(arg: &str) -> Result<Topology, CliError> {
    match Topology::from_arg(arg) {
        Ok(t) => Ok(t),
        Err(TopoError::DetectRequested) => {
            braid_detect::detect().map_err(|e| CliError::Runtime(format!("--topo detect: {e}")))
        }
        // A file that does not parse is bad input; a name that is neither a preset nor a
        // file is a usage error.
        Err(e @ (TopoError::Parse { .. } | TopoError::Invalid(_) | TopoError::Io { .. })) => {
            Err(CliError::Input(format!("error: {e}")))
        }
        Err(e) => Err(CliError::Usage(format!("error: --topo: {e}"))),
    }
}

/// The `N`, `NODES` and `G` a program sees on `topo`.
pub fn shape(topo: &Topology) -> Shape {
    Shape {
        n: topo.n_ranks(),
        nodes: topo.n_nodes(),
        g: topo.uniform_g(),
    }
}
