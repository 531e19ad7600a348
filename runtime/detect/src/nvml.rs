//! NVLinks, from NVML (`libnvidia-ml.so.1`, loaded at run time).
//!
//! As NCCL does: probe all 18 links of each GPU, keep the active ones, and
//! name the far end by its PCI bus id (another GPU's, or an NVSwitch's).

use nvml_wrapper::Nvml;

use crate::facts::NvLinkFacts;
use crate::sysfs::normalize_bus_id;

/// Links probed per GPU: NVML's `NVML_NVLINK_MAX_LINKS`.
const MAX_LINKS: u32 = 18;

/// The active NVLinks of each GPU of `buses` (in that order), or why NVML
/// could not tell.
pub fn nvlinks(buses: &[String]) -> Result<Vec<Vec<NvLinkFacts>>, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML unavailable ({e})"))?;
    buses
        .iter()
        .map(|bus| {
            let dev = nvml
                .device_by_pci_bus_id(bus.as_str())
                .map_err(|e| format!("NVML does not know GPU {bus} ({e})"))?;
            let mut links = Vec::new();
            for l in 0..MAX_LINKS {
                let link = dev.link_wrapper_for(l);
                // Links a GPU does not have answer "not supported" or "invalid argument".
                if !link.is_active().unwrap_or(false) {
                    continue;
                }
                let remote_bus = link
                    .remote_pci_info()
                    .ok()
                    .and_then(|info| normalize_bus_id(&info.bus_id));
                let gen = link.version().unwrap_or(0);
                links.push(NvLinkFacts { remote_bus, gen });
            }
            Ok(links)
        })
        .collect()
}
