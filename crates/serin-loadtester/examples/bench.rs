//! `make bench-loadtester`: requests per second of the built-in load generator against Debian's
//! `hey`, both with the same flags against the same local server, at -c 2 and -c 50.
//!
//! BENCH_SECONDS sets the length of each run (default 5).

use serin_loadtester::hey::parse_hey_args;
use serin_loadtester::load::run_load;
use serin_loadtester::proxy::ProxyConfig;
use std::process::{Command, ExitCode};
use std::time::Duration;

fn ensure_hey() -> Result<(), String> {
    let found = Command::new("sh")
        .args(["-c", "command -v hey"])
        .output()
        .map(|out| out.status.success());
    if found.unwrap_or(false) {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "hey is not installed; install Debian's package with `sudo apt-get install -y hey`"
                .into(),
        );
    }
    eprintln!("installing hey with apt-get");
    let installed = Command::new("apt-get")
        .args(["install", "-y", "-q", "hey"])
        .status()
        .map_err(|error| format!("cannot run apt-get: {error}"))?;
    if !installed.success() {
        return Err("apt-get install -y hey failed; install hey by hand and run again".into());
    }
    Ok(())
}

/// Starts the target on its own runtime, so both generators face the same server threads.
fn start_target() -> std::net::SocketAddr {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = axum::Router::new().route(
                "/",
                axum::routing::get(|| async { "hello from the bench target\n" }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            sender.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    receiver.recv().unwrap()
}

fn builtin(url: &str, concurrency: usize, seconds: u64) -> f64 {
    let args: Vec<String> = [
        "-z",
        &format!("{seconds}s"),
        "-c",
        &concurrency.to_string(),
        url,
    ]
    .iter()
    .map(|word| word.to_string())
    .collect();
    let plan = parse_hey_args(&args).expect("the bench's hey flags are valid");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = runtime.block_on(run_load(
        &plan,
        &ProxyConfig::direct(),
        Duration::from_secs(seconds + 5),
    ));
    let failed: u64 = report.errors.values().sum();
    assert!(
        failed * 100 <= report.requests,
        "built-in generator errors: {:?}",
        report.errors
    );
    report.requests_per_second()
}

fn hey(url: &str, concurrency: usize, seconds: u64) -> Result<f64, String> {
    let output = Command::new("hey")
        .args([
            "-z",
            &format!("{seconds}s"),
            "-c",
            &concurrency.to_string(),
            url,
        ])
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()
        .map_err(|error| format!("cannot run hey: {error}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.trim().strip_prefix("Requests/sec:"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| format!("no Requests/sec in hey's output:\n{text}"))
}

fn main() -> ExitCode {
    if let Err(error) = ensure_hey() {
        eprintln!("bench-loadtester: {error}");
        return ExitCode::FAILURE;
    }
    let seconds: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(5);
    let address = start_target();
    let url = format!("http://{address}/");
    // Warm up the target (and the page cache for hey's binary) so the first run is not penalised.
    builtin(&url, 2, 1);
    println!("built-in generator vs hey, -z {seconds}s against {url}");
    println!(
        "{:>6} {:>14} {:>14} {:>7}",
        "-c", "built-in rps", "hey rps", "ratio"
    );
    let mut all_met = true;
    for concurrency in [2usize, 50] {
        let ours = builtin(&url, concurrency, seconds);
        let theirs = match hey(&url, concurrency, seconds) {
            Ok(rps) => rps,
            Err(error) => {
                eprintln!("bench-loadtester: {error}");
                return ExitCode::FAILURE;
            }
        };
        let ratio = ours / theirs;
        all_met &= ratio >= 0.9;
        println!("{concurrency:>6} {ours:>14.0} {theirs:>14.0} {ratio:>7.2}");
    }
    println!(
        "target: built-in >= 0.9 x hey: {}",
        if all_met { "met" } else { "NOT met" }
    );
    ExitCode::SUCCESS
}
