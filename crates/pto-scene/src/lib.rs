//! Scene-test harness: scene files, their cases and per-case configuration (RING_CONFIG.md §11).
