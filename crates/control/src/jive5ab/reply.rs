//! jive5ab's return codes and reply lines: `!kw= rc : field : ... ;` (command) and `!kw? rc : field ;`
//! (query). jive5ab follows the VSI-S return codes, the Mark6 dialect's [`ReturnCode`]; how jive5ab uses
//! each one is noted on its variants.

use std::fmt::Write as _;

pub use crate::proto::ReturnCode;

/// Longest keyword echoed back in a reply (longer ones are cut: a reply stays one short line).
pub const MAX_REPLY_KEYWORD: usize = 64;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct J5Reply {
    /// Keyword as received (lower case).
    pub keyword: String,
    /// A reply to `kw?` rather than `kw=`.
    pub query: bool,
    pub code: ReturnCode,
    pub fields: Vec<String>,
}

impl J5Reply {
    /// A reply with fields.
    pub fn new(keyword: &str, query: bool, code: ReturnCode, fields: Vec<String>) -> Self {
        J5Reply {
            keyword: keyword.to_owned(),
            query,
            code,
            fields,
        }
    }

    /// A reply with one message field.
    pub fn msg(keyword: &str, query: bool, code: ReturnCode, msg: impl Into<String>) -> Self {
        Self::new(keyword, query, code, vec![msg.into()])
    }

    /// Appends the wire form (without a line end) to `out`. Keyword and fields are sanitised so that a
    /// reply is one line of printable ASCII whose `;` and `:` are the separators only: ';' and ':' in a
    /// field, control characters and non-ASCII become ' ' ('_' in the keyword).
    pub fn write_to(&self, out: &mut String) {
        out.push('!');
        for c in self.keyword.chars().take(MAX_REPLY_KEYWORD) {
            out.push(if c.is_ascii_graphic() && !matches!(c, ';' | ':' | '=' | '?') {
                c
            } else {
                '_'
            });
        }
        out.push(if self.query { '?' } else { '=' });
        let _ = write!(out, " {}", self.code.code());
        for f in &self.fields {
            out.push_str(" : ");
            for c in f.chars() {
                out.push(match c {
                    ';' | ':' => ' ',
                    c if c.is_ascii_graphic() || c == ' ' => c,
                    _ => ' ',
                });
            }
        }
        out.push_str(" ;");
    }

    /// The wire form, without a line end.
    pub fn format(&self) -> String {
        let mut s = String::with_capacity(32);
        self.write_to(&mut s);
        s
    }
}

/// A reply as a client reads it back: jive5ab's own replies have uneven spacing (`!record=  0  ;`), so
/// this is lenient, as the Field System's parser is: the code is the number after the first `=`/`?`,
/// fields are the `:`-separated rest, trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedJ5Reply {
    pub keyword: String,
    pub query: bool,
    pub code: u8,
    pub fields: Vec<String>,
}

/// Parses one jive5ab reply (`!kw= 0 : a ;`, `!kw?  0 : a ;`); `None` for anything else.
pub fn parse_j5_reply(text: &str) -> Option<ParsedJ5Reply> {
    let body = text.trim().strip_prefix('!')?;
    let body = body.strip_suffix(';').unwrap_or(body);
    let op = body.find(['=', '?'])?;
    let query = body.as_bytes()[op] == b'?';
    let mut parts = body[op + 1..].split(':').map(str::trim);
    let code = parts.next()?.parse().ok()?;
    Some(ParsedJ5Reply {
        keyword: body[..op].trim().to_ascii_lowercase(),
        query,
        code,
        fields: parts.map(str::to_owned).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_jive5ab() {
        assert_eq!(
            J5Reply::new("mode", false, ReturnCode::Done, vec![]).format(),
            "!mode= 0 ;"
        );
        assert_eq!(
            J5Reply::new("record", true, ReturnCode::Done, vec!["off".into()]).format(),
            "!record? 0 : off ;"
        );
        assert_eq!(
            J5Reply::msg(
                "foo",
                false,
                ReturnCode::NoSuchKeyword,
                "ENOSYS - not implemented"
            )
            .format(),
            "!foo= 7 : ENOSYS - not implemented ;"
        );
        // Separators and control characters inside a field cannot forge fields or lines.
        assert_eq!(
            J5Reply::msg("x\n;y", true, ReturnCode::Parameter, "a;b:c\r\n").format(),
            "!x__y? 8 : a b c   ;"
        );
    }

    #[test]
    fn parses_jive5abs_uneven_spacing() {
        let p = parse_j5_reply("!record=  0  ;").unwrap();
        assert_eq!((p.keyword.as_str(), p.query, p.code), ("record", false, 0));
        assert_eq!(p.fields, Vec::<String>::new());
        let p = parse_j5_reply("!record?  0 : on : 1 : scan : 123 ;\r\n").unwrap();
        assert_eq!((p.query, p.code), (true, 0));
        assert_eq!(p.fields, ["on", "1", "scan", "123"]);
        let p =
            parse_j5_reply("!set_disks=  8 : 0 : no mountpoints matched your selection criteria ;").unwrap();
        assert_eq!((p.code, p.fields[0].as_str()), (8, "0"));
        assert!(parse_j5_reply("record=on").is_none());
        assert!(parse_j5_reply("!x= y ;").is_none());
    }
}
