//! The grammar of stream and destination specifications on the command line:
//! `[LABEL=]PROTO@ADDR[,KEY[=VALUE]]...`, as `record`'s streams and the forwarding destinations write
//! them.
//!
//! - `LABEL` follows [`validate_stream_label`](crate::validate_stream_label).
//! - `PROTO@ADDR`: what each caller knows (`vdif`, `m5b`, `udps`, ...) and an address it parses itself.
//! - Options are separated by commas; `threads=0+1:2` lists VDIF thread IDs (0..=1023) separated by `+`
//!   or `:`, and, since the list is usually written with commas, bare numbers right after a `threads=`
//!   option belong to it: `threads=0,1,psn` is threads 0 and 1, then `psn`.
//!
//! The callers name the field at fault in their own error types; [`SpecSyntax`] says which part failed.

use vlbiflow_formats::vdif::MAX_THREAD_ID;

/// What is wrong with the form of a specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecSyntax {
    /// The label breaks the label rule; the reason.
    Label(String),
    /// No label where one is required ([`Spec::parse_labelled`]).
    NoLabel,
    /// The head is not `PROTO@ADDR`.
    NoProtocol,
}

/// One specification split into its parts; iterate [`options`](Self::options) for the rest.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    /// The label, if one is written (checked).
    pub label: Option<&'a str>,
    /// What comes before the `@` (trimmed).
    pub proto: &'a str,
    /// What comes after the `@` (trimmed).
    pub addr: &'a str,
    /// The options, in the order written.
    pub options: Options<'a>,
}

impl<'a> Spec<'a> {
    /// Splits `spec` into label, protocol, address and options. Only the label is checked here; the
    /// options are checked as they are iterated.
    pub fn parse(spec: &'a str) -> Result<Self, SpecSyntax> {
        Self::split(spec, false)
    }

    /// [`parse`](Self::parse) for specifications that must have a label.
    pub fn parse_labelled(spec: &'a str) -> Result<Self, SpecSyntax> {
        Self::split(spec, true)
    }

    fn split(spec: &'a str, labelled: bool) -> Result<Self, SpecSyntax> {
        let mut parts = spec.split(',');
        let head = parts.next().unwrap_or_default().trim();
        let (label, head) = match head.split_once('=') {
            Some((l, h)) => (Some(l.trim()), h.trim()),
            None => (None, head),
        };
        match label {
            Some(l) => crate::validate_stream_label(l).map_err(SpecSyntax::Label)?,
            None if labelled => return Err(SpecSyntax::NoLabel),
            None => {}
        }
        let (proto, addr) = head.split_once('@').ok_or(SpecSyntax::NoProtocol)?;
        Ok(Spec {
            label,
            proto: proto.trim(),
            addr: addr.trim(),
            options: Options {
                parts,
                in_threads: false,
            },
        })
    }
}

/// One option of a specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecOption<'a> {
    /// `threads=LIST` (its IDs, none for an empty list), or a bare number continuing such a list.
    Threads(Vec<u16>),
    /// Any other option: `KEY` or `KEY=VALUE` (both trimmed), and the whole option as written (trimmed).
    Other {
        key: &'a str,
        value: Option<&'a str>,
        part: &'a str,
    },
}

/// The options of a [`Spec`], in order; empty options (`a,,b`) are skipped. An error is a thread ID that
/// is not a number in 0..=1023, with the reason.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    parts: std::str::Split<'a, char>,
    in_threads: bool,
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<SpecOption<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let part = self.parts.next()?.trim();
            if part.is_empty() {
                continue;
            }
            let (key, value) = match part.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (part, None),
            };
            if value.is_none() && self.in_threads && key.bytes().all(|c| c.is_ascii_digit()) {
                return Some(parse_thread(key).map(|t| SpecOption::Threads(vec![t])));
            }
            self.in_threads = false;
            return Some(match (key, value) {
                ("threads", Some(v)) => {
                    self.in_threads = true;
                    v.split(['+', ':'])
                        .filter(|t| !t.is_empty())
                        .map(parse_thread)
                        .collect::<Result<Vec<u16>, String>>()
                        .map(SpecOption::Threads)
                }
                _ => Ok(SpecOption::Other { key, value, part }),
            });
        }
    }
}

/// Parses one VDIF thread ID (0..=1023); the error says what is wrong.
pub fn parse_thread(t: &str) -> Result<u16, String> {
    match t.trim().parse::<u16>() {
        Ok(v) if v <= MAX_THREAD_ID => Ok(v),
        _ => Err(format!("{t:?} is not a VDIF thread ID (0..={MAX_THREAD_ID})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(spec: &str) -> Vec<Result<SpecOption<'_>, String>> {
        Spec::parse(spec).unwrap().options.collect()
    }

    #[test]
    fn splits_head_and_options() {
        let s = Spec::parse(" a = vdif @ 127.0.0.1:1 , threads=0,1,psn,,frame-size = 8032").unwrap();
        assert_eq!((s.label, s.proto, s.addr), (Some("a"), "vdif", "127.0.0.1:1"));
        let o: Vec<_> = s.options.map(Result::unwrap).collect();
        assert_eq!(
            o,
            [
                SpecOption::Threads(vec![0]),
                SpecOption::Threads(vec![1]),
                SpecOption::Other {
                    key: "psn",
                    value: None,
                    part: "psn"
                },
                SpecOption::Other {
                    key: "frame-size",
                    value: Some("8032"),
                    part: "frame-size = 8032"
                },
            ]
        );
        let s = Spec::parse("udps@host:1").unwrap();
        assert_eq!((s.label, s.proto, s.addr), (None, "udps", "host:1"));
        assert_eq!(s.options.count(), 0);
    }

    #[test]
    fn thread_lists() {
        assert_eq!(
            options("a=v@x,threads=3+4:5")[0],
            Ok(SpecOption::Threads(vec![3, 4, 5]))
        );
        assert_eq!(options("a=v@x,threads=")[0], Ok(SpecOption::Threads(vec![])));
        // A bare number elsewhere is an option like any other.
        assert!(matches!(
            options("a=v@x,psn,7")[1],
            Ok(SpecOption::Other { key: "7", .. })
        ));
        for spec in [
            "a=v@x,threads=1024",
            "a=v@x,threads=0,1,1024",
            "a=v@x,threads=3+65535",
        ] {
            let e = options(spec).into_iter().find_map(Result::err).unwrap();
            assert!(e.contains("0..=1023"), "{spec}: {e}");
        }
        assert_eq!(parse_thread("1023"), Ok(1023));
        assert!(parse_thread("x").is_err());
    }

    #[test]
    fn bad_heads() {
        assert_eq!(
            Spec::parse("a=vdif127.0.0.1:1").unwrap_err(),
            SpecSyntax::NoProtocol
        );
        assert_eq!(Spec::parse("novalue").unwrap_err(), SpecSyntax::NoProtocol);
        assert_eq!(Spec::parse_labelled("novalue").unwrap_err(), SpecSyntax::NoLabel);
        assert_eq!(
            Spec::parse_labelled("vdif@x,threads=1").unwrap_err(),
            SpecSyntax::NoLabel
        );
        assert_eq!(Spec::parse_labelled("a=vdif@x").unwrap().label, Some("a"));
        for label in ["a b", "", "x".repeat(crate::MAX_STREAM_LABEL_LEN + 1).as_str()] {
            let spec = format!("{label}=udps@127.0.0.1:1");
            assert!(matches!(Spec::parse(&spec), Err(SpecSyntax::Label(_))), "{spec}");
        }
        let longest = "x".repeat(crate::MAX_STREAM_LABEL_LEN);
        assert!(Spec::parse(&format!("{longest}=udps@127.0.0.1:1")).is_ok());
    }
}
