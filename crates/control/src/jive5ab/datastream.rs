//! `datastream` (jive5ab ≥ 3.0, `src/mk5command/datastream.cc`, `src/mk6info.cc`): named sets of VDIF
//! match specifications. With datastreams defined, jive5ab records each VDIF frame into the recording
//! `<scan>_ds<name>` of the first datastream (in name order) one of whose specifications matches the frame,
//! `{thread}` and `{station}` in the name replaced from the frame's header; frames matching none are
//! dropped.
//!
//! A specification is `[[<host>][@<port>]/][<station>.]<threads>`: an optional sender (IPv4 address and/or
//! UDP port, `*` for any), an optional VDIF station (one or two letters, `0x` and 1-4 hex digits, or `*`)
//! and the threads (`*`, or a comma-separated list of ids and inclusive `lo-hi` ranges). Omitted parts
//! match everything.
//!
//! This module is the command's state and replies; the specifications, name expansion and the per-frame
//! [`Router`](vlbiflow_scan::datastream::Router) are in `vlbiflow_scan::datastream`, shared with the
//! recorder. Names are checked against vlbiflow's scan-name rule when a datastream is added.

use std::collections::BTreeMap;
use std::net::SocketAddrV4;

use super::reply::{J5Reply, ReturnCode};
use crate::proto::Statement;

pub use vlbiflow_scan::datastream::{expand, MatchSpec, StationMatch, MAX_THREAD, SUFFIX_SEP};

/// Most datastreams per runtime.
pub const MAX_DATASTREAMS: usize = 64;
/// Most specifications per datastream.
pub const MAX_SPECS: usize = 64;

/// One defined datastream: its specifications as given (for `datastream? <name>`) and compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataStream {
    pub text: Vec<String>,
    pub specs: Vec<MatchSpec>,
}

/// A runtime's datastreams, by name (jive5ab tries them in name order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataStreams {
    defined: BTreeMap<String, DataStream>,
}

impl DataStreams {
    pub fn is_empty(&self) -> bool {
        self.defined.is_empty()
    }

    pub fn len(&self) -> usize {
        self.defined.len()
    }

    pub fn get(&self, name: &str) -> Option<&DataStream> {
        self.defined.get(name)
    }

    /// The datastreams in the order they are tried.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &DataStream)> {
        self.defined.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Adds `name` with `specs` (empty ones skipped).
    pub fn add(&mut self, name: &str, specs: &[String]) -> Result<(), (ReturnCode, String)> {
        let text: Vec<String> = specs.iter().filter(|s| !s.is_empty()).cloned().collect();
        if text.is_empty() {
            return Err((
                ReturnCode::Parameter,
                "Missing data stream match specification(s)".into(),
            ));
        }
        let err4 = |m: String| Err((ReturnCode::Error, m));
        if self.defined.contains_key(name) {
            return err4(format!("The data stream '{name}' already has a definition"));
        }
        if self.defined.len() >= MAX_DATASTREAMS {
            return err4(format!("at most {MAX_DATASTREAMS} data streams"));
        }
        if text.len() > MAX_SPECS {
            return err4(format!(
                "at most {MAX_SPECS} match specifications per data stream"
            ));
        }
        // The widest expansion a frame can give: a scan name of one character, thread 1023, station as
        // four hex digits. The name must then still be a valid recording name.
        let sample = format!("x{SUFFIX_SEP}{}", expand(name, 0xffff, MAX_THREAD));
        // FlexBuff's rule (no '.'): the recordings datastreams make are FlexBuff recordings, as jive5ab's.
        if let Err(e) = vlbiflow_formats::flexbuff::validate_flexbuff_scan_name(&sample) {
            let why = match e {
                vlbiflow_formats::Error::Invalid { reason, .. } => reason.to_string(),
                e => e.to_string(),
            };
            return err4(format!(
                "data stream name '{name}' makes an invalid recording name ({why})"
            ));
        }
        let specs = text
            .iter()
            .map(|s| MatchSpec::parse(s))
            .collect::<Result<Vec<_>, _>>();
        match specs {
            Ok(specs) => {
                self.defined.insert(name.to_owned(), DataStream { text, specs });
                Ok(())
            }
            Err(e) => err4(e),
        }
    }

    pub fn remove(&mut self, name: &str) -> Result<(), (ReturnCode, String)> {
        match self.defined.remove(name) {
            Some(_) => Ok(()),
            None => Err((
                ReturnCode::Error,
                format!("The data stream '{name}' was not defined so cannot remove it"),
            )),
        }
    }

    pub fn clear(&mut self) {
        self.defined.clear();
    }

    /// The rules for the recorder's [`Router`](vlbiflow_scan::datastream::Router).
    pub fn rules(&self) -> Vec<vlbiflow_scan::datastream::Rule> {
        self.iter()
            .map(|(name, ds)| vlbiflow_scan::datastream::Rule {
                name: name.to_owned(),
                specs: ds.specs.clone(),
            })
            .collect()
    }

    /// The datastream (its unexpanded name) that takes a frame, if any.
    pub fn route(&self, station: u16, thread: u16, sender: Option<SocketAddrV4>) -> Option<&str> {
        self.defined
            .iter()
            .find(|(_, ds)| ds.specs.iter().any(|m| m.matches(station, thread, sender)))
            .map(|(k, _)| k.as_str())
    }
}

/// Whether `record=on` can start in runtime `r` given its datastreams: jive5ab's two conditions (VDIF
/// only; not together with `net_port` suffixes), then vlbiflow's own: datastreams make FlexBuff
/// recordings only (jive5ab can also make a Mark6 file per datastream).
pub(super) fn record_check(r: &super::Runtime) -> Result<(), String> {
    if r.datastreams.is_empty() {
        return Ok(());
    }
    if !matches!(
        r.mode.as_ref().map(|m| &m.format),
        Some(super::mode::Format::Vdif { .. })
    ) {
        return Err("Datastreams can only be enabled for VDIF".into());
    }
    if r.ports
        .iter()
        .any(|p| p.suffix.as_deref().is_some_and(|s| !s.is_empty()))
    {
        return Err("Mixing suffixes on datastreams and net_ports currently not supported".into());
    }
    if r.mk6 {
        return Err(
            "vlbiflow records datastreams as FlexBuff recordings only, not Mark6 (record = mk6 = 0)".into(),
        );
    }
    Ok(())
}

/// The `datastream` command and query against a runtime's datastreams. `busy`: the refusal when a
/// transfer is running (commands only; queries are always answered).
pub(super) fn datastream(ds: &mut DataStreams, st: &Statement, busy: Option<J5Reply>) -> J5Reply {
    let kw = st.keyword.as_str();
    if st.query {
        let name = st.arg(0);
        if name.is_empty() {
            let mut f = vec![ds.len().to_string()];
            f.extend(ds.iter().map(|(n, _)| n.to_owned()));
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        return match ds.get(name) {
            Some(d) => {
                let mut f = vec![name.to_owned()];
                f.extend(d.text.iter().cloned());
                J5Reply::new(kw, true, ReturnCode::Done, f)
            }
            None => J5Reply::msg(
                kw,
                true,
                ReturnCode::Parameter,
                format!("The stream '{name}' is not defined"),
            ),
        };
    }
    if let Some(r) = busy {
        return r;
    }
    let done = || J5Reply::new(kw, false, ReturnCode::Done, vec![]);
    let outcome = match st.arg(0) {
        "" => Err((
            ReturnCode::Parameter,
            "subcommand (add, remove, clear, reset) is required".to_owned(),
        )),
        "add" | "remove" if st.arg(1).is_empty() => {
            Err((ReturnCode::Parameter, "Missing data stream name".to_owned()))
        }
        "add" => ds.add(st.arg(1), st.args.get(2..).unwrap_or(&[])),
        "remove" => ds.remove(st.arg(1)),
        "clear" => {
            ds.clear();
            Ok(())
        }
        // jive5ab forgets the names it expanded for the last recording; vlbiflow expands them per
        // recording, so there is nothing to forget.
        "reset" => Ok(()),
        other => Err((ReturnCode::NotNow, format!("{other} does not apply to {kw}"))),
    };
    match outcome {
        Ok(()) => done(),
        Err((code, msg)) => J5Reply::msg(kw, false, code, msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_datastream_by_name_takes_the_frame() {
        let mut ds = DataStreams::default();
        ds.add("b-odd", &["*.1,3,5,7".into()]).unwrap();
        ds.add("a-low", &["0-3".into()]).unwrap();
        assert_eq!(ds.route(0, 1, None), Some("a-low"));
        assert_eq!(ds.route(0, 5, None), Some("b-odd"));
        assert_eq!(ds.route(0, 6, None), None);
        assert_eq!(
            ds.add("bad name", &["*".into()]).unwrap_err().0,
            ReturnCode::Error
        );
        let long = "n".repeat(61);
        assert!(
            ds.add(&long, &["*".into()]).is_err(),
            "x_ds + 61 bytes is over 64"
        );
        assert!(ds.add(&"n".repeat(60), &["*".into()]).is_ok());
        assert!(ds.add("{station}{station}", &["*".into()]).is_ok());
        let e = ds.add("a.b", &["*".into()]).unwrap_err().1;
        assert!(e.contains("must not contain '.'"), "{e}");
        assert_eq!(ds.len(), 4);
    }
}
