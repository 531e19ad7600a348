//! Properties over every preset shape.

use proptest::prelude::*;

use crate::{PathClass, Preset, Topology};

fn presets() -> impl Strategy<Value = Preset> {
    prop_oneof![
        (1u32..=16).prop_map(|gpus| Preset::NvSwitch { gpus }),
        (1u32..=16).prop_map(|gpus| Preset::Pcie { gpus }),
        (1u32..=6, 1u32..=8).prop_map(|(nodes, gpus_per_node)| Preset::Cluster {
            nodes,
            gpus_per_node
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn presets_round_trip_through_text(preset in presets()) {
        let t = Topology::from_arg(&preset.to_string()).unwrap();
        let text = t.to_text();
        let back = Topology::parse_text("back", &text).unwrap();
        prop_assert_eq!(&back, &t);
        prop_assert_eq!(back.to_text(), text);
        prop_assert_eq!(back.fingerprint(), t.fingerprint());
    }

    #[test]
    fn presets_have_the_classes_of_their_kind(preset in presets(), a in 0u32..48, b in 0u32..48) {
        let t = preset.build();
        let (a, b) = (a % t.n_ranks(), b % t.n_ranks());
        prop_assert_eq!(u64::from(t.n_ranks()), preset.n_ranks());
        let class = t.path(a, b).class;
        let same_node = t.node_of(a) == t.node_of(b);
        match preset {
            Preset::NvSwitch { .. } => prop_assert_eq!(class, PathClass::Nvl),
            Preset::Cluster { gpus_per_node, .. } => {
                prop_assert_eq!(t.node_of(a), a / gpus_per_node);
                prop_assert_eq!(class, if same_node { PathClass::Nvl } else { PathClass::Net });
            }
            Preset::Pcie { .. } => {
                prop_assert!(a == b || matches!(class, PathClass::Pix | PathClass::Phb | PathClass::Sys));
                let socket = |r| t.gpu(r).numa;
                prop_assert_eq!(class == PathClass::Sys, socket(a) != socket(b));
            }
        }
        prop_assert_eq!(t.p2p_direct(a, b), class <= PathClass::Pxb);
    }
}
