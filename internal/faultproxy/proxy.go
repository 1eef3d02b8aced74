// Package faultproxy is a TCP proxy that understands just enough of the
// PostgreSQL wire protocol to cut a connection at a chosen message: before
// a COMMIT reaches the server, or after the server has executed it but
// before the client hears the answer. Tests put it between pgx and the
// server to produce commits whose outcome is unknown, and to cut
// connections at random points under load.
//
// The proxy parses the backend stream as typed messages from the first
// byte, so clients must connect with sslmode=disable (an SSLRequest's
// one-byte answer is not framed).
package faultproxy

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Action is what the proxy does with one client message.
type Action int

const (
	// Forward passes the message on.
	Forward Action = iota
	// CutBefore drops the connection without forwarding the message.
	CutBefore
	// CutAfter forwards the message, waits until the server has answered
	// it completely (ReadyForQuery), swallows the answer and drops the
	// connection: the server did the work, the client never learns it.
	CutAfter
	// CutBeforeReady forwards the message and the server's whole answer
	// but its ReadyForQuery, then drops the connection: the client reads
	// every result, and the connection breaks before the server says it
	// is ready for the next query.
	CutBeforeReady
)

// Message is a client (frontend) message as the rule sees it.
type Message struct {
	ConnID int    // the proxied connection's number, from 1
	Type   byte   // message type, e.g. 'Q' simple query, 'P' parse, 'B' bind, 'E' execute, 'S' sync
	Body   []byte // the message body (without type and length); do not keep it
}

// Query returns the SQL text of a simple-query ('Q') or parse ('P')
// message, or "".
func (m Message) Query() string {
	switch m.Type {
	case 'Q':
		return cstring(m.Body)
	case 'P':
		// name\0 query\0 ...
		for i, c := range m.Body {
			if c == 0 {
				return cstring(m.Body[i+1:])
			}
		}
	}
	return ""
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Rule decides the action for each client message. It runs on the
// connection's goroutine and must be safe for concurrent use.
type Rule func(Message) Action

// Proxy listens on 127.0.0.1 and forwards to a target address.
type Proxy struct {
	ln     net.Listener
	target string
	rule   atomic.Pointer[Rule]

	mu     sync.Mutex
	conns  map[int]*pair
	nextID int
	closed bool
	wg     sync.WaitGroup

	cuts atomic.Int64
}

type pair struct {
	client, server net.Conn
	once           sync.Once
}

func (p *pair) close() {
	p.once.Do(func() {
		_ = p.client.Close()
		_ = p.server.Close()
	})
}

// Start listens on a free port of 127.0.0.1 and proxies to target
// ("host:port").
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[int]*pair{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetRule installs the rule for client messages (nil: forward all).
func (p *Proxy) SetRule(r Rule) {
	if r == nil {
		p.rule.Store(nil)
		return
	}
	p.rule.Store(&r)
}

// Cuts is how many connections a rule or CutAll has cut so far.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// CutAll drops every open connection at once and returns how many.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	ps := make([]*pair, 0, len(p.conns))
	for _, c := range p.conns {
		ps = append(ps, c)
	}
	p.mu.Unlock()
	for _, c := range ps {
		c.close()
	}
	p.cuts.Add(int64(len(ps)))
	return len(ps)
}

// Close stops listening, drops every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.nextID++
		id := p.nextID
		pr := &pair{client: c, server: s}
		p.conns[id] = pr
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(id, pr)
	}
}

func (p *Proxy) serve(id int, pr *pair) {
	defer p.wg.Done()
	defer func() {
		pr.close()
		p.mu.Lock()
		delete(p.conns, id)
		p.mu.Unlock()
	}()
	var mute atomic.Bool            // swallow server messages
	var holdReady atomic.Bool       // swallow the next ReadyForQuery only
	answered := make(chan struct{}) // closed when a muted ReadyForQuery arrived
	done := make(chan struct{})
	go func() { // server → client
		defer close(done)
		defer pr.close()
		var closeOnce sync.Once
		_ = copyBackend(pr.server, pr.client, &mute, &holdReady, func() { closeOnce.Do(func() { close(answered) }) })
	}()
	// client → server
	err := p.copyFrontend(id, pr, &mute, &holdReady, answered)
	_ = err
	pr.close()
	<-done
}

// copyFrontend relays client messages, consulting the rule for each typed
// message after start-up.
func (p *Proxy) copyFrontend(id int, pr *pair, mute, holdReady *atomic.Bool, answered chan struct{}) error {
	var hdr [5]byte
	// Start-up phase: untyped messages (length first). SSLRequest and
	// GSSENCRequest are answered by one byte and followed by another
	// untyped message.
	for {
		if _, err := io.ReadFull(pr.client, hdr[:4]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 || n > 1<<20 {
			return errors.New("faultproxy: bad start-up length")
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(pr.client, body); err != nil {
			return err
		}
		if _, err := pr.server.Write(append(hdr[:4:4], body...)); err != nil {
			return err
		}
		code := binary.BigEndian.Uint32(body[:4])
		if code != 80877103 && code != 80877104 { // not SSLRequest / GSSENCRequest
			break
		}
	}
	buf := make([]byte, 0, 8192)
	for {
		if _, err := io.ReadFull(pr.client, hdr[:5]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:5]))
		if n < 4 || n > 1<<30 {
			return errors.New("faultproxy: bad message length")
		}
		buf = append(buf[:0], hdr[:5]...)
		buf = append(buf, make([]byte, n-4)...)
		if _, err := io.ReadFull(pr.client, buf[5:]); err != nil {
			return err
		}
		act := Forward
		if r := p.rule.Load(); r != nil {
			act = (*r)(Message{ConnID: id, Type: hdr[0], Body: buf[5:]})
		}
		switch act {
		case CutBefore:
			p.cuts.Add(1)
			return nil
		case CutAfter, CutBeforeReady:
			if act == CutAfter {
				mute.Store(true)
			} else {
				holdReady.Store(true)
			}
			if _, err := pr.server.Write(buf); err != nil {
				return err
			}
			<-answered
			p.cuts.Add(1)
			return nil
		default:
			if _, err := pr.server.Write(buf); err != nil {
				return err
			}
		}
	}
}

// copyBackend relays server messages; while mute is set it swallows them
// and calls onReady at the first ReadyForQuery; while holdReady is set it
// relays them but swallows the first ReadyForQuery, and calls onReady.
func copyBackend(server, client net.Conn, mute, holdReady *atomic.Bool, onReady func()) error {
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(server, hdr[:5]); err != nil {
			if mute.Load() || holdReady.Load() {
				onReady() // the server went away: nothing more to wait for
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:5]))
		if n < 4 || n > 1<<30 {
			return errors.New("faultproxy: bad backend message length")
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(server, body); err != nil {
			return err
		}
		if mute.Load() {
			if hdr[0] == 'Z' {
				onReady()
			}
			continue
		}
		if hdr[0] == 'Z' && holdReady.Load() {
			onReady()
			continue
		}
		if _, err := client.Write(append(hdr[:5:5], body...)); err != nil {
			return err
		}
	}
}
