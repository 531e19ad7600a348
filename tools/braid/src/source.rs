//! Reading and checking a `.braid` file: the front half every subcommand shares.

use crate::error::CliError;
use braid_lang::{ast, render, SourceFile};
use std::path::Path;

/// A parsed, statically checked program file.
pub struct Program {
    pub source: SourceFile,
    pub file: ast::File,
}

impl Program {
    /// Reads and checks `path`; any diagnostic makes this an input error (exit 1).
    pub fn load(path: &Path) -> Result<Program, CliError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Input(format!("error: cannot read {}: {e}", path.display())))?;
        let source = SourceFile::new(path.display().to_string(), text);
        let (file, diags) = braid_lang::parse_and_check(&source.text);
        if !diags.is_empty() {
            return Err(CliError::Input(render(&diags, &source)));
        }
        if file.algorithms.is_empty() {
            return Err(CliError::Input(format!(
                "error: {}: the file defines no algorithm",
                source.name
            )));
        }
        tracing::info!(file = %source.name, algorithms = file.algorithms.len(), "parsed");
        Ok(Program { source, file })
    }

    /// The algorithms selected by `--algorithm` (all when it is absent).
    pub fn select(&self, name: Option<&str>) -> Result<Vec<&ast::Algorithm>, CliError> {
        match name {
            None => Ok(self.file.algorithms.iter().collect()),
            Some(n) => match self.file.algorithms.iter().find(|a| a.name.name == n) {
                Some(a) => Ok(vec![a]),
                None => {
                    let names: Vec<&str> = self
                        .file
                        .algorithms
                        .iter()
                        .map(|a| a.name.name.as_str())
                        .collect();
                    Err(CliError::Input(format!(
                        "error: {}: no algorithm named `{n}` (the file defines: {})",
                        self.source.name,
                        names.join(", ")
                    )))
                }
            },
        }
    }

    pub fn render(&self, diags: &[braid_lang::Diagnostic]) -> String {
        render(diags, &self.source)
    }

    pub fn line_of(&self, offset: u32) -> usize {
        self.source.line_col(offset).0
    }
}
