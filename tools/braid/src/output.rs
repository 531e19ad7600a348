//! Writing output files so that a failed command leaves nothing half-written.

use crate::error::CliError;
use std::path::Path;

/// Writes `text` to a temporary file beside `path`, then renames it into place.
pub fn write_atomically(path: &Path, text: &str) -> Result<(), CliError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let result = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path));
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::Runtime(format!("error: cannot write {}: {e}", path.display()))
    })
}
