//! Unit tests: parsers on fixture strings, the reader on a fake sysfs tree,
//! assembly on fixture facts, and detection on this machine.

mod assemble;
mod detect;
mod parse;
mod tree;
