//! One command connection as a sans-IO state machine: bytes in, reply text out. It frames statements,
//! enforces the access token (when the daemon listens beyond loopback) and hands statements to the
//! [`CommandTarget`] (the daemon's controller).

use vlbiflow_formats::time::UtcTime;

use crate::controller::Controller;
use crate::engine::Engine;
use crate::proto::{Framer, Input, Reply, ReturnCode, Statement};

/// What executes statements: the controller in the daemon.
pub trait CommandTarget {
    /// Executes one statement at `now` and returns its reply.
    fn execute(&mut self, st: &Statement, now: UtcTime) -> Reply;
}

/// A controller with an engine that carries out its actions synchronously (tests, embedding). The daemon
/// instead carries them out outside the controller's lock.
pub struct WithEngine<'a>(pub &'a mut Controller, pub &'a mut dyn Engine);

impl CommandTarget for WithEngine<'_> {
    fn execute(&mut self, st: &Statement, now: UtcTime) -> Reply {
        self.0.count_command();
        self.0.execute_with(st, now, self.1)
    }
}

/// What the session makes of one framed input.
#[derive(Debug)]
pub enum Screened {
    /// Answer this (a protocol error, an `auth`, or a refusal before authentication).
    Reply(Reply),
    /// Execute this statement.
    Execute(Statement),
}

/// Wrong tokens tolerated on one connection before it is closed.
pub const MAX_AUTH_FAILURES: u32 = 3;

/// A Mark6 command session (one TCP connection).
#[derive(Debug)]
pub struct Mark6Session {
    framer: Framer,
    token: Option<String>,
    authenticated: bool,
    auth_failures: u32,
    /// Input that ends the connection was seen (another protocol, or an error before authentication).
    closing: bool,
}

impl Mark6Session {
    /// A session; with `token`, every statement but `auth=<token>` is refused until the token is given.
    pub fn new(token: Option<String>) -> Self {
        Mark6Session {
            framer: Framer::new(),
            authenticated: token.is_none(),
            token,
            auth_failures: 0,
            closing: false,
        }
    }

    /// Frames `bytes` into statements (and protocol errors), keeping partial input for the next call.
    pub fn frame(&mut self, bytes: &[u8]) -> Vec<Input> {
        let mut out = Vec::new();
        self.framer.feed(bytes, &mut out);
        out
    }

    /// True once the connection should be closed: too many wrong tokens, a line of another protocol
    /// (HTTP), or, while a token is required and not given yet, any input that is not a statement.
    pub fn should_close(&self) -> bool {
        self.closing || self.auth_failures >= MAX_AUTH_FAILURES
    }

    /// True once the token was given (or none is required).
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Screens one framed input: protocol errors and `auth` are answered here, statements before
    /// authentication refused; `None` once the connection should close.
    pub fn screen(&mut self, input: Input) -> Option<Screened> {
        if self.should_close() {
            return None;
        }
        Some(match input {
            Input::Foreign(r) => {
                self.closing = true;
                Screened::Reply(r)
            }
            Input::Error(r) => {
                // before the token, garbage is another protocol or a probe: nothing more is read
                self.closing |= !self.authenticated;
                Screened::Reply(r)
            }
            Input::Statement(st) if st.keyword == "auth" && !st.query => Screened::Reply(self.auth(&st)),
            Input::Statement(st) if !self.authenticated => Screened::Reply(Reply::reason(
                &st,
                ReturnCode::Error,
                "authentication required: send auth=<token>; first",
            )),
            Input::Statement(st) => Screened::Execute(st),
        })
    }

    /// Executes framed input against `target`, returning the reply lines (each ending in '\n').
    pub fn process(&mut self, inputs: Vec<Input>, target: &mut dyn CommandTarget, now: UtcTime) -> String {
        let mut out = String::new();
        for input in inputs {
            let reply = match self.screen(input) {
                None => break,
                Some(Screened::Reply(r)) => r,
                Some(Screened::Execute(st)) => target.execute(&st, now),
            };
            out.push_str(&reply.format());
            out.push('\n');
        }
        out
    }

    fn auth(&mut self, st: &Statement) -> Reply {
        let Some(token) = &self.token else {
            return Reply::reason(st, ReturnCode::Done, "no token needed");
        };
        if constant_time_eq(st.arg(0).as_bytes(), token.as_bytes()) {
            self.authenticated = true;
            Reply::to(st, ReturnCode::Done, Vec::new())
        } else {
            self.auth_failures += 1;
            Reply::reason(st, ReturnCode::Error, "wrong token")
        }
    }
}

/// Compares without an early exit on the first differing byte.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
