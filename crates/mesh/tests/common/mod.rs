#![allow(dead_code)]
pub mod pg;
pub mod tls;
