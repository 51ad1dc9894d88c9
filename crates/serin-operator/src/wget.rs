//! Enough of `wget` for Flagger's chart: its liveness and readiness probes exec
//! `wget --quiet --tries=1 --timeout=4 --spider http://localhost:8080/healthz` in the container,
//! and Serin's image has no shell and no wget. The image links `wget` to the operator binary,
//! which, started under that name, asks for the URL and exits 0 when it answers 2xx.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Runs `wget args` (the program name left out) and returns its exit code: 0 when the URL
/// answered 2xx, 1 when it did not or could not be reached, 2 for arguments it does not take.
pub fn run(args: &[String]) -> u8 {
    let mut timeout = Duration::from_secs(900);
    let mut quiet = false;
    let mut url = None;
    for arg in args {
        match arg.as_str() {
            "--quiet" | "-q" => quiet = true,
            "--spider" => {}
            _ if arg.starts_with("--tries=") => {}
            _ if arg.starts_with("--timeout=") || arg.starts_with("-T") => {
                let seconds = arg
                    .trim_start_matches("--timeout=")
                    .trim_start_matches("-T");
                match seconds.parse::<u64>() {
                    Ok(seconds) if seconds > 0 => timeout = Duration::from_secs(seconds),
                    _ => return usage(&format!("invalid timeout {seconds:?}")),
                }
            }
            _ if arg.starts_with("http://") && url.is_none() => url = Some(arg.clone()),
            other => {
                return usage(&format!(
                    "{other:?} is not understood (only --spider http://host:port/path is)"
                ));
            }
        }
    }
    let Some(url) = url else {
        return usage("missing URL");
    };
    match status_of(&url, timeout) {
        Ok(status) if (200..300).contains(&status) => 0,
        Ok(status) => {
            if !quiet {
                eprintln!("wget: server returned error: HTTP {status}");
            }
            1
        }
        Err(error) => {
            if !quiet {
                eprintln!("wget: {url}: {error}");
            }
            1
        }
    }
}

fn usage(problem: &str) -> u8 {
    eprintln!("wget: {problem}");
    2
}

/// The status code of a GET of `url` (plain HTTP), within `timeout` for each step.
fn status_of(url: &str, timeout: Duration) -> std::io::Result<u16> {
    let rest = url.trim_start_matches("http://");
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let with_port = if authority
        .rsplit(':')
        .next()
        .is_some_and(|p| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
    let address = with_port
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| invalid("no address for the host"))?;
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nUser-Agent: Wget\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    // The status line is all a spider reads; bounded, whatever the server sends.
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < 12 {
        let n = stream.read(&mut head[read..])?;
        if n == 0 {
            break;
        }
        read += n;
    }
    let line = String::from_utf8_lossy(&head[..read]);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .filter(|_| line.starts_with("HTTP/"))
        .ok_or_else(|| invalid("no HTTP status line in the answer"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn serve_once(answer: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(answer.as_bytes());
        });
        format!("http://{address}/healthz")
    }

    fn probe(url: &str) -> u8 {
        let args: Vec<String> = ["--quiet", "--tries=1", "--timeout=4", "--spider", url]
            .iter()
            .map(|s| s.to_string())
            .collect();
        run(&args)
    }

    #[test]
    fn the_charts_probe_passes_on_200_and_fails_otherwise() {
        assert_eq!(
            probe(&serve_once(
                "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            )),
            0
        );
        assert_eq!(
            probe(&serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\n")),
            1
        );
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert_eq!(probe(&format!("http://{closed}/healthz")), 1);
        assert_eq!(run(&["--post-data=x".to_string()]), 2);
    }
}
