package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// KV is one key-value pair.
type KV struct{ Key, Value string }

// Uplink is how a node's PMI server reaches the launcher. The proxy
// implements it over the control protocol; tests use a Job directly.
type Uplink interface {
	// Fence is called once per barrier round, after every local rank has
	// entered, with the pairs put locally since the last round. It returns
	// when every node of the job has fenced, with all pairs of the round as
	// a map the node treats as read-only (nodes in one process share it).
	Fence(ctx context.Context, puts []KV) (map[string]string, error)
	// Abort ends the job with code on behalf of rank.
	Abort(rank, code int, msg string) error
	// Publish, Unpublish and Lookup are the job's name service.
	Publish(ctx context.Context, service, port string) error
	Unpublish(ctx context.Context, service string) error
	Lookup(ctx context.Context, service string) (string, error)
}

// Name service errors, usable with errors.Is.
var (
	ErrExists   = errors.New("service already published")
	ErrNotFound = errors.New("not found")
	// ErrNoFinalize: the client closed its connection after init but
	// without finalize (a rank that died or returned early).
	ErrNoFinalize = errors.New("pmi: connection closed without finalize")
	// ErrAborted: the client called abort; the job is ending.
	ErrAborted = errors.New("pmi: client aborted")
	// ErrRefused: a PMI_PORT connection named a rank that another
	// connection had already claimed (or none at all before other
	// requests). It is not one of the job's ranks talking, so the job goes
	// on; the connection is closed.
	ErrRefused = errors.New("pmi: connection refused")
	// ErrBarrierBroken: a local rank ended (Node.Left) without entering
	// the barrier round others are in, so the round can never complete.
	ErrBarrierBroken = errors.New("pmi: barrier can never complete")
)

// RankError is an error Serve returns for one rank's connection. Rank is
// -1 for a PMI_PORT connection that had not named its rank yet.
type RankError struct {
	Rank int
	Err  error
}

func (e *RankError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }
func (e *RankError) Unwrap() error { return e.Err }

// NodeConfig describes the ranks a Node serves.
type NodeConfig struct {
	KVSName      string
	Size         int           // job size
	Ranks        []int         // global ranks served by this node
	AppNum       func(int) int // MPMD segment of a rank; nil means 0
	UniverseSize int           // -1: unknown (MPICH then leaves MPI_UNIVERSE_SIZE unset)
	// ProcessMapping answers PMI_process_mapping; "" means not found, and
	// MPICH falls back to exchanging host names.
	ProcessMapping string
	Uplink         Uplink
	// Trace, when set, receives every exchange as "[pmi] rank R C: ..." and
	// "S: ..." lines.
	Trace io.Writer
}

// Node serves PMI-1 and PMI-2 to the local ranks of one host and aggregates their
// barriers, so the launcher sees one fence message per node per round.
type Node struct {
	cfg     NodeConfig
	traceMu sync.Mutex

	mu      sync.Mutex
	kvs     map[string]string   // local puts
	rounds  []map[string]string // completed fences, oldest first; shared, read-only
	pending []KV
	entered map[int]bool // ranks in the current barrier round
	waiters []chan error
	isLocal map[int]bool
	claimed map[int]bool // ranks a connection has named itself (PMI_PORT) or was opened for
	left    map[int]bool // ranks whose process has ended (Left)
	spoke   map[int]bool // ranks that sent init (or fullinit)
	done    map[int]bool // ranks that sent finalize
	dead    []int        // ranks of the job that failed (MarkDead), sorted

	nodeAttrs   map[string]string // PMI-2 info-putnodeattr
	attrChanged chan struct{}     // closed and replaced on every put
}

// NewNode validates cfg and returns a Node.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.KVSName == "" || len(cfg.KVSName) > MaxKVSName || strings.ContainsAny(cfg.KVSName, " \t\n=") {
		return nil, fmt.Errorf("pmi: bad kvsname %q", cfg.KVSName)
	}
	if cfg.Size < 1 || len(cfg.Ranks) == 0 {
		return nil, errors.New("pmi: node needs a job size and at least one local rank")
	}
	if cfg.Uplink == nil {
		return nil, errors.New("pmi: node needs an uplink")
	}
	if cfg.AppNum == nil {
		cfg.AppNum = func(int) int { return 0 }
	}
	n := &Node{cfg: cfg, kvs: map[string]string{}, isLocal: map[int]bool{},
		entered: map[int]bool{}, claimed: map[int]bool{}, left: map[int]bool{},
		spoke: map[int]bool{}, done: map[int]bool{},
		nodeAttrs: map[string]string{}, attrChanged: make(chan struct{})}
	for _, r := range cfg.Ranks {
		if r < 0 || r >= cfg.Size {
			return nil, fmt.Errorf("pmi: local rank %d outside job of size %d", r, cfg.Size)
		}
		n.isLocal[r] = true
	}
	return n, nil
}

type session struct {
	n      *Node
	rank   int
	w      *bufio.Writer
	inited bool
}

// Serve speaks PMI-1 on one rank's connection. rank < 0 means PMI_PORT mode:
// the client names itself with initack first. Serve returns nil after
// finalize and the client's close, ErrNoFinalize if the client went away
// after init without finalize, or an error wrapping ErrProtocol naming the
// rank and quoting the offending line.
func (n *Node) Serve(ctx context.Context, rank int, conn io.ReadWriteCloser) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if rank >= 0 {
		if err := n.claim(rank); err != nil {
			return err
		}
	}
	s := &session{n: n, rank: rank, w: bufio.NewWriter(conn)}
	err := s.serve(ctx, conn)
	if err != nil && s.rank < 0 && ctx.Err() == nil && !errors.Is(err, ErrRefused) {
		// A PMI_PORT connection that never named a rank is no rank of the
		// job (any local process can connect): refuse it, the job goes on.
		var re *RankError
		if errors.As(err, &re) {
			err = re.Err
		}
		return fmt.Errorf("%w: it named no rank: %v", ErrRefused, err)
	}
	return err
}

func (s *session) serve(ctx context.Context, conn io.Reader) error {
	n := s.n
	r := bufio.NewReaderSize(conn, MaxRequest)
	finalized := false
	for {
		line, err := readLine(r)
		if err != nil {
			return s.readError(ctx, err, s.inited && !finalized)
		}
		n.trace(s.rank, "C", line)
		c, err := ParseLine(line)
		if err == nil && c.Name == "spawn" {
			err = s.skipSpawn(r, c)
		}
		if err != nil {
			s.reply(formatReply("error", "rc", "-1", "msg", "malformed_command"))
			return &RankError{s.rank, err}
		}
		if c.Name == "init" && c.Args["pmi_version"] == "2" && s.rank >= -1 {
			// PMI-2 clients bootstrap with a PMI-1 init line, then switch
			// to length-prefixed frames.
			s.inited = true
			n.mark(n.spoke, s.rank)
			if err := s.reply(formatReply("response_to_init", "pmi_version", "2", "pmi_subversion", "0", "rc", "0")); err != nil {
				return err
			}
			return s.serve2(ctx, r)
		}
		done, err := s.handle(ctx, c)
		if err != nil {
			return &RankError{s.rank, err}
		}
		if done {
			finalized = true
		}
	}
}

// readError classifies the error that ended a client's requests: a
// cancelled job, a client gone before finalize, or a broken connection.
func (s *session) readError(ctx context.Context, err error, unfinished bool) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, io.EOF) && unfinished:
		return &RankError{s.rank, ErrNoFinalize}
	case errors.Is(err, io.EOF):
		return nil
	}
	return &RankError{s.rank, err}
}

// readLine reads one line of at most MaxRequest bytes.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, MaxRequest)
	}
	if err != nil {
		if len(line) > 0 && errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%w: unterminated line %q", ErrProtocol, line)
		}
		return "", err
	}
	return string(line), nil
}

func (n *Node) trace(rank int, dir, line string) {
	if n.cfg.Trace == nil {
		return
	}
	n.traceMu.Lock()
	fmt.Fprintf(n.cfg.Trace, "[pmi] rank %d %s: %s\n", rank, dir, strings.TrimRight(line, "\n"))
	n.traceMu.Unlock()
}

func (s *session) reply(line string) error {
	s.n.trace(s.rank, "S", line)
	if _, err := s.w.WriteString(line); err != nil {
		return err
	}
	return s.w.Flush()
}

// skipSpawn consumes a multi-line spawn block up to endcmd.
func (s *session) skipSpawn(r *bufio.Reader, c Command) error {
	for {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		s.n.trace(s.rank, "C", line)
		if strings.TrimSpace(line) == "endcmd" {
			return nil
		}
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		c.Args[k] = v
	}
}

func (s *session) handle(ctx context.Context, c Command) (finalized bool, err error) {
	n := s.n
	cfg := &n.cfg
	if !s.inited && c.Name != "init" && c.Name != "initack" {
		s.reply(formatReply(c.Name+"_result", "rc", "-1", "msg", "init_first"))
		return false, fmt.Errorf("%w: %q before init", ErrProtocol, c.Line)
	}
	switch c.Name {
	case "initack":
		id, err := strconv.Atoi(c.Args["pmiid"])
		if err != nil || !n.isLocal[id] {
			return false, fmt.Errorf("%w: initack with unknown pmiid in %q", ErrProtocol, c.Line)
		}
		if s.rank >= 0 {
			return false, fmt.Errorf("%w: second initack in %q", ErrProtocol, c.Line)
		}
		if err := n.claim(id); err != nil {
			s.reply(formatReply("initack", "rc", "-1", "msg", "pmiid_already_claimed"))
			return false, err
		}
		s.rank = id
		return false, s.reply(formatReply("initack") + formatReply("set", "size", strconv.Itoa(cfg.Size)) +
			formatReply("set", "rank", strconv.Itoa(id)) + formatReply("set", "debug", "0"))
	case "init":
		if s.rank < 0 {
			return false, fmt.Errorf("%w: init before initack in PMI_PORT mode", ErrProtocol)
		}
		v, sub := c.Args["pmi_version"], c.Args["pmi_subversion"]
		if v != "1" {
			s.reply(formatReply("response_to_init", "pmi_version", "1", "pmi_subversion", "1", "rc", "-1"))
			return false, fmt.Errorf("%w: PMI version %s.%s requested; gompi speaks 1.1 and 2.0", ErrProtocol, v, sub)
		}
		s.inited = true
		n.mark(n.spoke, s.rank)
		return false, s.reply(formatReply("response_to_init", "pmi_version", "1", "pmi_subversion", "1", "rc", "0"))
	case "get_maxes":
		return false, s.reply(formatReply("maxes", "kvsname_max", strconv.Itoa(MaxKVSName),
			"keylen_max", strconv.Itoa(MaxKey), "vallen_max", strconv.Itoa(MaxValue)))
	case "get_appnum":
		return false, s.reply(formatReply("appnum", "appnum", strconv.Itoa(cfg.AppNum(s.rank))))
	case "get_my_kvsname":
		return false, s.reply(formatReply("my_kvsname", "kvsname", cfg.KVSName))
	case "get_universe_size":
		return false, s.reply(formatReply("universe_size", "size", strconv.Itoa(cfg.UniverseSize)))
	case "put":
		key, val := c.Args["key"], c.Args["value"]
		if err := s.checkKVS(c); err != nil {
			return false, err
		}
		if err := checkToken("key "+strconv.Quote(key), key, MaxKey); err != nil || key == "" {
			s.reply(formatReply("put_result", "rc", "-1", "msg", "bad_key"))
			return false, fmt.Errorf("%w: bad key in %q", ErrProtocol, c.Line)
		}
		if err := checkToken("value of key "+key, val, MaxValue); err != nil {
			s.reply(formatReply("put_result", "rc", "-1", "msg", "value_too_long"))
			return false, err
		}
		n.mu.Lock()
		n.kvs[key] = val
		n.pending = append(n.pending, KV{key, val})
		n.mu.Unlock()
		return false, s.reply(formatReply("put_result", "rc", "0", "msg", "success"))
	case "get":
		key := c.Args["key"]
		val, ok := n.get(key)
		if !ok {
			return false, s.reply(formatReply("get_result", "rc", "-1", "msg", "key_"+key+"_not_found", "value", "unknown"))
		}
		return false, s.reply(formatReply("get_result", "rc", "0", "msg", "success", "value", val))
	case "barrier_in":
		if err := n.barrier(ctx, s.rank); err != nil {
			return false, err
		}
		return false, s.reply(formatReply("barrier_out"))
	case "finalize":
		n.mark(n.done, s.rank)
		return true, s.reply(formatReply("finalize_ack"))
	case "abort":
		code, err := strconv.Atoi(c.Args["exitcode"])
		if err != nil {
			code = 1
		}
		cfg.Uplink.Abort(s.rank, code, c.Args["msg"])
		// No reply: the client waits to be killed, as under Hydra.
		<-ctx.Done()
		return false, ErrAborted
	case "publish_name":
		err := cfg.Uplink.Publish(ctx, c.Args["service"], c.Args["port"])
		if err != nil {
			return false, s.reply(formatReply("publish_result", "info", "fail", "rc", "1", "msg", "key_already_present"))
		}
		return false, s.reply(formatReply("publish_result", "info", "ok", "rc", "0", "msg", "success"))
	case "unpublish_name":
		if err := cfg.Uplink.Unpublish(ctx, c.Args["service"]); err != nil {
			return false, s.reply(formatReply("unpublish_result", "info", "fail", "rc", "1", "msg", "service_not_found"))
		}
		return false, s.reply(formatReply("unpublish_result", "info", "ok", "rc", "0", "msg", "success"))
	case "lookup_name":
		port, err := cfg.Uplink.Lookup(ctx, c.Args["service"])
		if err != nil {
			return false, s.reply(formatReply("lookup_result", "rc", "1", "msg", "service_not_found"))
		}
		return false, s.reply(formatReply("lookup_result", "port", port, "info", "ok", "rc", "0", "msg", "success"))
	case "spawn":
		// Reply once the last block of a multi-command spawn has arrived.
		if c.Args["spawnssofar"] != c.Args["totspawns"] {
			return false, nil
		}
		return false, s.reply(formatReply("spawn_result", "rc", "-1", "msg", "spawn_not_supported_by_gompi"))
	}
	s.reply(formatReply(c.Name+"_result", "rc", "-1", "msg", "unknown_command"))
	return false, fmt.Errorf("%w: unknown command %q", ErrProtocol, c.Line)
}

func (s *session) checkKVS(c Command) error {
	if k := c.Args["kvsname"]; k != s.n.cfg.KVSName {
		s.reply(formatReply(c.Name+"_result", "rc", "-1", "msg", "unknown_kvsname"))
		return fmt.Errorf("%w: kvsname %q is not this job's (%s) in %q", ErrProtocol, k, s.n.cfg.KVSName, c.Line)
	}
	return nil
}

func (n *Node) get(key string) (string, bool) {
	switch key {
	case "PMI_process_mapping":
		return n.cfg.ProcessMapping, n.cfg.ProcessMapping != ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if key == "PMI_dead_processes" {
		return formatRanks(n.dead), true
	}
	if v, ok := n.kvs[key]; ok {
		return v, ok
	}
	for i := len(n.rounds) - 1; i >= 0; i-- {
		if v, ok := n.rounds[i][key]; ok {
			return v, ok
		}
	}
	return "", false
}

// maxRounds bounds the lookup chain: past it, rounds are merged into one.
const maxRounds = 16

// claim records that a connection speaks for rank: each rank is claimed
// once, so in PMI_PORT mode a second connection naming a rank already
// served (another local process of the user's guessing PMI_ID) is refused
// instead of speaking for it.
func (n *Node) claim(rank int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.isLocal[rank] {
		return fmt.Errorf("%w: rank %d is not served here", ErrRefused, rank)
	}
	if n.claimed[rank] {
		return fmt.Errorf("%w: rank %d is already claimed by another connection", ErrRefused, rank)
	}
	n.claimed[rank] = true
	return nil
}

// barrier blocks until every local rank has entered and the job-wide fence
// through the uplink has completed. The last rank in does the uplink call.
// Entries are counted by distinct rank: a rank entering twice in one round
// is a protocol error, not a second rank.
func (n *Node) barrier(ctx context.Context, rank int) error {
	n.mu.Lock()
	if !n.isLocal[rank] {
		n.mu.Unlock()
		return fmt.Errorf("%w: barrier from a connection that named no rank", ErrRefused)
	}
	if n.entered[rank] {
		n.mu.Unlock()
		return fmt.Errorf("%w: rank %d entered the barrier twice", ErrProtocol, rank)
	}
	n.entered[rank] = true
	if err := n.brokenLocked(); err != nil {
		n.failWaitersLocked(err)
		n.mu.Unlock()
		return err
	}
	if len(n.entered) < len(n.cfg.Ranks) {
		ch := make(chan error, 1)
		n.waiters = append(n.waiters, ch)
		n.mu.Unlock()
		select {
		case err := <-ch:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	puts, waiters := n.pending, n.waiters
	n.pending, n.waiters = nil, nil
	clear(n.entered)
	n.mu.Unlock()

	all, err := n.cfg.Uplink.Fence(ctx, puts)
	if err == nil && len(all) > 0 {
		n.mu.Lock()
		n.rounds = append(n.rounds, all)
		if len(n.rounds) > maxRounds {
			merged := make(map[string]string)
			for _, r := range n.rounds {
				for k, v := range r {
					merged[k] = v
				}
			}
			n.rounds = []map[string]string{merged}
		}
		n.mu.Unlock()
	}
	for _, w := range waiters {
		w <- err
	}
	return err
}

// MarkDead records that a rank of the job (on any host) failed and the job
// goes on without it (gompiexec -disable-auto-cleanup): the special key
// PMI_dead_processes lists such ranks, as Hydra's server does, for MPICH's
// fault-tolerance paths.
func (n *Node) MarkDead(rank int) {
	if rank < 0 || rank >= n.cfg.Size {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if i, found := slices.BinarySearch(n.dead, rank); !found {
		n.dead = slices.Insert(n.dead, i, rank)
	}
}

// formatRanks writes sorted ranks as MPICH parses PMI_dead_processes:
// ranks and ranges, comma-separated ("1,3-5").
func formatRanks(rs []int) string {
	var b strings.Builder
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(rs[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(rs[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Left records that a local rank's process has ended. A barrier round it
// has not entered can then never complete (Hydra's classic hang: a rank
// that exits without MPI, or after MPI_Finalize, while the others fence):
// the round's waiters, and any rank entering it later, get
// ErrBarrierBroken naming it instead of waiting forever. Ranks that never
// fence after it left are unaffected.
func (n *Node) Left(rank int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.isLocal[rank] {
		return
	}
	n.left[rank] = true
	if len(n.entered) > 0 {
		if err := n.brokenLocked(); err != nil {
			n.failWaitersLocked(err)
		}
	}
}

// brokenLocked names a rank that has left without entering the current
// round, if any (the lowest, so the message is stable).
func (n *Node) brokenLocked() error {
	gone := -1
	for r := range n.left {
		if !n.entered[r] && (gone < 0 || r < gone) {
			gone = r
		}
	}
	if gone < 0 {
		return nil
	}
	return fmt.Errorf("%w: rank %d ended (exited, or finished PMI) without entering it", ErrBarrierBroken, gone)
}

// failWaitersLocked ends the current round with err for every waiter.
func (n *Node) failWaitersLocked(err error) {
	for _, w := range n.waiters {
		w <- err
	}
	n.waiters = nil
}

// mark records rank (a claimed one) in set.
func (n *Node) mark(set map[int]bool, rank int) {
	if rank < 0 {
		return
	}
	n.mu.Lock()
	set[rank] = true
	n.mu.Unlock()
}

// Unfinished reports whether rank spoke PMI but has not sent finalize.
// It is exact once the rank's process has ended: both are recorded before
// the reply that the client waits for, unlike the end of its connection,
// which a reaper can see after the process's exit.
func (n *Node) Unfinished(rank int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.spoke[rank] && !n.done[rank]
}
