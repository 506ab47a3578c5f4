//! The few operations the jive5ab dialect ([`crate::jive5ab`]) needs beyond the Mark6 statements: it
//! describes its streams and disks in its own words (`mode`, `net_port`, `set_disks`, `record=mk6`), and
//! sets them here directly rather than through `input_stream` and `group` statements.

use std::path::PathBuf;

use vlbiflow_scan::ScanFormat;

use super::{Controller, InputStream, RecordState};

impl Controller {
    /// Replaces the committed (and staged) input streams, checked as `input_stream=commit` checks them;
    /// refused while a recording is on.
    pub(crate) fn set_streams(&mut self, streams: Vec<InputStream>) -> Result<(), String> {
        if self.busy() {
            return Err(format!("{}: streams cannot change now", self.state_name()));
        }
        if !streams.is_empty() {
            let mut check = self.cfg.recorder.clone();
            check.streams = streams.iter().map(InputStream::spec).collect();
            check.disks = vec![PathBuf::from("/")];
            check.scan = "check".into();
            check.validate().map_err(|e| e.to_string())?;
        }
        self.staged = streams.clone();
        self.committed = streams;
        Ok(())
    }

    /// Defines (or redefines) group `name` as `patterns` and opens it; returns how many of its
    /// directories exist. Refused while a recording is on.
    pub(crate) fn set_group(&mut self, name: &str, patterns: Vec<String>) -> Result<usize, String> {
        if self.busy() {
            return Err(format!("{}: disks cannot change now", self.state_name()));
        }
        let n = self.disks.expand(&patterns).len();
        self.cfg.groups.insert(name.to_owned(), patterns);
        self.nominal.insert(name.to_owned(), n);
        let found = self.space_of(&self.group_disks(name)).2;
        self.open_group = Some(name.to_owned());
        Ok(found)
    }

    /// The scans on the disks `set_disks` selected, read from those disks now (as jive5ab's `scan_set`
    /// and `scan_check?` see the selected mount points); the daemon's own list while none is selected.
    pub(crate) fn scans_on_open_disks(&self) -> Vec<super::ScanEntry> {
        if self.open_group.is_none() {
            return self.scans().to_vec();
        }
        super::scan_list::scan_list(self.disks.as_ref(), &self.open_disks().0)
    }

    /// The open group's existing directories, and its free and total bytes.
    pub(crate) fn open_disks(&self) -> (Vec<PathBuf>, u64, u64) {
        let Some(g) = &self.open_group else {
            return (Vec::new(), 0, 0);
        };
        let disks: Vec<PathBuf> = self
            .group_disks(g)
            .into_iter()
            .filter(|d| self.disks.is_dir(d))
            .collect();
        let (free, total, _) = self.space_of(&disks);
        (disks, free, total)
    }

    /// Sets the datastream rules of later recordings (empty: one recording per scan).
    pub(crate) fn set_datastreams(&mut self, rules: Vec<vlbiflow_scan::datastream::Rule>) {
        self.cfg.recorder.datastreams = rules;
    }

    /// Sets the recording layout (Mark6 scatter-gather files or FlexBuff chunks) of later recordings.
    pub(crate) fn set_format(&mut self, format: ScanFormat) {
        self.cfg.recorder.format = format;
    }

    /// Bytes received by the recording on now, if one is.
    pub(crate) fn recording_bytes(&self) -> Option<u64> {
        match &self.state {
            RecordState::Active { rec, .. } => Some(rec.status().totals().bytes),
            RecordState::Starting { .. } => Some(0),
            _ => None,
        }
    }

    /// Why the last recording failed or ended in error, if it did.
    pub(crate) fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}
