package mpi

// Setting up shared memory between same-host peers: which ranks share a
// host, the per-job file names, the negotiation over the authenticated TCP
// connection, and cleanup. See docs/transport.md.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gompi/gompi/internal/shm"
)

// kvsHost is the KVS key prefix of a rank's host identity (see hostIdentity).
const kvsHost = "gompi-rt-host-"

// noShmHost is published by a rank that does not use shared memory, so
// that both sides of every pair reach the same decision.
const noShmHost = "-"

// hostIdentity names the shared-memory domain this process is in: same
// boot, same host name, same mount namespace (so the same /dev/shm) and the
// same user (the rendezvous files are 0600). Ranks with equal identities
// try shared memory; "" means unknown (no shared memory).
func hostIdentity() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	mnt, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return ""
	}
	host, _ := os.Hostname()
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", strings.TrimSpace(string(boot)), host, mnt, os.Getuid())
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// shmJobID is the job id used in rendezvous file names: $GOMPI_JOBID, else
// the PMI kvsname, plus a suffix derived from the job secret so that a
// stranger cannot predict (and squat) the names.
func shmJobID(boot Bootstrap, secret []byte) string {
	base := os.Getenv("GOMPI_JOBID")
	if base == "" {
		if k, ok := boot.(interface{ KVSName() string }); ok {
			base = k.KVSName()
		}
	}
	base = shm.JobBase(base)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("gompi-shm-job"))
	return base + "." + hex.EncodeToString(m.Sum(nil)[:8])
}

// hostOf returns a peer's published host identity (cached).
func (p *proc) hostOf(ctx context.Context, rank int) (string, error) {
	return p.lookup(ctx, p.hosts, kvsHost, rank)
}

// shmConnectTimeout bounds setting up one shm channel; on failure the pair
// falls back to TCP.
const shmConnectTimeout = 10 * time.Second

// negotiateShm runs, on both sides of a freshly authenticated connection,
// the decision and setup of a shm channel. Both sides see the same two
// host identities, so they agree on trying; both then call shm.Connect
// (the lower rank creates the file) and exchange one status byte over the
// authenticated connection, so they also agree on the outcome: shm is used
// only if both mapped the file. A stranger who squatted or opened the file
// makes one side fail, and the pair stays on TCP. It returns nil for TCP.
func (p *proc) negotiateShm(ctx context.Context, pe *peer, conn net.Conn) *shmLink {
	if p.shmJob == "" {
		return nil
	}
	if h, err := p.hostOf(ctx, pe.rank); err != nil || h != p.hostID {
		return nil
	}
	timeout := min(p.cfg.ConnectTimeout, shmConnectTimeout)
	conn.SetDeadline(time.Now().Add(timeout + time.Second))
	defer conn.SetDeadline(time.Time{})
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	theirs := make(chan byte, 1)
	go func() {
		var b [1]byte
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			b[0] = 0xff
		}
		if b[0] != 1 {
			cancel() // the peer failed: stop waiting for the file
		}
		theirs <- b[0]
	}()
	l := newShmLink(p, pe)
	ch, err := shm.Connect(cctx, p.shmJob, p.rank, pe.rank, &shm.Options{
		Dir: p.shmDir, RingSize: p.cfg.ShmRingSize, Spin: p.cfg.ShmSpin, Alive: l.alive})
	mine := byte(0)
	if err == nil {
		mine = 1
	}
	_, werr := conn.Write([]byte{mine})
	t := <-theirs
	if mine == 1 && t == 1 && werr == nil {
		l.ch = ch
		p.shm.links.Add(1)
		return l
	}
	if ch != nil {
		ch.Close()
	}
	l.cancel()
	return nil
}

// sweepShm removes rendezvous files of this job that name this rank (left
// by a peer that died while connecting). Other pairs may still be
// connecting, so their files are left to them and to the process manager.
func (p *proc) sweepShm() {
	if p.shmJob == "" {
		return
	}
	ents, err := os.ReadDir(p.shmDir)
	if err != nil {
		return
	}
	prefix := "gompi-" + p.shmJob + "-"
	me := strconv.Itoa(p.rank)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		a, b, ok := strings.Cut(rest, "-")
		if ok && (a == me || b == me) {
			os.Remove(filepath.Join(p.shmDir, e.Name()))
		}
	}
}
