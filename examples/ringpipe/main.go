// Command ringpipe streams every rank's records around a ring of ranks.
//
// Each rank reads length-prefixed records from its own file
// (<dir>/rank-<R>.dat) with double buffering: a reader goroutine fills one
// chunk buffer while the other is being processed. Every record, its own
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
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	mpi "github.com/gompi/gompi/runtime"
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

// chunk is one read buffer: whole records packed back to back.
type chunk struct {
	buf  []byte
	recs [][2]int // [start, end) of each record in buf
	err  error    // set on the last chunk if reading failed
}

// reader fills chunks from empty and hands them over on full; with two
// chunks it reads one while the caller processes the other. It closes
// full at the end of the file.
func reader(path string, empty <-chan *chunk, full chan<- *chunk) {
	defer close(full)
	f, err := os.Open(path)
	if err != nil {
		ch := <-empty
		ch.buf, ch.recs, ch.err = ch.buf[:0], ch.recs[:0], err
		full <- ch
		return
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	ch := <-empty
	ch.buf, ch.recs = ch.buf[:0], ch.recs[:0]
	var l [4]byte
	for {
		if _, err := io.ReadFull(r, l[:]); err != nil {
			if err != io.EOF {
				ch.err = fmt.Errorf("%s: %w", path, err)
			}
			break
		}
		k := int(binary.LittleEndian.Uint32(l[:]))
		if k > cap(ch.buf) || k > *maxRec {
			ch.err = fmt.Errorf("%s: record of %d bytes (max %d)", path, k, min(cap(ch.buf), *maxRec))
			break
		}
		if len(ch.buf)+k > cap(ch.buf) { // full: hand over, take the other
			full <- ch
			ch = <-empty
			ch.buf, ch.recs = ch.buf[:0], ch.recs[:0]
		}
		start := len(ch.buf)
		ch.buf = ch.buf[:start+k]
		if _, err := io.ReadFull(r, ch.buf[start:]); err != nil {
			ch.err = fmt.Errorf("%s: truncated record: %w", path, err)
			ch.buf = ch.buf[:start]
			break
		}
		ch.recs = append(ch.recs, [2]int{start, start + k})
	}
	full <- ch
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
	empty, full := make(chan *chunk, 2), make(chan *chunk)
	for i := 0; i < 2; i++ {
		empty <- &chunk{buf: make([]byte, 0, max(*chunkSz, *maxRec))}
	}
	go reader(fileOf(r), empty, full)

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
	input := (<-chan *chunk)(full)
	for ends < n {
		select {
		case ch, ok := <-input:
			if !ok { // own records exhausted: end packet
				input = nil
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
			if ch.err != nil {
				return ch.err
			}
			for _, b := range ch.recs {
				payload := ch.buf[b[0]:b[1]]
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
			empty <- ch
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
