//! Counters of one end over one test: its thread's, its process's and the host's CPU time, and RAPL energy.

use std::time::Instant;

use vlbiflow_net::eff::EndUsage;
use vlbiflow_net::host::{boot_id, CpuTicks, ProcessCpu};

use crate::power::{EnergyMeter, EnergySample};

/// Counters taken at the start of a test, turned into [`EndUsage`] at its end.
pub(crate) struct EndMeter {
    at: Instant,
    cpu: CpuTicks,
    process: ProcessCpu,
    meter: Result<EnergyMeter, String>,
    energy: Option<EnergySample>,
}

impl EndMeter {
    pub(crate) fn start() -> EndMeter {
        let meter = EnergyMeter::open();
        let energy = meter.as_ref().ok().map(EnergyMeter::sample);
        EndMeter {
            at: Instant::now(),
            cpu: CpuTicks::read(),
            process: ProcessCpu::read(),
            meter,
            energy,
        }
    }

    pub(crate) fn finish(self, thread: ProcessCpu) -> EndUsage {
        let (energy, energy_note) = match (&self.meter, &self.energy) {
            (Ok(m), Some(a)) => (Some(m.between(a, &m.sample())), None),
            (Err(why), _) => (None, Some(why.clone())),
            _ => (None, Some("not readable here".into())),
        };
        EndUsage {
            thread,
            process: ProcessCpu::read().since(&self.process),
            host: CpuTicks::read().seconds_since(&self.cpu),
            interval_s: self.at.elapsed().as_secs_f64(),
            energy,
            energy_note,
            boot_id: boot_id(),
        }
    }
}
