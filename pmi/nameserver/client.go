package nameserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Errors a Client's calls wrap: the name is taken, or not published.
var (
	ErrExists   = errors.New("name already published")
	ErrNotFound = errors.New("name not published")
)

// Client asks a name server at Addr, one connection per call as Hydra's
// launcher does (the server keeps no per-client state).
type Client struct {
	// Addr is HOST or HOST:PORT (DefaultPort when none is given).
	Addr string
	// Timeout bounds each call when ctx has no earlier deadline. Default 10s.
	Timeout time.Duration
}

// ParseAddr checks a -nameserver value and adds the default port.
func ParseAddr(v string) (string, error) {
	if v == "" {
		return "", errors.New("empty name server address")
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		// No port (or an IPv6 address without brackets and port).
		if _, _, err2 := net.SplitHostPort(v + ":0"); err2 != nil && net.ParseIP(v) == nil {
			return "", fmt.Errorf("name server %q: want HOST or HOST:PORT", v)
		}
		return net.JoinHostPort(v, strconv.Itoa(DefaultPort)), nil
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
		return "", fmt.Errorf("name server %q: want HOST or HOST:PORT with a port from 1 to 65535", v)
	}
	return v, nil
}

// Publish registers name at port; a name already there is ErrExists.
func (c *Client) Publish(ctx context.Context, name, port string) error {
	r, err := c.call(ctx, "PUBLISH", name, port)
	if err == nil && r != "SUCCESS" {
		err = fmt.Errorf("publish %q: %w", name, ErrExists)
	}
	return err
}

// Unpublish removes name; one not there is ErrNotFound.
func (c *Client) Unpublish(ctx context.Context, name string) error {
	r, err := c.call(ctx, "UNPUBLISH", name)
	if err == nil && r != "SUCCESS" {
		err = fmt.Errorf("unpublish %q: %w", name, ErrNotFound)
	}
	return err
}

// Lookup returns name's port; one not there is ErrNotFound.
func (c *Client) Lookup(ctx context.Context, name string) (string, error) {
	r, err := c.call(ctx, "LOOKUP", name)
	if err == nil && r == "" {
		err = fmt.Errorf("lookup %q: %w", name, ErrNotFound)
	}
	return r, err
}

func (c *Client) call(ctx context.Context, req ...string) (string, error) {
	addr, err := ParseAddr(c.Addr)
	if err != nil {
		return "", err
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("name server %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := WriteStrings(conn, req...); err != nil {
		return "", fmt.Errorf("name server %s: %s: %w", addr, req[0], err)
	}
	r, err := ReadString(conn)
	if err != nil {
		return "", fmt.Errorf("name server %s: %s: %w", addr, req[0], err)
	}
	return r, nil
}
