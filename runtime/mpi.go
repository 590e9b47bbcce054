// Package mpi is gompi's rank runtime: point-to-point messaging,
// communicators and simple collectives between the ranks of a job started
// by gompiexec, MPICH's mpiexec.hydra, or alone (a singleton of size 1).
//
// Ranks bootstrap through PMI (pmi/client): each rank listens on TCP,
// publishes "host:port" in the job's key-value space, and connects to a
// peer lazily on first use. Every connection is authenticated with an
// HMAC challenge/response over a per-job secret. Peers on the same host
// then move their messages through shared-memory rings (internal/shm), and
// large ones with a single process_vm_readv copy; the TCP connection stays
// as the control path. See docs/transport.md.
//
// Typed buffers ([]T for any Number T) travel as their raw bytes with no
// encoding; SendValue/RecvValue carry any value through a Codec (gob by
// default). Non-blocking operations return a *Request (Wait with a context,
// Test, Done for select); blocking ones return when done, never by polling.
//
// Point-to-point operations are safe to use from many goroutines at once.
// Beyond Send/Recv/Isend/Irecv/Sendrecv/Probe there are Ssend (returns
// once the receiver matched), SendrecvReplace, Mprobe/Mrecv (the probe
// that removes the message from matching, race-free with many goroutines),
// RecvContext, ProcNull as a source or destination, and request sets
// (WaitAll, WaitAny, WaitSome, Testall, Testany; failures reported as a
// *RequestError; WaitAny and friends set the completed slot to nil).
// Value messages that cannot be encoded or decoded are errors wrapping
// ErrCodec on every rank involved.
// Collective operations (Barrier, Dup, Split, Bcast, Reduce, Allreduce) must,
// as in MPI, be called by every member of the communicator in the same order,
// one at a time per communicator. Non-blocking collectives (Ibarrier,
// Iallreduce, ...) return a *Request and progress on their own goroutine;
// they may overlap each other and blocking collectives on the same
// communicator, provided every rank starts them in the same order.
// Comm.WithContext bounds a communicator's collectives by a context.
//
// Reductions take an Op: Sum, Prod (every Number, complex included), Min,
// Max (ordered types), Land, Lor, Lxor, Band, Bor, Bxor (integers),
// MaxLoc/MinLoc (ValIndex pairs, with ReduceLoc/AllreduceLoc), or NewOp;
// an op over items of several elements declares it with WithUnit.
// Groups, Comm.Create, SplitShared/SplitType and Cartesian topologies
// (CartCreate) build communicators on Split; Comm.Free releases one.
// Comm.InterCommCreate joins two disjoint groups in an intercommunicator
// (point-to-point ranks name the remote group; Barrier, Bcast, Reduce,
// Gather and Scatter with Root/ProcNull, Allreduce and Allgather deliver
// the other group's data;
// Merge makes one intracommunicator of both); other collectives return
// ErrIntercomm on it.
// SendType/RecvType move strided data described by a Datatype (Vector,
// Subarray, ...). See docs/collectives.md.
//
// Errors are values: ErrTruncate, ErrRank, ErrTag, ErrArg, ErrCancelled,
// ErrAborted, ErrFinalized, ErrCodec, ErrFreed, ErrIntercomm, *PeerError for a failed or departed
// peer, *RequestError for request sets, and wrapped context errors. The library never exits the process.
package mpi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gompi/gompi/internal/portrange"
	"github.com/gompi/gompi/internal/shm"
	"github.com/gompi/gompi/pmi/client"
)

// Wildcards for receives and probes.
const (
	AnySource = -2
	AnyTag    = -1
	// ProcNull as a destination or source makes the operation complete
	// at once: nothing is sent, and a receive's Status has Source ProcNull,
	// Tag AnyTag and Count 0 (MPI_PROC_NULL: shifts off a grid's edge).
	ProcNull = -3
)

// Errors, usable with errors.Is.
var (
	// ErrTruncate: the matched message is longer than the receive buffer.
	// The buffer holds the message's first bytes.
	ErrTruncate = errors.New("mpi: message truncated")
	// ErrAborted: Abort was called in this process.
	ErrAborted = errors.New("mpi: job aborted")
	// ErrFinalized: the runtime was finalized.
	ErrFinalized = errors.New("mpi: finalized")
	// ErrRank, ErrTag, ErrArg: bad arguments. A received message that is
	// not a whole number of the receive buffer's elements (6 bytes into
	// an []int32: the sender sent another type) is ErrArg naming its
	// source and tag; its bytes are delivered, and Status.Count is
	// Undefined (MPI_Get_count's MPI_UNDEFINED).
	ErrRank = errors.New("mpi: invalid rank")
	ErrTag  = errors.New("mpi: invalid tag")
	ErrArg  = errors.New("mpi: invalid argument")
	// ErrPeerFinalized is the cause inside a PeerError when the peer closed
	// its connection in an orderly way (it called Finalize).
	ErrPeerFinalized = errors.New("peer finalized")
)

// PeerError reports that an operation involves a peer that failed (its
// connection was lost, could not be made, or the peer finalized). Every
// pending and future operation involving that peer returns it.
type PeerError struct {
	Rank int // world rank of the peer
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("mpi: peer rank %d: %v", e.Rank, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// Bootstrap is what the runtime needs from a process manager. The PMI-1
// client (*client.Client) satisfies it; tests use an in-memory one.
type Bootstrap interface {
	Rank() int
	Size() int
	Put(key, value string) error
	Fence(ctx context.Context) error
	Get(ctx context.Context, key string) (string, error)
	Abort(code int, msg string) error
	Finalize() error
}

// Codec encodes values for SendValue/RecvValue.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// Config tunes the runtime. Zero fields take the documented defaults.
type Config struct {
	// Bootstrap connects to the process manager. Default: client.New (PMI-1,
	// from the environment; singleton when there is none).
	Bootstrap Bootstrap
	// Host is the address peers dial. Default: $GOMPI_HOST, else the
	// first non-loopback address of this machine, else 127.0.0.1.
	Host string
	// Secret authenticates connections. Default: $GOMPI_JOB_SECRET (hex or
	// raw), else rank 0 generates one and shares it through the KVS.
	Secret []byte
	// EagerLimit: messages up to this many bytes are sent eagerly, longer
	// ones by rendezvous. Default 64 KiB.
	EagerLimit int
	// Codec for SendValue/RecvValue. Default: encoding/gob.
	Codec Codec
	// ConnectTimeout bounds making one connection (address lookup, dial,
	// handshake). Default 30 s.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds an incoming connection's handshake, so a
	// silent stranger is dropped. Default 10 s.
	HandshakeTimeout time.Duration
	// Linger is how long Finalize waits for peers to close their side.
	// Default 2 s.
	Linger time.Duration
	// NoSharedMemory keeps same-host peers on TCP. Also set by
	// GOMPI_SHM=0.
	NoSharedMemory bool
	// NoCMA makes same-host rendezvous stream through the shared-memory
	// ring instead of reading the sender's memory with process_vm_readv.
	// Also set by GOMPI_CMA=0.
	NoCMA bool
	// ShmDir holds the shared-memory rendezvous files. Default
	// $GOMPI_SHM_DIR, else /dev/shm (internal/shm.DefaultDir).
	ShmDir string
	// ShmEagerLimit: over a shared-memory link with cross-memory attach
	// (process_vm_readv), messages up to this many bytes are copied
	// through the ring, longer ones are read by the receiver straight from
	// the sender's buffer (one copy instead of two). At most EagerLimit;
	// without CMA, EagerLimit applies. Default $GOMPI_SHM_EAGER, else
	// EagerLimit (measured: at 32-64 KiB the two cache-hot copies through
	// the ring beat one process_vm_readv; see docs/transport.md).
	ShmEagerLimit int
	// CMASplit: a same-host rendezvous of at least this many bytes is
	// copied by both ranks at once, the receiver reading the first half
	// and the sender writing the second (process_vm_writev), so two cores
	// copy instead of one. Default $GOMPI_CMA_SPLIT, else 256 KiB;
	// negative turns it off.
	CMASplit int
	// ShmRingSize is the bytes of each direction's ring (a power of two).
	// Default 1 MiB.
	ShmRingSize int
	// ShmSpin is how long a shared-memory receiver polls its ring before
	// it sleeps on a futex (and gives up its core). Default
	// $GOMPI_SHM_SPIN (a Go duration, e.g. "100us"); else 1 ms when the
	// process manager says this host runs no more ranks than it has CPUs
	// ($MPI_LOCALNRANKS, set by gompi-proxy and Hydra), so a waiting rank
	// stays on its core like MPICH's polling (a sleeping one needs a
	// wake-up that costs tens of µs on a busy machine); else 10 µs, so
	// oversubscribed ranks give their cores to each other.
	ShmSpin time.Duration
	// KeepGOMAXPROCS leaves the Go scheduler's parallelism alone. By
	// default, when the process manager says this host runs several ranks
	// ($MPI_LOCALNRANKS) and $GOMAXPROCS is not set, Init lowers
	// GOMAXPROCS to this rank's share of the CPUs it may use (at least 1),
	// as an MPI rank bound to its cores would have: otherwise each of N
	// ranks runs N Ps, whose idle threads and GC workers wake up on the
	// cores the other ranks spin on (an 8-byte hop measured 0.18 µs
	// steadily with the share, 0.21-0.43 µs without, 2 ranks on 2 CPUs).
	KeepGOMAXPROCS bool

	// testHost, when set, replaces this process's host identity, so that
	// tests can put ranks of one process on pretend hosts: they use shared
	// memory and node-aware collectives only with ranks of the same
	// testHost.
	testHost string
}

func (c *Config) defaults() {
	if c.EagerLimit <= 0 {
		c.EagerLimit = 64 << 10
	}
	if c.Codec == nil {
		c.Codec = gobCodec{}
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 30 * time.Second
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.Linger <= 0 {
		c.Linger = 2 * time.Second
	}
	if c.Host == "" {
		c.Host = os.Getenv("GOMPI_HOST")
	}
	if c.Host == "" {
		c.Host = hostAddr()
	}
	if os.Getenv("GOMPI_SHM") == "0" {
		c.NoSharedMemory = true
	}
	if os.Getenv("GOMPI_CMA") == "0" {
		c.NoCMA = true
	}
	if c.ShmEagerLimit <= 0 {
		if n, err := strconv.Atoi(os.Getenv("GOMPI_SHM_EAGER")); err == nil && n > 0 {
			c.ShmEagerLimit = n
		} else {
			c.ShmEagerLimit = c.EagerLimit
		}
	}
	c.ShmEagerLimit = min(c.ShmEagerLimit, c.EagerLimit)
	if c.CMASplit == 0 {
		if n, err := strconv.Atoi(os.Getenv("GOMPI_CMA_SPLIT")); err == nil && n != 0 {
			c.CMASplit = n
		} else {
			c.CMASplit = 256 << 10
		}
	}
	if c.ShmDir == "" {
		c.ShmDir = os.Getenv("GOMPI_SHM_DIR")
	}
	if c.ShmDir == "" {
		c.ShmDir = shm.DefaultDir()
	}
	if c.ShmSpin == 0 {
		if d, err := time.ParseDuration(os.Getenv("GOMPI_SHM_SPIN")); err == nil {
			c.ShmSpin = d
		} else if n, err := strconv.Atoi(os.Getenv("MPI_LOCALNRANKS")); err == nil && n > 0 && n <= runtime.NumCPU() {
			c.ShmSpin = time.Millisecond
		} else {
			c.ShmSpin = 10 * time.Microsecond
		}
	}
}

// shareCPUs lowers GOMAXPROCS to this rank's share of the CPUs (see
// Config.KeepGOMAXPROCS). An explicit $GOMAXPROCS wins.
func shareCPUs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	n, err := strconv.Atoi(os.Getenv("MPI_LOCALNRANKS"))
	if err != nil || n < 2 {
		return
	}
	if share := max(1, runtime.NumCPU()/n); share < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(share)
	}
}

func hostAddr() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// KVS keys the runtime uses.
const (
	kvsAddr   = "gompi-rt-addr-"
	kvsSecret = "gompi-rt-secret"
)

// proc is one rank's runtime instance.
type proc struct {
	cfg        Config
	boot       Bootstrap
	rank, size int
	secret     []byte
	ln         net.Listener
	eng        *engine
	peers      []*peer
	reqID      atomic.Uint64
	ctxMu      sync.Mutex
	nextCtx    uint32
	freeCtx    []uint32        // ids released by Free, ascending (comm_free.go)
	told       map[uint32]bool // families this process sent notices for (failnotice.go), under ctxMu
	world      *Comm

	// closing is closed once, by Finalize or Abort; closeErr (first wins)
	// is what operations return afterwards.
	closeOnce sync.Once
	closing   chan struct{}
	shutDown  atomic.Bool // set with closing, for errClosed
	closeErr  error
	ctx       context.Context // cancelled with closing
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	addrMu sync.Mutex
	addrs  map[int]string
	hosts  map[int]string // peers' host identities

	// Shared memory: shmJob names this job's rendezvous files ("" when
	// shared memory is off), hostID is this process's host identity.
	shmJob string
	shmDir string
	hostID string
	shm    shmStats
	// nodeID is the host identity the node-aware collectives group ranks
	// by (coll_node.go): hostIdentity() even without shared memory, since
	// same-host TCP still spares the network.
	nodeID string
}

// Init starts the runtime with the default Config and returns the world
// communicator.
func Init(ctx context.Context) (*Comm, error) {
	c, err := InitConfig(ctx, Config{})
	if err == nil {
		lastWorld.Store(c)
	}
	return c, err
}

// lastWorld is the world of the last Init, for the package-level Finalize.
var lastWorld atomic.Pointer[Comm]

// Finalize finalizes the runtime started by the last Init (see
// Comm.Finalize). Without one it returns ErrArg.
func Finalize() error {
	c := lastWorld.Load()
	if c == nil {
		return fmt.Errorf("%w: Finalize without Init", ErrArg)
	}
	return c.Finalize()
}

// InitConfig starts the runtime with cfg.
func InitConfig(ctx context.Context, cfg Config) (*Comm, error) {
	cfg.defaults()
	if !cfg.KeepGOMAXPROCS {
		shareCPUs()
	}
	if cfg.Bootstrap == nil {
		c, err := client.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("mpi: init: %w", err)
		}
		cfg.Bootstrap = c
	}
	p := &proc{cfg: cfg, boot: cfg.Bootstrap, rank: cfg.Bootstrap.Rank(), size: cfg.Bootstrap.Size(),
		closing: make(chan struct{}), addrs: map[int]string{}, hosts: map[int]string{}, nextCtx: 1}
	if p.size < 1 || p.rank < 0 || p.rank >= p.size {
		return nil, fmt.Errorf("mpi: init: bad rank %d of size %d", p.rank, p.size)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.eng = newEngine()
	p.eng.notice = p.onNotice
	p.peers = make([]*peer, p.size)
	for i := range p.peers {
		p.peers[i] = newPeer(i)
	}
	p.secret = cfg.Secret
	if p.secret == nil {
		if s := os.Getenv("GOMPI_JOB_SECRET"); s != "" {
			if b, err := hex.DecodeString(s); err == nil {
				p.secret = b
			} else {
				p.secret = []byte(s)
			}
		}
	}
	if p.size > 1 {
		// Listen on all interfaces; every connection is authenticated. A
		// firewall's port range (MPICH's variables, e.g.
		// MPIEXEC_PORT_RANGE=50000:50100) is honoured.
		ports, err := portrange.FromEnv(os.Getenv)
		if err != nil {
			p.cancel()
			return nil, fmt.Errorf("mpi: init: %w", err)
		}
		ln, err := ports.Listen("")
		if err != nil {
			p.cancel()
			return nil, fmt.Errorf("mpi: init: listen: %w", err)
		}
		p.ln = ln
		port := ln.Addr().(*net.TCPAddr).Port
		if err := p.boot.Put(kvsAddr+strconv.Itoa(p.rank), net.JoinHostPort(cfg.Host, strconv.Itoa(port))); err != nil {
			ln.Close()
			p.cancel()
			return nil, fmt.Errorf("mpi: init: %w", err)
		}
		p.nodeID = cfg.testHost
		if p.nodeID == "" {
			p.nodeID = hostIdentity()
		}
		if !cfg.NoSharedMemory {
			p.hostID = p.nodeID
		}
		host := p.hostID
		if host == "" {
			host = noShmHost
		}
		if err := p.boot.Put(kvsHost+strconv.Itoa(p.rank), host); err != nil {
			ln.Close()
			p.cancel()
			return nil, fmt.Errorf("mpi: init: %w", err)
		}
		if p.secret == nil && p.rank == 0 {
			b := make([]byte, 32)
			rand.Read(b)
			p.secret = b
			if err := p.boot.Put(kvsSecret, hex.EncodeToString(b)); err != nil {
				ln.Close()
				p.cancel()
				return nil, fmt.Errorf("mpi: init: %w", err)
			}
		}
		if err := p.boot.Fence(ctx); err != nil {
			ln.Close()
			p.cancel()
			return nil, fmt.Errorf("mpi: init: fence: %w", err)
		}
		if p.secret == nil {
			s, err := p.boot.Get(ctx, kvsSecret)
			if err == nil {
				p.secret, err = hex.DecodeString(s)
			}
			if err != nil {
				ln.Close()
				p.cancel()
				return nil, fmt.Errorf("mpi: init: job secret: %w", err)
			}
		}
		if p.hostID != "" {
			p.shmJob, p.shmDir = shmJobID(p.boot, p.secret), cfg.ShmDir
			if !cfg.NoCMA {
				allowPeerRead()
			}
		}
		p.wg.Add(1)
		go p.acceptLoop()
	}
	group := make([]int, p.size)
	for i := range group {
		group[i] = i
	}
	p.world = &Comm{p: p, ctx: 0, rank: p.rank, group: group}
	return p.world, nil
}

// errClosed returns why the process was shut down (what operations return
// after Finalize or Abort), or nil. Every send and receive asks, so it
// reads one atomic flag (a non-blocking receive from closing cost a few ns
// of an 8-byte hop).
func (p *proc) errClosed() error {
	if !p.shutDown.Load() {
		return nil
	}
	return p.closeErr // set before shutDown
}

func (p *proc) shut(err error) bool {
	first := false
	p.closeOnce.Do(func() {
		p.closeErr = err
		p.shutDown.Store(true)
		close(p.closing)
		p.cancel()
		first = true
	})
	return first
}

// Finalize ends this rank's participation: it says goodbye on every
// connection, waits briefly for peers to do the same, stops every
// goroutine and tells the process manager. Outstanding operations return
// ErrFinalized.
func (c *Comm) Finalize() error {
	p := c.p
	if !p.shut(ErrFinalized) {
		return p.closeErr
	}
	if p.ln != nil {
		p.ln.Close()
	}
	// Orderly goodbye: BYE after every queued frame, then wait for the peer
	// to close its side (bounded by Linger).
	deadline := time.Now().Add(p.cfg.Linger)
	for _, pe := range p.peers {
		if l := pe.current(); l != nil {
			l.shutdown(deadline)
		}
	}
	for _, pe := range p.peers {
		pe.fail(ErrFinalized)
	}
	p.eng.failAll(ErrFinalized)
	p.wg.Wait()
	p.sweepShm()
	return p.boot.Finalize()
}

// Abort ends the whole job with code through the process manager. Every
// local operation then returns ErrAborted. Under a singleton (no process
// manager) it only stops the runtime; the library never exits the process.
func (c *Comm) Abort(code int) error {
	p := c.p
	err := p.boot.Abort(code, fmt.Sprintf("rank %d called Abort(%d)", p.rank, code))
	if p.shut(ErrAborted) {
		if p.ln != nil {
			p.ln.Close()
		}
		for _, pe := range p.peers {
			if l := pe.current(); l != nil {
				l.close()
			}
			pe.fail(ErrAborted)
		}
		p.eng.failAll(ErrAborted)
	}
	return err
}

// ProcessorName is this host's name.
func (c *Comm) ProcessorName() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}

// addrOf returns a peer's published address (cached).
func (p *proc) addrOf(ctx context.Context, rank int) (string, error) {
	return p.lookup(ctx, p.addrs, kvsAddr, rank)
}

// lookup returns rank's value of a published key (prefix + rank) from
// cache, or fetches it through the bootstrap once and keeps it.
func (p *proc) lookup(ctx context.Context, cache map[int]string, prefix string, rank int) (string, error) {
	p.addrMu.Lock()
	defer p.addrMu.Unlock()
	if v, ok := cache[rank]; ok {
		return v, nil
	}
	v, err := p.boot.Get(ctx, prefix+strconv.Itoa(rank))
	if err != nil {
		return "", err
	}
	cache[rank] = v
	return v, nil
}
