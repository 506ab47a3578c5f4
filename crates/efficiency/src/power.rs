//! Energy from the RAPL counters of the Linux powercap interface (`/sys/class/powercap/intel-rapl:*`, AMD
//! processors expose theirs there too): joules used by each package and its DRAM zone during a test. Many
//! hosts have them; virtual machines and kernels without CONFIG_POWERCAP do not, and reading them may need
//! root. [`EnergyMeter::open`] says which, in words a report can show.

use std::path::{Path, PathBuf};

/// Default location of the powercap zones.
pub const POWERCAP: &str = "/sys/class/powercap";

/// One RAPL zone: its name (e.g. `package-0`, `dram`), counter file and wrap-around range.
#[derive(Debug, Clone)]
struct Zone {
    name: String,
    energy: PathBuf,
    /// The counter wraps after this many microjoules.
    range_uj: u64,
}

/// Reads the RAPL zones of this host.
#[derive(Debug, Clone)]
pub struct EnergyMeter {
    zones: Vec<Zone>,
}

/// Counter values at one moment (microjoules, one per zone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnergySample(Vec<u64>);

pub use vlbiflow_net::eff::Energy;

impl EnergyMeter {
    /// Finds the readable RAPL zones under [`POWERCAP`], or says plainly why there are none.
    pub fn open() -> Result<EnergyMeter, String> {
        Self::open_at(Path::new(POWERCAP))
    }

    /// As [`open`](Self::open) under another directory (tests use a copy of the sysfs layout).
    pub fn open_at(root: &Path) -> Result<EnergyMeter, String> {
        let entries = std::fs::read_dir(root).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "not readable here: no {} (kernel without powercap/RAPL, e.g. a virtual machine)",
                    root.display()
                )
            } else {
                format!("not readable here: {}: {e}", root.display())
            }
        })?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            // Top-level zones and their subzones (intel-rapl:0, intel-rapl:0:0), not the control type.
            .filter(|n| n.starts_with("intel-rapl:") || n.starts_with("amd-rapl:"))
            .collect();
        names.sort();
        if names.is_empty() {
            return Err(format!(
                "not readable here: no RAPL zones under {}",
                root.display()
            ));
        }
        let mut zones = Vec::new();
        let mut refused = None;
        for n in names {
            // Only top-level zones are summed: subzones (core, uncore, dram of a package) are inside them.
            if n.matches(':').count() != 1 {
                continue;
            }
            let dir = root.join(&n);
            let name = std::fs::read_to_string(dir.join("name")).unwrap_or_default();
            let energy = dir.join("energy_uj");
            match std::fs::read_to_string(&energy) {
                Ok(_) => {}
                Err(e) => {
                    refused.get_or_insert(format!(
                        "not readable here: {}: {e} (needs root on many kernels)",
                        energy.display()
                    ));
                    continue;
                }
            }
            let range_uj = std::fs::read_to_string(dir.join("max_energy_range_uj"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(u64::MAX);
            zones.push(Zone {
                name: format!("{n} {}", name.trim()),
                energy,
                range_uj,
            });
        }
        if zones.is_empty() {
            return Err(refused.unwrap_or_else(|| {
                format!("not readable here: no RAPL package zone under {}", root.display())
            }));
        }
        Ok(EnergyMeter { zones })
    }

    /// The counters now (a zone that fails to read counts 0 for this sample).
    pub fn sample(&self) -> EnergySample {
        EnergySample(
            self.zones
                .iter()
                .map(|z| {
                    std::fs::read_to_string(&z.energy)
                        .ok()
                        .and_then(|t| t.trim().parse().ok())
                        .unwrap_or(0)
                })
                .collect(),
        )
    }

    /// Energy between `a` and the later `b`, each counter taken modulo its wrap-around range.
    pub fn between(&self, a: &EnergySample, b: &EnergySample) -> Energy {
        let mut e = Energy::default();
        for (z, (x, y)) in self.zones.iter().zip(a.0.iter().zip(&b.0)) {
            let uj = if y >= x {
                y - x
            } else {
                z.range_uj.saturating_sub(*x).saturating_add(*y)
            };
            let j = uj as f64 / 1e6;
            e.joules += j;
            e.zones.push((z.name.clone(), j));
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, dir: &str, name: &str, uj: u64, range: u64) {
        let d = root.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(d.join("energy_uj"), format!("{uj}\n")).unwrap();
        std::fs::write(d.join("max_energy_range_uj"), format!("{range}\n")).unwrap();
    }

    #[test]
    fn sums_packages_and_handles_wrap() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        zone(root, "intel-rapl:0", "package-0", 1_000_000, 10_000_000);
        zone(root, "intel-rapl:0:0", "dram", 5, 100);
        zone(root, "intel-rapl:1", "package-1", 9_500_000, 10_000_000);
        std::fs::create_dir_all(root.join("intel-rapl")).unwrap();
        let m = EnergyMeter::open_at(root).unwrap();
        let a = m.sample();
        zone(root, "intel-rapl:0", "package-0", 3_500_000, 10_000_000);
        // Package 1 wrapped: 9.5 J -> 10 J (range) -> 0.5 J: 1 J used.
        zone(root, "intel-rapl:1", "package-1", 500_000, 10_000_000);
        let e = m.between(&a, &m.sample());
        assert!((e.joules - 3.5).abs() < 1e-9, "{e:?}");
        assert_eq!(e.zones.len(), 2);
        assert_eq!(e.zones[0].0, "intel-rapl:0 package-0");
    }

    #[test]
    fn says_why_not() {
        let t = tempfile::tempdir().unwrap();
        let e = EnergyMeter::open_at(&t.path().join("none")).unwrap_err();
        assert!(
            e.starts_with("not readable here") && e.contains("powercap"),
            "{e}"
        );
        let e = EnergyMeter::open_at(t.path()).unwrap_err();
        assert!(e.contains("no RAPL zones"), "{e}");
    }
}
