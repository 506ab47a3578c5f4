//! (plot)
