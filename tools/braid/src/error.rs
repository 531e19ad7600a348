//! The CLI's one error type, carrying the exit code of cli.md.

use std::fmt;

/// A failed command: what to print on stderr and the exit code.
#[derive(Debug)]
pub enum CliError {
    /// Exit 1: the input is wrong. The text is already rendered (with file:line:col).
    Input(String),
    /// Exit 2: the command line is wrong.
    Usage(String),
    /// Exit 3: a run-time failure (no GPU, a transport, a peer, a timeout).
    Runtime(String),
    /// Exit 1 with a report on stdout: the command ran and found problems (`braid doctor`).
    Findings(String),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Input(_) => 1,
            CliError::Usage(_) => 2,
            CliError::Runtime(_) => 3,
            CliError::Findings(_) => 1,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Input(s)
            | CliError::Usage(s)
            | CliError::Runtime(s)
            | CliError::Findings(s) => f.write_str(s.trim_end()),
        }
    }
}

impl From<crate::cmd_topo::TopoCmdError> for CliError {
    fn from(e: crate::cmd_topo::TopoCmdError) -> CliError {
        let text = format!("error: {e}");
        match e.exit_code() {
            1 => CliError::Input(text),
            2 => CliError::Usage(text),
            _ => CliError::Runtime(text),
        }
    }
}

impl From<crate::cmd_verify::VerifyCliError> for CliError {
    fn from(e: crate::cmd_verify::VerifyCliError) -> CliError {
        match e.exit_code {
            1 => CliError::Input(e.message),
            2 => CliError::Usage(e.message),
            _ => CliError::Runtime(e.message),
        }
    }
}
