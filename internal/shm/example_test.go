//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gompi/gompi/internal/shm"
)

// Two ranks of job "example" on one host. In a real job each side runs in
// its own process; here they are goroutines.
func Example() {
	dir, _ := os.MkdirTemp("", "shm-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opt := &shm.Options{
		Dir:   dir,
		Alive: func() error { return nil }, // e.g. check the control connection
	}

	done := make(chan struct{})
	go func() { // rank 1: echo one message back
		defer close(done)
		c, err := shm.Connect(ctx, "example", 1, 0, opt)
		if err != nil {
			panic(err)
		}
		defer c.Close()
		m, _ := c.RecvBytes(ctx)
		c.Send(ctx, []byte("echo: "), m)
	}()

	c, err := shm.Connect(ctx, "example", 0, 1, opt)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	envelope, payload := []byte("tag=7 "), []byte("hello")
	c.Send(ctx, envelope, payload) // sent as one message, no joining copy
	buf := make([]byte, 64)
	n, err := c.Recv(ctx, func(n int) []byte { return buf[:min(n, len(buf))] })
	fmt.Println(string(buf[:n]), err)
	<-done
	// Output: echo: tag=7 hello <nil>
}
