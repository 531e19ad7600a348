//! `braid topo [TOPO]`: print a topology as a commented topology file.
//!
//! The output is the summary (ranks, nodes, links, path classes, fingerprint)
//! as `#` comments, then the topology in the file format, so it can be saved
//! and passed back as `--topo FILE`. With no TOPO, or TOPO = `detect`, or
//! `--detect`, the local machine is detected; notes on what detection had to
//! assume follow the header as `# note:` lines.

use std::fmt;

use braid_topo::Topology;

/// Why `braid topo` failed, with the exit code cli.md assigns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopoCmdError {
    /// Both a TOPO and `--detect`: exit 2.
    Usage(String),
    /// The topology named is wrong (bad preset, malformed file, `file:line:col`
    /// in the message): exit 1.
    Input(String),
    /// The machine could not be detected (no CUDA driver, no GPU): exit 3.
    Runtime(String),
}

impl TopoCmdError {
    /// The process exit code for this error (cli.md, "Exit codes").
    pub fn exit_code(&self) -> i32 {
        match self {
            TopoCmdError::Input(_) => 1,
            TopoCmdError::Usage(_) => 2,
            TopoCmdError::Runtime(_) => 3,
        }
    }
}

impl fmt::Display for TopoCmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopoCmdError::Usage(m) | TopoCmdError::Input(m) | TopoCmdError::Runtime(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for TopoCmdError {}

/// What `braid topo [TOPO] [--detect]` prints (ending in a newline).
pub fn run(arg: Option<&str>, detect: bool) -> Result<String, TopoCmdError> {
    match (arg, detect) {
        (Some(a), true) if a != "detect" => Err(TopoCmdError::Usage(format!(
            "give either a topology (`{a}`) or --detect, not both"
        ))),
        (None, _) | (Some("detect"), _) | (_, true) => detected(),
        (Some(a), false) => Topology::from_arg(a)
            .map(|t| t.to_annotated_text())
            .map_err(|e| TopoCmdError::Input(e.to_string())),
    }
}

/// The local machine, with detection's notes after the header line.
fn detected() -> Result<String, TopoCmdError> {
    let report = braid_detect::detect_report().map_err(|e| TopoCmdError::Runtime(e.to_string()))?;
    let text = report.topology.to_annotated_text();
    let (header, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let mut out = format!("{header}\n");
    for note in &report.notes {
        out.push_str(&format!("# note: {note}\n"));
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_print_a_file_that_reads_back() {
        let out = run(Some("cluster:2x2"), false).unwrap();
        assert!(
            out.starts_with("# braid topology v1\n# topology cluster:2x2: 4 ranks on 2 nodes"),
            "{out}"
        );
        let back = Topology::parse_text("out", &out).unwrap();
        assert_eq!(back, Topology::from_arg("cluster:2x2").unwrap());
    }

    #[test]
    fn errors_carry_their_exit_codes() {
        let e = run(Some("nvswitch:0"), false).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("nvswitch:0"), "{e}");
        assert_eq!(run(Some("pcie:4"), true).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn detection_fails_cleanly_without_a_gpu() {
        if braid_detect::cuda_driver_present() {
            return; // a GPU machine: detection is tested in braid-detect
        }
        for (arg, flag) in [(None, false), (Some("detect"), false), (None, true)] {
            let e = run(arg, flag).unwrap_err();
            assert_eq!(e.exit_code(), 3);
            assert!(e.to_string().starts_with("no CUDA driver found"), "{e}");
        }
    }
}
