package nameserver

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// idleTimeout is how long a connection may wait for its next request.
const idleTimeout = 2 * time.Minute

// Server keeps the names jobs publish, for any number of connections, as
// hydra_nameserver does (names live as long as the server).
type Server struct {
	// Log, if set, records each request.
	Log *slog.Logger

	mu    sync.Mutex
	names map[string]string
}

// Serve answers connections from ln until it fails (closing ln ends it).
func (s *Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go s.ServeConn(c)
	}
}

// ServeConn answers requests on c until the peer closes it or sends
// something malformed, then closes c.
func (s *Server) ServeConn(c io.ReadWriteCloser) error {
	defer c.Close()
	for {
		// A client that goes quiet is let go: clients open a connection
		// per request.
		if d, ok := c.(interface{ SetReadDeadline(time.Time) error }); ok {
			d.SetReadDeadline(time.Now().Add(idleTimeout))
		}
		req, err := ReadStrings(c)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			s.log("bad request", "error", err)
			return err
		}
		answer, err := s.handle(req)
		if err != nil {
			s.log("bad request", "error", err)
			return err
		}
		if err := WriteString(c, answer); err != nil {
			return err
		}
	}
}

// handle answers one request: SUCCESS or FAILURE, or for LOOKUP the port
// ("" when the name is not published).
func (s *Server) handle(req []string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names = map[string]string{}
	}
	ok := false
	switch {
	case req[0] == "PUBLISH" && len(req) == 3:
		if _, taken := s.names[req[1]]; !taken {
			s.names[req[1]], ok = req[2], true
		}
	case req[0] == "UNPUBLISH" && len(req) == 2:
		if _, ok = s.names[req[1]]; ok {
			delete(s.names, req[1])
		}
	case req[0] == "LOOKUP" && len(req) == 2:
		s.log("lookup", "name", req[1], "found", s.names[req[1]] != "")
		return s.names[req[1]], nil
	default:
		return "", fmt.Errorf("%w: request %.40q with %d arguments", ErrProtocol, req[0], len(req)-1)
	}
	s.log(req[0], "name", req[1], "ok", ok)
	if ok {
		return "SUCCESS", nil
	}
	return "FAILURE", nil
}

func (s *Server) log(msg string, args ...any) {
	if s.Log != nil {
		s.Log.Info(msg, args...)
	}
}
