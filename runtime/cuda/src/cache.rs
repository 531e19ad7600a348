//! The on-disk cache of compiled kernels. NVRTC takes a second or more per kernel and a
//! program runs the same kernels again and again, so the machine code is kept under
//! `BRAID_CACHE_DIR`, else `$XDG_CACHE_HOME/braid`, else `~/.cache/braid`, keyed by a hash
//! of everything that changes it: source, target architecture and NVRTC version. Any
//! failure to read or write the cache just means compiling again.

use std::path::{Path, PathBuf};

/// FNV-1a over the parts, each followed by a separator byte: stable across Rust versions
/// and platforms (the standard library's hasher is not), which a disk cache needs.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The cache key of a compilation, as a file-name-safe string.
pub fn key(source: &str, arch: &str, nvrtc_version: (i32, i32)) -> String {
    let v = format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1);
    // Two independent 64-bit hashes make an accidental collision negligible.
    let a = fnv1a(&[source.as_bytes(), arch.as_bytes(), v.as_bytes()]);
    let b = fnv1a(&[v.as_bytes(), arch.as_bytes(), source.as_bytes(), b"braid"]);
    format!("{a:016x}{b:016x}")
}

/// The cache directory from the environment's values (`BRAID_CACHE_DIR`,
/// `XDG_CACHE_HOME`, `HOME`); `None` when none is usable.
pub fn dir_from(
    braid: Option<&str>,
    xdg_cache_home: Option<&str>,
    home: Option<&str>,
) -> Option<PathBuf> {
    let usable = |s: &&str| !s.is_empty() && Path::new(s).is_absolute();
    if let Some(b) = braid.filter(usable) {
        return Some(PathBuf::from(b));
    }
    if let Some(x) = xdg_cache_home.filter(usable) {
        return Some(Path::new(x).join("braid"));
    }
    home.filter(|s| !s.is_empty())
        .map(|h| Path::new(h).join(".cache").join("braid"))
}

/// The cache directory of this process.
pub fn dir() -> Option<PathBuf> {
    let var = |n| std::env::var(n).ok();
    dir_from(
        var("BRAID_CACHE_DIR").as_deref(),
        var("XDG_CACHE_HOME").as_deref(),
        var("HOME").as_deref(),
    )
}

/// The cached machine code for `key`, if any.
pub fn load(dir: &Path, key: &str) -> Option<Vec<u8>> {
    std::fs::read(dir.join(format!("{key}.cubin")))
        .ok()
        .filter(|b| !b.is_empty())
}

/// Stores machine code for `key`; written to a temporary name and renamed, so a reader
/// never sees a partial file. Errors are ignored (the cache is an optimisation).
pub fn store(dir: &Path, key: &str, cubin: &[u8]) {
    let tmp = dir.join(format!("{key}.{}.tmp", std::process::id()));
    let ok = std::fs::create_dir_all(dir).is_ok() && std::fs::write(&tmp, cubin).is_ok();
    if !ok || std::fs::rename(&tmp, dir.join(format!("{key}.cubin"))).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_every_input() {
        let k = key("src", "sm_90", (13, 0));
        assert_eq!(k, key("src", "sm_90", (13, 0)));
        assert_eq!(k.len(), 32);
        assert!(k.chars().all(|c| c.is_ascii_hexdigit()));
        for other in [
            key("src ", "sm_90", (13, 0)),
            key("src", "sm_80", (13, 0)),
            key("src", "sm_90", (13, 1)),
        ] {
            assert_ne!(k, other);
        }
        // Part boundaries matter: moving bytes between parts changes the key.
        assert_ne!(key("srcs", "m_90", (1, 0)), key("src", "sm_90", (1, 0)));
    }

    #[test]
    fn dir_prefers_braid_then_xdg_then_home() {
        assert_eq!(
            dir_from(Some("/b"), Some("/x"), Some("/h")),
            Some(PathBuf::from("/b"))
        );
        assert_eq!(
            dir_from(None, Some("/x"), Some("/h")),
            Some(PathBuf::from("/x/braid"))
        );
        assert_eq!(
            dir_from(Some("rel"), Some(""), Some("/h")),
            Some(PathBuf::from("/h/.cache/braid"))
        );
        assert_eq!(dir_from(None, None, None), None);
    }

    #[test]
    fn store_then_load_round_trips() {
        let dir = std::env::temp_dir().join(format!("braid-cuda-cache-{}", std::process::id()));
        assert_eq!(load(&dir, "k"), None);
        store(&dir, "k", b"\x7fELF");
        assert_eq!(load(&dir, "k").as_deref(), Some(&b"\x7fELF"[..]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
