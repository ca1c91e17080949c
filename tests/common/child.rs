//! Programs the tests run in child processes: the clients of other
//! languages (`tests/go/`, `tests/node/`, `tests/python/`: Go's, Node's,
//! Python's and headless Chromium's), OpenSSL's `s_client`, curl. One way
//! to find a program ([`program`], [`python`], `go::program`), to point it
//! at a test server ([`Dial`]), and to drive it ([`Child`]): commands on
//! its stdin, its stdout and stderr collected, every wait bounded by
//! [`STEP_TIMEOUT`]; a test fails saying what to install when a program
//! is missing, and with what the program wrote when it misbehaves.
//!
//! The command clients (the tests' own client programs) read one command
//! a line and answer each with one line once done, so that the test
//! decides when their connection is left idle (to sleep); at the end of
//! their stdin they close their connection, say `closed after N …` and
//! exit 0 ([`Child::finish`]).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::temp_dir::TempDir;

/// How long a program may take for one step (a command, a handshake, a
/// response, its exit) before the test fails.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(40);

/// The program `$VAR` names, else `command` on `PATH`; fails saying to
/// install `what` (or to set `VAR`) if there is none.
pub(crate) fn program(var: &str, command: &str, what: &str) -> PathBuf {
    let found = match std::env::var_os(var) {
        Some(path) => Some(PathBuf::from(path)),
        None => std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(command))
            .find(|path| path.is_file()),
    };
    found.filter(|path| path.is_file()).unwrap_or_else(|| {
        panic!(
            "this test runs `{command}`, and none was found on PATH: install {what}, or set \
             {var} to it"
        )
    })
}

/// `$PYTHON`, else `python3` on `PATH`, checked (once per process) to run
/// `imports`; fails saying to install Python with `packages` otherwise.
pub(crate) fn python(imports: &'static str, packages: &str) -> PathBuf {
    static CHECKED: Mutex<BTreeMap<&str, Result<PathBuf, String>>> = Mutex::new(BTreeMap::new());
    let install = format!("Python 3.11 or newer and `python3 -m pip install {packages}`");
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    let found = checked.entry(imports).or_insert_with(|| {
        let python = program("PYTHON", "python3", &install);
        let check = Command::new(&python)
            .args(["-c", imports])
            .output()
            .map_err(|e| format!("could not run {}: {e}", python.display()))?;
        if !check.status.success() {
            return Err(format!(
                "this test runs Python with {packages}, and {} fails `{imports}`: install \
                 {install} (or set PYTHON to a Python that has them); its error:\n{}",
                python.display(),
                String::from_utf8_lossy(&check.stderr)
            ));
        }
        Ok(python)
    });
    found.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// The arguments that point the tests' client programs at a test server at
/// this address (each program takes them; Go's `flag` reads `--addr` as
/// its `-addr`): `--addr HOST:PORT`; `--unix PATH`; over TLS `--addr
/// HOST:PORT --tls --ca FILE`, trusting the server's certificate, made for
/// `localhost`.
pub(crate) trait Dial {
    fn dial(&self) -> Vec<OsString>;
}

impl Dial for SocketAddr {
    fn dial(&self) -> Vec<OsString> {
        vec!["--addr".into(), self.to_string().into()]
    }
}

impl Dial for PathBuf {
    fn dial(&self) -> Vec<OsString> {
        vec!["--unix".into(), self.into()]
    }
}

#[cfg(any(feature = "tls", feature = "tls-ring"))]
impl Dial for super::transport::tls::TlsAddr {
    fn dial(&self) -> Vec<OsString> {
        let mut args = self.addr.dial();
        args.extend(["--tls".into(), "--ca".into(), self.ca.clone().into()]);
        args
    }
}

/// What a child process wrote to one of its pipes so far, and whether the
/// pipe is closed.
#[derive(Default)]
pub(crate) struct Output {
    text: Mutex<(Vec<u8>, bool)>,
    more: Condvar,
}

impl Output {
    /// Reads `pipe` to its end on a thread of its own.
    fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Output> {
        let out = Arc::new(Output::default());
        let sink = out.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                let n = pipe.read(&mut chunk).unwrap_or(0);
                let mut text = sink.text.lock().unwrap();
                if n == 0 {
                    text.1 = true;
                    sink.more.notify_all();
                    return;
                }
                text.0.extend_from_slice(&chunk[..n]);
                sink.more.notify_all();
            }
        });
        out
    }

    /// What was written so far.
    pub(crate) fn now(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap().0).into_owned()
    }

    fn closed(&self) -> bool {
        self.text.lock().unwrap().1
    }

    /// Waits until `done` accepts what was written, or the pipe closes,
    /// or [`STEP_TIMEOUT`] passes; returns whether `done` accepted it.
    fn wait(&self, done: impl Fn(&[u8]) -> bool) -> bool {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut text = self.text.lock().unwrap();
        loop {
            if done(&text.0) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if text.1 || left.is_zero() {
                return false;
            }
            text = self.more.wait_timeout(text, left).unwrap().0;
        }
    }
}

/// A program in a child process, with its stdin open to the test and its
/// stdout and stderr collected; killed if dropped still running (a failed
/// test).
pub(crate) struct Child {
    /// What messages call it ("the Go client").
    name: String,
    child: std::process::Child,
    /// Whether it leads a process group of its own, killed with it (Node
    /// and the browser it starts).
    group: bool,
    stdin: Option<ChildStdin>,
    pub(crate) stdout: Arc<Output>,
    stderr: Arc<Output>,
    /// How much of its stdout the command answers have taken.
    answered: usize,
    /// What must outlive it (a browser's profile); dropped after it was
    /// killed, since fields drop after `Drop::drop`.
    _keep: Option<TempDir>,
}

impl Child {
    /// Runs `program` with `args`; `name` is what messages call it.
    pub(crate) fn start<S: AsRef<OsStr>>(
        name: &str,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Child {
        Child::spawn(name, program.as_ref(), args, false)
    }

    /// Headless Chromium, driven through its DevTools protocol by the Node
    /// script `tests/node/{script}` with `args`; Node leads a process group
    /// of its own, which [`fail`](Self::fail) and dropping kill whole (Node
    /// and the browser it starts). Fails saying what to install if Node or
    /// Chromium is missing.
    #[cfg_attr(
        not(any(
            feature = "ws",
            feature = "axum",
            feature = "tls",
            feature = "tls-ring"
        )),
        allow(dead_code, reason = "only the browsers' tests run Chromium")
    )]
    pub(crate) fn chromium(script: &str, args: Vec<OsString>) -> Child {
        let node = program("NODE", "node", "Node.js 18 or newer");
        // devtools.mjs runs `$CHROMIUM`, else `chromium`: there must be one.
        program("CHROMIUM", "chromium", "Chromium");
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("node")
            .join(script);
        let args = [script.into_os_string()].into_iter().chain(args);
        Child::spawn("Chromium (through Node)", node.as_os_str(), args, true)
    }

    fn spawn<S: AsRef<OsStr>>(
        name: &str,
        program: &OsStr,
        args: impl IntoIterator<Item = S>,
        group: bool,
    ) -> Child {
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if group {
            command.process_group(0);
        }
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "could not run {} ({name}; the test needs it): {e}",
                Path::new(program).display()
            )
        });
        Child {
            name: name.to_owned(),
            group,
            stdin: child.stdin.take(),
            stdout: Output::collect(child.stdout.take().unwrap()),
            stderr: Output::collect(child.stderr.take().unwrap()),
            child,
            answered: 0,
            _keep: None,
        }
    }

    /// Keeps `dir` until the program is gone.
    #[cfg_attr(
        not(feature = "ws"),
        allow(dead_code, reason = "only Chromium's WebSocket tests keep a profile")
    )]
    pub(crate) fn keeping(mut self, dir: TempDir) -> Child {
        self._keep = Some(dir);
        self
    }

    /// Writes `bytes` to its stdin, in one write.
    pub(crate) fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        if let Err(e) = stdin.write_all(bytes).and_then(|()| stdin.flush()) {
            self.fail(&format!(
                "writing {:?}: {e}",
                String::from_utf8_lossy(bytes)
            ));
        }
    }

    /// Sends `command` (a line) to a command client and waits (bounded)
    /// for its answer, which must be `answer`.
    pub(crate) fn command(&mut self, command: &str, answer: &str) {
        self.send(format!("{command}\n").as_bytes());
        let line = self.next_line(&format!("`{command}`"));
        if line != answer {
            self.fail(&format!(
                "`{command}`: it answered {line:?}, not {answer:?}"
            ));
        }
    }

    /// Waits (bounded) for the next line of its stdout that no command
    /// took yet.
    fn next_line(&mut self, what: &str) -> String {
        let from = self.answered;
        if !self.stdout.wait(|out| out[from..].contains(&b'\n')) {
            self.fail(&format!("{what}: no answer"));
        }
        let out = self.stdout.text.lock().unwrap();
        let end = from + out.0[from..].iter().position(|&b| b == b'\n').unwrap();
        let line = String::from_utf8_lossy(&out.0[from..end]).into_owned();
        drop(out);
        self.answered = end + 1;
        line
    }

    /// Waits (bounded) until `done` accepts its stdout so far; returns it.
    #[cfg_attr(
        not(any(feature = "tls", feature = "tls-ring")),
        allow(
            dead_code,
            reason = "only the TLS clients' tests read output as it comes"
        )
    )]
    pub(crate) fn wait_stdout(&mut self, what: &str, done: impl Fn(&str) -> bool) -> String {
        if !self.stdout.wait(|out| done(&String::from_utf8_lossy(out))) {
            self.fail(&format!("waiting for {what}"));
        }
        self.stdout.now()
    }

    /// Waits (bounded) until its stdout contains `text`.
    #[cfg_attr(
        not(any(feature = "tls", feature = "tls-ring")),
        allow(
            dead_code,
            reason = "only the TLS clients' tests read output as it comes"
        )
    )]
    pub(crate) fn wait_for_text(&mut self, text: &str) -> String {
        self.wait_stdout(&format!("{text:?}"), |out| out.contains(text))
    }

    /// Closes its stdin and waits (bounded) for it to exit and close its
    /// pipes; returns its exit status.
    pub(crate) fn wait_exit(&mut self) -> ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + STEP_TIMEOUT;
        let status = loop {
            match self.child.try_wait().expect("wait for the child") {
                Some(status) => break status,
                None if Instant::now() > deadline => self.fail("waiting for it to exit"),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        // Its stdout closes with it, unless a process it started holds it.
        self.stdout.wait(|_| false);
        if !self.stdout.closed() {
            self.fail("waiting for its stdout to close");
        }
        status
    }

    /// [`wait_exit`](Self::wait_exit), which must find it exited 0.
    pub(crate) fn exit_ok(&mut self) {
        let status = self.wait_exit();
        if !status.success() {
            self.fail(&format!("it exited with {status}"));
        }
    }

    /// [`exit_ok`](Self::exit_ok), for a program run for what it prints
    /// (curl, a page's log): returns its stdout.
    pub(crate) fn output(mut self) -> String {
        self.exit_ok();
        self.stdout.now()
    }

    /// Ends a command client: closes its stdin, so that it closes its
    /// connection, and waits (bounded) for it to say so (`closed after
    /// …`) and to exit 0.
    pub(crate) fn finish(mut self) {
        drop(self.stdin.take());
        let line = self.next_line("the close");
        if !line.starts_with("closed after ") {
            self.fail(&format!("the close: it answered {line:?}"));
        }
        self.exit_ok();
    }

    /// Kills it (its process group, if it leads one) if it is still
    /// running (its id is still its own), and reaps it.
    pub(crate) fn kill(&mut self) -> io::Result<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Ok(status);
        }
        if self.group {
            // The group's id is the leader's; `kill` returns at once.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        self.child.wait()
    }

    /// Fails the test with `what`, its exit status and what it wrote
    /// (after an error it exits by itself: it is killed if still running
    /// a moment later).
    pub(crate) fn fail(&mut self, what: &str) -> ! {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let status = match self.child.try_wait() {
            Ok(Some(status)) => status.to_string(),
            _ => format!("killed (it was still running): {:?}", self.kill()),
        };
        panic!(
            "{}: {what}; {status}; its stdout:\n{}\nits stderr:\n{}",
            self.name,
            self.stdout.now(),
            self.stderr.now()
        );
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
