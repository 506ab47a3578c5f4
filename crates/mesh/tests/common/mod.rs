#![allow(dead_code)]
pub mod log;
pub mod pg;
pub mod tls;
