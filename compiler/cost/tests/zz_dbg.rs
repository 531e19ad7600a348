use braid_ir::{Collective, Mode};
#[test]
fn dbg() {
    for n in [2u32, 8] {
        let topo = braid_topo::Topology::from_arg(&format!("nvswitch:{n}")).unwrap();
        let lib = braid_library::Library::new(topo.clone());
        let plans = lib.plans(Collective::Allreduce, None);
        let cands: Vec<braid_cost::Candidate> = plans
            .iter()
            .map(|p| braid_cost::Candidate {
                plan: p,
                origin: "s".into(),
            })
            .collect();
        for mode in [Mode::OutOfPlace, Mode::InPlace] {
            for bytes in [8u64, 64 << 20] {
                let req = braid_cost::Request {
                    collective: Collective::Allreduce,
                    root: None,
                    mode,
                    bytes,
                    elem: 4,
                    direct: true,
                };
                for r in braid_cost::rank(&cands, &topo, &braid_cost::Profile::shared_gpu(), &req) {
                    eprintln!(
                        "{n} {mode:?} {bytes} {} x{} {:?} {:?}",
                        r.name,
                        r.replicas,
                        r.protocol,
                        r.result.as_ref().map_err(|e| e.to_string())
                    );
                }
            }
        }
    }
}
