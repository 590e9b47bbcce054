package mpi

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// Ranks listen inside a firewall's port range (MPICH's variables), and
// a bad range is an Init error naming the variable.
func TestListenPortRange(t *testing.T) {
	probe, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	lo := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	if lo > 65000 {
		lo = 41000
	}
	hi := lo + 15
	t.Setenv("MPIEXEC_PORT_RANGE", fmt.Sprintf("%d:%d", lo, hi))
	comms, _ := world(t, 4, nil)
	for _, c := range comms {
		if p := c.p.ln.Addr().(*net.TCPAddr).Port; p < lo || p > hi {
			t.Errorf("rank %d listens on %d, outside %d-%d", c.Rank(), p, lo, hi)
		}
	}
	each(t, comms, func(c *Comm) error { return ring(c) })

	t.Setenv("MPIEXEC_PORT_RANGE", "100:99")
	job := NewMemJob(2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = InitConfig(ctx, Config{Bootstrap: job.Rank(0), Host: "127.0.0.1"})
	if err == nil || !strings.Contains(err.Error(), "MPIEXEC_PORT_RANGE") {
		t.Fatalf("bad range: %v", err)
	}
}

// ring passes a token around every rank.
func ring(c *Comm) error {
	n, r := c.Size(), c.Rank()
	v := []int{r}
	if r == 0 {
		if err := Send(c, v, 1%n, 9); err != nil {
			return err
		}
		_, err := Recv(c, v, n-1, 9)
		return err
	}
	if _, err := Recv(c, v, r-1, 9); err != nil {
		return err
	}
	return Send(c, v, (r+1)%n, 9)
}
