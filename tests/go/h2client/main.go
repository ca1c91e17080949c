// Command h2client is Go's HTTP/2 client (golang.org/x/net/http2) driven by
// tests/http2_clients.rs against a dormant server serving the tests'
// mirror service (tests/common/services.rs): POST bodies come back byte for
// byte, GET /bytes/N answers N bytes of the tests' pattern, and `x-`
// headers are copied into the response.
//
// It opens ONE connection (h2c with prior knowledge over TCP or a Unix
// socket, or TLS with ALPN h2) and reads commands from stdin, one a line,
// so that the test decides when the connection is left idle (to sleep):
//
//	round   while a POST's body is held open: 10 requests at once (POST
//	        bodies of 0 B to 1 MiB, GETs of responses larger than 65,535 B
//	        and than the client's stream window), then 8 small GETs alike
//	        one after the other; 19 in all, each with the same ~3 KB
//	        cookie-like header, which HPACK indexes: the last two GETs
//	        must send it as an index (a busy connection has the header
//	        table back that the server empties before it sleeps); prints
//	        "round N done"
//	ping    a PING (ClientConn.Ping), answered; prints "ping done"
//	EOF     closes the connection gracefully (GOAWAY), checks that it was
//	        the only one, prints "closed" and exits 0
//
// Any error, timeout or mismatch exits non-zero with a message on stderr.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

var (
	addr         = flag.String("addr", "", "the server's host:port (TCP)")
	unixPath     = flag.String("unix", "", "the server's Unix socket path")
	useTLS       = flag.Bool("tls", false, "TLS with ALPN h2 (with -addr); otherwise h2c with prior knowledge")
	caFile       = flag.String("ca", "", "PEM file of the certificate to trust (with -tls)")
	serverName   = flag.String("servername", "localhost", "TLS server name (with -tls)")
	connWindow   = flag.Int("conn-window", 0, "MaxReceiveBufferPerConnection (0: Go's default, 1 GiB; at least 65,535)")
	streamWindow = flag.Int("stream-window", 0, "MaxReceiveBufferPerStream (0: Go's default, 4 MiB)")
	maxFrame     = flag.Int("max-frame", 0, "MaxReadFrameSize (0: Go's default, 1 MiB)")
	headerTable  = flag.Int("header-table", 0, "MaxDecoderHeaderTableSize (0: Go's default, 4,096)")
	timeout      = flag.Duration("timeout", 20*time.Second, "how long one request, PING or close may take")
)

// Go's defaults (x/net/http2 transportDefaultStreamFlow).
const defaultStreamWindow = 4 << 20

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "h2client: "+format+"\n", args...)
	os.Exit(1)
}

// pattern is tests/common/services.rs `pattern`: len bytes, each a hash of
// its offset, of len and of seed.
func pattern(n int, seed uint64) []byte {
	salt := (uint64(n) << 32) ^ (seed * 0xff51_afd7_ed55_8ccd)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(((uint64(i) ^ salt) * 0x9e37_79b9_7f4a_7c15) >> 56)
	}
	return b
}

// cookie is a ~3 KB cookie-like header value, the same in every request:
// Go's HPACK encoder indexes it, and refers to the entry while the server
// lets it keep its table.
var cookie = func() string {
	var b strings.Builder
	for i := 0; b.Len() < 3000; i++ {
		fmt.Fprintf(&b, "k%03d=%x; ", i, pattern(12, uint64(i)))
	}
	return strings.TrimSuffix(b.String(), "; ")
}()

// pool is the transport's ClientConnPool: it dials once, and hands out that
// connection as long as it can take requests. A request that would need a
// second connection fails, saying why.
type pool struct {
	t     *http2.Transport
	dial  func(ctx context.Context) (net.Conn, error)
	mu    sync.Mutex
	cc    *http2.ClientConn
	dials int
	// Bytes written to the connection (before TLS).
	written atomic.Int64
	// Whether the transport gave the connection up (MarkDead) before the
	// close.
	dead atomic.Bool
	// The client is closing the connection: errors are expected.
	closing atomic.Bool
}

func (p *pool) GetClientConn(req *http.Request, _ string) (*http2.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cc == nil {
		p.dials++
		conn, err := p.dial(req.Context())
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		counted := countWrites(conn, &p.written)
		cc, err := p.t.NewClientConn(counted)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("HTTP/2 connection: %w", err)
		}
		p.cc = cc
	}
	if !p.cc.ReserveNewRequest() {
		return nil, fmt.Errorf("the connection can take no new request (a client would open another): %+v", p.cc.State())
	}
	return p.cc, nil
}

func (p *pool) MarkDead(cc *http2.ClientConn) {
	if !p.closing.Load() {
		fmt.Fprintf(os.Stderr, "h2client: the transport gave the connection up (GOAWAY or error): %+v\n", cc.State())
		p.dead.Store(true)
	}
}

// countingConn counts the bytes written to its connection.
type countingConn struct {
	net.Conn
	written *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// countingTLSConn is a countingConn that still tells the transport its TLS
// state, as the *tls.Conn would.
type countingTLSConn struct {
	countingConn
	tls *tls.Conn
}

func (c countingTLSConn) ConnectionState() tls.ConnectionState {
	return c.tls.ConnectionState()
}

func countWrites(conn net.Conn, written *atomic.Int64) net.Conn {
	counted := countingConn{conn, written}
	if t, ok := conn.(*tls.Conn); ok {
		return countingTLSConn{counted, t}
	}
	return counted
}

type client struct {
	http   *http.Client
	pool   *pool
	scheme string
	// Requests that got a connection not used before (exactly the first).
	fresh atomic.Int64
	// HTTP/2 errors the transport counted (CountError) before the close.
	errs   sync.Map
	window int
}

func (c *client) get(ctx context.Context, round, i, n int) error {
	return c.do(ctx, round, i, http.MethodGet, fmt.Sprintf("/bytes/%d", n), nil, pattern(n, 0))
}

func (c *client) post(ctx context.Context, round, i, n int) error {
	body := pattern(n, uint64(round*64+i+1))
	return c.do(ctx, round, i, http.MethodPost, fmt.Sprintf("/round/%d/post/%d", round, i), bytes.NewReader(body), body)
}

// do sends one request and checks the response: 200 over HTTP/2, the body
// want byte for byte (a POST's body comes back), the x- headers mirrored.
func (c *client) do(ctx context.Context, round, i int, method, path string, body io.Reader, want []byte) error {
	what := fmt.Sprintf("round %d: %s %s (%d B expected)", round, method, path, len(want))
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if !info.Reused {
				c.fresh.Add(1)
			}
		},
	})
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://localhost"+path, body)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// Each request's own header, but for the GETs of the table's test
	// (i < 0), which send nothing their predecessor did not.
	id := ""
	if i >= 0 {
		id = fmt.Sprintf("%d/%d", round, i)
		req.Header.Set("x-request", id)
	}
	req.Header.Set("x-cookie", cookie)
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("%s: reading the body (%d B read): %w", what, len(got), err)
	}
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
		return fmt.Errorf("%s: %s %s: %q", what, res.Proto, res.Status, got)
	}
	if c.scheme == "https" && (res.TLS == nil || res.TLS.NegotiatedProtocol != http2.NextProtoTLS) {
		return fmt.Errorf("%s: the response came without TLS state, or not over h2: %+v", what, res.TLS)
	}
	if !bytes.Equal(got, want) {
		at := 0
		for at < len(got) && at < len(want) && got[at] == want[at] {
			at++
		}
		return fmt.Errorf("%s: %d B back for %d B expected, first difference at byte %d", what, len(got), len(want), at)
	}
	if h := res.Header.Get("x-cookie"); h != cookie {
		return fmt.Errorf("%s: x-cookie came back as %d B %q..., not the %d B sent", what, len(h), h[:min(len(h), 40)], len(cookie))
	}
	if h := res.Header.Get("x-request"); h != id {
		return fmt.Errorf("%s: x-request came back as %q, not %q", what, h, id)
	}
	return nil
}

// round sends a round's requests on the connection: a POST whose body
// stays open until the end of the round (so the connection is busy, and
// the server sends no fence, throughout); 10 requests at once; then 8 small
// GETs alike, one after the other.
func (c *client) round(n int) error {
	ctx := context.Background()

	// The POST held open: its first two chunks are out before anything
	// else (the transport reads the second only once it has written the
	// first), the last goes after the others.
	const chunk = 16 << 10
	held := pattern(3*chunk, uint64(n*64))
	rd, wr := io.Pipe()
	heldDone := make(chan error, 1)
	go func() {
		heldDone <- c.do(ctx, n, 0, http.MethodPost, fmt.Sprintf("/round/%d/held", n), rd, held)
	}()
	for k := range 2 {
		if _, err := wr.Write(held[k*chunk : (k+1)*chunk]); err != nil {
			return fmt.Errorf("round %d: the held POST's chunk %d: %w (%v)", n, k, err, <-heldDone)
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	i := 1
	start := func(f func(ctx context.Context, round, i, n int) error, size int) {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := f(ctx, n, i, size); err != nil {
				errs <- err
			}
		}(i)
		i++
	}
	for _, size := range []int{0, 1, 16 << 10, 65_535, 65_536, 300_000, 1 << 20} {
		start(c.post, size)
	}
	// Larger than 65,535 B, than 300 KB, and than the client's stream
	// window.
	for _, size := range []int{70_000, 300_000, c.window + 100_000} {
		start(c.get, size)
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		wr.CloseWithError(errors.New("the round failed"))
		return errors.Join(all...)
	}

	// The connection has been busy for more than 4 streams, so the server
	// has given the client's encoder its header table back (if it emptied
	// it before a sleep) before the responses above; the held POST keeps
	// it from emptying it again. Then GETs that are all alike (no header
	// of their own) bring every header they send into the table (each at
	// most once: what they insert is younger than what they evict, and
	// they fit): the last ones send the cookie as an index.
	const gets = 8
	for j := range gets {
		before := c.pool.written.Load()
		if err := c.get(ctx, n, -1, 1000); err != nil {
			wr.CloseWithError(errors.New("the round failed"))
			return err
		}
		if sent := c.pool.written.Load() - before; j >= gets-2 && sent > int64(len(cookie)/2) {
			wr.CloseWithError(errors.New("the round failed"))
			return fmt.Errorf("round %d: GET %d of %d alike wrote %d B: the %d B cookie went whole, not as an index of the header table", n, j+1, gets, sent, len(cookie))
		}
	}

	if _, err := wr.Write(held[2*chunk:]); err != nil {
		return fmt.Errorf("round %d: the held POST's last chunk: %w (%v)", n, err, <-heldDone)
	}
	wr.Close()
	if err := <-heldDone; err != nil {
		return err
	}
	if fresh := c.fresh.Load(); fresh != 1 {
		return fmt.Errorf("round %d: %d requests got a connection not used before (want 1: the first)", n, fresh)
	}
	return c.checkErrors()
}

func (c *client) checkErrors() error {
	var counted []string
	c.errs.Range(func(k, v any) bool {
		counted = append(counted, fmt.Sprintf("%s x%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	if len(counted) > 0 {
		return fmt.Errorf("HTTP/2 errors counted by the transport: %s", strings.Join(counted, ", "))
	}
	if c.pool.dead.Load() {
		return errors.New("the transport gave the connection up")
	}
	if c.pool.dials != 1 {
		return fmt.Errorf("%d connections dialed, not 1", c.pool.dials)
	}
	return nil
}

func main() {
	flag.Parse()
	if (*addr == "") == (*unixPath == "") {
		fail("give exactly one of -addr and -unix")
	}
	if *useTLS && (*addr == "" || *caFile == "") {
		fail("-tls takes -addr and -ca")
	}

	var dial func(ctx context.Context) (net.Conn, error)
	scheme := "http"
	switch {
	case *useTLS:
		scheme = "https"
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail("%v", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			fail("no certificate in %s", *caFile)
		}
		cfg := &tls.Config{RootCAs: roots, ServerName: *serverName, NextProtos: []string{http2.NextProtoTLS}}
		dial = func(ctx context.Context) (net.Conn, error) {
			d := tls.Dialer{Config: cfg}
			conn, err := d.DialContext(ctx, "tcp", *addr)
			if err != nil {
				return nil, err
			}
			if p := conn.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
				conn.Close()
				return nil, fmt.Errorf("ALPN: the server chose %q, not h2", p)
			}
			return conn, nil
		}
	case *unixPath != "":
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", *unixPath)
		}
	default:
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", *addr)
		}
	}

	// The receive windows are http.HTTP2Config's, which reach an
	// x/net/http2 Transport through the http.Transport it is configured on.
	t1 := &http.Transport{HTTP2: &http.HTTP2Config{
		MaxReceiveBufferPerConnection: *connWindow,
		MaxReceiveBufferPerStream:     *streamWindow,
	}}
	t2, err := http2.ConfigureTransports(t1)
	if err != nil {
		fail("%v", err)
	}
	t2.AllowHTTP = true // h2c with prior knowledge for http:// URLs
	t2.StrictMaxConcurrentStreams = true
	t2.MaxReadFrameSize = uint32(*maxFrame)
	t2.MaxDecoderHeaderTableSize = uint32(*headerTable)
	p := &pool{t: t2, dial: dial}
	t2.ConnPool = p
	c := &client{http: &http.Client{Transport: t2}, pool: p, scheme: scheme, window: *streamWindow}
	if c.window == 0 {
		c.window = defaultStreamWindow
	}
	t2.CountError = func(token string) {
		if p.closing.Load() {
			return
		}
		n, _ := c.errs.LoadOrStore(token, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		fmt.Fprintf(os.Stderr, "h2client: the transport counted an error: %s\n", token)
	}

	in := bufio.NewScanner(os.Stdin)
	rounds, pings := 0, 0
	for in.Scan() {
		switch cmd := strings.TrimSpace(in.Text()); cmd {
		case "round":
			if err := c.round(rounds); err != nil {
				fail("%v", err)
			}
			fmt.Printf("round %d done\n", rounds)
			rounds++
		case "ping":
			p.mu.Lock()
			cc := p.cc
			p.mu.Unlock()
			if cc == nil {
				fail("ping before the first round")
			}
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			err := cc.Ping(ctx)
			cancel()
			if err != nil {
				fail("PING %d: %v (connection %+v)", pings, err, cc.State())
			}
			if err := c.checkErrors(); err != nil {
				fail("after PING %d: %v", pings, err)
			}
			fmt.Println("ping done")
			pings++
		default:
			fail("unknown command %q", cmd)
		}
	}
	if err := in.Err(); err != nil {
		fail("stdin: %v", err)
	}
	if err := c.checkErrors(); err != nil {
		fail("%v", err)
	}
	if p.cc != nil {
		p.closing.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		err := p.cc.Shutdown(ctx)
		cancel()
		if err != nil {
			fail("closing the connection: %v", err)
		}
	}
	fmt.Printf("closed after %d rounds and %d pings\n", rounds, pings)
}
