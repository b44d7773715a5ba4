//! The real server binary under test: started on a loopback port, timed to "ready",
//! driven by keep-alive HTTP clients, and its memory, threads and open files read
//! from `/proc`. Shared by the bench and the soak (`tests/soak.rs` includes this
//! file), so both drive the server the same way.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The log line after which the server answers requests.
const READY: &str = "ready to serve";

/// A running `codemode-host --listen 127.0.0.1:0`.
pub struct Server {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    /// Time from spawn to the "ready to serve" log line.
    pub ready_after: Duration,
    /// Lines logged until ready.
    pub log: Vec<String>,
    /// Lines logged after ready (drained in the background so the pipe never fills).
    later: Arc<Mutex<Vec<String>>>,
    /// The thread draining stderr; it ends when the server closes its stderr.
    drain: Option<std::thread::JoinHandle<()>>,
}

/// The `codemode-host` binary built with the same profile as this bench.
pub fn host_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
    let dir = exe
        .parent()
        .unwrap_or_else(|| panic!("{} has no folder", exe.display()));
    let host = dir.join("codemode-host");
    assert!(
        host.is_file(),
        "{} missing: build it with the bench's profile (`cargo xtask bench` does)",
        host.display()
    );
    host
}

impl Server {
    /// Starts the server on `plugins` with `cache` and waits until it is ready.
    pub fn start(plugins: &Path, cache: &Path) -> Self {
        let args = [
            OsStr::new("--allow-all"),
            OsStr::new("--no-watch"),
            OsStr::new("--plugins"),
            plugins.as_os_str(),
            OsStr::new("--cache-dir"),
            cache.as_os_str(),
        ];
        Self::spawn(&host_binary(), &args)
    }

    /// Starts `binary --listen 127.0.0.1:0 ARGS` and waits until it is ready.
    pub fn spawn(binary: &Path, args: &[&OsStr]) -> Self {
        let started = Instant::now();
        let mut child = Command::new(binary)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
        let stderr = child
            .stderr
            .take()
            .unwrap_or_else(|| panic!("no stderr pipe"));
        let mut lines = BufReader::new(stderr).lines();
        let mut log = Vec::new();
        let mut port = None;
        let mut ready_after = None;
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(at) = line.find("http://127.0.0.1:") {
                let digits: String = line[at + 17..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                port = digits.parse().ok();
            }
            let ready = line.ends_with(READY);
            log.push(line);
            if ready {
                ready_after = Some(started.elapsed());
                break;
            }
        }
        let (Some(port), Some(ready_after)) = (port, ready_after) else {
            let _ = child.kill();
            panic!("codemode-host did not get ready:\n{}", log.join("\n"));
        };
        let later = Arc::new(Mutex::new(Vec::new()));
        let sink = later.clone();
        let drain = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Ok(mut sink) = sink.lock() {
                    sink.push(line);
                }
            }
        });
        Self {
            child,
            port,
            ready_after,
            log,
            later,
            drain: Some(drain),
        }
    }

    /// Resident memory of the server process, in bytes.
    pub fn rss(&self) -> u64 {
        let path = format!("/proc/{}/status", self.child.id());
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("no VmRSS in {path}"))
    }

    /// Threads of the server process and its open file descriptors.
    pub fn threads_and_fds(&self) -> (u64, u64) {
        let path = format!("/proc/{}/status", self.child.id());
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        let threads = status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no Threads in {path}"));
        let fds = format!("/proc/{}/fd", self.child.id());
        let fds = std::fs::read_dir(&fds)
            .unwrap_or_else(|e| panic!("list {fds}: {e}"))
            .count() as u64;
        (threads, fds)
    }

    /// Every line logged after ready, so far.
    pub fn log_after_ready(&self) -> Vec<String> {
        self.later.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Sends SIGTERM and waits up to `grace` for the process to exit; returns its
    /// exit status (`None`: still running at the deadline, then killed).
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "cannot send SIGTERM to {}", self.child.id());
        let deadline = Instant::now() + grace;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) | Err(_) => break None,
            }
        };
        if status.is_some()
            && let Some(drain) = self.drain.take()
        {
            let _ = drain.join();
        }
        status
    }

    /// Lines logged after ready that look like errors.
    pub fn errors_logged(&self) -> Vec<String> {
        self.later
            .lock()
            .map(|l| {
                l.iter()
                    .filter(|l| l.contains("ERROR") || l.contains("WARN"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One keep-alive HTTP/1.1 connection posting MCP requests.
pub struct Client {
    stream: BufReader<TcpStream>,
    port: u16,
}

impl Client {
    /// Connects to the server on `port`.
    pub fn connect(port: u16) -> std::io::Result<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Self {
            stream: BufReader::new(stream),
            port,
        })
    }

    /// Posts one JSON-RPC `body` to `/mcp` (no session, as a stateless client) and
    /// returns the response body.
    pub fn post(&mut self, body: &str) -> std::io::Result<String> {
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes())?;
        let mut status = String::new();
        self.stream.read_line(&mut status)?;
        if !status.starts_with("HTTP/1.1 200") {
            return Err(std::io::Error::other(format!("status {}", status.trim())));
        }
        let (mut length, mut chunked) = (None, false);
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse::<usize>().ok();
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.contains("chunked");
                }
            }
        }
        let mut body = Vec::new();
        if let Some(length) = length {
            body.resize(length, 0);
            self.stream.read_exact(&mut body)?;
        } else if chunked {
            loop {
                let mut size = String::new();
                self.stream.read_line(&mut size)?;
                let size = usize::from_str_radix(size.trim(), 16)
                    .map_err(|e| std::io::Error::other(format!("chunk size: {e}")))?;
                let mut chunk = vec![0; size + 2];
                self.stream.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            return Err(std::io::Error::other("response without a length"));
        }
        String::from_utf8(body).map_err(std::io::Error::other)
    }
}

/// What the load run measured.
pub struct Load {
    /// Successful executes.
    pub ok: u64,
    /// Failed requests or error results.
    pub errors: u64,
    /// The wall time of the run.
    pub elapsed: Duration,
    /// Latencies of the successful executes.
    pub latencies: Vec<Duration>,
    /// Highest resident memory sampled during the run.
    pub peak_rss: u64,
}

/// `clients` keep-alive connections posting `execute` of `source` back to back for
/// `duration`, while sampling the server's memory.
pub fn load(server: &Server, clients: usize, duration: Duration, source: &str) -> Load {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"source": source}},
    })
    .to_string();
    let started = Instant::now();
    let until = started + duration;
    let port = server.port;
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || {
                let (mut latencies, mut errors) = (Vec::new(), 0u64);
                let mut client = Client::connect(port).ok();
                while Instant::now() < until {
                    let Some(c) = client.as_mut() else {
                        errors += 1;
                        client = Client::connect(port).ok();
                        continue;
                    };
                    let sent = Instant::now();
                    match c.post(&body) {
                        Ok(response)
                            if response.contains("\"structuredContent\"")
                                && !response.contains("\"isError\":true") =>
                        {
                            latencies.push(sent.elapsed());
                        }
                        Ok(_) => errors += 1,
                        Err(_) => {
                            errors += 1;
                            client = Client::connect(port).ok();
                        }
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut peak_rss = 0;
    while Instant::now() < until {
        peak_rss = peak_rss.max(server.rss());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for worker in workers {
        let (l, e) = worker
            .join()
            .unwrap_or_else(|_| panic!("a load client panicked"));
        latencies.extend(l);
        errors += e;
    }
    peak_rss = peak_rss.max(server.rss());
    Load {
        ok: latencies.len() as u64,
        errors,
        elapsed: started.elapsed(),
        latencies,
        peak_rss,
    }
}
