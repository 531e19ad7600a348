//! Embeds every `algorithms/*.braid` file, so the library needs no files at run time.

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../algorithms");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the algorithms directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "braid"))
        .collect();
    files.sort();
    let mut out = String::from("/// (file name, source) of every shipped algorithm.\npub const SOURCES: &[(&str, &str)] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f.file_name().unwrap().to_string_lossy();
        out.push_str(&format!(
            "    (\"{name}\", include_str!({:?})),\n",
            f.canonicalize().unwrap()
        ));
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("sources.rs");
    std::fs::write(dest, out).unwrap();
}
