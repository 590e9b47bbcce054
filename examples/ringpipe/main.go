// Command ringpipe streams every rank's records around a ring of ranks.
//
// Each rank reads length-prefixed records from its own file
// (<dir>/rank-<R>.dat) with double buffering: an asynchronous IreadAt
// fills one chunk buffer while the other's records are being processed. Every record, its own
// and those arriving from the left neighbour, is processed (its CRC-32C is
// computed and checked against the one carried in the packet) and
// forwarded to the right neighbour with Isend until it has visited every
// rank; a hop count in the packet header says how many ranks it has
// visited. When a rank's own records are exhausted it sends an empty end
// packet, which travels the ring behind its records; a rank is done once it
// has seen the end packets of all ranks. Totals are then checked
// collectively (every rank must have seen every record, with the same
// checksum sum) and rank 0 prints a summary.
//
// Generate input and run, e.g.:
//
//	gompiexec -n 4 ./ringpipe -dir /tmp/rp -gen 1000
//
// -gen N makes every rank write N random records to its file first.
// Input format: records of a little-endian u32 length and that many bytes.
//
// Input is read with MPI-IO's IreadAt (runtime/mpiio) and double
// buffering: while the records of one chunk are processed and sent, the
// next chunk is being read into the other buffer, and the main loop waits
// for the read's request and the ring's receive in one select.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

var (
	dir      = flag.String("dir", "", "directory of the per-rank input files (required)")
	gen      = flag.Int("gen", 0, "first write this many random records to each rank's file")
	maxRec   = flag.Int("maxrec", 8192, "largest record in bytes (for -gen and the receive buffers)")
	chunkSz  = flag.Int("chunk", 256<<10, "size of each of the two read buffers")
	inflight = flag.Int("inflight", 64, "most packets being sent at once")
	verbose  = flag.Bool("v", false, "print per-rank statistics")
)

const (
	tagPkt = 1
	hdrLen = 16 // origin u32, seq u32, hops u32, crc u32; end packets: seq = ^0
	endSeq = ^uint32(0)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func main() {
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "ringpipe: -dir is required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := mpi.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ringpipe:", err)
		os.Exit(1)
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "ringpipe: rank %d: %v\n", c.Rank(), err)
		c.Abort(1)
		os.Exit(1)
	}
	if err := c.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "ringpipe:", err)
		os.Exit(1)
	}
}

func fileOf(rank int) string { return filepath.Join(*dir, fmt.Sprintf("rank-%d.dat", rank)) }

// generate writes n random records (1..maxRec bytes) to this rank's file.
func generate(rank, n int) error {
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(fileOf(rank))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	rng := rand.New(rand.NewPCG(uint64(rank)+1, 0x5eed))
	rec := make([]byte, *maxRec)
	var l [4]byte
	for i := 0; i < n; i++ {
		k := 1 + rng.IntN(*maxRec)
		for j := range rec[:k] {
			rec[j] = byte(rng.Uint32())
		}
		binary.LittleEndian.PutUint32(l[:], uint32(k))
		w.Write(l[:])
		w.Write(rec[:k])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type stats struct {
	own, seen       int64 // records read here / processed here
	ownSum, seenSum uint64
	seenBytes       int64
	forwarded       int64 // packets passed on (records and end packets)
}

// ring holds the packet buffers and the sends in flight.
type ring struct {
	c      *mpi.Comm
	right  int
	free   [][]byte
	sends  []*mpi.Request
	bufs   [][]byte // buffer of each send
	limit  int
	maxPkt int
}

func (g *ring) buffer() []byte {
	if n := len(g.free); n > 0 {
		b := g.free[n-1]
		g.free = g.free[:n-1]
		return b
	}
	return make([]byte, g.maxPkt)
}

// send forwards pkt (a buffer from g.buffer) to the right; the buffer is
// recycled once the send completes.
func (g *ring) send(pkt []byte) error {
	for len(g.sends) >= g.limit {
		if err := g.reap(true); err != nil {
			return err
		}
	}
	g.sends = append(g.sends, mpi.Isend(g.c, pkt, g.right, tagPkt))
	g.bufs = append(g.bufs, pkt[:cap(pkt)])
	return g.reap(false)
}

// reap recycles completed sends (in order); block waits for the oldest.
func (g *ring) reap(block bool) error {
	k := 0
	for k < len(g.sends) {
		var err error
		if block && k == 0 {
			_, err = g.sends[0].Wait(context.Background())
		} else {
			var done bool
			if done, _, err = g.sends[k].Test(); !done {
				break
			}
		}
		if err != nil {
			return err
		}
		g.free = append(g.free, g.bufs[k])
		k++
	}
	g.sends = g.sends[:copy(g.sends, g.sends[k:])]
	g.bufs = g.bufs[:copy(g.bufs, g.bufs[k:])]
	return nil
}

func run(c *mpi.Comm) error {
	n, r := c.Size(), c.Rank()
	if *gen > 0 {
		if err := generate(r, *gen); err != nil {
			return err
		}
	}
	start := time.Now()
	in, err := openInput(c)
	if err != nil {
		return err
	}
	defer in.f.Close()
	in.next()

	g := &ring{c: c, right: (r + 1) % n, limit: max(*inflight, 1), maxPkt: hdrLen + *maxRec}
	left := (r - 1 + n) % n
	var st stats
	var seq uint32
	ends := 0
	process := func(payload []byte) uint32 {
		sum := crc32.Checksum(payload, castagnoli)
		st.seen++
		st.seenSum += uint64(sum)
		st.seenBytes += int64(len(payload))
		return sum
	}
	header := func(pkt []byte, origin int, seq, hops, crc uint32) {
		binary.LittleEndian.PutUint32(pkt[0:], uint32(origin))
		binary.LittleEndian.PutUint32(pkt[4:], seq)
		binary.LittleEndian.PutUint32(pkt[8:], hops)
		binary.LittleEndian.PutUint32(pkt[12:], crc)
	}
	var rbuf []byte
	var rreq *mpi.Request
	if n > 1 {
		rbuf = g.buffer()
		rreq = mpi.Irecv(c, rbuf, left, tagPkt)
	}
	var recvDone <-chan struct{}
	if rreq != nil {
		recvDone = rreq.Done()
	}
	for ends < n {
		select {
		case <-in.done:
			recs, err := in.take()
			if err != nil {
				return err
			}
			if recs == nil { // own records exhausted: end packet
				ends++
				if n > 1 {
					pkt := g.buffer()[:hdrLen]
					header(pkt, r, endSeq, 1, 0)
					if err := g.send(pkt); err != nil {
						return err
					}
				}
				continue
			}
			for _, payload := range recs {
				sum := process(payload)
				st.own++
				st.ownSum += uint64(sum)
				if n > 1 {
					pkt := g.buffer()[:hdrLen+len(payload)]
					header(pkt, r, seq, 1, sum)
					copy(pkt[hdrLen:], payload)
					if err := g.send(pkt); err != nil {
						return err
					}
				}
				seq++
			}
		case <-recvDone:
			rs, err := rreq.Wait(context.Background())
			if err != nil {
				return fmt.Errorf("receive from %d: %w", left, err)
			}
			pkt := rbuf[:rs.Count]
			if len(pkt) < hdrLen {
				return fmt.Errorf("short packet of %d bytes from %d", len(pkt), left)
			}
			origin := int(binary.LittleEndian.Uint32(pkt[0:]))
			pseq := binary.LittleEndian.Uint32(pkt[4:])
			hops := binary.LittleEndian.Uint32(pkt[8:]) + 1
			if origin == r || origin >= n || int(hops) > n {
				return fmt.Errorf("packet from %d: origin %d, %d hops", left, origin, hops)
			}
			if pseq == endSeq {
				ends++
			} else if sum := process(pkt[hdrLen:]); sum != binary.LittleEndian.Uint32(pkt[12:]) {
				return fmt.Errorf("record %d of rank %d: crc %08x, packet says %08x", pseq, origin, sum, binary.LittleEndian.Uint32(pkt[12:]))
			}
			next := rbuf
			if int(hops) < n { // not everywhere yet: pass it on
				binary.LittleEndian.PutUint32(pkt[8:], hops)
				if err := g.send(pkt); err != nil {
					return err
				}
				st.forwarded++
				next = g.buffer()
			}
			if ends < n {
				rbuf = next
				rreq = mpi.Irecv(c, rbuf, left, tagPkt)
				recvDone = rreq.Done()
			}
		}
	}
	for len(g.sends) > 0 {
		if err := g.reap(true); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)

	// Check collectively: every rank saw every record once.
	total, totalSum := make([]int64, 1), make([]uint64, 1)
	if err := mpi.Allreduce(c, []int64{st.own}, total, mpi.Sum); err != nil {
		return err
	}
	if err := mpi.Allreduce(c, []uint64{st.ownSum}, totalSum, mpi.Sum); err != nil {
		return err
	}
	ok := int64(0)
	if st.seen == total[0] && st.seenSum == totalSum[0] {
		ok = 1
	}
	// Per-rank table at rank 0; min/max over ranks of seen, bytes, ok.
	mine := []int64{st.own, st.seen, st.seenBytes, st.forwarded, int64(st.seenSum), elapsed.Microseconds()}
	var table []int64
	if r == 0 {
		table = make([]int64, n*len(mine))
	}
	if err := mpi.Gather(c, mine, table, 0); err != nil {
		return err
	}
	lo, hi := make([]int64, 3), make([]int64, 3)
	if err := mpi.Reduce(c, []int64{st.seen, st.seenBytes, ok}, lo, mpi.Min, 0); err != nil {
		return err
	}
	if err := mpi.Reduce(c, []int64{st.seen, st.seenBytes, ok}, hi, mpi.Max, 0); err != nil {
		return err
	}
	if r != 0 {
		return nil
	}
	if *verbose {
		for q := 0; q < n; q++ {
			t := table[q*len(mine):]
			fmt.Printf("ringpipe: rank %d: own %d, seen %d (%d B), forwarded %d packets, %v\n",
				q, t[0], t[1], t[2], t[3], time.Duration(t[5])*time.Microsecond)
		}
	}
	if lo[0] != hi[0] || lo[1] != hi[1] || lo[2] != 1 {
		return errors.New("ranks disagree: " + fmt.Sprint("seen ", lo[0], "..", hi[0], ", bytes ", lo[1], "..", hi[1], ", ok ", lo[2]))
	}
	fmt.Printf("ringpipe: %d ranks, %d records, %d bytes, checksum %016x, every rank saw every record: ok\n",
		n, total[0], lo[1], totalSum[0])
	return nil
}

// input reads this rank's file in chunks with IreadAt, two buffers in
// turn: next starts reading the following chunk, take (once done is
// closed) returns the complete records read so far and starts the next
// read into the other buffer before the caller processes them.
type input struct {
	f    *mpiio.File
	size int64
	off  int64
	bufs [2][]byte
	cur  int
	req  *mpi.Request
	done <-chan struct{} // the pending read's, or closed when input ended
	work []byte          // records being handed out; the tail of a partial one
}

func openInput(c *mpi.Comm) (*input, error) {
	// Every rank reads its own file: open it on a communicator of one.
	self, err := c.Split(c.Rank(), 0)
	if err != nil {
		return nil, err
	}
	f, err := mpiio.Open(context.Background(), self, fileOf(c.Rank()), mpiio.ModeRdonly, nil)
	if err != nil {
		return nil, err
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, err
	}
	cs := max(*chunkSz, *maxRec+4)
	return &input{f: f, size: size, bufs: [2][]byte{make([]byte, cs), make([]byte, cs)}}, nil
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (in *input) next() {
	if in.off >= in.size {
		in.req, in.done = nil, closedCh
		return
	}
	n := min(int64(len(in.bufs[in.cur])), in.size-in.off)
	in.req = in.f.IreadAt(in.bufs[in.cur][:n], in.off)
	in.done = in.req.Done()
	in.off += n
}

// take returns the records completed by the finished read (nil at the end
// of the input, after which done never fires again).
func (in *input) take() ([][]byte, error) {
	if in.req == nil {
		if len(in.work) > 0 {
			return nil, fmt.Errorf("%s: truncated record at the end (%d bytes left)", in.f.Path(), len(in.work))
		}
		in.done = nil
		return nil, nil
	}
	st, err := in.req.Wait(context.Background())
	if err != nil {
		return nil, err
	}
	// The records' bytes are copied out, so the buffer can take the read
	// after next; start the next read now, before the records are used.
	data := append(in.work, in.bufs[in.cur][:st.Bytes]...)
	in.cur ^= 1
	in.next()
	var recs [][]byte
	for len(data) >= 4 {
		k := int(binary.LittleEndian.Uint32(data))
		if k > *maxRec {
			return nil, fmt.Errorf("record of %d bytes (max %d)", k, *maxRec)
		}
		if len(data) < 4+k {
			break
		}
		recs = append(recs, data[4:4+k])
		data = data[4+k:]
	}
	in.work = append([]byte(nil), data...)
	if recs == nil {
		recs = [][]byte{} // not the end: just no complete record yet
	}
	return recs, nil
}
