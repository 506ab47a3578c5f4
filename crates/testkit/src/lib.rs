//! Test support for the workspace's tests, one definition of each helper they share.
//!
//! - [`vdif`]: VDIF frames and `udps` datagrams written word by word from the VDIF specification
//!   (VDIF Task Force, "VLBI Data Interchange Format (VDIF) Specification", release 1.0, 2009,
//!   <https://vlbi.org/vlbi-standards/vdif/>). It deliberately does not use `vlbiflow-formats`, so that a
//!   test of the project's own header code compares it with an independent writer.
//! - [`net`]: free loopback ports and receiving sockets.
//! - [`damage`]: random damaged VDIF streams for property tests (proptest strategies).
//!
//! Only tests depend on this crate (as a dev-dependency); it is never published.

pub mod damage;
pub mod net;
pub mod vdif;
