//! Which HCAs and ports a job may use, in the syntax of `NCCL_IB_HCA` (also read as
//! `BRAID_IB_HCA`, which wins): a comma-separated list of device names, each with an
//! optional `:port` (`mlx5_0:1,mlx5_1`); names are prefixes (`mlx5` takes every `mlx5_*`)
//! unless the list starts with `=` (exact names); a list starting with `^` excludes what
//! it names instead (`^mlx5_3`, `^=mlx5_3:2`): the list syntax of `NCCL_SOCKET_IFNAME`
//! (`braid_topo::ifname`), with ports.

use braid_topo::ifname::{names, split_list, write_flags};
use std::fmt;

/// One entry of the list: a device name (prefix or exact) and, optionally, a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HcaEntry {
    pub name: String,
    pub port: Option<u8>,
}

/// A parsed `NCCL_IB_HCA` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HcaSpec {
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<HcaEntry>,
}

impl HcaSpec {
    /// Parses `text` (the variable `var`'s value, named in errors).
    pub fn parse(var: &str, text: &str) -> Result<HcaSpec, String> {
        let (exclude, exact, items) = split_list(text);
        let mut entries = Vec::new();
        for item in items {
            let (name, port) = match item.split_once(':') {
                None => (item, None),
                Some((n, p)) => match p.trim().parse::<u8>() {
                    Ok(p) if p >= 1 => (n.trim(), Some(p)),
                    _ => {
                        return Err(format!(
                            "{var}={text}: `{item}`: a port is a number from 1 (as `mlx5_0:1`)"
                        ))
                    }
                },
            };
            if name.is_empty() {
                return Err(format!("{var}={text}: `{item}` names no device"));
            }
            entries.push(HcaEntry {
                name: name.to_string(),
                port,
            });
        }
        if entries.is_empty() {
            return Err(format!(
                "{var}={text}: expected device names, as `mlx5_0:1,mlx5_1` or `^mlx5_3`"
            ));
        }
        Ok(HcaSpec {
            exclude,
            exact,
            entries,
        })
    }

    /// `BRAID_IB_HCA`, else `NCCL_IB_HCA`, else `None` (every device).
    pub fn from_env() -> Result<Option<HcaSpec>, String> {
        HcaSpec::from_vars(|k| std::env::var(k).ok())
    }

    /// [`HcaSpec::from_env`] over any source of variables (`get`: a variable's value),
    /// such as a machine description.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<HcaSpec>, String> {
        match set_var(&get, ["BRAID_IB_HCA", "NCCL_IB_HCA"]) {
            Some((var, v)) => HcaSpec::parse(var, &v).map(Some),
            None => Ok(None),
        }
    }

    /// Whether some port of `device` may be used.
    pub fn selects_device(&self, device: &str) -> bool {
        (1..=u8::MAX).any(|p| self.selects(device, p))
    }

    /// Whether port `port` of device `device` may be used.
    pub fn selects(&self, device: &str, port: u8) -> bool {
        let named = self
            .entries
            .iter()
            .any(|e| names(self.exact, &e.name, device) && e.port.is_none_or(|p| p == port));
        named != self.exclude
    }
}

impl fmt::Display for HcaSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_flags(f, self.exclude, self.exact)?;
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&e.name)?;
            if let Some(p) = e.port {
                write!(f, ":{p}")?;
            }
        }
        Ok(())
    }
}

/// The first of `vars` that `get` has with a value that is not blank, with its value.
fn set_var<'a>(
    get: &impl Fn(&str) -> Option<String>,
    vars: [&'a str; 2],
) -> Option<(&'a str, String)> {
    vars.into_iter()
        .find_map(|k| get(k).filter(|v| !v.trim().is_empty()).map(|v| (k, v)))
}

/// Whether `BRAID_IB_DISABLE` (else `NCCL_IB_DISABLE`) turns InfiniBand off: set to
/// anything but empty or `0`.
pub fn ib_disabled() -> bool {
    ib_disabled_in(|k| std::env::var(k).ok())
}

/// [`ib_disabled`] over any source of variables.
pub fn ib_disabled_in(get: impl Fn(&str) -> Option<String>) -> bool {
    set_var(&get, ["BRAID_IB_DISABLE", "NCCL_IB_DISABLE"]).is_some_and(|(_, v)| v.trim() != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_ports_exact_names_and_exclusions() {
        let s = HcaSpec::parse("NCCL_IB_HCA", "mlx5_0:1, mlx5_1").unwrap();
        assert!(s.selects("mlx5_0", 1) && !s.selects("mlx5_0", 2));
        assert!(s.selects("mlx5_1", 1) && s.selects("mlx5_1", 2));
        // Prefixes: mlx5_1 also names mlx5_10.
        assert!(s.selects("mlx5_10", 1) && !s.selects("mlx5_2", 1));
        let exact = HcaSpec::parse("NCCL_IB_HCA", "=mlx5_1").unwrap();
        assert!(exact.selects("mlx5_1", 1) && !exact.selects("mlx5_10", 1));
        let not = HcaSpec::parse("NCCL_IB_HCA", "^mlx5_3").unwrap();
        assert!(!not.selects("mlx5_3", 1) && not.selects("mlx5_0", 1));
        let not_port = HcaSpec::parse("NCCL_IB_HCA", "^=mlx5_3:2").unwrap();
        assert!(not_port.selects("mlx5_3", 1) && !not_port.selects("mlx5_3", 2));
        assert_eq!(not_port.to_string(), "^=mlx5_3:2");
        let all = HcaSpec::parse("NCCL_IB_HCA", "mlx5").unwrap();
        assert!(all.selects("mlx5_7", 1) && !all.selects("rxe0", 1));
    }

    #[test]
    fn malformed_lists_name_the_variable() {
        for bad in ["", " , ", "^", "mlx5_0:x", "mlx5_0:0", ":1", "^=,"] {
            let e = HcaSpec::parse("BRAID_IB_HCA", bad).unwrap_err();
            assert!(e.starts_with(&format!("BRAID_IB_HCA={bad}")), "{e}");
        }
    }

    #[test]
    fn the_disable_switch_takes_any_value_but_empty_and_zero() {
        let with = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!ib_disabled_in(with(&[])));
        assert!(!ib_disabled_in(with(&[("NCCL_IB_DISABLE", "0")])));
        assert!(!ib_disabled_in(with(&[("NCCL_IB_DISABLE", " ")])));
        assert!(ib_disabled_in(with(&[("NCCL_IB_DISABLE", "1")])));
        assert!(ib_disabled_in(with(&[("NCCL_IB_DISABLE", "yes")])));
        // BRAID_IB_DISABLE wins; a blank one defers to NCCL's.
        assert!(!ib_disabled_in(with(&[
            ("BRAID_IB_DISABLE", "0"),
            ("NCCL_IB_DISABLE", "1")
        ])));
        assert!(ib_disabled_in(with(&[
            ("BRAID_IB_DISABLE", ""),
            ("NCCL_IB_DISABLE", "1")
        ])));
        let spec = HcaSpec::from_vars(with(&[("BRAID_IB_HCA", "^mlx5_0:2"), ("NCCL_IB_HCA", "x")]))
            .unwrap()
            .unwrap();
        assert_eq!(spec.to_string(), "^mlx5_0:2");
        assert!(spec.selects_device("mlx5_0") && !spec.selects("mlx5_0", 2));
        assert_eq!(HcaSpec::from_vars(with(&[])), Ok(None));
    }
}
