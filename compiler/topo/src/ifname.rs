//! Which network interfaces a job may use, in the syntax of `NCCL_SOCKET_IFNAME` (also
//! read as `BRAID_SOCKET_IFNAME`): a comma-separated list of name prefixes (`eth,ib`);
//! `^` in front excludes them instead (`^docker,lo`); `=` in front makes the names exact
//! (`=eth0`). Pure logic: listing the machine's interfaces is the runtime's business.

use std::fmt;

/// A parsed `NCCL_SOCKET_IFNAME` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfSpec {
    pub exclude: bool,
    pub exact: bool,
    pub names: Vec<String>,
}

/// NCCL's list syntax, shared by its interface and HCA variables: a leading `^`
/// (exclude what the list names), then a leading `=` (names are exact, not prefixes),
/// then comma-separated items, trimmed, empty ones dropped.
pub fn split_list(text: &str) -> (bool, bool, Vec<&str>) {
    let t = text.trim();
    let (exclude, rest) = match t.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let (exact, rest) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let items = rest
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    (exclude, exact, items)
}

/// Whether `pattern` names `name`: the same name when `exact`, else a prefix of it.
pub fn names(exact: bool, pattern: &str, name: &str) -> bool {
    if exact {
        name == pattern
    } else {
        name.starts_with(pattern)
    }
}

/// The list's leading `^` and `=`, as [`split_list`] reads them.
pub fn write_flags(f: &mut fmt::Formatter<'_>, exclude: bool, exact: bool) -> fmt::Result {
    if exclude {
        f.write_str("^")?;
    }
    if exact {
        f.write_str("=")?;
    }
    Ok(())
}

impl IfSpec {
    /// Parses `text`; an empty list is an error (it would select nothing, or everything).
    pub fn parse(text: &str) -> Result<IfSpec, String> {
        let (exclude, exact, items) = split_list(text);
        let names: Vec<String> = items.into_iter().map(String::from).collect();
        if names.is_empty() {
            return Err(format!(
                "{text:?} names no interface (a list of name prefixes, `^` to exclude, `=` for exact names)"
            ));
        }
        Ok(IfSpec {
            exclude,
            exact,
            names,
        })
    }

    /// NCCL's choice when nothing is set: anything but Docker's bridges and loopback.
    pub fn default_rule() -> IfSpec {
        IfSpec {
            exclude: true,
            exact: false,
            names: vec!["docker".into(), "lo".into()],
        }
    }

    /// Whether the interface called `name` is selected.
    pub fn selects(&self, name: &str) -> bool {
        let named = self.names.iter().any(|p| names(self.exact, p, name));
        named != self.exclude
    }
}

impl fmt::Display for IfSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_flags(f, self.exclude, self.exact)?;
        f.write_str(&self.names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_exclusions_and_exact_names() {
        let s = IfSpec::parse("eth,ib").unwrap();
        assert!(s.selects("eth0") && s.selects("ib1") && !s.selects("lo") && !s.selects("veth0"));
        let s = IfSpec::parse("^docker,lo").unwrap();
        assert!(s.selects("eth0") && !s.selects("docker0") && !s.selects("lo"));
        let s = IfSpec::parse("=eth0").unwrap();
        assert!(s.selects("eth0") && !s.selects("eth01"));
        let s = IfSpec::parse("^=eth0").unwrap();
        assert!(!s.selects("eth0") && s.selects("eth01"));
        assert_eq!(s.to_string(), "^=eth0");
        assert!(IfSpec::default_rule().selects("ens5") && !IfSpec::default_rule().selects("lo"));
    }

    #[test]
    fn an_empty_list_is_refused() {
        for bad in ["", "^", "=", " , "] {
            let e = IfSpec::parse(bad).unwrap_err();
            assert!(e.contains("names no interface"), "{bad:?}: {e}");
        }
    }
}
