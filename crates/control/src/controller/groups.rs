//! Disk groups: their directories and space, `group` (new, open, close), `group?` and `mstat?`.

use std::path::{Path, PathBuf};

use vlbiflow_scan::ScanFormat;

use super::{Controller, Result};
use crate::proto::{Reply, ReturnCode as Rc, Statement};

impl Controller {
    /// Every directory of a group: globs expanded, plain paths as given.
    pub(super) fn group_disks(&self, group: &str) -> Vec<PathBuf> {
        self.cfg
            .groups
            .get(group)
            .map(|g| self.disks.expand(g))
            .unwrap_or_default()
    }

    /// Every directory of every group, without repeats.
    pub(super) fn all_disks(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for g in self.cfg.groups.keys() {
            for d in self.group_disks(g) {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
        out
    }

    /// Free and total bytes over `disks` and how many exist, counting each file system once.
    pub(super) fn space_of(&self, disks: &[PathBuf]) -> (u64, u64, usize) {
        let mut seen = Vec::new();
        let (mut free, mut total, mut found) = (0, 0, 0);
        for d in disks {
            let Some(dev) = self.disks.dir_device(d) else {
                continue;
            };
            found += 1;
            if seen.contains(&dev) {
                continue;
            }
            seen.push(dev);
            if let Some((f, t)) = self.disks.space(d) {
                free += f;
                total += t;
            }
        }
        (free, total, found)
    }

    pub(super) fn group(&mut self, st: &Statement) -> Result {
        let verb = st.arg(0).to_ascii_lowercase();
        let name = st.arg(1).to_string();
        let known = |name: &str| -> std::result::Result<(), Reply> {
            if self.cfg.groups.contains_key(name) {
                Ok(())
            } else {
                Err(Reply::reason(
                    st,
                    Rc::Parameter,
                    format!(
                        "no group {name:?} in the configuration (groups: {})",
                        self.cfg.groups.keys().cloned().collect::<Vec<_>>().join(",")
                    ),
                ))
            }
        };
        match verb.as_str() {
            "new" => {
                known(&name)?;
                let mut created = 0;
                for p in &self.cfg.groups[&name] {
                    if p.contains(['*', '?', '[']) {
                        continue;
                    }
                    if !self.disks.is_dir(Path::new(p)) {
                        self.disks
                            .create_dir_all(Path::new(p))
                            .map_err(|e| Reply::reason(st, Rc::Failed, format!("{p}: {e}")))?;
                        created += 1;
                    }
                }
                let found = self.space_of(&self.group_disks(&name)).2;
                Ok(Reply::to(
                    st,
                    Rc::Done,
                    vec![name, format!("{found} disks"), format!("{created} created")],
                ))
            }
            "open" => {
                known(&name)?;
                if self.busy() {
                    return Err(Reply::reason(
                        st,
                        Rc::Conflict,
                        format!("{}: close it first", self.state_name()),
                    ));
                }
                let disks = self.group_disks(&name);
                let found = self.space_of(&disks).2;
                if found == 0 {
                    return Err(Reply::reason(
                        st,
                        Rc::Failed,
                        format!("group {name}: no directory found (group=new:{name} creates plain paths)"),
                    ));
                }
                self.open_group = Some(name.clone());
                self.event(format!("group {name} opened: {found} of {} disk(s)", disks.len()));
                Ok(Reply::to(st, Rc::Done, vec![name, format!("{found} disks")]))
            }
            "close" => {
                let Some(open) = self.open_group.clone() else {
                    return Err(Reply::reason(st, Rc::NotNow, "no group is open"));
                };
                if !name.is_empty() && name != open {
                    return Err(Reply::reason(
                        st,
                        Rc::Parameter,
                        format!("group {name:?} is not open ({open} is)"),
                    ));
                }
                if self.busy() {
                    return Err(Reply::reason(
                        st,
                        Rc::Conflict,
                        format!("{}: group in use", self.state_name()),
                    ));
                }
                self.open_group = None;
                self.event(format!("group {open} closed"));
                Ok(Reply::to(st, Rc::Done, vec![open]))
            }
            "mount" | "unmount" | "protect" | "unprotect" | "erase" => Err(Reply::reason(
                st,
                Rc::NotNow,
                "not applicable: vlbiflow groups are directories named in the configuration",
            )),
            "" => Err(Reply::reason(st, Rc::Parameter, "expected new, open or close")),
            other => Err(Reply::reason(
                st,
                Rc::Parameter,
                format!("{other:?} is not new, open or close"),
            )),
        }
    }

    pub(super) fn group_query(&self, st: &Statement) -> Reply {
        let mut f = vec![self.open_group.clone().unwrap_or_else(|| "none".into())];
        f.extend(self.cfg.groups.keys().cloned());
        Reply::to(st, Rc::Done, f)
    }

    pub(super) fn mstat(&self, st: &Statement) -> Result {
        let which = st.arg(0);
        let names: Vec<&String> = match which.to_ascii_lowercase().as_str() {
            "" | "all" => self.cfg.groups.keys().collect(),
            _ => match self.cfg.groups.get_key_value(which) {
                Some((k, _)) => vec![k],
                None => return Err(Reply::reason(st, Rc::Parameter, format!("no group {which:?}"))),
            },
        };
        let mut f = Vec::new();
        for (i, name) in names.into_iter().enumerate() {
            let disks = self.group_disks(name);
            let (free, total, found) = self.space_of(&disks);
            let nominal = self.nominal.get(name).copied().unwrap_or(disks.len());
            let open = self.open_group.as_deref() == Some(name.as_str());
            let status2 = if open && self.busy() {
                self.state_name()
            } else if found < nominal {
                "disks missing"
            } else {
                "ready"
            };
            f.extend([
                name.clone(),
                (i + 1).to_string(),
                name.clone(),
                found.to_string(),
                nominal.to_string(),
                format!("{:.3}", free as f64 / 1e9),
                format!("{:.3}", total as f64 / 1e9),
                if open { "open" } else { "closed" }.into(),
                status2.into(),
                match self.cfg.recorder.format {
                    ScanFormat::Mark6 => "sg",
                    ScanFormat::Flexbuff => "flexbuff",
                }
                .into(),
            ]);
        }
        Ok(Reply::to(st, Rc::Done, f))
    }
}
