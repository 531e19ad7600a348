//! The structures the kernel reads (`kernels_templates/braid_kernel.cuh`) have exactly the
//! layouts the host writes (`program::LAYOUT`, `engine::LAUNCH_LAYOUT`, `p2p::P2P_LAYOUT`, `flat::FLAT_LAYOUT`). The structures are
//! plain data of 32- and 64-bit integers, laid out alike by the host's C compiler and by
//! NVRTC for a 64-bit GPU, so the test copies their definitions out of the template into
//! a C file of static assertions and compiles it with the host's C compiler (no CUDA
//! needed): a field moved on one side only fails here. A shifted offset is caught too,
//! so the check can fail.

use std::process::Command;

const STRUCTS: [&str; 16] = [
    "End",
    "BlockDesc",
    "StepDesc",
    "StepDeps",
    "DepDesc",
    "ChainOp",
    "Table",
    "CallArgs",
    "Launch",
    "P2pRank",
    "P2pLane",
    "P2pTask",
    "P2pLaunch",
    "FlatTask",
    "FlatOp",
    "FlatHead",
];

/// The text of `struct NAME { ... };` in the template.
fn definition(src: &str, name: &str) -> String {
    let head = format!("struct {name} {{");
    let start = src
        .find(&head)
        .unwrap_or_else(|| panic!("no `{head}` in braid_kernel.cuh"));
    let end = src[start..].find("\n};").expect("struct end") + start + 3;
    src[start..end].to_string()
}

fn c_source(tamper: bool) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../kernels_templates/braid_kernel.cuh"
    );
    let src = std::fs::read_to_string(path).unwrap();
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdint.h>\ntypedef uint32_t u32;\ntypedef uint64_t u64;\n",
    );
    c += &format!(
        "#define BRAID_MAX_LOCAL {}\n#define BRAID_LANES {}\n#define BRAID_P2P_LANES {}\n#define BRAID_P2P_TASKS {}\n",
        braid_cuda::kernel::MAX_LOCAL,
        braid_cuda::kernel::LANES,
        braid_cuda::kernel::P2P_LANES,
        braid_cuda::kernel::P2P_TASKS
    );
    for s in STRUCTS {
        c += &format!("typedef struct {s} {s};\n");
    }
    for s in STRUCTS {
        c += &definition(&src, s);
        c += "\n";
    }
    let fields = braid_cuda::program::LAYOUT
        .iter()
        .chain(braid_cuda::engine::LAUNCH_LAYOUT)
        .chain(braid_cuda::p2p::P2P_LAYOUT)
        .chain(braid_cuda::flat::FLAT_LAYOUT);
    for (i, (strukt, field, offset)) in fields.enumerate() {
        assert!(
            STRUCTS.contains(strukt),
            "{strukt} is not copied from the template"
        );
        let offset = offset + usize::from(tamper && i == 3);
        let what = if *field == "sizeof" {
            format!("sizeof({strukt})")
        } else {
            format!("offsetof({strukt}, {field})")
        };
        c += &format!("_Static_assert({what} == {offset}, \"{strukt}.{field} is not at byte {offset} as the host writes it\");\n");
    }
    // The flags the host sets in these structures, and the flat launch's argument sizes,
    // have the kernel's values.
    for (name, value) in [
        ("GPU_SCOPE", braid_cuda::program::GPU_SCOPE),
        ("NET", braid_cuda::program::NET),
        ("PUBLISH", braid_cuda::program::PUBLISH),
        ("FLAT_WORDS_S", braid_cuda::flat::WORDS_S as u32),
        ("FLAT_WORDS_M", braid_cuda::flat::WORDS_M as u32),
        ("FLAT_WORDS_L", braid_cuda::flat::WORDS_L as u32),
    ] {
        let head = format!("constexpr u32 {name} = ");
        let at = src
            .find(&head)
            .unwrap_or_else(|| panic!("no `{head}` in braid_kernel.cuh"))
            + head.len();
        let expr = &src[at..at + src[at..].find(';').expect("constant's end")];
        let value = value + u32::from(tamper && name == "NET");
        c += &format!(
            "_Static_assert(({expr}) == {value}u, \"{name} is not {value} as the host writes it\");\n"
        );
    }
    c
}

fn compile(c: &str, name: &str) -> std::process::Output {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join(format!("{name}-{}.c", std::process::id()));
    std::fs::write(&file, c).unwrap();
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-fsyntax-only"])
        .arg(&file)
        .output()
        .expect("a C compiler (cc, or CC)");
    let _ = std::fs::remove_file(&file);
    out
}

#[test]
fn the_kernel_structures_have_the_host_layout() {
    let out = compile(&c_source(false), "layout");
    assert!(
        out.status.success(),
        "the kernel's structures differ from the host's layout:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = compile(&c_source(true), "layout-tampered");
    assert!(!bad.status.success(), "a shifted offset passed");
    let why = String::from_utf8_lossy(&bad.stderr);
    assert!(why.contains("is not at byte"), "{why}");
    assert!(why.contains("NET is not"), "{why}");
}
