//! A client program in a child process (Go's, Node's and httpx's HTTP/2
//! clients: `tests/go/h2client`, `tests/node/h2client.mjs`,
//! `tests/python/h2client.py`), driven by commands on its stdin, one a
//! line, each answered on its stdout when done; every wait bounded by
//! [`STEP_TIMEOUT`]. And the rounds such a client plays against a server
//! whose connection sleeps between them ([`rounds_across_sleeps`]).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::rungs::{Rung, sleep_until, woke};
use super::servers::Serve;

/// The pauses between a client's rounds: they alternate between PARKED
/// and DORMANT.
pub(crate) const PAUSES: [Rung; 4] = [Rung::Parked, Rung::Dormant, Rung::Parked, Rung::Dormant];

/// Has `client` play round 0 on its new connection to `srv`, then a round
/// after each pause of [`PAUSES`], which waits, the client idle, until the
/// connection has slept to its rung (and, in the pauses `pings` lists,
/// has the client PING it, then waits until it is asleep again, woken by
/// the PING or not); the round after it must have woken it. The client
/// answers `round N done` and `ping done`.
pub(crate) fn rounds_across_sleeps<A>(srv: &Serve<A>, client: &mut ChildClient, pings: &[usize]) {
    let mut before = srv.stats();
    client.command("round", "round 0 done");
    for (i, pause) in PAUSES.into_iter().enumerate() {
        sleep_until(srv, pause, before);
        if pings.contains(&i) {
            client.command("ping", "ping done");
            srv.wait_for("asleep after the PING", |s| {
                s.active == 0 && s.parked + s.dormant == 1
            });
        }
        before = srv.stats();
        // A PING may have woken the connection (over TLS), which then
        // slept again.
        let rung = if before.dormant == 1 {
            Rung::Dormant
        } else {
            Rung::Parked
        };
        client.command("round", &format!("round {} done", i + 1));
        woke(srv, rung, before);
    }
}

/// How long a client may take for one command (a round of requests, a
/// PING, its close); each of its requests has half of it.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(40);

/// A running client: commands go to its stdin, one a line; it answers
/// each on stdout when done. Killed if dropped still running (a failed
/// test).
pub(crate) struct ChildClient {
    /// What messages call it ("the Node client").
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl ChildClient {
    /// Runs `program` with `args`; `name` is what messages call it.
    pub(crate) fn start(name: &'static str, program: &Path, args: &[OsString]) -> ChildClient {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("could not run {}: {e}", program.display()));
        let stdin = child.stdin.take();
        let (tx, stdout) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        ChildClient {
            name,
            child,
            stdin,
            stdout,
            stderr: Some(stderr),
        }
    }

    /// Sends `command` and waits (bounded) for the client to answer
    /// `answer`.
    pub(crate) fn command(&mut self, command: &str, answer: &str) {
        let sent = writeln!(self.stdin.as_mut().unwrap(), "{command}")
            .and_then(|()| self.stdin.as_mut().unwrap().flush());
        if let Err(e) = sent {
            self.fail(&format!("`{command}` could not be sent ({e})"));
        }
        self.expect(command, |line| line == answer);
    }

    /// Closes the client's stdin, so that it closes its connection, and
    /// waits (bounded) for it to say so and exit 0.
    pub(crate) fn finish(mut self) {
        drop(self.stdin.take());
        self.expect("the close", |line| line.starts_with("closed after "));
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            match self.child.try_wait().expect("wait for the client") {
                Some(status) if status.success() => return,
                Some(status) => self.fail(&format!("{} exited with {status}", self.name)),
                None if Instant::now() > deadline => {
                    self.fail(&format!("{} did not exit", self.name))
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Waits (bounded) for the client's next line, which `ok` must accept.
    fn expect(&mut self, what: &str, ok: impl Fn(&str) -> bool) {
        match self.stdout.recv_timeout(STEP_TIMEOUT) {
            Ok(line) if ok(&line) => {}
            Ok(line) => self.fail(&format!("{what}: {} answered {line:?}", self.name)),
            Err(RecvTimeoutError::Timeout) => {
                self.fail(&format!("{what}: no answer in {STEP_TIMEOUT:?}"))
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.fail(&format!("{what}: the stdout of {} closed", self.name))
            }
        }
    }

    /// Fails the test with `what`, the client's exit status and its
    /// stderr (it exits by itself after an error; killed if still running
    /// a moment later).
    fn fail(&mut self, what: &str) -> ! {
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.to_string(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break "killed (it was still running)".to_owned();
                }
            }
        };
        let stderr = self
            .stderr
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        panic!("{what}; {}: {status}; its stderr:\n{stderr}", self.name);
    }
}

impl Drop for ChildClient {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
