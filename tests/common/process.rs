//! Tests that need the process to themselves, in the one test binary: one
//! that counts the process's descriptors (any other test's socket would
//! show in the count), one that installs tracing's global subscriber
//! (every other test would log through it), one whose server runs out of
//! descriptors under a lower limit. Such a test runs again, alone, in a
//! child process of this binary ([`in_own_process`], [`alone`]).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The variable that tells a child process of this binary which test it
/// runs alone.
const ALONE: &str = "DORMANT_TEST_ALONE";

/// How long a test alone in its process may take.
const ALONE_TIMEOUT: Duration = Duration::from_secs(120);

/// The running test's name, as libtest names its thread
/// (`conn_fds::tcp::client_close_while_parked_releases_the_fd`).
pub(crate) fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => panic!("not on a test's thread: libtest names it after the test"),
    }
}

/// This test binary, to run `test` alone (`--exact`, one thread, ignored
/// or not, its output not captured), with its descriptors limited to
/// `fd_limit` if given (`ulimit -n`, through `sh`).
pub(crate) fn alone(test: &str, fd_limit: Option<usize>) -> Command {
    let exe = std::env::current_exe().expect("the test binary");
    let limit = fd_limit.map_or_else(String::new, |n| format!("ulimit -n {n} && "));
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(r#"{limit}exec "$0" "$@""#))
        .arg(exe)
        .args([test, "--exact", "--include-ignored", "--nocapture"])
        .arg("--test-threads=1")
        .env(ALONE, test);
    command
}

/// Whether this is the calling test's own process. If it is not, runs the
/// test again, alone, in a child process of this binary ([`alone`]),
/// fails the test if it fails there (or runs no test, or takes longer than
/// two minutes), and returns `false`: the caller returns at once.
#[must_use]
pub(crate) fn in_own_process() -> bool {
    let test = test_name();
    if std::env::var_os(ALONE).is_some_and(|alone| alone == *test) {
        return true;
    }
    let mut child = alone(&test, None)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the test binary");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + ALONE_TIMEOUT;
    let status = loop {
        match child.try_wait().expect("wait for the test binary") {
            Some(status) => break Ok(status),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("killed after {ALONE_TIMEOUT:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let passed = status.as_ref().is_ok_and(|status| status.success());
    let ran = stdout.contains("running 1 test") && stdout.contains("1 passed");
    assert!(
        passed && ran,
        "{test}, alone in a process of its own: {status:?}; its stdout:\n{stdout}\nits stderr:\n{stderr}"
    );
    false
}
