use super::*;
use proptest::prelude::*;

const G: f64 = 1e9;

fn station(name: &str, weight: f64, limit: Option<f64>) -> StationSpec {
    StationSpec {
        name: name.into(),
        weight,
        limit_bps: limit,
        concurrency: 1,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

fn shares(s: &Scheduler) -> Vec<f64> {
    s.stations().map(|i| s.share(i)).collect()
}

fn drain(s: &mut Scheduler) -> Vec<Event> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

#[test]
fn weights_divide_the_link() {
    let t0 = Instant::now();
    let mut s = Scheduler::new(SchedConfig::new(4.0 * G));
    let a = s.add_station(station("a", 1.0, None), t0);
    let b = s.add_station(station("b", 3.0, None), t0);
    s.set_need(a, 100, t0);
    assert!(close(s.share(a), 4.0 * G), "alone it takes the link");
    s.set_need(b, 100, t0);
    assert!(close(s.share(a), 1.0 * G));
    assert!(close(s.share(b), 3.0 * G));
    let ev = drain(&mut s);
    assert!(
        ev.contains(&Event::Share {
            station: a,
            bps: 1.0 * G
        }),
        "{ev:?}"
    );
    assert!(
        ev.contains(&Event::Share {
            station: b,
            bps: 3.0 * G
        }),
        "{ev:?}"
    );
}

#[test]
fn a_capped_station_gives_the_rest_to_the_others() {
    let t0 = Instant::now();
    let mut s = Scheduler::new(SchedConfig::new(10.0 * G));
    let a = s.add_station(station("a", 1.0, Some(1.0 * G)), t0);
    let b = s.add_station(station("b", 1.0, None), t0);
    let c = s.add_station(station("c", 2.0, Some(5.0 * G)), t0);
    for i in [a, b, c] {
        s.set_need(i, 1 << 30, t0);
    }
    // a takes its 1 G; 9 G left for b (1) and c (2): 3 and 6, c capped at 5, so b gets 4
    assert!(close(s.share(a), 1.0 * G), "{:?}", shares(&s));
    assert!(close(s.share(c), 5.0 * G), "{:?}", shares(&s));
    assert!(close(s.share(b), 4.0 * G), "{:?}", shares(&s));
}

#[test]
fn a_station_with_nothing_to_send_takes_nothing_and_a_finished_one_gives_its_share_back() {
    let t0 = Instant::now();
    let mut s = Scheduler::new(SchedConfig::new(2.0 * G));
    let a = s.add_station(station("a", 1.0, None), t0);
    let b = s.add_station(station("b", 1.0, None), t0);
    s.set_need(a, 10, t0);
    assert_eq!(s.share(b), 0.0);
    s.set_need(b, 10, t0);
    assert_eq!(s.poll_start(t0), Some(a));
    assert_eq!(s.poll_start(t0), Some(b));
    assert_eq!(s.poll_start(t0), None, "one pull per station by default");
    assert!(close(s.share(a), G));
    s.set_need(a, 0, t0);
    s.pull_ended(a, PullEnd::Done, t0);
    assert_eq!(s.share(a), 0.0);
    assert!(close(s.share(b), 2.0 * G));
    assert_eq!(s.poll_start(t0), None, "a has nothing left");
}

#[test]
fn concurrency_allows_several_pulls_per_station() {
    let t0 = Instant::now();
    let mut s = Scheduler::new(SchedConfig::new(G));
    let mut spec = station("a", 1.0, None);
    spec.concurrency = 2;
    let a = s.add_station(spec, t0);
    let b = s.add_station(station("b", 1.0, None), t0);
    s.set_need(a, 10, t0);
    s.set_need(b, 10, t0);
    let started: Vec<_> = std::iter::from_fn(|| s.poll_start(t0)).collect();
    assert_eq!(started, vec![a, b, a], "fewest running first, then by order");
    assert_eq!(s.running(a), 2);
}

#[test]
fn a_stalled_station_is_stopped_its_share_goes_to_the_others_and_it_is_retried() {
    let t0 = Instant::now();
    let mut cfg = SchedConfig::new(2.0 * G);
    cfg.stall_after = Duration::from_secs(30);
    cfg.backoff_min = Duration::from_secs(2);
    let mut s = Scheduler::new(cfg);
    let a = s.add_station(station("a", 1.0, None), t0);
    let b = s.add_station(station("b", 1.0, None), t0);
    s.set_need(a, 10, t0);
    s.set_need(b, 10, t0);
    assert_eq!(s.poll_start(t0), Some(a));
    assert_eq!(s.poll_start(t0), Some(b));
    drain(&mut s);
    let t = t0 + Duration::from_secs(20);
    s.progress(b, t);
    assert_eq!(
        s.poll_timeout(t),
        Some(t0 + Duration::from_secs(30)),
        "a's stall is next"
    );
    let t = t0 + Duration::from_secs(30);
    s.handle_timeout(t);
    let ev = drain(&mut s);
    assert!(
        ev.contains(&Event::Stop {
            station: a,
            retry_in: Duration::from_secs(2)
        }),
        "{ev:?}"
    );
    assert!(ev.contains(&Event::Share { station: a, bps: 0.0 }), "{ev:?}");
    assert!(
        ev.contains(&Event::Share {
            station: b,
            bps: 2.0 * G
        }),
        "{ev:?}"
    );
    s.pull_ended(a, PullEnd::Stopped, t);
    assert_eq!(s.poll_start(t), None, "held back");
    let t = t + Duration::from_secs(2);
    assert_eq!(s.poll_start(t), Some(a), "retried after the back-off");
    assert!(close(s.share(a), G));
    s.progress(a, t + Duration::from_secs(1));
    assert_eq!(drain(&mut s).last(), Some(&Event::Back { station: a }));
    assert_eq!(s.failures(a), 0);
}

#[test]
fn a_station_gone_away_backs_off_exponentially_to_the_cap_and_comes_back() {
    let t0 = Instant::now();
    let mut cfg = SchedConfig::new(G);
    cfg.backoff_min = Duration::from_secs(1);
    cfg.backoff_max = Duration::from_secs(60);
    cfg.stall_after = Duration::from_secs(3600);
    let mut s = Scheduler::new(cfg);
    let a = s.add_station(station("a", 1.0, None), t0);
    let b = s.add_station(station("b", 1.0, None), t0);
    s.set_need(a, 10, t0);
    s.set_need(b, 10, t0);
    assert_eq!(s.poll_start(t0), Some(a));
    assert_eq!(s.poll_start(t0), Some(b));
    let mut t = t0;
    let mut waits = Vec::new();
    for _ in 0..9 {
        s.pull_ended(a, PullEnd::Unreachable, t);
        let ev = drain(&mut s);
        let wait = ev
            .iter()
            .find_map(|e| match e {
                Event::Away {
                    station, retry_in, ..
                } if *station == a => Some(*retry_in),
                _ => None,
            })
            .expect("reported away");
        waits.push(wait.as_secs());
        assert_eq!(s.share(a), 0.0);
        assert!(
            close(s.share(b), G),
            "b has the whole link while a is away: {:?} {ev:?}",
            shares(&s)
        );
        assert_eq!(s.poll_start(t + wait - Duration::from_millis(1)), None);
        assert_eq!(s.poll_timeout(t), Some(t + wait));
        t += wait;
        assert_eq!(s.poll_start(t), Some(a));
    }
    assert_eq!(waits, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
    assert!(close(s.share(a), G / 2.0));
    s.progress(a, t);
    assert!(drain(&mut s).contains(&Event::Back { station: a }));
    s.pull_ended(a, PullEnd::Failed, t);
    assert!(
        drain(&mut s).contains(&Event::Away {
            station: a,
            failures: 1,
            retry_in: Duration::from_secs(1)
        }),
        "coming back resets the back-off"
    );
}

#[test]
fn a_changing_capacity_is_divided_again() {
    let t0 = Instant::now();
    let mut s = Scheduler::new(SchedConfig::new(3.0 * G));
    let a = s.add_station(station("a", 2.0, Some(1.5 * G)), t0);
    let b = s.add_station(station("b", 1.0, None), t0);
    s.set_need(a, 1, t0);
    s.set_need(b, 1, t0);
    assert!(
        close(s.share(a), 1.5 * G) && close(s.share(b), 1.5 * G),
        "{:?}",
        shares(&s)
    );
    drain(&mut s);
    s.set_total(1.5 * G, t0);
    assert!(
        close(s.share(a), 1.0 * G) && close(s.share(b), 0.5 * G),
        "{:?}",
        shares(&s)
    );
    assert_eq!(drain(&mut s).len(), 2);
    s.set_total(10.0 * G, t0);
    assert!(
        close(s.share(a), 1.5 * G) && close(s.share(b), 8.5 * G),
        "{:?}",
        shares(&s)
    );
    s.set_limit(b, Some(G), t0);
    assert!(close(s.share(b), G), "a limit below the share is the share");
}

#[test]
fn backoff_doubles_and_saturates() {
    let (min, max) = (Duration::from_millis(500), Duration::from_secs(60));
    assert_eq!(backoff(min, max, 1), min);
    assert_eq!(backoff(min, max, 3), Duration::from_secs(2));
    assert_eq!(backoff(min, max, 1000), max);
}

proptest! {
    #[test]
    fn shares_stay_within_the_total_and_the_caps_and_fill_the_link(
        total in 0.0f64..1e11,
        claims in proptest::collection::vec(
            proptest::option::of((0.01f64..100.0, proptest::option::of(0.0f64..2e10))),
            0..30,
        ),
    ) {
        let c: Vec<Option<(f64, f64)>> =
            claims.iter().map(|c| c.map(|(w, cap)| (w, cap.unwrap_or(f64::INFINITY)))).collect();
        let s = water_fill(total, c.iter().copied());
        let sum: f64 = s.iter().sum();
        prop_assert!(sum <= total * (1.0 + 1e-9) + 1e-6, "sum {sum} > total {total}");
        for (share, claim) in s.iter().zip(&c) {
            prop_assert!(*share >= 0.0);
            match claim {
                None => prop_assert_eq!(*share, 0.0),
                Some((_, cap)) => prop_assert!(*share <= cap * (1.0 + 1e-9) + 1e-6, "{share} > cap {cap}"),
            }
        }
        let demand: f64 = c.iter().flatten().map(|c| c.1).sum();
        if demand >= total {
            prop_assert!(sum >= total * (1.0 - 1e-9) - 1e-6, "link not filled: {sum} of {total}, demand {demand}");
        } else {
            prop_assert!(close(sum, demand), "every claimant at its cap: {sum} vs {demand}");
        }
        // uncapped claimants share by weight: equal share per unit of weight among those below their cap
        let per_w: Vec<f64> = s.iter().zip(&c).filter_map(|(sh, cl)| {
            cl.and_then(|(w, cap)| (*sh < cap * (1.0 - 1e-9)).then_some(sh / w))
        }).collect();
        for p in &per_w {
            prop_assert!(close(*p, per_w[0]), "{per_w:?}");
        }
    }

    #[test]
    fn the_scheduler_never_gives_more_than_the_link_nor_a_station_more_than_its_limit(
        total in 1e6f64..1e11,
        stations in proptest::collection::vec((0.1f64..10.0, proptest::option::of(1e6f64..2e10)), 1..12),
        steps in proptest::collection::vec((0usize..12, 0u8..6, 0u64..120), 0..60),
    ) {
        let t0 = Instant::now();
        let mut s = Scheduler::new(SchedConfig::new(total));
        let ids: Vec<_> = stations.iter().enumerate()
            .map(|(i, (w, l))| s.add_station(station(&format!("s{i}"), *w, *l), t0)).collect();
        let mut t = t0;
        for (who, what, secs) in steps {
            let id = ids[who % ids.len()];
            t += Duration::from_secs(secs);
            match what {
                0 => s.set_need(id, secs, t),
                1 => { let _ = s.poll_start(t); }
                2 => if s.running(id) > 0 { s.pull_ended(id, PullEnd::Failed, t) },
                3 => s.progress(id, t),
                4 => s.handle_timeout(t),
                // a rate of none, half or all of its share
                _ => { let used = s.share(id) * (secs % 3) as f64 / 2.0; s.measured(id, used, t) }
            }
            let sum: f64 = ids.iter().map(|&i| s.share(i)).sum();
            prop_assert!(sum <= total * (1.0 + 1e-9));
            for (&i, (_, l)) in ids.iter().zip(&stations) {
                if let Some(l) = l { prop_assert!(s.share(i) <= l * (1.0 + 1e-9)); }
            }
        }
    }
}

#[test]
fn a_station_using_less_than_its_share_gives_the_rest_away_and_gets_it_back_when_it_uses_it() {
    let t0 = Instant::now();
    let sec = Duration::from_secs(1);
    let mut s = Scheduler::new(SchedConfig::new(1.0 * G));
    let a = s.add_station(station("a", 1.0, None), t0);
    let b = s.add_station(station("b", 1.0, None), t0);
    s.set_need(a, 1 << 40, t0);
    s.set_need(b, 1 << 40, t0);
    assert_eq!(s.poll_start(t0), Some(a));
    assert_eq!(s.poll_start(t0), Some(b));
    assert!(close(s.share(a), 0.5 * G) && close(s.share(b), 0.5 * G));
    // a (a scan followed while it is recorded at 100 Mb/s) uses a fifth of its share; b uses all of its own
    for k in 1..=2 {
        s.measured(a, 0.1 * G, t0 + sec * k);
        s.measured(b, 0.5 * G, t0 + sec * k);
    }
    // not within the grace: the share is kept while a pull may still be ramping up
    assert!(close(s.share(a), 0.5 * G), "{:?}", shares(&s));
    s.measured(a, 0.1 * G, t0 + sec * 3);
    assert!(close(s.share(a), 0.125 * G), "{:?}", shares(&s));
    assert!(
        close(s.share(b), 0.875 * G),
        "the rest goes to b: {:?}",
        shares(&s)
    );
    assert!(close(s.share(a) + s.share(b), 1.0 * G), "the link stays full");
    // b's share grew; its pull follows it
    s.measured(b, 0.85 * G, t0 + sec * 4);
    // a's recorder speeds up: a uses what it has, and its cut doubles until it no longer binds
    s.measured(a, 0.125 * G, t0 + sec * 4);
    assert!(close(s.share(a), 0.25 * G), "{:?}", shares(&s));
    s.measured(a, 0.25 * G, t0 + sec * 5);
    assert!(
        close(s.share(a), 0.5 * G),
        "back at its fair share: {:?}",
        shares(&s)
    );
    assert!(close(s.share(b), 0.5 * G));
}

#[test]
fn a_station_between_pulls_gives_its_share_away_and_a_new_pull_starts_on_the_fair_share() {
    let t0 = Instant::now();
    let sec = Duration::from_secs(1);
    let mut cfg = SchedConfig::new(1.0 * G);
    cfg.demand_floor = 0.02;
    let mut s = Scheduler::new(cfg);
    let a = s.add_station(station("a", 1.0, None), t0);
    let b = s.add_station(station("b", 1.0, None), t0);
    s.set_need(a, 1 << 40, t0);
    s.set_need(b, 1 << 40, t0);
    s.set_startable(a, 0); // a waits for its next scan to appear
    assert_eq!(s.poll_start(t0), Some(b));
    assert_eq!(s.poll_start(t0), None);
    for k in 1..=3 {
        s.measured(a, 0.0, t0 + sec * k);
    }
    assert!(close(s.share(a), 0.02 * G), "cut to the floor: {:?}", shares(&s));
    assert!(close(s.share(b), 0.98 * G));
    s.set_startable(a, 1);
    assert_eq!(s.poll_start(t0 + sec * 4), Some(a));
    assert!(
        close(s.share(a), 0.5 * G),
        "a new pull has the fair share: {:?}",
        shares(&s)
    );
    assert!(close(s.share(b), 0.5 * G));
    let ev = drain(&mut s);
    assert!(
        ev.contains(&Event::Share {
            station: b,
            bps: 0.5 * G
        }),
        "{ev:?}"
    );
}

#[test]
fn a_cut_never_goes_below_the_floor_nor_above_the_limit() {
    let t0 = Instant::now();
    let sec = Duration::from_secs(1);
    let mut s = Scheduler::new(SchedConfig::new(1.0 * G));
    let a = s.add_station(station("a", 1.0, Some(0.3 * G)), t0);
    s.set_need(a, 1 << 40, t0);
    assert_eq!(s.poll_start(t0), Some(a));
    assert!(close(s.share(a), 0.3 * G));
    for k in 1..=3 {
        s.measured(a, 0.0, t0 + sec * k);
    }
    assert!(close(s.share(a), 0.01 * G), "{:?}", shares(&s));
    // doubling stops at the limit and the cut is dropped once it reaches the link
    for k in 4..=20 {
        let share = s.share(a);
        s.measured(a, share, t0 + sec * k);
        assert!(s.share(a) <= 0.3 * G * (1.0 + 1e-9));
    }
    assert!(close(s.share(a), 0.3 * G));
}
