//! `--topo TOPO`: a preset, `detect`, or a file.

use std::io::Read;
use std::path::Path;

use crate::{Preset, TopoError, Topology};

/// The largest topology file read: the 4096-rank `cluster:512x8` takes 1.7 MB.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

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

    /// Reads a topology file; the topology is named by the path as given. Files
    /// larger than [`MAX_FILE_BYTES`] are refused after reading that much (so
    /// `/dev/zero` is an error, not a hang), and text that is not UTF-8 is an
    /// error at the line and column of its first bad byte.
    pub fn read_file(path: &Path) -> Result<Topology, TopoError> {
        let shown = path.display().to_string();
        let io = |message: String| TopoError::Io {
            path: shown.clone(),
            message,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| io(e.to_string()))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(io(format!(
                "larger than {MAX_FILE_BYTES} bytes, which no topology needs"
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let col = std::str::from_utf8(&good[start..]).map_or(1, |s| s.chars().count() + 1);
            TopoError::Parse {
                file: shown.clone(),
                line,
                col,
                message: format!(
                    "not UTF-8 text (byte 0x{:02x}); a topology file is text",
                    e.as_bytes()[good.len()]
                ),
            }
        })?;
        Topology::parse_text(&shown, &text)
    }
}
