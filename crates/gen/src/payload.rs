//! Frame payloads, synthesised once before sending.
//!
//! Quantising Gaussian noise costs far more per byte than sending it, so the generator builds a pool of
//! distinct payloads per thread up front and cycles through it: round k of a thread carries pool entry
//! k mod N. The statistics and spectrum of any frame are right; the same noise recurs every N frames,
//! which no check of level occupancy or spectrum can see.

use crate::plan::{GenPlan, PayloadKind};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use vlbiflow_formats::samples::{self, SampleFormat};

/// Relative amplitude of the tone against noise of unit sigma: strong in a spectrum of a few frames,
/// while the quantiser still sees mostly noise.
const TONE_AMPLITUDE: f32 = 0.5;
/// Pool memory bound per stream (all threads).
const POOL_BYTES: usize = 32 << 20;
/// Largest number of distinct payloads per thread.
const MAX_POOL_FRAMES: usize = 64;

/// Distinct payloads per thread, cycled by round number.
#[derive(Debug, Clone)]
pub struct PayloadPool {
    bytes: Vec<u8>,
    payload_len: usize,
    frames_per_thread: usize,
    threads: usize,
}

impl PayloadPool {
    /// Builds the pool for `plan`. Zeros need one shared payload; noise and tone get up to 64 per thread.
    pub fn new(plan: &GenPlan) -> Self {
        let r = &plan.request;
        let payload_len = plan.header.payload_len();
        let threads = r.thread_ids.len();
        if matches!(r.payload, PayloadKind::Zeros) {
            return PayloadPool {
                bytes: vec![0; payload_len],
                payload_len,
                frames_per_thread: 1,
                threads: 1,
            };
        }
        let frames_per_thread = (POOL_BYTES / (payload_len * threads)).clamp(1, MAX_POOL_FRAMES);
        let format =
            SampleFormat::new(r.bits, r.channels, r.complex).expect("plan checked the sample format");
        let values = format
            .values_in(payload_len)
            .expect("plan checked the payload holds whole samples");
        let mut bytes = vec![0u8; payload_len * frames_per_thread * threads];
        let mut scratch = vec![0f32; values];
        let channels = r.channels as usize;
        let per_time = if r.complex { 2 * channels } else { channels };
        for t in 0..threads {
            // One seed per thread: threads carry independent noise, as separate IFs would.
            let mut rng = SmallRng::seed_from_u64(r.seed ^ (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            for f in 0..frames_per_thread {
                for v in scratch.iter_mut() {
                    *v = rng.sample::<f32, _>(StandardNormal);
                }
                if let PayloadKind::Tone { hz } = r.payload {
                    let step = std::f64::consts::TAU * hz / plan.sample_rate_hz as f64;
                    let first = f as u64 * plan.samples_per_frame;
                    for (i, time) in scratch.chunks_exact_mut(per_time).enumerate() {
                        // Phase from the absolute sample number, modulo a full turn, keeps precision.
                        let phase = ((first + i as u64) as f64 * step) % std::f64::consts::TAU;
                        if r.complex {
                            let (s, c) = phase.sin_cos();
                            for ch in time.chunks_exact_mut(2) {
                                ch[0] += TONE_AMPLITUDE * c as f32;
                                ch[1] += TONE_AMPLITUDE * s as f32;
                            }
                        } else {
                            let c = phase.cos() as f32;
                            for v in time.iter_mut() {
                                *v += TONE_AMPLITUDE * c;
                            }
                        }
                    }
                }
                let at = (t * frames_per_thread + f) * payload_len;
                samples::encode(format, &scratch, &mut bytes[at..at + payload_len])
                    .expect("payload sized for the format");
            }
        }
        PayloadPool {
            bytes,
            payload_len,
            frames_per_thread,
            threads,
        }
    }

    /// The payload of `round` of the thread at `thread_index`.
    #[inline]
    pub fn payload(&self, thread_index: usize, round: u64) -> &[u8] {
        let t = if self.threads == 1 { 0 } else { thread_index };
        let f = (round % self.frames_per_thread as u64) as usize;
        let at = (t * self.frames_per_thread + f) * self.payload_len;
        &self.bytes[at..at + self.payload_len]
    }

    /// Distinct payloads per thread.
    pub fn frames_per_thread(&self) -> usize {
        self.frames_per_thread
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{GenRequest, RateRequest};

    fn pool(payload: PayloadKind) -> (GenPlan, PayloadPool) {
        let plan = GenPlan::new(GenRequest {
            thread_ids: vec![0, 1],
            rate: RateRequest::FramesPerSecond(2000),
            payload,
            ..Default::default()
        })
        .unwrap();
        let pool = PayloadPool::new(&plan);
        (plan, pool)
    }

    #[test]
    fn noise_has_gaussian_2bit_occupancy_and_threads_differ() {
        let (_, pool) = pool(PayloadKind::Noise);
        let mut counts = [0u64; 4];
        for round in 0..pool.frames_per_thread() as u64 {
            samples::level_counts(2, pool.payload(0, round), &mut counts);
        }
        let total: u64 = counts.iter().sum();
        let ideal = samples::ideal_2bit_occupancy();
        for (c, i) in counts.iter().zip(ideal) {
            let got = *c as f64 / total as f64;
            assert!((got - i).abs() < 0.01, "occupancy {got} vs ideal {i}");
        }
        assert_ne!(pool.payload(0, 0), pool.payload(1, 0));
        assert_ne!(pool.payload(0, 0), pool.payload(0, 1));
    }

    #[test]
    fn tone_shows_in_correlation_with_its_frequency() {
        // 2000 frames/s per stream, 2 threads -> 1000 frames/s per thread x 32768 samples = 32.768 MHz.
        let hz = 1_000_000.0;
        let (plan, pool) = pool(PayloadKind::Tone { hz });
        let format = SampleFormat::new(2, 1, false).unwrap();
        let mut decoded = vec![0f32; format.values_in(8192).unwrap()];
        samples::decode(format, pool.payload(0, 3), &mut decoded).unwrap();
        let power_at = |f: f64| {
            let step = std::f64::consts::TAU * f / plan.sample_rate_hz as f64;
            let (mut re, mut im) = (0f64, 0f64);
            for (i, v) in decoded.iter().enumerate() {
                let (s, c) = (i as f64 * step).sin_cos();
                re += *v as f64 * c;
                im += *v as f64 * s;
            }
            (re * re + im * im) / decoded.len() as f64
        };
        let on = power_at(hz);
        let off = power_at(hz * 1.37);
        assert!(on > 50.0 * off, "tone power {on} vs off-tone {off}");
    }
}
