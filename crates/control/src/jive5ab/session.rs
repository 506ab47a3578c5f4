//! One jive5ab-dialect command connection before its statements run, as a sans-IO state machine: it
//! frames requests and screens them as the Mark6 side's [`crate::session::Mark6Session`] does:
//!
//! - a request that starts a line like an HTTP request line ([`looks_like_http`]: what a web page can
//!   make a browser send to this port) is answered once and ends the connection, nothing of it run;
//! - with a token required: `auth = <token> ;` first; other statements are refused, a syntax error
//!   ends the connection (garbage before the token is a probe or another protocol), and so do
//!   [`MAX_AUTH_FAILURES`] wrong tokens.
//!
//! The daemon adds the deadline for the token and the gate's admission (`crates/guard`).

use crate::proto::{looks_like_http, ReturnCode, Statement};
use crate::session::{constant_time_eq, MAX_AUTH_FAILURES};

use super::{parse_request, Item, J5Reply, RequestFramer};

/// What the session makes of one piece of a request.
#[derive(Debug)]
pub enum Screened {
    /// Answer this (a syntax error, an `auth`, a refusal before authentication, a foreign protocol).
    Reply(J5Reply),
    /// Execute this statement.
    Execute(Statement),
}

/// One request, screened.
#[derive(Debug)]
pub struct Screening {
    pub items: Vec<Screened>,
    /// The reply line ends in `\r\n`.
    pub crlf: bool,
}

/// A jive5ab-dialect command session (one TCP connection).
#[derive(Debug)]
pub struct J5Session {
    framer: RequestFramer,
    token: Option<String>,
    authenticated: bool,
    auth_failures: u32,
    closing: bool,
    /// The last request did not end its line (it ended in ';').
    mid_line: bool,
}

impl J5Session {
    /// A session; with `token`, every statement but `auth=<token>` is refused until it is given.
    pub fn new(token: Option<String>) -> Self {
        J5Session {
            framer: RequestFramer::new(),
            authenticated: token.is_none(),
            token,
            auth_failures: 0,
            closing: false,
            mid_line: false,
        }
    }

    /// Cuts `bytes` into the requests now complete (raw), keeping partial input for the next call.
    pub fn frame(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.framer.feed(bytes)
    }

    /// True once the token was given (or none is required).
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// True once the connection should be closed (nothing more is read or run).
    pub fn should_close(&self) -> bool {
        self.closing || self.auth_failures >= MAX_AUTH_FAILURES
    }

    /// Screens one raw request; an empty screening is not answered.
    pub fn screen(&mut self, raw: &[u8]) -> Screening {
        let at_line_start = !self.mid_line;
        self.mid_line = raw.last() != Some(&b'\n');
        let mut out = Screening {
            items: Vec::new(),
            crlf: raw.windows(2).any(|w| w == b"\r\n"),
        };
        if self.should_close() {
            return out;
        }
        if at_line_start && looks_like_http(raw.trim_ascii_start()) {
            self.closing = true;
            out.items.push(Screened::Reply(J5Reply::msg(
                "syntax",
                false,
                ReturnCode::NoSuchKeyword,
                "this is the jive5ab command port, not HTTP: closing",
            )));
            return out;
        }
        for item in parse_request(raw).items {
            if self.should_close() {
                break;
            }
            out.items.push(match item {
                Item::Error(r) => {
                    self.closing |= !self.authenticated;
                    Screened::Reply(r)
                }
                Item::Statement(st) if st.keyword == "auth" && !st.query => Screened::Reply(self.auth(&st)),
                Item::Statement(st) if !self.authenticated => Screened::Reply(J5Reply::msg(
                    &st.keyword,
                    st.query,
                    ReturnCode::Conflict,
                    "authentication required: send auth=<token>; first",
                )),
                Item::Statement(st) => Screened::Execute(st),
            });
        }
        out
    }

    fn auth(&mut self, st: &Statement) -> J5Reply {
        let ok = self
            .token
            .as_ref()
            .is_none_or(|t| constant_time_eq(st.arg(0).as_bytes(), t.as_bytes()));
        if ok {
            self.authenticated = true;
            J5Reply::new("auth", false, ReturnCode::Done, vec![])
        } else {
            self.auth_failures += 1;
            J5Reply::msg("auth", false, ReturnCode::Parameter, "wrong token")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replies(s: &mut J5Session, input: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for raw in s.frame(input) {
            for i in s.screen(&raw).items {
                out.push(match i {
                    Screened::Reply(r) => r.format(),
                    Screened::Execute(st) => format!("run {}", st.keyword),
                });
            }
        }
        out
    }

    #[test]
    fn http_request_lines_close_before_anything_runs() {
        for token in [None, Some("t".to_owned())] {
            let mut s = J5Session::new(token.clone());
            let r = replies(&mut s, b"POST / HTTP/1.1\r\nHost: a\r\n\r\nauth=t;record=on:x;\n");
            assert_eq!(
                r,
                ["!syntax= 7 : this is the jive5ab command port, not HTTP  closing ;"]
            );
            assert!(s.should_close());
            // split at a ';' in the target: still the start of the line
            let mut s = J5Session::new(token);
            assert_eq!(replies(&mut s, b"GET /a;").len(), 1);
            assert!(s.should_close());
            assert!(replies(&mut s, b"record=off;\n").is_empty());
            // a statement's syntax too: still HTTP
            let mut s = J5Session::new(None);
            assert_eq!(replies(&mut s, b"HEAD = HTTP/1.1\r\n").len(), 1);
            assert!(s.should_close());
        }
        // a method later on a line is not HTTP
        let mut s = J5Session::new(None);
        assert_eq!(replies(&mut s, b"version?;GET /x;\n").len(), 2);
        assert!(!s.should_close());
    }

    #[test]
    fn before_the_token_statements_are_refused_and_errors_close() {
        let mut s = J5Session::new(Some("sesame".into()));
        let r = replies(&mut s, b"version?;auth=nope;\n");
        assert!(r[0].starts_with("!version? 6 : authentication required"), "{r:?}");
        assert_eq!(r[1], "!auth= 8 : wrong token ;");
        assert!(!s.should_close());
        let r = replies(&mut s, b"garbage;version?;\n");
        assert_eq!(r, ["!syntax= 7 : Not a command or query ;"]);
        assert!(s.should_close());

        let mut s = J5Session::new(Some("sesame".into()));
        let r = replies(&mut s, b"auth=sesame;version?;garbage;status?;\n");
        assert_eq!(r[1], "run version");
        assert_eq!(r[3], "run status");
        assert!(s.authenticated() && !s.should_close());

        let mut s = J5Session::new(Some("sesame".into()));
        replies(&mut s, b"auth=a;auth=b;auth=c;auth=sesame;\n");
        assert!(s.should_close() && !s.authenticated());
    }
}
