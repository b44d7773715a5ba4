//! The state capabilities' calls (issue 53): `state.put` and `state.get`, each
//! the p50 of an execute making many calls less one making one, over the store
//! in memory, in a file (the default: every put is on disk when it returns) and
//! in Redis (a `redis-server` of its own on loopback, when one is installed);
//! and what a quota adds to an execution (its admission and its release), the
//! p50 of an execute of a subject with quotas less one without, over the same
//! stores; what a quota on a capability's calls adds to each call of it; and
//! what a task costs the task store (its creation and its end)
//! when its record is kept in a file as well as in memory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use codemode_server::quota::{QuotaConfig, QuotaLimits, Quotas};
use codemode_server::state::StateConfig;
use codemode_server::store::{StateLimits, Store, StoreLocation};
use codemode_server::{Service, ServiceConfig};

use super::{Row, bench_config, execute, percentiles, runtime, us};

/// Measures both stores; a row per call and store.
pub(crate) fn measure(root: &Path, plugins: &Path, rows: &mut Vec<Row>) {
    let folder = root.join("target/bench-state");
    let _ = std::fs::remove_dir_all(&folder);
    let redis = Redis::start();
    let mut stores = vec![
        ("in memory", StoreLocation::Memory, 100, 200),
        // A commit waits for the disk: fewer calls, fewer rounds.
        (
            "in a file",
            StoreLocation::File(folder.join("store.redb")),
            10,
            40,
        ),
    ];
    match &redis {
        Some(redis) => stores.push(("in Redis", StoreLocation::Redis(redis.url()), 100, 100)),
        None => println!("state calls in Redis: not measured (no redis-server on PATH)"),
    }
    for (label, location, many, rounds) in stores.clone() {
        let config = ServiceConfig {
            state: Some(StateConfig {
                store: Arc::new(Store::new(location)),
                limits: StateLimits::default(),
            }),
            ..bench_config(root, plugins)
        };
        let service = match Service::load(&config) {
            Ok(service) => service,
            Err(error) => panic!("cannot load the service: {error}"),
        };
        let runtime = runtime();
        let run = |source: &str| execute(&runtime, &service, source);
        let put = "state.put(key=\"k\" + str(i % 10), value={\"n\": i, \"tags\": [\"a\", \"b\"]})";
        let get = "state.get(key=\"k\" + str(i % 10))";
        let put_cost = per_call(&run, put, many, rounds);
        let get_cost = per_call(&run, get, many, rounds);
        println!(
            "state calls, the store {label}: state.put {:.1} µs, state.get {:.1} µs per call (p50 of {rounds} executes of 1 and {many}+1 calls)",
            us(put_cost),
            us(get_cost)
        );
        let (put_row, get_row) = match label {
            "in memory" => ("state.put, store in memory", "state.get, store in memory"),
            "in a file" => ("state.put, store in a file", "state.get, store in a file"),
            _ => ("state.put, store in Redis", "state.get, store in Redis"),
        };
        for (what, cost) in [(put_row, put_cost), (get_row, get_cost)] {
            rows.push(Row {
                what,
                measured: format!("{:.1} µs", us(cost)),
                target: "—",
                ratio: None,
            });
        }
    }
    let stores_for_calls = stores.clone();
    for (label, location, _, rounds) in stores {
        let cost = under_quota(root, plugins, location, rounds * 2);
        println!(
            "an execution under a quota, the store {label}: {:.1} µs more (p50 of {} executes each way)",
            us(cost),
            rounds * 2
        );
        rows.push(Row {
            what: match label {
                "in memory" => "execution under a quota, store in memory",
                "in a file" => "execution under a quota, store in a file",
                _ => "execution under a quota, store in Redis",
            },
            measured: format!("+{:.1} µs", us(cost)),
            target: "—",
            ratio: None,
        });
    }
    for (label, location, many, rounds) in stores_for_calls {
        let cost = call_under_quota(root, plugins, location, many, rounds);
        println!(
            "a native call under a quota on its capability, the store {label}: {:.1} µs more per call (p50 of {rounds} executes of 1 and {many}+1 calls each way)",
            us(cost)
        );
        rows.push(Row {
            what: match label {
                "in memory" => "native call under a capability quota, store in memory",
                "in a file" => "native call under a capability quota, store in a file",
                _ => "native call under a capability quota, store in Redis",
            },
            measured: format!("+{:.1} µs", us(cost)),
            target: "—",
            ratio: None,
        });
    }
    for (what, cost) in task_costs(&folder) {
        println!("a task made and ended, {what}: {:.1} µs (p50)", us(cost));
        rows.push(Row {
            what: match what {
                "kept in memory" => "task made and ended, kept in memory",
                _ => "task made and ended, kept in a file",
            },
            measured: format!("{:.1} µs", us(cost)),
            target: "—",
            ratio: None,
        });
    }
    let _ = std::fs::remove_dir_all(&folder);
}

/// The p50 of a task's creation and end in the task store, in memory and
/// with its record kept in a file in `folder` (the default store: the record
/// is on disk when the creation returns; the end is written behind, waited
/// for here).
fn task_costs(folder: &Path) -> [(&'static str, Duration); 2] {
    use codemode_server::tasks::{StoredTasks, TaskBoard, TaskLimits, TaskState, TaskStore};
    let runtime = runtime();
    let rounds = 200;
    let measure = |tasks: &TaskStore| {
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let started = std::time::Instant::now();
            runtime.block_on(async {
                let made = match tasks.create("bench").await {
                    Ok(made) => made,
                    Err(error) => panic!("a task: {error}"),
                };
                tasks.finish(&made.id, TaskState::Completed(Arc::from("{}")));
                // Waits for the end's record (a file store writes it behind).
                tasks.cancel_all().await;
            });
            times.push(started.elapsed());
        }
        percentiles(&mut times).0
    };
    let memory = TaskStore::Memory(TaskBoard::new(TaskLimits::default()));
    let store = Arc::new(Store::new(StoreLocation::File(folder.join("tasks.redb"))));
    let stored = runtime
        .block_on(async { TaskStore::Stored(StoredTasks::new(store, TaskLimits::default())) });
    [
        ("kept in memory", measure(&memory)),
        ("kept in a file", measure(&stored)),
    ]
}

/// What a subject's quotas add to a trivial execute on `location`: the p50
/// of `rounds` executes with every quota set (none reached) less that of
/// `rounds` without.
fn under_quota(root: &Path, plugins: &Path, location: StoreLocation, rounds: usize) -> Duration {
    let store = Arc::new(Store::new(location));
    let high = Some(u64::MAX / 4);
    let quotas = Quotas {
        defaults: QuotaLimits {
            executions_per_minute: high,
            native_calls_per_day: high,
            fuel_per_day: high,
            concurrent_executions: high,
        },
        subjects: Vec::new(),
        capabilities: Vec::new(),
    };
    let mut p50 = [Duration::ZERO; 2];
    for (with, p50) in [false, true].into_iter().zip(p50.iter_mut()) {
        let config = ServiceConfig {
            quotas: with.then(|| QuotaConfig {
                store: store.clone(),
                quotas: quotas.clone(),
                fail_open: false,
            }),
            ..bench_config(root, plugins)
        };
        let service = match Service::load(&config) {
            Ok(service) => service,
            Err(error) => panic!("cannot load the service: {error}"),
        };
        let runtime = runtime();
        let program = "def main():\n    return 1\n";
        for _ in 0..rounds / 10 + 1 {
            execute(&runtime, &service, program);
        }
        let mut times: Vec<Duration> = (0..rounds)
            .map(|_| execute(&runtime, &service, program).0)
            .collect();
        *p50 = percentiles(&mut times).0;
    }
    p50[1].saturating_sub(p50[0])
}

/// What a quota on a capability's calls adds to each call of it on
/// `location`: the per-call cost of `stats.summary` (the p50 of executes
/// making `many`+1 calls less those making one) with such a quota (never
/// reached), less the same without.
fn call_under_quota(
    root: &Path,
    plugins: &Path,
    location: StoreLocation,
    many: usize,
    rounds: usize,
) -> Duration {
    use codemode_server::quota::{CallLimits, CapabilityQuota};
    let store = Arc::new(Store::new(location));
    let high = Some(u64::MAX / 4);
    let quotas = Quotas {
        capabilities: vec![CapabilityQuota {
            capability: "stats.summary".to_owned(),
            subject: None,
            limits: CallLimits {
                calls_per_minute: high,
                calls_per_day: high,
            },
        }],
        ..Quotas::default()
    };
    let mut cost = [Duration::ZERO; 2];
    for (with, cost) in [false, true].into_iter().zip(cost.iter_mut()) {
        let config = ServiceConfig {
            quotas: with.then(|| QuotaConfig {
                store: store.clone(),
                quotas: quotas.clone(),
                fail_open: false,
            }),
            ..bench_config(root, plugins)
        };
        let service = match Service::load(&config) {
            Ok(service) => service,
            Err(error) => panic!("cannot load the service: {error}"),
        };
        let runtime = runtime();
        let run = |source: &str| execute(&runtime, &service, source);
        *cost = per_call(&run, "stats.summary(values=[1.0, 2.0])", many, rounds);
    }
    cost[1].saturating_sub(cost[0])
}

/// A `redis-server` on a loopback port, without persistence; killed when
/// dropped.
struct Redis {
    child: std::process::Child,
    port: u16,
}

impl Redis {
    /// One on a free port, once it answers; `None` without `redis-server`.
    fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .ok()?
            .port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let redis = Self { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(redis)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cost of one `call` (an expression of the loop's `i`): the p50 of an
/// execute making `many + 1` calls less that of one making one, over `many`.
fn per_call(
    run: &dyn Fn(&str) -> (Duration, codemode_server::Stats),
    call: &str,
    many: usize,
    rounds: usize,
) -> Duration {
    let program =
        |n: usize| format!("def main():\n    for i in range({n}):\n        {call}\n    return 1\n");
    let programs = [program(1), program(many + 1)];
    for _ in 0..rounds / 10 + 1 {
        for program in &programs {
            run(program);
        }
    }
    let mut times: [Vec<Duration>; 2] = Default::default();
    for _ in 0..rounds {
        for (program, times) in programs.iter().zip(times.iter_mut()) {
            times.push(run(program).0);
        }
    }
    let [one, all] = times.map(|mut times| percentiles(&mut times).0);
    all.saturating_sub(one) / many as u32
}
