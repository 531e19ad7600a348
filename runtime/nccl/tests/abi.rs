//! The library is NCCL 2.28.9's ABI: it defines every symbol NCCL's libnccl.so.2 exports
//! (the list in tests/nccl/abi-2.28.9.txt), answers NCCL's version, and its header
//! spells NCCL's enum values and struct layouts (checked by a C program that must
//! compile, and by the Rust side's own layouts).

mod support;

use std::ffi::c_int;
use std::time::Duration;

fn abi_list() -> Vec<String> {
    let path = support::crate_dir().join("../../tests/nccl/abi-2.28.9.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut names = Vec::new();
    let mut in_exports = false;
    for line in text.lines() {
        if line.starts_with("## ") {
            in_exports = line.contains("exported by");
            continue;
        }
        let l = line.trim();
        if in_exports && l.starts_with("nccl") {
            names.push(l.split_whitespace().next().unwrap().to_string());
        }
    }
    names
}

#[test]
fn defines_every_symbol_nccls_library_exports() {
    let names = abi_list();
    assert!(
        names.len() >= 50,
        "the ABI list has only {} names",
        names.len()
    );
    let path = support::built_library();
    // SAFETY: loading the library under test; its initialisers only set up statics.
    let lib = unsafe { libloading::Library::new(&path) }.unwrap();
    let missing: Vec<&String> = names
        .iter()
        // SAFETY: only the symbol's presence is checked.
        .filter(|n| unsafe { lib.get::<*const ()>(n.as_bytes()) }.is_err())
        .collect();
    assert!(missing.is_empty(), "libnccl.so lacks {missing:?}");
    // SAFETY: ncclGetVersion's C signature.
    let version: libloading::Symbol<unsafe extern "C" fn(*mut c_int) -> c_int> =
        unsafe { lib.get(b"ncclGetVersion") }.unwrap();
    let mut v = 0;
    assert_eq!(unsafe { version(&mut v) }, 0);
    assert_eq!(v, 22809);
}

#[test]
fn the_header_spells_nccl_2_28_values_and_layouts() {
    // The program is all static assertions: that it compiles and runs is the check.
    let lib = support::setup("abi");
    let program = lib.program("abi_check.c");
    let out = support::succeeded(
        "abi_check",
        support::run(&program, &[], &[], Duration::from_secs(30)),
    );
    assert_eq!(out.trim(), "ncclGetVersion 22809", "{out}");
}

/// The library carries Braid's mark, which `braid perf --vs-nccl` looks for to refuse
/// comparing Braid with itself; other libraries do not.
#[test]
fn the_library_is_recognisably_braids() {
    let lib = support::built_library();
    assert!(
        braid_cuda::nccl::is_braid(&lib).unwrap(),
        "{}",
        lib.display()
    );
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .map(std::path::Path::new)
    .find(|p| p.is_file())
    .expect("the C library is on this machine");
    assert!(
        !braid_cuda::nccl::is_braid(libc).unwrap(),
        "{}",
        libc.display()
    );
}
