// Package client is a Go PMI-1 client: how a Go rank learns its rank and
// size and exchanges addresses with its peers. It works under gompiexec,
// under MPICH's mpiexec.hydra, and alone (singleton: rank 0 of 1).
package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gompi/gompi/pmi"
)

// Errors, usable with errors.Is.
var (
	ErrNotFound   = errors.New("pmi: key not found")
	ErrServerGone = errors.New("pmi: server went away")
)

// Client is a connection to the process manager. Its methods are safe for
// concurrent use; PMI-1 allows one request at a time, so they serialise.
type Client struct {
	mu        sync.Mutex
	conn      net.Conn
	r         *bufio.Reader
	rank      int
	size      int
	appnum    int
	kvsname   string
	maxValue  int
	singleton bool
	local     map[string]string // singleton KVS

	// A cancelled call leaves the stream mid-exchange; the next call first
	// finishes it, so a late reply is never taken for its own.
	unsent  []byte // the rest of a request whose write was cut off
	owed    int    // replies to requests already sent that no call read
	partial string // the start of a reply line whose read was cut off
}

// New connects using the environment: PMI_FD (with PMI_RANK, PMI_SIZE),
// else PMI_PORT with PMI_ID, else singleton mode.
func New(ctx context.Context) (*Client, error) {
	if fdStr := os.Getenv("PMI_FD"); fdStr != "" {
		fd, err := strconv.Atoi(fdStr)
		if err != nil {
			return nil, fmt.Errorf("pmi: PMI_FD=%q is not a descriptor", fdStr)
		}
		f := os.NewFile(uintptr(fd), "pmi")
		conn, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("pmi: PMI_FD=%d: %w", fd, err)
		}
		rank, err1 := envInt("PMI_RANK", 0)
		size, err2 := envInt("PMI_SIZE", 1)
		if err := errors.Join(err1, err2); err != nil {
			conn.Close()
			return nil, err
		}
		return NewFromConn(ctx, conn, rank, size)
	}
	if port := os.Getenv("PMI_PORT"); port != "" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", port)
		if err != nil {
			return nil, fmt.Errorf("pmi: PMI_PORT=%s: %w", port, err)
		}
		c := &Client{conn: conn, r: bufio.NewReader(conn)}
		if id := os.Getenv("PMI_ID"); id != "" {
			if err := c.initack(ctx, id); err != nil {
				conn.Close()
				return nil, err
			}
		} else {
			var err1, err2 error
			c.rank, err1 = envInt("PMI_RANK", 0)
			c.size, err2 = envInt("PMI_SIZE", 1)
			if err := errors.Join(err1, err2); err != nil {
				conn.Close()
				return nil, err
			}
		}
		if err := c.init(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		return c, nil
	}
	if err := checkSrunWithoutPMI(os.Getenv); err != nil {
		return nil, err
	}
	return &Client{size: 1, appnum: 0, kvsname: fmt.Sprintf("singinit_kvs_%d_0", os.Getpid()),
		maxValue: pmi.MaxValue, singleton: true, local: map[string]string{}}, nil
}

// SingletonEnv=1 lets every task of a multi-task srun step without a PMI
// plugin run as a singleton of its own (task farming), which New otherwise
// refuses (ErrNoPMI).
const SingletonEnv = "GOMPI_SINGLETON"

// ErrNoPMI: srun started several tasks of this step without a PMI plugin
// (its --mpi=none, the usual MpiDefault); each would run alone as rank 0 of
// 1 and compute the whole job's answer, or a wrong one, N times.
var ErrNoPMI = errors.New("pmi: srun started this step's tasks without PMI")

func checkSrunWithoutPMI(getenv func(string) string) error {
	n, _ := strconv.Atoi(getenv("SLURM_STEP_NUM_TASKS"))
	task := getenv("SLURM_PROCID")
	if n <= 1 || task == "" || getenv(SingletonEnv) == "1" {
		return nil
	}
	return fmt.Errorf("%w: task %s of %d (SLURM_PROCID, SLURM_STEP_NUM_TASKS) has no PMI_FD or PMI_PORT and would run alone as rank 0 of 1; run srun --mpi=pmi2, or set %s=1 to run every task as its own singleton",
		ErrNoPMI, task, n, SingletonEnv)
}

// NewFromConn speaks PMI over an established connection (PMI_FD mode).
func NewFromConn(ctx context.Context, conn net.Conn, rank, size int) (*Client, error) {
	c := &Client{conn: conn, r: bufio.NewReader(conn), rank: rank, size: size}
	if err := c.init(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("pmi: %s=%q is not a number", name, v)
	}
	return n, nil
}

func (c *Client) initack(ctx context.Context, id string) error {
	if _, err := c.call(ctx, "cmd=initack pmiid="+id, "initack"); err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		m, err := c.read(ctx, "set")
		if err != nil {
			return err
		}
		for k, v := range m {
			n, _ := strconv.Atoi(v)
			switch k {
			case "size":
				c.size = n
			case "rank":
				c.rank = n
			}
		}
	}
	return nil
}

func (c *Client) init(ctx context.Context) error {
	m, err := c.call(ctx, "cmd=init pmi_version=1 pmi_subversion=1", "response_to_init")
	if err != nil {
		return err
	}
	if m["rc"] != "0" {
		return fmt.Errorf("pmi: server refused PMI 1.1 (rc=%s)", m["rc"])
	}
	if m, err = c.call(ctx, "cmd=get_maxes", "maxes"); err != nil {
		return err
	}
	c.maxValue, _ = strconv.Atoi(m["vallen_max"])
	if c.maxValue <= 0 {
		c.maxValue = pmi.MaxValue
	}
	if m, err = c.call(ctx, "cmd=get_appnum", "appnum"); err != nil {
		return err
	}
	c.appnum, _ = strconv.Atoi(m["appnum"])
	if m, err = c.call(ctx, "cmd=get_my_kvsname", "my_kvsname"); err != nil {
		return err
	}
	c.kvsname = m["kvsname"]
	return nil
}

// call sends one request and reads its reply; the lock is held by the caller
// chain so requests never interleave. A cancelled ctx interrupts the I/O
// through a past deadline, which is cleared again before call returns.
func (c *Client) call(ctx context.Context, req, want string) (map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		c.conn.SetDeadline(time.Unix(1, 0))
	})
	defer func() {
		if !stop() {
			<-fired
			c.conn.SetDeadline(time.Time{})
		}
	}()
	if err := c.resync(ctx); err != nil {
		return nil, err
	}
	if n, err := c.conn.Write([]byte(req + "\n")); err != nil {
		if ctx.Err() != nil && n > 0 {
			// Part of the request reached the server: resync sends the
			// rest and skips its reply.
			c.unsent = []byte(req + "\n")[n:]
			c.owed++
		}
		return nil, c.gone(ctx, err)
	}
	c.owed++
	return c.read(ctx, want)
}

// resync completes what a cancelled call left: the rest of its request
// and the replies nobody read, which are discarded.
func (c *Client) resync(ctx context.Context) error {
	if len(c.unsent) > 0 {
		n, err := c.conn.Write(c.unsent)
		c.unsent = c.unsent[n:]
		if err != nil {
			return c.gone(ctx, err)
		}
	}
	for c.owed > 0 {
		if _, err := c.readLine(ctx); err != nil {
			return err
		}
	}
	return nil
}

// readLine reads one whole line; a read cut off by cancellation keeps what
// it got for the next call.
func (c *Client) readLine(ctx context.Context) (string, error) {
	line, err := c.r.ReadString('\n')
	line = c.partial + line
	c.partial = ""
	if err != nil {
		if ctx.Err() != nil {
			c.partial = line
		}
		return "", c.gone(ctx, err)
	}
	if c.owed > 0 {
		c.owed--
	}
	return line, nil
}

func (c *Client) read(ctx context.Context, want string) (map[string]string, error) {
	line, err := c.readLine(ctx)
	if err != nil {
		return nil, err
	}
	cmd, err := pmi.ParseLine(line)
	if err != nil {
		return nil, err
	}
	if cmd.Name != want {
		return nil, fmt.Errorf("pmi: expected cmd=%s, got %q", want, strings.TrimSpace(line))
	}
	return cmd.Args, nil
}

func (c *Client) gone(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %v", ErrServerGone, err)
}

// Rank is this process's rank in the job.
func (c *Client) Rank() int { return c.rank }

// Size is the number of ranks in the job.
func (c *Client) Size() int { return c.size }

// AppNum is the MPMD segment this rank belongs to.
func (c *Client) AppNum() int { return c.appnum }

// KVSName is the job's key-value space name.
func (c *Client) KVSName() string { return c.kvsname }

// Singleton reports whether no process manager is present.
func (c *Client) Singleton() bool { return c.singleton }

// UniverseSize asks the process manager for the universe size (-1: unknown).
func (c *Client) UniverseSize(ctx context.Context) (int, error) {
	if c.singleton {
		return 1, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.call(ctx, "cmd=get_universe_size", "universe_size")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(m["size"])
}

// Put stores key=value; other ranks see it after the next Fence. Values
// must be printable without spaces (hex-encode binary data).
func (c *Client) Put(key, value string) error {
	if strings.ContainsAny(key, " \t\n\r=") || strings.ContainsAny(value, " \t\n\r") {
		return fmt.Errorf("pmi: put %q: keys and values cannot contain spaces or newlines, keys no '='", key)
	}
	if key == "" || len(key) > pmi.MaxKey || len(value) > c.maxValue {
		return fmt.Errorf("pmi: put %q: key must be 1..%d bytes and value at most %d", key, pmi.MaxKey, c.maxValue)
	}
	if c.singleton {
		c.local[key] = value
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.call(context.Background(), fmt.Sprintf("cmd=put kvsname=%s key=%s value=%s", c.kvsname, key, value), "put_result")
	if err != nil {
		return err
	}
	if m["rc"] != "0" {
		return fmt.Errorf("pmi: put %q refused: %s", key, m["msg"])
	}
	return nil
}

// Fence is a barrier over all ranks that also publishes every Put.
func (c *Client) Fence(ctx context.Context) error {
	if c.singleton {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.call(ctx, "cmd=barrier_in", "barrier_out")
	return err
}

// Get returns the value another rank put before the last Fence.
func (c *Client) Get(ctx context.Context, key string) (string, error) {
	if c.singleton {
		v, ok := c.local[key]
		if !ok {
			return "", fmt.Errorf("%w: %q", ErrNotFound, key)
		}
		return v, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.call(ctx, fmt.Sprintf("cmd=get kvsname=%s key=%s", c.kvsname, key), "get_result")
	if err != nil {
		return "", err
	}
	if m["rc"] != "0" {
		return "", fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return m["value"], nil
}

// Abort asks the process manager to end the whole job with code. It
// returns once the request is sent; the process manager then kills the job.
func (c *Client) Abort(code int, msg string) error {
	if c.singleton {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	msg = strings.Join(strings.Fields(msg), "_")
	_, err := c.conn.Write([]byte(fmt.Sprintf("cmd=abort exitcode=%d msg=%s\n", code, msg)))
	return err
}

// Finalize tells the process manager this rank is done and closes the
// connection.
func (c *Client) Finalize() error {
	if c.singleton {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.call(context.Background(), "cmd=finalize", "finalize_ack")
	c.conn.Close()
	return err
}
