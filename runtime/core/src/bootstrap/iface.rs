//! The network interface the bootstrap listens on when `BRAID_SOCKET_IFNAME` or
//! `NCCL_SOCKET_IFNAME` names some ([`braid_topo::ifname::IfSpec`]'s syntax), and the
//! machine's interfaces with their addresses (`getifaddrs`).

use crate::error::{Result, RuntimeError};
use braid_topo::ifname::IfSpec;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The variables read, in order: the first one set wins.
pub const IFNAME_VARS: [&str; 2] = ["BRAID_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"];

/// One address of one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub addr: IpAddr,
    pub up: bool,
    pub loopback: bool,
}

/// Every IPv4 and IPv6 address of the machine's interfaces (IPv6 link-local addresses
/// left out: they need a scope to be used), in the order the system lists them.
pub fn list() -> Result<Vec<Iface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: an out-parameter; on success the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(RuntimeError::Bootstrap(format!(
            "cannot list the network interfaces: {}",
            std::io::Error::last_os_error()
        )));
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null sockaddr of the node; its family says which struct it is.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let addr = match family {
            libc::AF_INET => {
                // SAFETY: AF_INET: the address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: AF_INET6: the address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let a = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                if a.segments()[0] & 0xffc0 == 0xfe80 {
                    continue;
                }
                IpAddr::V6(a)
            }
            _ => continue,
        };
        // SAFETY: a NUL-terminated name of the node.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags as i32;
        out.push(Iface {
            name,
            addr,
            up: flags & libc::IFF_UP != 0,
            loopback: flags & libc::IFF_LOOPBACK != 0,
        });
    }
    // SAFETY: the list getifaddrs returned, freed once; no reference into it remains.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The interface selection the environment asks for: `(variable, spec)`, or `None`.
pub fn from_env() -> Result<Option<(&'static str, IfSpec)>> {
    for var in IFNAME_VARS {
        if let Ok(v) = std::env::var(var) {
            return IfSpec::parse(&v)
                .map(|s| Some((var, s)))
                .map_err(|e| RuntimeError::Bootstrap(format!("{var}: {e}")));
        }
    }
    Ok(None)
}

/// The address to listen on: the first interface that is up and that `spec` selects,
/// IPv4 before IPv6 (as NCCL prefers). `what` names the setting in the error.
pub fn choose(spec: &IfSpec, ifaces: &[Iface], what: &str) -> Result<Iface> {
    let selected = |v4: bool| {
        ifaces
            .iter()
            .find(|i| i.up && i.addr.is_ipv4() == v4 && spec.selects(&i.name))
    };
    if let Some(i) = selected(true).or_else(|| selected(false)) {
        return Ok(i.clone());
    }
    let mut up: Vec<&str> = Vec::new();
    for i in ifaces.iter().filter(|i| i.up) {
        if !up.contains(&i.name.as_str()) {
            up.push(&i.name);
        }
    }
    Err(RuntimeError::Bootstrap(format!(
        "{what} selects no interface that is up and has an address (up: {}); name one of \
         them, or unset it",
        if up.is_empty() {
            "none".into()
        } else {
            up.join(", ")
        }
    )))
}

/// The address this process's bootstrap sockets listen on when the environment names
/// interfaces; `None` when it does not.
pub fn listen_ip_from_env() -> Result<Option<IpAddr>> {
    let Some((var, spec)) = from_env()? else {
        return Ok(None);
    };
    let chosen = choose(&spec, &list()?, &format!("{var}={spec}"))?;
    tracing::info!(interface = %chosen.name, addr = %chosen.addr, "bootstrap interface from {var}");
    Ok(Some(chosen.addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, addr: &str, up: bool) -> Iface {
        Iface {
            name: name.into(),
            addr: addr.parse().unwrap(),
            up,
            loopback: name == "lo",
        }
    }

    #[test]
    fn the_first_selected_interface_that_is_up_ipv4_first() {
        let all = [
            iface("lo", "127.0.0.1", true),
            iface("eth0", "2001:db8::5", true),
            iface("docker0", "172.17.0.1", true),
            iface("eth0", "10.0.0.5", true),
            iface("eth1", "10.1.0.5", false),
        ];
        let pick =
            |s: &str| choose(&IfSpec::parse(s).unwrap(), &all, s).map(|i| i.addr.to_string());
        assert_eq!(pick("eth").unwrap(), "10.0.0.5");
        assert_eq!(pick("^docker,lo").unwrap(), "10.0.0.5");
        assert_eq!(pick("=lo").unwrap(), "127.0.0.1");
        assert_eq!(
            choose(&IfSpec::default_rule(), &all, "default")
                .unwrap()
                .name,
            "eth0"
        );
        let e = pick("=eth1").unwrap_err().to_string();
        assert!(
            e.contains("=eth1 selects no interface") && e.contains("(up: lo, eth0, docker0)"),
            "{e}"
        );
    }

    #[test]
    fn this_machine_lists_its_loopback_address() {
        let all = list().unwrap();
        assert!(
            all.iter()
                .any(|i| i.loopback && i.addr == IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{all:?}"
        );
    }
}
