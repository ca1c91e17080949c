//! The Go client programs of the tests (`tests/go/*`): the `go` command
//! found, and a module built once per test process into the tests'
//! temporary directory ([`program`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The Go program of `tests/go/MODULE` (`client`, in messages), built by
/// the first test that needs it ([`build`]; the others wait); fails saying
/// why if it cannot be built.
pub(crate) fn program(module: &'static str, client: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<&str, Result<PathBuf, String>>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let program = built.entry(module).or_insert_with(|| build(module, client));
    program.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// How long `go build` may take: from an empty module and build cache, it
/// downloads the module's requirements and compiles `net/http`.
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

/// The `go` command: `$GO` if set, else `go` on `PATH`, else Go's usual
/// place, `/usr/local/go/bin/go`.
fn find_go(client: &str) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match std::env::var_os("GO") {
        Some(go) => vec![go.into()],
        None => std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join("go"))
            .chain([PathBuf::from("/usr/local/go/bin/go")])
            .collect(),
    };
    candidates
        .into_iter()
        .find(|go| go.is_file())
        .ok_or_else(|| {
            let looked = match std::env::var_os("GO") {
                Some(go) => format!("GO={}", Path::new(&go).display()),
                None => "PATH and /usr/local/go/bin".to_owned(),
            };
            format!(
                "these tests run {client}, and no `go` command was found ({looked}): install \
                 Go 1.26 or newer (unpack the official release into /usr/local/go and put \
                 /usr/local/go/bin on PATH), or set GO to the go binary"
            )
        })
}

/// `go build`s `tests/go/MODULE` (`client`, in messages) into the tests'
/// temporary directory with the module's own `go.sum` (`-mod=readonly`)
/// and the installed Go (`GOTOOLCHAIN=local`), bounded by
/// [`BUILD_TIMEOUT`]; returns the program's path.
fn build(module: &str, client: &str) -> Result<PathBuf, String> {
    let go = find_go(client)?;
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("go")
        .join(module);
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    // Built under a name of this process's, then renamed into place, so
    // that test processes building at once never run a half-written file.
    let out = tmp.join(format!("go-{module}.{}", std::process::id()));
    let log_path = tmp.join(format!("go-{module}.{}.log", std::process::id()));
    let log = File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut cmd = Command::new(&go);
    cmd.arg("build")
        .arg("-o")
        .arg(&out)
        .arg(".")
        .current_dir(&source)
        .env("GOFLAGS", "-mod=readonly -buildvcs=false")
        .env("GOTOOLCHAIN", "local")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    // Go keeps its caches under $HOME; without one, under target/.
    if std::env::var_os("HOME").is_none() {
        for (var, dir) in [("GOCACHE", "go-cache"), ("GOPATH", "go-path")] {
            if std::env::var_os(var).is_none() {
                cmd.env(var, tmp.join(dir));
            }
        }
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not run {}: {e}", go.display()))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > BUILD_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`go build` of {} took more than {BUILD_TIMEOUT:?}: {}",
                    source.display(),
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for `go build`: {e}")),
        }
    };
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    if !status.success() {
        return Err(format!(
            "`{} build` of {} failed ({status}):\n{output}",
            go.display(),
            source.display()
        ));
    }
    let path = tmp.join(format!("go-{module}"));
    std::fs::rename(&out, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("built {client} in {:?}", started.elapsed());
    Ok(path)
}
