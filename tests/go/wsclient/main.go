// Command wsclient is github.com/coder/websocket's client, driven by
// tests/ws_clients.rs against a dormant::ws server serving the tests' echo
// (tests/common/ws.rs): every text and binary message comes back as it was
// sent, and the text "close CODE" has the server close with CODE, "asked to".
//
// It reads commands from stdin, one a line, and answers each with one line
// on stdout, so that the test decides when the socket is left idle (to
// sleep): the command language of the tests' WebSocket clients
// (python/ws_client.py and node/chromium_ws.mjs speak it too). It opens at
// most one connection (over TCP, a Unix socket or TLS,
// from its flags); a goroutine reads it throughout (answering the server's
// pings, and reading the pongs Ping waits for) and hands the messages, then
// how the connection ended, to the command loop. With -compression context
// or no-context it offers permessage-deflate (DialOptions.CompressionMode:
// "permessage-deflate", or with both no_context_takeover parameters; the
// library compresses messages of 128 or 512 bytes and more); the default,
// off, offers nothing, as the library's default does.
//
//	connect PATH    dials ws://…PATH, then pings (so that the reader is
//	                known to be reading: see connect); "connected"
//	extensions      the server's Sec-WebSocket-Extensions (its lines joined
//	                with ", "); "extensions VALUE", or "extensions none"
//	text N          a text message of N bytes ("é"s, and an "a" if N is odd),
//	                then its echo, checked byte for byte; "text N echoed"
//	binary N        the same with N bytes i%256; "binary N echoed"
//	echo-compressed N  a text of N bytes that compresses well (a JSON-like
//	                line repeated), then its echo, checked byte for byte,
//	                which must have come on fewer than N/4 bytes read from
//	                the connection (frame headers included: the server
//	                compressed it); "echo N compressed" (the count goes to
//	                stderr)
//	send WORDS      the text WORDS, nothing awaited; "sent"
//	send-binary N   N binary bytes, nothing awaited; "sent", also when the
//	                write failed because the server closed the connection
//	                (it refuses a message over its limit before reading
//	                it, and lets the connection go)
//	send-zeros N    N zero bytes, binary, nothing awaited, which must have
//	                been written on fewer than N/4 bytes (compressed: a
//	                decompression bomb, not a message the server can refuse
//	                by its length); "sent", also when the write failed
//	                because the server closed the connection (the count goes
//	                to stderr)
//	send-invalid    a text message of the bytes ff fe (not UTF-8); "sent"
//	fragment WORDS  one frame of a text message (Writer's Write), then a
//	                ping: coder/websocket writes a frame that is not the
//	                message's last into its 4 KiB buffer and flushes it only
//	                with a final frame (a control frame is one), so without
//	                the ping the fragment would not leave the client; checks
//	                that Write wrote nothing and the ping the frame and
//	                itself (the bytes go to stderr); "fragment sent"
//	end             ends the fragmented message (Writer's Close: an empty
//	                final frame), then its echo; "echoed TEXT"
//	ping            Ping, which waits for the pong with its payload (the
//	                client's count of its pings); "pong"
//	pings N         waits until the server has pinged at least N times
//	                (each answered by the reader); "pinged N times"
//	close CODE WORDS  a ping (its pong puts the reader back in Read), then
//	                Close(CODE, WORDS), then the code and reason the
//	                server's close frame had; "closed CODE \"REASON\""
//	wait-close      waits for the server's close frame; "closed CODE
//	                \"REASON\"" (or "ended: ERROR" without one)
//	EOF             closes the connection (1000) if open, prints "closed
//	                after N commands" and exits 0
//
// Errors and timeouts exit non-zero with a message on stderr.
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
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

var (
	addr       = flag.String("addr", "", "the server's host:port (TCP)")
	unixPath   = flag.String("unix", "", "the server's Unix socket path")
	useTLS     = flag.Bool("tls", false, "TLS (with -addr)")
	caFile     = flag.String("ca", "", "PEM file of the certificate to trust (with -tls)")
	serverName = flag.String("servername", "localhost", "TLS server name (with -tls)")
	timeout    = flag.Duration("timeout", 20*time.Second, "how long one command may take")
	compress   = flag.String("compression", "off", "permessage-deflate: off, context or no-context")
)

// compressionModes are -compression's values.
var compressionModes = map[string]websocket.CompressionMode{
	"off":        websocket.CompressionDisabled,
	"context":    websocket.CompressionContextTakeover,
	"no-context": websocket.CompressionNoContextTakeover,
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "wsclient: "+format+"\n", args...)
	os.Exit(1)
}

// countingConn counts the bytes written to its connection and read from it
// (over TLS: the plaintext, before encryption and after decryption).
type countingConn struct {
	net.Conn
	written *atomic.Int64
	read    *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// incoming is what the reader hands over: a message, or the error that
// ended the connection.
type incoming struct {
	typ  websocket.MessageType
	data []byte
	err  error
}

type client struct {
	http    *http.Client
	base    string
	written atomic.Int64
	read    atomic.Int64
	pings   atomic.Int64
	pongs   chan string

	conn *websocket.Conn
	// The server's Sec-WebSocket-Extensions, its lines joined with ", ".
	extensions string
	msgs       chan incoming
	// The error that ended the connection, once the reader has seen it.
	ended error
	// The fragmented message being written, and its text so far.
	fragments io.WriteCloser
	fragText  strings.Builder
}

func newClient() *client {
	c := &client{pongs: make(chan string, 16)}
	counted := func(conn net.Conn, err error) (net.Conn, error) {
		if err != nil {
			return nil, err
		}
		return countingConn{conn, &c.written, &c.read}, nil
	}
	transport := &http.Transport{}
	switch {
	case *useTLS:
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail("%v", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			fail("no certificate in %s", *caFile)
		}
		cfg := &tls.Config{RootCAs: roots, ServerName: *serverName, NextProtos: []string{"http/1.1"}}
		transport.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := tls.Dialer{Config: cfg}
			conn, err := d.DialContext(ctx, "tcp", *addr)
			if err != nil {
				return nil, err
			}
			if p := conn.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "http/1.1" {
				conn.Close()
				return nil, fmt.Errorf("ALPN: the server chose %q, not http/1.1", p)
			}
			return counted(conn, nil)
		}
		c.base = "wss://" + *serverName
	case *unixPath != "":
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return counted(d.DialContext(ctx, "unix", *unixPath))
		}
		c.base = "ws://localhost"
	default:
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return counted(d.DialContext(ctx, "tcp", *addr))
		}
		c.base = "ws://" + *addr
	}
	c.http = &http.Client{Transport: transport}
	return c
}

func (c *client) connect(path string) error {
	if c.conn != nil {
		return errors.New("already connected (one connection per client)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	conn, res, err := websocket.Dial(ctx, c.base+path, &websocket.DialOptions{
		HTTPClient:      c.http,
		CompressionMode: compressionModes[*compress],
		OnPingReceived: func(context.Context, []byte) bool {
			c.pings.Add(1)
			return true // answer it
		},
		OnPongReceived: func(_ context.Context, payload []byte) {
			select {
			case c.pongs <- string(payload):
			default:
			}
		},
	})
	if err != nil {
		return fmt.Errorf("dial %s%s: %w", c.base, path, err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("dial: %s", res.Status)
	}
	c.extensions = strings.Join(res.Header.Values("Sec-WebSocket-Extensions"), ", ")
	// net/http's writer goroutine may count the request's bytes (its one
	// write) after the response came, even after its WroteRequest hook:
	// the fragments' counts start once it has.
	for c.written.Load() == 0 {
		if ctx.Err() != nil {
			return errors.New("dial: the request was never counted")
		}
		time.Sleep(time.Millisecond)
	}
	// Messages up to 16 MiB come back; no limit of the client's own.
	conn.SetReadLimit(-1)
	c.conn = conn
	c.msgs = make(chan incoming, 4)
	go func() {
		for {
			typ, data, err := conn.Read(context.Background())
			c.msgs <- incoming{typ, data, err}
			if err != nil {
				return
			}
		}
	}()
	// A ping, whose pong only the reader can read: once it came, the
	// reader is in Read, and stays there until a message or the close
	// frame. Close called before the reader's first Read would read the
	// server's close frame itself, and the reader would only find the
	// connection closed (net.ErrClosed), without the server's code.
	if _, err := c.ping(); err != nil {
		return fmt.Errorf("the first ping: %w", err)
	}
	return nil
}

// next waits (bounded) for the next message, or the connection's end.
func (c *client) next() incoming {
	if c.ended != nil {
		return incoming{err: c.ended}
	}
	select {
	case in := <-c.msgs:
		if in.err != nil {
			c.ended = in.err
		}
		return in
	case <-time.After(*timeout):
		fail("nothing came in %v", *timeout)
		panic("unreachable")
	}
}

// ending is how the connection ended, as the answer tells it.
func ending(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Sprintf("closed %d %q", int(ce.Code), ce.Reason)
	}
	return "ended: " + err.Error()
}

// expect waits for the echo of a message: nil if it is typ and want.
func (c *client) expect(typ websocket.MessageType, want []byte) error {
	in := c.next()
	if in.err != nil {
		return fmt.Errorf("instead of the echo: %s", ending(in.err))
	}
	if in.typ != typ {
		return fmt.Errorf("a %v message of %d B came back for a %v one of %d B", in.typ, len(in.data), typ, len(want))
	}
	if !bytes.Equal(in.data, want) {
		at := 0
		for at < len(in.data) && at < len(want) && in.data[at] == want[at] {
			at++
		}
		return fmt.Errorf("%d B came back for %d B sent, first difference at byte %d", len(in.data), len(want), at)
	}
	return nil
}

// refused tells whether a write failed because the server closed the
// connection: a server that refuses a message before reading it (1009)
// sends its close frame and lets the connection go, while the rest of the
// message is still being written.
func refused(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

func (c *client) write(typ websocket.MessageType, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return c.conn.Write(ctx, typ, data)
}

// text is N bytes of UTF-8: "é"s (two bytes each), and an "a" if N is odd.
func text(n int) []byte {
	return []byte(strings.Repeat("é", n/2) + strings.Repeat("a", n%2))
}

// compressible is N bytes of text that compresses well: a JSON-like line
// repeated.
func compressible(n int) []byte {
	line := `{"id":1,"ok":true}` + "\n"
	return []byte(strings.Repeat(line, n/len(line)+1)[:n])
}

// frameSize is the size of a masked frame (a client's) of n bytes of
// payload: two bytes of header, a longer length past 125 bytes, and the
// mask.
func frameSize(n int) int64 {
	size := 2 + 4 + n
	switch {
	case n > 65535:
		size += 8
	case n > 125:
		size += 2
	}
	return int64(size)
}

func binary(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// waitEnd skips messages until the connection ends: how it ended.
func (c *client) waitEnd() string {
	for {
		if in := c.next(); in.err != nil {
			return ending(in.err)
		}
	}
}

func (c *client) ping() (string, error) {
	for len(c.pongs) > 0 {
		<-c.pongs
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := c.conn.Ping(ctx); err != nil {
		return "", err
	}
	select {
	case payload := <-c.pongs:
		return payload, nil
	default:
		return "", errors.New("Ping returned, but no pong was seen")
	}
}

// run runs one command: its answer, or an error that ends the client.
func (c *client) run(line string) (string, error) {
	cmd, arg, _ := strings.Cut(line, " ")
	if cmd != "connect" && c.conn == nil {
		return "", fmt.Errorf("%q before connect", line)
	}
	number := func() (int, error) {
		n, err := strconv.Atoi(arg)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", line, err)
		}
		return n, nil
	}
	switch cmd {
	case "connect":
		if err := c.connect(arg); err != nil {
			return "", err
		}
		return "connected", nil
	case "text", "binary":
		n, err := number()
		if err != nil {
			return "", err
		}
		typ, data := websocket.MessageText, text(n)
		if cmd == "binary" {
			typ, data = websocket.MessageBinary, binary(n)
		}
		if err := c.write(typ, data); err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		if err := c.expect(typ, data); err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		return fmt.Sprintf("%s %d echoed", cmd, n), nil
	case "extensions":
		if c.extensions == "" {
			return "extensions none", nil
		}
		return "extensions " + c.extensions, nil
	case "echo-compressed":
		n, err := number()
		if err != nil {
			return "", err
		}
		data := compressible(n)
		before := c.read.Load()
		if err := c.write(websocket.MessageText, data); err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		if err := c.expect(websocket.MessageText, data); err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		read := c.read.Load() - before
		fmt.Fprintf(os.Stderr, "wsclient: %s: %d B read\n", line, read)
		if read*4 >= int64(n) {
			return "", fmt.Errorf("%s: %d B read for the echo, not fewer than N/4: the server did not compress it", line, read)
		}
		return fmt.Sprintf("echo %d compressed", n), nil
	case "send", "send-binary", "send-zeros", "send-invalid":
		typ, data := websocket.MessageText, []byte(arg)
		switch cmd {
		case "send-binary":
			n, err := number()
			if err != nil {
				return "", err
			}
			typ, data = websocket.MessageBinary, binary(n)
		case "send-zeros":
			n, err := number()
			if err != nil {
				return "", err
			}
			typ, data = websocket.MessageBinary, make([]byte, n)
		case "send-invalid":
			// coder/websocket does not check that text is UTF-8.
			data = []byte{0xff, 0xfe}
		}
		before := c.written.Load()
		err := c.write(typ, data)
		if (cmd == "send-binary" || cmd == "send-zeros") && refused(err) {
			fmt.Fprintf(os.Stderr, "wsclient: %s: the server closed the connection during the write (%v)\n", line, err)
			err = nil
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		if cmd == "send-zeros" {
			written := c.written.Load() - before
			fmt.Fprintf(os.Stderr, "wsclient: %s: %d B written\n", line, written)
			if written*4 >= int64(len(data)) {
				return "", fmt.Errorf("%s: %d B written, not fewer than N/4: the client did not compress it", line, written)
			}
		}
		return "sent", nil
	case "fragment":
		// The writer's context bounds each of its writes: it lives as
		// long as the message.
		if c.fragments == nil {
			w, err := c.conn.Writer(context.Background(), websocket.MessageText)
			if err != nil {
				return "", fmt.Errorf("%s: %w", line, err)
			}
			c.fragments = w
			c.fragText.Reset()
		}
		before := c.written.Load()
		if _, err := c.fragments.Write([]byte(arg)); err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		byWrite := c.written.Load() - before
		c.fragText.WriteString(arg)
		payload, err := c.ping()
		if err != nil {
			return "", fmt.Errorf("%s: the ping after it: %w", line, err)
		}
		byPing := c.written.Load() - before - byWrite
		fmt.Fprintf(os.Stderr, "wsclient: %s: %d B written by Write, %d B by the ping\n", line, byWrite, byPing)
		if want := frameSize(len(arg)) + frameSize(len(payload)); byWrite != 0 || byPing != want {
			return "", fmt.Errorf("%s: %d B written by Write, %d B by the ping, not 0 and %d (the fragment's frame and the ping's)", line, byWrite, byPing, want)
		}
		return "fragment sent", nil
	case "end":
		if c.fragments == nil {
			return "", errors.New("end: no fragmented message")
		}
		err := c.fragments.Close()
		c.fragments = nil
		if err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		whole := c.fragText.String()
		if err := c.expect(websocket.MessageText, []byte(whole)); err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		return "echoed " + whole, nil
	case "ping":
		if _, err := c.ping(); err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		return "pong", nil
	case "pings":
		n, err := number()
		if err != nil {
			return "", err
		}
		deadline := time.Now().Add(*timeout)
		for c.pings.Load() < int64(n) {
			if time.Now().After(deadline) {
				return "", fmt.Errorf("%s: %d pings in %v", line, c.pings.Load(), *timeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return fmt.Sprintf("pinged %d times", n), nil
	case "close":
		code, reason, _ := strings.Cut(arg, " ")
		n, err := strconv.Atoi(code)
		if err != nil {
			return "", fmt.Errorf("%q: %w", line, err)
		}
		// The reader must be in Read when Close is called (see
		// connect): it left Read to hand over the last message, and a
		// ping's pong, which only the reader reads, says it is back.
		// Else Close may read the server's close frame itself and the
		// reader find only the closed connection, without the code.
		if _, err := c.ping(); err != nil {
			return "", fmt.Errorf("%s: the ping before it: %w", line, err)
		}
		// Close returns once the server's close frame came (with the
		// same code: else it says so), or after 5 s.
		if err := c.conn.Close(websocket.StatusCode(n), reason); err != nil {
			return "", fmt.Errorf("%s: %w", line, err)
		}
		return c.waitEnd(), nil
	case "wait-close":
		return c.waitEnd(), nil
	}
	return "", fmt.Errorf("unknown command %q", line)
}

func main() {
	flag.Parse()
	if (*addr == "") == (*unixPath == "") {
		fail("give exactly one of -addr and -unix")
	}
	if *useTLS && (*addr == "" || *caFile == "") {
		fail("-tls takes -addr and -ca")
	}
	if _, ok := compressionModes[*compress]; !ok {
		fail("-compression %q: give off, context or no-context", *compress)
	}
	c := newClient()
	lines := bufio.NewScanner(os.Stdin)
	commands := 0
	for lines.Scan() {
		answer, err := c.run(lines.Text())
		if err != nil {
			fail("%v", err)
		}
		fmt.Println(answer)
		commands++
	}
	if err := lines.Err(); err != nil {
		fail("stdin: %v", err)
	}
	if c.conn != nil && c.ended == nil {
		c.conn.Close(websocket.StatusNormalClosure, "")
	}
	fmt.Printf("closed after %d commands\n", commands)
}
