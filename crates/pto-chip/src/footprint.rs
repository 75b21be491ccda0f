//! Arena footprint of a resolved sizing (RING_CONFIG.md §7.1).
