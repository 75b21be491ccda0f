//! The `pto` command-line tool: a thin layer over the library crates.
fn main() {}
