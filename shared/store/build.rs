//! The migrations are embedded at compile time (`refinery::embed_migrations!`
//! in `schema.rs`): a new or changed file under `migrations/` rebuilds this
//! crate, as a change to its own source would.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
