//! `input_stream`: staging, committing, deleting and listing the input streams.

use std::path::PathBuf;

use super::{Controller, Result};
use crate::proto::{Reply, ReturnCode as Rc, Statement};
use crate::stream::{parse_input_stream, InputStream};

impl Controller {
    pub(super) fn input_stream(&mut self, st: &Statement) -> Result {
        let bad = |reason: String| Reply::reason(st, Rc::Parameter, reason);
        match st.arg(0).to_ascii_lowercase().as_str() {
            "add" => {
                let mut s = parse_input_stream(&st.args[1..]).map_err(bad)?;
                s.from = self.cfg.from.clone();
                if self.staged.iter().any(|x| x.label == s.label) {
                    return Err(Reply::reason(
                        st,
                        Rc::Conflict,
                        format!("stream {} exists: delete it first", s.label),
                    ));
                }
                if s.address.port() != 0 && self.staged.iter().any(|x| x.address == s.address) {
                    return Err(Reply::reason(
                        st,
                        Rc::Conflict,
                        format!("another stream receives on {}", s.address),
                    ));
                }
                let label = s.label.clone();
                self.staged.push(s);
                Ok(Reply::to(st, Rc::Done, vec!["added".into(), label]))
            }
            "delete" => {
                let label = st.arg(1);
                let before = self.staged.len();
                self.staged.retain(|x| x.label != label);
                if self.staged.len() == before {
                    return Err(bad(format!("no stream {label:?} (input_stream? lists them)")));
                }
                Ok(Reply::to(st, Rc::Done, vec!["deleted".into(), label.into()]))
            }
            "commit" => {
                if self.busy() {
                    return Err(Reply::reason(
                        st,
                        Rc::Conflict,
                        format!("{}: streams cannot change now", self.state_name()),
                    ));
                }
                if !self.staged.is_empty() {
                    let mut check = self.cfg.recorder.clone();
                    check.streams = self.staged.iter().map(InputStream::spec).collect();
                    check.disks = vec![PathBuf::from("/")];
                    check.scan = "check".into();
                    check.validate().map_err(|e| bad(e.to_string()))?;
                }
                self.committed = self.staged.clone();
                self.event(format!("{} input stream(s) committed", self.committed.len()));
                Ok(Reply::to(
                    st,
                    Rc::Done,
                    vec!["committed".into(), self.committed.len().to_string()],
                ))
            }
            "" => Err(bad("expected add, delete or commit".into())),
            other => Err(bad(format!("{other:?} is not add, delete or commit"))),
        }
    }

    pub(super) fn input_stream_query(&self, st: &Statement) -> Reply {
        let mut f = vec![self.committed.len().to_string()];
        for s in &self.committed {
            f.extend(s.fields());
        }
        if self.staged != self.committed {
            f.push("uncommitted changes".into());
        }
        Reply::to(st, Rc::Done, f)
    }
}
