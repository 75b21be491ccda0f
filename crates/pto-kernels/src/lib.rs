//! Built-in kernels and L2 orchestrations, registered by name (OVERVIEW.md §7).
//!
//! Linking this crate makes its callables findable by name in any image, which is how child
//! processes resolve what their parent asks them to run.
#![forbid(unsafe_code)]

pub mod bench;
pub mod hazard;
pub mod paged_attention;
pub mod prop;
pub mod rng;
pub mod vector;

/// Makes sure the registrations of this crate are linked into the final image.
///
/// `inventory` collects registrations from every object file that is linked; calling this from
/// a binary guarantees the linker keeps this crate.
pub fn link() {
    vector::link();
    bench::link();
    hazard::link();
    prop::link();
    paged_attention::link();
}
