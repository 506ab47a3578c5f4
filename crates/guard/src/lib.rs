//! What the network services share to keep unauthenticated peers in their place:
//!
//! - [`gate::Gate`]: admission of connections that have not authenticated yet (a limit per address and in
//!   all, a back-off that delays an address whose handshakes fail or stay silent), as sans-IO logic with
//!   the time passed in;
//! - [`net::Prefix`]: `ADDR[/PREFIX]` address filters (`--allow`, `--from`);
//! - [`secret`]: reading a token from a file or the environment, never from the command line.

pub mod gate;
pub mod net;
pub mod secret;
