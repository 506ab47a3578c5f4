//! (gather)
