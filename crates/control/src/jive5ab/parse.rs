//! jive5ab's request syntax, sans-IO: a framer that cuts a connection's bytes into requests, and the
//! parser of one request into statements.
//!
//! jive5ab (3.1.0, `src/test.cc`) treats whatever one `read()` returned (up to 4096 bytes) as one
//! request: it deletes every space, `\r` and `\n` (tabs stay), splits the rest on `;`, skips empty pieces,
//! and for each piece takes the text before the first `=` or `?` as the keyword (lower-cased) and the
//! rest, split on `:`, as arguments (empty ones kept, case kept). A piece with neither `=` nor `?` is
//! answered `!syntax= 7 : Not a command or query ;`, an empty keyword `!syntax= 7 : No keyword given ;`.
//! All replies to one request go out on one line, ended by `\r\n` if the request held `\r\n`, else `\n`.
//!
//! The one difference: a request here is a complete line (up to `\n`), or input that ends in `;` with no
//! newline yet, rather than whatever one `read()` returned, so that a statement split over two TCP
//! segments is not cut in two (jive5ab would parse the halves separately).

use crate::proto::{ReturnCode, Statement};

use super::reply::J5Reply;

/// Longest request: jive5ab reads at most 4096 bytes at once. Longer input without a line end is
/// parsed in pieces of this size, as jive5ab would.
pub const MAX_REQUEST: usize = 4096;

/// One piece of a request: a statement to execute, or a syntax error already answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Statement(Statement),
    Error(J5Reply),
}

/// One request: its statements in order, and the line end its reply takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub items: Vec<Item>,
    /// The request held `\r\n`: the reply line ends in `\r\n` too.
    pub crlf: bool,
}

/// Parses one request (see the module documentation). Never fails: what is not a statement becomes a
/// `syntax` error item.
pub fn parse_request(raw: &[u8]) -> Request {
    let crlf = raw.windows(2).any(|w| w == b"\r\n");
    let squeezed: Vec<u8> = raw
        .iter()
        .copied()
        .filter(|b| !matches!(b, b' ' | b'\r' | b'\n'))
        .collect();
    let items = squeezed
        .split(|&b| b == b';')
        .filter(|p| !p.is_empty())
        .map(parse_piece)
        .collect();
    Request { items, crlf }
}

fn parse_piece(piece: &[u8]) -> Item {
    let text = String::from_utf8_lossy(piece);
    let Some(op) = text.find(['=', '?']) else {
        return Item::Error(J5Reply::msg(
            "syntax",
            false,
            ReturnCode::NoSuchKeyword,
            "Not a command or query",
        ));
    };
    if op == 0 {
        return Item::Error(J5Reply::msg(
            "syntax",
            false,
            ReturnCode::NoSuchKeyword,
            "No keyword given",
        ));
    }
    let rest = &text[op + 1..];
    Item::Statement(Statement {
        keyword: text[..op].to_lowercase(),
        query: text.as_bytes()[op] == b'?',
        // `kw?` and `kw=` carry no argument (jive5ab's one empty field: `arg(0)` is "" either way).
        args: if rest.is_empty() {
            Vec::new()
        } else {
            rest.split(':').map(str::to_owned).collect()
        },
    })
}

/// Cuts a connection's byte stream into requests (see the module documentation).
#[derive(Debug, Default)]
pub struct RequestFramer {
    buf: Vec<u8>,
}

impl RequestFramer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes `bytes`, returning the requests now complete (raw, for [`parse_request`]).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for &b in bytes {
            self.buf.push(b);
            if b == b'\n' || self.buf.len() >= MAX_REQUEST {
                out.push(std::mem::take(&mut self.buf));
            }
        }
        // A request without a line end yet: complete if its last non-blank byte is ';'.
        if self.buf.iter().rev().find(|b| !b.is_ascii_whitespace()) == Some(&b';') {
            out.push(std::mem::take(&mut self.buf));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(kw: &str, query: bool, args: &[&str]) -> Item {
        Item::Statement(Statement {
            keyword: kw.into(),
            query,
            args: args.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn statements_and_queries_several_per_line_spaces_removed() {
        let r =
            parse_request(b" Record = on : r4 1234_wf ; record? ;MODE?;net_protocol=udpsnor:32000000::4\n");
        assert!(!r.crlf);
        assert_eq!(
            r.items,
            vec![
                st("record", false, &["on", "r41234_wf"]),
                st("record", true, &[]),
                st("mode", true, &[]),
                st("net_protocol", false, &["udpsnor", "32000000", "", "4"]),
            ]
        );
    }

    #[test]
    fn tabs_stay_and_case_of_arguments_is_kept() {
        let r = parse_request(b"scan_set=\tAbC:s;\r\n");
        assert!(r.crlf);
        assert_eq!(r.items, vec![st("scan_set", false, &["\tAbC", "s"])]);
    }

    #[test]
    fn syntax_errors_as_jive5ab_answers_them() {
        let r = parse_request(b";;hello;=x;?;\n");
        let texts: Vec<String> = r
            .items
            .iter()
            .map(|i| match i {
                Item::Error(e) => e.format(),
                Item::Statement(s) => panic!("{s:?}"),
            })
            .collect();
        assert_eq!(
            texts,
            [
                "!syntax= 7 : Not a command or query ;",
                "!syntax= 7 : No keyword given ;",
                "!syntax= 7 : No keyword given ;"
            ]
        );
        assert!(parse_request(b" ; \n").items.is_empty());
    }

    #[test]
    fn framer_completes_lines_and_semicolon_ended_input() {
        let mut f = RequestFramer::new();
        assert!(f.feed(b"record=on:sc").is_empty());
        assert_eq!(f.feed(b"an1;\n"), vec![b"record=on:scan1;\n".to_vec()]);
        assert_eq!(f.feed(b"status?; "), vec![b"status?; ".to_vec()]);
        assert_eq!(f.feed(b"a?\nb?"), vec![b"a?\n".to_vec()]);
        assert_eq!(f.feed(b"\n"), vec![b"b?\n".to_vec()]);
        let long = vec![b'x'; MAX_REQUEST + 10];
        let out = f.feed(&long);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), MAX_REQUEST);
    }
}
