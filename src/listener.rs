//! [`Listener`]: where `serve` gets its connections.
//!
//! In the spirit of axum 0.8's `Listener`: `accept` yields a connection and
//! its peer's address, `local_addr` says where the listener is. Errors of
//! `accept` go to the server's accept loop, which tells one connection's
//! failure (accept the next at once) from a resource shortage such as
//! running out of file descriptors (back off), the same for every
//! listener. Implemented for tokio's [`TcpListener`] (accepted sockets get
//! `TCP_NODELAY`) and [`UnixListener`](tokio::net::UnixListener), and for
//! dormant's own [`UnixListener`], which names its path in bind errors
//! and removes its socket file when dropped.

use std::future::Future;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, TcpStream, UnixStream};
use tracing::debug;

use crate::transport::Transport;

/// The peer address type of a listener's connections.
pub type Addr<L> = <<L as Listener>::Io as Transport>::Addr;

/// A source of connections for [`Server::serve`](crate::Server::serve).
///
/// Implement it to adjust accepted sockets (options, filtering) on top of
/// one of the listeners here; the connections must be one of dormant's
/// [`Transport`]s.
///
/// ```no_run
/// use std::io;
/// use std::net::SocketAddr;
/// use tokio::net::{TcpListener, TcpStream};
///
/// /// Serves loopback clients only.
/// struct LoopbackOnly(TcpListener);
///
/// impl dormant::Listener for LoopbackOnly {
///     type Io = TcpStream;
///
///     async fn accept(&mut self) -> io::Result<(TcpStream, SocketAddr)> {
///         loop {
///             let (stream, peer) = dormant::Listener::accept(&mut self.0).await?;
///             if peer.ip().is_loopback() {
///                 return Ok((stream, peer));
///             }
///         }
///     }
///
///     fn local_addr(&self) -> io::Result<SocketAddr> {
///         self.0.local_addr()
///     }
/// }
/// ```
pub trait Listener: Send + 'static {
    /// The connections it yields.
    type Io: Transport;

    /// Accepts the next connection.
    ///
    /// An error is counted and handled by the server's accept loop: errors
    /// of one connection (`ConnectionAborted`, `ConnectionReset`,
    /// `ConnectionRefused`) are skipped, any other pauses accepting for a
    /// moment, doubling up to a second while the errors last.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Io, Addr<Self>)>> + Send;

    /// Returns the address the listener is bound to.
    fn local_addr(&self) -> io::Result<Addr<Self>>;
}

impl Listener for TcpListener {
    type Io = TcpStream;

    async fn accept(&mut self) -> io::Result<(TcpStream, std::net::SocketAddr)> {
        let (stream, peer) = TcpListener::accept(self).await?;
        // Responses go out as soon as they are written, as hyper-util and
        // Go do.
        if let Err(error) = stream.set_nodelay(true) {
            debug!(%error, "setting TCP_NODELAY failed");
        }
        Ok((stream, peer))
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        TcpListener::local_addr(self)
    }
}

impl Listener for tokio::net::UnixListener {
    type Io = UnixStream;

    async fn accept(&mut self) -> io::Result<(UnixStream, tokio::net::unix::SocketAddr)> {
        tokio::net::UnixListener::accept(self).await
    }

    fn local_addr(&self) -> io::Result<tokio::net::unix::SocketAddr> {
        tokio::net::UnixListener::local_addr(self)
    }
}

/// A Unix socket listener that cleans up after itself.
///
/// Unlike tokio's, it names the path in its bind error, and removes the
/// socket file when dropped (as Go's `net.Listen("unix", …)` does), if the
/// file at the path is still the socket it created: it never removes a
/// file it did not create, neither a stale socket found at bind time (bind
/// fails; remove it yourself if no server uses it) nor one another process
/// bound at the path since.
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let listener = dormant::UnixListener::bind("/run/app/http.sock")?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct UnixListener {
    inner: tokio::net::UnixListener,
    path: PathBuf,
    /// The device and inode of the socket file it created.
    created: (u64, u64),
}

impl UnixListener {
    /// Creates a socket file at `path` and listens on it.
    ///
    /// # Errors
    ///
    /// When the socket cannot be bound (the path exists, its directory is
    /// missing or not writable, the path is too long); the error names the
    /// path.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime with I/O enabled.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let error = |error: io::Error| {
            let hint = if error.kind() == io::ErrorKind::AddrInUse {
                " (a file exists at that path: remove it if no server uses it)"
            } else {
                ""
            };
            io::Error::new(
                error.kind(),
                format!(
                    "cannot listen on Unix socket {}: {error}{hint}",
                    path.display()
                ),
            )
        };
        let inner = tokio::net::UnixListener::bind(path).map_err(error)?;
        let meta = std::fs::symlink_metadata(path).map_err(error)?;
        Ok(UnixListener {
            inner,
            path: path.to_owned(),
            created: (meta.dev(), meta.ino()),
        })
    }

    /// Returns the path of the socket file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for UnixListener {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.created);
        if ours {
            if let Err(error) = std::fs::remove_file(&self.path) {
                debug!(%error, path = %self.path.display(), "removing the socket file failed");
            }
        }
    }
}

impl Listener for UnixListener {
    type Io = UnixStream;

    fn accept(
        &mut self,
    ) -> impl Future<Output = io::Result<(UnixStream, tokio::net::unix::SocketAddr)>> + Send {
        Listener::accept(&mut self.inner)
    }

    fn local_addr(&self) -> io::Result<tokio::net::unix::SocketAddr> {
        self.inner.local_addr()
    }
}
