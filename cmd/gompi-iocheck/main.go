// Command gompi-iocheck checks that a file system gives MPI-IO's guarantees
// to runtime/mpiio across hosts. Run it under gompiexec with ranks on
// several hosts and FILE on the shared file system to check:
//
//	gompiexec -hosts a:2,b:2 gompi-iocheck [-mode coll|atomic|shared] [-block N] [-blocks N] [-H key=value]... FILE
//
// Every rank writes a rank-stamped pattern into FILE, its blocks of -block
// bytes (default 3000: not a multiple of any page, so ranks of different
// hosts share pages) interleaved with everyone else's, twice: generation 1,
// which every rank then reads (so every client caches it), then generation
// 2. After the second write and Sync, rank r reads back, collectively, all
// that rank (r + ranks per host) mod P wrote (a rank on another host when
// there are several) and checks every byte. Rank 0 prints one line per
// failing rank, naming the first wrong file offset, the writer's rank and
// host and the reader's, or "ok", and the command exits 1 on any mismatch.
//
//	-mode coll    the writes are collective (WriteAtAll)
//	-mode atomic  independent writes (WriteAt) in atomic mode (SetAtomicity)
//	-mode shared  every rank appends -blocks records of -block bytes at the
//	              shared file pointer (WriteShared), all ranks at once; after
//	              Sync every rank reads the whole file and checks that each
//	              record is there once, whole, and each rank's in its order
//
// A host is named by its host name and first non-loopback IPv4 address
// (containers and network namespaces share host names).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gompi/gompi/internal/manpage"
	mpi "github.com/gompi/gompi/runtime"
	"github.com/gompi/gompi/runtime/mpiio"
)

type hintFlag mpiio.Hints

func (h hintFlag) String() string { return "" }
func (h hintFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: want key=value", s)
	}
	h[k] = v
	return nil
}

type config struct {
	mode          string
	block, blocks int
	hints         mpiio.Hints
	path          string
}

func main() {
	cfg := config{hints: mpiio.Hints{}}
	fs := flag.NewFlagSet("gompi-iocheck", flag.ContinueOnError)
	fs.StringVar(&cfg.mode, "mode", "coll", "coll (WriteAtAll), atomic (WriteAt with SetAtomicity) or shared (WriteShared)")
	fs.IntVar(&cfg.block, "block", 3000, "bytes per block")
	fs.IntVar(&cfg.blocks, "blocks", 64, "blocks per rank")
	fs.Var(hintFlag(cfg.hints), "H", "a hint key=value for Open (repeatable)")
	timeout := fs.Duration("timeout", 5*time.Minute, "limit for the whole check")
	if len(os.Args) == 3 && os.Args[1] == manpage.GenFlag {
		os.Exit(writeMan(os.Args[2], fs))
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := cfg.check(fs.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "gompi-iocheck:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	comm, err := mpi.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gompi-iocheck:", err)
		os.Exit(1)
	}
	ok, err := run(ctx, comm, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gompi-iocheck: rank %d: %v\n", comm.Rank(), err)
		comm.Abort(1)
		os.Exit(1)
	}
	if err := comm.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "gompi-iocheck:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func (c *config) check(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: gompi-iocheck [-mode coll|atomic|shared] [-block N] [-blocks N] [-H key=value]... FILE")
	}
	c.path = args[0]
	if c.mode != "coll" && c.mode != "atomic" && c.mode != "shared" {
		return fmt.Errorf("-mode %q: want coll, atomic or shared", c.mode)
	}
	if c.mode == "shared" && c.block < 16 {
		return fmt.Errorf("-block %d: shared records need at least 16 bytes", c.block)
	}
	if c.block < 1 || c.blocks < 1 {
		return fmt.Errorf("-block %d -blocks %d: both must be positive", c.block, c.blocks)
	}
	return nil
}

// stamp is the byte that rank q writes at position k of its view in
// generation gen.
func stamp(q, gen int, k int64) byte { return byte(int64(q)*41+int64(gen)*97+k*13+k>>9) | 1 }

// hostID names this host: host name and first non-loopback IPv4 address.
func hostID() string {
	name, _ := os.Hostname()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return name + "/" + ipn.IP.String()
		}
	}
	return name
}

func run(ctx context.Context, comm *mpi.Comm, cfg config) (bool, error) {
	r, p := comm.Rank(), comm.Size()
	hosts, err := mpi.AllgatherValue(comm, hostID())
	if err != nil {
		return false, err
	}
	if cfg.mode == "shared" {
		return runShared(ctx, comm, cfg, hosts)
	}
	perHost, nhosts := 0, map[string]bool{}
	for _, h := range hosts {
		nhosts[h] = true
		if h == hosts[0] {
			perHost++
		}
	}
	if len(nhosts) == 1 {
		perHost = 1 // one host: check a neighbour's bytes at least
	}
	q := (r + perHost) % p
	f, err := mpiio.Open(ctx, comm, cfg.path, mpiio.ModeCreate|mpiio.ModeRdwr, cfg.hints)
	if err != nil {
		return false, err
	}
	defer f.Close()
	ft, err := mpi.Vector(cfg.blocks, cfg.block, p*cfg.block, mpi.Byte)
	if err != nil {
		return false, err
	}
	if err := f.SetView(int64(r*cfg.block), mpi.Byte, ft); err != nil {
		return false, err
	}
	if cfg.mode == "atomic" {
		if err := f.SetAtomicity(true); err != nil {
			return false, err
		}
	}
	n := int64(cfg.blocks * cfg.block)
	buf := make([]byte, n)
	all := make([]byte, n*int64(p))
	for gen := 1; gen <= 2; gen++ {
		for k := range buf {
			buf[k] = stamp(r, gen, int64(k))
		}
		var got int
		if cfg.mode == "atomic" {
			got, err = f.WriteAt(buf, 0)
		} else {
			got, err = f.WriteAtAll(buf, 0)
		}
		if err == nil && int64(got) != n {
			err = fmt.Errorf("%s: wrote %d of %d bytes", cfg.path, got, n)
		}
		if err != nil {
			return false, err
		}
		if err := f.Sync(); err != nil {
			return false, err
		}
		if gen == 1 {
			// Every rank reads the whole file, so every client caches
			// generation 1 before generation 2 is written.
			if err := f.SetView(0, mpi.Byte, mpi.Byte); err != nil {
				return false, err
			}
			if _, err := f.ReadAt(all, 0); err != nil {
				return false, err
			}
			if err := f.SetView(int64(r*cfg.block), mpi.Byte, ft); err != nil {
				return false, err
			}
		}
	}
	// Read what q wrote, through q's view.
	if err := f.SetView(int64(q*cfg.block), mpi.Byte, ft); err != nil {
		return false, err
	}
	got, err := f.ReadAtAll(buf, 0)
	if err != nil {
		return false, err
	}
	var report string
	if int64(got) != n {
		report = fmt.Sprintf("rank %d on %s read %d of the %d bytes rank %d on %s wrote", r, hosts[r], got, n, q, hosts[q])
	}
	bad := 0
	for k := int64(0); k < int64(got); k++ {
		if want := stamp(q, 2, k); buf[k] != want {
			if bad == 0 {
				off := int64(q*cfg.block) + k/int64(cfg.block)*int64(p*cfg.block) + k%int64(cfg.block)
				old := ""
				if buf[k] == stamp(q, 1, k) {
					old = " (generation 1: a stale cache)"
				}
				report = fmt.Sprintf("mismatch at file offset %d: written by rank %d on %s, read by rank %d on %s: %d, want %d%s",
					off, q, hosts[q], r, hosts[r], buf[k], want, old)
			}
			bad++
		}
	}
	if bad > 1 {
		report += fmt.Sprintf("; %d of %d bytes wrong", bad, n)
	}
	naggs := len(f.Aggregators())
	if err := f.Close(); err != nil {
		return false, err
	}
	oks, err := verdict(comm, report)
	if err != nil {
		return false, err
	}
	if r == 0 {
		if oks {
			by := "a rank on another host"
			switch {
			case p == 1:
				by = "the writer itself (one rank only)"
			case len(nhosts) == 1:
				by = "another rank (one host only)"
			}
			fmt.Printf("gompi-iocheck: ok: %d ranks on %d hosts wrote %d bytes to %s (%s); every byte verified by %s; %d aggregators\n",
				p, len(nhosts), n*int64(p), cfg.path, cfg.mode, by, naggs)
		}
	}
	return oks, nil
}

// verdict (collective): rank 0 prints every rank's report of what it found
// wrong; true when no rank found anything.
func verdict(comm *mpi.Comm, report string) (bool, error) {
	reports, err := mpi.GatherValue(comm, report, 0)
	if err != nil {
		return false, err
	}
	oks, err := mpi.AllreduceValue(comm, report == "", func(a, b bool) bool { return a && b })
	if err != nil {
		return false, err
	}
	for _, s := range reports { // rank 0's only
		if s != "" {
			fmt.Println("gompi-iocheck:", s)
		}
	}
	return oks, nil
}
