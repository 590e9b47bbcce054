// Package control is the launcher↔proxy protocol (docs/control.md). It runs
// over yamux streams: the launcher opens a control stream to each proxy and,
// for the proxy hosting rank 0, a stdin stream. Every stream starts with one
// kind byte. On the control stream both sides send frames: a type byte, a
// big-endian uint32 length, then the payload.
package control

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/pmi"
	"github.com/hashicorp/yamux"
)

// Version is checked in the Job message; proxies refuse other versions.
// Version 2 added tree launch (Job.Index, Job.Children, Job.Launch, Msg.Host).
// Version 3 carries arguments, environment, paths and PMI values as bytes
// (bytes.go): a version-2 proxy would read {"b64":...} as an error.
// Version 4 added App.EnvSet and App.Inherit (per-segment -envall/-envnone/
// -envlist): a version-3 proxy would ignore them and pass the wrong environment.
const Version = 4

// Stream kinds: the first byte a launcher writes on a new stream.
const (
	StreamControl byte = 'C'
	StreamStdin   byte = 'I'
)

// Frame types.
const (
	FrameMsg    byte = 1 // JSON-encoded Msg
	FrameOutput byte = 2 // rank uint32, fd byte, data
)

// MaxFrame bounds a frame so a corrupt length cannot make us allocate
// gigabytes.
const MaxFrame = 16 << 20

// ErrFrameTooLarge is returned for frames longer than MaxFrame.
var ErrFrameTooLarge = errors.New("control: frame too large")

// Message kinds (Msg.T).
const (
	// launcher → proxy
	MsgJob    = "job"    // Job: what to run
	MsgSignal = "signal" // Sig: deliver to every rank's process group
	MsgKill   = "kill"   // SIGTERM every rank, SIGKILL after the job's grace period
	MsgEvent  = "event"  // Event, Seq: write a record on every local rank's event channel
	MsgDead   = "dead"   // Rank: failed, and the job goes on without it (PMI_dead_processes)
	// proxy → launcher
	MsgStarted = "started" // Pids: one per local rank, in Job.Ranks order
	MsgExit    = "exit"    // Rank, Code, Signal: a rank ended
	MsgError   = "error"   // Error: the proxy cannot go on; Rank set when it concerns one rank
	MsgDone    = "done"    // every local rank has ended and its output was sent
	MsgLost    = "lost"    // Host: a proxy below this one was lost; Error says why
	// PMI, proxy → launcher
	MsgFence = "fence" // KVS: the node's puts; all local ranks are in the barrier
	MsgAbort = "abort" // Rank, Code, Error: a rank called PMI abort
	MsgName  = "name"  // ReqID, Op (publish|unpublish|lookup), Service, Port
	// PMI, launcher → proxy
	MsgFenceDone = "fence_done" // KVS: every pair put in the round; Error if the job is ending
	MsgNameReply = "name_reply" // ReqID, Port, Error
)

// Msg is the JSON payload of a FrameMsg. Fields are used per kind (T).
type Msg struct {
	T string `json:"t"`
	// Host is the index (in the launcher's host list) of the proxy a message
	// comes from, or of the proxy a launcher→proxy message is addressed to;
	// proxies in the middle of a launch tree route by it.
	Host   int    `json:"host"`
	Job    *Job   `json:"job,omitempty"`
	Sig    int    `json:"sig,omitempty"`
	Pids   []int  `json:"pids,omitempty"`
	Rank   int    `json:"rank,omitempty"`
	Code   int    `json:"code,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
	// At is when the proxy observed what an exit, abort or error message
	// reports (its wall clock, Unix nanoseconds): messages from different
	// proxies arrive in any order, and the launcher blames the earliest
	// failure, not the first to arrive.
	At int64 `json:"at,omitempty"`

	KVS     []pmi.KV `json:"kvs,omitempty"`
	More    bool     `json:"more,omitempty"` // fence, fence_done: more KVS follow (SplitKVS)
	ReqID   int      `json:"req,omitempty"`
	Op      string   `json:"op,omitempty"`
	Service string   `json:"service,omitempty"`
	Port    string   `json:"port,omitempty"`

	// Rank events (MsgEvent): the record's kind and sequence number.
	Event string `json:"event,omitempty"`
	Seq   int64  `json:"seq,omitempty"`
}

// Job tells a proxy what to run.
type Job struct {
	Version int        `json:"version"`
	JobID   string     `json:"jobid"`
	Host    string     `json:"host"`
	Size    int        `json:"size"`
	GraceMS int        `json:"grace_ms"`
	Apps    []App      `json:"apps"`
	Ranks   []RankSpec `json:"ranks"`
	// Env is applied to every rank after the proxy's base environment.
	Env []string `json:"env"`
	// EnvNone: Env holds only what gompiexec chose to pass (-genvnone,
	// -genvlist). Ranks start from the proxy's own environment either way,
	// as Hydra's do; the field is informational.
	EnvNone bool `json:"env_none,omitempty"`

	// BindTo is gompiexec -bind-to (TYPE or TYPE:N; "" binds nothing):
	// the proxy binds its local ranks round-robin to the host's objects
	// of that type. Proxies that predate it ignore it and bind nothing.
	BindTo string `json:"bind_to,omitempty"`
	// HostBindTo is this host's binding= from the host file, which
	// replaces BindTo here ("none" included).
	HostBindTo string `json:"host_bind_to,omitempty"`
	// MapBy is -map-by (TYPE or TYPE:N; "": BindTo's own objects): the
	// objects the local ranks go to in turn before each binds.
	MapBy string `json:"map_by,omitempty"`
	// Membind is -membind (firsttouch, nexttouch, bind:NODES,
	// interleave:NODES): the memory policy each rank starts with.
	Membind string `json:"membind,omitempty"`
	// Iface is -iface: the proxy gives its ranks this interface's IPv4
	// address on its host as GOMPI_HOST (and the name to MPICH ranks as
	// MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE); a host without it is an error.
	Iface string `json:"iface,omitempty"`
	// Hostname is this host's name as the host list gives it, for MPICH's
	// ch3 as MPIR_CVAR_CH3_INTERFACE_HOSTNAME (Hydra's hostname
	// propagation); "" sets nothing (-iface, -disable-hostname-propagation).
	Hostname string `json:"hostname,omitempty"`
	// GPUsPerProc is -gpus-per-proc N: local rank i gets
	// CUDA_VISIBLE_DEVICES=i*N,...,i*N+N-1, and "-1" for N=0, as Hydra
	// sets them. nil (AUTO, the default) sets nothing.
	GPUsPerProc *int `json:"gpus_per_proc,omitempty"`

	// PMI service for the ranks.
	KVSName        string `json:"kvsname"`
	ProcessMapping string `json:"process_mapping,omitempty"`
	UniverseSize   int    `json:"universe_size"`
	PMIPort        bool   `json:"pmi_port,omitempty"` // PMI_PORT+PMI_ID instead of PMI_FD
	PMITrace       bool   `json:"pmi_trace,omitempty"`

	// IOCacheDirs are node-local MPI-IO cache directories whose journals
	// the proxy replays before it starts its ranks (docs/io.md).
	IOCacheDirs []string `json:"io_cache_dirs,omitempty"`

	// Tree launch: this proxy's index in the launcher's host list, the
	// subtrees it starts itself, how it starts them, and the proxy command
	// to run there.
	Index     int              `json:"index"`
	Children  []Subtree        `json:"children,omitempty"`
	Launch    *launcher.Recipe `json:"launch,omitempty"`
	ProxyPath string           `json:"proxy_path,omitempty"`
}

// Subtree is a proxy a parent proxy starts, with the proxies below it. The
// child's Job is the parent's with Host, User, Index, Ranks and Children
// replaced.
type Subtree struct {
	Index    int        `json:"index"`
	Host     string     `json:"host"`
	User     string     `json:"user,omitempty"`
	BindTo   string     `json:"bind_to,omitempty"` // the host file's binding=
	Ranks    []RankSpec `json:"ranks"`
	Children []Subtree  `json:"children,omitempty"`
}

// Hosts lists the host indices of t and everything below it.
func (t Subtree) Hosts() []int {
	out := []int{t.Index}
	for _, c := range t.Children {
		out = append(out, c.Hosts()...)
	}
	return out
}

// ForChild derives the job a parent sends to the root of subtree t.
func (j *Job) ForChild(t Subtree) *Job {
	c := *j
	c.Host, c.Index, c.Ranks, c.Children = t.Host, t.Index, t.Ranks, t.Children
	c.HostBindTo = t.BindTo
	if j.Hostname != "" {
		c.Hostname = t.Host
	}
	return &c
}

// App is one MPMD segment.
type App struct {
	Argv []string `json:"argv"`
	Path string   `json:"path,omitempty"` // the program, when not Argv[0]
	Env  []string `json:"env"`
	Wdir string   `json:"wdir"`
	// EnvSet: this app's ranks inherit Inherit (on top of the proxy's
	// environment; EnvNone is informational) instead of the job's
	// inherited environment (gompiexec -envall, -envnone, -envlist);
	// Job.Env then holds only -genv pairs.
	EnvSet  bool     `json:"env_set,omitempty"`
	EnvNone bool     `json:"env_none,omitempty"`
	Inherit []string `json:"inherit,omitempty"`
}

// RankSpec is one rank this proxy runs.
type RankSpec struct {
	Rank      int `json:"rank"`
	LocalRank int `json:"local_rank"`
	AppNum    int `json:"app"`
}

// Conn frames messages on a stream. Reads are done by one goroutine; writes
// are serialised by a mutex so output and control frames never interleave.
type Conn struct {
	r    *bufio.Reader
	rbuf []byte // reused by Recv
	mu   sync.Mutex
	w    *bufio.Writer
	raw  io.Writer // under w: a large output frame goes out whole
	wbuf []byte    // that frame
	c    io.Closer
	// queued counts flushing writers that have not written yet. A writer
	// that sees another behind it leaves the flush to that one, so frames
	// sent at the same moment (a node's ranks exiting together) leave in
	// one write and wake the reader once.
	queued atomic.Int32
}

// NewConn wraps a stream.
func NewConn(rw io.ReadWriteCloser) *Conn {
	return &Conn{r: bufio.NewReaderSize(rw, 64<<10), w: bufio.NewWriterSize(rw, 64<<10), raw: rw, c: rw}
}

// Close closes the underlying stream.
func (c *Conn) Close() error { return c.c.Close() }

// Send writes one message and flushes.
func (c *Conn) Send(m Msg) error {
	// Msg's own encoder, not json.Marshal(m): that would scan and compact
	// its (valid) output once more, the job's environment included.
	b, err := m.MarshalJSON()
	if err != nil {
		return fmt.Errorf("control: encode %s: %w", m.T, err)
	}
	c.queued.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queued.Add(-1)
	if err := c.writeFrame(FrameMsg, b); err != nil {
		return err
	}
	return c.flushUnlessQueued()
}

// flushUnlessQueued flushes (c.mu held) unless another flushing writer is
// waiting for the lock: it will write after this one and flush both.
func (c *Conn) flushUnlessQueued() error {
	if c.queued.Load() > 0 {
		return nil
	}
	return c.w.Flush()
}

// SendOutput writes one output chunk; flush says whether to push it out now
// (callers batch when more output is already waiting).
func (c *Conn) SendOutput(rank int, fd byte, data []byte, flush bool) error {
	if flush {
		c.queued.Add(1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if flush {
		c.queued.Add(-1)
	}
	var hdr [10]byte
	hdr[0] = FrameOutput
	binary.BigEndian.PutUint32(hdr[1:5], uint32(5+len(data)))
	binary.BigEndian.PutUint32(hdr[5:9], uint32(rank))
	hdr[9] = fd
	// A frame is written whole: through w a full chunk (64 KiB from the
	// proxy's relay) left as two yamux frames, the buffer's worth and its
	// last bytes, each with its own hand-off to yamux's sender, write and
	// wake-up of the reader. What is buffered goes first.
	if n := len(hdr) + len(data); n > c.w.Available() {
		if err := c.w.Flush(); err != nil {
			return err
		}
		if n > c.w.Available() {
			c.wbuf = append(append(c.wbuf[:0], hdr[:]...), data...)
			_, err := c.raw.Write(c.wbuf)
			return err
		}
	}
	if _, err := c.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := c.w.Write(data); err != nil {
		return err
	}
	if flush {
		return c.flushUnlessQueued()
	}
	return nil
}

// Flush pushes buffered frames out.
func (c *Conn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Flush()
}

func (c *Conn) writeFrame(typ byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := c.w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := c.w.Write(payload)
	return err
}

// Frame is one received frame.
type Frame struct {
	Type byte
	Msg  Msg    // FrameMsg
	Rank int    // FrameOutput
	FD   byte   // FrameOutput: 1 stdout, 2 stderr
	Data []byte // FrameOutput; valid until the next Recv
}

// Recv reads the next frame. Only one goroutine may call it; an output
// frame's Data is valid until the next call.
func (c *Conn) Recv() (Frame, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return Frame{}, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	if cap(c.rbuf) < int(n) {
		c.rbuf = make([]byte, n)
	}
	buf := c.rbuf[:n]
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return Frame{}, fmt.Errorf("control: short frame: %w", err)
	}
	switch hdr[0] {
	case FrameMsg:
		// Directly, not json.Unmarshal(buf, &m): that validates the whole
		// frame before handing it to the method, which validates it again.
		var m Msg
		if err := m.UnmarshalJSON(buf); err != nil {
			return Frame{}, fmt.Errorf("control: bad message: %w", err)
		}
		return Frame{Type: FrameMsg, Msg: m}, nil
	case FrameOutput:
		if n < 5 {
			return Frame{}, errors.New("control: short output frame")
		}
		return Frame{Type: FrameOutput, Rank: int(binary.BigEndian.Uint32(buf[:4])), FD: buf[4], Data: buf[5:]}, nil
	default:
		return Frame{}, fmt.Errorf("control: unknown frame type %d", hdr[0])
	}
}

// LauncherWindow is the yamux receive window of the launcher's streams:
// how far a proxy's output may run ahead of the launcher's reading.
const LauncherWindow = 1 << 20

// openSession is the launcher side of a proxy's session (gompiexec, or a
// proxy starting proxies below it in a tree): a yamux client over rw, its
// control stream, and the job as the first message. Keepalives are off on
// this side: the transport or the proxy's heartbeat reports loss. On error
// nothing is left open but rw, which the caller owns.
func openSession(rw io.ReadWriteCloser, job *Job) (*yamux.Session, *Conn, error) {
	ycfg := yamux.DefaultConfig()
	ycfg.LogOutput = io.Discard
	ycfg.EnableKeepAlive = false
	// The proxy's output comes on the control stream. With yamux's 256
	// KiB window the launcher sent a window update (a write, and a wake-up
	// of the proxy's sender) every 128 KiB read, and a proxy with output in
	// hand waited for them. At 1 MiB a quarter as many updates go back.
	ycfg.MaxStreamWindowSize = LauncherWindow
	sess, err := yamux.Client(Coalesce(rw), ycfg)
	if err != nil {
		return nil, nil, err
	}
	st, err := sess.Open()
	if err != nil {
		sess.Close()
		return nil, nil, fmt.Errorf("control stream: %w", err)
	}
	// The stream's kind byte goes out with the job, in one frame.
	conn := NewConn(st)
	conn.w.WriteByte(StreamControl)
	if err := conn.Send(Msg{T: MsgJob, Host: job.Index, Job: job}); err != nil {
		sess.Close()
		return nil, nil, fmt.Errorf("send job: %w", err)
	}
	return sess, conn, nil
}

// Attach opens the session of a proxy just started by a backend
// (openSession over a launcher.Recording of it, so a later loss can be
// explained, and a launcher.ReadToEnd, so a proxy that has exited is read
// to the end of what it sent). On error the proxy is killed and reaped before the error is
// returned: exec copies its stderr (an agent's "cannot reach host") until
// Wait, and that line is the reason; its exit status is added.
func Attach(started launcher.Proc, job *Job) (*launcher.Recording, *yamux.Session, *Conn, error) {
	drain := launcher.NewReadToEnd(started)
	proc := &launcher.Recording{Proc: drain}
	sess, conn, err := openSession(proc, job)
	if err != nil {
		proc.Kill()
		if werr := proc.Wait(); werr != nil {
			err = fmt.Errorf("%w (gompi-proxy or its launcher: %v)", err, werr)
		}
		return nil, nil, nil, err
	}
	// From here on the proxy may exit as soon as it has sent its last
	// frame: what it sent is read even when writes to it fail.
	drain.Arm()
	return proc, sess, conn, nil
}
