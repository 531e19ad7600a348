//! `--topo TOPO`: a preset, `detect`, or a file.

use std::path::Path;

use crate::{Preset, TopoError, Topology};

impl Topology {
    /// The topology `--topo arg` names: a preset (`nvswitch:8`, `pcie:4`,
    /// `cluster:2x8`) or the path of a topology file.
    ///
    /// `detect` is refused with [`TopoError::DetectRequested`]: detecting means
    /// loading the CUDA driver, which this crate never does; the caller runs
    /// `braid_detect::detect()` instead. A preset-looking argument wins over a
    /// file of the same name.
    pub fn from_arg(arg: &str) -> Result<Topology, TopoError> {
        if arg == "detect" {
            return Err(TopoError::DetectRequested);
        }
        if let Some(preset) = Preset::parse(arg)? {
            return Ok(preset.build());
        }
        let path = Path::new(arg);
        if path.exists() {
            return Topology::read_file(path);
        }
        match arg.split_once(':') {
            Some((kind, _))
                if !kind.is_empty()
                    && kind
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                Err(TopoError::BadPreset {
                    arg: arg.to_string(),
                    reason: format!("unknown kind `{kind}`"),
                })
            }
            _ => Err(TopoError::Unrecognized {
                arg: arg.to_string(),
            }),
        }
    }

    /// Reads a topology file; the topology is named by the path as given.
    pub fn read_file(path: &Path) -> Result<Topology, TopoError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TopoError::Io {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        Topology::parse_text(&shown, &text)
    }
}
