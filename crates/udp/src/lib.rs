//! Batched UDP I/O for the data plane (being written).
