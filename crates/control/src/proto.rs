//! The Mark6 / VSI-S command protocol as sans-IO code: a byte framer that cuts a connection's input into
//! statements, a statement parser, and reply formatting. No sockets here; the daemon feeds bytes in and
//! writes the replies out.
//!
//! Syntax: `keyword = arg : arg ;` (a command) and `keyword? arg : arg ;` (a query). Several statements may
//! share a line; a newline also ends a statement, so `record?` followed by Enter works as well as `record?;`.
//! Keywords are case-insensitive; whitespace around keywords and arguments is ignored. Every non-empty
//! statement gets exactly one reply line, so a client knows how many replies to wait for.

use std::fmt::Write as _;

/// Longest accepted line (and so statement), in bytes.
pub const MAX_LINE: usize = 4096;

/// VSI-S return codes, used by both dialects' replies (the Mark6 dialect and jive5ab's, see
/// [`crate::jive5ab::reply`]). The VSI-S specification names them; how jive5ab 3.1.0 uses each one
/// (`src/mk5command/*.cc`, `src/test.cc`) is noted too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ReturnCode {
    /// Action done; every successful query.
    Done = 0,
    /// Action initiated, not completed (a recording pending its start time; jive5ab: `record=off`,
    /// `disk2file=...`, `disk2net=connect`).
    Initiated = 1,
    /// Not applicable in the current state, or not implemented (jive5ab: a query-only keyword used as
    /// a command or the reverse, an unknown sub-command).
    NotNow = 2,
    /// Action failed (VSI-S: syntax error; rare in jive5ab).
    Failed = 3,
    /// Error in the request or the daemon, or while executing (jive5ab: e.g. a `mode` string that
    /// names no format).
    Error = 4,
    /// Busy: the answer is not ready yet (e.g. the scan is still flushing); retry.
    Busy = 5,
    /// Conflicts with what is going on (e.g. a recording); jive5ab's usual refusal ("not whilst record
    /// is in progress").
    Conflict = 6,
    /// No such keyword (jive5ab: `ENOSYS - not implemented`).
    NoSuchKeyword = 7,
    /// Parameter error: missing, malformed or out-of-range argument.
    Parameter = 8,
}

impl ReturnCode {
    /// Numeric value as sent on the wire.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The code for a number, if it is one of ours.
    pub fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => Self::Done,
            1 => Self::Initiated,
            2 => Self::NotNow,
            3 => Self::Failed,
            4 => Self::Error,
            5 => Self::Busy,
            6 => Self::Conflict,
            7 => Self::NoSuchKeyword,
            8 => Self::Parameter,
            _ => return None,
        })
    }
}

/// One parsed statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// Keyword, lower case.
    pub keyword: String,
    /// `keyword?` rather than `keyword =`.
    pub query: bool,
    /// Arguments, trimmed, case kept (empty arguments are kept: `a::b` has three).
    pub args: Vec<String>,
}

impl Statement {
    /// Argument `i`, or "" if absent.
    pub fn arg(&self, i: usize) -> &str {
        self.args.get(i).map(String::as_str).unwrap_or("")
    }
}

/// A reply line: `!keyword = rc : field : ... ;` or `!keyword? rc : field : ... ;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub keyword: String,
    pub query: bool,
    pub code: ReturnCode,
    pub fields: Vec<String>,
}

impl Reply {
    /// A reply to `st` with `code` and `fields`.
    pub fn to(st: &Statement, code: ReturnCode, fields: Vec<String>) -> Self {
        Reply {
            keyword: st.keyword.clone(),
            query: st.query,
            code,
            fields,
        }
    }

    /// A reply with one reason field.
    pub fn reason(st: &Statement, code: ReturnCode, reason: impl Into<String>) -> Self {
        Self::to(st, code, vec![reason.into()])
    }

    /// The reply to input that is not a statement at all (garbage, over-long line).
    pub fn protocol_error(reason: impl Into<String>) -> Self {
        Reply {
            keyword: "error".into(),
            query: false,
            code: ReturnCode::Error,
            fields: vec![reason.into()],
        }
    }

    /// The wire form, without the line end. Fields are sanitised so that a reply is always one line of
    /// printable ASCII: ';', non-ASCII and control characters become ' '.
    pub fn format(&self) -> String {
        let mut s = String::with_capacity(32);
        s.push('!');
        s.push_str(&self.keyword);
        s.push_str(if self.query { "? " } else { " = " });
        let _ = write!(s, "{}", self.code.code());
        for f in &self.fields {
            s.push_str(" : ");
            for c in f.chars() {
                s.push(match c {
                    ';' => ' ',
                    c if c.is_ascii_graphic() || c == ' ' => c,
                    _ => ' ',
                });
            }
        }
        s.push_str(" ;");
        s
    }
}

/// A parsed reply line, as `vlbiflow ctl` reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedReply {
    pub keyword: String,
    pub query: bool,
    pub code: u8,
    pub fields: Vec<String>,
}

/// Parses one reply line (`!kw = rc : a : b ;`). Returns `None` for anything else.
pub fn parse_reply(line: &str) -> Option<ParsedReply> {
    let body = line.trim().strip_prefix('!')?;
    let body = body.trim_end().strip_suffix(';').unwrap_or(body).trim();
    let (kw, rest, query) = match (body.find('?'), body.find('=')) {
        (Some(q), Some(e)) if q < e => (&body[..q], &body[q + 1..], true),
        (Some(q), None) => (&body[..q], &body[q + 1..], true),
        (_, Some(e)) => (&body[..e], &body[e + 1..], false),
        (None, None) => return None,
    };
    let mut parts = rest.split(':').map(str::trim);
    let code = parts.next()?.parse().ok()?;
    Some(ParsedReply {
        keyword: kw.trim().to_ascii_lowercase(),
        query,
        code,
        fields: parts.map(str::to_owned).collect(),
    })
}

/// Why a statement could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("binary data (byte 0x{byte:02x} at offset {offset} of the statement) is not a command")]
    Binary { byte: u8, offset: usize },
    #[error("statement has no '=' or '?' after the keyword")]
    NoOperator,
    #[error("keyword must be letters, digits or '_', 1 to 32 of them")]
    BadKeyword,
}

/// Parses one statement (without its terminating ';' or newline).
pub fn parse_statement(raw: &[u8]) -> Result<Statement, ParseError> {
    if let Some((offset, &byte)) = raw
        .iter()
        .enumerate()
        .find(|(_, &b)| !(b.is_ascii_graphic() || b == b' ' || b == b'\t' || b == b'\r'))
    {
        return Err(ParseError::Binary { byte, offset });
    }
    // Only printable ASCII is left, so this cannot fail.
    let text = std::str::from_utf8(raw).map_err(|_| ParseError::NoOperator)?;
    let op = text.find(['=', '?']).ok_or(ParseError::NoOperator)?;
    let keyword = text[..op].trim();
    if keyword.is_empty()
        || keyword.len() > 32
        || !keyword.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
    {
        return Err(ParseError::BadKeyword);
    }
    let query = text.as_bytes()[op] == b'?';
    let rest = text[op + 1..].trim();
    // `kw?` and `kw=` with nothing after take no argument; otherwise split on ':'.
    let args = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(':').map(|a| a.trim().to_owned()).collect()
    };
    Ok(Statement {
        keyword: keyword.to_ascii_lowercase(),
        query,
        args,
    })
}

/// What the framer found in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A statement to execute.
    Statement(Statement),
    /// Input that is not a statement: answer with this error reply.
    Error(Reply),
    /// A line of another protocol (an HTTP request line): answer with this reply and close the connection
    /// without reading further (a browser or a script can be made to send an HTTP request with a body of
    /// commands to this port: RFC 9110 section 9; nothing after such a line may run).
    Foreign(Reply),
}

/// HTTP request methods (RFC 9110 section 9, RFC 5789, and `PRI` of the HTTP/2 connection preface,
/// RFC 9113 section 3.4).
const HTTP_METHODS: [&[u8]; 10] = [
    b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"CONNECT", b"OPTIONS", b"TRACE", b"PATCH", b"PRI",
];

/// True when `line` (the start of a line) looks like an HTTP request line, `<METHOD> <target> HTTP/1.x`
/// (RFC 9112 section 3): a method, one space, then a target. The version is not required: the first
/// statement of the line may have been cut at a ';' in the target. No VSI-S keyword is a method name, so
/// such a line is taken as HTTP even when it would parse as a statement (`HEAD = HTTP/1.1`).
pub fn looks_like_http(line: &[u8]) -> bool {
    HTTP_METHODS.iter().any(|m| {
        line.len() > m.len() + 1 && line.starts_with(m) && line[m.len()] == b' ' && line[m.len() + 1] != b' '
    })
}

/// Cuts a byte stream into statements at ';' and newlines, bounding line length. Feed it whatever the
/// socket returned; it keeps partial statements between calls.
#[derive(Debug, Default)]
pub struct Framer {
    statement: Vec<u8>,
    line_len: usize,
    /// A statement of the current line has been finished (the next one is not at the line's start).
    mid_line: bool,
    /// Dropping the rest of an over-long line.
    discarding: bool,
}

impl Framer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes `bytes`, pushing every complete statement (or error) onto `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Input>) {
        for &b in bytes {
            match b {
                b'\n' => {
                    if !self.discarding {
                        self.finish(out);
                    }
                    self.statement.clear();
                    self.line_len = 0;
                    self.mid_line = false;
                    self.discarding = false;
                }
                _ if self.discarding => {}
                b';' => {
                    self.line_len += 1;
                    self.finish(out);
                }
                _ => {
                    self.line_len += 1;
                    if self.line_len > MAX_LINE {
                        self.statement.clear();
                        self.discarding = true;
                        out.push(Input::Error(Reply::protocol_error(format!(
                            "line longer than {MAX_LINE} bytes: ignored up to the next newline"
                        ))));
                    } else {
                        self.statement.push(b);
                    }
                }
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<Input>) {
        let raw = std::mem::take(&mut self.statement);
        let at_line_start = !self.mid_line;
        self.mid_line = true;
        if raw.iter().all(|b| b.is_ascii_whitespace()) {
            return;
        }
        // HTTP first: `HEAD = HTTP/1.1` also parses as a statement.
        out.push(if at_line_start && looks_like_http(&raw) {
            Input::Foreign(Reply::protocol_error(
                "this is the VSI-S command port, not HTTP: closing",
            ))
        } else {
            match parse_statement(&raw) {
                Ok(st) => Input::Statement(st),
                Err(e) => Input::Error(Reply::protocol_error(e.to_string())),
            }
        });
        self.statement = raw;
        self.statement.clear();
    }
}

/// Counts the statements in a client's command text (what the server will answer), so a client knows
/// how many reply lines to read. Mirrors [`Framer`] on well-formed input.
pub fn count_statements(text: &str) -> usize {
    let mut f = Framer::new();
    let mut out = Vec::new();
    f.feed(text.as_bytes(), &mut out);
    f.feed(b"\n", &mut out);
    out.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(input: &[u8]) -> Vec<Input> {
        let mut f = Framer::new();
        let mut out = Vec::new();
        f.feed(input, &mut out);
        out
    }

    fn st(kw: &str, query: bool, args: &[&str]) -> Input {
        Input::Statement(Statement {
            keyword: kw.into(),
            query,
            args: args.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn parses_commands_and_queries_several_per_line() {
        let out = frame(b" Input_Stream = add : RDBE1 : vdif : 8224 ;record?;MSTAT? all\n");
        assert_eq!(
            out,
            vec![
                st("input_stream", false, &["add", "RDBE1", "vdif", "8224"]),
                st("record", true, &[]),
                st("mstat", true, &["all"]),
            ]
        );
    }

    #[test]
    fn keeps_partial_statements_between_feeds_and_empty_arguments() {
        let mut f = Framer::new();
        let mut out = Vec::new();
        f.feed(b"record=on:60::sc", &mut out);
        assert!(out.is_empty());
        f.feed(b"an1:e:st;", &mut out);
        assert_eq!(
            out,
            vec![st("record", false, &["on", "60", "", "scan1", "e", "st"])]
        );
    }

    #[test]
    fn blank_statements_are_ignored() {
        assert!(frame(b" ; ;\r\n\n").is_empty());
        assert_eq!(count_statements("a?; b=1;  ;"), 2);
        assert_eq!(count_statements("a?"), 1);
    }

    #[test]
    fn garbage_gives_one_error_each() {
        let out = frame(b"\x00\xff\x13abc;hello;=x;\n");
        assert_eq!(out.len(), 3);
        for o in &out {
            let Input::Error(r) = o else { panic!("{o:?}") };
            assert_eq!(r.code, ReturnCode::Error);
            assert!(r.format().starts_with("!error = 4 : "), "{}", r.format());
        }
    }

    #[test]
    fn http_request_lines_are_foreign() {
        let out = frame(b"POST /x HTTP/1.1\r\nHost: a\r\n\r\nrecord=on:1:s:e:st;\n");
        assert!(
            matches!(&out[0], Input::Foreign(r) if r.format().contains("not HTTP")),
            "{out:?}"
        );
        for line in [
            &b"GET / HTTP/1.0\n"[..],
            b"GET /?record=off HTTP/1.1\n",
            b"PUT /a;record=off HTTP/1.1\n",
            b"OPTIONS * HTTP/1.1\n",
            b"PRI * HTTP/2.0\r\n",
            // also a statement's syntax (found by the control_http fuzz target)
            b"HEAD = HTTP/1.1\r\n",
            b"GET =x HTTP/1.1\n",
        ] {
            assert!(
                matches!(&frame(line)[0], Input::Foreign(_)),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
        // statements, other garbage, and a method later on a line are not HTTP
        assert!(matches!(&frame(b"GET=1;\n")[0], Input::Statement(_)));
        assert!(matches!(&frame(b"get / HTTP/1.1\n")[0], Input::Error(_)));
        assert!(matches!(&frame(b"GETX / HTTP/1.1\n")[0], Input::Error(_)));
        assert!(matches!(&frame(b"record?;POST / HTTP/1.1\n")[1], Input::Error(_)));
    }

    #[test]
    fn long_lines_are_refused_once_and_skipped() {
        let mut input = vec![b'x'; MAX_LINE * 3];
        input.extend_from_slice(b";still junk\nrecord?;");
        let out = frame(&input);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(matches!(&out[0], Input::Error(r) if r.fields[0].contains("4096")));
        assert_eq!(out[1], st("record", true, &[]));
    }

    #[test]
    fn exactly_max_line_is_accepted() {
        let mut input = b"x=".to_vec();
        input.resize(MAX_LINE, b'a');
        input.push(b'\n');
        assert!(matches!(&frame(&input)[0], Input::Statement(_)));
    }

    #[test]
    fn reply_format_and_parse_round_trip() {
        let s = Statement {
            keyword: "record".into(),
            query: true,
            args: vec![],
        };
        let r = Reply::to(&s, ReturnCode::Done, vec!["recording".into(), "g;1\n".into()]);
        let text = r.format();
        assert_eq!(text, "!record? 0 : recording : g 1  ;");
        let p = parse_reply(&text).unwrap();
        assert_eq!((p.keyword.as_str(), p.query, p.code), ("record", true, 0));
        assert_eq!(p.fields, vec!["recording", "g 1"]);
        let c = parse_reply("!input_stream = 8 : bad ;").unwrap();
        assert_eq!((c.query, c.code, c.fields[0].as_str()), (false, 8, "bad"));
        assert!(parse_reply("garbage").is_none());
        for code in [0u8, 1, 2, 3, 4, 5, 6, 7, 8] {
            assert_eq!(ReturnCode::from_code(code).unwrap().code(), code);
        }
        assert!(ReturnCode::from_code(9).is_none());
    }
}
