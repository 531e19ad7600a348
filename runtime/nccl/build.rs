// The shared object stands in for NCCL's: it must carry NCCL's soname, so that programs
// linked against either find it as libnccl.so.2.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
}
